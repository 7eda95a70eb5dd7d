#!/bin/sh
# safe-point.sh BFPATCH SHIM (set-up in lib.sh): the safe-point
# handshake: the shim stages version 1 and waits for the actor (Python,
# tests/python/check_safe_point.py), which lets it commit.
set -u
. "$(dirname "$0")/lib.sh"
safe_point_run 2
grep -q "waiting for the actor's safe point" "$T/shim2.log" || { cat "$T/shim2.log"; exit 1; }
# while it waited, the shim decoded and verified every frame against the
# buffer, so the commit (whose bytes Python just compared) only wrote values
grep "committed version 0 -> 1" "$T/shim2.log" |
	grep -Eq ": ([0-9]+) frames, .*, \1 of the frames decoded and verified while staged" ||
	{ cat "$T/shim2.log"; echo "FAIL: not every frame was prepared while staged"; exit 1; }
echo "ok - Python gates a commit at its safe point, from frames prepared while it waited"
