#!/bin/sh
# run_fuzz.sh BUILD_DIR SECONDS [HARNESS...]: run each libFuzzer harness
# (built by a clang configuration, e.g. build-clang) for SECONDS on a
# scratch copy of its committed corpus; new crash reproducers are written
# to tests/fuzz/crashes/ and the run fails. Prints execs per harness.
set -eu
b=$1
secs=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
names=${*:-frame safetensors patch relay control auth}
mkdir -p "$here/crashes"
rc=0
for h in $names; do
	bin=$b/tests/fuzz/fuzz_$h
	[ -x "$bin" ] || { echo "no $bin (configure with CC=clang)"; exit 2; }
	work=$(mktemp -d)
	cp "$here/corpus/$h/"* "$work/"
	if "$bin" -max_total_time="$secs" -print_final_stats=1 -max_len=9100 \
		-artifact_prefix="$here/crashes/$h-" "$work" > "$work.log" 2>&1; then
		echo "$h: $(grep -E 'stat::number_of_executed_units' "$work.log" | awk '{print $2}') execs in ${secs}s, no crash"
	else
		echo "$h: CRASH, see $work.log and tests/fuzz/crashes/"
		rc=1
	fi
	rm -rf "$work"
done
exit $rc
