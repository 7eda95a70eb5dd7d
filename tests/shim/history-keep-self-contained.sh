#!/bin/sh
# history-keep-self-contained.sh BFPATCH SHIM (set-up in lib.sh):
# the history keeps the newest --keep patches, and a temporary a killed
# publisher left there is removed at start; with --self-contained its
# sparse frames are of encoding 1, none sharing a model (5, 6)
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/hist2"
: > "$T/hist2/v00000005-v00000006.bfp.tmp.Ab12Cd"
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --steps 3 --keep 2 --linger 0 \
	--self-contained --history "$T/hist2" > "$T/publish13.log" 2>&1 ||
	fail "publish --keep 2 --history --self-contained"
[ "$(ls "$T/hist2" | tr '\n' ' ')" = "v00000001-v00000002.bfp v00000002-v00000003.bfp " ] ||
	fail "history --keep 2 holds $(ls "$T/hist2" | tr '\n' ' ')(want the two newest patches)"
grep -q "removed v00000005-v00000006.bfp.tmp.Ab12Cd" "$T/publish13.log" ||
	fail "the leftover temporary was not reported"
e2=$(encodings "$T/hist2")
case " $e2 " in *" 5 "* | *" 6 "*) fail "publish --self-contained: frames sharing a model ($e2)" ;; esac
case " $e2 " in *" 1 "*) ;; *) fail "publish --self-contained: no frames of encoding 1 ($e2)" ;; esac
echo "ok - the history keeps the newest patches, a leftover temporary removed, --self-contained frames"
