#!/bin/sh
# report_test.sh BFPATCH: bfpatch report end to end. Builds pages from a
# synthetic trajectory's patches and checkpoints, with and without the
# hand-written event-log fixtures in tests/report/, renders them in
# headless Chromium and checks the DOM it leaves (report_check.py: numbers
# against `bfpatch info --json`, numpy counts from the checkpoints and the
# fixtures). Bad input must fail with a message and leave no page.
# Exits 77 (skipped) without chromium or /usr/bin/python3 with numpy.
# REPORT_SCREENSHOT=FILE copies the full-page screenshot of the report made
# from the patches and checkpoints alone (no fixtures) to FILE.
set -u
BFP=$1
case $BFP in /*) ;; *) BFP=$PWD/$BFP ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
FIX=$HERE/report
T=$(mktemp -d)
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
. "$HERE/test_lib.sh"
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
	echo "SKIP: no chromium (Debian package chromium)"
	exit 77
fi
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
	echo "SKIP: /usr/bin/python3 has no numpy (Debian package python3-numpy)"
	exit 77
fi
# headless Chromium without sandbox (tests may run as root), GPU, first-run
# dialogs or background network traffic; each run gets a new profile
chrome() { # OUT-OPTION URL
	prof=$(mktemp -d "$T/profile.XXXXXX")
	timeout 60 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync \
		--user-data-dir="$prof" --hide-scrollbars "$@" 2>>"$T/chrome.log"
}

"$BFP" synth -o "$T/traj" -p 1M -n 3 -S 7 2>/dev/null || { echo "synth failed"; exit 1; }
for v in 1 2 3; do
	"$BFP" diff -q -b $((v - 1)) "$T/traj/step-000$((v - 1)).safetensors" \
		"$T/traj/step-000$v.safetensors" -o "$T/p$v.bfp" || { echo "diff failed"; exit 1; }
	"$BFP" info --json "$T/p$v.bfp" >"$T/p$v.json" || { echo "info failed"; exit 1; }
done
P="$T/p1.bfp $T/p2.bfp $T/p3.bfp"
EV="-e $FIX/publish.jsonl -e $FIX/relay.jsonl -e $FIX/shim-0.jsonl -e $FIX/shim-1.jsonl"

# 1. the full page: patches, checkpoints and event logs
if "$BFP" report -o "$T/full.html" -T "$T/traj" $EV --link 1gbit,10gbit --rollout 20s-40s \
	$P 2>"$T/stderr"; then
	pass "report with patches, trajectory and event logs"
else
	bad "report with patches, trajectory and event logs: $(cat "$T/stderr")"
fi
grep -q -E '<(script|link|img|iframe)[^>]* (src|href)=' "$T/full.html" &&
	bad "page references an external resource" || pass "page is self-contained (no src/href)"
chrome --dump-dom "file://$T/full.html" >"$T/full.dom"
/usr/bin/python3 "$HERE/report_check.py" full "$T/full.dom" "$T/traj" "$FIX" 3 \
	"$T/p1.json" "$T/p2.json" "$T/p3.json" || fails=$((fails + 1))

# 2. a patch alone: its own sections drawn, the others say what they need
"$BFP" report -o "$T/alone.html" "$T/p3.bfp" 2>"$T/stderr" && pass "report of a patch alone" ||
	bad "report of a patch alone: $(cat "$T/stderr")"
chrome --dump-dom "file://$T/alone.html" >"$T/alone.dom"
/usr/bin/python3 "$HERE/report_check.py" alone "$T/alone.dom" "$T/p3.json" || fails=$((fails + 1))

# 3. base + patch without the target: target computed and verified
"$BFP" report -o "$T/base.html" -B "$T/traj/step-0002.safetensors" "$T/p3.bfp" 2>"$T/stderr" &&
	grep -q 'section id="heatmap" data-status="ok"' "$T/base.html" &&
	pass "--base with a patch draws the heatmap" || bad "--base with a patch: $(cat "$T/stderr")"

# 4. a log cut short by a crash: the unterminated last line is skipped, noted
cp "$FIX/shim-1.jsonl" "$T/cut.jsonl"
printf '{"t":1764470099.0,"src":"shim","id":"actor-1","ev":"sta' >>"$T/cut.jsonl"
"$BFP" report -o "$T/cut.html" -e "$T/cut.jsonl" "$T/p3.bfp" 2>"$T/stderr" &&
	grep -q 'unterminated last line' "$T/cut.html" &&
	pass "unterminated last event line skipped and noted" || bad "cut-short log: $(cat "$T/stderr")"

# 4b. the publisher's log alone: the relay it sends to (JOINed with version
# 0xFFFFFFFF, docs/PROTOCOL.md) is drawn as a relay, not as a version
"$BFP" report -o "$T/pubonly.html" -e "$FIX/publish.jsonl" "$T/p3.bfp" 2>"$T/stderr" &&
	grep -q '>relay 10.0.0.2:7400<' "$T/pubonly.html" &&
	grep -q '>a relay (holds no weights)<' "$T/pubonly.html" &&
	! grep -q 'v429496729' "$T/pubonly.html" &&
	pass "a subscriber that JOINed as a relay is drawn as one" ||
	bad "a relay subscriber in the publisher's log: $(cat "$T/stderr")"

# 5. the screenshot (README): the page from patches and checkpoints alone
(cd "$T" && "$BFP" report -o real.html -T traj --link 1gbit,10gbit,100gbit --rollout 20s-40s \
	p1.bfp p2.bfp p3.bfp 2>/dev/null) || bad "report for the screenshot"
chrome --dump-dom "file://$T/real.html" >"$T/real.dom"
H=$(sed -n 's/.*data-height="\([0-9]*\)".*/\1/p' "$T/real.dom" | head -n 1)
if [ -n "$H" ] && chrome --window-size=1000,"$H" --screenshot="$T/real.png" "file://$T/real.html" &&
	[ "$(head -c 8 "$T/real.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]; then
	pass "full-page screenshot (1000x$H PNG)"
	[ -n "${REPORT_SCREENSHOT:-}" ] && cp "$T/real.png" "$REPORT_SCREENSHOT"
else
	bad "screenshot"
fi

# 6. bad input: an error message, a non-zero exit, no page
head -c 2000 "$T/p1.bfp" >"$T/trunc.bfp"
cp "$T/p1.bfp" "$T/corrupt.bfp"
printf '\377' | dd of="$T/corrupt.bfp" bs=1 seek=100 conv=notrunc 2>/dev/null
sed '3s/.*/{"t":1764470010.0,"src":"publish",/' "$FIX/publish.jsonl" >"$T/malformed.jsonl"
sed '3s/"ev":"encode_begin",//' "$FIX/publish.jsonl" >"$T/nokey.jsonl"
O=$T/out.html
expect_fail "unknown option" "$O" "$BFP" report -o "$O" --frobnicate "$T/p1.bfp"
expect_fail "no output" "" "$BFP" report "$T/p1.bfp"
expect_fail "no input" "$O" "$BFP" report -o "$O"
expect_fail "truncated patch" "$O" "$BFP" report -o "$O" "$T/trunc.bfp"
expect_fail "corrupt patch (CRC)" "$O" "$BFP" report -o "$O" "$T/corrupt.bfp"
expect_fail "missing patch file" "$O" "$BFP" report -o "$O" "$T/nope.bfp"
expect_fail "malformed JSON line" "$O" "$BFP" report -o "$O" -e "$T/malformed.jsonl" "$T/p1.bfp"
expect_fail "event without ev" "$O" "$BFP" report -o "$O" -e "$T/nokey.jsonl" "$T/p1.bfp"
expect_fail "bad --link" "$O" "$BFP" report -o "$O" --link 1gbyte "$T/p1.bfp"
expect_fail "bad --rollout" "$O" "$BFP" report -o "$O" --rollout 40s-20s "$T/p1.bfp"
expect_fail "two patches of one version" "$O" "$BFP" report -o "$O" "$T/p1.bfp" "$T/p1.bfp"
expect_fail "--step without its patch" "$O" "$BFP" report -o "$O" --step 9 "$T/p1.bfp"
expect_fail "base checkpoint of another version" "$O" "$BFP" report -o "$O" \
	-B "$T/traj/step-0000.safetensors" "$T/p3.bfp"
expect_fail "target that the patch does not give" "$O" "$BFP" report -o "$O" \
	-B "$T/traj/step-0002.safetensors" -G "$T/traj/step-0002.safetensors" "$T/p3.bfp"
mkdir "$T/ro" && chmod 555 "$T/ro"
if [ "$(id -u)" -ne 0 ]; then
	expect_fail "unwritable output directory" "$T/ro/out.html" "$BFP" report -o "$T/ro/out.html" "$T/p1.bfp"
fi
expect_fail "output in a missing directory" "$T/none/out.html" "$BFP" report -o "$T/none/out.html" "$T/p1.bfp"
"$BFP" report --help | grep -q -- '--rollout' && pass "--help" || bad "--help"

[ $fails -eq 0 ] && echo "all report tests passed" || echo "$fails report test(s) failed"
[ $fails -eq 0 ]
