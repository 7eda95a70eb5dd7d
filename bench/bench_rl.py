#!/usr/bin/python3
"""bench_rl.py: the RL weight-refresh benchmark's driver (bench_rl.sh makes
the network namespaces and runs it in the trainer's).

    bench_rl.py run --build B --dir T --versions N --layers L ...
    bench_rl.py actor MODE ...       (started by run, in an actor namespace)
    bench_rl.py gloo-actor ...       (likewise)

The trainer is a randomly initialised GPT (tests/torch_actor/model.py)
with FP32 master weights and Adam at lr 1e-6 on random tokens; after 2
warm-up steps (Adam's first step moves every weight by lr exactly, which
later steps do not) its BF16 cast is version 0, and N more steps give
versions 1..N, all made before anything is timed and kept in memory. Each way of refreshing the actors then runs on the same
versions, each from a fresh start at version 0:

  changes   bfpatch.Publisher.publish -> bfpatch publish --buffer -> shims
            (--commit safe-point) -> each actor's safe point, then the
            change lists scattered into its torch tensors (apply_changes)
  dense     torch.distributed broadcast (gloo) of every tensor of the
            state_dict from the trainer (rank 0) into the actors' tensors
  copy      bfpatch as in changes, then every tensor copied from the
            weight buffer into the actor's tensors (load_weights style)
  changes2  changes with the model split by tensor name between two
            trainer ranks, each with its Publisher(owned=) and its rank
            publisher, joined by a lead publisher

Each version is timed from the trainer's publish (or first broadcast)
call to the moment the last actor's tensors hold it; stages come from the
processes' event logs (docs/EVENTS.md) and the actors' own lines. At the
end of each way every actor's tensors are hashed (sha256) and compared
with the trainer's last version.
"""
import argparse
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
GLOO_TIMEOUT = datetime.timedelta(seconds=300)  # a rank that died fails the others
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch_actor"))


def log_event(path, **kv):
    """One JSON line appended with one write (O_APPEND): the processes of
    a run share the file."""
    kv = dict(t=time.time(), **kv)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(kv) + "\n").encode())
    finally:
        os.close(fd)


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def tensors_sha(named):
    h = hashlib.sha256()
    for _, t in named:
        h.update(t.contiguous().view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def empty_tensors(shapes):
    return {n: torch.empty(s, dtype=torch.bfloat16) for n, s in shapes}


# ---------------------------------------------------------------- actors

def actor_main(a):
    """One actor: its own BF16 tensors, refreshed from a shim's buffer."""
    from bfpatch import WeightBuffer
    torch.set_num_threads(1)
    shapes = json.load(open(a.shapes))
    mine = empty_tensors(shapes)
    end = time.monotonic() + a.timeout
    while not os.path.exists(a.buffer):
        if time.monotonic() > end:
            sys.exit("%s: no buffer %s" % (a.name, a.buffer))
        time.sleep(0.05)
    buf = WeightBuffer(a.buffer)
    held = buf.safe_point(timeout=a.timeout)
    with torch.no_grad():
        for n, t in buf.named_tensors():
            mine[n].copy_(t)
    log_event(a.events, src="actor", id=a.name, ev="loaded", version=held)
    while held < a.versions:
        if time.monotonic() > end:
            sys.exit("%s: at version %d after %gs" % (a.name, held, a.timeout))
        if buf.staged <= held and buf.version <= held:
            time.sleep(0.002)
            continue
        v = buf.safe_point(timeout=a.timeout)
        if v == held:
            continue
        t0, c0 = time.time(), time.process_time()
        if a.mode == "changes":
            got = buf.apply_changes(mine, since=held)
            assert got == v, (got, v)
        else:  # copy: every tensor, as load_weights(named_tensors()) does
            with torch.no_grad():
                for n, t in buf.named_tensors():
                    mine[n].copy_(t)
        t1, c1 = time.time(), time.process_time()
        log_event(a.events, src="actor", id=a.name, ev="torch_begin", version=v, t_=t0)
        log_event(a.events, src="actor", id=a.name, ev="torch_end", version=v, t_=t1,
                  cpu=c1 - c0)
        held = v
    log_event(a.events, src="actor", id=a.name, ev="sha", version=held,
              sha=tensors_sha((n, mine[n]) for n, _ in shapes))


def gloo_actor_main(a):
    import torch.distributed as dist
    torch.set_num_threads(1)
    shapes = json.load(open(a.shapes))
    mine = empty_tensors(shapes)
    # gloo in torch 1.13 takes neither bfloat16 nor int16: the bytes as uint8
    ints = [mine[n].view(torch.uint8) for n, _ in shapes]
    dist.init_process_group("gloo", init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.world, timeout=GLOO_TIMEOUT)
    for v in range(1, a.versions + 1):
        dist.barrier()
        t0 = time.time()
        for t in ints:
            dist.broadcast(t, src=0)
        t1 = time.time()
        log_event(a.events, src="actor", id=a.name, ev="torch_begin", version=v, t_=t0)
        log_event(a.events, src="actor", id=a.name, ev="torch_end", version=v, t_=t1)
    dist.barrier()
    log_event(a.events, src="actor", id=a.name, ev="sha", version=a.versions,
              sha=tensors_sha((n, mine[n]) for n, _ in shapes))
    dist.destroy_process_group()


# --------------------------------------------------------------- trainer

class Run:
    def __init__(self, a):
        self.a = a
        self.procs = []
        self.env = dict(os.environ)

    def spawn(self, argv, log, ns=None):
        if ns:
            argv = ["ip", "netns", "exec", ns] + argv
        p = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                             env=self.env)
        self.procs.append((p, log))
        return p

    def stop(self):
        for p, _ in self.procs:
            if p.poll() is None:
                p.terminate()
        for p, _ in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def check_alive(self):
        for p, log in self.procs:
            if p.poll() not in (None, 0):
                sys.stderr.write(open(log).read()[-3000:])
                raise SystemExit("bench_rl: %s ended with %d" % (" ".join(p.args[:6]),
                                                                p.returncode))

    def wait_for(self, what, cond, timeout=600):
        end = time.monotonic() + timeout
        while not cond():
            self.check_alive()
            if time.monotonic() > end:
                raise SystemExit("bench_rl: timed out waiting for %s" % what)
            time.sleep(0.02)


def make_versions(a):
    from model import Trainer
    torch.set_num_threads(os.cpu_count() or 1)
    shape = dict(layers=a.layers, d=a.width, heads=a.width // 64, ff=4 * a.width, ctx=64,
                 vocab=a.vocab)
    t0 = time.time()
    tr = Trainer(seed=7, lr=a.lr, **shape)
    for _ in range(a.warmup):  # Adam's moments past their first steps, as mid-run
        tr.step(batch=1, tokens=32)
    snaps = [{n: p.detach().view(torch.int16).clone() for n, p in tr.state().items()}]
    n = sum(t.numel() for t in snaps[0].values())
    print("model: GPT %s, %d parameters (%.1f M) in %d tensors, BF16 %.1f MB; made and %d "
          "warm-up steps in %.1f s" % (shape, n, n / 1e6, len(snaps[0]), 2 * n / 1e6,
                                       a.warmup, time.time() - t0), flush=True)
    changed = []
    for v in range(1, a.versions + 1):
        t0 = time.time()
        tr.step(batch=1, tokens=32)
        s = {k: p.detach().view(torch.int16).clone() for k, p in tr.state().items()}
        c = sum(int((s[k] != snaps[-1][k]).sum()) for k in s)
        changed.append(c / n)
        snaps.append(s)
        print("version %d: one Adam step (lr %g) in %.1f s; %.3f%% of the BF16 values changed"
              % (v, a.lr, time.time() - t0, 100.0 * c / n), flush=True)
    del tr
    return snaps, n, changed


def bf16(snap):
    return {k: t.view(torch.bfloat16) for k, t in snap.items()}


def run_bfpatch(a, R, snaps, mode, ranks):
    """One way through bfpatch: mode changes or copy, 1 or 2 trainer ranks."""
    import bfpatch
    tag = "%s%s" % (mode, ranks if ranks > 1 else "")
    ev = os.path.join(a.dir, tag + ".jsonl")
    names = list(snaps[0])
    pubs, bufs = [], []
    for r in range(ranks):
        path = "%s.%s.t%d" % (a.shm, tag, r)
        bufs.append(path)
        if ranks == 1:
            pubs.append(bfpatch.Publisher(path, bf16(snaps[0])))
        else:
            mine = names[r * len(names) // ranks:(r + 1) * len(names) // ranks]
            pubs.append(bfpatch.Publisher(path, bf16(snaps[0]), owned=mine))
            pubs[-1].owned_names = mine
    ckpt = os.path.join(a.dir, "step-0000.safetensors")
    if not os.path.exists(ckpt):
        pubs[0].save_safetensors(ckpt)
    K = ["--key", a.key]
    listen = "%s:7401" % a.trainer_addr
    common = ["--listen", listen, "--rate", a.rate, "--wait-subscribers", str(len(a.actor_ns)),
              "--steps", str(a.versions), "--linger", "2", "--events", ev]
    if ranks == 1:
        R.spawn([a.bfp, "publish"] + K + ["--buffer", bufs[0]] + common,
                os.path.join(a.dir, tag + "-publish.log"))
    else:
        lead = "%s:7402" % a.trainer_addr
        R.spawn([a.bfp, "publish"] + K + ["--ranks", str(ranks), "--rank-listen", lead,
                                          "--init", ckpt] + common,
                os.path.join(a.dir, tag + "-lead.log"))
        time.sleep(0.5)
        for r in range(ranks):
            R.spawn([a.bfp, "publish"] + K + ["--buffer", bufs[r], "--lead", lead, "--rank",
                                              str(r), "--events", ev, "--name", "rank%d" % r],
                    os.path.join(a.dir, "%s-rank%d.log" % (tag, r)))
    for i, ns in enumerate(a.actor_ns):
        name = "actor%d" % (i + 1)
        buf = "%s.%s.a%d" % (a.shm, tag, i + 1)
        R.spawn([a.shim] + K + ["--buffer", buf, "--init", ckpt, "--upstream", listen,
                                "--listen", "%s:7500" % a.actor_addr[i], "--rate", "1g",
                                "--commit", "safe-point", "--events", ev, "--name", name],
                os.path.join(a.dir, "%s-shim%d.log" % (tag, i + 1)), ns)
        R.spawn([sys.executable, os.path.abspath(__file__), "actor", mode, "--buffer", buf,
                 "--shapes", a.shapes, "--events", ev, "--name", name,
                 "--versions", str(a.versions)],
                os.path.join(a.dir, "%s-actor%d.log" % (tag, i + 1)), ns)
    nact = len(a.actor_ns)

    def count(evname, v):
        return sum(1 for e in read_events(ev)
                   if e.get("src") == "actor" and e["ev"] == evname and e.get("version") == v)

    R.wait_for("%s: the actors to load version 0" % tag, lambda: count("loaded", 0) == nact)
    R.wait_for("%s: the publisher to see every shim" % tag, lambda: sum(
        1 for e in read_events(ev) if e.get("ev") == "subscriber") >= nact)
    for v in range(1, a.versions + 1):
        time.sleep(a.settle)
        t0 = time.time()
        if ranks == 1:
            pubs[0].publish(bf16(snaps[v]), version=v)
        else:
            def one(p):
                p.publish({k: snaps[v][k].view(torch.bfloat16) for k in p.owned_names},
                          version=v)
            th = [threading.Thread(target=one, args=(p,)) for p in pubs]
            for t in th:
                t.start()
            for t in th:
                t.join()
        t1 = time.time()
        log_event(ev, src="trainer", id="trainer", ev="publish_begin", version=v, t_=t0)
        log_event(ev, src="trainer", id="trainer", ev="publish_end", version=v, t_=t1)
        R.wait_for("%s: version %d on every actor" % (tag, v),
                   lambda: count("torch_end", v) == nact)
        print("  %s: version %d on all %d actors, %.3f s after publish()"
              % (tag, v, nact, time.time() - t0), flush=True)
    R.wait_for("%s: the actors' hashes" % tag, lambda: count("sha", a.versions) == nact)
    R.stop()
    for p in pubs:
        p.close()
    for path in bufs + ["%s.%s.a%d" % (a.shm, tag, i + 1) for i in range(nact)]:
        for x in (path, path + ".owned"):
            if os.path.exists(x):
                os.unlink(x)
        shutil.rmtree(path + ".changes", ignore_errors=True)
    return ev


def run_dense(a, R, snaps):
    import torch.distributed as dist
    ev = os.path.join(a.dir, "dense.jsonl")
    master = "%s:29500" % a.trainer_addr
    world = len(a.actor_ns) + 1
    for i, ns in enumerate(a.actor_ns):
        R.spawn(["env", "GLOO_SOCKET_IFNAME=eth0", sys.executable, os.path.abspath(__file__),
                 "gloo-actor", "--rank", str(i + 1), "--world", str(world), "--master", master,
                 "--shapes", a.shapes, "--events", ev, "--name", "actor%d" % (i + 1),
                 "--versions", str(a.versions)],
                os.path.join(a.dir, "dense-actor%d.log" % (i + 1)), ns)
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
    dist.init_process_group("gloo", init_method="tcp://" + master, rank=0, world_size=world,
                            timeout=GLOO_TIMEOUT)
    names = list(snaps[0])
    for v in range(1, a.versions + 1):
        src = [snaps[v][n].view(torch.uint8) for n in names]
        dist.barrier()
        time.sleep(a.settle)
        t0 = time.time()
        for t in src:
            dist.broadcast(t, src=0)
        t1 = time.time()
        log_event(ev, src="trainer", id="trainer", ev="publish_begin", version=v, t_=t0)
        log_event(ev, src="trainer", id="trainer", ev="publish_end", version=v, t_=t1)
        print("  dense: version %d broadcast, %.3f s on the trainer" % (v, t1 - t0), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    R.wait_for("dense: the actors' hashes", lambda: sum(
        1 for e in read_events(ev) if e["ev"] == "sha") == len(a.actor_ns))
    R.stop()
    return ev


def stages(path, versions, nact):
    """Per version: dict of stage -> seconds, from one run's events."""
    evs = read_events(path)
    by = {}
    for e in evs:
        t = e.get("t_", e["t"])
        by.setdefault((e["src"], e["id"], e["ev"], e.get("version")), []).append((t, e))
    actors = sorted({k[1] for k in by if k[0] == "actor"})
    shims = sorted({k[1] for k in by if k[0] == "shim"})
    pubs = sorted({k[1] for k in by if k[0] == "publish"})
    rows = []
    for v in range(1, versions + 1):
        g = lambda *k: by[k][0][0]  # noqa: E731
        r = {}
        p0, p1 = g("trainer", "trainer", "publish_begin", v), g("trainer", "trainer",
                                                                 "publish_end", v)
        end = max(g("actor", x, "torch_end", v) for x in actors)
        r["total"] = end - p0
        r["publish"] = p1 - p0
        r["torch"] = max(g("actor", x, "torch_end", v) - g("actor", x, "torch_begin", v)
                         for x in actors)
        r["torch_cpu"] = max(by[("actor", x, "torch_end", v)][0][1].get("cpu", 0.0)
                             for x in actors)
        if shims and ("publish", "publish", "encode_begin", v) in by:
            # one publisher: frames leave while it encodes (FORMAT.md 2.5)
            b, (e, end_ev) = g("publish", "publish", "encode_begin", v), \
                by[("publish", "publish", "encode_end", v)][0]
            r["encode"] = e - b
            out = g("publish", "publish", "first_frame", v)
            r["bytes"] = end_ev["bytes"]
        elif shims:
            # a lead: each rank encodes its part and sends it whole; the
            # lead tiles, verifies and applies them, then sends the frames
            e, end_ev = by[("publish", "publish", "encode_end", v)][0]
            ranks = {x: by[("publish", x, "rank_sent", v)][0][1]["encode_ms"] / 1e3
                     for x in pubs if ("publish", x, "rank_sent", v) in by}
            r["encode"] = max(ranks.values())
            r["encode_ranks"] = ranks
            r["merge"] = end_ev["merge_ms"] / 1e3
            ff = by.get(("publish", "publish", "first_frame", v))
            out = ff[0][0] if ff else e
            r["bytes"] = end_ev["bytes"]
        if shims:
            staged = max(g("shim", s, "staged", v) for s in shims)
            r["wire"] = staged - out
            r["commit"] = max(g("shim", s, "commit", v) - g("shim", s, "apply_begin", v)
                              for s in shims)
        else:  # broadcast into the tensors: no stage but the wire
            r["torch"] = 0.0
            r["encode"] = 0.0
            r["wire"] = end - p0
            r["commit"] = 0.0
            r["bytes"] = None
        rows.append(r)
    shas = {e["id"]: e["sha"] for e in evs if e["ev"] == "sha"}
    return rows, shas


def run_main(a):
    # bench_rl.sh ends the driver with SIGTERM: stop what it started first
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.makedirs(a.dir, exist_ok=True)
    snaps, n, changed = make_versions(a)
    a.shapes = os.path.join(a.dir, "shapes.json")
    json.dump([(k, list(t.shape)) for k, t in snaps[0].items()], open(a.shapes, "w"))
    want = tensors_sha(snaps[a.versions].items())
    torch.set_num_threads(1)
    R = Run(a)
    results = {}
    try:
        for way in a.ways.split(","):
            print("== %s" % way, flush=True)
            if way == "dense":
                ev = run_dense(a, R, snaps)
            elif way in ("changes", "copy"):
                ev = run_bfpatch(a, R, snaps, way, 1)
            elif way == "changes2":
                ev = run_bfpatch(a, R, snaps, "changes", 2)
            else:
                raise SystemExit("bench_rl: no way %r" % way)
            rows, shas = stages(ev, a.versions, len(a.actor_ns))
            bad = [x for x, s in shas.items() if s != want]
            if len(shas) != len(a.actor_ns) or bad:
                raise SystemExit("bench_rl: %s: actors %s do not hold the trainer's version %d"
                                 % (way, bad or "(missing)", a.versions))
            results[way] = rows
    finally:
        R.stop()
    report(a, n, changed, results)


def report(a, n, changed, results):
    mean = lambda way, k: sum(r[k] for r in results[way]) / len(results[way])  # noqa: E731
    print()
    print("bfpatch bench_rl: %s, %d CPUs, %.1f GiB; torch %s; %d parameters (%.0f M, BF16 "
          "%.0f MB), %d versions (Adam lr %g after %d warm-up steps: %s changed), %d actors, "
          "trainer egress tbf %s"
          % (cpu_name(), os.cpu_count(), mem_gib(), torch.__version__, n, n / 1e6, 2 * n / 1e6,
             a.versions, a.lr, a.warmup, ", ".join("%.2f%%" % (100 * c) for c in changed),
             len(a.actor_ns), a.link))
    desc = {"changes": "bfpatch, change lists scattered into the actors' tensors",
            "dense": "torch.distributed broadcast (gloo) of the whole state_dict",
            "copy": "bfpatch, then a full copy from the buffer (load_weights style)",
            "changes2": "bfpatch from 2 trainer ranks (half the tensors each), change lists"}
    print()
    print("| way | version | publish() s | encode s | wire s | shim commit s | torch apply s "
          "(CPU s) | total s | bytes to each actor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for way, rows in results.items():
        for v, r in enumerate(rows, 1):
            print("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f (%.3f) | %.3f | %d |" % (
                way, v, r["publish"], r["encode"], r["wire"], r["commit"], r["torch"],
                r["torch_cpu"], r["total"], r["bytes"] if r["bytes"] is not None else 2 * n))
    print()
    print("| way | what | mean total s | dense / this (time) | dense / this (bytes) |")
    print("|---|---|---:|---:|---:|")
    dense = mean("dense", "total") if "dense" in results else None
    for way in results:
        m = mean(way, "total")
        b = sum(r["bytes"] if r["bytes"] is not None else 2 * n for r in results[way])
        print("| %s | %s | %.3f | %s | %.1fx |" % (
            way, desc[way], m, "%.2fx" % (dense / m) if dense else "-",
            2.0 * n * len(results[way]) / b))
    if "changes" in results and "changes2" in results:
        print()
        print("| encode per version | %s | mean |" % " | ".join(
            "v%d" % v for v in range(1, a.versions + 1)))
        print("|---|%s---:|" % ("---:|" * a.versions))
        rows = [("1 trainer rank (one publisher), s", [r["encode"] for r in results["changes"]])]
        two = results["changes2"]
        for x in sorted(two[0]["encode_ranks"]):
            rows.append(("2 ranks: %s (its half), s" % x, [r["encode_ranks"][x] for r in two]))
        rows.append(("2 ranks: the slowest, s", [r["encode"] for r in two]))
        rows.append(("2 ranks: the lead's tiling, verify, apply, s", [r["merge"] for r in two]))
        for name, xs in rows:
            print("| %s | %s | %.3f |" % (name, " | ".join("%.3f" % x for x in xs),
                                          sum(xs) / len(xs)))
    print()
    print("stages: publish() = the trainer's Publisher.publish call (copy into its buffer, "
          "commit); encode = the publisher's encode_begin -> encode_end; wire = first frame "
          "out -> the last shim has every frame; shim commit = apply+verify into the shim's "
          "buffer after the safe point (slowest actor); torch apply = apply_changes or the "
          "full copy into the actor's own tensors (slowest actor; CPU s: its process's CPU "
          "time for it); total = publish() call -> "
          "the last actor's tensors hold the version. dense: wire = total (broadcast into "
          "the tensors). changes2: encode = the slowest rank's; ranks send their parts "
          "whole to the lead, so wire counts from the lead's first frame (its merge done).")


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def mem_gib():
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal"):
            return int(line.split()[1]) / 2 ** 20
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bfp", required=True)
    r.add_argument("--shim", required=True)
    r.add_argument("--dir", required=True)
    r.add_argument("--shm", required=True)
    r.add_argument("--key", required=True)
    r.add_argument("--versions", type=int, default=3)
    r.add_argument("--layers", type=int, default=14)
    r.add_argument("--width", type=int, default=1024)
    r.add_argument("--vocab", type=int, default=16384)
    r.add_argument("--lr", type=float, default=1e-6)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--rate", default="950m")
    r.add_argument("--link", default="1 Gbit/s")
    r.add_argument("--settle", type=float, default=1.0)
    r.add_argument("--trainer-addr", required=True)
    r.add_argument("--actor-ns", required=True, type=lambda s: s.split(","))
    r.add_argument("--actor-addr", required=True, type=lambda s: s.split(","))
    r.add_argument("--ways", default="changes,dense,copy,changes2")
    for name in ("actor", "gloo-actor"):
        p = sub.add_parser(name)
        if name == "actor":
            p.add_argument("mode", choices=("changes", "copy"))
            p.add_argument("--buffer", required=True)
        else:
            p.add_argument("--rank", type=int, required=True)
            p.add_argument("--world", type=int, required=True)
            p.add_argument("--master", required=True)
        p.add_argument("--shapes", required=True)
        p.add_argument("--events", required=True)
        p.add_argument("--name", required=True)
        p.add_argument("--versions", type=int, required=True)
        p.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    if a.cmd == "run":
        run_main(a)
    elif a.cmd == "actor":
        actor_main(a)
    else:
        gloo_actor_main(a)


if __name__ == "__main__":
    main()
