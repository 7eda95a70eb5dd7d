#!/bin/sh
# chaos_test.sh BFPATCH SHIM: a shim behind a path that loses 10% of the
# datagrams, duplicates 10% and reorders 10% (tests/chaos_proxy.py) follows
# 6 published versions; after each its buffer must equal the trainer's
# checkpoint (sha256), so every version was reached bit-exactly through
# NACK repairs, duplicate drops and out-of-order staging. Both sides hold
# a key, so duplicated control messages are also refused as replays.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup chaos
port=$((20000 + ($$ + 41) % 20000))
STEPS=6
"$BFP" synth -o "$T/traj" -p 1M -n $STEPS -S 23 2>/dev/null || fail synth
"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
mkdir "$T/live"
cp "$T/traj/step-0000.safetensors" "$T/live/"
/usr/bin/python3 "$HERE/chaos_proxy.py" $((port + 1)) $port 120 0.10 0.10 0.10 7 "$T/key" \
	> "$T/proxy.log" 2>&1 &
PROXY=$!
"$SHIM" --key "$T/key" --buffer "$SHM" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$((port + 1)) \
	--listen 127.0.0.1:$((port + 2)) --nack-ms 50 > "$T/shim.log" 2>&1 &
PIDS="$!"
"$BFP" publish --key "$T/key" --dir "$T/live" --listen 127.0.0.1:$port --keep 8 --linger 3600 \
	> "$T/publish.log" 2>&1 &
PIDS="$PIDS $!"
for n in $(seq 50); do grep -q joined "$T/publish.log" && break; sleep 0.1; done
for k in $(seq $STEPS); do
	f=$(printf "step-%04d.safetensors" $k)
	cp "$T/traj/$f" "$T/live/.$f" && mv "$T/live/.$f" "$T/live/$f"
	for n in $(seq 300); do
		grep -q "committed version $((k - 1)) -> $k" "$T/shim.log" && break
		sleep 0.1
	done
	python3 "$HERE/check_buffers.py" "$T/traj/$f" "$SHM" > "$T/check.txt" ||
		{ cat "$T/check.txt"; fail "version $k"; }
done
for p in $PIDS; do kill -TERM "$p"; done
kill $PROXY 2>/dev/null
wait
PIDS=""
grep -q "duplicates [1-9]" "$T/shim.log" || fail "no duplicate reached the shim"
grep -q "NACKs [1-9]" "$T/shim.log" || fail "no NACK"
grep "bfpatch-shim: version" "$T/shim.log" | sed 's/^bfpatch-shim: /  /'
echo "ok - 10% loss, 10% duplicates, 10% reordering: the shim reached all $STEPS versions bit-exactly, each checked by sha256"
