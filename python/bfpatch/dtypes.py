"""The safetensors dtypes of a weight buffer and the numpy and torch dtypes
that view them, one table for both directions: what WeightBuffer.tensor()
returns for a dtype is exactly what Publisher.publish() accepts for it.

A dtype that numpy or this torch has no type for is viewed as its bit
patterns in an integer type of the same width: BF16 as numpy uint16,
F8_E4M3 and F8_E5M2 as uint8 (torch >= 2.1 has float8 types), U16, U32,
U64 in torch < 2.3 as int16, int32, int64. Nothing is ever converted, so
a value always keeps its bits. numpy and torch are imported when first
needed: the buffer's header and handshake work without them.
"""
from typing import Any, Dict, Optional, Tuple

# safetensors dtype: (numpy dtype, torch dtype names, first the native
# one, then the same-width bit-pattern fallback)
_TABLE: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "BF16": ("<u2", ("bfloat16",)),
    "F16": ("<f2", ("float16",)),
    "F32": ("<f4", ("float32",)),
    "F64": ("<f8", ("float64",)),
    "I8": ("i1", ("int8",)),
    "U8": ("u1", ("uint8",)),
    "I16": ("<i2", ("int16",)),
    "U16": ("<u2", ("uint16", "int16")),
    "I32": ("<i4", ("int32",)),
    "U32": ("<u4", ("uint32", "int32")),
    "I64": ("<i8", ("int64",)),
    "U64": ("<u8", ("uint64", "int64")),
    "BOOL": ("?", ("bool",)),
    "F8_E4M3": ("u1", ("float8_e4m3fn", "uint8")),
    "F8_E5M2": ("u1", ("float8_e5m2", "uint8")),
}

DTYPES = tuple(_TABLE)


_SIZE = {"1": 1, "2": 2, "4": 4, "8": 8}


def itemsize(st: str) -> int:
    """Bytes per element of safetensors dtype st."""
    code = _TABLE[st][0]
    return 1 if code == "?" else _SIZE[code[-1]]


def numpy_dtype(st: str) -> Any:
    """The numpy dtype that views safetensors dtype st."""
    import numpy as np
    try:
        return np.dtype(_TABLE[st][0])
    except KeyError:
        raise TypeError("unknown safetensors dtype %r" % (st,)) from None


def torch_dtype(st: str) -> Any:
    """The torch dtype that views safetensors dtype st (this torch's own
    type, else the same-width integer type of its bit patterns)."""
    import torch
    try:
        names = _TABLE[st][1]
    except KeyError:
        raise TypeError("unknown safetensors dtype %r" % (st,)) from None
    for n in names:
        t = getattr(torch, n, None)
        if isinstance(t, torch.dtype):
            return t
    raise TypeError("torch %s has no type for %s" % (torch.__version__, st))


def unsigned_of(dtype: Any) -> Any:
    """The unsigned integer numpy dtype as wide as dtype: what a copy of
    bit patterns goes through, so that no floating-point unit touches
    them."""
    import numpy as np
    return np.dtype("u%d" % dtype.itemsize)


# numpy uint16 arrays make BF16 tensors in a layout: numpy has no
# bfloat16, and BF16 bit patterns are what bfpatch moves
_FROM_NUMPY = {"<u2": "BF16", "<f2": "F16", "<f4": "F32", "<f8": "F64", "|i1": "I8",
               "|u1": "U8", "<i2": "I16", "<i4": "I32", "<u4": "U32", "<i8": "I64",
               "<u8": "U64", "|b1": "BOOL"}


def st_of(array: Any) -> Optional[str]:
    """The safetensors dtype a numpy array or torch tensor makes in a new
    layout, or None for one bfpatch cannot hold."""
    import numpy as np
    dt = getattr(array, "dtype", None)
    if isinstance(dt, np.dtype):
        return _FROM_NUMPY.get(dt.str)  # big-endian arrays are not taken
    name = str(dt).replace("torch.", "")
    for st, (_, names) in _TABLE.items():
        if names[0] == name:
            return st
    return None
