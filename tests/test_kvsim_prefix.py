"""kvlab.kvsim.EnginePrefixCache: hand-derived cases and a seeded cross-check against stackdist.serving."""

from __future__ import annotations

import numpy as np
import pytest
from naive import random_requests, request_trace

from kvlab.kvsim import EnginePrefixCache, LRUCache
from stackdist.planning import PrefixCurve
from stackdist.serving import replay_requests

make_trace = request_trace


def served(cache: EnginePrefixCache, requests: list[list]) -> list[int]:
    """Hit prefix of each request, checking the invariants after every access."""
    out = []
    for blocks in requests:
        out.append(cache.access(blocks))
        cache._check()
    return out


# ---------------------------------------------------------------- hand-derived cases

def test_commit_is_tail_first_so_the_head_is_most_recent():
    cache = EnginePrefixCache(4)
    assert cache.access(["a", "ab", "abc", "abcd"]) == 0
    assert cache.keys() == ["abcd", "abc", "ab", "a"]  # oldest first: the tail goes first


def test_the_tail_is_evicted_first_and_the_head_survives():
    cache = EnginePrefixCache(4)
    cache.access(["a", "ab", "abc", "abcd"])
    assert cache.access(["x"]) == 0  # evicts "abcd", the request's tail
    assert cache.keys() == ["abc", "ab", "a", "x"]
    assert cache.access(["a", "ab", "abc", "abcd"]) == 3


def test_per_access_lru_loses_the_head_where_the_engine_keeps_it():
    # 8-block request, 4 one-block fillers, capacity 10 (the planner's example, derived by hand):
    # engine: the fillers evict blocks 7 and 6 (the tail), so the re-read hits blocks 0..5.
    # per-access LRU: the head was accessed first, so it is the oldest: 0 and 1 go, prefix 0.
    long_request, fillers = list(range(8)), [[100 + i] for i in range(4)]
    engine = EnginePrefixCache(10)
    assert served(engine, [long_request, *fillers, long_request])[-1] == 6
    lru = LRUCache(10)
    for blocks in [long_request, *fillers]:
        for block in blocks:
            lru.access(block, 1)
    assert [block in lru for block in long_request] == [False, False] + [True] * 6


def test_lookup_changes_nothing_and_stops_at_the_first_missing_block():
    cache = EnginePrefixCache(3)
    cache.commit(["a", "b", "c"])
    before = cache.keys()
    assert cache.lookup(["z", "a"]) == 0  # "a" is cached but the prefix is broken at "z"
    assert cache.lookup(["a", "b", "z", "c"]) == 2
    assert cache.lookup([]) == 0
    assert cache.keys() == before


def test_a_hit_moves_the_whole_request_to_the_front():
    cache = EnginePrefixCache(4)
    served(cache, [["a", "ab"], ["b", "bc"]])
    assert cache.keys() == ["ab", "a", "bc", "b"]
    assert cache.access(["a", "ab"]) == 2
    assert cache.keys() == ["bc", "b", "ab", "a"]


def test_a_request_longer_than_the_capacity_keeps_its_head():
    cache = EnginePrefixCache(2)
    assert cache.access(["a", "ab", "abc"]) == 0
    cache._check()
    assert cache.keys() == ["ab", "a"]
    assert cache.access(["a", "ab", "abc"]) == 2


def test_capacity_zero_stores_nothing():
    cache = EnginePrefixCache(0)
    assert served(cache, [["a"], ["a"], ["a", "ab"]]) == [0, 0, 0]
    assert len(cache) == 0 and "a" not in cache


def test_empty_request_and_one_key():
    cache = EnginePrefixCache(1)
    assert served(cache, [[], ["k"], ["k"], []]) == [0, 0, 1, 0]
    assert cache.keys() == ["k"]


def test_cyclic_scan_of_whole_requests_thrashes_like_lru():
    # 3 requests of 2 blocks, capacity 4 = 2 requests: a cyclic re-read always misses.
    requests = [[f"d{d}", f"d{d}x"] for d in range(3)]
    assert served(EnginePrefixCache(4), requests * 3) == [0] * 9
    assert served(EnginePrefixCache(6), requests * 2) == [0] * 3 + [2] * 3


def test_generators_are_accepted():
    cache = EnginePrefixCache(3)
    cache.commit(b for b in ["a", "ab"])
    assert cache.access(b for b in ["a", "ab", "abc"]) == 2
    assert cache.keys() == ["abc", "ab", "a"]


@pytest.mark.parametrize(
    ("capacity", "error", "message"),
    [
        (-1, ValueError, "capacity_blocks must be a non-negative int, got -1."),
        (True, TypeError, "capacity_blocks must be a non-negative int, got True of type bool."),
        (2.0, TypeError, "capacity_blocks must be a non-negative int, got 2.0 of type float."),
    ],
)
def test_bad_capacity_is_rejected(capacity, error, message):
    with pytest.raises(error) as caught:
        EnginePrefixCache(capacity)
    assert str(caught.value) == message


# ---------------------------------------------------------------- cross-check with stackdist.serving

def check_against_engine_replay(requests: list[list[int]]) -> None:
    """At every capacity: hit prefixes, and which blocks are cached on arrival, equal the replay's."""
    trace = make_trace(requests)
    replay = replay_requests(trace, "engine")
    curve = PrefixCurve(replay)
    n_distinct = len({b for r in requests for b in r})
    for capacity in range(n_distinct + 2):
        cache = EnginePrefixCache(capacity)
        total = 0
        for r, blocks in enumerate(requests):
            lo, hi = int(trace.offsets[r]), int(trace.offsets[r + 1])
            resident = [block in cache for block in blocks]
            assert resident == (replay.depths[lo:hi] <= capacity).tolist(), (capacity, r)
            prefix = cache.access(blocks)
            cache._check()
            assert prefix == int(np.count_nonzero(replay.effective[lo:hi] <= capacity)), (capacity, r)
            total += prefix
        assert curve.block_hits_at(capacity) == total, capacity


def test_equals_stackdist_engine_semantics_on_random_prefix_chained_traces():
    rng = np.random.default_rng(2024)
    for _ in range(60):
        requests = random_requests(rng, n_requests=int(rng.integers(0, 25)), max_blocks=int(rng.integers(1, 9)),
                                   branching=int(rng.integers(1, 4)))
        check_against_engine_replay(requests)


def test_equals_stackdist_engine_semantics_on_a_document_scan():
    # The lab's passes in miniature: 4 documents of 3 shared blocks + 1 unique block, fwd,fwd,rev.
    order = [0, 1, 2, 3, 0, 1, 2, 3, 3, 2, 1, 0]
    requests = [[10 * d, 10 * d + 1, 10 * d + 2, 1000 + i] for i, d in enumerate(order)]
    check_against_engine_replay(requests)
