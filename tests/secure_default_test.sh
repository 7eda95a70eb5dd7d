#!/bin/sh
# secure_default_test.sh SCENARIO BFPATCH SHIM [RELAY]: what takes input
# from the network authenticates it unless told --insecure, and `bfpatch
# keygen` makes the keys for it (docs/SECURITY.md "Keys"). One meson test
# per scenario:
#   keygen-new-key         a new key file: mode 0600, "KEY_ID HEX64", a
#                          different key each time, --id; '-' is refused
#   keygen-never-replaces  an existing file (a key, other content, a
#                          dangling symbolic link) is left as it was and
#                          keygen says so; no temporary is left behind
#   keygen-key-commits     a publisher and a shim holding a keygen key: the
#                          shim commits 2 versions bit-exactly
#   publish-needs-key, shim-needs-key, relay-needs-key
#                          neither --key nor --insecure: exit 2 with a
#                          message naming keygen and --insecure, nothing
#                          started; --insecure with --key: exit 2;
#                          --insecure alone: a warning at start that it
#                          accepts unauthenticated input, and it runs;
#                          --help says so
set -u
SCENARIO=$1
BFP=$2
SHIM=$3
RELAY=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup sec
port=$((20000 + ($$ + 53) % 20000))

# refused NAME CMD...: CMD must exit 2 with a one-line message on stderr
refused() {
	name=$1
	shift
	"$@" > "$T/stdout" 2> "$T/stderr"
	rc=$?
	[ $rc = 2 ] || fail "$name: exit $rc, not 2: $(cat "$T/stderr")"
	[ "$(grep -c . "$T/stderr")" = 1 ] || fail "$name: not one line: $(cat "$T/stderr")"
	echo "ok - $name: $(cat "$T/stderr")"
}

# needs_key PROG CMD...: CMD (a program that takes network input, without
# a key option) is refused without --key or --insecure and with both
needs_key() {
	prog=$1
	shift
	refused "$prog without --key or --insecure" "$@"
	grep -q "bfpatch keygen" "$T/stderr" && grep -q -- "--insecure" "$T/stderr" ||
		fail "$prog: the message does not say how to make a key and how to run without one"
	refused "$prog with --insecure and --key" "$@" --insecure --key "$T/key"
	grep -q -- "--insecure" "$T/stderr" && grep -q -- "--key" "$T/stderr" ||
		fail "$prog: the message does not name --insecure and --key"
}

# warns LOG WHERE: LOG has the --insecure warning naming WHERE
warns() {
	grep -q "warning: --insecure: .*accepts unauthenticated frames and control messages from anyone who can reach $2" "$1" ||
		fail "no --insecure warning naming $2: $(cat "$1")"
	echo "ok - --insecure warns: $(grep -m1 'warning: --insecure' "$1")"
}

# help_says PROG CMD...: CMD's --help describes --insecure
help_says() {
	prog=$1
	shift
	"$@" --help > "$T/help" 2>&1 || fail "$prog --help"
	grep -q -- "--insecure" "$T/help" && grep -q "unauthenticated" "$T/help" ||
		fail "$prog --help does not describe --insecure"
	echo "ok - $prog --help describes --insecure"
}

key_line='^[0-9][0-9]* [0-9a-f]\{64\}$'

case $SCENARIO in
keygen-new-key)
	"$BFP" keygen "$T/k1" 2> "$T/err" || fail "keygen: $(cat "$T/err")"
	[ "$(stat -c %a "$T/k1")" = 600 ] || fail "mode $(stat -c %a "$T/k1"), not 600"
	grep -q "^1 " "$T/k1" && grep -q "$key_line" "$T/k1" && [ "$(wc -l < "$T/k1")" = 1 ] ||
		fail "not one line 'KEY_ID HEX64': $(cat "$T/k1")"
	(umask 0; "$BFP" keygen --id 4294967295 "$T/k2" 2>/dev/null) || fail "keygen --id"
	[ "$(stat -c %a "$T/k2")" = 600 ] || fail "mode $(stat -c %a "$T/k2") under umask 0"
	grep -q "^4294967295 " "$T/k2" || fail "--id not written: $(cat "$T/k2")"
	[ "$(cut -d' ' -f2 "$T/k1")" != "$(cut -d' ' -f2 "$T/k2")" ] || fail "the same key twice"
	echo "ok - keygen writes one owner-only line, KEY_ID HEX64, a new key each time"
	refused "keygen -" "$BFP" keygen -
	[ ! -e ./- ] || fail "keygen - wrote a file named -"
	refused "keygen --id out of range" "$BFP" keygen --id 4294967296 "$T/k3"
	[ ! -e "$T/k3" ] || fail "a refused keygen wrote its file"
	;;
keygen-never-replaces)
	"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
	cp "$T/key" "$T/key.before"
	echo "not a key" > "$T/other"
	ln -s "$T/nowhere" "$T/link"
	for f in key other link; do
		"$BFP" keygen "$T/$f" > /dev/null 2> "$T/err" && fail "keygen replaced $f"
		grep -q "exists" "$T/err" || fail "keygen over $f: $(cat "$T/err")"
	done
	cmp -s "$T/key" "$T/key.before" || fail "the existing key changed"
	[ "$(cat "$T/other")" = "not a key" ] || fail "the existing file changed"
	[ -L "$T/link" ] && [ ! -e "$T/nowhere" ] || fail "the symbolic link was followed or replaced"
	[ -z "$(ls -A "$T" | grep -v -e '^key$' -e '^key.before$' -e '^other$' -e '^link$' -e '^err$')" ] ||
		fail "left behind: $(ls -A "$T")"
	echo "ok - keygen never replaces a file, a key or a link, and says so: $(cat "$T/err")"
	;;
keygen-key-commits)
	"$BFP" keygen --id 9 "$T/key" 2>/dev/null || fail keygen
	"$BFP" synth -o "$T/traj" -p 300k -n 2 -S 3 2>/dev/null || fail synth
	"$SHIM" --key "$T/key" --buffer "$SHM" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 1)) --exit-after 60 \
		> "$T/shim.log" 2>&1 &
	PIDS=$!
	wait_line "listening on" "$T/shim.log" || fail "the shim did not start"
	"$BFP" publish --key "$T/key" --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 \
		--steps 2 --linger 1 > "$T/publish.log" 2>&1 || fail "publish"
	wait_line "committed version 1 -> 2" "$T/shim.log" || fail "version 2 not committed"
	grep -q "insecure" "$T/shim.log" "$T/publish.log" && fail "a process ran --insecure"
	python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM" || fail "buffer"
	echo "ok - a shim and a publisher holding a keygen key: 2 versions committed bit-exactly"
	;;
publish-needs-key)
	"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
	"$BFP" synth -o "$T/traj" -p 300k -n 1 -S 3 2>/dev/null || fail synth
	needs_key "bfpatch publish" "$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port
	"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --steps 1 --linger 0 --insecure \
		> "$T/publish.log" 2>&1 || fail "publish --insecure: $(cat "$T/publish.log")"
	warns "$T/publish.log" "127.0.0.1:$port"
	help_says "bfpatch publish" "$BFP" publish
	;;
shim-needs-key)
	"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
	"$BFP" synth -o "$T/traj" -p 300k -n 0 -S 3 2>/dev/null || fail synth
	needs_key bfpatch-shim "$SHIM" --buffer "$SHM" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 1))
	[ ! -e "$SHM" ] || fail "a refused shim made its buffer"
	"$SHIM" --buffer "$SHM" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
		--listen 127.0.0.1:$((port + 1)) --exit-after 0.5 --insecure > "$T/shim.log" 2>&1 ||
		fail "shim --insecure: $(cat "$T/shim.log")"
	warns "$T/shim.log" "127.0.0.1:$((port + 1))"
	help_says bfpatch-shim "$SHIM"
	;;
relay-needs-key)
	[ -x "$RELAY" ] || { echo "skip: no bfpatch-relay in this build"; exit 77; }
	"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
	P=bfpsec$$
	test_teardown() { rm -rf "/var/run/dpdk/$P"; }
	# refused before EAL starts: no hugepages, devices or run directory taken
	needs_key bfpatch-relay "$RELAY" --no-huge -m 512 --no-pci --file-prefix $P -l 0 \
		--vdev=net_null0 --log-level=lib.eal:error -- --ip 0:198.18.0.7
	[ ! -e "/var/run/dpdk/$P" ] || fail "a refused relay started EAL"
	timeout 60 "$RELAY" --no-huge -m 512 --no-pci --file-prefix $P -l 0 --vdev=net_null0 \
		--log-level=lib.eal:error -- --ip 0:198.18.0.7 --run-time 0.5 --insecure \
		> "$T/relay.log" 2>&1 || fail "relay --insecure: $(cat "$T/relay.log")"
	warns "$T/relay.log" "198.18.0.7"
	help_says bfpatch-relay "$RELAY"
	;;
*)
	fail "unknown scenario $SCENARIO"
	;;
esac
