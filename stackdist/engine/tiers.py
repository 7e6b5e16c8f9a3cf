"""Two- and three-tier curves: every lower-tier capacity at once, exact.

Inclusive tiers (the lab's ``TwoTierCache``: a miss is stored in both tiers, a CPU hit is
copied up into the GPU tier, a GPU hit leaves the CPU tier alone).

*Claim.* For a fixed GPU capacity G, the CPU tier's hits at every CPU capacity are the LRU hits
of the GPU-miss stream, so one replay of that stream gives the whole CPU curve.

*Proof.* Every access reaches the GPU tier as one LRU access: a hit makes the entry most recent;
a miss (whether the CPU tier then hits or not) inserts it with the GPU's normal eviction. Nothing
else ever touches the GPU tier, so its contents, and which accesses hit it, are those of an LRU
of capacity G over the whole trace, whatever the CPU tier does. The CPU tier is touched only by
the accesses that missed the GPU, each as one LRU access (a hit makes the copy most recent, a
miss stores it); GPU hits and GPU evictions never touch it. So the CPU tier is an LRU of capacity
C over the GPU-miss subsequence, and its hits at every C are that subsequence's hit curve. The
GPU-miss set depends on G only, hence one extra replay per GPU capacity. Objects larger than a
tier are bypassed by that tier alone, which is the per-tier LRU rule, so the argument holds for
any sizes. (Tested against ``kvlab.kvsim.TwoTierCache`` at every grid point.)

Exclusive tiers (each entry in exactly one tier; a lower-tier hit promotes to the top tier, a
top-tier eviction demotes to the next, the last tier drops). With unit sizes the tiers hold
consecutive bands of the one LRU stack: tier 0 the top c0 entries, tier 1 the next c1, and so
on, so an access hits tier k iff ``c0 + ... + c(k-1) < distance <= c0 + ... + ck``: one
histogram gives every tier's hits for every combination of sizes. With equal sizes s the same
holds with each capacity rounded down to a multiple of s (a tier holds ``floor(c/s)`` entries).
With varied sizes it is an approximation: each tier packs whole entries and leaves its own
slack, so the band edges drift from the prefix sums of the capacities; :func:`exclusive_hits`
says so in its result (``exact`` is False) and the tests measure the gap against
``kvlab.kvsim.ExclusiveTierCache``.

>>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
>>> t.gpu_hits, t.cpu_hits_at(2), t.cpu_hits_at(3)
(0, 0, 3)
>>> exclusive_hits(HitCurve.from_trace([0, 1, 2, 0, 1, 2]), [1, 2])["tier_hits"]
[0, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .curve import HitCurve
from .distances import replay_distances
from .histogram import exact_count
from .kernels import COLD
from .keys import DenseKeys, unique_sorted

OUTCOMES = ("gpu", "cpu", "miss")

__all__ = [
    "OUTCOMES",
    "InclusiveTierCurve",
    "compare_organisations",
    "exclusive_grid",
    "exclusive_hits",
    "inclusive_grid",
    "inclusive_tiers",
]


@dataclass
class InclusiveTierCurve:
    """GPU hits at one GPU capacity and the CPU tier's curve over every CPU capacity."""

    gpu_capacity: int
    n_accesses: int
    gpu_hits: int
    gpu_hit_size: int
    cpu: HitCurve
    gpu_hit_mask: np.ndarray  # over the whole trace

    def outcomes(self, cpu_capacity: int) -> np.ndarray:
        """Where every access of the whole trace was served at ``cpu_capacity``:
        0 = GPU hit, 1 = CPU hit, 2 = miss (the codes of :data:`OUTCOMES`). O(n).

        >>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
        >>> t.outcomes(3).tolist()
        [2, 2, 2, 1, 1, 1]
        """
        out = np.full(self.gpu_hit_mask.shape[0], 2, np.int8)
        out[self.gpu_hit_mask] = 0
        misses = np.flatnonzero(~self.gpu_hit_mask)
        out[misses[self.cpu.hit_mask(cpu_capacity)]] = 1
        return out

    def cpu_hits_at(self, cpu_capacity: Any) -> Any:
        """CPU-tier hits in the window at ``cpu_capacity`` (scalar or array). O(log n) per capacity.

        >>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
        >>> t.cpu_hits_at([2, 3]).tolist()
        [0, 3]
        """
        return self.cpu.hits_at(cpu_capacity)

    def misses_at(self, cpu_capacity: Any) -> Any:
        """Accesses in the window that miss both tiers. O(log n) per capacity.

        >>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
        >>> t.misses_at(3)
        3
        """
        return self.n_accesses - self.gpu_hits - self.cpu.hits_at(cpu_capacity)

    def hit_rate_at(self, cpu_capacity: Any) -> Any:
        """(GPU + CPU hits) / accesses. O(log n) per capacity.

        >>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
        >>> t.hit_rate_at(3)
        0.5
        """
        hits = self.gpu_hits + self.cpu.hits_at(cpu_capacity)
        return hits / self.n_accesses if self.n_accesses else 0.0 * hits

    def min_cpu_capacity_for(
        self, *, hit_rate: float | None = None, hits: int | None = None, max_misses: int | None = None
    ) -> int | None:
        """The smallest CPU capacity reaching a total hit rate, a hit count, or at most
        ``max_misses`` misses in the window (give exactly one); None if none does. O(log n).

        >>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
        >>> t.min_cpu_capacity_for(max_misses=3), t.min_cpu_capacity_for(hit_rate=0.9)
        (3, None)
        """
        given = [v is not None for v in (hit_rate, hits, max_misses)]
        if sum(given) != 1:
            raise ValueError("give exactly one target: hit_rate, hits or max_misses.")
        if hit_rate is not None:
            hits = exact_count(hit_rate, self.n_accesses, "hit_rate")
        elif max_misses is not None:
            hits = self.n_accesses - int(max_misses)
        assert hits is not None
        return self.cpu.min_capacity_for(hits=max(0, int(hits) - self.gpu_hits))

    def to_dict(self, cpu_capacities: Sequence[int]) -> dict[str, Any]:
        """This GPU capacity's row as JSON-ready lists. O(len(cpu_capacities) log n).

        >>> t = inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1])[0]
        >>> t.to_dict([3])["cpu_hits"]
        [3]
        """
        caps = np.asarray(cpu_capacities, dtype=np.int64)
        cpu_hits = np.asarray(self.cpu.hits_at(caps))
        return {
            "gpu_capacity": self.gpu_capacity,
            "accesses": self.n_accesses,
            "gpu_hits": self.gpu_hits,
            "cpu_capacity": caps.tolist(),
            "cpu_hits": cpu_hits.tolist(),
            "misses": (self.n_accesses - self.gpu_hits - cpu_hits).tolist(),
        }


def inclusive_tiers(
    keys: Any = None,
    sizes: Any = None,
    gpu_capacities: Sequence[int] = (),
    window: Any = None,
    *,
    curve: HitCurve | None = None,
) -> list[InclusiveTierCurve]:
    """For each GPU capacity, the inclusive two-tier result over every CPU capacity.

    Pass the trace (``keys``, ``sizes``, ``window``) or an existing ``curve`` to reuse its
    replay. Cost: the trace's replay once, plus one replay of the GPU-miss stream per GPU
    capacity (see the module docstring for why that is exact).
    """
    if curve is None:
        curve = HitCurve.from_trace(keys, sizes, window)
    start, stop = curve.window
    result = []
    for gpu in gpu_capacities:
        gpu_hit = curve.hit_mask(int(gpu))
        miss = ~gpu_hit
        sub = DenseKeys(curve.keys.ids[miss], curve.keys.n_keys, None)
        sub_sizes = None if curve.sizes is None else curve.sizes[miss]
        before = np.cumsum(np.r_[0, miss])
        cpu = HitCurve(sub, sub_sizes, replay_distances(sub, sub_sizes), (int(before[start]), int(before[stop])))
        in_window = gpu_hit[start:stop]
        gpu_hit_size = int(np.count_nonzero(in_window)) if curve.sizes is None else int(curve.sizes[start:stop][in_window].sum())
        result.append(InclusiveTierCurve(int(gpu), curve.n_accesses, int(np.count_nonzero(in_window)), gpu_hit_size, cpu, gpu_hit))
    return result


def inclusive_grid(tiers: Sequence[InclusiveTierCurve], cpu_capacities: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """A GPU x CPU grid of hits and misses: arrays of shape (len(tiers), len(cpu_capacities)).

    O(tiers x capacities x log n).

    >>> inclusive_grid(inclusive_tiers([0, 1, 2, 0, 1, 2], gpu_capacities=[1, 3]), [0, 3])["cpu_hits"].tolist()
    [[0, 3], [0, 0]]
    """
    caps = np.asarray(cpu_capacities, dtype=np.int64)
    cpu_hits = np.array([np.asarray(t.cpu.hits_at(caps)) for t in tiers], dtype=np.int64).reshape(len(tiers), caps.size)
    gpu_hits = np.array([t.gpu_hits for t in tiers], dtype=np.int64)
    n = tiers[0].n_accesses if tiers else 0
    return {
        "gpu_capacity": np.array([t.gpu_capacity for t in tiers], dtype=np.int64),
        "cpu_capacity": caps,
        "gpu_hits": np.repeat(gpu_hits[:, None], caps.size, axis=1),
        "cpu_hits": cpu_hits,
        "misses": n - gpu_hits[:, None] - cpu_hits,
        "accesses": n,
    }


def _band_edges(curve: HitCurve, capacities: Sequence[int]) -> tuple[np.ndarray, bool]:
    """Cumulative band edges for exclusive tiers, and whether the band rule is exact here."""
    caps = np.asarray(capacities, dtype=np.int64)
    if caps.ndim != 1 or caps.size < 2 or np.any(caps < 0):
        raise ValueError(f"capacities must be 2 or more non-negative integers, one per tier; got {list(capacities)}.")
    sizes = curve.sizes
    exact = True
    if sizes is not None and sizes.size:
        distinct = unique_sorted(sizes)
        if distinct.size == 1:
            s = int(distinct[0])
            caps = caps // s * s
        else:
            exact = False
    return _saturating_cumsum(caps), exact


def _saturating_cumsum(caps: np.ndarray) -> np.ndarray:
    """Cumulative sums, exact in Python integers, capped below the cold sentinel (a band edge
    of 2**62 + 2**62 must not wrap to a negative number, and no edge may reach ``COLD``).

    >>> _saturating_cumsum(np.array([2**62, 2**62])).tolist() == [2**62, COLD - 1]
    True
    """
    total, edges = 0, []
    for c in caps.tolist():
        total += int(c)
        edges.append(min(total, COLD - 1))
    return np.array(edges, dtype=np.int64)


def exclusive_hits(curve: HitCurve, capacities: Sequence[int]) -> dict[str, Any]:
    """Per-tier hits of exclusive LRU tiers with these capacities (tier 0 first), in the window.

    Exact for unit and equal sizes (``exact`` True); a band approximation for varied sizes.
    O(tiers x log n) from the curve's histogram.
    """
    edges, exact = _band_edges(curve, capacities)
    cumulative = np.r_[0, np.asarray(curve.histogram.at(edges)[0])]  # bands of the unfiltered stack
    tier_hits = np.diff(cumulative)
    return {
        "capacities": [int(c) for c in capacities],
        "tier_hits": tier_hits.tolist(),
        "misses": int(curve.n_accesses - cumulative[-1]),
        "accesses": curve.n_accesses,
        "exact": exact,
    }


def exclusive_grid(curve: HitCurve, gpu_capacities: Sequence[int] | np.ndarray, cpu_capacities: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """Exclusive two-tier hits over a GPU x CPU grid, from the one histogram. O(grid x log n).

    >>> exclusive_grid(HitCurve.from_trace([0, 1, 2, 0, 1, 2]), [1], [2])["cpu_hits"].tolist()
    [[3]]
    """
    gpu = np.asarray(gpu_capacities, dtype=np.int64)
    cpu = np.asarray(cpu_capacities, dtype=np.int64)
    gpu_hits = np.zeros((gpu.size, cpu.size), np.int64)
    cpu_hits = np.zeros_like(gpu_hits)
    exact = True
    for i, g in enumerate(gpu.tolist()):
        for j, c in enumerate(cpu.tolist()):
            r = exclusive_hits(curve, [g, c])
            gpu_hits[i, j], cpu_hits[i, j] = r["tier_hits"]
            exact = exact and r["exact"]
    return {
        "gpu_capacity": gpu,
        "cpu_capacity": cpu,
        "gpu_hits": gpu_hits,
        "cpu_hits": cpu_hits,
        "misses": curve.n_accesses - gpu_hits - cpu_hits,
        "accesses": curve.n_accesses,
        "exact": exact,
    }


def compare_organisations(curve: HitCurve, gpu_capacity: int, total_capacity: int) -> dict[str, Any]:
    """Inclusive versus exclusive CPU tier at the same total memory (GPU + CPU).

    The inclusive CPU tier keeps a copy of what the GPU holds, so at the same total it covers
    fewer distinct entries and usually hits less.
    """
    if total_capacity < gpu_capacity:
        raise ValueError(f"total_capacity ({total_capacity}) must be at least gpu_capacity ({gpu_capacity}).")
    cpu_capacity = total_capacity - gpu_capacity
    inclusive = inclusive_tiers(gpu_capacities=[gpu_capacity], curve=curve)[0]
    exclusive = exclusive_hits(curve, [gpu_capacity, cpu_capacity])
    inc_cpu = int(inclusive.cpu_hits_at(cpu_capacity))
    return {
        "gpu_capacity": gpu_capacity,
        "cpu_capacity": cpu_capacity,
        "accesses": curve.n_accesses,
        "inclusive": {"gpu_hits": inclusive.gpu_hits, "cpu_hits": inc_cpu, "misses": curve.n_accesses - inclusive.gpu_hits - inc_cpu},
        "exclusive": {"gpu_hits": exclusive["tier_hits"][0], "cpu_hits": exclusive["tier_hits"][1], "misses": exclusive["misses"], "exact": exclusive["exact"]},
    }
