#!/bin/sh
# cli_verbosity_test.sh BFPATCH: every subcommand takes -q (nothing on
# stderr but errors) and -v (more than by default), as zstd and git do,
# and says so in its --help. Each is run on real inputs three ways and
# the outputs compared.
set -u
BFP=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

for c in diff apply info synth pcap report demo keygen publish; do
	check "bfpatch $c --help lists -q, --quiet and -v, --verbose" \
		"'$BFP' $c --help | grep -q -- '-q, --quiet' && '$BFP' $c --help | grep -q -- '-v, --verbose'"
done

"$BFP" synth -q -o "$T/traj" -p 300k -n 2 -S 5 2>"$T/synth.q"
S0=$T/traj/step-0000.safetensors S1=$T/traj/step-0001.safetensors
"$BFP" keygen -q "$T/key" 2>"$T/keygen.q"

# run NAME CMD...: the command with -q, without, and with -v (outputs
# named by a trailing @ replaced with q, d or v); stderr kept per mode
run() {
	name=$1
	shift
	for mode in q d v; do
		flag=
		[ $mode = q ] && flag=-q
		[ $mode = v ] && flag=-v
		args=
		for a in "$@"; do
			case $a in *@) a=${a%@}$mode ;; esac
			args="$args '$a'"
		done
		eval "'$BFP' $args $flag" >"$T/$name.out.$mode" 2>"$T/$name.err.$mode"
		echo $? >"$T/$name.rc.$mode"
	done
	check "bfpatch $name: succeeds with -q, without, and with -v" \
		"[ \$(cat '$T/$name.rc.q' '$T/$name.rc.d' '$T/$name.rc.v' | tr -d '\n') = 000 ]"
	check "bfpatch $name -q: nothing on stderr" "[ ! -s '$T/$name.err.q' ]"
	check "bfpatch $name -v: more than by default" \
		"[ \$(cat '$T/$name.out.v' '$T/$name.err.v' | wc -c) -gt \$(cat '$T/$name.out.d' '$T/$name.err.d' | wc -c) ]"
}

check "bfpatch synth -q: nothing on stderr" "[ ! -s '$T/synth.q' ] && [ -s '$S1' ]"
run synth synth -o "$T/t@" -p 300k -n 1 -S 5
run keygen keygen "$T/k@"
run diff diff "$S0" "$S1" -o "$T/p@"
run apply apply "$S0" "$T/pq" -o "$T/o@"
check "apply's three outputs are NEW" \
	"cmp -s '$T/oq' '$S1' && cmp -s '$T/od' '$S1' && cmp -s '$T/ov' '$S1'"
run info info "$T/pq"
run pcap pcap "$T/pq" -o "$T/c@" --dst 198.18.0.1:7400 -A "$T/key"
run report report -o "$T/r@" "$T/pq"
run demo demo --in-process -p 300k -n 1
check "bfpatch demo -q: the verdict alone" \
	"[ \$(wc -l < '$T/demo.out.q') -eq 1 ] && grep -q 'verified bit-exact' '$T/demo.out.q'"

# publish: one step from a directory to no subscriber, then its exit
mkdir -p "$T/pub"
cp "$S0" "$S1" "$T/pub/"
for mode in q d v; do
	flag=
	[ $mode = q ] && flag=-q
	[ $mode = v ] && flag=-v
	port=$((20000 + $$ % 20000))
	[ $mode = d ] && port=$((port + 1))
	[ $mode = v ] && port=$((port + 2))
	timeout 60 "$BFP" publish $flag --dir "$T/pub" --listen 127.0.0.1:$port --key "$T/key" \
		--steps 1 --linger 0 >"$T/publish.out.$mode" 2>"$T/publish.err.$mode"
	echo $? >"$T/publish.rc.$mode"
done
check "bfpatch publish: succeeds with -q, without, and with -v" \
	"[ \$(cat '$T/publish.rc.q' '$T/publish.rc.d' '$T/publish.rc.v' | tr -d '\n') = 000 ]"
check "bfpatch publish -q: nothing on stderr" "[ ! -s '$T/publish.err.q' ]"
check "bfpatch publish -v: more than by default" \
	"[ \$(cat '$T/publish.out.v' '$T/publish.err.v' | wc -c) -gt \$(cat '$T/publish.out.d' '$T/publish.err.d' | wc -c) ]"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
