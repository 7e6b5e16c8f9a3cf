"""Belady's MIN: equal to an exhaustive search over every admission and eviction choice on small
traces (so it is optimal there), never below LRU, and the prefix form evicts leaves only."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
from naive import random_requests

from stackdist import HitCurve, engine_depths
from stackdist.engine.belady import belady_hits, belady_prefix_hits, next_uses


def best_hits(keys: list[int], capacity: int) -> int:
    """The most hits any policy gets on a key stream: search every choice (admit or bypass each
    miss, evict any cached key)."""

    @cache
    def go(i: int, cached: frozenset) -> int:
        if i == len(keys):
            return 0
        k = keys[i]
        if k in cached:
            return 1 + go(i + 1, cached)
        options = [go(i + 1, cached)]
        if len(cached) < capacity:
            options.append(go(i + 1, cached | {k}))
        elif capacity:
            options += [go(i + 1, (cached - {v}) | {k}) for v in cached]
        return max(options)

    return go(0, frozenset())


def _best_prefix(requests: list[list[int]], capacity: int) -> int:
    @cache
    def go(r: int, cached: frozenset) -> int:
        if r == len(requests):
            return 0
        req = requests[r]
        h = 0
        while h < len(req) and req[h] in cached:
            h += 1
        return h + max(go(r + 1, s) for s in _successors(cached, tuple(req), capacity))

    return go(0, frozenset())


def _successors(cached: frozenset, req: tuple, capacity: int) -> set:
    """Every cache state reachable while admitting the request's blocks one by one (or not)."""
    states = {cached}
    for b in req:
        nxt = set()
        for s in states:
            nxt.add(s)
            if b in s:
                continue
            if len(s) < capacity:
                nxt.add(s | {b})
            else:
                nxt.update((s - {v}) | {b} for v in s)
        states = nxt
    return states


def test_next_uses():
    assert next_uses(np.array([3, 1, 3, 3, 1])).tolist()[:4] == [2, 4, 3, 2305843009213693951]


def test_per_access_belady_is_optimal_and_beats_lru():
    for seed in range(30):  # one test item, 30 seeded cases
        rng = np.random.default_rng(seed)
        keys = rng.integers(0, 5, int(rng.integers(1, 11))).tolist()
        caps = [0, 1, 2, 3]
        got = belady_hits(keys, caps).sum(axis=1).tolist()
        assert got == [best_hits(keys, c) for c in caps]
        lru = HitCurve.from_trace(keys).hits_at(caps).tolist()
        assert all(b >= lr for b, lr in zip(got, lru))


def test_prefix_belady_is_optimal_on_prefix_chained_requests():
    for seed in range(20):  # one test item, 20 seeded cases
        rng = np.random.default_rng(100 + seed)
        requests = random_requests(rng, n_requests=int(rng.integers(1, 6)), max_blocks=3, branching=2)
        keys = [b for r in requests for b in r]
        offsets = np.r_[0, np.cumsum([len(r) for r in requests])]
        for c in (1, 2, 3):
            hits = belady_prefix_hits(keys, offsets, [c])[0]
            assert int(hits.sum()) == _best_prefix(requests, c)
            # never below the engine-semantics LRU prefix hits at the same capacity
            depths = engine_depths(keys, offsets)
            lru = sum(int(np.maximum.accumulate(depths[lo:hi]).__le__(c).sum()) for lo, hi in itertools.pairwise(offsets))
            assert int(hits.sum()) >= lru


def test_prefix_hits_are_prefixes_and_capacity_edges():
    rng = np.random.default_rng(7)
    requests = random_requests(rng, n_requests=200, max_blocks=8, branching=3)
    keys = [b for r in requests for b in r]
    offsets = np.r_[0, np.cumsum([len(r) for r in requests])]
    hits = belady_prefix_hits(keys, offsets, [0, 5, 10**6])
    assert not hits[0].any()
    for lo, hi in itertools.pairwise(offsets):
        for row in hits:
            seg = row[lo:hi]
            assert not np.any(seg[1:] & ~seg[:-1])  # a hit block's parent hits too
    seen: set = set()
    expected = []
    for req in requests:  # infinite cache: a block hits iff its whole prefix was seen before
        ok = True
        for b in req:
            ok = ok and b in seen
            expected.append(ok)
        seen.update(req)
    assert hits[2].tolist() == expected


def test_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="capacities must be non-negative"):
        belady_hits([1, 2], [-1])


def test_prefix_belady_hits_grow_with_capacity():
    """The bisection in planning/optimal.py relies on this (Belady with bypass is a stack algorithm)."""
    for seed in range(15):
        rng = np.random.default_rng(300 + seed)
        requests = random_requests(rng, n_requests=40, max_blocks=6, branching=3)
        keys = [b for r in requests for b in r]
        offsets = np.r_[0, np.cumsum([len(r) for r in requests])]
        totals = belady_prefix_hits(keys, offsets, list(range(30))).sum(axis=1)
        assert np.all(np.diff(totals) >= 0)
