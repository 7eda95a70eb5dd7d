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
import mmap
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
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # map a list's pages in one call


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
    """One list file, checked: word positions (int64) and their new words,
    entry by entry (ranges in order; positions in no order inside one):
    entry k's are pos[cum[k]:cum[k + 1]], inside [rb[k], re[k]). The
    positions of the entries of a tensor t with fast[t] (_sort) are
    relative to the tensor's first word, all others are absolute."""

    def __init__(self, flags: int, base: int, target: int, rb: Any, re: Any, cum: Any) -> None:
        self.flags, self.base, self.target = flags, base, target
        self.rb, self.re, self.cum = rb, re, cum
        self.pos: Any = None
        self.val: Any = None
        self.dense = 0  # entries of every position of their range
        self.fast: Any = None
        self.fast_only = True  # every entry that meets a tensor meets a fast one
        self._src: Any = None  # (mapped file, data offsets, n, dense, delta)

    def build(self, pos: Any = None, val: Any = None) -> None:
        """pos and val from the checked file (into the given arrays, of at
        least cum[-1] elements, else new ones); then unmaps it."""
        import numpy as np
        d, offs, ns, ds, delta = self._src
        total = int(self.cum[-1])
        pos = np.empty(total, np.int64) if pos is None else pos[:total]
        val = np.empty(total, np.uint16) if val is None else val[:total]
        u4 = np.frombuffer(d, dtype="<u4", offset=_HDR.size)
        u2 = np.frombuffer(d, dtype="<u2", offset=_HDR.size)
        cum = self.cum.tolist()
        ar = None
        for k, n in enumerate(ns):
            if not n:
                continue
            c, o, dl = cum[k], offs[k] - _HDR.size, delta[k]
            if ds[k]:
                if ar is None or len(ar) < n:
                    ar = np.arange(max(n, 1 << 16), dtype=np.int64)
                np.add(ar[:n], dl, out=pos[c:c + n])
                val[c:c + n] = u2[o // 2:o // 2 + n]
            else:
                np.add(u4[o // 4:o // 4 + n], dl, out=pos[c:c + n], dtype=np.int64)
                val[c:c + n] = u2[(o + 4 * n) // 2:(o + 4 * n) // 2 + n]
        del u4, u2
        self.pos, self.val, self._src = pos, val, None
        _unmap(d)


def directory(buffer_path: str) -> str:
    """Where the shim keeps the change lists of the buffer at buffer_path."""
    return buffer_path + ".changes"


def list_path(buffer_path: str, version: int) -> str:
    return os.path.join(directory(buffer_path), "%010d.chg" % version)


def read_list(buf: Any, version: int, have: Optional[int], want: int,
              build: bool = True) -> _Raw:
    """The list file of `version` beside buf (a WeightBuffer), checked
    whole; raises ChangesUnavailable when there is none or it is damaged.
    The file is mapped (lists are replaced by rename, never rewritten in
    place), checked, and its positions and values copied out once: a
    list's positions as int64 and its values, ready for index_copy_
    (build=False: once its build() is called, the file kept mapped till
    then)."""
    import numpy as np
    path = list_path(buf.path, version)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HDR.size:
                d: Any = f.read()
            else:
                d = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | _POPULATE,
                              prot=mmap.PROT_READ)
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
    r = None
    try:
        r = _parse(buf, version, have, want, path, d, np)
        if build:
            r.build()
        return r
    finally:
        if r is None or r._src is None:
            _unmap(d)


def _unmap(d: Any) -> None:
    if isinstance(d, mmap.mmap):
        try:
            d.close()
        except BufferError:  # a view of it still held by a traceback
            pass


def _parse(buf: Any, version: int, have: Optional[int], want: int, path: str, d: Any,
           np: Any) -> _Raw:
    def bad(what: str) -> ChangesUnavailable:
        return ChangesUnavailable("damaged change list %s: %s; not applied" % (path, what),
                                  have, want)

    if len(d) < _HDR.size:
        raise bad("%d bytes, shorter than its header" % len(d))
    (magic, layout, flags, model_id, n_params, ino, n_changes, base, target, n_ranges,
     crc) = _HDR.unpack_from(d, 0)
    if magic != MAGIC or layout != LAYOUT:
        raise bad("not a bfpatch change list (magic %r, layout %d)" % (magic, layout))
    with memoryview(d) as m:
        ok = zlib.crc32(m[_HDR.size:], zlib.crc32(m[:_HDR.size - 4])) == crc
    if not ok:
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
    # the records: their fields and where their data lie (one unpack and
    # a few comparisons each; the data are looked at whole below)
    size = len(d)
    rb, re, ns, ds, offs = [], [], [], [], []
    unpack = _REC.unpack_from
    off, end, total, n_dense = _HDR.size, 0, 0, 0
    for _ in range(n_ranges):
        if off + _REC.size > size:
            raise bad("cut short")
        begin, rlen, n, eflags, resv = unpack(d, off)
        off += _REC.size
        dense = eflags == E_DENSE
        if (eflags & ~E_DENSE) or resv or begin < end or begin + rlen > n_params or \
                n > rlen or (dense and n != rlen):
            raise bad("range [%d, +%d) of %d changes (flags %#x) out of order or bounds"
                      % (begin, rlen, n, eflags))
        body = n * (2 if dense else 6)
        if off + body > size:
            raise bad("cut short")
        n_dense += dense
        end = begin + rlen
        rb.append(begin)
        re.append(end)
        ns.append(n)
        ds.append(dense)
        offs.append(off)
        off += body + (-body % 8)
        total += n
    if off != size or total != n_changes:
        raise bad("%d bytes and %d changes, its header says %d and %d"
                  % (size, total, off, n_changes))
    # off is a multiple of 8 (the header's 64 bytes, records padded to 8)
    u4 = np.frombuffer(d, dtype="<u4", offset=_HDR.size)
    R = len(rb)
    rb_a = np.array(rb, np.int64)
    re_a = np.array(re, np.int64)
    n_a = np.array(ns, np.int64)
    sparse = np.flatnonzero((n_a > 0) & ~np.array(ds, bool))
    if sparse.size:  # every offset below its range's length: one pass
        o4 = (np.array(offs, np.int64)[sparse] - _HDR.size) // 4
        cuts = np.empty(2 * sparse.size, np.int64)
        cuts[0::2], cuts[1::2] = o4, o4 + n_a[sparse]
        # (an offset array is always followed by its values: cuts < len)
        top = np.maximum.reduceat(u4, cuts)[0::2]
        over = np.flatnonzero(top >= (re_a - rb_a)[sparse])
        if over.size:
            k = int(sparse[over[0]])
            raise bad("a change past its range [%d, +%d)" % (rb[k], re[k] - rb[k]))
    del u4
    fast, rel, t_of, meets = _sort(buf, rb_a, re_a, np)
    delta = rb_a.copy()
    if rel.any():
        delta[rel] -= _layout(buf, np)[1][t_of[rel]]
    cum = np.zeros(R + 1, np.int64)
    np.cumsum(n_a, out=cum[1:])
    r = _Raw(flags, base, target, rb_a, re_a, cum)
    r.fast = fast
    r.fast_only = not bool((~rel & (n_a > 0) & meets).any())
    r._src = (d, offs, ns, ds, delta.tolist())
    r.dense = n_dense
    return r


def _layout(buf: Any, np: Any) -> Tuple[List[str], Any, Any, Any, Any]:
    """buf's tensors that hold bytes, in the order of their data: names,
    then as arrays their first and end words (a tensor at bytes [b, e)
    holds words b/2 to (e+1)/2), whether it is 16-bit at an even offset
    (its elements are the words), and whether the tensors are disjoint
    (else no list is read by tensor runs, see _sort). Kept on buf."""
    got = getattr(buf, "_chg_layout", None)
    if got is None:
        ts = [(b, e, n, st) for n, (st, _, b, e) in buf.tensors.items() if e > b]
        ts.sort()
        wlo = np.array([b // 2 for b, _, _, _ in ts], np.int64)
        whi = np.array([(e + 1) // 2 for _, e, _, _ in ts], np.int64)
        w16 = np.array([_dt.itemsize(st) == 2 and b % 2 == 0 for b, _, _, st in ts], bool)
        disjoint = all(ts[i][1] <= ts[i + 1][0] for i in range(len(ts) - 1))
        got = ([n for _, _, n, _ in ts], wlo, whi, w16, disjoint)
        buf._chg_layout = got
    return got


def _sort(buf: Any, rb: Any, re: Any, np: Any) -> Tuple[Any, Any, Any, Any]:
    """Which of buf's tensors (_layout) take a list's entries (ranges
    [rb, re)) by runs: a 16-bit tensor at an even offset whose entries all
    lie inside it, each meeting no other tensor; their entries' positions
    are kept relative to the tensor, so its indices are one slice of the
    list's. Returns fast (per tensor), rel (per entry: relative to
    tensor t_of), t_of and meets (per entry: it meets a tensor)."""
    names, wlo, whi, w16, disjoint = _layout(buf, np)
    T = len(names)
    if not T or not len(rb) or not disjoint:
        return (np.zeros(T, bool), np.zeros(len(rb), bool), np.zeros(len(rb), np.int64),
                np.ones(len(rb), bool))
    lo = np.searchsorted(whi, rb, "right")   # the tensors an entry meets:
    hi = np.searchsorted(wlo, re, "left")    # [lo, hi)
    t_of = np.minimum(lo, T - 1)
    simple = (hi - lo == 1) & w16[t_of] & (rb >= wlo[t_of]) & (re <= whi[t_of])
    mark = np.zeros(T + 1, np.int64)
    np.add.at(mark, lo[~simple], 1)
    np.add.at(mark, np.minimum(hi[~simple], T), -1)
    fast = w16 & (np.cumsum(mark[:T]) == 0)
    return fast, simple & fast[t_of], t_of, hi > lo


def _torch_of(a: Any, st: str) -> Any:
    """numpy array a (of dtypes.numpy_dtype(st)) as a torch tensor of
    dtypes.torch_dtype(st), its bits unchanged; its memory where a is
    contiguous and writable (as per_tensor's arrays are)."""
    import numpy as np
    import torch
    size = _dt.itemsize(st)
    raw = np.ascontiguousarray(a).view(np.uint8 if size == 1 else np.dtype("<i%d" % size))
    if not raw.flags.writeable:
        raw = raw.copy()
    return torch.from_numpy(raw).view(_dt.torch_dtype(st))


def per_tensor(buf: Any, raw: _Raw, torch: bool) -> ChangeList:
    """raw's changes as (indices, values) per tensor of buf. 16-bit tensors
    (at an even offset) and 1-byte ones take their new values from the
    list; wider ones (F32, I64, ...) read the changed elements' values
    from buf's committed version (the caller holds the sequence counter
    still). A tensor whose entries lie inside it (_sort) gets slices of
    the list's arrays, no copy."""
    import numpy as np
    out: Dict[str, Tuple[Any, Any]] = {}
    pos, val = raw.pos, raw.val
    names, wlos, whis, _, _ = _layout(buf, np)
    # the entries whose ranges meet each tensor's words: [r0, r1)
    r0s = np.searchsorted(raw.re, wlos, "right").tolist()
    r1s = np.searchsorted(raw.rb, whis, "left").tolist()
    fast = raw.fast.tolist() if raw.fast is not None else [False] * len(names)
    cum = raw.cum.tolist()
    for t, name in enumerate(names):
        r0, r1 = r0s[t], r1s[t]
        if r0 >= r1:
            continue
        lo, hi = cum[r0], cum[r1]
        if lo == hi:
            continue
        st, _, b, e = buf.tensors[name]
        if fast[t]:
            idx, vals = pos[lo:hi], val[lo:hi].view(_dt.numpy_dtype(st))
        else:
            idx, vals = _generic(buf, name, pos[lo:hi], val[lo:hi], int(wlos[t]),
                                 int(whis[t]), np)
            if idx is None:
                continue
        if torch:
            import torch as _t
            out[name] = (_t.from_numpy(idx), _torch_of(vals, st))
        else:
            out[name] = (idx, vals)
    return ChangeList(raw.base, raw.target, out)


def changed(buf: Any, raw: _Raw) -> List[str]:
    """The tensors raw (built or not, fast_only) changes: per_tensor's
    names, without building it."""
    import numpy as np
    names, wlos, whis, _, _ = _layout(buf, np)
    lo = raw.cum[np.searchsorted(raw.re, wlos, "right")]
    hi = raw.cum[np.maximum(np.searchsorted(raw.rb, whis, "left"), 0)]
    return [names[t] for t in np.flatnonzero(hi > lo).tolist()]


def _generic(buf: Any, name: str, w: Any, v16: Any, wlo: int, whi: int,
             np: Any) -> Tuple[Any, Any]:
    """Absolute word positions w and their words v16, of entries that meet
    tensor name (words [wlo, whi)), as its (indices, values); (None,
    None) when none of them is inside it."""
    st, _, b, e = buf.tensors[name]
    inside = (w >= wlo) & (w < whi)
    if not inside.all():
        w, v16 = w[inside], v16[inside]
    if not w.size:
        return None, None
    size = _dt.itemsize(st)
    ndt = _dt.numpy_dtype(st)
    if size == 2 and b % 2 == 0:
        return w - b // 2, v16.view(ndt).copy()
    if size == 1:
        idx = np.stack([2 * w - b, 2 * w + 1 - b], axis=1).reshape(-1)
        keep = (idx >= 0) & (idx < e - b)
        return idx[keep], v16.view(np.uint8)[keep].view(ndt).copy()
    byte = np.stack([2 * w - b, 2 * w + 1 - b], axis=1).reshape(-1)
    byte = byte[(byte >= 0) & (byte < e - b)]
    idx = np.unique(byte // size)
    return idx, buf.tensor(name).reshape(-1)[idx].copy()


def chain(buf: Any, since: int, want: int, build: bool = True) -> List[_Raw]:
    """The lists from version `since` to `want` (buf's committed
    version), in order, checked; raises ChangesUnavailable. build=False:
    read_list's."""
    out = []
    v = want
    while v > since:
        r = read_list(buf, v, since, want, build)
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
