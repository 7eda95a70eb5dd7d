# test_lib.sh: helpers the shell tests source.

# wait_line PATTERN FILE [TENTHS]: wait until FILE has a line matching
# PATTERN, checking every 0.1 s, at most TENTHS times (default 100);
# returns 1 if it never does.
wait_line() {
	for n in $(seq "${3:-100}"); do grep -q "$1" "$2" && return 0; sleep 0.1; done
	return 1
}

# make_key ID FILE: a new random key file (KEY_ID then 64 hex digits,
# mode 0600), as docs/SECURITY.md describes
make_key() {
	(umask 077; echo "$1 $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$2")
}

# test_setup NAME: $T (a scratch directory), $SHM (/dev/shm/bfpNAME<pid>,
# a prefix for weight buffers), an empty $PIDS (the processes the test
# starts and must end), and an EXIT trap that stops them, runs
# test_teardown (the test's own clean-up: namespaces, links; none unless
# the test defines it after this call) and removes $T and $SHM*. INT and
# TERM exit through it.
test_setup() {
	T=$(mktemp -d)
	SHM=/dev/shm/bfp$1$$
	PIDS=""
	trap test_cleanup EXIT
	trap 'exit 1' INT TERM
}
test_teardown() { :; }

# stop_pids: end every process in $PIDS, and the publisher in $PUB if the
# test keeps one there, and wait for them (a failure while a publisher
# without --steps runs must not wait for it for ever)
stop_pids() {
	for p in $PIDS ${PUB:-}; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	PIDS=""
}

test_cleanup() {
	stop_pids
	test_teardown
	rm -rf "$T" "$SHM" "$SHM".*
}

# fail MESSAGE: print it, end the test's processes (so their logs are
# whole), print each log in $T without its zero-counter lines, the last
# FAIL_LINES (default 40) lines, and exit 1.
fail() {
	echo "FAIL: $*"
	stop_pids
	for f in "$T"/*.log; do echo "== $f"; grep -vE " 0$" "$f" | tail -n "${FAIL_LINES:-40}"; done
	exit 1
}

# Checks that go on after a failure (the CLI tests): pass NAME, bad NAME
# (counted in $fails), check NAME SHELL-CONDITION, and expect_fail NAME
# OUTFILE CMD...: CMD must exit non-zero with a message on stderr and
# leave nothing named OUTFILE* behind (uses $T for its output).
fails=0
pass() { echo "ok   - $1"; }
bad() { echo "FAIL - $1"; fails=$((fails + 1)); }
check() { if eval "$2"; then pass "$1"; else bad "$1"; fi; }
expect_fail() {
	name=$1 out=$2
	shift 2
	if "$@" >"$T/stdout" 2>"$T/stderr"; then
		bad "$name (exit 0)"
	elif [ ! -s "$T/stderr" ]; then
		bad "$name (no error message)"
	elif [ -n "$out" ] && ls "$out"* >/dev/null 2>&1; then
		bad "$name (left $out behind)"
	else
		pass "$name: $(head -n 1 "$T/stderr")"
	fi
}
