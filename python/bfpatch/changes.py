"""Change lists: what each committed version changed, per tensor.

bfpatch-shim --changes N (default 4) writes, before it publishes a
version, the flat positions and new 16-bit words of every weight that
version changed into BUFFER.changes/ (docs/INTEGRATION.md, "Change
lists", gives the file field by field). WeightBuffer.changes(),
changes_since() and apply_changes() read them through this module, so an
inference engine applies a version into its own tensors, on any device,
with one scatter per tensor instead of reloading the model:

    v = buf.apply_changes(engine_tensors, since=loaded)   # -> the version reached

A file is checked before anything of it is used (magic, sizes, model,
buffer file, versions, ranges, CRC-32); a list that is missing, damaged,
too old or broken by a keyframe resync raises ChangesUnavailable, and the
actor reloads the tensors instead.
"""
import errno
import os
import struct
import zlib
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from . import dtypes as _dt

MAGIC = b"BFPCHGL1"
LAYOUT = 1
F_KEY = 1        # a keyframe commit: no entries, the chain starts over
F_RESUMED = 2    # a commit finished after a restart: its changes are not known
E_DENSE = 1      # every position of the range (a keyframe-coded frame)
# magic, layout, flags, model_id, n_params, buffer inode, n_changes, base,
# target, n_ranges, crc
_HDR = struct.Struct("<8sIIQQQQIIII")
# begin, range_len, n, flags, reserved
_REC = struct.Struct("<QIIII")


class ChangesUnavailable(LookupError):
    """The change lists do not lead from version `have` to version `want`
    (the message says why: no --changes on the shim, history too short, a
    keyframe resync, a damaged list); reload the tensors instead. `have`
    is None where the caller's version is not known (changes())."""

    def __init__(self, message: str, have: Optional[int], want: int) -> None:
        super().__init__(message)
        self.have = have
        self.want = want

    def __str__(self) -> str:
        return str(self.args[0])


class ChangeList(Mapping[str, Tuple[Any, Any]]):
    """The changes that took the buffer from version `base` to `version`:
    tensor name -> (indices, values), flat element indices (int64) into
    the tensor and its new values in the tensor's dtype, as torch tensors
    or numpy arrays. Only tensors with changes are in it."""

    def __init__(self, base: int, version: int, entries: Dict[str, Tuple[Any, Any]]) -> None:
        self.base = base
        self.version = version
        self._e = entries

    def __getitem__(self, name: str) -> Tuple[Any, Any]:
        return self._e[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._e)

    def __len__(self) -> int:
        return len(self._e)

    @property
    def n_changes(self) -> int:
        """Elements changed, over every tensor."""
        return sum(len(i) for i, _ in self._e.values())

    def __repr__(self) -> str:
        return "ChangeList(%d -> %d, %d tensors, %d elements)" % (
            self.base, self.version, len(self), self.n_changes)


class _Raw:
    """One list file, checked: flat word positions and their new words,
    entry by entry (ranges in order; positions in no order inside one):
    entry k's are pos[cum[k]:cum[k + 1]], inside [rb[k], re[k])."""

    def __init__(self, flags: int, base: int, target: int, pos: Any, val: Any, rb: Any,
                 re: Any, cum: Any) -> None:
        self.flags, self.base, self.target, self.pos, self.val = flags, base, target, pos, val
        self.rb, self.re, self.cum = rb, re, cum
        self.dense = 0  # entries of every position of their range


def directory(buffer_path: str) -> str:
    """Where the shim keeps the change lists of the buffer at buffer_path."""
    return buffer_path + ".changes"


def list_path(buffer_path: str, version: int) -> str:
    return os.path.join(directory(buffer_path), "%010d.chg" % version)


def read_list(buf: Any, version: int, have: Optional[int], want: int) -> _Raw:
    """The list file of `version` beside buf (a WeightBuffer), checked
    whole; raises ChangesUnavailable when there is none or it is damaged."""
    import numpy as np
    path = list_path(buf.path, version)
    try:
        with open(path, "rb") as f:
            d = f.read()
    except OSError as x:
        if x.errno != errno.ENOENT:
            raise ChangesUnavailable("%s: %s" % (path, x.strerror), have, want) from None
        if not os.path.isdir(directory(buf.path)):
            why = ("no change lists beside the buffer (%s): its bfpatch-shim runs with "
                   "--changes 0, or keeps none for a buffer on hugetlbfs"
                   % directory(buf.path))
        elif version == want:
            why = ("no change list of version %d in %s: it was committed by a shim "
                   "without --changes, or a keyframe resync removed it"
                   % (version, directory(buf.path)))
        else:
            why = ("history too short: the change list of version %d is no longer kept "
                   "(bfpatch-shim --changes N keeps the last N versions)" % version)
        raise ChangesUnavailable(why, have, want) from None

    def bad(what: str) -> ChangesUnavailable:
        return ChangesUnavailable("damaged change list %s: %s; not applied" % (path, what),
                                  have, want)

    if len(d) < _HDR.size:
        raise bad("%d bytes, shorter than its header" % len(d))
    (magic, layout, flags, model_id, n_params, ino, n_changes, base, target, n_ranges,
     crc) = _HDR.unpack_from(d, 0)
    if magic != MAGIC or layout != LAYOUT:
        raise bad("not a bfpatch change list (magic %r, layout %d)" % (magic, layout))
    if zlib.crc32(memoryview(d)[_HDR.size:], zlib.crc32(memoryview(d)[:_HDR.size - 4])) != crc:
        raise bad("CRC-32 mismatch")
    if model_id != buf.model_id or n_params != buf.n_params:
        raise bad("of model %016x with %d parameters, the buffer holds %016x with %d"
                  % (model_id, n_params, buf.model_id, buf.n_params))
    if ino != os.fstat(buf._f.fileno()).st_ino:
        raise bad("written for another file at %s (the buffer was made again since)"
                  % buf.path)
    if target != version or base >= target or flags & ~(F_KEY | F_RESUMED):
        raise bad("version %d -> %d, flags %#x, named %d" % (base, target, flags, version))
    if flags and (n_ranges or n_changes or len(d) != _HDR.size):
        raise bad("a record without changes that holds some")
    pos, val, rb, re = [], [], [], []
    off, end, total, n_dense = _HDR.size, 0, 0, 0
    for _ in range(n_ranges):
        if off + _REC.size > len(d):
            raise bad("cut short")
        begin, rlen, n, eflags, resv = _REC.unpack_from(d, off)
        off += _REC.size
        dense = eflags == E_DENSE
        if (eflags & ~E_DENSE) or resv or begin < end or begin + rlen > n_params or \
                n > rlen or (dense and n != rlen):
            raise bad("range [%d, +%d) of %d changes (flags %#x) out of order or bounds"
                      % (begin, rlen, n, eflags))
        body = n * (2 if dense else 6)
        if off + body > len(d):
            raise bad("cut short")
        if dense:
            n_dense += 1
            pos.append(np.arange(begin, begin + n, dtype=np.uint64))
        else:
            o = np.frombuffer(d, dtype="<u4", count=n, offset=off)
            if n and int(o.max()) >= rlen:
                raise bad("a change past its range [%d, +%d)" % (begin, rlen))
            pos.append(o.astype(np.uint64) + np.uint64(begin))
            off += 4 * n
        val.append(np.frombuffer(d, dtype="<u2", count=n, offset=off))
        off += 2 * n + (-body % 8)
        end = begin + rlen
        total += n
        rb.append(begin)
        re.append(end)
    if off != len(d) or total != n_changes:
        raise bad("%d bytes and %d changes, its header says %d and %d"
                  % (len(d), total, off, n_changes))
    p = np.concatenate(pos) if pos else np.zeros(0, np.uint64)
    v = np.concatenate(val) if val else np.zeros(0, np.uint16)
    cum = np.zeros(len(pos) + 1, np.int64)
    np.cumsum([len(x) for x in pos], out=cum[1:])
    r = _Raw(flags, base, target, p, v, np.array(rb, np.uint64), np.array(re, np.uint64), cum)
    r.dense = n_dense
    return r


def _torch_of(a: Any, st: str) -> Any:
    """numpy array a (of dtypes.numpy_dtype(st)) as a torch tensor of
    dtypes.torch_dtype(st), its bits unchanged."""
    import numpy as np
    import torch
    size = _dt.itemsize(st)
    raw = np.ascontiguousarray(a).view(np.uint8 if size == 1 else np.dtype("<i%d" % size))
    return torch.from_numpy(raw.copy()).view(_dt.torch_dtype(st))


def per_tensor(buf: Any, raw: _Raw, torch: bool) -> ChangeList:
    """raw's changes as (indices, values) per tensor of buf. 16-bit tensors
    (at an even offset) and 1-byte ones take their new values from the
    list; wider ones (F32, I64, ...) read the changed elements' values
    from buf's committed version (the caller holds the sequence counter
    still)."""
    import numpy as np
    out: Dict[str, Tuple[Any, Any]] = {}
    pos, val = raw.pos, raw.val
    for name, (st, shape, b, e) in buf.tensors.items():
        # the entries whose ranges meet the tensor's words, then their
        # positions inside it: each entry is looked at by the tensors it
        # meets only
        wlo, whi = b // 2, (e + 1) // 2
        r0 = int(np.searchsorted(raw.re, wlo, "right"))
        r1 = int(np.searchsorted(raw.rb, whi, "left"))
        if r0 >= r1:
            continue
        lo, hi = int(raw.cum[r0]), int(raw.cum[r1])
        w = pos[lo:hi]
        inside = (w >= wlo) & (w < whi)
        if not inside.all():
            w, v16 = w[inside], val[lo:hi][inside]
        else:
            v16 = val[lo:hi]
        if not w.size:
            continue
        w = w.astype(np.int64)
        size = _dt.itemsize(st)
        ndt = _dt.numpy_dtype(st)
        if size == 2 and b % 2 == 0:
            idx = w - b // 2
            vals = v16.view(ndt).copy()
        elif size == 1:
            idx = np.stack([2 * w - b, 2 * w + 1 - b], axis=1).reshape(-1)
            vals = v16.view(np.uint8)
            keep = (idx >= 0) & (idx < e - b)
            idx, vals = idx[keep], vals[keep].view(ndt).copy()
        else:
            byte = np.stack([2 * w - b, 2 * w + 1 - b], axis=1).reshape(-1)
            byte = byte[(byte >= 0) & (byte < e - b)]
            idx = np.unique(byte // size)
            flat = buf.tensor(name).reshape(-1)
            vals = flat[idx].copy()
        if torch:
            import torch as _t
            out[name] = (_t.from_numpy(idx), _torch_of(vals, st))
        else:
            out[name] = (idx, vals)
    return ChangeList(raw.base, raw.target, out)


def chain(buf: Any, since: int, want: int) -> List[_Raw]:
    """The lists from version `since` to `want` (buf's committed
    version), in order, checked; raises ChangesUnavailable."""
    out = []
    v = want
    while v > since:
        r = read_list(buf, v, since, want)
        if r.flags & F_KEY:
            raise ChangesUnavailable(
                "version %d was committed by a keyframe resync: no change list leads from "
                "version %d across it; reload the tensors" % (v, since), since, want)
        if r.flags & F_RESUMED:
            raise ChangesUnavailable(
                "the commit of version %d was finished after its shim restarted: its "
                "changes are not known; reload the tensors" % v, since, want)
        if r.base < since:
            raise ChangesUnavailable(
                "version %d was committed from version %d, skipping version %d: no change "
                "list starts there; reload the tensors" % (v, r.base, since), since, want)
        out.append(r)
        v = r.base
    out.reverse()
    return out
