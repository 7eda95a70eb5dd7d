#!/bin/sh
# ranks_test.sh SCENARIO BFPATCH SHIM: a sharded trainer over loopback.
# Two ranks (`bfpatch publish --dir --lead --rank I --owned FILE`) each
# publish half of a synthetic model's tensors (split by name), a lead
# (`bfpatch publish --ranks 2`) merges their frames, two keyed shims
# commit. Scenarios:
#   bit-exact  every version the shims commit is the full step
#              checkpoint, byte for byte (data sections compared here)
#   overlap    rank 1 also publishes a tensor rank 0 owns: version 1 is
#              refused with that tensor named, nothing is sent, the shims
#              stay at version 0
#   gap        a tensor no rank owns: the same, with that tensor named
#   wrong-base rank 1's weights are not the lead's version 0 (another
#              trajectory of the same layout): its frames fail to verify
#              against the lead's copy, version 1 is refused naming the
#              rank and a tensor, the shims stay at version 0
#   link-lost  rank 1's link breaks in the middle of version 1 (a proxy,
#              tests/tcp_cut_proxy.py, cuts it); the rank links again and
#              sends version 1 again; every version still bit-exact
#   peer-key   rank 1 signs with a key of its own, one of the lead's
#              --peer-keys; every version bit-exact as in bit-exact
#   wrong-key  a rank with another key, and one without a key, are
#              refused at their HELLO; the version never completes
#   usage      options that do not go together, an owned tensor the model
#              does not have, an owned tensor that shares a 16-bit word
#              with one the rank does not own: a message and a non-zero
#              exit
set -u
SCEN=$1
BFP=$2
SHIM=$3
. "$(dirname "$0")/test_lib.sh"
test_setup rk
port=$((20000 + ($$ + 29) % 20000))
"$BFP" keygen "$T/key" 2>/dev/null || fail "keygen"
K="--key $T/key"
"$BFP" synth -q -o "$T/traj" -p 600k -n 3 || fail "synth"
mkdir "$T/ckpt"
cp "$T/traj/step-0000.safetensors" "$T/ckpt/"

# names CKPT: the tensor names of a safetensors file, one a line
names() {
	python3 -c 'import json, struct, sys
d = open(sys.argv[1], "rb").read(8)
n = struct.unpack("<Q", d)[0]
h = json.loads(open(sys.argv[1], "rb").read(8 + n)[8:])
print("\n".join(k for k in h if k != "__metadata__"))' "$1"
}
# data FILE: sha256 of a safetensors file's data section, or of a weight
# buffer's (common/wbuf.h: data offset and size at bytes 48 and 56), read
# here from the files' bytes
data() {
	python3 -c 'import hashlib, struct, sys
d = open(sys.argv[1], "rb").read()
if d[:8] == b"BFPWBUF1":
    off, n = struct.unpack_from("<QQ", d, 48)
else:
    off = 8 + struct.unpack_from("<Q", d, 0)[0]
    n = len(d) - off
print(hashlib.sha256(d[off:off + n]).hexdigest())' "$1"
}
names "$T/traj/step-0000.safetensors" > "$T/all"
[ "$(wc -l < "$T/all")" -ge 8 ] || fail "synth made fewer tensors than expected"
awk 'NR % 2 == 1' "$T/all" > "$T/own0"
awk 'NR % 2 == 0' "$T/all" > "$T/own1"
tensor0=$(sed -n 3p "$T/all")   # a tensor of rank 0
tensor1=$(sed -n 4p "$T/all")   # a tensor of rank 1
case $SCEN in
overlap) echo "$tensor0" >> "$T/own1" ;;
gap) grep -vxF "$tensor1" "$T/own1" > "$T/own1.x" && mv "$T/own1.x" "$T/own1" ;;
esac

for a in 1 2; do
	"$SHIM" $K --buffer "$SHM.a$a" --init "$T/ckpt/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 10 + a)) --exit-after 120 \
		> "$T/shim$a.log" 2>&1 &
	PIDS="$PIDS $!"
done
PEERS=""
if [ "$SCEN" = peer-key ]; then # rank 1's own key, in the lead's peer table
	"$BFP" keygen "$T/rank1.key" --id 71 2>/dev/null || fail "keygen"
	(umask 077; cat "$T/rank1.key" > "$T/peers")
	PEERS="--peer-keys $T/peers"
fi
"$BFP" publish $K $PEERS --ranks 2 --rank-listen 127.0.0.1:$((port + 1)) \
	--init "$T/ckpt/step-0000.safetensors" --listen 127.0.0.1:$port --wait-subscribers 2 \
	--steps 3 --linger 1 --events "$T/events.jsonl" > "$T/lead.log" 2>&1 &
PUB=$!
wait_line "lead of 2 ranks" "$T/lead.log" 100 || fail "the lead did not start"
rank() { # rank I [options]: rank I publishing $T/ckpt
	i=$1
	shift
	"$BFP" publish --dir "$T/ckpt" --lead 127.0.0.1:$((port + 1)) --rank "$i" \
		--owned "$T/own$i" --steps 3 --linger 5 "$@" > "$T/rank$i.log" 2>&1 &
	PIDS="$PIDS $!"
}
# step V: step-000V appears in the ranks' directory (renamed in)
step() {
	cp "$T/traj/step-000$1.safetensors" "$T/ckpt/.s$1.tmp"
	mv "$T/ckpt/.s$1.tmp" "$T/ckpt/step-000$1.safetensors"
}
case $SCEN in
usage)
	stop_pids
	L="--rank-listen 127.0.0.1:$((port + 1))"
	I="--init $T/ckpt/step-0000.safetensors"
	expect_fail "a lead without --init" "" "$BFP" publish $K --ranks 2 $L --listen 127.0.0.1:$port
	expect_fail "a lead with --dir" "" "$BFP" publish $K --ranks 2 $L $I --dir "$T/ckpt" \
		--listen 127.0.0.1:$port
	expect_fail "a rank without --rank" "" "$BFP" publish $K --dir "$T/ckpt" \
		--lead 127.0.0.1:$((port + 1))
	expect_fail "a rank with --listen" "" "$BFP" publish $K --dir "$T/ckpt" \
		--lead 127.0.0.1:$((port + 1)) --rank 0 --listen 127.0.0.1:$port
	expect_fail "--owned without --lead" "" "$BFP" publish $K --dir "$T/ckpt" \
		--listen 127.0.0.1:$port --owned "$T/own0"
	expect_fail "--ranks 0" "" "$BFP" publish $K --ranks 0 $L $I --listen 127.0.0.1:$port
	expect_fail "a lead without --key or --insecure" "" "$BFP" publish --ranks 2 $L $I \
		--listen 127.0.0.1:$port
	echo "no.such.tensor" > "$T/bad"
	expect_fail "an owned tensor the model does not have" "" "$BFP" publish $K \
		--dir "$T/ckpt" --lead 127.0.0.1:$((port + 1)) --rank 0 --owned "$T/bad"
	grep -q "no.such.tensor" "$T/stderr" || bad "the message names the tensor"
	expect_fail "an owned file that is not there" "" "$BFP" publish $K \
		--dir "$T/ckpt" --lead 127.0.0.1:$((port + 1)) --rank 0 --owned "$T/none"
	# tensors of 3 and 5 bytes share a 16-bit word: one rank owns both or neither
	mkdir "$T/odd"
	python3 -c 'import json, struct, sys
h = json.dumps({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
                "b": {"dtype": "U8", "shape": [5], "data_offsets": [3, 8]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(8)))' \
		"$T/odd/step-0000.safetensors" || fail "writing the odd checkpoint"
	echo a > "$T/own-a"
	expect_fail "a word shared with a tensor another rank owns" "" "$BFP" publish $K \
		--dir "$T/odd" --lead 127.0.0.1:$((port + 1)) --rank 0 --owned "$T/own-a"
	grep -q "share a 16-bit word" "$T/stderr" || bad "the message says why"
	[ "$fails" = 0 ] || fail "$fails usage checks"
	;;
bit-exact | link-lost | peer-key)
	rank 0 $K
	if [ "$SCEN" = peer-key ]; then
		rank 1 --key "$T/rank1.key"
	elif [ "$SCEN" = link-lost ]; then
		python3 "$(dirname "$0")/tcp_cut_proxy.py" $((port + 2)) $((port + 1)) 2500 &
		PIDS="$PIDS $!"
		sleep 0.5
		"$BFP" publish --dir "$T/ckpt" --lead 127.0.0.1:$((port + 2)) --rank 1 \
			--owned "$T/own1" --steps 3 --linger 5 $K > "$T/rank1.log" 2>&1 &
		PIDS="$PIDS $!"
	else
		rank 1 $K
	fi
	for v in 1 2 3; do
		step $v
		want=$(data "$T/traj/step-000$v.safetensors")
		for a in 1 2; do
			wait_line "committed version $((v - 1)) -> $v" "$T/shim$a.log" 300 ||
				fail "shim $a did not commit version $v"
			got=$(data "$SHM.a$a")
			[ "$got" = "$want" ] ||
				fail "shim $a at version $v: data $got, step-000$v.safetensors $want"
		done
		echo "ok - version $v: both shims hold step-000$v.safetensors's bytes (sha256 ${want%${want#????????????????}}...)"
	done
	wait $PUB || fail "the lead exited with an error"
	PUB=""
	grep -q "version 2 -> 3 from 2 ranks" "$T/lead.log" || fail "no merged version 3"
	grep -q "rank 0: .*3 versions received" "$T/lead.log" || fail "rank 0's counters"
	grep -q "rank 1: .*3 versions received" "$T/lead.log" || fail "rank 1's counters"
	grep -q '"ev":"rank_stats"' "$T/events.jsonl" || fail "no rank_stats event"
	grep "from 2 ranks\|encode per version" "$T/lead.log" "$T/rank0.log" | sed 's/^/  /'
	if [ "$SCEN" = link-lost ]; then
		[ "$(grep -c "rank 1: version 0 -> 1: " "$T/rank1.log")" -ge 2 ] ||
			fail "rank 1 did not send version 1 again"
		[ "$(grep -c "rank 1 linked .* at version 0" "$T/lead.log")" -ge 2 ] ||
			fail "rank 1 did not link again at version 0"
		grep "version 0 -> 1\|closed\|unlinked" "$T/rank1.log" "$T/lead.log" | sed 's/^/  /'
	fi
	echo "ok - 3 versions from 2 ranks, merged by the lead, bit-exact on 2 shims"
	;;
overlap | gap | wrong-base)
	rank 0 $K
	if [ "$SCEN" = wrong-base ]; then
		"$BFP" synth -q -o "$T/other" -p 600k -n 1 -S 9 || fail "synth"
		mkdir "$T/ckpt1"
		cp "$T/other/step-0000.safetensors" "$T/ckpt1/"
		"$BFP" publish --dir "$T/ckpt1" --lead 127.0.0.1:$((port + 1)) --rank 1 \
			--owned "$T/own1" --steps 3 --linger 5 $K > "$T/rank1.log" 2>&1 &
		PIDS="$PIDS $!"
		cp "$T/other/step-0001.safetensors" "$T/ckpt1/"
	else
		rank 1 $K
	fi
	step 1
	if [ "$SCEN" = wrong-base ]; then
		want="version 1 refused, nothing sent: rank 1's frame of .* does not verify against the lead's version 0"
	elif [ "$SCEN" = overlap ]; then
		want="version 1 refused, nothing sent: ranks 0 and 1 both published $tensor0"
	else
		want="version 1 refused, nothing sent: no rank published $tensor1"
	fi
	wait_line "version 1 refused" "$T/lead.log" 300 || fail "version 1 was not refused"
	grep -q "$want" "$T/lead.log" || fail "the refusal does not say: $want"
	grep -q '"ev":"version_refused"' "$T/events.jsonl" || fail "no version_refused event"
	wait_line "refused version 1" "$T/rank1.log" 50 || fail "rank 1 was not told"
	sleep 2
	for a in 1 2; do
		grep -q "committed version" "$T/shim$a.log" && fail "shim $a committed a version"
		[ "$(data "$SHM.a$a")" = "$(data "$T/traj/step-0000.safetensors")" ] ||
			fail "shim $a's buffer changed"
	done
	grep "refused" "$T/lead.log" | head -n 1 | sed 's/^/  /'
	echo "ok - $SCEN: version 1 refused naming the tensor; both shims still at version 0"
	;;
wrong-key)
	"$BFP" keygen "$T/other" 2>/dev/null || fail "keygen"
	rank 0 $K
	rank 1 --key "$T/other"
	wait_line "rank link from .* refused: HELLO refused by authentication" "$T/lead.log" 100 ||
		fail "the lead took a rank with another key"
	wait_line "closed the link\|refused" "$T/rank1.log" 100 || fail "rank 1 was not told"
	"$BFP" publish --dir "$T/ckpt" --lead 127.0.0.1:$((port + 1)) --rank 1 --insecure \
		--owned "$T/own1" --steps 3 > "$T/rank1u.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_line "refused by authentication: no trailer" "$T/lead.log" 100 ||
		fail "the lead took an unsigned rank"
	step 1
	sleep 2
	grep -q "rank 1 linked" "$T/lead.log" && fail "a rank 1 was linked"
	grep -q "from 2 ranks" "$T/lead.log" && fail "a version was merged without rank 1"
	for a in 1 2; do
		grep -q "committed version" "$T/shim$a.log" && fail "shim $a committed a version"
	done
	grep "refused" "$T/lead.log" | head -n 2 | sed 's/^/  /'
	echo "ok - ranks with another key and with none refused; nothing published without them"
	;;
*) fail "unknown scenario $SCEN" ;;
esac
