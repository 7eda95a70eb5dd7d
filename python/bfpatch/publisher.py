"""The trainer's side: commit versions from memory into a weight buffer
that `bfpatch publish --buffer PATH` encodes and sends to the actors.

    pub = Publisher("/dev/shm/trainer", dict(model.named_parameters()))
    for step in range(1, steps + 1):
        train_step()
        pub.publish(model.named_parameters(), version=step)

publish() copies each tensor once, straight into the buffer, as its bits
(no cast, no floating-point operation: BF16 weights go in as
torch.bfloat16 or numpy uint16 bit patterns), then commits the version
with the buffer's commit protocol. That protocol is not written here:
it is libbfpatch_wbuf.so (include/bfpatch_wbuf.h), the C code the shim
commits with, loaded through ctypes. Found through $BFPATCH_WBUF_LIB (its
path), else the dynamic linker's search (where `meson install` put it).

A rank of a sharded trainer (FSDP, ZeRO, tensor parallel) publishes only
the tensors it holds:

    pub = Publisher("/dev/shm/rank3", full_layout, owned=names_of_rank_3)
    pub.publish(rank_3_tensors, version=step)

The layout is still the whole model's (so frames carry the model's id);
`owned` is written beside the buffer, PATH.owned, where
`bfpatch publish --buffer PATH --lead HOST:PORT --rank 3` reads it and
encodes those tensors alone; the lead publisher merges the ranks' frames
(docs/INTEGRATION.md, "Sharded trainers").
"""
import ctypes
import json
import os
import threading
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from . import dtypes as _dt
from .buffer import TensorInfo, parse_tensor_table

# a layout: a safetensors file, or name -> tensor (its values are the
# first version's) or name -> (safetensors dtype, shape) (zeros)
Layout = Union[str, "os.PathLike[str]", Mapping[str, Any], Iterable[Tuple[str, Any]]]
NamedTensors = Union[Mapping[str, Any], Iterable[Tuple[str, Any]]]

_ERRLEN = 1024
_lib_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


class LayoutError(ValueError):
    """A tensor, or a whole layout, that is not the buffer's: another
    name, shape or dtype, or a tensor missing."""


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = os.environ.get("BFPATCH_WBUF_LIB") or "libbfpatch_wbuf.so"
        try:
            lib = ctypes.CDLL(path)
        except OSError as x:
            raise OSError("bfpatch.Publisher needs libbfpatch_wbuf.so from bfpatch's C build "
                          "(meson install puts it where the dynamic linker finds it; or set "
                          "BFPATCH_WBUF_LIB to its path, BUILD/publisher/libbfpatch_wbuf.so): "
                          "%s" % x) from None
        lib.bfp_wbuf_abi.restype = ctypes.c_int
        if lib.bfp_wbuf_abi() != 1:
            raise OSError("%s: interface %d, this package speaks 1" % (path, lib.bfp_wbuf_abi()))
        c, p, sz, u32, u64 = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_uint32, ctypes.c_uint64)
        lib.bfp_wbuf_create.argtypes = [c, p, sz, p, u64, u32, c, sz]
        lib.bfp_wbuf_create.restype = ctypes.c_int
        lib.bfp_wbuf_open.argtypes = [c, c, sz]
        lib.bfp_wbuf_open.restype = p
        lib.bfp_wbuf_close.argtypes = [p]
        lib.bfp_wbuf_close.restype = None
        lib.bfp_wbuf_version.argtypes = [p]
        lib.bfp_wbuf_version.restype = u32
        lib.bfp_wbuf_state.argtypes = [p]
        lib.bfp_wbuf_state.restype = u32
        lib.bfp_wbuf_model_id.argtypes = [p]
        lib.bfp_wbuf_model_id.restype = u64
        lib.bfp_wbuf_st_header.argtypes = [p, ctypes.POINTER(sz)]
        lib.bfp_wbuf_st_header.restype = p
        lib.bfp_wbuf_data.argtypes = [p, ctypes.POINTER(u64)]
        lib.bfp_wbuf_data.restype = p
        lib.bfp_wbuf_begin.argtypes = [p, u32, c, sz]
        lib.bfp_wbuf_begin.restype = ctypes.c_int
        lib.bfp_wbuf_commit.argtypes = [p, c, sz]
        lib.bfp_wbuf_commit.restype = ctypes.c_int
        _lib = lib
        return lib


def _write_atomic(path: "Union[str, os.PathLike[str]]", chunks: Sequence[Any]) -> None:
    """Write chunks to path through a temporary beside it, synced, then
    renamed over path: path holds the old file or the new one, never a
    part; the temporary is removed on any error."""
    tmp = "%s.tmp.%d" % (os.fspath(path), os.getpid())
    try:
        with open(tmp, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _pairs(tensors: Any, what: str) -> List[Tuple[str, Any]]:
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    out: List[Tuple[str, Any]] = []
    seen = set()
    for pair in items:
        try:
            name, t = pair
        except (TypeError, ValueError):
            raise TypeError("%s: (name, tensor) pairs or a mapping, not %r"
                            % (what, type(pair).__name__)) from None
        if not isinstance(name, str):
            raise TypeError("%s: tensor names are strings, not %r" % (what, name))
        if name in seen:
            raise LayoutError("%s: tensor %r given twice" % (what, name))
        seen.add(name)
        out.append((name, t))
    return out


def _spec(name: str, t: Any) -> Tuple[str, Tuple[int, ...]]:
    """(safetensors dtype, shape) of a layout entry: a tensor, or a
    (dtype, shape) pair."""
    if isinstance(t, tuple) and len(t) == 2 and isinstance(t[0], str):
        st, shape = t
        if st not in _dt.DTYPES:
            raise LayoutError("tensor %r: unknown safetensors dtype %r" % (name, st))
        return st, tuple(int(d) for d in shape)
    st = _dt.st_of(t)
    if st is None:
        raise LayoutError("tensor %r: no safetensors dtype for %s" % (name, getattr(t, "dtype", t)))
    return st, tuple(int(d) for d in t.shape)


def _header(entries: Sequence[Tuple[str, str, Tuple[int, ...]]]) -> Tuple[bytes, Dict[str, TensorInfo]]:
    """A safetensors header (8-byte length, JSON padded with spaces to a
    multiple of 8 bytes) laying entries out in their order, and its table."""
    meta: Dict[str, Any] = {}
    table: Dict[str, TensorInfo] = {}
    at = 0
    for name, st, shape in entries:
        n = _dt.itemsize(st)
        for d in shape:
            n *= d
        meta[name] = {"dtype": st, "shape": list(shape), "data_offsets": [at, at + n]}
        table[name] = (st, shape, at, at + n)
        at += n
    js = json.dumps(meta, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return len(js).to_bytes(8, "little") + js, table


def _describe(t: Any) -> str:
    if _is_torch(t):
        return "torch %s" % str(t.dtype).replace("torch.", "")
    return "numpy %s" % getattr(t, "dtype", type(t).__name__)


class Publisher:
    """A trainer's weight buffer, held as its one writer."""

    def __init__(self, path: str, layout: Optional[Layout] = None, version: int = 0,
                 owned: Optional[Iterable[str]] = None) -> None:
        """Open the weight buffer at path, creating it if there is none.

        layout is the model's: a safetensors file (its tensors and, for a
        new buffer, its values), or name -> tensor (numpy arrays or torch
        tensors, e.g. dict(model.named_parameters()): dtype and shape; a
        new buffer starts with their values) or name -> (safetensors
        dtype, shape) (a new buffer starts with zeros), laid out in the
        given order, as a safetensors file of the same tensors in that
        order is. numpy uint16 arrays are taken as BF16 bit patterns (give
        ("U16", shape) for a true U16 tensor). A new buffer holds version
        `version`. An existing buffer keeps its contents and version, and
        must hold this layout (LayoutError if not); layout None takes it
        as it is.

        owned: the names of the tensors this process publishes, for one
        rank of a sharded trainer (default None: every tensor). Each must
        be in the layout (LayoutError if not); publish() then takes
        exactly these. They are written, in layout order, one a line, to
        PATH.owned (beside the buffer, replaced atomically), where
        `bfpatch publish --buffer PATH --lead ...` reads them when it
        starts; with owned None a PATH.owned left there is removed.

        The buffer is locked for this process until close(): a second
        writer, or a bfpatch-shim, is refused (OSError). Raises OSError
        without libbfpatch_wbuf.so."""
        self.path = os.fspath(path)
        self._lib = _load()
        self._w: Optional[int] = None
        err = ctypes.create_string_buffer(_ERRLEN)
        bpath = os.fsencode(self.path)
        want: Optional[Dict[str, TensorInfo]] = None
        if layout is not None:
            want = self._prepare(layout, bpath, version, err)
        w = self._lib.bfp_wbuf_open(bpath, err, _ERRLEN)
        if not w:
            raise OSError(err.value.decode(errors="replace"))
        self._w = w
        try:
            n = ctypes.c_size_t()
            hp = self._lib.bfp_wbuf_st_header(w, ctypes.byref(n))
            nb = ctypes.c_uint64()
            dp = self._lib.bfp_wbuf_data(w, ctypes.byref(nb))
            self.data_bytes = nb.value
            if n.value:
                self.tensors = parse_tensor_table(ctypes.string_at(hp, n.value), nb.value)
            else:  # a raw model: one BF16 tensor, named ""
                self.tensors = {"": ("BF16", (nb.value // 2,), 0, nb.value)}
            """name -> (safetensors dtype, shape, first byte, end byte)"""
            if want is not None and want != self.tensors:
                raise LayoutError("%s holds another layout: %s" % (self.path, _diff(self.tensors, want)))
            # the data section, reached only through publish()
            self._data = (ctypes.c_ubyte * max(nb.value, 1)).from_address(dp)
            self.owned: Optional[Tuple[str, ...]] = None
            """the tensors publish() takes (None: all of the layout)"""
            self._own(owned)
        except BaseException:
            self.close()
            raise

    def _own(self, owned: Optional[Iterable[str]]) -> None:
        """Check the owned names and write PATH.owned (or remove it)."""
        opath = self.path + ".owned"
        if owned is None:
            try:
                os.unlink(opath)
            except FileNotFoundError:
                pass
            return
        if isinstance(owned, str):
            raise TypeError("owned: an iterable of tensor names, not one string")
        names = list(owned)
        seen = set()
        for name in names:
            if not isinstance(name, str):
                raise TypeError("owned: tensor names are strings, not %r" % (name,))
            if name not in self.tensors:
                raise LayoutError("owned tensor %r is not in the buffer's layout (%d tensors)"
                                  % (name, len(self.tensors)))
            if name in seen:
                raise LayoutError("owned tensor %r given twice" % name)
            if "\n" in name or "\r" in name or name.startswith("#") or not name:
                raise LayoutError("owned tensor %r: a name PATH.owned cannot hold (one name "
                                  "a line; '#' starts a comment)" % name)
            seen.add(name)
        if not names:
            raise LayoutError("owned: no tensor (a rank publishes at least one)")
        # a 16-bit word two tensors share (a boundary at an odd byte) is
        # published by one rank, which needs both tensors' bytes of it
        spans = sorted((b, e, n) for n, (_, _, b, e) in self.tensors.items() if e > b)
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if e0 % 2 and (n0 in seen) != (n1 in seen):
                raise LayoutError("tensors %r and %r share a 16-bit word (a boundary at byte "
                                  "%d): one rank owns both or neither" % (n0, n1, e0))
        self.owned = tuple(n for n in self.tensors if n in seen)  # layout order
        _write_atomic(opath, ["".join(n + "\n" for n in self.owned).encode("utf-8")])

    def _prepare(self, layout: Layout, bpath: bytes, version: int,
                 err: Any) -> Dict[str, TensorInfo]:
        """The layout's tensor table; creates the buffer if there is none."""
        import numpy as np
        if isinstance(layout, (str, os.PathLike)):
            with open(layout, "rb") as f:
                raw = f.read()
            n = int.from_bytes(raw[:8], "little")
            hdr, data = raw[:8 + n], raw[8 + n:]
            try:
                table = parse_tensor_table(hdr, len(data))
            except ValueError as x:
                raise LayoutError("%s: %s" % (os.fspath(layout), x)) from None
            src = np.frombuffer(data, dtype=np.uint8)
            fill = None
        else:
            pairs = _pairs(layout, "layout")
            if not pairs:
                raise LayoutError("an empty layout")
            hdr, table = _header([(name,) + _spec(name, t) for name, t in pairs])
            src = None
            fill = [(name, t) for name, t in pairs if not isinstance(t, tuple)]
        if os.path.exists(bpath):
            return table
        size = max(e for _, _, _, e in table.values()) if table else 0
        if src is None:
            src = np.zeros(size, dtype=np.uint8)
            for name, t in fill or []:
                st, shape, b, e = table[name]
                _copy(src, b, e, st, shape, name, t)
        rc = self._lib.bfp_wbuf_create(bpath, hdr, len(hdr), src.ctypes.data, size, version,
                                       err, _ERRLEN)
        if rc and not os.path.exists(bpath):  # made since we looked: taken as it is
            raise LayoutError(err.value.decode(errors="replace"))
        return table

    @property
    def version(self) -> int:
        """The version last committed into the buffer."""
        return self._lib.bfp_wbuf_version(self._handle())

    @property
    def model_id(self) -> int:
        """The layout's id, as the frames of its patches carry it."""
        return self._lib.bfp_wbuf_model_id(self._handle())

    def _handle(self) -> int:
        if self._w is None:
            raise ValueError("%s: publisher closed" % self.path)
        return self._w

    def publish(self, named_tensors: NamedTensors, version: int, timeout: float = 60.0) -> int:
        """Copy every tensor of the layout into the buffer and commit them
        as `version` (newer than the buffer's), atomically: readers see
        the version whole or not at all. named_tensors is a mapping or
        (name, tensor) pairs (model.named_parameters(), a state_dict's
        items()), numpy arrays or torch CPU tensors, each of the dtype a
        WeightBuffer view of it has (bfpatch.dtypes): BF16 as torch.bfloat16
        or numpy uint16 bit patterns. Each is copied once, as bits.

        Everything is checked before anything is written: LayoutError for
        a name the layout does not have, a tensor missing, another shape
        or dtype; ValueError for a version not newer. Returns version.

        With owned (a rank), named_tensors holds exactly the owned
        tensors: LayoutError for one of the layout that is not owned, or
        an owned one missing. The others keep their bytes in the buffer;
        the rank's publisher does not read them. A rank never skips a
        version (the lead refuses one whose base is not the version before
        it): while the rank's publisher runs (it keeps the version it took
        last in PATH.taken), publish() first waits until it has taken the
        version committed before, and raises TimeoutError, writing
        nothing, if that takes longer than timeout seconds. At a step
        every few seconds it has long taken it."""
        h = self._handle()
        pairs = _pairs(named_tensors, "publish")
        own = set(self.owned) if self.owned is not None else None
        for name, t in pairs:
            if name not in self.tensors:
                raise LayoutError("tensor %r is not in the buffer's layout (%d tensors, e.g. %s)"
                                  % (name, len(self.tensors), ", ".join(
                                      repr(k) for k in list(self.tensors)[:3])))
            if own is not None and name not in own:
                raise LayoutError("tensor %r is not one this rank owns (%d owned, e.g. %s): "
                                  "another rank publishes it" % (name, len(own), ", ".join(
                                      repr(k) for k in self.owned[:3])))
            st, shape, _, _ = self.tensors[name]
            _check(name, t, st, shape)
        given = dict(pairs)
        want = self.owned if self.owned is not None else list(self.tensors)
        missing = [n for n in want if n not in given]
        if missing:
            raise LayoutError("%d of the %s tensors not given: %s%s" % (
                len(missing), "owned" if self.owned is not None else "layout's",
                ", ".join(repr(n) for n in missing[:5]), ", ..." if len(missing) > 5 else ""))
        if self.owned is not None:
            self._wait_taken(timeout)
        err = ctypes.create_string_buffer(_ERRLEN)
        if self._lib.bfp_wbuf_begin(h, version, err, _ERRLEN):
            raise ValueError("%s: %s" % (self.path, err.value.decode(errors="replace")))
        for name, t in pairs:
            st, shape, b, e = self.tensors[name]
            _copy(self._data, b, e, st, shape, name, t)
        if self._lib.bfp_wbuf_commit(h, err, _ERRLEN):
            raise RuntimeError("%s: %s" % (self.path, err.value.decode(errors="replace")))
        return version

    def _wait_taken(self, timeout: float) -> None:
        """A rank's publisher that runs has taken the committed version."""
        import time
        have = self.version
        end = time.monotonic() + timeout
        while True:
            try:
                with open(self.path + ".taken", "rb") as f:
                    taken = int(f.read().split()[0])
            except (FileNotFoundError, ValueError, IndexError):
                return  # no rank publisher runs (or none has yet): nothing to wait for
            if taken >= have:
                return
            if time.monotonic() >= end:
                raise TimeoutError("%s: its publisher (bfpatch publish --buffer --lead) took "
                                   "version %d last, not yet version %d, in %gs; the next "
                                   "version would skip it, which the lead refuses"
                                   % (self.path, taken, have, timeout))
            time.sleep(0.001)

    def save_safetensors(self, path: str) -> None:
        """Write the version last committed as a safetensors file at path
        (the buffer's own header, then its data; written beside it and
        renamed in): the checkpoint an actor's shim starts from
        (bfpatch-shim --init), with this buffer's layout."""
        h = self._handle()
        n = ctypes.c_size_t()
        hp = self._lib.bfp_wbuf_st_header(h, ctypes.byref(n))
        if not n.value:
            raise ValueError("%s holds a raw model, not a safetensors layout" % self.path)
        _write_atomic(path, [ctypes.string_at(hp, n.value),
                             memoryview(self._data)[:self.data_bytes]])

    def close(self) -> None:
        """Unmap and unlock the buffer (a shim may then take it)."""
        if self._w is not None:
            self._data = None
            self._lib.bfp_wbuf_close(self._w)
            self._w = None

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _diff(have: Dict[str, TensorInfo], want: Dict[str, TensorInfo]) -> str:
    for name, t in want.items():
        if name not in have:
            return "it has no tensor %r" % name
        if have[name] != t:
            return "tensor %r is %s %s at bytes %d-%d there, %s %s at %d-%d here" % (
                (name,) + tuple(have[name]) + tuple(t))
    extra = [n for n in have if n not in want]
    return "it has tensors the layout does not: %s" % ", ".join(repr(n) for n in extra[:5])


def _numpy() -> Any:
    import numpy
    return numpy


def _check(name: str, t: Any, st: str, shape: Tuple[int, ...]) -> None:
    """Refuse, with LayoutError, a tensor that is not shape and the dtype
    that views st."""
    if _is_torch(t):
        want = _dt.torch_dtype(st)
        if t.device.type != "cpu":
            raise LayoutError("tensor %r is on %s: publish copies from CPU memory (numpy "
                              "arrays, torch CPU tensors)" % (name, t.device))
        ok = t.dtype == want
        wants = "torch %s" % str(want).replace("torch.", "")
    elif isinstance(t, _numpy().ndarray):
        want = _dt.numpy_dtype(st)
        ok = t.dtype == want
        wants = "numpy %s" % want
    else:
        raise LayoutError("tensor %r is a %s, not a numpy array or torch tensor"
                          % (name, type(t).__name__))
    if not ok:
        hint = " (BF16 goes in as torch.bfloat16 or numpy uint16 bit patterns)" \
            if st == "BF16" else ""
        raise LayoutError("tensor %r is %s where the buffer holds %s, viewed as %s; bfpatch "
                          "converts nothing%s" % (name, _describe(t), st, wants, hint))
    if tuple(t.shape) != shape:
        raise LayoutError("tensor %r has shape %s where the buffer's is %s"
                          % (name, tuple(t.shape), shape))


def _copy(dst: Any, b: int, e: int, st: str, shape: Tuple[int, ...], name: str, t: Any) -> None:
    """Copy tensor t (checked) into bytes b..e of the buffer object dst,
    once, as unsigned integers of its width: bits, not values."""
    if e == b:
        return
    if _is_torch(t):
        import torch
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        n = _dt.itemsize(st)
        view = torch.frombuffer(dst, dtype=ints[n], count=(e - b) // n, offset=b).view(shape)
        src = t.detach()
        if src.dtype != ints[n]:
            src = src.view(ints[n])
        view.copy_(src)
        return
    import numpy as np
    dt = _dt.numpy_dtype(st)
    u = _dt.unsigned_of(dt)
    view = np.frombuffer(dst, dtype=u, count=(e - b) // dt.itemsize, offset=b).reshape(shape)
    np.copyto(view, np.asarray(t).view(u), casting="no")
