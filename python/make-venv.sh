#!/bin/sh
# make-venv.sh DIR: a virtual environment at DIR that sees the system's
# packages (Debian's python3-numpy and python3-torch) and holds the bfpatch
# package of this tree, installed offline: no index is asked, nothing is
# downloaded (Debian's python3-setuptools and python3-wheel build it). An
# existing DIR is kept and the package installed again. The package is
# built from a copy, since pip builds in the directory it is given.
set -eu
dir=$1
src=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-/usr/bin/python3}
[ -x "$dir/bin/python" ] || "$PY" -m venv --system-site-packages "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$src/pyproject.toml" "$src/README.md" "$src/bfpatch" "$tmp/"
find "$tmp" -name __pycache__ -prune -exec rm -rf {} +
PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/bin/python" -m pip install -q --no-index \
	--no-build-isolation --no-deps --force-reinstall "$tmp"
