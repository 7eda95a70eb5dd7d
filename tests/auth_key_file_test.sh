#!/bin/sh
# auth_key_file_test.sh BFPATCH SHIM: a key file others can read
# (docs/SECURITY.md) is refused at start, with the fix in the message.
set -u
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup authkey
"$SHIM" --help | grep -q -- "--key FILE" || { echo "skip: built without libsodium"; exit 77; }
umask 077
make_key 1 "$T/k1"
cp "$T/k1" "$T/loose" && chmod 644 "$T/loose"
"$SHIM" --buffer "$SHM.z" --upstream 127.0.0.1:1 --key "$T/loose" --exit-after 1 \
	> "$T/loose.log" 2>&1 &&
	fail "a key file readable by others was accepted"
grep -q "chmod 600" "$T/loose.log" || fail "no clear error for a loose key file"
echo "ok - a key file readable by others refused, with the fix said"
