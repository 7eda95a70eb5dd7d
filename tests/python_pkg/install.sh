#!/bin/sh
# install.sh: the Python package installs as README says, into a fresh
# virtual environment that sees Debian's numpy and torch, with no network
# (in a network namespace of its own where unshare(1) can make one, else
# with pip told not to ask an index), and imports from there; the module's
# first name (host_shim/python/bfpatch_buffer.py) is the same code.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
$PY -c "import numpy, venv, ensurepip" 2>/dev/null ||
	{ echo "skip: needs python3-numpy and python3-venv"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# a copy: pip builds in the directory it is given
cp -R "$ROOT/python" "$T/src"
NET="" OFFLINE="--no-index"
if unshare -n true 2>/dev/null; then
	NET="unshare -n" OFFLINE=""
	echo "no network: pip runs in an empty network namespace"
fi
$NET $PY -m venv --system-site-packages "$T/env" || fail "python3 -m venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 $NET "$T/env/bin/pip" install $OFFLINE --no-build-isolation \
	--no-deps "$T/src" > "$T/pip.log" 2>&1 || { cat "$T/pip.log"; fail "pip install"; }
rm -rf "$T/src"
cd "$T" && "$T/env/bin/python" - "$T/env" "$ROOT" <<'PYEOF' || fail "the installed package"
import os, sys, tomllib
import bfpatch, numpy
env, root = sys.argv[1], sys.argv[2]
assert bfpatch.__file__.startswith(env + "/"), bfpatch.__file__
assert numpy.__file__.startswith("/usr/lib/python3/"), numpy.__file__
want = tomllib.load(open(os.path.join(root, "python", "pyproject.toml"), "rb"))["project"]["version"]
assert bfpatch.__version__ == want, (bfpatch.__version__, want)
from bfpatch import WeightBuffer, READY, COMMITTING, RESYNC
print("ok - bfpatch %s installed offline into a venv, imported from %s; numpy %s from Debian"
      % (bfpatch.__version__, os.path.dirname(bfpatch.__file__), numpy.__version__))
PYEOF
# the first name, from the tree
$PY - "$ROOT" <<'PYEOF' || fail "bfpatch_buffer"
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "host_shim", "python"))
import bfpatch_buffer, bfpatch.buffer
assert bfpatch_buffer.WeightBuffer is bfpatch.buffer.WeightBuffer
assert os.path.realpath(bfpatch.buffer.__file__).startswith(os.path.realpath(sys.argv[1]) + "/python/")
print("ok - bfpatch_buffer (host_shim/python) is the tree's bfpatch.buffer")
PYEOF
