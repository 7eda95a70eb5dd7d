"""The actor's side: map a bfpatch-shim weight buffer, zero-copy.

The buffer is a file (common/wbuf.h) that this module maps with mmap;
tensors come back as numpy arrays or torch tensors that view the mapped
memory, so they see each version as the shim commits it.

    buf = WeightBuffer("/dev/shm/policy")
    v = buf.safe_point(timeout=30)            # between rollouts
    model.load_weights(buf.named_tensors())   # (name, torch tensor) pairs

Views are read-only unless asked for with writable=True: a stray write
into the weights would make the next commit fail its hash check and cost
a full keyframe resend. numpy refuses such a write (ValueError); torch has
no read-only tensors, so a write through a read-only torch view ends the
process with SIGSEGV rather than corrupt the version.

Timeouts: wait_version(), safe_point() and consistent() raise TimeoutError
when their timeout passes, never return a stale version silently.

Change lists (bfpatch-shim --changes, changes.py): changes(),
changes_since() and apply_changes() give what each version changed, so
an engine that holds its own copy of the weights applies a version with
one scatter per tensor.
"""
import json
import mmap
import os
import struct
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, TypeVar

from . import changes as _chg
from . import dtypes as _dt
from .changes import ChangeList, ChangesUnavailable

MAGIC = b"BFPWBUF1"
# wbuf_hdr: magic, layout, hdr_size, n_params, model_id, st_offset, st_len,
# data_offset, data_bytes, version (64), state (68), target, flags, seq
# (80); then staged (88) and allow (92), the safe-point handshake
_OFF_VERSION = 64
_OFF_STATE = 68
_OFF_SEQ = 80
_OFF_STAGED = 88
_OFF_ALLOW = 92
READY, COMMITTING, RESYNC = 0, 1, 2
_HDR = struct.Struct("<8sIIQQQQQQIIIIQ")

T = TypeVar("T")

# (safetensors dtype, shape, begin, end): end - begin bytes of the data
# section from begin
TensorInfo = Tuple[str, Tuple[int, ...], int, int]


def parse_tensor_table(raw: bytes, data_bytes: int) -> Dict[str, TensorInfo]:
    """The tensors of a safetensors header (its 8-byte length and JSON),
    in the order of their data, each inside data_bytes. Raises ValueError
    for a header that is not one."""
    try:
        n = struct.unpack_from("<Q", raw, 0)[0]
        if 8 + n > len(raw):
            raise ValueError("header length %d past its %d bytes" % (n, len(raw)))
        meta = json.loads(bytes(raw[8:8 + n]).rstrip(b" "))
        out = []
        for name, t in meta.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            if not 0 <= b <= e <= data_bytes:
                raise ValueError("tensor %s outside the data" % name)
            if t["dtype"] not in _dt.DTYPES:
                raise ValueError("tensor %s of unknown dtype %s" % (name, t["dtype"]))
            out.append((b, e, name, t["dtype"], tuple(int(d) for d in t["shape"])))
        out.sort()
        return {name: (dt, shape, b, e) for b, e, name, dt, shape in out}
    except (ValueError, KeyError, TypeError, struct.error) as x:
        raise ValueError("damaged tensor table (%s)" % x) from None


def _lock_holder(fd: int) -> Optional[int]:
    """The pid holding an exclusive flock(2) on fd's file (the writer's
    lock, wbuf_lock()), 0 if held by a process not to be seen from here
    or where /proc/locks cannot be read, None if none holds it."""
    st = os.fstat(fd)
    dev = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 4242 00:1b:2617 0 EOF"; a waiter's
        # line ("1: -> FLOCK ...") is no holder
        p = line.split()
        if len(p) >= 6 and p[1] == "FLOCK" and p[3] == "WRITE" and p[5] == dev:
            try:
                return max(int(p[4]), 0)
            except ValueError:
                return 0
    return None


class WeightBuffer:
    """A bfpatch weight buffer (common/wbuf.h), mapped."""

    def __init__(self, path: str, writable: bool = True) -> None:
        """Map the buffer at path. writable=False maps it read-only, for
        an actor that takes no part in safe points (safe_point() and
        allow() write the handshake word and raise PermissionError then,
        as tensor(writable=True) does). Raises ValueError for a file that
        is not a whole weight buffer."""
        self.path = path
        self.writable = writable
        self._mm: Optional[mmap.mmap] = None
        self._ro: Optional[mmap.mmap] = None
        self._f = open(path, "r+b" if writable else "rb")
        try:
            size = self._f.seek(0, 2)
            if size < _HDR.size:
                raise ValueError("%s: not a bfpatch weight buffer (%d bytes, shorter than "
                                 "its header)" % (path, size))
            # the read-only views' mapping: its pages take no write
            self._ro = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
            self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_WRITE) \
                if writable else self._ro
            self._parse(path, size)
        except BaseException:
            self._unmap()
            self._f.close()
            raise

    def _parse(self, path: str, size: int) -> None:
        h = _HDR.unpack_from(self._ro, 0)
        if h[0] != MAGIC or h[1] != 1:
            raise ValueError("%s: not a bfpatch weight buffer" % path)
        (_, _, _, self.n_params, self.model_id, st_off, st_len,
         self.data_offset, self.data_bytes) = h[:9]
        # as the shim checks (wbuf_open): a buffer cut short, or a header
        # that points outside the file, is refused, not half-read
        whole = self.data_offset + 2 * self.n_params
        if whole > size or self.data_bytes > 2 * self.n_params or st_off < _HDR.size \
                or st_off + st_len > self.data_offset:
            raise ValueError("%s: bfpatch weight buffer cut short or damaged (%d bytes, its "
                             "header says %d)" % (path, size, whole))
        self.tensors: Dict[str, TensorInfo] = {}
        """name -> (safetensors dtype, shape, first byte, end byte) of the
        data section, in the order of the data"""
        if st_len:
            try:
                self.tensors = parse_tensor_table(self._ro[st_off:st_off + st_len],
                                                  self.data_bytes)
            except ValueError as x:
                raise ValueError("%s: bfpatch weight buffer with a %s" % (path, x)) from None

    def _u32(self, off: int) -> int:
        return struct.unpack_from("<I", self._ro, off)[0]

    @property
    def version(self) -> int:
        """The committed version."""
        return self._u32(_OFF_VERSION)

    @property
    def state(self) -> int:
        """READY (0), COMMITTING (1) or RESYNC (2: no valid version until
        a keyframe stream is committed)."""
        return self._u32(_OFF_STATE)

    @property
    def committing(self) -> bool:
        return self.state == COMMITTING

    @property
    def staged(self) -> int:
        """The version the shim has staged and waits to commit (safe-point
        mode); not newer than `version` if none waits."""
        return self._u32(_OFF_STAGED)

    @property
    def seq(self) -> int:
        """The sequence counter: odd while a commit is in progress."""
        return struct.unpack_from("<Q", self._ro, _OFF_SEQ)[0]

    @property
    def writer(self) -> Optional[int]:
        """The pid of the process that writes the buffer (its bfpatch-shim,
        or a trainer's Publisher), which holds the writer's lock on the
        file; 0 if one holds it that cannot be seen from here (another pid
        namespace, no /proc/locks); None if no process does, so no commit
        will come."""
        return _lock_holder(self._f.fileno())

    def allow(self, version: int) -> None:
        """Let the shim commit versions up to `version` whenever complete."""
        if not self.writable:
            raise PermissionError("%s opened with writable=False" % self.path)
        struct.pack_into("<I", self._mm, _OFF_ALLOW, version)

    def _timeout(self, what: str, timeout: float) -> TimeoutError:
        w = self.writer
        why = "" if w is not None else \
            "; no process holds its writer's lock: no bfpatch-shim runs on this buffer"
        return TimeoutError("%s: %s within %gs (at version %d, state %d)%s"
                            % (self.path, what, timeout, self.version, self.state, why))

    def wait_version(self, after: int, timeout: Optional[float] = None,
                     poll: float = 0.01) -> int:
        """Wait until a version newer than `after` is committed and whole;
        return it. Raises TimeoutError when none is within timeout seconds
        (None: wait for ever)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            s = self.seq
            v = self.version
            if v > after and s % 2 == 0 and self.state == READY:
                return v
            if end is not None and time.monotonic() > end:
                raise self._timeout("no version after %d was committed" % after, timeout)
            time.sleep(poll)

    def safe_point(self, timeout: Optional[float] = None, poll: float = 0.005) -> int:
        """The actor is at a safe point (bfpatch-shim --commit safe-point):
        let the shim commit the version it has staged, wait until it is
        committed, and return the committed version; at once if nothing is
        staged and the buffer holds a whole version. Raises TimeoutError
        when that is not so within timeout seconds (None: wait for ever),
        which includes a buffer no shim runs on: nothing would ever be
        committed into it. Between two safe points the shim commits
        nothing, so views read there see one version."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.writer is not None:
                want = self.staged
                if want > self.version:
                    self.allow(want)
                    left = None if end is None else max(end - time.monotonic(), 0.0)
                    try:
                        return self.wait_version(after=want - 1, timeout=left, poll=poll)
                    except TimeoutError:
                        raise self._timeout("staged version %d was not committed" % want,
                                            timeout) from None
                s = self.seq
                v = self.version
                if s % 2 == 0 and self.state == READY:
                    return v
            if end is not None and time.monotonic() > end:
                raise self._timeout("no safe point was reached", timeout)
            time.sleep(poll)

    def consistent(self, fn: Callable[[], T], timeout: Optional[float] = None) -> T:
        """Run fn() until no commit overlapped it; return its result.
        Raises RuntimeError while the buffer holds no valid version
        (RESYNC) and TimeoutError when no quiet spell came within timeout
        seconds (a commit that does not end: its shim died mid-commit and
        was not restarted)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            s0 = self.seq
            if s0 % 2:
                if self.state == RESYNC:
                    raise RuntimeError("the buffer holds no valid version until a keyframe "
                                       "resync commits one")
                if end is not None and time.monotonic() > end:
                    raise self._timeout("a commit did not end", timeout)
                time.sleep(0.001)
                continue
            r = fn()
            if self.seq == s0:
                return r

    def tensor(self, name: str, torch: bool = False, writable: bool = False) -> Any:
        """The tensor as a zero-copy view of the buffer: a numpy array or,
        with torch=True, a torch tensor, of the dtype dtypes.py gives
        (BF16: numpy uint16 bit patterns, torch.bfloat16). Read-only unless
        writable=True (which needs the buffer opened writable). Raises
        KeyError for a name the buffer does not hold."""
        try:
            st, shape, b, e = self.tensors[name]
        except KeyError:
            raise KeyError("%s holds no tensor %r" % (self.path, name)) from None
        if writable and not self.writable:
            raise PermissionError("%s opened with writable=False" % self.path)
        mm = self._mm if writable else self._ro
        return _view(mm, self.data_offset + b, e - b, st, shape, torch)

    def named_tensors(self, torch: bool = True,
                      writable: bool = False) -> Iterator[Tuple[str, Any]]:
        """(name, view) for every tensor, in the order of the data: what an
        engine's load_weights() takes. torch views unless torch=False."""
        for name in self.tensors:
            yield name, self.tensor(name, torch=torch, writable=writable)

    def _settled(self, fn: Callable[[], T], have: Optional[int]) -> T:
        """fn() between two commits (the sequence counter even and the
        same before and after), again if a commit overlapped it, also when
        it raised ChangesUnavailable then (a list it read was replaced).
        Raises ChangesUnavailable while the buffer holds no valid version."""
        end = time.monotonic() + 30
        while True:
            s0 = self.seq
            if s0 % 2:
                if self.state == RESYNC:
                    raise ChangesUnavailable(
                        "%s holds no valid version: a keyframe resync is in progress, and "
                        "no change list leads across it; reload the tensors once it is "
                        "committed" % self.path, have, self.version)
                if time.monotonic() > end:
                    raise self._timeout("a commit did not end", 30)
                time.sleep(0.001)
                continue
            try:
                r = fn()
            except ChangesUnavailable:
                if self.seq != s0:
                    continue
                raise
            if self.seq == s0:
                return r

    def changes(self, version: int, torch: bool = True) -> ChangeList:
        """What the commit of `version` changed (bfpatch-shim --changes):
        a ChangeList, tensor name -> (indices, values), with .base, the
        version it was committed from, and .version. indices are flat
        element indices into the tensor (int64), values its new values in
        the tensor's dtype: torch tensors, or numpy arrays with
        torch=False. Values of 16-bit and 1-byte tensors come from the
        list; those of wider dtypes (F32, I64, ...) are read from the
        buffer's committed version, so for a `version` older than that
        they are the committed version's values (a whole chain applied in
        order, apply_changes(), ends exactly at the committed version).
        Raises ChangesUnavailable when no valid list of `version` is kept
        (none written, no longer kept, a keyframe commit, a damaged file:
        the message says which)."""
        def read() -> ChangeList:
            raw = _chg.read_list(self, version, None, version)
            if raw.flags:
                raise ChangesUnavailable(
                    "version %d was committed %s: it has no change list; reload the tensors"
                    % (version, "by a keyframe resync" if raw.flags & _chg.F_KEY else
                       "after its shim restarted mid-commit"), None, version)
            return _chg.per_tensor(self, raw, torch)
        return self._settled(read, None)

    def changes_since(self, version: int, torch: bool = True) -> List[ChangeList]:
        """The change lists that lead from `version` (the one the caller
        holds) to the committed version, in order (empty when `version` is
        the committed one); each as changes() gives it. Raises
        ChangesUnavailable, with .have (= version) and .want (the
        committed version), when they do not all exist: the shim runs
        without --changes, the history it keeps (--changes N) is too
        short, a keyframe resync or a commit finished after a restart
        broke the chain, or a list is damaged. Then reload the tensors.
        Raises ValueError for a version newer than the committed one."""
        def read() -> List[ChangeList]:
            want = self.version
            if version > want:
                raise ValueError("%s: version %d is newer than the committed %d"
                                 % (self.path, version, want))
            return [_chg.per_tensor(self, r, torch) for r in _chg.chain(self, version, want)]
        return self._settled(read, version)

    def apply_changes(self, tensors: Mapping[str, Any], since: int, strict: bool = True) -> int:
        """Bring tensors, the caller's copy of the weights at version
        `since` (torch tensors on any device, or numpy arrays; contiguous,
        each of its buffer tensor's shape and element size), to the
        committed version: every list of changes_since(since) in order,
        one index_copy_ (numpy: one indexed store) per tensor and list,
        indices and values moved to the tensor's device. Bits are copied,
        never converted: a tensor's dtype must be the buffer's (or an
        integer type of its width). Returns the version reached.
        Everything is checked before any tensor is touched: raises
        ChangesUnavailable (the chain is incomplete: reload), KeyError for
        a tensor the lists change that is not given (strict=False skips
        it; names the buffer has no lists for are ignored), ValueError for
        a tensor of another size, dtype or layout."""
        def read() -> List[Tuple[Any, Optional[ChangeList]]]:
            # every list checked; a list that changes only 16-bit tensors
            # by runs (_chg._sort: a bf16 model's) stays mapped, its
            # arrays built one list at a time below, into the same memory;
            # others are read whole here (wider dtypes take the committed
            # version's values)
            want = self.version
            if since > want:
                raise ValueError("%s: version %d is newer than the committed %d"
                                 % (self.path, since, want))
            out: List[Tuple[Any, Optional[ChangeList]]] = []
            for r in _chg.chain(self, since, want, build=False):
                if r.fast_only:
                    out.append((r, None))
                else:
                    r.build()
                    out.append((r, _chg.per_tensor(self, r, False)))
            return out
        chain = self._settled(read, since)
        changed = set()
        for r, cl in chain:
            changed.update(cl if cl is not None else _chg.changed(self, r))
        names = [n for n in self.tensors if n in changed]
        missing = [n for n in names if n not in tensors]
        if missing and strict:
            raise KeyError("apply_changes: no tensor given for %s, which the change lists "
                           "from version %d change (strict=False skips them)"
                           % (", ".join(missing), since))
        for n in names:
            if n in tensors:
                _check_target(n, tensors[n], self.tensors[n])
        lazy = [int(r.cum[-1]) for r, cl in chain if cl is None]
        pos = val = None
        if lazy:
            import numpy as np
            pos, val = np.empty(max(lazy), np.int64), np.empty(max(lazy), np.uint16)
        for r, cl in chain:
            if cl is None:
                r.build(pos, val)
                cl = _chg.per_tensor(self, r, False)
            for n, (idx, v) in cl.items():
                if n in tensors:
                    _scatter(tensors[n], idx, v, self.tensors[n][0])
        return chain[-1][0].target if chain else since

    def _unmap(self) -> None:
        for m in {id(x): x for x in (self._mm, self._ro) if x is not None}.values():
            m.close()
        self._mm = self._ro = None

    def close(self) -> None:
        """Unmap the buffer. Raises BufferError while views of it are
        still referenced."""
        self._unmap()
        self._f.close()

    def __enter__(self) -> "WeightBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _view(mm: Any, off: int, nbytes: int, st: str, shape: Tuple[int, ...], torch: bool) -> Any:
    """A view of nbytes at off of the buffer object mm as a tensor of
    safetensors dtype st and shape."""
    if torch:
        import torch as _t
        tdt = _dt.torch_dtype(st)
        count = nbytes // _dt.itemsize(st)
        if count == 0:  # torch.frombuffer takes no empty view
            return _t.empty(shape, dtype=tdt)
        with warnings.catch_warnings():
            # a read-only buffer: torch warns that its tensor is writable;
            # the mapping's page protection is what keeps it read-only
            warnings.simplefilter("ignore", UserWarning)
            return _t.frombuffer(mm, dtype=tdt, count=count, offset=off).view(shape)
    import numpy as np
    dt = _dt.numpy_dtype(st)
    return np.frombuffer(mm, dtype=dt, count=nbytes // dt.itemsize, offset=off).reshape(shape)


def _is_torch(t: Any) -> bool:
    return type(t).__module__.split(".")[0] == "torch"


def _check_target(name: str, t: Any, info: TensorInfo) -> None:
    """ValueError unless t can take tensor name's values bit for bit:
    contiguous, writable, as many elements, the buffer's dtype or an
    integer type of its width."""
    st, shape, _, _ = info
    count = 1
    for d in shape:
        count *= d
    size = _dt.itemsize(st)
    if _is_torch(t):
        import torch as _t
        n, ok = t.numel(), t.is_contiguous()
        esize = t.element_size()
        same = t.dtype == _dt.torch_dtype(st) or \
            (not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != _t.bool)
    else:
        n, ok = t.size, t.flags.c_contiguous and t.flags.writeable
        esize = t.dtype.itemsize
        same = t.dtype == _dt.numpy_dtype(st) or t.dtype.kind in "iu"
    if n != count or esize != size or not same or not ok:
        raise ValueError("apply_changes: tensor %s (%s, %d elements%s) cannot take the buffer's "
                         "%s values of %d elements" % (
                             name, t.dtype, n, "" if ok else ", not contiguous and writable",
                             st, count))


def _scatter(t: Any, idx: Any, val: Any, st: str) -> None:
    """t.flat[idx] = val, bits unchanged, on t's device."""
    if _is_torch(t):
        import torch as _t
        v = _chg._torch_of(val, st)
        if v.dtype != t.dtype:
            v = v.view(t.dtype)
        with _t.no_grad():  # an engine's parameters may require grad
            t.view(-1).index_copy_(0, _t.from_numpy(idx).to(t.device), v.to(t.device))
    else:
        t.reshape(-1)[idx] = val.view(t.dtype)
