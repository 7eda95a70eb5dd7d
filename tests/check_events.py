"""check_events.py EVENTS.jsonl STEPS [relay]: the event log of a demo
run follows docs/EVENTS.md: every line is a JSON object with t, src, id
and ev; the publisher logged encode_begin, encode_end and send_end for
every version 1..STEPS, each of the 3 actors logged first_frame, staged,
apply_begin, apply_end and commit for each, in time order, and (with
"relay") the relay logged the first frame of each version; times of one
version run forward from encode_begin to every commit."""
import json
import sys

path, steps = sys.argv[1], int(sys.argv[2])
want_relay = len(sys.argv) > 3 and sys.argv[3] == "relay"
ev = {}
n = 0
for line in open(path):
    o = json.loads(line)
    for k, t in (("t", float), ("src", str), ("id", str), ("ev", str)):
        assert isinstance(o.get(k), (t, int) if t is float else t), (k, line)
    ev.setdefault((o["src"], o["id"], o["ev"], o.get("version")), []).append(o)
    n += 1
actors = sorted({k[1] for k in ev if k[0] == "shim"})
assert actors == ["actor1", "actor2", "actor3"], actors
for v in range(1, steps + 1):
    t0 = ev[("publish", "publish", "encode_begin", v)][0]["t"]
    enc = ev[("publish", "publish", "encode_end", v)][0]
    assert enc["frames"] > 0 and enc["bytes"] > 0 and 0 < enc["changed"] < enc["params"], enc
    assert ev[("publish", "publish", "send_end", v)][0]["t"] >= enc["t"] >= t0
    if want_relay:
        assert ev[("relay", "relay", "first_frame", v)][0]["t"] >= t0
    for a in actors:
        seq = [ev[("shim", a, e, v)][0] for e in
               ("first_frame", "staged", "apply_begin", "apply_end", "commit")]
        ts = [o["t"] for o in seq]
        assert ts == sorted(ts) and ts[0] >= t0, (a, v, ts)
        assert seq[1]["frames"] == enc["frames"] and seq[1]["bytes"] == enc["bytes"], (a, v)
        assert seq[3]["verified_bytes"] == 2 * enc["params"], (a, v)
print("events: %d lines; %d versions, each encoded, sent%s, staged, applied, verified and "
      "committed by %d actors in time order" % (n, steps, ", relayed" if want_relay else "",
                                                len(actors)))
