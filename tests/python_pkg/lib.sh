# lib.sh: what the Python package's scenarios (tests/python_pkg/NAME.sh
# BFPATCH SHIM BUILD_ROOT) share. Each is one meson test that runs alone:
# sourced after `set -u`, this skips (77) without python3-numpy or
# python3-venv, sets BFP, SHIM, HERE (tests/), $port (127.0.0.1 ports
# from it up are the scenario's) and PY, the Python of BUILD_ROOT/pyenv,
# a venv with this tree's package installed as users install it
# (python/make-venv.sh, which ./run.sh test runs too); through test_setup
# (test_lib.sh) $T, $SHM, $PIDS and the EXIT trap that ends the
# scenario's processes and removes its files however it ends; and makes
# $T/key (bfpatch keygen), with $K, the --key every publisher and shim
# takes.
BFP=$1
SHIM=$2
BUILD=$3
HERE=$(cd "$(dirname "$0")/.." && pwd)
/usr/bin/python3 -c "import numpy, venv, ensurepip" 2>/dev/null ||
	{ echo "skip: needs python3-numpy and python3-venv"; exit 77; }
"$HERE/../python/make-venv.sh" "$BUILD/pyenv" || { echo "FAIL: python/make-venv.sh"; exit 1; }
PY=$BUILD/pyenv/bin/python
. "$HERE/test_lib.sh"
test_setup pp
port=$((20000 + ($$ + 11) % 20000))
"$BFP" keygen "$T/key" 2>/dev/null || exit 1
K="--key $T/key"

# every_dtype FILE: a safetensors checkpoint with a tensor of each
# safetensors dtype, 0-d ones, an empty one, and tensors at odd offsets,
# written here byte by byte (not by the package under test)
every_dtype() {
	/usr/bin/python3 - "$1" <<'PYEOF'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(7)
specs = [("embed.bf16", "BF16", "<u2", (4, 6)), ("pos.i64", "I64", "<i8", (5,)),
         ("step.i64", "I64", "<i8", ()), ("scale.f32", "F32", "<f4", ()),
         ("mask.u8", "U8", "u1", (7,)), ("keep.bool", "BOOL", "?", (3,)),
         ("norm.f16", "F16", "<f2", (3,)), ("lr.f64", "F64", "<f8", (2,)),
         ("q.i8", "I8", "i1", (5,)), ("h.i16", "I16", "<i2", (3,)),
         ("hu.u16", "U16", "<u2", (3,)), ("c.i32", "I32", "<i4", (2, 2)),
         ("cu.u32", "U32", "<u4", (2,)), ("big.u64", "U64", "<u8", (2,)),
         ("fp8a.f8", "F8_E4M3", "u1", (5,)), ("fp8b.f8", "F8_E5M2", "u1", (3,)),
         ("empty.bf16", "BF16", "<u2", (0, 3)), ("tail.bool", "BOOL", "?", ())]
meta, data = {}, b""
for name, st, npdt, shape in specs:
    n = int(np.prod(shape)) if shape else 1
    if npdt == "?":
        a = rng.integers(0, 2, n).astype(bool)
    elif np.dtype(npdt).kind == "f":
        a = rng.standard_normal(n).astype(npdt)
    else:
        a = rng.integers(0, 256, n * np.dtype(npdt).itemsize, dtype=np.uint8).view(npdt)
    b = a.tobytes()
    meta[name] = {"dtype": st, "shape": list(shape), "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(meta).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PYEOF
}

# shim_buffer CKPT: $SHM made from CKPT by a shim that then ends (no
# publisher runs; it JOINs nobody)
shim_buffer() {
	"$SHIM" $K --buffer "$SHM" --init "$1" --upstream 127.0.0.1:$port \
		--listen 127.0.0.1:$((port + 1)) --exit-after 1 > "$T/shim0.log" 2>&1 ||
		{ cat "$T/shim0.log"; echo "FAIL: the shim did not make $SHM"; exit 1; }
}
