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
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .distances import replay_keeping_state
from .kernels import COLD, PACK_SHIFT, njit, prefetch
from .keys import DenseKeys

__all__ = ["CountingTable", "Histogram", "exact_count", "exact_fraction", "merge", "replay_counting"]

COUNTING_LIMIT = 1 << 20
"""Distances up to max(2 x accesses, this) are counted in a table rather than sorted."""

COUNT_PREFETCH = 64
"""Distances ahead whose table rows :func:`count_into` asks for (a big table is read at random:
64 ahead took 0.84x the time of 16 ahead on 4 M sized Zipf distances, a 26 MB table; measured)."""


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
        largest = int(finite_max(distances))
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
            values, counts, sums = sorted_histogram(np.sort((d << shift) | hit_sizes), shift)
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
        self.packed = not unit and n_accesses < 1 << 27 and total_size < 1 << PACK_SHIFT
        # Unit sizes: 32-bit counts while they cannot overflow (half the memory of the table).
        dtype = np.int32 if unit and n_accesses < 2**31 else np.int64
        self.table = np.zeros((max_distance + 1, 1 if unit or self.packed else 2), dtype)
        self.used: int | None = 0  # non-empty rows (None: unknown, the table was filled elsewhere)

    def add(self, distances: np.ndarray, sizes: np.ndarray | None) -> None:
        """Count a chunk of distances (and their sizes). O(len)."""
        size_arg = np.ones(1, np.int64) if sizes is None else sizes
        new_rows = int(count_into(self.table, distances, size_arg, self.unit, self.packed))
        if self.used is not None:
            self.used += new_rows

    def histogram(self, largest: int | None = None) -> Histogram:
        """The counted distances as a :class:`Histogram` (rows above ``largest``, if given, are
        known to be empty and are not read). O(rows)."""
        rows = self.table if largest is None else self.table[: largest + 1]
        used = -1 if self.used is None else self.used
        return Histogram(*table_histogram(rows, self.unit, self.packed, used))


def replay_counting(
    dense: DenseKeys, sizes: np.ndarray | None, window: tuple[int, int], progress: Any,
    largest: int | None = None, window_total: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None, Histogram | None]:
    """Replay, counting the window's distances into its histogram during the replay when they
    are known to be small (at most the keys times the largest size: no sort, no second pass
    over the distances). Returns (distances, key sizes or None for unit sizes, histogram or None).
    ``largest`` (the largest size) and ``window_total`` (the window's total size), when the
    caller knows them, save a pass each."""
    start, stop = window
    if largest is None and sizes is not None and sizes.size:
        largest = int(sizes.max())
    if sizes is None:
        bound, total = dense.n_keys, stop - start
    else:
        bound = dense.n_keys * (largest or 0)
        total = int(sizes[start:stop].sum()) if window_total is None else window_total
    if bound > max(2 * (stop - start), COUNTING_LIMIT):
        distances, state = replay_keeping_state(dense, sizes, progress, max_total=bound, max_size=largest)
        return distances, state.size_of if sizes is not None else None, None
    counter = CountingTable(bound, sizes is None, stop - start, total)
    # Unit sizes: counted inside the replay (the table is small, about 4 bytes per key, and its
    # prefetched updates cost almost nothing). Sized: one pass after it; counting inside the
    # replay there (a table of 8 bytes per size unit, mostly out of cache) slowed the replay by
    # more than the pass costs (4 M sized Zipf accesses: +104 ms inside, 31 ms after; measured).
    table = counter.table if sizes is None else None
    if table is not None:
        counter.used = None
    distances, state = replay_keeping_state(dense, sizes, progress, table=table, window=window, max_total=bound,
                                            max_size=largest)
    size_of, distinct_total = (state.size_of if sizes is not None else None), int(state.scalars[1])
    del state  # the replay state goes before the histogram's arrays are made (lower peak memory)
    if sizes is not None:
        counter.add(distances[start:stop], sizes[start:stop])
    return distances, size_of, counter.histogram(distinct_total)


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


@njit(cache=True, nogil=True)
def sorted_histogram(sorted_packed, shift):
    """Collapse sorted ``(distance << shift) | size`` codes into unique distances with counts
    and size sums. O(n)."""
    n = sorted_packed.shape[0]
    values = np.empty(n, np.int64)
    counts = np.empty(n, np.int64)
    sums = np.empty(n, np.int64)
    mask = (np.int64(1) << shift) - 1
    m = -1
    last = -1
    for i in range(n):
        code = sorted_packed[i]
        d = code >> shift
        if d != last:
            m += 1
            values[m] = d
            counts[m] = 0
            sums[m] = 0
            last = d
        counts[m] += 1
        sums[m] += code & mask
    return values[: m + 1], counts[: m + 1], sums[: m + 1]


@njit(cache=True, nogil=True)
def finite_max(distances):
    """The largest distance that is not COLD, or -1 when there is none. O(n)."""
    best = -1
    for d in distances:
        if d != COLD and d > best:
            best = d
    return best


@njit(cache=True, nogil=True)
def count_into(table, distances, sizes, unit, packed):
    """Add the finite distances (and their sizes) to a counting table indexed by distance;
    return how many rows were empty before and are not now.

    Layouts: one column of hits (``unit``); one packed column, hits above bit PACK_SHIFT and
    hit sizes below (``packed``: the caller checks that fewer than 2**27 accesses and a total
    size below 2**36 cannot overflow), so an access touches one word; else two columns.
    """
    one = np.int64(1) << PACK_SHIFT
    new_rows = 0
    flat = table.reshape(-1)
    columns = table.shape[1]
    n = distances.shape[0]
    for i in range(n):
        if i + COUNT_PREFETCH < n:  # a big table is random access: start the row's load early
            ahead = distances[i + COUNT_PREFETCH]
            if ahead != COLD:
                prefetch(flat, ahead * columns)
        d = distances[i]
        if d != COLD:
            new_rows += table[d, 0] == 0
            if unit:
                table[d, 0] += 1
            elif packed:
                table[d, 0] += one + sizes[i]
            else:
                table[d, 0] += 1
                table[d, 1] += sizes[i]
    return new_rows


@njit(cache=True, nogil=True)
def table_histogram(table, unit, packed, used):
    """The distinct distances of a counting table with cumulative hits and hit sizes. O(rows).

    ``used``: the number of non-empty rows if known, else -1 (one more pass counts them). For
    unit sizes the hit sizes are the hits, and the same array is returned twice (read-only by
    convention).
    """
    rows = table.shape[0]
    m = used
    if m < 0:
        m = 0
        for d in range(rows):
            m += table[d, 0] != 0
    values = np.empty(m + 1, np.int64)  # one spare entry: the branch-free loop writes one ahead
    cum_hits = np.empty(m + 1, np.int64)
    cum_sizes = cum_hits if unit else np.empty(m + 1, np.int64)
    mask = (np.int64(1) << PACK_SHIFT) - 1
    m = 0
    hits = 0
    total = 0
    for d in range(rows):  # written without a data-dependent branch (the empty rows are random)
        cell = table[d, 0]
        if unit:
            hits += cell
        elif packed:
            hits += cell >> PACK_SHIFT
            total += cell & mask
        else:
            hits += cell
            total += table[d, 1]
        values[m] = d
        cum_hits[m] = hits
        if not unit:
            cum_sizes[m] = total
        m += cell != 0
    values, cum_hits = values[:m], cum_hits[:m]
    cum_sizes = cum_hits if unit else cum_sizes[:m]
    return values, cum_hits, cum_sizes
