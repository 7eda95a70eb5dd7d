#!/bin/bash
# bench_e2e.sh [BUILD_DIR] [PARAMS] [STEPS] [ACTORS] [relay]: end-to-end
# weight refresh, sparse patches against dense BF16 (a keyframe stream
# every step, through the same publisher -> shim pipeline), over 1 Gbit/s
# links.
#
# Network namespaces this script creates (needs root): the publisher and a
# bridge in one, ACTORS actors (default 1), each in its own namespace
# behind a veth pair whose bridge side is shaped with tbf to 1 Gbit/s; with
# "relay", bfpatch-relay on a net_tap port bridged in between (on this
# 2-vCPU VM the tap path cannot carry a dense refresh at 1 Gbit/s: the
# relay's kernel tap queue drops most of it, so dense runs are slowed by
# repairs; the default measures the links, not net_tap). The trainer's checkpoints (a synthetic lr
# 1e-6 trajectory, PARAMS parameters, default 210M) appear one by one in
# the publisher's directory; each step is timed from the checkpoint's
# rename until every actor committed it, and its stages come from the
# JSON-lines event logs (docs/EVENTS.md) of all processes. Every actor's
# buffer is compared with the trainer's checkpoint by sha256 at the end.
# Then a late joiner, in the same run: a new actor (on actor 1's link,
# straight to the publisher) whose buffer holds no usable version JOINs a
# publisher at version 2 and is sent a keyframe stream, in format 1.3's
# encoding 9 (the default), 1.2's 8, 1.1's 7 and 1.0's raw encoding 3
# (--key-encoding); in encodings 9 and 8 also with a shim that decodes it
# only at the commit (--no-prepare), and one whose buffer holds version 0 (the
# publisher keeps no patch from it); timed from its JOIN to its verified
# commit.
# BENCH_E2E_ONLY=join runs only the late joiner (STEPS 2 is enough).
set -u
B=${1:-build}
PARAMS=${2:-210M}
STEPS=${3:-3}
ACTORS=${4:-1}
VIA=${5:-direct}
HERE=$(cd "$(dirname "$0")" && pwd)
BFP=$B/cli/bfpatch
SHIM=$B/host_shim/bfpatch-shim
RELAY=$B/dpdk_app/bfpatch-relay
[ "$(id -u)" = 0 ] || { echo "bench_e2e: needs root (network namespaces)"; exit 1; }
[ "$STEPS" -ge 2 ] || { echo "bench_e2e: STEPS must be 2 or more (the late joiner joins at version 2)"; exit 1; }
for f in "$BFP" "$SHIM" $([ "$VIA" = relay ] && echo "$RELAY"); do
	[ -x "$f" ] || { echo "bench_e2e: $f missing (build first)"; exit 1; }
done
T=$(mktemp -d /tmp/bfpbench.XXXXXX)
P=bfpb$$
SHM=/dev/shm/bfpbench$$
X="ip netns exec $P"
PIDS=""
stop() {
	for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	PIDS=""
}
cleanup() {
	stop
	for n in "$P" $(seq -f "${P}a%g" "$ACTORS"); do ip netns del "$n" 2>/dev/null; done
	rm -rf "$T" "$SHM".* /var/run/dpdk/$P
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$P" || exit 1
. "$HERE/../tests/netns_lib.sh"
bridged_actors "$P" "$ACTORS" bfpb || { echo "bench_e2e: cannot build the namespaces"; exit 1; }
for i in $(seq "$ACTORS"); do
	$X tc qdisc add dev "bfpb${i}h" root tbf rate 1gbit burst 256kb latency 100ms
done

echo "bfpatch bench_e2e: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(nproc) CPUs; $ACTORS actor(s), each on a 1 Gbit/s tbf link; publisher -> $([ "$VIA" = relay ] && echo "bfpatch-relay (net_tap) -> ")shims"
echo "generating a $PARAMS-parameter lr 1e-6 trajectory of $STEPS steps ..."
"$BFP" synth -o "$T/traj" -p "$PARAMS" -n "$STEPS" -S 5 2>/dev/null || exit 1
"$BFP" keygen "$T/key" 2>/dev/null || exit 1
K="--key $T/key" # every part authenticates, as deployed

run() { # mode: sparse or dense
	mode=$1
	rm -rf "$T/live" "$T/$mode.jsonl" "$SHM".*
	mkdir "$T/live"
	ln "$T/traj/step-0000.safetensors" "$T/live/"
	up=198.18.0.10:7401
	if [ "$VIA" = relay ]; then
		$X "$RELAY" --no-huge -m 1024 --no-pci --file-prefix "$P" -l 0 --log-level=lib.eal:error \
			--vdev=net_tap0,iface=bfpbr -- --ip 0:198.18.0.1 --upstream 198.18.0.10:7401 \
			--cache-versions 2 --events "$T/$mode.jsonl" $K > "$T/relay-$mode.log" 2>&1 &
		PIDS="$PIDS $!"
		for n in $(seq 100); do grep -q "checksums in" "$T/relay-$mode.log" && break; sleep 0.1; done
		$X ip link set bfpbr address 02:00:00:00:ee:10
		$X ip link set bfpbr master br0
		$X ip link set bfpbr up
		up=198.18.0.1:7401
	fi
	for i in $(seq "$ACTORS"); do
		ip netns exec "${P}a$i" "$SHIM" --buffer "$SHM.$i" --init "$T/traj/step-0000.safetensors" \
			--upstream $up --listen 198.18.0.2$i:7500 --rate 1g --threads 2 \
			--max-stage 2G --events "$T/$mode.jsonl" --name "actor$i" $K \
			> "$T/shim$i-$mode.log" 2>&1 &
		PIDS="$PIDS $!"
	done
	key=""
	[ "$mode" = dense ] && key="--keyframes --key-encoding raw" # dense BF16
	rate=$((ACTORS * 950))m
	[ "$VIA" = relay ] && rate=950m # the relay fans out
	$X "$BFP" publish $K --dir "$T/live" --listen 198.18.0.10:7401 --rate $rate $key \
		--wait-subscribers 1 --linger 3600 --events "$T/$mode.jsonl" > "$T/publish-$mode.log" 2>&1 &
	PIDS="$PIDS $!"
	for n in $(seq 300); do
		[ "$(cat "$T"/shim*-$mode.log 2>/dev/null | grep -c 'listening on')" = "$ACTORS" ] &&
			grep -q joined "$T/publish-$mode.log" && break
		sleep 0.1
	done
	sleep 1.5 # every shim JOINed the relay
	for k in $(seq "$STEPS"); do
		ln "$T/traj/$(printf 'step-%04d' "$k").safetensors" "$T/live/"
		echo "{\"t\":$(date +%s.%N),\"src\":\"bench\",\"id\":\"trainer\",\"ev\":\"checkpoint\",\"version\":$k}" \
			>> "$T/$mode.jsonl"
		for n in $(seq 3600); do
			done_=1
			for i in $(seq "$ACTORS"); do
				v=$(od -An -tu4 -j64 -N8 "$SHM.$i" | awk '{print ($2 == 0) ? $1 : -1}')
				[ "$v" -ge "$k" ] || done_=0
			done
			[ $done_ = 1 ] && break
			sleep 0.05
		done
		[ $done_ = 1 ] || { echo "bench_e2e: $mode step $k not committed by every actor in 180 s"; stop; tail -n 40 "$T"/*-$mode.log; exit 1; }
	done
	stop
	/usr/bin/python3 "$HERE/../tests/check_buffers.py" "$T/traj/$(printf 'step-%04d' "$STEPS").safetensors" \
		$(for i in $(seq "$ACTORS"); do echo "$SHM.$i"; done) > "$T/check-$mode.txt" ||
		{ cat "$T/check-$mode.txt"; echo "bench_e2e: $mode: buffers differ"; exit 1; }
}

run_join() { # keyframe encoding: huf, expm, exp or raw; then held (the joiner holds version 0) or noprep
	enc=$1
	how=${2:-}
	tag=$enc${how:+-$how}
	held=""
	[ "$how" = held ] && held=1
	noprep=""
	[ "$how" = noprep ] && noprep=--no-prepare
	rm -rf "$T/live" "$T/join-$tag.jsonl" "$SHM".*
	mkdir "$T/live"
	for k in 0 1 2; do ln "$T/traj/$(printf 'step-%04d' "$k").safetensors" "$T/live/"; done
	$X "$BFP" publish $K --dir "$T/live" --listen 198.18.0.10:7401 --rate 950m --keep 1 \
		--key-encoding "$enc" --linger 3600 --events "$T/join-$tag.jsonl" \
		> "$T/publish-join-$tag.log" 2>&1 &
	PIDS="$PIDS $!"
	for n in $(seq 1200); do grep -q "version 1 -> 2:" "$T/publish-join-$tag.log" && break; sleep 0.1; done
	# the new actor's buffer: the model's layout, no usable version
	# (state RESYNC, as after a failed verification: it JOINs for keyframes)
	ip netns exec "${P}a1" ip link set lo up
	ip netns exec "${P}a1" "$SHIM" --buffer "$SHM.j" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:1 --listen 127.0.0.1:7599 --exit-after 0.2 $K > "$T/mkjoin.log" 2>&1
	[ -n "$held" ] || /usr/bin/python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(68); f.write(struct.pack('<I', 2))" "$SHM.j" || exit 1
	ip netns exec "${P}a1" "$SHIM" --buffer "$SHM.j" --upstream 198.18.0.10:7401 \
		--listen 198.18.0.21:7500 --rate 1g --threads 2 --max-stage 2G $noprep \
		--events "$T/join-$tag.jsonl" --name joiner $K > "$T/shim-join-$tag.log" 2>&1 &
	PIDS="$PIDS $!"
	for n in $(seq 3600); do
		v=$(od -An -tu4 -j64 -N8 "$SHM.j" | awk '{print ($2 == 0) ? $1 : -1}')
		[ "$v" -ge 2 ] && break
		sleep 0.05
	done
	[ "$v" -ge 2 ] || { echo "bench_e2e: the late joiner ($tag) did not commit in 180 s"; stop; tail -n 20 "$T"/*join-$tag.log; exit 1; }
	stop
	/usr/bin/python3 "$HERE/../tests/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.j" \
		> "$T/check-join-$tag.txt" ||
		{ cat "$T/check-join-$tag.txt"; echo "bench_e2e: late joiner ($tag): buffer differs"; exit 1; }
}

ONLY=${BENCH_E2E_ONLY:-}
[ -z "$ONLY" ] || [ "$ONLY" = join ] || { echo "bench_e2e: BENCH_E2E_ONLY is join or unset"; exit 1; }
if [ -z "$ONLY" ]; then
	run sparse
	run dense
fi
run_join huf
run_join huf noprep
run_join expm
run_join expm noprep
run_join exp
run_join raw
run_join huf held
[ -z "$ONLY" ] && /usr/bin/python3 - "$T/sparse.jsonl" "$T/dense.jsonl" "$STEPS" <<'PY'
import json, sys
steps = int(sys.argv[3])
res = {}
for mode, path in (("sparse", sys.argv[1]), ("dense", sys.argv[2])):
    ev = {}
    for line in open(path):
        o = json.loads(line)
        ev.setdefault((o["src"], o["id"], o["ev"], o.get("version")), []).append(o["t"])
    actors = sorted({k[1] for k in ev if k[0] == "shim"})
    rows = []
    for v in range(1, steps + 1):
        g = lambda *k: ev[k][0]
        ck = g("bench", "trainer", "checkpoint", v)
        eb, ee = g("publish", "publish", "encode_begin", v), g("publish", "publish", "encode_end", v)
        first = g("publish", "publish", "first_frame", v)
        staged = [g("shim", a, "staged", v) for a in actors]
        ab = [g("shim", a, "apply_begin", v) for a in actors]
        ae = [g("shim", a, "apply_end", v) for a in actors]
        cm = [g("shim", a, "commit", v) for a in actors]
        r = dict(load=eb - ck, encode=ee - eb, first=first - eb, wire=max(staged) - first,
                 apply=max(e - b for b, e in zip(ab, ae)), total=max(cm) - eb, from_ck=max(cm) - ck,
                 commit=[c - b for b, c in zip(ab, cm)])
        rows.append(r)
    res[mode] = rows
    print("\n== %s: %s ==" % (mode, "patches" if mode == "sparse" else
                               "dense BF16: a keyframe stream every step, same pipeline"))
    print("%4s %9s %9s %11s %9s %13s %9s %9s %12s  %s" % ("step", "load s", "encode s",
          "1st frame s", "wire s", "apply+verify", "total s", "slowest", "total/slow",
          "commit s per actor"))
    for v, r in enumerate(rows, 1):
        st = {k: r[k] for k in ("encode", "wire", "apply")}
        slow = max(st, key=st.get)
        print("%4d %9.3f %9.3f %11.3f %9.3f %13.3f %9.3f %9s %11.2fx  %s" % (
            v, r["load"], r["encode"], r["first"], r["wire"], r["apply"], r["total"], slow,
            r["total"] / st[slow], " ".join("%.3f" % c for c in r["commit"])))
mean = lambda m, k: sum(r[k] for r in res[m]) / len(res[m])
print("\nstages: load = checkpoint renamed -> publisher starts encoding (reads and parses it);")
print("encode = encode start -> every frame encoded; 1st frame = encode start -> the first")
print("frame left (frames leave while the rest is encoded, FORMAT.md 2.5); wire = first frame")
print("out -> the last actor has every frame (overlaps encode); apply+verify = the slowest")
print("actor's apply (every range hash-verified); total = encode start -> last actor committed.")
for k, name in (("total", "encode start -> last commit"), ("from_ck", "checkpoint -> last commit")):
    print("%-30s sparse %8.3f s   dense %8.3f s   sparse is %.1fx faster (target 50x)" % (
        name, mean("sparse", k), mean("dense", k), mean("dense", k) / mean("sparse", k)))
PY
[ -z "$ONLY" ] && echo "every actor's buffer equals the trainer's last checkpoint (sha256) after both runs"
/usr/bin/python3 - "$T" "$T/traj/step-0002.safetensors" <<'PY'
import json, os, struct, sys
print("\n== late joiner: a new actor JOINs and gets the keyframe stream of version 2 over its"
      " 1 Gbit/s tbf link ==")
d = open(sys.argv[2], "rb"); hl = struct.unpack("<Q", d.read(8))[0]
dense = os.path.getsize(sys.argv[2]) - 8 - hl
print("%-25s %12s %9s %8s %17s %12s %14s %9s %15s" % ("keyframes", "bytes sent", "% dense",
      "frames", "JOIN -> commit s", "1st frame s", "on the wire s", "apply s", "written staged"))
for name, tag in (("huf (9, the default)", "huf"), ("huf, --no-prepare", "huf-noprep"),
                  ("expm (8, format 1.2)", "expm"), ("expm, --no-prepare", "expm-noprep"),
                  ("exp (7, format 1.1)", "exp"),
                  ("raw (3, format 1.0)", "raw"), ("huf, joiner holds v0", "huf-held")):
    ev = {}
    for line in open(os.path.join(sys.argv[1], "join-%s.jsonl" % tag)):
        o = json.loads(line)
        ev.setdefault((o["id"], o["ev"]), []).append(o)
    join = ev[("publish", "subscriber")][0]
    key = ev[("publish", "keyframe")][0]
    first = [o for o in ev[("joiner", "first_frame")] if o["version"] == 2][0]
    staged = [o for o in ev[("joiner", "staged")] if o["version"] == 2][0]
    ab = [o for o in ev[("joiner", "apply_begin")] if o["version"] == 2][0]
    cm = [o for o in ev[("joiner", "commit")] if o["version"] == 2][0]
    print("%-25s %12d %8.1f%% %8d %17.3f %12.3f %14.3f %9.3f %15d" % (name, key["bytes"],
          100.0 * key["bytes"] / dense, key["frames"], cm["t"] - join["t"], first["t"] - join["t"],
          staged["t"] - first["t"], cm["t"] - ab["t"], cm.get("prepared", 0)))
print("The first six joiners' buffers hold no usable version (JOIN with none), the last one's")
print("holds version 0, which the publisher keeps no patch from (--keep 1); --no-prepare: the")
print("shim decodes every frame at the commit.")
print("JOIN -> commit: the publisher took the JOIN -> the joiner committed version 2, verified;")
print("1st frame: JOIN -> the joiner's first frame (it leaves while the stream is encoded);")
print("on the wire: first frame -> every frame staged; apply: the commit (decode, verify, write")
print("what was not written while staged); written staged: frames decoded, verified and written")
print("as they came (into a buffer that holds no version, else into a shadow copy).")
print("Each joiner's buffer equals step 2 (sha256).")
PY
