"""The streaming form: feed accesses in batches, query the hit curve at any time.

State: the replay (a prefix pyramid over compacted slots, at most twice the distinct keys), a dict
from key to dense id, and the distance histogram so far, whose bins are distinct distance values:
at most the number of distinct keys for unit sizes, and at most the total size of the distinct
keys otherwise. None of it grows with the number of accesses.

Exactness: a stream cannot replay its past, so the curve is exact at capacities at or above the
largest object seen (where the one replay is exact, see :mod:`stackdist.engine.curve`); for a smaller
capacity with varied sizes, queries raise a ``ValueError`` saying so instead of answering
approximately. With unit or equal sizes every capacity is exact.

>>> s = StackDistanceStream()
>>> s.feed(["a", "b"]).tolist() == [COLD, COLD]
True
>>> s.feed(["a"]).tolist()
[2]
>>> s.n_accesses, s.n_keys, s.hits_at(2), s.hits_at(1)
(3, 2, 1, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import kernels
from .distances import ReplayState, raise_size_mismatch
from .histogram import Histogram, exact_count, merge
from .kernels import COLD
from .keys import DenseKeys, KeyIdMap, check_sizes, unique_sorted

__all__ = ["KeyValueStream", "StackDistanceStream"]


class StackDistanceStream:
    """Feed accesses in batches; get each batch's stack distances and the curve so far.

    Keys may be any hashables. Amortized O(b log k) per batch of b accesses over k distinct keys,
    plus O(h) to merge the batch into a histogram of h bins.
    """

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}
        self._state = ReplayState(0)
        self._histogram = Histogram(*(np.zeros(0, np.int64),) * 3)
        self.n_accesses = 0
        self.total_size = 0
        self.cold_misses = 0
        self.max_object_size = 0
        self._sizes_seen: set[int] = set()

    @property
    def n_keys(self) -> int:
        """Distinct keys seen so far. O(1).

        >>> s = StackDistanceStream(); _ = s.feed([0, 1]); _ = s.feed([0, 1, 2])
        >>> s.n_keys
        3
        """
        return len(self._ids)

    @property
    def state_nbytes(self) -> int:
        """Bytes held by the replay arrays and the histogram (excluding the key dict). O(1).

        >>> s = StackDistanceStream(); _ = s.feed([0, 1]); _ = s.feed([0, 1, 2])
        >>> s.state_nbytes > 0
        True
        """
        h = self._histogram
        return self._state.nbytes + h.values.nbytes + h.cum_hits.nbytes + h.cum_sizes.nbytes

    def feed(self, keys: Iterable[Any], sizes: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Replay one batch (unit sizes when ``sizes`` is None); return its distances.

        A key whose size changes is a ``ValueError``; the accesses before it stay replayed.
        O(len(batch) log keys).

        >>> StackDistanceStream().feed(["a", "b", "a"]).tolist()[2]
        2
        """
        batch = list(keys.tolist() if isinstance(keys, np.ndarray) else keys)
        size_arr = check_sizes(sizes, len(batch))
        if size_arr is None and self._sizes_seen - {1}:
            size_arr = np.ones(len(batch), np.int64)  # keep checking keys that were given other sizes
        ids = np.fromiter((self._ids.setdefault(k, len(self._ids)) for k in batch), np.int64, len(batch))
        self._state.reserve(len(self._ids))
        out = np.empty(len(batch), np.int64)
        error = self._state.run(kernels.replay, ids, size_arr, out)
        done = len(batch) if error < 0 else error
        self._account(out[:done], None if size_arr is None else size_arr[:done])
        if error >= 0:
            raise_size_mismatch(DenseKeys(ids, len(self._ids), batch), size_arr, self._state, error, offset=self.n_accesses - done)
        return out

    def _account(self, distances: np.ndarray, sizes: np.ndarray | None) -> None:
        self.n_accesses += distances.size
        self.total_size += distances.size if sizes is None else int(sizes.sum())
        self.cold_misses += int(np.count_nonzero(distances == COLD))
        if distances.size:
            self._sizes_seen.update([1] if sizes is None else unique_sorted(sizes).tolist())
            self.max_object_size = max(self._sizes_seen)
        self._histogram = merge(self._histogram, Histogram.build(distances, sizes))

    # ----------------------------------------------------------------- queries
    def _exact_at(self, capacity: int) -> None:
        if capacity < self.max_object_size and len(self._sizes_seen) > 1:
            raise ValueError(
                f"a stream's curve is exact only at capacities of at least the largest object seen "
                f"({self.max_object_size}); got {capacity}. Replay the trace with HitCurve for smaller capacities."
            )

    def hits_at(self, capacity: int) -> int:
        """Hits so far at ``capacity`` (exact; see the module docstring for small capacities). O(log n).

        >>> s = StackDistanceStream(); _ = s.feed([0, 1]); _ = s.feed([0, 1, 2])
        >>> s.hits_at(1), s.hits_at(2)
        (0, 2)
        """
        self._exact_at(int(capacity))
        if int(capacity) < self.max_object_size:
            return 0  # equal sizes: nothing fits below the one object size
        return int(self._histogram.at(np.asarray(int(capacity)))[0])

    def hit_size_at(self, capacity: int) -> int:
        """Total size of the hits so far at ``capacity``. O(log n).

        >>> s = StackDistanceStream(); _ = s.feed([0, 1]); _ = s.feed([0, 1, 2])
        >>> s.hit_size_at(2)
        2
        """
        self._exact_at(int(capacity))
        if int(capacity) < self.max_object_size:
            return 0
        return int(self._histogram.at(np.asarray(int(capacity)))[1])

    def hit_rate_at(self, capacity: int) -> float:
        """Hits / accesses so far (0.0 before any access). O(log n).

        >>> s = StackDistanceStream(); _ = s.feed([0, 1]); _ = s.feed([0, 1, 2])
        >>> s.hit_rate_at(2)
        0.4
        """
        return self.hits_at(capacity) / self.n_accesses if self.n_accesses else 0.0

    def min_capacity_for(self, *, hit_rate: float | None = None, hits: int | None = None) -> int | None:
        """The smallest capacity reaching the target so far (at or above the largest object when
        sizes vary, where the curve is exact), or None if none does.O(log n).

        >>> s = StackDistanceStream(); _ = s.feed([0, 1]); _ = s.feed([0, 1, 2])
        >>> s.min_capacity_for(hits=2), s.min_capacity_for(hit_rate=0.5)
        (2, None)
        """
        if (hit_rate is None) == (hits is None):
            raise ValueError("give exactly one target: hit_rate or hits.")
        if hit_rate is not None:
            hits = exact_count(hit_rate, self.n_accesses, "hit_rate")
        assert hits is not None
        if hits <= 0:
            return 0
        reach = self._histogram.first_reaching(int(hits), by_size=False)
        return None if reach is None else max(reach, self.max_object_size)


class KeyValueStream:
    """The exact LRU curve of a unit-size stream of integer key values (uint64, as the chunked
    readers give them) fed batch by batch, in memory bounded by the distinct keys, not the
    stream: a compiled key map (:class:`~.keys.KeyIdMap`), the replay state, and the count of
    each distance (a distance is at most the keys seen). The curve is the exact one
    (:meth:`~.curve.HitCurve.from_histogram`: every query, no per-access view).
    O(b log k) per batch of b accesses over k keys, plus O(k) to add its counts.

    >>> s = KeyValueStream(); s.feed(np.array([0, 1, 0], np.uint64)); s.feed(np.array([2, 1], np.uint64))
    >>> c = s.curve(); c.n_accesses, c.hits_at(2), c.hits_at(3), s.n_keys
    (5, 1, 2, 3)
    """

    def __init__(self) -> None:
        self._ids = KeyIdMap()
        self._state = ReplayState(0, sized=False, track_sizes=False)
        self._counts = np.zeros(1, np.int64)  # _counts[d]: accesses at distance d
        self.n_accesses = 0

    @property
    def n_keys(self) -> int:
        """Key ids in use so far (the distinct keys, or the largest small id + 1). O(1)."""
        return self._ids.n_keys

    @property
    def state_nbytes(self) -> int:
        """Bytes of the key map, the replay state and the distance counts. O(1)."""
        return self._ids.nbytes + self._state.nbytes + self._counts.nbytes

    def feed(self, values: np.ndarray) -> None:
        """Replay one batch of uint64 key values. O(len(batch) log keys + keys)."""
        ids = self._ids.ids(np.ascontiguousarray(values, np.uint64))
        self._state.reserve(self._ids.n_keys)
        out = np.empty(ids.shape[0], np.int64)
        self._state.run(kernels.replay, ids, None, out)
        counts = np.bincount(out[out != COLD], minlength=self._counts.shape[0])  # never shorter than the old
        counts[: self._counts.shape[0]] += self._counts
        self._counts = counts
        self.n_accesses += ids.shape[0]

    def curve(self) -> Any:
        """The exact curve so far (a :class:`~.curve.HitCurve` from the distance histogram). O(keys)."""
        from .curve import HitCurve

        values = np.flatnonzero(self._counts).astype(np.int64)
        cum = np.cumsum(self._counts[values])
        return HitCurve.from_histogram(Histogram(values, cum, cum.copy()), self.n_accesses)
