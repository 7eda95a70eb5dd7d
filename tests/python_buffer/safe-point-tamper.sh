#!/bin/sh
# safe-point-tamper.sh BFPATCH SHIM (set-up in lib.sh): the actor writes
# into its weights after the shim prepared the patch: the commit checks
# every range after writing, refuses, and resyncs.
set -u
. "$(dirname "$0")/lib.sh"
safe_point_run 3 tamper
grep -q "failed verification" "$T/shim3.log" || { cat "$T/shim3.log"; echo "FAIL: the tampered commit was not refused"; exit 1; }
echo "ok - a weight the actor overwrote after the patch was prepared is caught at the commit"
