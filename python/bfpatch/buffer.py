"""bfpatch.buffer: map a bfpatch-shim weight buffer from Python, zero-copy.

No build step: the buffer is a file (common/wbuf.h) that this module
maps with mmap; tensors come back as numpy arrays (or torch tensors) that
view the mapped memory directly, so they see each committed version as the
shim writes it. Works with Debian's python3-numpy and python3-torch.

    buf = WeightBuffer("/dev/shm/policy")
    v = buf.wait_version(after=buf.version, timeout=60)   # next version
    w = buf.tensor("model.layers.0.mlp.up_proj.weight")  # numpy, no copy
    t = buf.tensor(name, torch=True)                      # torch bfloat16

Read at a safe point: a commit writes in place. `consistent(fn)` runs fn
until it saw no commit in progress from start to end (a sequence lock).
`WeightBuffer(path, writable=False)` maps the buffer read-only, for an
actor that never takes part in safe points.

With `bfpatch-shim --commit safe-point` the shim stages a complete version
and waits; the actor calls `safe_point()` between rollouts, which lets the
shim commit the staged version and returns once it is committed:

    while True:
        v = buf.safe_point(timeout=30)   # commits what is staged, if any
        run_rollouts(policy_version=v)
"""
import json
import mmap
import struct
import time

MAGIC = b"BFPWBUF1"
# wbuf_hdr: magic, layout, hdr_size, n_params, model_id, st_offset, st_len,
# data_offset, data_bytes, version, state, target, flags, seq; then at 88
# staged and at 92 allow (the safe-point handshake)
_OFF_STAGED = 88
_OFF_ALLOW = 92
READY, COMMITTING, RESYNC = 0, 1, 2
_HDR = struct.Struct("<8sIIQQQQQQIIIIQ")

_NUMPY = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "I8": "i1",
          "U8": "u1", "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4",
          "I64": "<i8", "U64": "<u8", "BOOL": "?", "F8_E4M3": "u1", "F8_E5M2": "u1"}


class WeightBuffer:
    def __init__(self, path, writable=True):
        """Map the buffer at path. writable=False maps it read-only (an
        actor that only reads weights; safe_point() and allow() need to
        write the handshake word and raise then). Raises ValueError for a
        file that is not a whole weight buffer."""
        self.writable = writable
        self._f = open(path, "r+b" if writable else "rb")
        try:
            size = self._f.seek(0, 2)
            if size < _HDR.size:
                raise ValueError("%s: not a bfpatch weight buffer (%d bytes, shorter than "
                                 "its header)" % (path, size))
            self._mm = mmap.mmap(self._f.fileno(), 0,
                                 access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
            self._parse(path, size)
        except BaseException:
            if getattr(self, "_mm", None) is not None:
                self._mm.close()
            self._f.close()
            raise

    def _parse(self, path, size):
        h = _HDR.unpack_from(self._mm, 0)
        if h[0] != MAGIC or h[1] != 1:
            raise ValueError("%s: not a bfpatch weight buffer" % path)
        (_, _, _, self.n_params, self.model_id, st_off, st_len,
         self.data_offset, self.data_bytes) = h[:9]
        # the shim checks these too (wbuf_open): a buffer cut short, or a
        # header that points outside the file, is refused, not half-read
        whole = self.data_offset + 2 * self.n_params
        if whole > size or self.data_bytes > 2 * self.n_params or st_off < _HDR.size \
                or st_off + st_len > self.data_offset:
            raise ValueError("%s: bfpatch weight buffer cut short or damaged (%d bytes, its "
                             "header says %d)" % (path, size, whole))
        self.tensors = {}
        if st_len:
            try:
                n = struct.unpack_from("<Q", self._mm, st_off)[0]
                if 8 + n > st_len:
                    raise ValueError("header length %d past its %d bytes" % (n, st_len))
                meta = json.loads(bytes(self._mm[st_off + 8:st_off + 8 + n]).rstrip(b" "))
                for name, t in meta.items():
                    if name == "__metadata__":
                        continue
                    b, e = t["data_offsets"]
                    if not 0 <= b <= e <= self.data_bytes:
                        raise ValueError("tensor %s outside the data" % name)
                    self.tensors[name] = (t["dtype"], tuple(t["shape"]), b, e)
            except (ValueError, KeyError, TypeError, struct.error) as x:
                raise ValueError("%s: bfpatch weight buffer with a damaged tensor table (%s)"
                                 % (path, x)) from None

    def _u32(self, off):
        return struct.unpack_from("<I", self._mm, off)[0]

    @property
    def version(self):
        """The committed version."""
        return self._u32(64)

    @property
    def state(self):
        """READY (0), COMMITTING (1) or RESYNC (2: no valid version until
        a keyframe stream is committed)."""
        return self._u32(68)

    @property
    def committing(self):
        return self.state == COMMITTING

    @property
    def staged(self):
        """The version the shim has staged and waits to commit (safe-point
        mode); not newer than `version` if none waits."""
        return self._u32(_OFF_STAGED)

    def allow(self, version):
        """Let the shim commit versions up to `version` whenever complete."""
        if not self.writable:
            raise PermissionError("buffer opened with writable=False")
        struct.pack_into("<I", self._mm, _OFF_ALLOW, version)

    def safe_point(self, timeout=None, poll=0.005):
        """The actor is at a safe point: let the shim commit the version it
        has staged, wait until it is committed, and return the committed
        version (at once if nothing is staged)."""
        want = self.staged
        if want <= self.version:
            return self.version
        self.allow(want)
        return self.wait_version(after=want - 1, timeout=timeout, poll=poll)

    @property
    def seq(self):
        return struct.unpack_from("<Q", self._mm, 80)[0]

    def wait_version(self, after, timeout=None, poll=0.01):
        """Wait until a version newer than `after` is committed; returns it
        (or the current one on timeout)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            s = self.seq
            v = self.version
            if v > after and s % 2 == 0 and self.state == READY:
                return v
            if end is not None and time.monotonic() > end:
                return v
            time.sleep(poll)

    def consistent(self, fn, timeout=None):
        """Run fn() until no commit overlapped it; returns its result.
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
                    raise TimeoutError("a commit has been in progress for %gs" % timeout)
                time.sleep(0.001)
                continue
            r = fn()
            if self.seq == s0:
                return r

    def tensor(self, name, torch=False):
        """The tensor as a zero-copy view of the buffer: numpy (BF16 as
        uint16 bit patterns) or, with torch=True, a torch tensor."""
        dtype, shape, b, e = self.tensors[name]
        if torch:
            import torch as _t
            tdt = {"BF16": _t.bfloat16, "F16": _t.float16, "F32": _t.float32}[dtype]
            return _t.frombuffer(self._mm, dtype=tdt, count=(e - b) // 2 if dtype in ("BF16", "F16") else (e - b) // 4,
                                 offset=self.data_offset + b).view(shape)
        import numpy as np
        return np.frombuffer(self._mm, dtype=np.dtype(_NUMPY[dtype]),
                             count=(e - b) // np.dtype(_NUMPY[dtype]).itemsize,
                             offset=self.data_offset + b).reshape(shape)

    def close(self):
        self._mm.close()
        self._f.close()
