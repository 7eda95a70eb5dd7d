#!/usr/bin/python3
"""report_check.py: checks a bfpatch report page as headless Chromium left it
(--dump-dom) against numbers computed here, independently of report.c:
`bfpatch info --json` of each patch, counts from the checkpoints with numpy,
and the event-log fixtures read with json.

usage: report_check.py full DOM TRAJ FIXTURES VERSION INFO.json...
       report_check.py alone DOM INFO.json
Prints one line per check; exits 1 if any fails.
"""
import glob
import json
import os
import struct
import sys
from html.parser import HTMLParser

import numpy as np

fails = 0


def check(name, ok, detail=""):
    global fails
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else "  " + str(detail)))
    if not ok:
        fails += 1


def close(a, b, rel=1e-9, abs_=0.0):
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


class Dom(HTMLParser):
    """Every element as (tag, attrs, text, section id, enclosing svg index)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.els, self.stack, self.section, self.svg, self.row = [], [], None, -1, None
        self.svgs = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id")
        if tag == "svg":
            self.svgs.append((self.section, a))
            self.svg = len(self.svgs) - 1
        el = {"tag": tag, "a": a, "text": "", "section": self.section, "svg": self.svg,
              "i": len(self.els), "row": self.row}
        if tag == "tr":
            self.row = a.get("data-version")
            el["row"] = self.row
        self.els.append(el)
        if tag not in ("meta", "br", "img", "input", "link"):
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.stack and self.stack[-1]["tag"] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = -1
        while self.stack:
            el = self.stack.pop()
            if el["tag"] == tag:
                break

    def handle_data(self, data):
        for el in self.stack:
            el["text"] += data


def load_dom(path):
    d = Dom()
    d.feed(open(path, encoding="utf-8").read())
    return d


def sections(d):
    return {e["a"]["id"]: e for e in d.els if e["tag"] == "section"}


def summary_cells(d, version):
    return {e["a"]["data-k"]: e for e in d.els
            if e["tag"] == "td" and "data-k" in e["a"] and e["section"] == "summary"
            and e["row"] == str(version)}


def check_patch_numbers(d, infos):
    """Summary rows and packaging bars against bfpatch info --json."""
    for info in infos:
        v = info["target_version"]
        cells = summary_cells(d, v)
        for k in ("params", "changed", "frames", "bytes"):
            got = cells.get(k, {}).get("a", {}).get("data-v")
            check(f"summary v{v} {k} = info {info[k]}", got is not None and int(got) == info[k], got)
        got = float(cells["changed_fraction"]["a"]["data-v"])
        check(f"summary v{v} changed fraction = info changed/params",
              close(got, info["changed"] / info["params"]), got)
        # info prints 6 significant digits
        for k in ("bits_per_changed", "ratio_to_dense"):
            got = float(cells[k]["a"]["data-v"])
            check(f"summary v{v} {k} = info {info[k]}", close(got, info[k], 1e-5), got)
        parts = {e["a"]["data-part"]: float(e["a"]["data-bytes"]) for e in d.els
                 if e["tag"] == "rect" and e["a"].get("data-version") == str(v)
                 and "data-part" in e["a"]}
        check(f"budget v{v} parts sum to the patch's bytes",
              close(sum(parts.values()), info["bytes"]), parts)
        check(f"budget v{v} headers + checksums = info header_bytes",
              close(parts["headers"] + parts["checksums"], info["header_bytes"]), parts)
        for part, key in (("code_params", "model_bits"), ("positions", "position_bits"),
                          ("values", "value_bits")):
            check(f"budget v{v} {part} = info {key} / 8", close(parts[part] * 8, info[key]),
                  (parts[part], info[key]))


def check_refresh(d, info):
    links = {}
    for e in d.els:
        a = e["a"]
        if e["tag"] == "circle" and "data-point" in a:
            links[(a["data-point"], a["data-size"], float(a["data-link"]))] = float(a["data-s"])
    check("refresh chart has points", len(links) > 0)
    wire = info["bytes"] + 42 * info["frames"]
    for (kind, size, link), secs in links.items():
        n = info["params"] if size == "measured" else float(size[:-1]) * 1e9
        want = (2 * n if kind == "dense" else wire / info["params"] * n) * 8 / link
        if not close(secs, want, 1e-9):
            check(f"refresh {kind} {size} at {link:g} bit/s", False, (secs, want))
            return
    check("refresh points = bytes * 8 / rate (dense 2 B/param; sparse patch + 42 B/frame, "
          "scaled per parameter)", True)


def load_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack_from("<Q", raw)[0]
    hdr = json.loads(raw[8:8 + n])
    data = np.frombuffer(raw[8 + n:], dtype="<u2")
    tensors = sorted(((k, v) for k, v in hdr.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"][0])
    return tensors, data


def key(x):
    x = x.astype(np.int64)
    return np.where(x & 0x8000, x ^ 0xFFFF, x | 0x8000)


def check_heatmap(d, traj, v, info):
    tensors, a = load_st(os.path.join(traj, "step-%04d.safetensors" % (v - 1)))
    _, b = load_st(os.path.join(traj, "step-%04d.safetensors" % v))
    rows = {e["a"]["data-tensor"]: e["a"] for e in d.els
            if e["tag"] == "tr" and "data-tensor" in e["a"]}
    check("heatmap table has a row per tensor", len(rows) == len(tensors), (len(rows), len(tensors)))
    bad = []
    total = 0
    for name, t in tensors:
        w0, w1 = t["data_offsets"][0] // 2, (t["data_offsets"][1] + 1) // 2
        x, y = a[w0:w1], b[w0:w1]
        ch = x != y
        total += int(ch.sum())
        dlt = (key(y[ch]) - key(x[ch])) & 0xFFFF
        dlt = np.where(dlt >= 0x8000, dlt - 0x10000, dlt)
        # bins: <=-9, -5..-8, -3..-4, -2, -1, +1, +2, +3..+4, +5..+8, >=+9
        cnt = [int(((dlt <= -9)).sum()), int(((dlt >= -8) & (dlt <= -5)).sum()),
               int(((dlt >= -4) & (dlt <= -3)).sum()), int((dlt == -2).sum()),
               int((dlt == -1).sum()), int((dlt == 1).sum()), int((dlt == 2).sum()),
               int(((dlt >= 3) & (dlt <= 4)).sum()), int(((dlt >= 5) & (dlt <= 8)).sum()),
               int((dlt >= 9).sum())]
        r = rows.get(name)
        if (r is None or int(r["data-changed"]) != int(ch.sum())
                or int(r["data-params"]) != w1 - w0
                or [int(c) for c in r["data-ulp"].split(",")] != cnt):
            bad.append((name, r, int(ch.sum()), cnt))
    check("heatmap per-tensor changed counts and ULP bins = numpy on the checkpoints",
          not bad, bad[:2])
    check(f"heatmap total changed (numpy {total}) = info changed {info['changed']}",
          total == info["changed"])
    cells = [e for e in d.els if e["tag"] == "rect" and "data-frac" in e["a"]]
    check("heatmap has coloured blocks", len(cells) >= len(tensors), len(cells))


def load_fixtures(fdir):
    evs = []
    for p in sorted(glob.glob(os.path.join(fdir, "*.jsonl"))):
        for line in open(p):
            if line.strip():
                evs.append(json.loads(line))
    return evs


def check_logs(d, fdir, v):
    evs = load_fixtures(fdir)
    enc = min(e["t"] for e in evs if e["ev"] == "encode_begin" and e.get("version") == v)
    commits = {e["id"]: e["t"] for e in evs
               if e["src"] == "shim" and e["ev"] == "commit" and e.get("version") == v}
    want = max(commits.values()) - enc
    p = [e for e in d.els if e["a"].get("id") == "publish-to-last-commit"]
    check(f"timeline publish-to-last-commit = max(commit.t) - encode_begin.t = {want:.6f} s",
          p and close(float(p[0]["a"]["data-s"]), want, 1e-9), p and p[0]["a"])
    cells = summary_cells(d, v)
    got = cells.get("publish_to_last_commit_s", {}).get("a", {}).get("data-v")
    check("summary publish-to-last-commit equals it", got and close(float(got), want, 1e-9), got)
    bars = {(e["a"]["data-actor"], e["a"]["data-stage"]): e["a"] for e in d.els
            if e["tag"] == "rect" and "data-stage" in e["a"]}
    spans = {"stage": ("first_frame", "staged"), "wait": ("staged", "apply_begin"),
             "apply_verify": ("apply_begin", "apply_end"), "commit": ("apply_end", "commit")}
    bad = []
    for sid in commits:
        t = {e["ev"]: e["t"] for e in evs if e["id"] == sid and e.get("version") == v}
        for stage, (a, b) in spans.items():
            r = bars.get((sid, stage))
            if (r is None or not close(float(r["data-t0"]), t[a] - enc, 1e-9)
                    or not close(float(r["data-t1"]), t[b] - enc, 1e-9)):
                bad.append((sid, stage, r))
    pub = {e["ev"]: e["t"] for e in evs if e["src"] == "publish" and e.get("version") == v}
    for stage, (a, b) in {"encode": ("encode_begin", "encode_end"),
                          "wire": ("first_frame", "send_end")}.items():
        r = bars.get(("trainer", stage))
        if (r is None or not close(float(r["data-t0"]), pub[a] - enc, 1e-9)
                or not close(float(r["data-t1"]), pub[b] - enc, 1e-9)):
            bad.append(("trainer", stage, r))
    check("timeline bars span the logged stage events of every process", not bad, bad[:2])
    nodes = {e["a"]["data-node"]: e["a"] for e in d.els if e["tag"] == "g" and "data-node" in e["a"]}
    for sid, t in commits.items():
        n = nodes.get(sid, {})
        nack = sum(e.get("frames", 0) for e in evs
                   if e["id"] == sid and e["ev"] == "nack" and e.get("version") == v)
        check(f"topology {sid}: lag = commit - encode_begin, NACKed frames = {nack}",
              n and close(float(n["data-lag-s"]), t - enc, 1e-9) and int(n["data-nack-frames"]) == nack, n)
    stats = [e for e in evs if e["src"] == "publish" and e["ev"] == "stats"][0]
    n = nodes.get("trainer", {})
    check("topology publisher counters = its stats event",
          n and int(n["data-frames"]) == stats["frames"] and int(n["data-resent"]) == stats["resent"], n)
    rstats = [e for e in evs if e["src"] == "relay" and e["ev"] == "stats"][0]
    n = nodes.get(rstats["id"], {})
    check("topology relay counters = its stats event",
          n and int(n["data-rx"]) == rstats["rx"] and int(n["data-tx"]) == rstats["tx"], n)
    # a subscriber address is the node of the process whose start event
    # gives it as addr (docs/EVENTS.md), else a node of its own; each
    # subscriber event is an edge from its logger to that node
    addrs = {a["data-addr"]: n for n, a in nodes.items() if "data-addr" in a}
    peers = {e["peer"] for e in evs if e["ev"] == "subscriber"}
    check("topology shows every subscriber address", peers <= set(nodes) | set(addrs),
          peers - set(nodes) - set(addrs))
    edges = {(e["a"]["data-edge-from"], e["a"]["data-edge-to"]) for e in d.els
             if e["tag"] == "g" and "data-edge-from" in e["a"]}
    want = {(e["id"], addrs.get(e["peer"], e["peer"])) for e in evs
            if e["ev"] == "subscriber" and e["src"] != "shim"}
    check("topology links each subscriber event's logger to the node of its peer, "
          "the relay by the addr of its start event", want <= edges, want - edges)
    text = " ".join(e["text"] for e in d.els if e["tag"] == "text" and e["section"] == "topology")
    check("topology shows no JOIN marker as a version (v4294967295, v4294967294)",
          "v429496729" not in text)


def check_rendered(d, want_ok):
    secs = sections(d)
    for s in ("summary", "heatmap", "budget", "refresh", "timeline", "topology"):
        status = secs.get(s, {}).get("a", {}).get("data-status")
        check(f"section {s} present, {'drawn' if s in want_ok else 'says what is missing'}",
              status == ("ok" if s in want_ok else "missing"), status)
        if s not in want_ok:
            miss = [e for e in d.els if e["section"] == s and e["tag"] == "p"
                    and "missing" in e["a"].get("class", "")]
            check(f"section {s} names its missing input", miss and "needs" in miss[0]["text"],
                  miss and miss[0]["text"])
    for sec, a in d.svgs:
        drawn = int(a.get("data-drawn", "0"))
        check(f"chart {a.get('id')} ({sec}) rendered by the browser with marks ({drawn})",
              drawn > 0 and sec in want_ok)


def main():
    mode = sys.argv[1]
    d = load_dom(sys.argv[2])
    if mode == "full":
        traj, fdir, v = sys.argv[3], sys.argv[4], int(sys.argv[5])
        infos = [json.load(open(p)) for p in sys.argv[6:]]
        check_rendered(d, {"summary", "heatmap", "budget", "refresh", "timeline", "topology"})
        check_patch_numbers(d, infos)
        info = [i for i in infos if i["target_version"] == v][0]
        check_refresh(d, info)
        check_heatmap(d, traj, v, info)
        check_logs(d, fdir, v)
    else:
        infos = [json.load(open(p)) for p in sys.argv[3:]]
        check_rendered(d, {"summary", "budget", "refresh"})
        check_patch_numbers(d, infos)
        check_refresh(d, infos[-1])
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
