"""SHARDS spatial sampling (Waldspurger et al., FAST'15): approximate LRU curves in bounded memory.

Every key gets a seeded 64-bit hash ``h``; an access is *sampled* iff its key's hash falls under
the threshold, ``h < T``, so a key is either always or never sampled. With sampling rate
``R = T / 2**64`` the sampled stream is replayed exactly, and a sampled stack distance ``d``
(counted in sampled keys, or their sizes) stands for ``d / R`` of the full trace: an access
hits at capacity ``C`` iff ``d / R <= C``.

Why the sampled stack tells the full one. The LRU stack orders keys by their last access; the
sampled stream contains every access of a sampled key, so its stack is the full stack with the
unsampled keys deleted (same order). A sampled access's distance is therefore its own size plus
the sizes of the *sampled* keys among the distinct keys above it; each of those keys is sampled
with probability ``R`` independently of the access (the hash is fixed before the trace is
seen), so ``d / R`` estimates the full distance.

Two forms, one compiled kernel (:func:`shards_replay`):

- fixed rate (``rate``): ``T = rate * 2**64`` for the whole trace;
- fixed size (``max_keys``, "SHARDS_max"): at most ``S`` sampled keys are kept; when a new one
  would make ``S + 1``, the key with the largest hash is evicted (from the stack too) and the
  threshold drops to its hash, so ``R`` only falls. An access sampled at rate ``R_i`` counts with
  weight ``1 / R_i``: this equals the paper's rescaling of the histogram by ``T_new / T_old`` at
  each drop followed by a division by ``R_final``.

The published correction (SHARDS_adj): the sampled accesses' total weight should be the trace's
``N`` accesses; the difference ``N - sum(weights)`` (from a hot key that was, or was not,
sampled) is added to the smallest-distance bucket, so it counts as a hit at every capacity at or
above that bucket. Estimates are clipped to ``[0, N]``.

Seeded and reproducible: integer keys are hashed by a seeded bijection of their 64-bit value
(so at rate 1.0 no two keys collide and the curve equals the exact one); string keys by
blake2b-64 first. Capacities with varied sizes are meant at or above the largest object (as in
:mod:`.stream`).

>>> keys = np.arange(2000) % 500
>>> c = sampled_curve(keys, rate=1.0)
>>> from stackdist.engine import HitCurve
>>> c.hits_at(500) == HitCurve.from_trace(keys).hits_at(500), c.sampled
(True, True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..curve import parse_window
from ..kernels import COLD, njit
from ..keys import check_sizes
from .sampled_curve import SampledCurve, spread

__all__ = [
    "SKIP",
    "SampledCurve",
    "ShardsSampler",
    "key_hashes",
    "rate_of_threshold",
    "sample_mask",
    "sampled_curve",
    "sampled_curves",
    "seed_mix",
    "spread",
    "threshold_for_rate",
]

SKIP = -1
"""The distance the kernel writes for an access that was not sampled."""
TWO64 = 2.0**64
_QUANT_BITS = 16  # fixed-size mode: scaled distances rounded up to 16 significant bits
_CHUNK = 1 << 21


def threshold_for_rate(rate: float) -> int:
    """The inclusive 64-bit threshold for ``rate`` (keep ``h <= T``); rate 1.0 keeps every hash.

    >>> threshold_for_rate(1.0) == 2**64 - 1, threshold_for_rate(0.5) == 2**63 - 1
    (True, True)
    """
    if not 0 < rate <= 1:
        raise ValueError(f"sample rate must be in (0, 1]; got {rate}.")
    return min(2**64 - 1, max(0, int(rate * 2**64) - 1))


def rate_of_threshold(threshold: Any) -> Any:
    """The sampling rate of an inclusive threshold (scalar or array). O(1) each.

    >>> float(rate_of_threshold(2**63 - 1))
    0.5
    """
    return np.minimum(1.0, (np.asarray(threshold, dtype=np.uint64).astype(np.float64) + 1.0) / TWO64)


def seed_mix(seed: int) -> int:
    """The 64-bit constant a seed XORs into every key before mixing. O(1).

    >>> seed_mix(0) != seed_mix(1)
    True
    """
    x = (int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    return x ^ (x >> 31)


def _key_values(keys: Any) -> np.ndarray:
    """Keys as uint64 values: integers by their 64-bit pattern, anything else by blake2b-64 of
    its text (computed once per distinct key)."""
    arr = keys if isinstance(keys, np.ndarray) else np.asarray(list(keys), dtype=object)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False).view(np.uint64) if arr.dtype.kind == "i" else arr.astype(np.uint64)
    if arr.dtype.kind == "b":
        return arr.astype(np.uint64)
    if arr.size and all(type(k) is int for k in arr.tolist()):
        return np.array([k % 2**64 for k in arr.tolist()], dtype=np.uint64)
    digest: dict[Any, int] = {}
    for k in arr.tolist():
        if k not in digest:
            digest[k] = int.from_bytes(hashlib.blake2b(repr(k).encode(), digest_size=8).digest(), "little")
    return np.fromiter((digest[k] for k in arr.tolist()), np.uint64, arr.size)


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


def key_hashes(keys: Any, seed: int = 0) -> np.ndarray:
    """The seeded 64-bit sampling hash of every key (uint64). O(n).

    >>> h = key_hashes(np.array([5, 6, 5]), seed=1)
    >>> bool(h[0] == h[2]), bool(h[0] != h[1])
    (True, True)
    """
    return hash_values(_key_values(keys), np.uint64(seed_mix(seed)))


def sample_mask(keys: Any, rate: float, seed: int = 0) -> np.ndarray:
    """Which accesses a fixed-rate sample keeps (those whose key hashes at or under the threshold). O(n).

    >>> int(sample_mask(np.arange(100_000), 0.1).sum()) in range(9_000, 11_000)
    True
    """
    return key_hashes(keys, seed) <= np.uint64(threshold_for_rate(rate))


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


def _quantize_up(caps: np.ndarray) -> np.ndarray:
    """Round positive int64 capacities up to ``_QUANT_BITS`` significant bits (relative error
    below 2**-15), so a fixed-size sample's histogram stays small. O(n)."""
    bits = np.zeros(caps.shape, np.int64)
    big = caps >= 1 << _QUANT_BITS
    if big.any():
        bits[big] = np.floor(np.log2(caps[big].astype(np.float64))).astype(np.int64) + 1 - _QUANT_BITS
    step = np.left_shift(np.int64(1), bits)
    return (caps + step - 1) // step * step


def _collapse(values: np.ndarray, *weights: np.ndarray) -> tuple[np.ndarray, ...]:
    """Sorted distinct values with the weights of equal values summed. O(n log n)."""
    if values.size == 0:
        return (values.astype(np.int64),) + tuple(w.astype(np.float64) for w in weights)
    order = np.argsort(values, kind="stable")
    v = values[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    return (v[starts],) + tuple(np.add.reduceat(w[order], starts) for w in weights)


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


class ShardsSampler:
    """Feed accesses in chunks; get a :class:`SampledCurve` at any time. O(S) state.

    Give ``rate`` (fixed rate), ``max_keys`` (fixed size, starting at rate 1.0 or at ``rate``
    when both are given), or both. ``seed`` picks the hash. State: the sampled keys' replay (at
    most ``max_keys`` keys, else about ``rate`` x distinct keys), a hash table and a heap of their
    hashes, and the histogram of scaled distances (its size bounded by the distinct sampled
    distances; 16-bit rounding keeps it small in fixed-size mode).

    >>> s = ShardsSampler(max_keys=50, seed=3); _ = [s.feed(np.arange(i, i + 400) % 200) for i in range(0, 4000, 400)]
    >>> s.n_sampled_keys <= 50, s.rate < 1.0, s.curve().n_accesses
    (True, True, 4000)
    """

    def __init__(self, rate: float | None = None, max_keys: int | None = None, seed: int = 0) -> None:
        if rate is None and max_keys is None:
            raise ValueError("give a sample rate, a sample size (max_keys), or both.")
        if max_keys is not None and max_keys < 1:
            raise ValueError(f"sample size must be a positive number of keys; got {max_keys}.")
        self.seed, self.max_keys = int(seed), max_keys
        self._salt = np.uint64(seed_mix(seed))
        self._thresh = np.array([threshold_for_rate(1.0 if rate is None else rate)], np.uint64)
        self._stack = HashedStack(64 if max_keys is None else max_keys + 1)
        self.n_accesses = 0
        self.total_size = 0
        self._unit = True
        self._values = np.zeros(0, np.int64)
        self._w = np.zeros(0, np.float64)
        self._ws = np.zeros(0, np.float64)
        self.sampled_weight = 0.0
        self.sampled_size_weight = 0.0
        self.cold_weight = 0.0
        self.cold_size_weight = 0.0
        self.n_sampled_accesses = 0

    @property
    def rate(self) -> float:
        """The current sampling rate (it only falls in fixed-size mode). O(1)."""
        return float(rate_of_threshold(self._thresh[0]))

    @property
    def n_sampled_keys(self) -> int:
        """Keys in the sample now. O(1)."""
        return int(self._stack.counts[0])

    def feed(self, keys: Any, sizes: Sequence[int] | np.ndarray | None = None, counted: Any = None) -> np.ndarray:
        """Sample and replay one chunk; return its per-access sampled distances (SKIP if not sampled).

        ``counted``: a boolean mask (or slice) of the chunk's accesses whose hits count (default
        all). A key whose size changes is a ValueError. O(len) plus O(log S) per sampled access.
        """
        values = _key_values(keys)
        size_arr = check_sizes(sizes, values.shape[0])
        self._unit = self._unit and size_arr is None
        limit = -1 if self.max_keys is None else self.max_keys
        idx, d, t, error = self._stack.run(values, self._salt, size_arr, self._thresh, limit)
        if error >= 0:
            raise ValueError(f"key {np.asarray(keys)[error]!r} changed size at position {self.n_accesses + error}; "
                             "a key's size must be fixed.")
        n = values.shape[0]
        if counted is None:
            self.n_accesses += n
            self.total_size += n if size_arr is None else int(size_arr.sum())
        else:
            mask = np.zeros(n, bool)
            mask[counted] = True
            self.n_accesses += int(mask.sum())
            self.total_size += int(mask.sum()) if size_arr is None else int(size_arr[mask].sum())
            keep = mask[idx]
            idx, d, t = idx[keep], d[keep], t[keep]
        self._account(d, t, None if size_arr is None else size_arr[idx])
        out = np.full(n, SKIP, np.int64)
        out[idx] = d
        return out

    def _account(self, d: np.ndarray, t: np.ndarray, sizes: np.ndarray | None) -> None:
        r = rate_of_threshold(t)
        w = 1.0 / r
        s = np.ones(d.shape, np.float64) if sizes is None else sizes.astype(np.float64)
        self.n_sampled_accesses += int(d.size)
        self.sampled_weight += float(w.sum())
        self.sampled_size_weight += float((w * s).sum())
        cold = d == COLD
        self.cold_weight += float(w[cold].sum())
        self.cold_size_weight += float((w * s)[cold].sum())
        finite = ~cold
        caps = np.ceil(d[finite] / r[finite] - 1e-9).astype(np.int64)
        if self.max_keys is not None:
            caps = _quantize_up(caps)
        values = np.concatenate([self._values, caps])
        wf = np.concatenate([self._w, w[finite]])
        wsf = np.concatenate([self._ws, (w * s)[finite]])
        self._values, self._w, self._ws = _collapse(values, wf, wsf)

    def curve(self) -> SampledCurve:
        """The estimated curve so far (SHARDS_adj). O(histogram).

        >>> s = ShardsSampler(rate=1.0); _ = s.feed([1, 2, 1]); s.curve().hits_at(2)
        1.0
        """
        return SampledCurve(self._values, np.cumsum(self._w), np.cumsum(self._ws), self.n_accesses, self.total_size,
                            self.sampled_weight, self.sampled_size_weight, self.cold_weight, self.cold_size_weight,
                            self.rate, self.max_keys, self.seed, self.n_sampled_accesses, self.n_sampled_keys,
                            self._unit)


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


def sampled_curve(keys: Any, sizes: Any = None, *, rate: float | None = None, max_keys: int | None = None,
                  seed: int = 0, window: Any = None) -> SampledCurve:
    """A SHARDS estimate of the LRU curve of a whole trace, replayed in chunks. O(n + S log S)
    time for the hashing and the sampled accesses' replay, O(S) state.

    >>> c = sampled_curve(np.arange(30_000) % 3_000, rate=0.1, seed=7)
    >>> round(c.hit_rate_at(3_000), 2), c.min_capacity_for(hit_rate=0.8) in range(2_700, 3_300)
    (0.9, True)
    """
    arr = keys if isinstance(keys, np.ndarray) else np.asarray(list(keys))
    size_arr = check_sizes(sizes, arr.shape[0])
    start, stop = parse_window(window, arr.shape[0])
    sampler = ShardsSampler(rate, max_keys, seed)
    for lo in range(0, max(arr.shape[0], 1), _CHUNK):
        hi = min(arr.shape[0], lo + _CHUNK)
        counted = slice(max(start, lo) - lo, max(min(stop, hi), lo) - lo)
        sampler.feed(arr[lo:hi], None if size_arr is None else size_arr[lo:hi], counted)
    return sampler.curve()


def sampled_curves(keys: Any, sizes: Any = None, *, rate: float | None = None, max_keys: int | None = None,
                   seeds: Sequence[int] = (0, 1, 2), window: Any = None) -> list[SampledCurve]:
    """One :func:`sampled_curve` per seed (the first is the answer, the rest give error bars).
    O(len(seeds)) times one sample.

    >>> len(sampled_curves([0, 1, 0], rate=1.0, seeds=(0, 1)))
    2
    """
    return [sampled_curve(keys, sizes, rate=rate, max_keys=max_keys, seed=s, window=window) for s in seeds]
