"""The compiled state of a SHARDS sample (:mod:`.sampling`): keys by 64-bit hash in a
linear-probing table, a max-heap of the sampled hashes (fixed size evicts the largest), free ids,
and a Fenwick tree over recency slots, as in :mod:`stackdist.engine.kernels`' classic layout
(``slot_of``, ``size_of``, ``key_at``, ``tree``, ``scalars = [next slot, live size]``; slots in
access order, compacted when they run out).

>>> st = HashedStack(4)
>>> i, d, _, err = st.run(np.array([5, 6, 5], np.uint64), np.uint64(0), None, np.array([2**64 - 1], np.uint64), -1)
>>> i.tolist(), d.tolist()[2], err
([0, 1, 2], 2, -1)
"""

from __future__ import annotations

import numpy as np

from ..kernels import COLD, njit

__all__ = ["HashedStack", "compact_slots", "hash_values", "multi_filter", "shards_engine_replay", "shards_replay"]


@njit(cache=True, nogil=True, inline="always")
def _mix(x, salt):
    """splitmix64's finalizer of ``x ^ salt``: a bijection of the 64-bit values."""
    x = x ^ salt
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True, nogil=True)
def hash_values(values, salt):
    """The seeded hash of every uint64 key value. O(n)."""
    out = np.empty(values.shape[0], np.uint64)
    for i in range(values.shape[0]):
        out[i] = _mix(values[i], salt)
    return out


_BLOCK = 1024  # keys hashed per seed at a time by multi_filter (its bit masks stay in L1)


@njit(cache=True, nogil=True)
def _seed_bits(values, lo, width, salt, cut, bit, bits):
    """``bits[i] |= bit`` where ``mix(values[lo + i] ^ salt) <= cut``, for ``i < width``: a loop
    without branches, which LLVM vectorizes (8 keys a step with AVX-512). O(width)."""
    for i in range(width):
        bits[i] |= np.int64(_mix(values[lo + i], salt) <= cut) * bit


@njit(cache=True, nogil=True)
def multi_filter(values, salts, cuts):
    """One pass over a chunk for several seeds at once: the indices of the accesses that at
    least one seed samples (``mix(value ^ salts[j]) <= cuts[j]``) and, for each, the bit mask of
    the seeds that do. Block by block: each seed's hashes of a block of keys in one vectorized
    loop, then the block's sampled accesses collected. O(n x seeds), no allocation beyond the output.

    >>> idx, own = multi_filter(np.arange(6, dtype=np.uint64), np.array([1, 7], np.uint64), np.array([2**63, 0], np.uint64))
    >>> bool((own == 1).all()), idx.size == int((hash_values(np.arange(6, dtype=np.uint64), np.uint64(1)) <= 2**63).sum())
    (True, True)
    """
    n = values.shape[0]
    k = salts.shape[0]
    idx = np.empty(n, np.int64)
    own = np.empty(n, np.int64)
    bits = np.empty(_BLOCK, np.int64)
    m = 0
    for lo in range(0, n, _BLOCK):
        width = min(n - lo, _BLOCK)
        bits[:width] = 0
        for j in range(k):
            _seed_bits(values, lo, width, salts[j], cuts[j], np.int64(1) << j, bits)
        for i in range(width):
            if bits[i] != 0:
                idx[m] = lo + i
                own[m] = bits[i]
                m += 1
    return idx[:m].copy(), own[:m].copy()


@njit(cache=True, nogil=True, inline="always")
def _fen_prefix(tree, slot):
    total = 0
    i = slot + 1
    while i > 0:
        total += tree[i]
        i &= i - 1
    return total


@njit(cache=True, nogil=True, inline="always")
def _fen_remove(tree, slot, used, size):
    i = slot + 1
    while i <= used:
        tree[i] -= size
        i += i & (-i)


@njit(cache=True, nogil=True, inline="always")
def _fen_append(tree, slot, size):
    i = slot + 1
    low = i & (-i)
    acc = size
    j = 1
    while j < low:
        acc += tree[i - j]
        j <<= 1
    tree[i] = acc


@njit(cache=True, nogil=True, inline="always")
def _table_delete(table_h, table_id, pos, mask):
    """Backward-shift deletion from a linear-probing table (no tombstones)."""
    i = pos
    j = pos
    while True:
        j = (j + 1) & mask
        if table_id[j] < 0:
            break
        home = np.int64(table_h[j] & np.uint64(mask))
        if (i <= j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        table_h[i] = table_h[j]
        table_id[i] = table_id[j]
        i = j
    table_id[i] = -1


@njit(cache=True, nogil=True, inline="always")
def _heap_push(heap_h, heap_id, n, h, k):
    """Push (h, k) on a max-heap of n entries (by h)."""
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if heap_h[parent] >= h:
            break
        heap_h[i] = heap_h[parent]
        heap_id[i] = heap_id[parent]
        i = parent
    heap_h[i] = h
    heap_id[i] = k


@njit(cache=True, nogil=True, inline="always")
def _heap_pop(heap_h, heap_id, n):
    """Remove the root of a max-heap of n entries (n - 1 remain)."""
    last_h = heap_h[n - 1]
    last_id = heap_id[n - 1]
    m = n - 1
    i = 0
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        if c + 1 < m and heap_h[c + 1] > heap_h[c]:
            c += 1
        if heap_h[c] <= last_h:
            break
        heap_h[i] = heap_h[c]
        heap_id[i] = heap_id[c]
        i = c
    if m > 0:
        heap_h[i] = last_h
        heap_id[i] = last_id


@njit(cache=True, nogil=True)
def compact_slots(slot_of, size_of, key_at, tree, used):
    """Renumber the live slots densely (order kept), rebuild the tree; return the live count. O(cap)."""
    live = 0
    for j in range(used):
        k = key_at[j]
        if k >= 0:
            key_at[j] = -1
            key_at[live] = k
            slot_of[k] = live
            live += 1
    for j in range(live):
        _fen_append(tree, j, size_of[key_at[j]])
    return live


@njit(cache=True, nogil=True)
def shards_replay(values, salt, sizes, unit, limit, thresh, table_h, table_id, heap_h, heap_id, free, counts,
                  slot_of, size_of, key_at, tree, scalars, out_i, out_d, out_t):
    """Hash (seeded by ``salt``), sample and replay one chunk of uint64 key ``values``. For the
    j-th sampled access: ``out_i[j]`` its index, ``out_d[j]`` its sampled distance (COLD, or
    sampled size units), ``out_t[j]`` the threshold it was sampled under. Returns (sampled
    count, -1, the index of a key whose size changed, or ``-2 - i`` when the state is full at
    access i: the caller grows it and resumes there).

    Keys are identified by their hash (a bijection of integer keys). ``thresh[0]``: keep
    ``h <= thresh[0]``; with ``limit >= 0`` (fixed size) a new key beyond ``limit`` evicts the
    largest hash and lowers the threshold below it. ``counts = [keys present, free ids,
    next id]``. The table (power of two) and the state must have room (the caller grows them).
    O(log S) per sampled access, O(1) per skipped one.
    """
    mask = table_h.shape[0] - 1
    cap = key_at.shape[0]
    t = scalars[0]
    total = scalars[1]
    n_out = 0
    cut = thresh[0]
    for i in range(values.shape[0]):
        h = _mix(values[i], salt)
        if h > cut:
            continue
        s = 1 if unit else sizes[i]
        pos = np.int64(h & np.uint64(mask))
        while table_id[pos] >= 0 and table_h[pos] != h:
            pos = (pos + 1) & mask
        k = table_id[pos]
        if k < 0:
            if counts[1] == 0 and (counts[2] >= slot_of.shape[0] or 2 * (counts[0] + 1) > table_h.shape[0]):
                scalars[0] = t
                scalars[1] = total
                return n_out, -2 - i  # out of room: the caller grows the state and resumes at i
            if counts[1] > 0:
                counts[1] -= 1
                k = free[counts[1]]
            else:
                k = counts[2]
                counts[2] += 1
            table_h[pos] = h
            table_id[pos] = k
            if limit >= 0:  # only fixed size evicts by largest hash
                _heap_push(heap_h, heap_id, counts[0], h, k)
            counts[0] += 1
            out_d[n_out] = COLD
            size_of[k] = s
        else:
            p = slot_of[k]
            if not unit and size_of[k] != s:
                scalars[0] = t
                scalars[1] = total
                return n_out, i
            out_d[n_out] = total - _fen_prefix(tree, p) + s
            _fen_remove(tree, p, t, s)
            key_at[p] = -1
            total -= s
        if t == cap:
            t = compact_slots(slot_of, size_of, key_at, tree, t)
        _fen_append(tree, t, s)
        slot_of[k] = t
        key_at[t] = k
        total += s
        t += 1
        if limit >= 0 and counts[0] > limit:
            gone_h = heap_h[0]
            gone = heap_id[0]
            _heap_pop(heap_h, heap_id, counts[0])
            counts[0] -= 1
            thresh[0] = gone_h - np.uint64(1)
            cut = thresh[0]
            q = np.int64(gone_h & np.uint64(mask))
            while table_h[q] != gone_h or table_id[q] < 0:
                q = (q + 1) & mask
            _table_delete(table_h, table_id, q, mask)
            p = slot_of[gone]
            _fen_remove(tree, p, t, size_of[gone])
            key_at[p] = -1
            total -= size_of[gone]
            slot_of[gone] = -1
            free[counts[1]] = gone
            counts[1] += 1
            if gone == k:
                continue
        out_i[n_out] = i
        out_t[n_out] = cut
        n_out += 1
    scalars[0] = t
    scalars[1] = total
    return n_out, -1


@njit(cache=True, nogil=True)
def _evict_largest(limit, thresh, table_h, table_id, heap_h, heap_id, free, counts, slot_of, size_of, key_at, tree, t, total):
    """Fixed size: evict the keys with the largest hashes until at most ``limit`` remain, the
    threshold falling below each; returns the live size left. O(log S) each."""
    mask = table_h.shape[0] - 1
    while limit >= 0 and counts[0] > limit:
        gone_h = heap_h[0]
        gone = heap_id[0]
        _heap_pop(heap_h, heap_id, counts[0])
        counts[0] -= 1
        thresh[0] = gone_h - np.uint64(1)
        q = np.int64(gone_h & np.uint64(mask))
        while table_h[q] != gone_h or table_id[q] < 0:
            q = (q + 1) & mask
        _table_delete(table_h, table_id, q, mask)
        p = slot_of[gone]
        if p >= 0:
            _fen_remove(tree, p, t, size_of[gone])
            key_at[p] = -1
            total -= size_of[gone]
        slot_of[gone] = -1
        free[counts[1]] = gone
        counts[1] += 1
    return total


@njit(cache=True, nogil=True)
def shards_engine_replay(values, offsets, salt, limit, thresh, table_h, table_id, heap_h, heap_id, free, counts,
                         slot_of, size_of, key_at, tree, scalars, out_d, out_t, ids):
    """Engine semantics on a SHARDS sample (unit blocks): per request ``values[offsets[r]:
    offsets[r+1]]``, every sampled block's depth in the sampled stack as the request found it
    (``out_d``: COLD if new, -1 if not sampled; ``out_t``: the threshold it was read under), then
    its sampled blocks committed tail first (as :func:`stackdist.engine.kernels.arrival_depths`
    does on the whole trace); fixed size (``limit >= 0``) evicts after each request. The state
    must have room for every sampled block of the chunk as a new key (the caller grows it).
    O(log S) per sampled block.
    """
    mask = table_h.shape[0] - 1
    cap = key_at.shape[0]
    t = scalars[0]
    total = scalars[1]
    for r in range(offsets.shape[0] - 1):
        lo = offsets[r]
        hi = offsets[r + 1]
        cut = thresh[0]
        for i in range(lo, hi):
            out_t[i] = cut
            h = _mix(values[i], salt)
            if h > cut:
                out_d[i] = -1
                ids[i] = -1
                continue
            pos = np.int64(h & np.uint64(mask))
            while table_id[pos] >= 0 and table_h[pos] != h:
                pos = (pos + 1) & mask
            k = table_id[pos]
            if k < 0:
                if counts[1] > 0:
                    counts[1] -= 1
                    k = free[counts[1]]
                else:
                    k = counts[2]
                    counts[2] += 1
                table_h[pos] = h
                table_id[pos] = k
                if limit >= 0:
                    _heap_push(heap_h, heap_id, counts[0], h, k)
                counts[0] += 1
                slot_of[k] = -1
                size_of[k] = 1
            p = slot_of[k]
            out_d[i] = COLD if p < 0 else total - _fen_prefix(tree, p) + 1
            ids[i] = k
        for i in range(hi - 1, lo - 1, -1):
            k = ids[i]
            if k < 0:
                continue
            p = slot_of[k]
            if p >= 0:
                _fen_remove(tree, p, t, 1)
                key_at[p] = -1
                total -= 1
            if t == cap:
                t = compact_slots(slot_of, size_of, key_at, tree, t)
            _fen_append(tree, t, 1)
            slot_of[k] = t
            key_at[t] = k
            total += 1
            t += 1
        total = _evict_largest(limit, thresh, table_h, table_id, heap_h, heap_id, free, counts, slot_of, size_of,
                               key_at, tree, t, total)
    scalars[0] = t
    scalars[1] = total


class HashedStack:
    """The state of :func:`shards_replay`: keys by hash in a linear-probing table, a max-heap of
    the sampled hashes, free ids, and a Fenwick tree over recency slots (layout as in
    :mod:`.kernels`' classic form: ``slot_of``, ``size_of``, ``key_at``, ``tree``, ``scalars``).
    Self-contained, so it can also serve as an exact replay keyed by hash (rate 1, no limit).

    >>> st = HashedStack(4)
    >>> i, d, _, err = st.run(np.array([5, 6, 5], np.uint64), np.uint64(0), None, np.array([2**64 - 1], np.uint64), -1)
    >>> i.tolist(), d.tolist()[2], err
    ([0, 1, 2], 2, -1)
    """

    def __init__(self, n_ids: int = 64) -> None:
        self.counts = np.zeros(3, np.int64)
        self.table_h = np.zeros(0, np.uint64)
        self.table_id = np.zeros(0, np.int64)
        self.heap_h = np.zeros(0, np.uint64)
        self.heap_id = np.zeros(0, np.int64)
        self.free = np.zeros(0, np.int64)
        self.slot_of = np.zeros(0, np.int64)
        self.size_of = np.zeros(0, np.int64)
        self.key_at = np.full(128, -1, np.int64)
        self.tree = np.zeros(129, np.int64)
        self.scalars = np.zeros(2, np.int64)
        self.grow(n_ids)

    def grow(self, n_ids: int) -> None:
        """Room for ``n_ids`` key ids: table at least 2x (a power of two), heap, free list, slots
        at least 2x (compacted into the new arrays). O(n_ids)."""
        size = 1 << max(6, int(2 * n_ids - 1).bit_length())
        if size > self.table_h.shape[0]:
            present = self.table_id >= 0
            old_h, old_id = self.table_h[present], self.table_id[present]
            self.table_h = np.zeros(size, np.uint64)
            self.table_id = np.full(size, -1, np.int64)
            _table_insert_all(self.table_h, self.table_id, old_h, old_id)
        old = self.slot_of.shape[0]
        if n_ids > old:
            grow = max(n_ids, 2 * old) - old
            self.heap_h = np.concatenate([self.heap_h, np.zeros(grow, np.uint64)])
            self.heap_id = np.concatenate([self.heap_id, np.zeros(grow, np.int64)])
            self.free = np.concatenate([self.free, np.zeros(grow, np.int64)])
            self.slot_of = np.concatenate([self.slot_of, np.full(grow, -1, np.int64)])
            self.size_of = np.concatenate([self.size_of, np.zeros(grow, np.int64)])
        if self.key_at.shape[0] < 2 * n_ids:
            cap = 2 * max(n_ids, self.key_at.shape[0])
            key_at = np.full(cap, -1, np.int64)
            key_at[: self.key_at.shape[0]] = self.key_at
            self.key_at, self.tree = key_at, np.zeros(cap + 1, np.int64)
            self.scalars[0] = compact_slots(self.slot_of, self.size_of, self.key_at, self.tree, int(self.scalars[0]))

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays. O(1)."""
        return sum(a.nbytes for a in (self.table_h, self.table_id, self.heap_h, self.heap_id, self.free,
                                      self.slot_of, self.size_of, self.key_at, self.tree))

    def run(self, values: np.ndarray, salt: np.uint64, sizes: np.ndarray | None, thresh: np.ndarray, limit: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Run :func:`shards_replay` on one chunk of uint64 key values, growing the state when it
        fills: (indices, distances and thresholds of the sampled accesses, error index or -1)."""
        n = values.shape[0]
        out_i, out_d, out_t = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint64)
        done, start = 0, 0
        unit_sizes = np.ones(1, np.int64)
        while True:
            got, error = shards_replay(values[start:], salt, unit_sizes if sizes is None else sizes[start:], sizes is None,
                                       limit, thresh, self.table_h, self.table_id, self.heap_h, self.heap_id, self.free,
                                       self.counts, self.slot_of, self.size_of, self.key_at, self.tree, self.scalars,
                                       out_i[done:], out_d[done:], out_t[done:])
            out_i[done : done + got] += start
            done += got
            if error > -2:
                return out_i[:done], out_d[:done], out_t[:done], int(error if error < 0 else error + start)
            start += -2 - int(error)
            self.grow(2 * max(int(self.counts[2]), 32))


    def run_requests(self, values: np.ndarray, offsets: np.ndarray, salt: np.uint64, thresh: np.ndarray, limit: int
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Run :func:`shards_engine_replay` on whole requests (``offsets`` into ``values``),
        growing the state first: (per-block depths, -1 for the unsampled, and thresholds)."""
        n = values.shape[0]
        if n:
            sampled, _ = multi_filter(values, np.array([salt], np.uint64), thresh[:1].copy())
            self.grow(int(self.counts[2]) + sampled.shape[0] + 1)
        out_d, out_t, ids = np.empty(n, np.int64), np.empty(n, np.uint64), np.empty(n, np.int64)
        shards_engine_replay(values, np.asarray(offsets, np.int64), salt, limit, thresh, self.table_h, self.table_id,
                             self.heap_h, self.heap_id, self.free, self.counts, self.slot_of, self.size_of, self.key_at,
                             self.tree, self.scalars, out_d, out_t, ids)
        return out_d, out_t


@njit(cache=True, nogil=True)
def _table_insert_all(table_h, table_id, hashes, ids):
    """Insert (hash, id) pairs into an empty linear-probing table. O(n)."""
    mask = table_h.shape[0] - 1
    for i in range(hashes.shape[0]):
        pos = np.int64(hashes[i] & np.uint64(mask))
        while table_id[pos] >= 0:
            pos = (pos + 1) & mask
        table_h[pos] = hashes[i]
        table_id[pos] = ids[i]


