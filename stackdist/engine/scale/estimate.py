"""SampledCurve: the estimated LRU curve a SHARDS sample gives (see :mod:`.sampling`).

Every answer is a float estimate: hits and hit sizes at a capacity, their rates, the smallest
capacity reaching a target, with the SHARDS_adj correction. :func:`spread` is the error bar of
one answer over several hash seeds.

>>> from stackdist.engine.scale.sampling import sampled_curve
>>> sampled_curve([0, 1, 0, 1], rate=1.0).hit_rate_at(2)
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EXACT_SIZE", "QuantileCounter", "SampledCurve", "collapse_sized", "fixed_rate_curve", "fixed_rate_sized_curve", "spread"]


@dataclass(frozen=True)
class SampledCurve:
    """An estimated LRU curve from a SHARDS sample (every capacity; floats, clipped to [0, N]).

    ``values``: sorted scaled capacities (full-trace units) at which sampled hits start;
    ``cum_weight`` / ``cum_size_weight``: the estimated hits and hit sizes up to each. The
    SHARDS_adj difference ``n_accesses - sampled_weight`` is added at ``values[0]`` and above.
    """

    values: np.ndarray
    cum_weight: np.ndarray
    cum_size_weight: np.ndarray
    n_accesses: int
    total_size: int
    sampled_weight: float
    sampled_size_weight: float
    cold_weight: float
    cold_size_weight: float
    rate: float
    max_keys: int | None
    seed: int
    n_sampled_accesses: int
    n_sampled_keys: int
    unit: bool = True
    sampled: bool = True

    def _at(self, capacity: Any, by_size: bool) -> np.ndarray:
        caps = np.asarray(capacity, dtype=np.int64)
        cum = self.cum_size_weight if by_size else self.cum_weight
        total = self.total_size if by_size else self.n_accesses
        adjust = total - (self.sampled_size_weight if by_size else self.sampled_weight)
        idx = np.searchsorted(self.values, caps, side="right") - 1
        if self.values.size == 0:
            return np.zeros(caps.shape, np.float64)
        got = np.where(idx < 0, 0.0, cum[np.maximum(idx, 0)] + adjust)
        return np.clip(got, 0.0, float(total))

    def since(self, earlier: SampledCurve) -> SampledCurve:
        """The estimate for the accesses after ``earlier`` (a snapshot of the same sampler): every
        sum here is additive, so a window's curve is the difference of two snapshots. O(bins).

        >>> from stackdist.engine.scale.sampling import ShardsSampler
        >>> s = ShardsSampler(rate=1.0); _ = s.feed([1, 2, 1]); a = s.curve(); _ = s.feed([2, 2]); w = s.curve().since(a)
        >>> w.n_accesses, w.hits_at(1), w.hits_at(2)
        (2, 1.0, 2.0)
        """
        # imported here: the module itself imports no numba
        from ..keys import unique_sorted

        values = unique_sorted(np.concatenate([self.values, earlier.values]))

        def cum(curve: SampledCurve, which: np.ndarray) -> np.ndarray:
            idx = np.searchsorted(curve.values, values, side="right") - 1
            return np.where(idx < 0, 0.0, which[np.maximum(idx, 0)]) if which.size else np.zeros(values.shape)

        w = cum(self, self.cum_weight) - cum(earlier, earlier.cum_weight)
        ws = cum(self, self.cum_size_weight) - cum(earlier, earlier.cum_size_weight)
        keep = np.r_[True, np.diff(w) != 0] & (w != 0) if values.size else np.zeros(0, bool)
        return SampledCurve(values[keep], w[keep], ws[keep], self.n_accesses - earlier.n_accesses,
                            self.total_size - earlier.total_size, self.sampled_weight - earlier.sampled_weight,
                            self.sampled_size_weight - earlier.sampled_size_weight, self.cold_weight - earlier.cold_weight,
                            self.cold_size_weight - earlier.cold_size_weight, self.rate, self.max_keys, self.seed,
                            self.n_sampled_accesses - earlier.n_sampled_accesses, self.n_sampled_keys, self.unit)

    def hits_at(self, capacity: Any) -> Any:
        """Estimated hits at ``capacity`` (scalar or array). O(log bins) each.

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0, 1], rate=1.0).hits_at([1, 2]).tolist()
        [0.0, 2.0]
        """
        got = self._at(capacity, False)
        return float(got) if got.ndim == 0 else got

    def hit_size_at(self, capacity: Any) -> Any:
        """Estimated hit size at ``capacity``. As :meth:`hits_at`.

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0, 1], [2, 3, 2, 3], rate=1.0).hit_size_at(5)
        5.0
        """
        got = self._at(capacity, True)
        return float(got) if got.ndim == 0 else got

    def hit_rate_at(self, capacity: Any) -> Any:
        """Estimated hits / accesses (0.0 for no accesses). As :meth:`hits_at`.

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0, 1], rate=1.0).hit_rate_at(2)
        0.5
        """
        got = self._at(capacity, False) / max(self.n_accesses, 1)
        return float(got) if got.ndim == 0 else got

    def size_hit_rate_at(self, capacity: Any) -> Any:
        """Estimated hit size / total size. As :meth:`hits_at`.

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0, 1], [2, 3, 2, 3], rate=1.0).size_hit_rate_at(5)
        0.5
        """
        got = self._at(capacity, True) / max(self.total_size, 1)
        return float(got) if got.ndim == 0 else got

    @property
    def ceiling_hits(self) -> float:
        """Estimated hits of an infinite cache: accesses less the estimated cold misses. O(1).

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0], rate=1.0).ceiling_hits
        1.0
        """
        return float(min(max(self.n_accesses - self.cold_weight, 0.0), self.n_accesses)) if self.values.size else 0.0

    @property
    def ceiling_hit_rate(self) -> float:
        """Estimated hit rate of an infinite cache. O(1).

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0, 1], rate=1.0).ceiling_hit_rate
        0.5
        """
        return self.ceiling_hits / self.n_accesses if self.n_accesses else 0.0

    def min_capacity_for(self, *, hit_rate: float | None = None, hits: float | None = None,
                         size_hit_rate: float | None = None) -> int | None:
        """The smallest capacity whose estimate reaches the target, or None. O(log bins).

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> c = sampled_curve([0, 1, 2] * 3, rate=1.0)
        >>> c.min_capacity_for(hit_rate=0.5), c.min_capacity_for(hits=7)
        (3, None)
        """
        given = [v for v in (hit_rate, hits, size_hit_rate) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one target: hit_rate, hits or size_hit_rate.")
        by_size = size_hit_rate is not None
        total = self.total_size if by_size else self.n_accesses
        target = float(hits) if hits is not None else float(given[0]) * total
        if target <= 0:
            return 0
        if self.values.size == 0:
            return None
        got = self._at(self.values, by_size)
        i = int(np.searchsorted(got, target - 1e-9 * max(total, 1), side="left"))
        return int(self.values[i]) if i < got.size else None

    def default_capacities(self, points: int = 50) -> np.ndarray:
        """``points`` capacities from 0 to the last sampled step. O(points).

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 2, 0, 1, 2], rate=1.0).default_capacities(4).tolist()
        [0, 1, 2, 3]
        """
        if points < 2:
            raise ValueError(f"points must be at least 2; got {points}.")
        last = int(self.values[-1]) if self.values.size else 1
        caps = np.sort(np.concatenate([np.linspace(0, max(last, 1), points).round().astype(np.int64), [last]]))
        return caps[np.r_[True, caps[1:] != caps[:-1]]]  # distinct (np.unique would import numpy.ma: 15 ms)

    def sample(self, capacities: Any) -> dict[str, list]:
        """The estimates at the given capacities, as lists ready for JSON. O(log bins) each.

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> sampled_curve([0, 1, 0, 1], rate=1.0).sample([2])["hit_rate"]
        [0.5]
        """
        caps = np.asarray(capacities, dtype=np.int64)
        hits, sizes = self._at(caps, False), self._at(caps, True)
        return {"capacity": caps.tolist(), "hits": hits.tolist(), "hit_rate": (hits / max(self.n_accesses, 1)).tolist(),
                "hit_size": sizes.tolist(), "size_hit_rate": (sizes / max(self.total_size, 1)).tolist()}

    def summary(self) -> dict[str, Any]:
        """Totals and the sampling parameters as a JSON-ready dict. O(1).

        >>> from stackdist.engine.scale.sampling import sampled_curve
        >>> s = sampled_curve([0, 1, 0], rate=1.0).summary(); s["sampled"], s["sample_rate"]
        (True, 1.0)
        """
        return {"accesses": self.n_accesses, "total_size": self.total_size, "sampled": True,
                "sample_rate": self.rate, "sample_size": self.max_keys, "seed": self.seed,
                "sampled_accesses": self.n_sampled_accesses, "sampled_keys": self.n_sampled_keys,
                "cold_misses": self.n_accesses - self.ceiling_hits, "ceiling_hits": self.ceiling_hits,
                "ceiling_hit_rate": self.ceiling_hit_rate}


def spread(values: Sequence[Any]) -> dict[str, Any]:
    """min, max and standard deviation of one answer over the seeds (None entries skipped). O(n).

    >>> spread([0.5, 0.7, None])
    {'min': 0.5, 'max': 0.7, 'std': 0.1, 'seeds': 2}
    """
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"min": None, "max": None, "std": None, "seeds": 0}
    return {"min": min(vals), "max": max(vals), "std": round(float(np.std(vals)), 12), "seeds": len(vals)}


def fixed_rate_curve(counts: np.ndarray, n_cold: int, n_keys: int, *, rate: float, n_accesses: int, seed: int
                     ) -> SampledCurve:
    """The SHARDS_adj curve of a fixed-rate, unit-size sample from integer counts:
    ``counts[d]`` sampled accesses at sampled distance ``d``, ``n_cold`` first accesses,
    ``n_keys`` distinct sampled keys, of ``n_accesses`` in all. Every weight is a count over
    ``rate``, so the curve does not depend on how the trace was cut into chunks. O(len(counts)).

    >>> c = fixed_rate_curve(np.array([0, 0, 1]), 2, 2, rate=1.0, n_accesses=3, seed=0)
    >>> c.hits_at(1), c.hits_at(2), c.n_sampled_accesses
    (0.0, 1.0, 3)
    """
    present = np.flatnonzero(counts)
    weight = counts[present] / rate
    n_sampled = int(counts.sum()) + int(n_cold)
    cum = np.cumsum(weight)
    sampled, cold = n_sampled / rate, int(n_cold) / rate
    return SampledCurve(np.ceil(present / rate - 1e-9).astype(np.int64), cum, cum.copy(), int(n_accesses),
                        int(n_accesses), sampled, sampled, cold, cold, float(rate), None, int(seed), n_sampled,
                        int(n_keys), True)


EXACT_SIZE = 1 << 40
"""Fixed-rate samples' sizes up to this are summed as integers (a curve then does not depend on
the chunking); a larger size is weighted in floats."""


def collapse_sized(distances: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct distances ascending, the accesses at each, their sizes' sum), all int64, of
    sampled warm accesses. O(n log n).

    >>> [a.tolist() for a in collapse_sized(np.array([5, 2, 5]), np.array([1, 3, 4]))]
    [[2, 5], [1, 2], [3, 5]]
    """
    if distances.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty.copy(), empty.copy()
    order = np.argsort(distances, kind="stable")
    d, z = distances[order], np.asarray(sizes, np.int64)[order]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    return d[starts], np.diff(np.r_[starts, d.size]), np.add.reduceat(z, starts)


def fixed_rate_sized_curve(at: tuple[np.ndarray, np.ndarray, np.ndarray], cold: tuple[int, int], n_keys: int, *,
                           rate: float, totals: tuple[int, int], seed: int, unit: bool) -> SampledCurve:
    """The SHARDS_adj curve of a fixed-rate sample with sizes from integer sums: ``at`` =
    :func:`collapse_sized` of the warm sampled accesses, ``cold`` = (cold accesses, their
    sizes), ``totals`` = (accesses, their sizes) of the whole trace. As :func:`fixed_rate_curve`,
    every weight is a sum over ``rate``, whatever the chunking. O(len(at[0])).

    >>> c = fixed_rate_sized_curve((np.array([5]), np.array([1]), np.array([3])), (2, 5), 2, rate=1.0,
    ...                            totals=(3, 8), seed=0, unit=False)
    >>> c.hits_at(4), c.hits_at(5), c.hit_size_at(5)
    (0.0, 1.0, 3.0)
    """
    distances, counts, size_sums = at
    n_sampled, sampled_size = int(counts.sum()) + int(cold[0]), int(size_sums.sum()) + int(cold[1])
    return SampledCurve(np.ceil(distances / rate - 1e-9).astype(np.int64), np.cumsum(counts / rate),
                        np.cumsum(size_sums / rate), int(totals[0]), int(totals[1]), n_sampled / rate,
                        sampled_size / rate, int(cold[0]) / rate, int(cold[1]) / rate, float(rate), None, int(seed),
                        n_sampled, int(n_keys), bool(unit))


class QuantileCounter:
    """Counts of non-negative integers, rounded up to 16 significant bits, for quantiles in
    bounded memory (the distinct rounded values: at most 2**16 per octave). O(log) per query.

    >>> q = QuantileCounter(); q.add(np.array([5, 1, 9, 3])); q.quantile(0.5), q.quantile(1.0), q.count
    (3, 9, 4)
    """

    def __init__(self) -> None:
        self.values = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    @property
    def count(self) -> int:
        """Values added. O(1)."""
        return int(self.counts.sum())

    def add(self, values: np.ndarray) -> None:
        """Add a batch of values. O((n + bins) log)."""
        v = np.asarray(values, np.int64)
        bits = np.zeros(v.shape, np.int64)
        big = v >= 1 << 16
        if big.any():
            bits[big] = np.floor(np.log2(v[big].astype(np.float64))).astype(np.int64) - 15
        step = np.left_shift(np.int64(1), bits)
        v = (v + step - 1) // step * step
        allv = np.concatenate([self.values, v])
        allc = np.concatenate([self.counts, np.ones(v.shape, np.int64)])
        order = np.argsort(allv, kind="stable")
        allv, allc = allv[order], allc[order]
        starts = np.flatnonzero(np.r_[True, allv[1:] != allv[:-1]]) if allv.size else np.zeros(0, np.int64)
        self.values, self.counts = allv[starts], np.add.reduceat(allc, starts) if allv.size else allc

    def quantile(self, q: float) -> int | None:
        """The smallest value with at least ``q`` of the values at or below it (None when empty). O(log bins)."""
        total = self.count
        if total == 0:
            return None
        i = int(np.searchsorted(np.cumsum(self.counts), max(1, int(np.ceil(q * total - 1e-9))), side="left"))
        return int(self.values[min(i, self.values.size - 1)])

    def copy(self) -> QuantileCounter:
        """A snapshot. O(bins)."""
        out = QuantileCounter()
        out.values, out.counts = self.values.copy(), self.counts.copy()
        return out
