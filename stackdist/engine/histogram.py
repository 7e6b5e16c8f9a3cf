"""Distance histograms, and the one exact-rate rule every target query uses.

A :class:`Histogram` holds the distinct finite distances of a set of accesses with cumulative
hit counts and hit sizes; every curve (LRU, tiers, prefix-cache) reads its answers from one.
:func:`exact_count` turns a rate the user wrote (``0.9``) into the smallest whole count that
reaches it, exactly (as the decimal fraction 9/10, never a binary float).

Package-internal names (documented here, shared across :mod:`stackdist`): ``Histogram``,
``CountingTable``, ``merge``, ``replay_counting``, ``exact_fraction``, ``exact_count``.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from . import kernels
from .distances import replay_keeping_state
from .kernels import COLD
from .keys import DenseKeys

__all__ = ["Histogram", "CountingTable", "merge", "replay_counting", "exact_fraction", "exact_count"]

COUNTING_LIMIT = 1 << 20
"""Distances up to max(2 x accesses, this) are counted in a table rather than sorted."""
_PIPELINE_MIN = 1 << 21  # below this the second thread costs more than it saves
_PIPELINE_CHUNK = 1 << 20


def exact_fraction(value: float, name: str) -> Fraction:
    """A rate in [0, 1] as the exact decimal fraction the user wrote; ValueError naming ``name``.

    >>> exact_fraction(0.1, "target")
    Fraction(1, 10)
    """
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be between 0 and 1; got {value}.")
    return Fraction(repr(float(value)))


def exact_count(rate: float, total: int, name: str = "rate") -> int:
    """The smallest count ``k`` with ``k / total >= rate``, exactly: ``ceil(rate x total)`` with
    ``rate`` read as the decimal it was written as (0.1 is 1/10, not 0.1000000000000000055).

    >>> exact_count(0.9, 10), exact_count(0.95, 3), exact_count(0, 7)
    (9, 3, 0)
    """
    return math.ceil(exact_fraction(rate, name) * total)


@dataclass(frozen=True)
class Histogram:
    """Sorted unique finite distances with cumulative hit counts and hit sizes.

    At capacity ``c`` (at or above the largest object) the hits are ``cum_hits[i]`` for the
    last ``values[i] <= c``. Package-internal: shared by the curves, the stream and the planner.

    >>> h = Histogram.build(np.array([3, COLD, 1, 3]), None)
    >>> h.values.tolist(), h.cum_hits.tolist(), h.first_reaching(3, by_size=False)
    ([1, 3], [1, 3], 3)
    """

    values: np.ndarray
    cum_hits: np.ndarray
    cum_sizes: np.ndarray

    @classmethod
    def build(cls, distances: np.ndarray, sizes: np.ndarray | None, total_size: int | None = None) -> Histogram:
        """O(n + largest distance) by counting when the distances are small (at most twice the
        trace length, or 2**20), else one sort of packed (distance, size) codes."""
        largest = int(kernels.finite_max(distances))
        if largest < 0:
            empty = np.zeros(0, np.int64)
            return cls(empty, empty, empty)
        unit = sizes is None
        if largest <= max(2 * distances.shape[0], COUNTING_LIMIT):
            if total_size is None:
                total_size = distances.shape[0] if sizes is None else int(sizes.sum())
            total = total_size
            counter = CountingTable(largest, unit, distances.shape[0], total)
            counter.add(distances, sizes)
            return counter.histogram()
        finite = distances != COLD
        d = distances[finite]
        hit_sizes = np.ones_like(d) if sizes is None else sizes[finite]
        shift = max(1, int(hit_sizes.max()).bit_length())
        if largest.bit_length() + shift <= 63:
            values, counts, sums = kernels.sorted_histogram(np.sort((d << shift) | hit_sizes), shift)
        else:
            order = np.argsort(d, kind="stable")
            sorted_d = d[order]
            starts = np.flatnonzero(np.r_[True, sorted_d[1:] != sorted_d[:-1]])
            values = sorted_d[starts]
            counts = np.diff(np.r_[starts, sorted_d.size])
            sums = np.add.reduceat(hit_sizes[order], starts)
        return cls(values, np.cumsum(counts), np.cumsum(sums))

    def at(self, capacities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Hits and hit sizes at each capacity (O(log n) each)."""
        idx = np.searchsorted(self.values, capacities, side="right") - 1
        safe = np.maximum(idx, 0)
        zero = idx < 0
        if self.values.size == 0:
            z = np.zeros(np.shape(capacities), np.int64)
            return z, z.copy()
        return np.where(zero, 0, self.cum_hits[safe]), np.where(zero, 0, self.cum_sizes[safe])

    def first_reaching(self, target: int, by_size: bool) -> int | None:
        """The smallest distance value at which the cumulative count (or size) reaches ``target``."""
        cum = self.cum_sizes if by_size else self.cum_hits
        i = int(np.searchsorted(cum, target, side="left"))
        return int(self.values[i]) if i < cum.size else None


class CountingTable:
    """A counting histogram indexed by distance, filled chunk by chunk. O(rows) memory.

    >>> t = CountingTable(4, True, 3, 3); t.add(np.array([2, COLD, 4]), None)
    >>> t.histogram().cum_hits.tolist()
    [1, 2]
    """

    def __init__(self, max_distance: int, unit: bool, n_accesses: int, total_size: int) -> None:
        self.unit = unit
        self.packed = not unit and n_accesses < 1 << 27 and total_size < 1 << kernels.PACK_SHIFT
        # Unit sizes: 32-bit counts while they cannot overflow (half the memory of the table).
        dtype = np.int32 if unit and n_accesses < 2**31 else np.int64
        self.table = np.zeros((max_distance + 1, 1 if unit or self.packed else 2), dtype)

    def add(self, distances: np.ndarray, sizes: np.ndarray | None) -> None:
        """Count a chunk of distances (and their sizes). O(len)."""
        size_arg = np.ones(1, np.int64) if sizes is None else sizes
        kernels.count_into(self.table, distances, size_arg, self.unit, self.packed)

    def histogram(self) -> Histogram:
        """The counted distances as a :class:`Histogram`. O(rows)."""
        return Histogram(*kernels.table_histogram(self.table, self.unit, self.packed))


def replay_counting(
    dense: DenseKeys, sizes: np.ndarray | None, window: tuple[int, int], progress: Any
) -> tuple[np.ndarray, np.ndarray, Histogram | None]:
    """Replay; when the distances are known to be small, count each finished chunk into the
    window's histogram on a second thread while the replay goes on (both kernels release the
    GIL), so the histogram costs almost no extra time. Returns (distances, key sizes, histogram
    or None)."""
    start, stop = window
    if sizes is None:
        bound, total = dense.n_keys, stop - start
    else:
        per_key = np.zeros(dense.n_keys, np.int64)
        per_key[dense.ids] = sizes
        bound, total = int(per_key.sum()), int(sizes[start:stop].sum())
    if stop - start < _PIPELINE_MIN or bound > max(2 * (stop - start), COUNTING_LIMIT) or (os.cpu_count() or 1) < 2:
        distances, state = replay_keeping_state(dense, sizes, progress)
        return distances, state.size_of, None
    counter = CountingTable(bound, sizes is None, stop - start, total)
    with ThreadPoolExecutor(max_workers=1) as worker:
        pending = []

        def count(lo: int, hi: int, chunk: np.ndarray) -> None:
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                pending.append(worker.submit(counter.add, chunk[a - lo : b - lo], None if sizes is None else sizes[a:b]))

        distances, state = replay_keeping_state(dense, sizes, progress, on_chunk=count, chunk=_PIPELINE_CHUNK)
        for future in pending:
            future.result()
    size_of = state.size_of
    del state  # the replay state goes before the histogram's arrays are made (lower peak memory)
    return distances, size_of, counter.histogram()


def merge(a: Histogram, b: Histogram) -> Histogram:
    """The histogram of two disjoint sets of accesses. O((|a| + |b|) log).

    >>> m = merge(Histogram.build(np.array([1]), None), Histogram.build(np.array([1, 2]), None))
    >>> m.values.tolist(), m.cum_hits.tolist()
    ([1, 2], [2, 3])
    """
    if a.values.size == 0:
        return b
    if b.values.size == 0:
        return a
    values = np.concatenate([a.values, b.values])
    counts = np.concatenate([np.diff(a.cum_hits, prepend=0), np.diff(b.cum_hits, prepend=0)])
    sums = np.concatenate([np.diff(a.cum_sizes, prepend=0), np.diff(b.cum_sizes, prepend=0)])
    order = np.argsort(values, kind="stable")
    values, counts, sums = values[order], counts[order], sums[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return Histogram(values[starts], np.cumsum(np.add.reduceat(counts, starts)), np.cumsum(np.add.reduceat(sums, starts)))
