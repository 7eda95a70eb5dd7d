#!/bin/sh
# shim_dpdk_test.sh BFPATCH SHIM: bfpatch-shim's DPDK backends end to end.
# 1. Frames from a DPDK port: a patch written as packets by `bfpatch pcap`
#    (with malformed packets mixed in) is replayed through net_pcap into
#    the shim, which commits it through the dmadev backend (dma_skeleton).
# 2. The dmadev backend over 3 published steps, one frame lost and NACKed.
# Every buffer is compared with the trainer's checkpoint by sha256.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
SHM=/dev/shm/bfpdpdk$$
PIDS=""
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$T" "$SHM".* /var/run/dpdk/bfpshim*
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }
"$SHIM" --help | grep -q -- "--dma DEV" || { echo "skip: bfpatch-shim built without DPDK"; exit 77; }
port=$((20000 + ($$ + 11) % 20000))

"$BFP" synth -o "$T/traj" -p 2M -n 3 -S 31 2>/dev/null || fail synth
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p01" || fail diff
"$BFP" pcap "$T/p01" -o "$T/frames.pcap" --dst 198.18.0.21:7500 || fail pcap
nbad=$(python3 "$HERE/relay/pcaptool.py" mix "$T/frames.pcap" "$T/in.pcap") || fail mix
"$SHIM" --buffer "$SHM.1" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 198.18.0.21:7500 --port "net_pcap0,rx_pcap=$T/in.pcap" --dma dma_skeleton0 \
	--exit-after 30 > "$T/pcap.log" 2>&1 &
PIDS=$!
for n in $(seq 300); do
	grep -q "committed version 0 -> 1" "$T/pcap.log" && break
	sleep 0.1
done
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed version 0 -> 1: .*(dma)" "$T/pcap.log" || fail "no DMA commit of the replayed patch"
python3 "$HERE/check_buffers.py" "$T/traj/step-0001.safetensors" "$SHM.1" || fail "pcap + dma buffer"
grep "port:" "$T/pcap.log" | sed 's/^bfpatch-shim: /  /'

"$SHIM" --buffer "$SHM.2" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --dma dma_skeleton0 --drop-every 9 --exit-after 40 \
	> "$T/dma.log" 2>&1 &
PIDS=$!
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
	--linger 2 > "$T/publish.log" 2>&1 || fail publish
for n in $(seq 100); do
	grep -q "committed version 2 -> 3" "$T/dma.log" && break
	sleep 0.1
done
kill -TERM $PIDS; wait; PIDS=""
[ "$(grep -c 'committed .*(dma)' "$T/dma.log")" = 3 ] || fail "not every commit went through dmadev"
grep -q "NACKs [1-9]" "$T/dma.log" || fail "no NACK for the lost frame"
python3 "$HERE/check_buffers.py" "$T/traj/step-0003.safetensors" "$SHM.2" || fail "dma buffer"
grep "dma:" "$T/dma.log" | sed 's/^bfpatch-shim: /  /'
echo "ok - shim: net_pcap replay ($nbad malformed packets mixed in) and 3 published steps, committed through dmadev, bit-exact"
