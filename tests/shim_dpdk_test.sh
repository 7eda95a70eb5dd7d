#!/bin/sh
# shim_dpdk_test.sh BFPATCH SHIM: bfpatch-shim's DPDK backends end to end.
# 1. Frames from a DPDK port: a patch written as packets by `bfpatch pcap`
#    (with malformed packets mixed in) is replayed through net_pcap into
#    the shim, again and again (frames before the run's announcement are
#    refused), which commits it through the dmadev backend (dma_skeleton).
# 2. The dmadev backend over 3 published steps, one frame lost and NACKed.
# 3. Live frames from a kernel interface through a DPDK port: the shim in a
#    network namespace the test creates takes the publisher's frames off
#    its veth with net_af_packet, then with net_af_xdp (where this kernel
#    and DPDK build allow XDP; else said and skipped); only control
#    messages use a kernel socket. Needs root; skipped without.
# 4. A memif port that waits for its server and reconnects after it
#    restarts (below).
# Every part holds a key; every buffer is compared with the trainer's
# checkpoint by sha256. Where frames come from a pcap, not a publisher, a
# stub upstream (tests/upstream_stub.py) announces their run, as a
# publisher's HEARTBEATs do, and the captures are bound to that one run.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup dpdk
test_teardown() {
	rm -rf /var/run/dpdk/bfpshim*
	ip netns del "bfpsd$$" 2>/dev/null
	ip link del "bfsb$$" 2>/dev/null
}
"$SHIM" --help | grep -q -- "--dma DEV" || { echo "skip: bfpatch-shim built without DPDK"; exit 77; }
port=$((20000 + ($$ + 11) % 20000))

"$BFP" synth -o "$T/traj" -p 2M -n 3 -S 31 2>/dev/null || fail synth
"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
K="--key $T/key" # every shim, publisher and replayed frame: signed, as deployed
RUN=00c0ffee12345678 # the run the captures are bound to
# stub_up SECONDS: the stub upstream on 127.0.0.1:$port, in $STUB
stub_up() {
	/usr/bin/python3 "$HERE/upstream_stub.py" $port "$T/key" $RUN "$1" > "$T/stub.log" 2>&1 &
	STUB=$!
	PIDS="$PIDS $STUB"
	wait_line "upstream stub on" "$T/stub.log" || fail "the stub upstream did not start"
}
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p01" || fail diff
"$BFP" pcap "$T/p01" -o "$T/frames.pcap" --dst 198.18.0.21:7500 $K --run $RUN || fail pcap
nbad=$(python3 "$HERE/relay/pcaptool.py" mix "$T/frames.pcap" "$T/in.pcap") || fail mix
stub_up 40
"$SHIM" $K --buffer "$SHM.1" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 198.18.0.21:7500 --port "net_pcap0,rx_pcap=$T/in.pcap,infinite_rx=1" --dma dma_skeleton0 \
	--exit-after 30 > "$T/pcap.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 0 -> 1" "$T/pcap.log" 300
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed version 0 -> 1: .*(dma)" "$T/pcap.log" || fail "no DMA commit of the replayed patch"
python3 "$HERE/check_buffers.py" "$T/traj/step-0001.safetensors" "$SHM.1" || fail "pcap + dma buffer"
grep "port:" "$T/pcap.log" | sed 's/^bfpatch-shim: /  /'

"$SHIM" $K --buffer "$SHM.2" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --dma dma_skeleton0 --drop-every 9 --exit-after 40 \
	> "$T/dma.log" 2>&1 &
PIDS=$!
"$BFP" publish $K --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
	--linger 2 > "$T/publish.log" 2>&1 || fail publish
wait_line "committed version 2 -> 3" "$T/dma.log"
kill -TERM $PIDS; wait; PIDS=""
[ "$(grep -c 'committed .*(dma)' "$T/dma.log")" = 3 ] || fail "not every commit went through dmadev"
grep -q "NACKs [1-9]" "$T/dma.log" || fail "no NACK for the lost frame"
python3 "$HERE/check_buffers.py" "$T/traj/step-0003.safetensors" "$SHM.2" || fail "dma buffer"
grep "dma:" "$T/dma.log" | sed 's/^bfpatch-shim: /  /'

# 4. A memif port whose server (standing for a relay) starts after the
#    shim and then restarts: testpmd replays patch 0->1 into a memif
#    server and quits while it forwards (the shim may be reading the ring
#    as its rings are unmapped: the munmap guard in shim_dpdk.c), and a new
#    one replays patch 1->2 on the same socket and stops forwarding before
#    it quits. The shim must connect and reconnect by itself and commit both
#    versions.
TESTPMD=$(command -v dpdk-testpmd || true)
memif=""
if [ -n "$TESTPMD" ]; then
	"$BFP" diff -q -b 1 "$T/traj/step-0001.safetensors" "$T/traj/step-0002.safetensors" \
		-o "$T/p12" || fail diff
	"$BFP" pcap "$T/p12" -o "$T/f12.pcap" --dst 198.18.0.21:7500 $K --run $RUN || fail pcap
	mkfifo "$T/tp.in"
	exec 7<>"$T/tp.in" # testpmd's commands
	sock="$T/memif.sock"
	server() { # server N PCAP: a memif server forwarding PCAP's frames, again and again
		"$TESTPMD" --no-huge -m 256 --no-pci --file-prefix "bfpshimtp$$$1" -l 0-1 \
			--log-level=lib.eal:error --vdev "net_pcap0,rx_pcap=$2,infinite_rx=1" \
			--vdev "net_memif0,role=server,socket=$sock,socket-abstract=no" -- -i \
			--forward-mode=io --no-flush-rx --total-num-mbufs=2048 \
			< "$T/tp.in" > "$T/testpmd$1.log" 2>&1 &
		TP=$!
		PIDS="$PIDS $TP"
		echo start >&7
		for n in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
		fail "testpmd: no memif socket"
	}
	server_exit() { # server_exit [stop]: quit, after stopping forwarding first
		if [ "${1:-}" = stop ]; then
			echo stop >&7
			sleep 0.5
		fi
		echo quit >&7
		wait $TP || fail "testpmd did not exit cleanly"
	}
	# the shim starts first: it waits for a server
	stub_up 80
	"$SHIM" $K --buffer "$SHM.m" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
		--listen 198.18.0.21:7500 --port "net_memif0,role=client,socket=$sock,socket-abstract=no" \
		--exit-after 60 > "$T/memif.log" 2>&1 &
	SH=$!
	PIDS="$PIDS $SH"
	wait_line "no memif server listening yet" "$T/memif.log" 100 ||
		fail "memif: the shim did not wait for a server"
	server 1 "$T/frames.pcap"
	wait_line "committed version 0 -> 1" "$T/memif.log" 200 || fail "memif: version 1 not committed"
	server_exit
	wait_line "port: link down" "$T/memif.log" 50 || fail "memif: the server's exit went unseen"
	server 2 "$T/f12.pcap"
	wait_line "committed version 1 -> 2" "$T/memif.log" 300 ||
		fail "memif: no commit after the server restarted (not reconnected)"
	wait_line "link up again" "$T/memif.log" 50 || fail "memif: reconnection not said"
	server_exit stop
	kill -TERM $SH
	wait $SH || fail "memif: the shim did not exit cleanly"
	PIDS=""
	exec 7>&-
	python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.m" || fail "memif buffer"
	grep "port:" "$T/memif.log" | sed 's/^bfpatch-shim: /  memif /'
	memif=", a memif port that waited for its server and reconnected after it restarted"
else
	echo "  memif restart: skipped (no dpdk-testpmd)"
fi

live=""
if [ "$(id -u)" = 0 ] && ip netns add "bfpsd$$" 2>/dev/null; then
	NS="ip netns exec bfpsd$$"
	ip link add "bfsb$$" type veth peer name bfsa netns "bfpsd$$" || fail veth
	ip addr add 198.18.0.40/24 dev "bfsb$$"
	# veth leaves UDP checksums to "hardware" that a packet socket never
	# sees: the sender computes them (as a NIC would) so they can be checked
	ethtool -K "bfsb$$" tx off > /dev/null
	ip link set "bfsb$$" up
	$NS ip addr add 198.18.0.41/24 dev bfsa
	$NS ip link set bfsa up
	$NS ip link set lo up
	k=0
	for pmd in "net_af_packet0,iface=bfsa" "net_af_xdp0,iface=bfsa,start_queue=0,queue_count=1"; do
		k=$((k + 1))
		name=${pmd%%0,*}
		$NS "$SHIM" $K --buffer "$SHM.l$k" --init "$T/traj/step-0000.safetensors" \
			--upstream 198.18.0.40:$((port + 2)) --listen 198.18.0.41:7500 --port "$pmd" \
			--exit-after 40 > "$T/live$k.log" 2>&1 &
		PIDS=$!
		if ! wait_line "listening on" "$T/live$k.log"; then
			kill -TERM $PIDS 2>/dev/null; wait; PIDS=""
			[ "$name" = net_af_xdp ] || fail "$name port did not start"
			echo "  $name: not available here ($(grep -m1 -i 'error\|fail' "$T/live$k.log")); skipped"
			continue
		fi
		"$BFP" publish $K --dir "$T/traj" --listen 198.18.0.40:$((port + 2)) --wait-subscribers 1 \
			--steps 2 --linger 2 > "$T/publish-live$k.log" 2>&1 || fail "publish to $name"
		committed=0
		wait_line "committed version 1 -> 2" "$T/live$k.log" && committed=1
		kill -TERM $PIDS; wait; PIDS=""
		[ $committed = 1 ] || fail "$name: version 2 not committed"
		delivered=$(sed -n 's/.*port: [0-9]* packets, \([0-9]*\) frames delivered.*/\1/p' "$T/live$k.log" | tail -n 1)
		[ "${delivered:-0}" -gt 0 ] || fail "$name: no frame came through the DPDK port"
		python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.l$k" || fail "$name buffer"
		grep "port:" "$T/live$k.log" | sed "s/^bfpatch-shim: /  $name /"
		live="$live, $name"
	done
else
	echo "  live ports: skipped (needs root and ip netns)"
fi
# 5. A crash while the engine copies (--crash-after: the shim writes half
#    of its first DMA copy itself, then SIGKILLs itself): some ranges are at
#    the target, one torn, the rest at the base. The DMA journal
#    (BUFFER.dmalog) puts the ranges it noted back at the base on restart,
#    and the commit is finished from frames NACKed again, with no resync.
"$SHIM" $K --buffer "$SHM.5" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$((port + 5)) \
	--listen 127.0.0.1:$((port + 6)) --dma dma_skeleton0 --crash-after 1 --exit-after 60 \
	> "$T/crash.log" 2>&1 &
cpid=$!
"$BFP" publish $K --dir "$T/traj" --listen 127.0.0.1:$((port + 5)) --wait-subscribers 1 --steps 1 \
	--linger 40 > "$T/publish5.log" 2>&1 &
PIDS="$PIDS $!"
wait $cpid
grep -q "halfway through a DMA copy" "$T/crash.log" || fail "the shim did not die in a DMA copy: $(tail -n 3 "$T/crash.log")"
rm -rf /var/run/dpdk/bfpshim$cpid
"$SHIM" $K --buffer "$SHM.5" --upstream 127.0.0.1:$((port + 5)) --listen 127.0.0.1:$((port + 6)) \
	--dma dma_skeleton0 --exit-after 40 > "$T/resume.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 0 -> 1" "$T/resume.log" 300 || fail "the commit cut short in a DMA copy was not finished: $(tail -n 3 "$T/resume.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "frame(s) cut short by the crash put back at the base" "$T/resume.log" ||
	fail "nothing was put back from the DMA journal"
grep -q "resyncs 0," "$T/resume.log" || fail "the torn range cost a keyframe resync: $(tail -n 1 "$T/resume.log")"
python3 "$HERE/check_buffers.py" "$T/traj/step-0001.safetensors" "$SHM.5" || fail "buffer after a crash in a DMA copy"
grep "put back" "$T/resume.log" | sed 's/^bfpatch-shim: /  /'

echo "ok - shim: net_pcap replay ($nbad malformed packets mixed in) and 3 published steps, committed through dmadev, bit-exact${memif}; a crash in a DMA copy finished from the DMA journal without a resync; live frames from a veth through DPDK ports${live:-: none here}"
