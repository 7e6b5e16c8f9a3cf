"""One contract for every cache: each placement policy (through ``TieredCache``, both
organisations, one tier and three) and each reference cache of ``kvlab.kvsim``.

The contract (cachetools-style: one suite, every implementation):

- capacity is respected in every tier after every operation, and ``_check()`` holds after
  every operation on seeded random traces (accesses, and prefetches where the cache has them);
- a hit is reported exactly when the key was cached before the access; hits + misses =
  accesses; a key is cached right after its access (when it fits; recency caches only, as the
  heap policies may evict a cold newcomer); capacity 0 stores nothing;
- the eviction order of each documented policy, on cases derived by hand (below, per class).

A new cache or policy joins by adding an :class:`Impl` to ``IMPLS`` and its hand-derived cases.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import pytest

from kvlab.kvsim import EnginePrefixCache, ExclusiveTierCache, LRUCache, TwoTierCache
from kvlab.placement.hierarchy import TieredCache
from kvlab.placement.policies import POLICIES, EWMANextTouch, PredictedReuse


@dataclass(frozen=True)
class Impl:
    """How the suite drives one cache: ``make(c)`` builds it from a base capacity ``c``."""

    name: str
    make: Callable[[int], Any]
    access: Callable[[Any, Hashable], bool]  # True on a hit
    tiers: Callable[[Any], list[tuple[int, int]]]  # (used, capacity) per tier
    keys: Callable[[Any], set[Hashable]]
    prefetch: Callable[[Any, Hashable], object] | None = None
    #: A just-accessed key is cached when it fits (recency). The heap policies may evict the
    #: newcomer itself: a cold block is their first victim (documented in ``policies``).
    keeps_newcomer: bool = True


def _tiered(policy: str, organisation: str, ratios: tuple[int, ...]) -> Impl:
    return Impl(
        name=f"TieredCache-{policy}-{organisation}-{len(ratios)}tier",
        make=lambda c: TieredCache([r * c for r in ratios], policy, organisation),
        access=lambda cache, key: cache.access(key) >= 0,
        tiers=lambda cache: [(len(tier), cap) for tier, cap in zip(cache.contents(), cache.capacities)],
        keys=lambda cache: {key for tier in cache.contents() for key in tier},
        prefetch=lambda cache, key: cache.prefetch(key),
        keeps_newcomer=policy == "lru",
    )


IMPLS = [_tiered(p, o, r) for p in POLICIES for o in ("exclusive", "inclusive") for r in ((1,), (1, 2, 3))] + [
    Impl("LRUCache", LRUCache, lambda cache, key: cache.access(key, 1),
         lambda cache: [(cache.used, cache.capacity)], lambda cache: set(cache.keys())),
    Impl("LRUCache-sized", lambda c: LRUCache(3 * c), lambda cache, key: cache.access(key, 1 + hash(key) % 3),
         lambda cache: [(cache.used, cache.capacity)], lambda cache: set(cache.keys())),
    Impl("TwoTierCache", lambda c: TwoTierCache(c, 2 * c), lambda cache, key: cache.access(key, 1) != "miss",
         lambda cache: [(cache.gpu.used, cache.gpu.capacity), (cache.cpu.used, cache.cpu.capacity)],
         lambda cache: set(cache.gpu.keys()) | set(cache.cpu.keys())),
    Impl("ExclusiveTierCache", lambda c: ExclusiveTierCache([c, c, 2 * c]), lambda cache, key: cache.access(key, 1) >= 0,
         lambda cache: [(t.used, t.capacity) for t in cache.tiers], lambda cache: {k for t in cache.tiers for k in t.keys()}),  # noqa: SIM118 - a tier, not a dict
    Impl("EnginePrefixCache", EnginePrefixCache, lambda cache, key: cache.access([key]) == 1,
         lambda cache: [(len(cache), cache.capacity)], lambda cache: set(cache.keys())),
]
BY_NAME = {impl.name: impl for impl in IMPLS}


def _trace(seed: int, n: int = 250, keys: int = 14) -> list[int]:
    """Seeded skewed keys: low ids recur often, so every cache both hits and evicts."""
    rng = random.Random(seed)
    return [min(int(rng.expovariate(0.25)), keys - 1) for _ in range(n)]


def _within_capacity(impl: Impl, cache: Any) -> None:
    for k, (used, cap) in enumerate(impl.tiers(cache)):
        assert 0 <= used <= cap, (impl.name, k, used, cap)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
@pytest.mark.parametrize("capacity", [0, 1, 3, 6])
def test_random_traces_keep_the_invariants_and_count_hits_exactly(impl: Impl, capacity: int) -> None:
    for seed in range(2):
        cache = impl.make(capacity)
        rng = random.Random(100 + seed)
        hits = misses = 0
        for key in _trace(seed):
            if impl.prefetch is not None and rng.random() < 0.15:
                impl.prefetch(cache, key)  # not a demand access: moves a block up, counts nothing
            else:
                before = key in impl.keys(cache)
                hit = impl.access(cache, key)
                assert hit == before, (impl.name, key)
                hits, misses = hits + hit, misses + (not hit)
                if capacity >= 3 and impl.keeps_newcomer:  # every key fits every tier this large
                    assert key in impl.keys(cache), (impl.name, key)
            cache._check()
            _within_capacity(impl, cache)
        assert hits + misses > 0
        if capacity == 0:
            assert hits == 0 and not impl.keys(cache)
        elif capacity >= 3:
            assert hits > 0 and misses > 0


def test_ewma_with_alpha_one_is_predicted_reuse() -> None:
    """Documented in ``EWMANextTouch``: alpha=1 is exactly ``PredictedReuse``."""
    for organisation in ("exclusive", "inclusive"):
        a = TieredCache([3, 5], EWMANextTouch(alpha=1.0), organisation)
        b = TieredCache([3, 5], PredictedReuse(), organisation)
        for key in _trace(7, n=400):
            assert a.access(key) == b.access(key)
            assert a.contents() == b.contents()


# ---------------------------------------------------------------- eviction order, derived by hand

# One tier of 2 blocks, keys accessed at clock 1, 2, ...
# "aabc": LRU keeps the two most recent (b, c). LFU keys (count, last): a (2,2), b (1,3),
#   c (1,4) -> b goes; victim order c, a. Predicted reuse: a has gap 1 (key (1,-3,2)), b and c
#   are cold ((0,0,3), (0,0,4)) -> the colder b goes; victim order c, a. EWMA: first gap = gap.
# "aabbcc": at c (clock 5) both heap policies drop the cold newcomer c. At its return (6):
#   LFU a (2,2), b (2,4), c (2,6) -> a goes, order b, c; predicted a (1,-3,2), b (1,-5,4),
#   c (1,-7,6) -> c (farthest predicted next use, 7) goes, order b, a. LRU: a then b, c.
ONE_TIER_CASES = {
    "aabc": {"lru": (["b", "c"], [-1, 0, -1, -1]), "lfu": (["c", "a"], [-1, 0, -1, -1]),
             "predicted": (["c", "a"], [-1, 0, -1, -1]), "ewma": (["c", "a"], [-1, 0, -1, -1])},
    "aabbcc": {"lru": (["b", "c"], [-1, 0, -1, 0, -1, 0]), "lfu": (["b", "c"], [-1, 0, -1, 0, -1, -1]),
               "predicted": (["b", "a"], [-1, 0, -1, 0, -1, -1]), "ewma": (["b", "a"], [-1, 0, -1, 0, -1, -1])},
}


@pytest.mark.parametrize("organisation", ["exclusive", "inclusive"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("case", sorted(ONE_TIER_CASES))
def test_policy_eviction_order_by_hand(case: str, policy: str, organisation: str) -> None:
    contents, returned = ONE_TIER_CASES[case][policy]
    cache = TieredCache([2], policy, organisation)
    assert [cache.access(key) for key in case] == returned
    assert cache.contents() == [contents]
    cache._check()


def test_exclusive_tiers_demote_the_victim_one_tier_down_by_hand() -> None:
    # LRU [1, 1, 1]: a, b, c fill HBM top down as each newcomer pushes the last one down; a hit
    # in the SSD (a) promotes it and pushes every tier's block one down: c to DRAM, b dropped.
    cache = TieredCache([1, 1, 1], "lru", "exclusive")
    assert [cache.access(k) for k in "abca"] == [-1, -1, -1, 2]
    assert cache.contents() == [["a"], ["c"], ["b"]]
    assert cache.access("d") == -1 and cache.contents() == [["d"], ["a"], ["c"]] and cache.dropped == 1


def test_lru_cache_by_hand() -> None:
    cache = LRUCache(3)
    assert [cache.access(k, 1) for k in "abcad"] == [False, False, False, True, False]  # d evicts b
    assert cache.keys() == ["c", "a", "d"]
    sized = LRUCache(5)
    assert [sized.access(k, s) for k, s in (("a", 2), ("b", 2), ("c", 3))] == [False, False, False]
    assert sized.keys() == ["b", "c"] and sized.used == 5  # c (3) needs a's 2 units
    assert sized.access("big", 6) is False and sized.keys() == ["b", "c"]  # oversized: stored nowhere


def test_two_tier_cache_by_hand() -> None:
    cache = TwoTierCache(gpu_capacity=2, cpu_capacity=3)
    assert [cache.access(k, 1) for k in "abc"] == ["miss"] * 3
    assert cache.gpu.keys() == ["b", "c"] and cache.cpu.keys() == ["a", "b", "c"]
    assert cache.access("a", 1) == "cpu"  # loaded into the GPU, evicting b there; a most recent in the CPU
    assert cache.gpu.keys() == ["c", "a"] and cache.cpu.keys() == ["b", "c", "a"]
    assert cache.access("a", 1) == "gpu" and cache.cpu.keys() == ["b", "c", "a"]  # a GPU hit leaves the CPU alone


def test_exclusive_tier_cache_by_hand() -> None:
    cache = ExclusiveTierCache([2, 2])
    assert [cache.access(k, 1) for k in "abc"] == [-1, -1, -1]
    assert [t.keys() for t in cache.tiers] == [["b", "c"], ["a"]]
    assert cache.access("a", 1) == 1  # promoted; b demoted
    assert [t.keys() for t in cache.tiers] == [["c", "a"], ["b"]]
    cache.access("d", 1)
    cache.access("e", 1)  # c then a demoted; the DRAM tier drops its oldest, b
    assert [t.keys() for t in cache.tiers] == [["d", "e"], ["c", "a"]]


def test_engine_prefix_cache_by_hand() -> None:
    cache = EnginePrefixCache(3)
    assert cache.access(["a", "ab", "abc"]) == 0
    assert cache.keys() == ["abc", "ab", "a"]  # committed tail first: the tail is the oldest
    assert cache.access(["d"]) == 0 and cache.keys() == ["ab", "a", "d"]  # evicts the tail abc
    assert cache.access(["a", "ab", "abc"]) == 2  # the prefix a, ab; abc is recomputed
    assert cache.keys() == ["abc", "ab", "a"]
