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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..curve import parse_window
from ..kernels import COLD
from ..keys import check_sizes
from .estimate import (
    EXACT_SIZE,
    SampledCurve,
    collapse_sized,
    fixed_rate_curve,
    fixed_rate_sized_curve,
    spread,
)
from .hashed_stack import HashedStack, hash_values, multi_filter
from .thresholds import rate_of_threshold, seed_mix, threshold_for_rate

__all__ = [
    "SKIP",
    "HashFilter",
    "SampledCurve",
    "ShardsSampler",
    "feed_all",
    "key_hashes",
    "rate_of_threshold",
    "sample_keys",
    "sample_mask",
    "sampled_curve",
    "sampled_curves",
    "seed_mix",
    "spread",
    "threshold_for_rate",
    "weighted_estimate",
]

SKIP = -1
"""The distance the kernel writes for an access that was not sampled."""
_QUANT_BITS = 16  # fixed-size mode: scaled distances rounded up to 16 significant bits
_CHUNK = 1 << 21


def _key_values(keys: Any) -> np.ndarray:
    """Keys as uint64 values: integers by their 64-bit pattern, anything else by blake2b-64 of
    its text (computed once per distinct key)."""
    arr = keys if isinstance(keys, np.ndarray) else np.asarray(list(keys), dtype=object)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False).view(np.uint64) if arr.dtype.kind == "i" else arr.astype(np.uint64, copy=False)
    if arr.dtype.kind == "b":
        return arr.astype(np.uint64)
    if arr.size and all(type(k) is int for k in arr.tolist()):
        return np.array([k % 2**64 for k in arr.tolist()], dtype=np.uint64)
    digest: dict[Any, int] = {}
    for k in arr.tolist():
        if k not in digest:
            digest[k] = int.from_bytes(hashlib.blake2b(repr(k).encode(), digest_size=8).digest(), "little")
    return np.fromiter((digest[k] for k in arr.tolist()), np.uint64, arr.size)


def key_hashes(keys: Any, seed: int = 0) -> np.ndarray:
    """The seeded 64-bit sampling hash of every key (uint64). O(n).

    >>> h = key_hashes(np.array([5, 6, 5]), seed=1)
    >>> bool(h[0] == h[2]), bool(h[0] != h[1])
    (True, True)
    """
    return hash_values(_key_values(keys), np.uint64(seed_mix(seed)))


@dataclass(frozen=True)
class HashFilter:
    """SHARDS' spatial filter, the one every sampled answer reads its input through (libCacheSim's
    sampler on the reader): a key is kept iff its seeded 64-bit hash is at or under ``limit``, so
    a key is kept everywhere it appears (every access; every request holding a block) or nowhere.
    :meth:`at_rate` is the fixed-rate filter; :meth:`of_size` the filter at which at most
    ``max_keys`` distinct keys of a whole trace are kept (where fixed-size SHARDS ends). The
    streaming sampler (:class:`ShardsSampler`) starts from the same filter and, in fixed-size mode,
    only lowers its limit as keys arrive.

    >>> f = HashFilter.at_rate(0.25, seed=2); f.rate, f.mask(np.arange(8)).dtype
    (0.25, dtype('bool'))
    >>> int(HashFilter.of_size(np.arange(1000) % 100, 10, seed=1).mask(np.arange(100)).sum()) <= 10
    True
    """

    seed: int
    limit: int

    @classmethod
    def at_rate(cls, rate: float, seed: int = 0) -> HashFilter:
        """Keep a fraction ``rate`` of the keys (in expectation). O(1)."""
        return cls(int(seed), threshold_for_rate(rate))

    @classmethod
    def of_size(cls, keys: Any, max_keys: int, seed: int = 0, rate: float | None = None,
                hashes: np.ndarray | None = None) -> HashFilter:
        """Keep at most ``max_keys`` of the distinct ``keys`` (those with the smallest hashes),
        and at most a fraction ``rate`` when given. O(n log n)."""
        limit = threshold_for_rate(1.0 if rate is None else rate)
        h = key_hashes(keys, seed) if hashes is None else hashes
        distinct = np.unique(h)
        if distinct.size > max_keys:
            limit = min(limit, int(distinct[max_keys]) - 1)
        return cls(int(seed), limit)

    @classmethod
    def of(cls, keys: Any, rate: float | None, max_keys: int | None, seed: int = 0,
           hashes: np.ndarray | None = None) -> HashFilter:
        """:meth:`at_rate`, or :meth:`of_size` when ``max_keys`` is given. O(1) or O(n log n)."""
        if max_keys is None:
            return cls.at_rate(1.0 if rate is None else rate, seed)
        return cls.of_size(keys, max_keys, seed, rate, hashes)

    @property
    def rate(self) -> float:
        """The fraction of the hash space kept. O(1)."""
        return float(rate_of_threshold(self.limit))

    @property
    def salt(self) -> np.uint64:
        """The seed's salt the compiled hash mixes in. O(1)."""
        return np.uint64(seed_mix(self.seed))

    def hashes(self, keys: Any) -> np.ndarray:
        """The seeded hash of every key (uint64). O(n)."""
        return key_hashes(keys, self.seed)

    def mask(self, keys: Any, hashes: np.ndarray | None = None) -> np.ndarray:
        """Which of ``keys`` are kept (``hashes``: theirs, when already computed). O(n)."""
        return (self.hashes(keys) if hashes is None else hashes) <= np.uint64(self.limit)


def sample_mask(keys: Any, rate: float, seed: int = 0) -> np.ndarray:
    """Which accesses a fixed-rate sample keeps (:meth:`HashFilter.at_rate`). O(n).

    >>> int(sample_mask(np.arange(100_000), 0.1).sum()) in range(9_000, 11_000)
    True
    """
    return HashFilter.at_rate(rate, seed).mask(keys)


def sample_keys(keys: Any, rate: float | None = None, max_keys: int | None = None, seed: int = 0
                ) -> tuple[np.ndarray, float]:
    """(mask of the sampled accesses, rate) of a whole in-memory trace through
    :meth:`HashFilter.of`: fixed rate, or (with ``max_keys``) the rate at which at most that many
    distinct keys are kept, the rate fixed-size SHARDS ends at. O(n log n) with ``max_keys``, else O(n).

    >>> mask, rate = sample_keys(np.arange(1000) % 100, max_keys=10, seed=1)
    >>> len(set((np.arange(1000) % 100)[mask].tolist())) <= 10, rate < 0.2
    (True, True)
    """
    hashes = key_hashes(keys, seed)
    keep = HashFilter.of(keys, rate, max_keys, seed, hashes)
    return keep.mask(keys, hashes), keep.rate


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


def _merge_sized(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~.estimate.collapse_sized` parts merged: (distances, counts, size sums). O(n log n).

    >>> [a.tolist() for a in _merge_sized([(np.array([2, 5]), np.array([1, 2]), np.array([3, 5])),
    ...                                    (np.array([5]), np.array([1]), np.array([4]))])]
    [[2, 5], [1, 3], [3, 9]]
    """
    if len(parts) == 1:
        return parts[0]
    d, c, z = (np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(3))
    if d.size == 0:
        return d, c, z
    order = np.argsort(d, kind="stable")
    d, c, z = d[order], c[order], z[order]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    return d[starts], np.add.reduceat(c, starts), np.add.reduceat(z, starts)


def _add_counts(counts: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``counts`` plus the distances ``d`` counted (grown as needed). O(len(d) + max d).

    >>> _add_counts(np.array([0, 1]), np.array([3, 1])).tolist()
    [0, 2, 0, 1]
    """
    if d.size == 0:
        return counts
    got = np.bincount(d, minlength=counts.size)
    got[: counts.size] += counts
    return got


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
        start = HashFilter.at_rate(1.0 if rate is None else rate, seed)  # fixed size: the limit only falls from here
        self._salt = start.salt
        self._thresh = np.array([start.limit], np.uint64)
        self._stack = HashedStack(64 if max_keys is None else max_keys + 1)
        self.n_accesses = 0
        self.total_size = 0
        self._unit = True
        self._values = np.zeros(0, np.int64)
        self._w = np.zeros(0, np.float64)
        self._ws = np.zeros(0, np.float64)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # not yet collapsed
        self._pending_n = 0
        self.sampled_weight = 0.0
        self.sampled_size_weight = 0.0
        self.cold_weight = 0.0
        self.cold_size_weight = 0.0
        self.n_sampled_accesses = 0
        self._counts = np.zeros(0, np.int64)  # fixed rate, unit sizes: sampled accesses by distance
        self._sized: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # fixed rate, sized: collapse_sized parts
        self._n_cold = 0
        self._cold_size = 0
        self._mixed = False  # True once a sized or fixed-size access is weighted in floats

    @property
    def rate(self) -> float:
        """The current sampling rate (it only falls in fixed-size mode). O(1)."""
        return float(rate_of_threshold(self._thresh[0]))

    @property
    def state_nbytes(self) -> int:
        """Bytes of the sample's state and histogram (bounded by S in fixed-size mode). O(1).

        >>> ShardsSampler(max_keys=10).state_nbytes > 0
        True
        """
        return self._stack.nbytes + self._counts.nbytes + sum(a.nbytes for p in self._sized for a in p) + self._values.nbytes + self._w.nbytes + self._ws.nbytes

    @property
    def n_sampled_keys(self) -> int:
        """Keys in the sample now. O(1)."""
        return int(self._stack.counts[0])

    def feed(self, keys: Any, sizes: Sequence[int] | np.ndarray | None = None, counted: Any = None,
             distances: bool = True) -> np.ndarray | None:
        """Sample and replay one chunk; return its per-access sampled distances (SKIP if not sampled).

        ``counted``: a boolean mask (or slice) of the chunk's accesses whose hits count (default
        all). A key whose size changes is a ValueError. O(len) plus O(log S) per sampled access.
        """
        values = _key_values(keys)
        return self.feed_values(values, check_sizes(sizes, values.shape[0]), counted, distances, keys=keys)

    def feed_values(self, values: np.ndarray, size_arr: np.ndarray | None, counted: Any = None, distances: bool = True,
                    subset: np.ndarray | None = None, keys: Any = None) -> np.ndarray | None:
        """:meth:`feed` on uint64 key values (sizes checked), replaying only ``subset`` (sorted
        indices holding every access this sample keeps, from :func:`feed_all`'s prefilter): the
        same state and curve as replaying the whole chunk. O(len(subset) log S) plus O(len)."""
        self._unit = self._unit and size_arr is None
        limit = -1 if self.max_keys is None else self.max_keys
        if subset is None:
            idx, d, t, error = self._stack.run(values, self._salt, size_arr, self._thresh, limit)
        else:
            idx, d, t, error = self._stack.run(values[subset], self._salt, None if size_arr is None else size_arr[subset],
                                               self._thresh, limit)
            idx, error = subset[idx], (int(subset[error]) if error >= 0 else error)
        if error >= 0:
            shown = (values[error] if keys is None else np.asarray(keys)[error]).tolist()  # 7, not np.int64(7)
            raise ValueError(f"key {shown!r} changed size at position {self.n_accesses + error}; "
                             "a key's size must be fixed.")
        n = values.shape[0]
        if isinstance(counted, slice) and counted.indices(n) == (0, n, 1):
            counted = None  # the whole chunk counts
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
        if not distances:
            return None
        out = np.full(n, SKIP, np.int64)
        out[idx] = d
        return out

    def feed_requests(self, keys: Any, offsets: Any) -> np.ndarray:
        """Engine semantics (unit blocks): replay whole requests (``offsets`` into ``keys``) on
        the sample, each request's sampled blocks read against the stack as the request found
        it, then committed tail first; the curve counts each sampled block at its *effective*
        depth (the running maximum over the request's sampled blocks: the capacity at which it
        is in the request's hit prefix). Returns every block's scaled effective depth (-1 not
        sampled, COLD-scaled stays COLD). Valid for prefix-chained traces: see
        :mod:`stackdist.traces.sampled`. O(len) plus O(log S) per sampled block.

        >>> s = ShardsSampler(rate=1.0); s.feed_requests([1, 2, 1, 2], [0, 2, 4]).tolist()[2:]
        [1, 2]
        """
        from ..kernels import segment_running_max

        values = _key_values(keys)
        offs = np.asarray(offsets, np.int64)
        if offs.ndim != 1 or offs.size == 0 or offs[0] != 0 or offs[-1] != values.shape[0] or np.any(np.diff(offs) < 0):
            raise ValueError("offsets must be non-decreasing, start at 0 and end at the number of blocks.")
        limit = -1 if self.max_keys is None else self.max_keys
        d, t = self._stack.run_requests(values, offs, self._salt, self._thresh, limit)
        n = values.shape[0]
        self.n_accesses += n
        self.total_size += n
        kept = d >= 0
        idx = np.flatnonzero(kept)
        kept_before = np.r_[0, np.cumsum(kept)].astype(np.int64)
        eff = segment_running_max(d[idx], kept_before[offs]) if idx.size else d[idx]
        self._account(eff, t[idx], None)
        out = np.full(n, SKIP, np.int64)
        r = rate_of_threshold(t[idx])
        warm = eff != COLD  # scaled apart: COLD as a float rounds to 2**63, which wraps in the cast
        scaled = np.full(eff.size, COLD, np.int64)
        scaled[warm] = np.ceil(eff[warm] / np.broadcast_to(r, eff.shape)[warm] - 1e-9).astype(np.int64)
        out[idx] = scaled
        return out

    def add_unsampled(self, n: int, total_size: int) -> None:
        """Count ``n`` accesses (of ``total_size``) that a worker already filtered out: the same
        curve as feeding them, since unsampled keys never touch the sample. O(1)."""
        self.n_accesses += int(n)
        self.total_size += int(total_size)

    def _account(self, d: np.ndarray, t: np.ndarray, sizes: np.ndarray | None) -> None:
        self.n_sampled_accesses += int(d.size)
        cold = d == COLD
        if self.max_keys is None and (sizes is None or int(sizes.max(initial=0)) <= EXACT_SIZE):
            self._n_cold += int(cold.sum())  # one threshold: integer counts, divided by the rate once
            if sizes is None:
                self._cold_size += int(cold.sum())
                self._counts = _add_counts(self._counts, d[~cold])
            else:
                self._cold_size += int(sizes[cold].sum())
                self._sized.append(collapse_sized(d[~cold], sizes[~cold]))
                if sum(p[0].size for p in self._sized) > max(1 << 20, 2 * self._sized[0][0].size):
                    self._sized = [_merge_sized(self._sized)]
            return
        self._mixed = True
        r = rate_of_threshold(t)
        w = 1.0 / r
        s = np.ones(d.shape, np.float64) if sizes is None else sizes.astype(np.float64)
        self.sampled_weight += float(w.sum())
        self.sampled_size_weight += float((w * s).sum())
        self.cold_weight += float(w[cold].sum())
        self.cold_size_weight += float((w * s)[cold].sum())
        finite = ~cold
        caps = np.ceil(d[finite] / r[finite] - 1e-9).astype(np.int64)
        if self.max_keys is not None:
            caps = _quantize_up(caps)
        self._pending.append((caps, w[finite], (w * s)[finite]))
        self._pending_n += caps.size
        if self._pending_n > max(1 << 20, self._values.size):  # collapse in batches: amortized O(log) per access
            self._collapse_pending()

    def _integer_histogram(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The fixed-rate accesses' (distances, counts, size sums), unit and sized together."""
        present = np.flatnonzero(self._counts)
        return _merge_sized([*self._sized, (present, self._counts[present], self._counts[present])])

    def _fold_counts(self) -> None:
        """Move the integer counts into the weighted histogram (before the curve of a run that
        also weighted accesses in floats: fixed size, or sizes above :data:`EXACT_SIZE`)."""
        at = self._integer_histogram()
        if at[0].size or self._n_cold:
            r = self.rate
            self._pending.append((np.ceil(at[0] / r - 1e-9).astype(np.int64), at[1] / r, at[2] / r))
            self.sampled_weight += (int(at[1].sum()) + self._n_cold) / r
            self.sampled_size_weight += (int(at[2].sum()) + self._cold_size) / r
            self.cold_weight += self._n_cold / r
            self.cold_size_weight += self._cold_size / r
        self._counts, self._sized, self._n_cold, self._cold_size = np.zeros(0, np.int64), [], 0, 0

    def _collapse_pending(self) -> None:
        if self._pending:
            values = np.concatenate([self._values, *(p[0] for p in self._pending)])
            wf = np.concatenate([self._w, *(p[1] for p in self._pending)])
            wsf = np.concatenate([self._ws, *(p[2] for p in self._pending)])
            self._values, self._w, self._ws = _collapse(values, wf, wsf)
            self._pending, self._pending_n = [], 0

    def curve(self) -> SampledCurve:
        """The estimated curve so far (SHARDS_adj). O(histogram).

        >>> s = ShardsSampler(rate=1.0); _ = s.feed([1, 2, 1]); s.curve().hits_at(2)
        1.0
        """
        if not self._mixed and not self._sized:
            return fixed_rate_curve(self._counts, self._n_cold, self.n_sampled_keys, rate=self.rate,
                                    n_accesses=self.n_accesses, seed=self.seed)
        if not self._mixed:
            return fixed_rate_sized_curve(self._integer_histogram(), (self._n_cold, self._cold_size), self.n_sampled_keys,
                                          rate=self.rate, totals=(self.n_accesses, self.total_size), seed=self.seed,
                                          unit=self._unit)
        self._fold_counts()
        self._collapse_pending()
        return SampledCurve(self._values, np.cumsum(self._w), np.cumsum(self._ws), self.n_accesses, self.total_size,
                            self.sampled_weight, self.sampled_size_weight, self.cold_weight, self.cold_size_weight,
                            self.rate, self.max_keys, self.seed, self.n_sampled_accesses, self.n_sampled_keys,
                            self._unit)


def feed_all(samplers: Sequence[ShardsSampler], keys: Any, sizes: Any = None, counted: Any = None) -> None:
    """Feed one chunk to several samplers (one per seed) with one compiled pass over it: the
    keys are hashed under every seed at once and each sampler replays only the accesses its seed
    keeps (a threshold only falls, so the chunk-start thresholds keep a superset). The same
    curves as feeding each sampler the whole chunk. O(n x seeds) plus the sampled replays.

    >>> a, b = ShardsSampler(rate=0.5, seed=0), ShardsSampler(rate=0.5, seed=0)
    >>> feed_all([a], np.arange(100) % 7); _ = b.feed(np.arange(100) % 7)
    >>> a.curve().hits_at(3) == b.curve().hits_at(3), a.n_accesses
    (True, 100)
    """
    values = _key_values(keys)
    size_arr = check_sizes(sizes, values.shape[0])
    if not samplers:
        return
    if len(samplers) > 62:  # the prefilter's bit masks hold 62 seeds: one pass per 62
        for lo in range(0, len(samplers), 62):
            feed_all(samplers[lo : lo + 62], keys, sizes, counted)
        return
    salts = np.array([s._salt for s in samplers], np.uint64)
    cuts = np.array([s._thresh[0] for s in samplers], np.uint64)
    idx, own = _filter_on_two_threads(values, salts, cuts)

    def replay(j: int) -> None:
        sub = idx if len(samplers) == 1 else idx[(own >> j) & 1 == 1]
        samplers[j].feed_values(values, size_arr, counted, distances=False, subset=sub, keys=keys)

    _on_two_threads(replay, len(samplers), values.shape[0] >= 1 << 16)


_POOL: list[ThreadPoolExecutor] = []


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="stackdist-filter"))
    return _POOL[0]


def _on_two_threads(job: Callable[[int], None], n: int, threads: bool) -> None:
    """``job(0) ... job(n - 1)``, the odd ones on the helper thread while this one runs the even
    ones (the replays release the GIL), when ``threads``; the first error in index order is
    raised, as a loop in order would (each job touches only its own sampler). O(1) + the jobs."""
    if not threads or n < 2:
        for j in range(n):
            job(j)
        return
    futures = [(j, _pool().submit(job, j)) for j in range(1, n, 2)]
    errors: list[tuple[int, BaseException]] = []
    for j in range(0, n, 2):
        try:
            job(j)
        except Exception as exc:  # noqa: BLE001 - re-raised below, in index order
            errors.append((j, exc))
    errors += [(j, f.exception()) for j, f in futures if f.exception() is not None]  # type: ignore[misc]
    if errors:
        raise min(errors, key=lambda e: e[0])[1]


def _filter_on_two_threads(values: np.ndarray, salts: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`.hashed_stack.multi_filter` of a large chunk as two halves at once (the kernel
    releases the GIL); the same indices and masks, in order. O(n x seeds / 2) wall."""
    n = values.shape[0]
    if n < 1 << 16:
        return multi_filter(values, salts, cuts)
    mid = n // 2
    first = _pool().submit(multi_filter, values[:mid], salts, cuts)
    idx_b, own_b = multi_filter(values[mid:], salts, cuts)
    idx_a, own_a = first.result()
    return np.concatenate([idx_a, idx_b + mid]), np.concatenate([own_a, own_b])


def weighted_estimate(distances: np.ndarray, weights: np.ndarray, rate: float, n_accesses: int, total_weight: float,
                      seed: int = 0) -> SampledCurve:
    """The SHARDS estimate (with SHARDS_adj) from a fixed-rate sample's own distances: each
    sampled access has a ``distance`` in sampled units (COLD for a first access) and a
    ``weight`` (its tokens, say); the full trace has ``n_accesses`` accesses of ``total_weight``.
    An access hits at capacity ``C`` iff ``ceil(d / R) <= C``; the weight the sample misses
    (``total_weight - sum(weights) / R``, a hot key sampled or not) is added at the smallest
    distance, on the count and on the weight. O(n log n).

    >>> c = weighted_estimate(np.array([COLD, 1, 1]), np.array([4, 4, 2]), 0.5, 6, 24.0)
    >>> c.hit_size_at(1), c.hit_size_at(2), c.hits_at(2)
    (0.0, 16.0, 4.0)
    """
    d = np.asarray(distances, np.int64)
    w = np.asarray(weights, np.float64)
    cold = d == COLD
    finite = ~cold
    caps = np.ceil(d[finite] / rate - 1e-9).astype(np.int64)
    ones = np.full(int(finite.sum()), 1.0 / rate)
    values, cw, cws = _collapse(caps, ones, w[finite] / rate)
    return SampledCurve(values, np.cumsum(cw), np.cumsum(cws), int(n_accesses), round(total_weight),
                        d.size / rate, float(w.sum()) / rate, float(cold.sum()) / rate, float(w[cold].sum()) / rate,
                        float(rate), None, int(seed), int(d.size), 0, False)


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
        sampler.feed(arr[lo:hi], None if size_arr is None else size_arr[lo:hi], counted, distances=False)
    return sampler.curve()


def sampled_curves(keys: Any, sizes: Any = None, *, rate: float | None = None, max_keys: int | None = None,
                   seeds: Sequence[int] = (0, 1, 2), window: Any = None) -> list[SampledCurve]:
    """One :func:`sampled_curve` per seed (the first is the answer, the rest give error bars).
    O(len(seeds)) times one sample.

    >>> len(sampled_curves([0, 1, 0], rate=1.0, seeds=(0, 1)))
    2
    """
    arr = keys if isinstance(keys, np.ndarray) else np.asarray(list(keys))
    size_arr = check_sizes(sizes, arr.shape[0])
    start, stop = parse_window(window, arr.shape[0])
    samplers = [ShardsSampler(rate, max_keys, s) for s in seeds]
    for lo in range(0, max(arr.shape[0], 1), _CHUNK):
        hi = min(arr.shape[0], lo + _CHUNK)
        counted = slice(max(start, lo) - lo, max(min(stop, hi), lo) - lo)
        feed_all(samplers, arr[lo:hi], None if size_arr is None else size_arr[lo:hi], counted)
    return [s.curve() for s in samplers]
