"""HitCurve: the exact LRU hit count at every capacity, from one replay.

Why distances give the hits. With no object larger than the capacity C, the reference LRU
(evict the oldest until the new entry fits) always holds the largest top segment of the recency
stack whose sizes sum to at most C. By induction: a hit reorders the stack but not the cached
set, and the entry below the segment still does not fit. A miss puts the new entry on top and
keeps the longest run of the old segment that fits beside it; the entries below the old segment
cannot join, since the old segment plus its next entry already exceeded C (and if the missed
entry was that next entry, the whole old segment plus it exceeds C, so the run stops inside the
old segment). So an access hits iff its key is inside that segment, i.e. iff its stack distance
(its own size plus the sizes above it) is at most C.

Exactness with objects larger than the cache. The reference LRU never stores an object larger
than its capacity and evicts nothing for it, so at capacity ``C`` it behaves as an LRU over the
trace *without* the keys larger than ``C``. For ``C`` at or above the largest object size that
filter removes nothing and the one replay's distances are exact: an access hits iff its
distance is at most ``C``. Below the largest size the engine is still exact, at a cost: the
object sizes cut the capacity axis into levels ``[s_k, s_{k+1})`` (``s_k`` the distinct sizes);
within a level the filtered trace is fixed, so one more replay of that filtered trace (only the
keys of size at most ``s_k``) gives the exact curve across the whole level. These replays run
lazily, once per level a query touches, and are cached. With one size (blocks, whole equal
documents) there is no such level and nothing extra runs; with m distinct sizes the full curve
below the largest size costs at most m - 1 extra replays of shrinking sub-traces. Below the
smallest size nothing fits and every access misses. In those levels the curve can be
non-monotone: a larger cache can hit less, because it admits a large object that then evicts
small ones.

>>> c = HitCurve.from_trace([0, 1, 2] * 3)
>>> c.hits_at(2), c.hits_at(3), c.cold_misses, c.ceiling_hits
(0, 6, 3, 6)
>>> c.min_capacity_for(hit_rate=0.5)
3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .distances import replay_distances
from .histogram import Histogram, exact_count, replay_counting
from .kernels import COLD
from .keys import DenseKeys, check_total_size, checked_sizes, dense_keys, unique_sorted

__all__ = ["CurveSteps", "HitCurve", "hit_curve", "parse_window"]


@dataclass(frozen=True)
class CurveSteps:
    """An exact step function: at capacity ``c`` with ``capacities[i] <= c < capacities[i+1]``
    the cache gets ``hits[i]`` hits totalling ``hit_sizes[i]`` size units."""

    capacities: np.ndarray
    hits: np.ndarray
    hit_sizes: np.ndarray

    def at(self, capacity: int) -> tuple[int, int]:
        """(hits, hit size) at one capacity (at least the first breakpoint). O(log breakpoints).

        >>> HitCurve.from_trace([0, 1, 0, 2, 1, 0]).steps().at(3)
        (3, 3)
        """
        i = int(np.searchsorted(self.capacities, capacity, side="right")) - 1
        if i < 0:
            raise ValueError(f"these steps start at capacity {int(self.capacities[0])}; got {capacity}.")
        return int(self.hits[i]), int(self.hit_sizes[i])


def _size_levels(dense: DenseKeys, sizes: np.ndarray | None, size_of_key: np.ndarray | None = None) -> np.ndarray:
    """The distinct object sizes, sorted, from one size per key (the replay's, when given)."""
    if dense.ids.size == 0:
        return np.zeros(0, np.int64)
    if sizes is None:
        return np.ones(1, np.int64)
    if size_of_key is None:
        size_of_key = np.zeros(dense.n_keys, np.int64)
        size_of_key[dense.ids] = sizes
    return unique_sorted(size_of_key[size_of_key > 0])


def parse_window(window: Any, n: int) -> tuple[int, int]:
    """Normalize a window (None, a slice, a (start, stop) pair or "START:STOP") to [start, stop).

    Negative numbers count from the end, as in Python slicing.

    >>> parse_window("10:", 100), parse_window((None, -10), 100), parse_window(None, 5)
    ((10, 100), (0, 90), (0, 5))
    """
    if window is None:
        return 0, n
    if isinstance(window, str):
        parts = window.split(":")
        if len(parts) != 2:
            raise ValueError(f"window must look like START:STOP (either may be empty); got {window!r}.")
        try:
            window = tuple(int(p) if p.strip() else None for p in parts)
        except ValueError:
            raise ValueError(f"window must look like START:STOP with integers; got {window!r}.") from None
    if isinstance(window, tuple):
        if len(window) != 2:
            raise ValueError(f"window must be a (start, stop) pair; got {window!r}.")
        window = slice(*window)
    if not isinstance(window, slice) or window.step not in (None, 1):
        raise ValueError(f"window must be a slice with step 1, a (start, stop) pair or 'START:STOP'; got {window!r}.")
    start, stop, _ = window.indices(n)
    return start, max(start, stop)


class HitCurve:
    """Exact LRU hits at every capacity for the accesses in a window, from one replay.

    Build it with :meth:`from_trace` (or :func:`stackdist.hit_curve`). All queries are exact,
    including capacities below the largest object (see the module docstring for how and what
    it costs). Capacities and sizes are in the trace's size unit (tokens, blocks, bytes).
    """

    def __init__(
        self,
        dense: DenseKeys,
        sizes: np.ndarray | None,
        distances: np.ndarray,
        window: tuple[int, int],
        size_of_key: np.ndarray | None = None,
        histogram: Histogram | None = None,
        total_size: int | None = None,
    ):
        self._dense = dense
        self._sizes = sizes
        self.distances = distances
        self.window = window
        start, stop = window
        self._window_sizes = None if sizes is None else sizes[start:stop]
        self.n_accesses = stop - start
        self._levels = _size_levels(dense, sizes, size_of_key)
        self.max_object_size = int(self._levels[-1]) if self._levels.size else 0
        if total_size is None:  # the window's total size (given by from_trace, which knows it)
            total_size = (self.n_accesses if self._window_sizes is None
                          else check_total_size(self._window_sizes, self.max_object_size))
        self.total_size = total_size
        self._histogram = histogram or Histogram.build(distances[start:stop], self._window_sizes, self.total_size)
        self.cold_misses = self.n_accesses - (int(self._histogram.cum_hits[-1]) if self._histogram.values.size else 0)
        self._level_cache: dict[int, Histogram] = {}
        self._level_distance_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @classmethod
    def from_trace(cls, keys: Any, sizes: Any = None, window: Any = None, progress: Any = None) -> HitCurve:
        """Replay ``keys`` (with ``sizes``, unit if None) once; keep the hits in ``window``.

        O(n log k) for the replay plus O(n) (unit sizes) or one sort (sized) for the curve.
        ``progress``, if given, is called with (done, total) as the replay advances.
        """
        dense = dense_keys(keys)
        n = dense.ids.shape[0]
        size_arr, largest, total = checked_sizes(sizes, n)
        start, stop = parse_window(window, n)
        whole = total if (start, stop) == (0, n) else None
        distances, size_of_key, histogram = replay_counting(dense, size_arr, (start, stop), progress, largest, whole)
        return cls(dense, size_arr, distances, (start, stop), size_of_key, histogram, whole)

    @classmethod
    def from_histogram(cls, histogram: Histogram, n_accesses: int) -> HitCurve:
        """The curve of ``n_accesses`` unit-size accesses from their distance histogram alone
        (what the distributed merge gives, :func:`~stackdist.engine.scale.distributed.merge_histograms`):
        every query and the summary are the exact curve's; only the per-access views
        (:attr:`distances` is empty, :meth:`hit_mask`, :attr:`keys`) are not kept. O(1).

        >>> whole = HitCurve.from_trace([0, 1, 0, 2, 1, 0])
        >>> HitCurve.from_histogram(whole.histogram, 6).sample([1, 2, 3]) == whole.sample([1, 2, 3])
        True
        """
        one = DenseKeys(np.zeros(1 if n_accesses else 0, np.int64), 1 if n_accesses else 0)  # unit sizes: one level
        return cls(one, None, np.zeros(0, np.int64), (0, int(n_accesses)), None, histogram, int(n_accesses))

    @property
    def histogram(self) -> Histogram:
        """The window's distance histogram: exact hits at capacities at or above
        :attr:`max_object_size` (below it, the levels of the module docstring apply). O(1).

        >>> HitCurve.from_trace([0, 1, 0, 1]).histogram.values.tolist()
        [2]
        """
        return self._histogram

    # ----------------------------------------------------------------- derived totals
    @property
    def ceiling_hits(self) -> int:
        """Hits of an infinite cache: every access in the window but the cold ones. O(1).

        >>> HitCurve.from_trace([0, 1, 0, 2, 1, 0]).ceiling_hits
        3
        """
        return self.n_accesses - self.cold_misses

    @property
    def ceiling_hit_size(self) -> int:
        """Size units hit by an infinite cache. O(1).

        >>> HitCurve.from_trace([0, 1, 0, 1], [2, 3, 2, 3]).ceiling_hit_size
        5
        """
        return int(self._histogram.cum_sizes[-1]) if self._histogram.values.size else 0

    @property
    def ceiling_hit_rate(self) -> float:
        """Hit rate of an infinite cache (0.0 for an empty window). O(1).

        >>> HitCurve.from_trace([0, 1, 0, 1]).ceiling_hit_rate
        0.5
        """
        return self.ceiling_hits / self.n_accesses if self.n_accesses else 0.0

    # ----------------------------------------------------------------- point queries
    def _evaluate(self, capacity: Any) -> tuple[np.ndarray, np.ndarray]:
        caps = np.asarray(capacity)
        if caps.dtype.kind == "f":
            if np.any(~np.isfinite(caps)):
                raise ValueError("capacity must be a finite number.")
            caps = np.floor(caps)
        elif caps.dtype.kind not in "iu":
            raise TypeError(f"capacity must be an integer; got {capacity!r}.")
        caps = caps.astype(np.int64)
        if np.any(caps < 0):
            raise ValueError(f"capacity must be non-negative; got {int(caps.min())}.")
        hits, sizes = self._histogram.at(caps)
        below = caps < self.max_object_size
        if np.any(below):
            hits, sizes = hits.copy(), sizes.copy()
            level_of = np.searchsorted(self._levels, caps, side="right") - 1
            for level in unique_sorted(level_of[below]):
                sel = below & (level_of == level)
                if level < 0:
                    hits[sel], sizes[sel] = 0, 0
                else:
                    hits[sel], sizes[sel] = self._level_histogram(int(level)).at(caps[sel])
        return hits, sizes

    def hits_at(self, capacity: Any) -> Any:
        """Number of hits in the window at ``capacity`` (a scalar or an array of capacities).

        O(log breakpoints) per capacity (plus a level replay, once, below the largest object).
        Below the largest object the curve can fall: capacity 4 admits the size-3 key, which then
        evicts the size-2 key that capacity 2 kept.

        >>> HitCurve.from_trace([0, 1, 0, 1], [2, 3, 2, 3]).hits_at([2, 4, 5]).tolist()
        [1, 0, 2]
        """
        hits, _ = self._evaluate(capacity)
        return int(hits) if hits.ndim == 0 else hits

    def hit_size_at(self, capacity: Any) -> Any:
        """Total size (tokens, bytes...) of the hits in the window at ``capacity``. As :meth:`hits_at`.

        >>> HitCurve.from_trace([0, 1, 0, 1], [2, 3, 2, 3]).hit_size_at([2, 5]).tolist()
        [2, 5]
        """
        _, sizes = self._evaluate(capacity)
        return int(sizes) if sizes.ndim == 0 else sizes

    def misses_at(self, capacity: Any) -> Any:
        """Number of misses (cold ones included) in the window at ``capacity``. As :meth:`hits_at`.

        >>> HitCurve.from_trace([0, 1, 0, 2, 1, 0]).misses_at(2)
        5
        """
        hits, _ = self._evaluate(capacity)
        misses = self.n_accesses - hits
        return int(misses) if np.ndim(misses) == 0 else misses

    def hit_rate_at(self, capacity: Any) -> Any:
        """Hits / accesses in the window (0.0 for an empty window). As :meth:`hits_at`.

        >>> HitCurve.from_trace([0, 1, 0, 1]).hit_rate_at(2)
        0.5
        """
        hits, _ = self._evaluate(capacity)
        rate = hits / self.n_accesses if self.n_accesses else np.zeros(np.shape(hits))
        return float(rate) if np.ndim(rate) == 0 else rate

    def size_hit_rate_at(self, capacity: Any) -> Any:
        """Hit size / total size in the window (a token or byte hit rate). As :meth:`hits_at`.

        >>> HitCurve.from_trace([0, 1, 0, 1], [2, 3, 2, 3]).size_hit_rate_at(5)
        0.5
        """
        _, sizes = self._evaluate(capacity)
        rate = sizes / self.total_size if self.total_size else np.zeros(np.shape(sizes))
        return float(rate) if np.ndim(rate) == 0 else rate

    # ----------------------------------------------------------------- inverse queries
    def min_capacity_for(
        self,
        *,
        hit_rate: float | None = None,
        hits: int | None = None,
        size_hit_rate: float | None = None,
        hit_size: int | None = None,
    ) -> int | None:
        """The smallest capacity that reaches the target, or None if no capacity does.

        Give exactly one of ``hit_rate`` (hits / accesses), ``hits``, ``size_hit_rate`` (hit
        size / total size) or ``hit_size``. Rates are compared exactly (as fractions). Exact
        below the largest object too: the levels there are searched lazily, lowest first.
        O(log n) plus any level replays needed.

        >>> c = HitCurve.from_trace([0, 1, 0, 1], [2, 3, 2, 3])
        >>> c.min_capacity_for(hits=1), c.min_capacity_for(hit_rate=0.5), c.min_capacity_for(hits=3)
        (2, 5, None)
        """
        given = {k: v for k, v in {"hit_rate": hit_rate, "hits": hits, "size_hit_rate": size_hit_rate, "hit_size": hit_size}.items()
                 if v is not None}
        if len(given) != 1:
            raise ValueError("give exactly one target: hit_rate, hits, size_hit_rate or hit_size.")
        (name, value), = given.items()
        by_size = name in ("size_hit_rate", "hit_size")
        if name.endswith("rate"):
            target = exact_count(value, self.total_size if by_size else self.n_accesses, name)
        else:
            target = int(value)
        if target <= 0:
            return 0
        upper = self._histogram.first_reaching(target, by_size)
        if upper is None:
            return None
        for k, level in enumerate(self._levels.tolist()):
            if level >= min(upper, self.max_object_size):
                break
            reach = self._level_histogram(k).first_reaching(target, by_size)
            if reach is not None:
                capacity = max(reach, level)
                if capacity < min(int(self._levels[k + 1]), upper):
                    return capacity
        return upper

    # ----------------------------------------------------------------- whole curve
    def steps(self, below_largest: bool = True) -> CurveSteps:
        """The exact curve as a step function over all capacities from 0.

        With ``below_largest`` (default) the levels below the largest object are included
        (each costs a replay of its filtered trace, see the module docstring); without it, and
        with varied sizes, the steps start at the largest object size and nothing extra runs.
        O(breakpoints).

        >>> st = HitCurve.from_trace([0, 1, 0, 1], [2, 3, 2, 3]).steps()
        >>> st.capacities.tolist(), st.hits.tolist()
        ([0, 2, 3, 5], [0, 1, 0, 2])
        """
        bounds = self._levels.tolist() + [None]
        first = 0 if below_largest else max(0, len(self._levels) - 1)
        caps: list[np.ndarray] = [np.zeros(1, np.int64)] if first == 0 else []
        hits, sizes = list(caps), list(caps)
        last: tuple[int, ...] | None = (0, 0) if first == 0 else None
        for k in range(first, len(self._levels)):
            lo, hi = bounds[k], bounds[k + 1]
            hist = self._histogram if hi is None else self._level_histogram(k)
            start = int(np.searchsorted(hist.values, lo, side="right"))
            stop = hist.values.size if hi is None else int(np.searchsorted(hist.values, hi, side="left"))
            at_lo = tuple(int(v[0]) for v in hist.at(np.array([lo])))
            # Inside a level every value adds at least one hit, so only a level's first step
            # can repeat the step before it.
            if at_lo != last:
                caps.append(np.array([lo]))
                hits.append(np.array([at_lo[0]]))
                sizes.append(np.array([at_lo[1]]))
            caps.append(hist.values[start:stop])
            hits.append(hist.cum_hits[start:stop])
            sizes.append(hist.cum_sizes[start:stop])
            last = (int(hist.cum_hits[stop - 1]), int(hist.cum_sizes[stop - 1])) if stop > start else at_lo
        return CurveSteps(*(np.concatenate(parts).astype(np.int64, copy=False) for parts in (caps, hits, sizes)))

    def sample(self, capacities: Any) -> dict[str, list]:
        """The curve at the given capacities, as lists ready for JSON. As :meth:`hits_at`.

        >>> HitCurve.from_trace([0, 1, 0, 1]).sample([1, 2])["hits"]
        [0, 2]
        """
        caps = np.asarray(capacities, dtype=np.int64)
        hits, sizes = self._evaluate(caps)
        n, total = self.n_accesses, self.total_size
        return {
            "capacity": caps.tolist(),
            "hits": hits.tolist(),
            "hit_rate": (hits / n if n else np.zeros(caps.shape)).tolist(),
            "hit_size": sizes.tolist(),
            "size_hit_rate": (sizes / total if total else np.zeros(caps.shape)).tolist(),
        }

    def default_capacities(self, points: int = 50) -> np.ndarray:
        """``points`` capacities spread over the interesting range (0 to the last breakpoint),
        always including each size level and the capacity that reaches the ceiling. O(points).

        >>> HitCurve.from_trace([0, 1, 2, 0, 1, 2]).default_capacities(4).tolist()
        [0, 1, 2, 3]
        """
        if points < 2:
            raise ValueError(f"points must be at least 2; got {points}.")
        last = int(self._histogram.values[-1]) if self._histogram.values.size else self.max_object_size
        grid = unique_sorted(np.linspace(0, max(last, 1), points).round().astype(np.int64))
        extra = self._levels[self._levels <= last] if self._levels.size <= points else np.zeros(0, np.int64)
        return unique_sorted(np.concatenate([grid, extra, [last]]))

    def summary(self) -> dict[str, Any]:
        """Totals of the window as a JSON-ready dict. O(1).

        >>> HitCurve.from_trace([0, 1, 0]).summary()["cold_misses"]
        2
        """
        return {
            "accesses": self.n_accesses,
            "window": list(self.window),
            "total_size": self.total_size,
            "cold_misses": self.cold_misses,
            "ceiling_hits": self.ceiling_hits,
            "ceiling_hit_rate": self.ceiling_hit_rate,
            "ceiling_hit_size": self.ceiling_hit_size,
            "max_object_size": self.max_object_size,
            "distinct_sizes": int(self._levels.size),
        }

    # ----------------------------------------------------------------- levels
    def _level_histogram(self, k: int) -> Histogram:
        """The exact histogram for capacities in level k (see :meth:`_level_distances`)."""
        if k not in self._level_cache:
            keep, distances = self._level_distances(k)
            start, stop = self.window
            w = np.zeros(keep.shape[0], bool)
            w[start:stop] = True
            w = w[keep]
            assert self._sizes is not None, "unit sizes have no level below the largest"
            self._level_cache[k] = Histogram.build(distances[w], self._sizes[keep][w])
        return self._level_cache[k]

    def _level_distances(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Level k's replay: the accesses kept (sizes at most s_k) and their distances there."""
        if k not in self._level_distance_cache:
            assert self._sizes is not None, "unit sizes have no level below the largest"
            keep = self._sizes <= int(self._levels[k])
            sub = DenseKeys(self._dense.ids[keep], self._dense.n_keys, None)
            self._level_distance_cache[k] = (keep, replay_distances(sub, self._sizes[keep]))
        return self._level_distance_cache[k]

    def hit_mask(self, capacity: int) -> np.ndarray:
        """Which accesses of the whole trace (not only the window) hit at ``capacity``. Exact. O(n).

        >>> HitCurve.from_trace([0, 1, 0, 2, 1, 0]).hit_mask(2).tolist()
        [False, False, True, False, False, False]
        """
        capacity = int(capacity)
        if capacity < 0:
            raise ValueError(f"capacity must be non-negative; got {capacity}.")
        if self.distances.shape[0] != self._dense.ids.shape[0]:
            raise ValueError("this curve was built from a histogram (from_histogram): it has no per-access hits.")
        capacity = min(capacity, COLD - 1)  # a cold miss (COLD) never hits, even at 2**63 - 1
        if capacity >= self.max_object_size:
            return self.distances <= capacity
        mask = np.zeros(self.distances.shape[0], bool)
        k = int(np.searchsorted(self._levels, capacity, side="right")) - 1
        if k >= 0:
            keep, distances = self._level_distances(k)
            mask[keep] = distances <= capacity
        return mask

    @property
    def keys(self) -> DenseKeys:
        """The trace's keys as dense ids. O(1).

        >>> HitCurve.from_trace(["x", "y", "x"]).keys.ids.tolist()
        [0, 1, 0]
        """
        return self._dense

    @property
    def sizes(self) -> np.ndarray | None:
        """Per-access sizes of the whole trace (None for unit sizes). O(1).

        >>> HitCurve.from_trace([0, 1], [4, 2]).sizes.tolist()
        [4, 2]
        """
        return self._sizes


def hit_curve(keys: Any, sizes: Any = None, window: Any = None) -> HitCurve:
    """The exact LRU hit curve of a trace (every capacity at once), hits counted in ``window``.

    Shorthand for :meth:`HitCurve.from_trace`. O(n log k).

    >>> hit_curve([0, 1, 0, 1]).hits_at([1, 2]).tolist()
    [0, 2]
    """
    return HitCurve.from_trace(keys, sizes, window)
