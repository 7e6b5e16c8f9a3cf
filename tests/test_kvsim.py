"""Tests for kvlab.kvsim: hand-derived examples, a shared LRU contract, and seeded
cross-checks against naive list-based references written here from the rules."""

from __future__ import annotations

import doctest
import random
from collections.abc import Callable, Hashable

import pytest

from kvlab import kvsim
from kvlab.kvsim import MISS, ExclusiveTierCache, LRUCache, TwoTierCache

# --------------------------------------------------------------------------------------
# Naive references: Python lists, O(n) per operation, written straight from the rules.
# --------------------------------------------------------------------------------------


class NaiveLRU:
    """List-based size-aware LRU; ``entries`` is [(key, size)] from the oldest to the newest."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: list[tuple[Hashable, int]] = []

    def used(self) -> int:
        return sum(size for _, size in self.entries)

    def find(self, key: Hashable) -> int:
        for index, (stored_key, _) in enumerate(self.entries):
            if stored_key == key:
                return index
        return -1

    def access(self, key: Hashable, size: int) -> bool:
        index = self.find(key)
        if index >= 0:
            self.entries.append(self.entries.pop(index))
            return True
        if size > self.capacity:
            return False
        while self.used() + size > self.capacity:
            self.entries.pop(0)
        self.entries.append((key, size))
        return False


class NaiveTwoTier:
    """Two naive LRU lists with the GPU/CPU rules."""

    def __init__(self, gpu_capacity: int, cpu_capacity: int) -> None:
        self.gpu = NaiveLRU(gpu_capacity)
        self.cpu = NaiveLRU(cpu_capacity)

    def access(self, key: Hashable, size: int) -> str:
        if self.gpu.find(key) >= 0:
            self.gpu.access(key, size)
            return "gpu"
        cpu_index = self.cpu.find(key)
        if cpu_index >= 0:
            stored_size = self.cpu.entries[cpu_index][1]
            self.cpu.access(key, size)
            self.gpu.access(key, stored_size)
            return "cpu"
        self.gpu.access(key, size)
        self.cpu.access(key, size)
        return "miss"


class NaiveExclusive:
    """Exclusive tiers as lists. Insertions and demotions run from an explicit LIFO work
    stack (the code under test recurses): an evicted entry is demoted completely, with
    the cascade it triggers, before the next evicted entry (depth-first order)."""

    def __init__(self, capacities: list[int]) -> None:
        self.capacities = list(capacities)
        self.tiers: list[list[tuple[Hashable, int]]] = [[] for _ in capacities]

    def access(self, key: Hashable, size: int) -> int:
        for tier_index, entries in enumerate(self.tiers):
            for position, (stored_key, stored_size) in enumerate(entries):
                if stored_key == key:
                    entries.pop(position)
                    if tier_index == 0:
                        entries.append((key, stored_size))
                    else:
                        self.insert_all(key, stored_size)
                    return tier_index
        self.insert_all(key, size)
        return -1

    def insert_all(self, key: Hashable, size: int) -> None:
        stack = [(0, key, size)]
        while stack:
            level, item_key, item_size = stack.pop()
            for tier_index in range(level, len(self.tiers)):
                if item_size <= self.capacities[tier_index]:
                    entries = self.tiers[tier_index]
                    evicted = []
                    while sum(s for _, s in entries) + item_size > self.capacities[tier_index]:
                        evicted.append(entries.pop(0))
                    entries.append((item_key, item_size))
                    # Reversed so that the oldest evicted entry is popped (demoted) first.
                    stack.extend((tier_index + 1, k, s) for k, s in reversed(evicted))
                    break


# --------------------------------------------------------------------------------------
# LRUCache: hand-derived examples and validation
# --------------------------------------------------------------------------------------


def test_lru_hand_example_hit_makes_entry_most_recent() -> None:
    # capacity 3, unit sizes: a b c fill it; the hit on a makes b the oldest; d evicts b.
    cache = LRUCache(3)
    assert [cache.access(k, 1) for k in "abc"] == [False, False, False]
    assert cache.access("a", 1) is True
    assert cache.keys() == ["b", "c", "a"]
    assert cache.access("d", 1) is False
    assert cache.keys() == ["c", "a", "d"]
    assert "b" not in cache and "a" in cache
    assert cache.used == 3


def test_lru_is_not_fifo() -> None:
    # A FIFO mutant (no move-to-end on hit) would evict a here and then miss on a.
    cache = LRUCache(2)
    cache.access("a", 1)
    cache.access("b", 1)
    cache.access("a", 1)
    cache.access("c", 1)
    assert cache.keys() == ["a", "c"]
    assert cache.access("a", 1) is True


def test_lru_evicts_several_oldest_until_room() -> None:
    cache = LRUCache(10)
    for key, size in [("a", 3), ("b", 3), ("c", 3)]:
        cache.access(key, size)
    assert cache.access("d", 7) is False  # needs 7: evicts a (room 4) and b (room 7), keeps c
    assert cache.items() == [("c", 3), ("d", 7)]
    assert cache.used == 10


def test_lru_oversized_entry_is_not_stored_and_evicts_nothing() -> None:
    # A mutant that evicts before checking the size would empty the cache here.
    cache = LRUCache(10)
    cache.access("a", 4)
    cache.access("b", 6)
    assert cache.access("huge", 11) is False
    assert cache.keys() == ["a", "b"]
    assert cache.used == 10
    assert "huge" not in cache
    assert cache.access("huge", 11) is False  # still a miss next time
    assert cache.access("exact", 10) is False  # size == capacity fits (after evicting all)
    assert cache.keys() == ["exact"]


def test_lru_hit_keeps_stored_size() -> None:
    cache = LRUCache(10)
    cache.access("a", 3)
    assert cache.access("a", 9) is True
    assert cache.items() == [("a", 3)]
    assert cache.used == 3


def test_lru_capacity_zero_stores_nothing() -> None:
    cache = LRUCache(0)
    assert [cache.access("a", 1), cache.access("a", 1)] == [False, False]
    assert cache.keys() == [] and cache.used == 0 and len(cache) == 0


def test_lru_contains_does_not_reorder() -> None:
    cache = LRUCache(2)
    cache.access("a", 1)
    cache.access("b", 1)
    assert "a" in cache
    cache.access("c", 1)  # a is still the oldest, so it is evicted
    assert cache.keys() == ["b", "c"]


def test_lru_used_is_a_plain_attribute() -> None:
    cache = LRUCache(5)
    cache.access("a", 2)
    assert "used" in vars(cache) and cache.used == 2


@pytest.mark.parametrize(
    ("capacity", "error", "message"),
    [
        (-1, ValueError, "capacity must be a non-negative int, got -1."),
        (True, TypeError, "capacity must be a non-negative int, got True of type bool."),
        (2.0, TypeError, "capacity must be a non-negative int, got 2.0 of type float."),
        ("4", TypeError, "capacity must be a non-negative int, got '4' of type str."),
        (None, TypeError, "capacity must be a non-negative int, got None of type NoneType."),
    ],
)
def test_lru_rejects_bad_capacity(capacity: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        LRUCache(capacity)  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("size", "error", "message"),
    [
        (0, ValueError, "size must be a positive int, got 0."),
        (-3, ValueError, "size must be a positive int, got -3."),
        (False, TypeError, "size must be a positive int, got False of type bool."),
        (1.5, TypeError, "size must be a positive int, got 1.5 of type float."),
    ],
)
def test_lru_rejects_bad_size_and_stays_unchanged(size: object, error: type[Exception], message: str) -> None:
    cache = LRUCache(5)
    cache.access("a", 2)
    with pytest.raises(error) as info:
        cache.access("a", size)  # type: ignore[arg-type]
    assert str(info.value) == message
    with pytest.raises(error):
        cache.access("new", size)  # type: ignore[arg-type]
    assert cache.items() == [("a", 2)] and cache.used == 2


def test_lru_check_detects_corruption() -> None:
    cache = LRUCache(5)
    cache.access("a", 2)
    cache._check()
    cache.used = 3
    with pytest.raises(AssertionError):
        cache._check()
    cache.used = 2
    cache._entries["b"] = 9  # larger than the capacity
    cache.used = 11
    with pytest.raises(AssertionError):
        cache._check()


# --------------------------------------------------------------------------------------
# Shared contract: LRUCache, TwoTierCache(cpu=0) and ExclusiveTierCache([c, 0]) are the
# same one-tier LRU.
# --------------------------------------------------------------------------------------


class TwoTierAsLRU:
    """TwoTierCache(c, 0) seen through the LRUCache interface."""

    def __init__(self, capacity: int) -> None:
        self.inner = TwoTierCache(capacity, 0)

    def access(self, key: Hashable, size: int) -> bool:
        result = self.inner.access(key, size)
        assert result in ("gpu", "miss")  # a CPU tier of capacity 0 never hits
        return result == "gpu"

    @property
    def used(self) -> int:
        return self.inner.gpu.used + self.inner.cpu.used

    def keys(self) -> list[Hashable]:
        assert self.inner.cpu.keys() == []
        return self.inner.gpu.keys()

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def _check(self) -> None:
        self.inner._check()


class ExclusiveAsLRU:
    """ExclusiveTierCache([c, 0, ...]) seen through the LRUCache interface."""

    def __init__(self, capacity: int, lower_tiers: int = 1) -> None:
        self.inner = ExclusiveTierCache([capacity] + [0] * lower_tiers)

    def access(self, key: Hashable, size: int) -> bool:
        result = self.inner.access(key, size)
        assert result in (0, MISS)
        return result == 0

    @property
    def used(self) -> int:
        return self.inner.used

    def keys(self) -> list[Hashable]:
        assert all(tier.keys() == [] for tier in self.inner.tiers[1:])
        return self.inner.tiers[0].keys()

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def _check(self) -> None:
        self.inner._check()


LRU_LIKE_FACTORIES: dict[str, Callable[[int], object]] = {
    "LRUCache": LRUCache,
    "TwoTierCache(c, 0)": TwoTierAsLRU,
    "ExclusiveTierCache([c, 0])": ExclusiveAsLRU,
    "ExclusiveTierCache([c, 0, 0])": lambda capacity: ExclusiveAsLRU(capacity, lower_tiers=2),
}


@pytest.fixture(params=list(LRU_LIKE_FACTORIES), name="make_lru")
def fixture_make_lru(request: pytest.FixtureRequest) -> Callable[[int], object]:
    return LRU_LIKE_FACTORIES[request.param]


class TestLRUContract:
    """Every LRU-like cache must pass these (hand-derived) cases."""

    def test_hit_and_miss(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(4)
        assert cache.access("a", 2) is False
        assert cache.access("a", 2) is True
        assert cache.access("b", 2) is False
        assert cache.access("a", 2) is True and cache.access("b", 2) is True
        cache._check()

    def test_used_accounting_and_eviction(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(10)
        cache.access("a", 3)
        cache.access("b", 4)
        assert cache.used == 7
        cache.access("c", 5)  # evicts a (3): 4 + 5 = 9
        assert cache.used == 9 and cache.keys() == ["b", "c"]
        cache._check()

    def test_hit_moves_to_most_recent_not_fifo(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(2)
        for key in "aba":
            cache.access(key, 1)
        cache.access("c", 1)
        assert cache.keys() == ["a", "c"]
        assert "b" not in cache

    def test_oversized_entry_keeps_cache(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(5)
        cache.access("a", 2)
        cache.access("b", 3)
        assert cache.access("big", 6) is False
        assert cache.keys() == ["a", "b"] and cache.used == 5 and "big" not in cache
        cache._check()

    def test_capacity_zero(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(0)
        assert [cache.access(k, 1) for k in "aab"] == [False, False, False]
        assert cache.keys() == [] and cache.used == 0
        cache._check()

    def test_keys_oldest_to_newest(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(3)
        for key in "abcb":
            cache.access(key, 1)
        assert cache.keys() == ["a", "c", "b"]

    def test_contains_does_not_reorder(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(2)
        cache.access("a", 1)
        cache.access("b", 1)
        assert "a" in cache and "z" not in cache
        cache.access("c", 1)
        assert cache.keys() == ["b", "c"]

    def test_hit_keeps_stored_size(self, make_lru: Callable[[int], LRUCache]) -> None:
        cache = make_lru(10)
        cache.access("a", 3)
        assert cache.access("a", 8) is True
        assert cache.used == 3

    def test_random_traces_match_naive_lru(self, make_lru: Callable[[int], LRUCache]) -> None:
        rng = random.Random(20251130)
        for _ in range(60):
            capacity = rng.randint(0, 14)
            cache, naive = make_lru(capacity), NaiveLRU(capacity)
            for _ in range(60):
                key, size = rng.randint(0, 7), rng.randint(1, capacity + 3)
                assert cache.access(key, size) is naive.access(key, size)
                cache._check()
                assert cache.keys() == [k for k, _ in naive.entries]
                assert cache.used == naive.used()


# --------------------------------------------------------------------------------------
# Seeded cross-checks: LRUCache against the naive list LRU
# --------------------------------------------------------------------------------------


def random_trace(rng: random.Random, length: int, universe: int, size_mode: str, max_size: int) -> list[tuple[int, int]]:
    """Return [(key, size)]: equal sizes, fixed per-key sizes, or a fresh size on every access."""
    key_sizes = {key: rng.randint(1, max_size) for key in range(universe)}
    trace = []
    for _ in range(length):
        key = rng.randrange(universe)
        if size_mode == "equal":
            size = max_size
        elif size_mode == "per_key":
            size = key_sizes[key]
        else:
            size = rng.randint(1, max_size)
        trace.append((key, size))
    return trace


@pytest.mark.parametrize("size_mode", ["equal", "per_key", "per_access"])
def test_lru_matches_naive_on_random_traces(size_mode: str) -> None:
    rng = random.Random(f"lru-{size_mode}")
    for trial in range(150):
        universe = rng.randint(1, 12)
        max_size = rng.randint(1, 6)
        total = universe * max_size
        capacity = rng.randint(0, total + 3)  # 0 .. past the total footprint
        trace = random_trace(rng, rng.randint(0, 120), universe, size_mode, max_size)
        cache, naive = LRUCache(capacity), NaiveLRU(capacity)
        for step, (key, size) in enumerate(trace):
            assert cache.access(key, size) is naive.access(key, size), (trial, step)
            cache._check()
            assert cache.items() == naive.entries, (trial, step)
            assert cache.used == naive.used()


def test_lru_cyclic_scan_thrashes_below_footprint_and_hits_at_it() -> None:
    # A cyclic scan of n equal entries under LRU: all misses if fewer than n fit, all hits otherwise.
    for n in range(1, 8):
        for capacity in range(3 * n + 2):
            cache = LRUCache(capacity)
            for key in range(n):
                cache.access(key, 3)
            second = [cache.access(key, 3) for key in range(n)]
            assert second == [capacity >= 3 * n] * n, (n, capacity)


# --------------------------------------------------------------------------------------
# TwoTierCache
# --------------------------------------------------------------------------------------


def test_two_tier_hand_example() -> None:
    cache = TwoTierCache(gpu_capacity=2, cpu_capacity=3)
    trace = ["a", "b", "c", "a", "c", "d", "b", "a"]
    results = [cache.access(key, 1) for key in trace]
    # a,b,c miss: G [b,c], C [a,b,c]. a: CPU hit -> C [b,c,a], G [c,a].
    # c: GPU hit -> G [a,c], CPU untouched. d: miss -> G [c,d], C [c,a,d] (b evicted).
    # b: miss -> G [d,b], C [a,d,b]. a: CPU hit -> C [d,b,a], G [b,a].
    assert results == ["miss", "miss", "miss", "cpu", "gpu", "miss", "miss", "cpu"]
    assert cache.gpu.keys() == ["b", "a"]
    assert cache.cpu.keys() == ["d", "b", "a"]
    cache._check()


def test_two_tier_gpu_hit_does_not_touch_cpu() -> None:
    # A mutant that refreshes the CPU copy on a GPU hit would evict a (not c) from the CPU.
    cache = TwoTierCache(gpu_capacity=1, cpu_capacity=2)
    for key in "ab":
        cache.access(key, 1)  # G [b], C [a, b]
    assert cache.access("b", 1) == "gpu"
    assert cache.cpu.keys() == ["a", "b"]
    assert cache.access("a", 1) == "cpu"  # C [b, a], G [a]
    assert cache.access("c", 1) == "miss"  # C evicts b
    assert cache.cpu.keys() == ["a", "c"] and cache.gpu.keys() == ["c"]


def test_two_tier_cpu_hit_loads_stored_size_into_gpu() -> None:
    cache = TwoTierCache(gpu_capacity=5, cpu_capacity=10)
    cache.access("a", 3)
    cache.access("b", 3)  # G evicts a: G [b], C [a, b]
    assert cache.access("a", 1) == "cpu"  # loads a with its stored size 3, evicting b
    assert cache.gpu.items() == [("a", 3)]
    assert cache.cpu.items() == [("b", 3), ("a", 3)]


def test_two_tier_cpu_hit_too_big_for_gpu_keeps_gpu() -> None:
    cache = TwoTierCache(gpu_capacity=2, cpu_capacity=10)
    cache.access("a", 1)
    assert cache.access("big", 5) == "miss"  # stored in the CPU only
    assert cache.gpu.keys() == ["a"] and cache.cpu.keys() == ["a", "big"]
    assert cache.access("big", 5) == "cpu"
    assert cache.gpu.keys() == ["a"] and cache.cpu.keys() == ["a", "big"]


def test_two_tier_offload_scenario_by_hand() -> None:
    # 10 docs of 5011 tokens, GPU 21520 (4 docs), CPU 56000 (11 docs): fwd, fwd, rev.
    cache = TwoTierCache(21520, 56000)
    assert [cache.access(d, 5011) for d in range(10)] == ["miss"] * 10
    assert [cache.access(d, 5011) for d in range(10)] == ["cpu"] * 10
    assert [cache.access(d, 5011) for d in reversed(range(10))] == ["gpu"] * 4 + ["cpu"] * 6


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((-1, 5), ValueError, "gpu_capacity must be a non-negative int, got -1."),
        ((5, -2), ValueError, "cpu_capacity must be a non-negative int, got -2."),
        ((5, 1.0), TypeError, "cpu_capacity must be a non-negative int, got 1.0 of type float."),
        ((True, 5), TypeError, "gpu_capacity must be a non-negative int, got True of type bool."),
    ],
)
def test_two_tier_rejects_bad_capacity(args: tuple[object, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        TwoTierCache(*args)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_two_tier_rejects_bad_size() -> None:
    cache = TwoTierCache(4, 4)
    with pytest.raises(ValueError, match="size must be a positive int, got 0."):
        cache.access("a", 0)
    assert "a" not in cache


@pytest.mark.parametrize("size_mode", ["equal", "per_key", "per_access"])
def test_two_tier_matches_naive_on_random_traces(size_mode: str) -> None:
    rng = random.Random(f"two-tier-{size_mode}")
    for trial in range(150):
        universe = rng.randint(1, 12)
        max_size = rng.randint(1, 5)
        total = universe * max_size
        gpu_capacity = rng.randint(0, total + 2)
        cpu_capacity = rng.choice([0, rng.randint(0, total + 2)])
        trace = random_trace(rng, rng.randint(0, 120), universe, size_mode, max_size)
        cache, naive = TwoTierCache(gpu_capacity, cpu_capacity), NaiveTwoTier(gpu_capacity, cpu_capacity)
        for step, (key, size) in enumerate(trace):
            assert cache.access(key, size) == naive.access(key, size), (trial, step)
            cache._check()
            assert cache.gpu.items() == naive.gpu.entries, (trial, step)
            assert cache.cpu.items() == naive.cpu.entries, (trial, step)


def test_two_tier_with_cpu_zero_equals_lru() -> None:
    rng = random.Random(7)
    for _ in range(100):
        capacity = rng.randint(0, 20)
        trace = random_trace(rng, 80, rng.randint(1, 10), "per_access", 6)
        two_tier, lru = TwoTierCache(capacity, 0), LRUCache(capacity)
        for key, size in trace:
            assert (two_tier.access(key, size) == "gpu") is lru.access(key, size)
            assert two_tier.gpu.items() == lru.items() and two_tier.cpu.used == 0


# --------------------------------------------------------------------------------------
# ExclusiveTierCache
# --------------------------------------------------------------------------------------


def test_exclusive_hand_example_cascading_demotion() -> None:
    # Three tiers of 2 unit slots; derived by hand step by step:
    #   a b: T0 [a b]           c: T0 [b c] T1 [a]        d: T0 [c d] T1 [a b]
    #   e: T0 [d e] T1 [b c] T2 [a]     f: T0 [e f] T1 [c d] T2 [a b]
    #   g: T0 [f g] T1 [d e] T2 [b c]   (a dropped from the last tier)
    #   b (tier 2 hit): T2 [c]; b into T0 evicts f -> T1 evicts d -> T2 [c d]; T1 [e f]; T0 [g b]
    #   a (miss): T0 evicts g -> T1 evicts e -> T2 evicts c (dropped): T0 [b a] T1 [f g] T2 [d e]
    #   f (tier 1 hit): T1 [g]; f into T0 evicts b -> T1 [g b]; T0 [a f]
    #   a (tier 0 hit): T0 [f a]
    cache = ExclusiveTierCache([2, 2, 2])
    results = [cache.access(key, 1) for key in "abcdefgbafa"]
    assert results == [-1] * 7 + [2, -1, 1, 0]
    assert [tier.keys() for tier in cache.tiers] == [["f", "a"], ["g", "b"], ["d", "e"]]
    cache._check()


def test_exclusive_hand_example_states_after_each_step() -> None:
    cache = ExclusiveTierCache([2, 2, 2])
    expected_states = {
        "c": [["b", "c"], ["a"], []],
        "e": [["d", "e"], ["b", "c"], ["a"]],
        "g": [["f", "g"], ["d", "e"], ["b", "c"]],
    }
    for key in "abcdefg":
        cache.access(key, 1)
        if key in expected_states:
            assert [tier.keys() for tier in cache.tiers] == expected_states[key]


def test_exclusive_multiple_evictions_are_demoted_in_eviction_order() -> None:
    cache = ExclusiveTierCache([4, 4])
    for key, size in [("a", 1), ("b", 1), ("c", 2)]:
        cache.access(key, size)
    assert cache.access("d", 4) == MISS  # evicts a, b, c from T0; demoted in that order
    assert [tier.items() for tier in cache.tiers] == [[("d", 4)], [("a", 1), ("b", 1), ("c", 2)]]
    assert cache.access("e", 3) == MISS  # T0 evicts d; d needs all of T1: a, b, c dropped
    assert [tier.items() for tier in cache.tiers] == [[("e", 3)], [("d", 4)]]
    cache._check()


def test_exclusive_pass_down_and_drop_rules() -> None:
    cache = ExclusiveTierCache([3, 5])
    assert cache.access("x", 4) == MISS  # too big for T0 (3): passes to T1, evicts nothing in T0
    assert cache.access("y", 2) == MISS
    assert [tier.items() for tier in cache.tiers] == [[("y", 2)], [("x", 4)]]
    assert cache.access("z", 2) == MISS  # T0 evicts y -> T1 evicts x (dropped)
    assert [tier.items() for tier in cache.tiers] == [[("z", 2)], [("y", 2)]]
    assert cache.access("w", 6) == MISS  # fits no tier: dropped, nothing evicted anywhere
    assert [tier.items() for tier in cache.tiers] == [[("z", 2)], [("y", 2)]]
    assert cache.access("x", 4) == MISS  # into T1: y dropped
    assert cache.access("x", 1) == 1  # hit in T1; promotion passes it down again (4 > 3)
    assert [tier.items() for tier in cache.tiers] == [[("z", 2)], [("x", 4)]]
    cache._check()


def test_exclusive_demoted_entry_too_big_for_next_tier_skips_it() -> None:
    cache = ExclusiveTierCache([4, 2, 8])
    cache.access("p", 1)  # T0 [p]
    cache.access("a", 3)  # T0 [p a]
    cache.access("b", 1)  # T0 evicts p -> T1 [p]; T0 [a b]
    assert cache.access("c", 3) == MISS  # T0 evicts a (3) -> skips T1 (2) -> T2 [a]; T0 [b c]
    assert [tier.keys() for tier in cache.tiers] == [["b", "c"], ["p"], ["a"]]
    # a promoted: T0 must evict b (1) and c (3); b -> T1 [p b]; c skips T1 -> T2 [c]
    assert cache.access("a", 3) == 2
    assert [tier.keys() for tier in cache.tiers] == [["a"], ["p", "b"], ["c"]]
    cache._check()


def test_exclusive_demotion_cascades_depth_first() -> None:
    # Each evicted entry is demoted completely (with its own cascade) before the next one.
    cache = ExclusiveTierCache([3, 1, 5])
    cache.access("f", 1)
    cache.access("e1", 1)
    cache.access("e2", 2)  # T0 evicts f -> T1 [f]; T0 [e1 e2]
    assert cache.access("n", 3) == MISS
    # T0 evicts e1 then e2. e1 -> T1 evicts f -> T2 [f]; then e2 (2 > 1) skips T1 -> T2 [f e2].
    # (Breadth-first order would give T2 [e2 f].)
    assert [tier.keys() for tier in cache.tiers] == [["n"], ["e1"], ["f", "e2"]]
    cache._check()


def test_exclusive_hit_keeps_stored_size_and_tier_of() -> None:
    cache = ExclusiveTierCache([2, 4])
    cache.access("a", 2)
    cache.access("b", 2)  # a demoted
    assert cache.tier_of("a") == 1 and cache.tier_of("b") == 0 and cache.tier_of("zz") == MISS
    assert cache.access("a", 1) == 1  # promoted with its stored size 2, b demoted
    assert [tier.items() for tier in cache.tiers] == [[("a", 2)], [("b", 2)]]
    assert cache.used == 4 and "b" in cache and "zz" not in cache
    assert [tier.keys() for tier in cache.tiers] == [["a"], ["b"]]  # tier_of / in did not reorder


@pytest.mark.parametrize(
    ("capacities", "error", "message"),
    [
        ([5], ValueError, "capacities must hold 2 or more tiers, got 1."),
        ([], ValueError, "capacities must hold 2 or more tiers, got 0."),
        (5, TypeError, "capacities must be a sequence of 2 or more non-negative ints, got 5."),
        ("12", TypeError, "capacities must be a sequence of 2 or more non-negative ints, got '12'."),
        ([4, -1], ValueError, "capacities[1] must be a non-negative int, got -1."),
        ([4.0, 1], TypeError, "capacities[0] must be a non-negative int, got 4.0 of type float."),
    ],
)
def test_exclusive_rejects_bad_capacities(capacities: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        ExclusiveTierCache(capacities)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_exclusive_check_detects_duplicate_key() -> None:
    cache = ExclusiveTierCache([2, 2])
    cache.access("a", 1)
    cache._check()
    cache.tiers[1]._store("a", 1)
    with pytest.raises(AssertionError):
        cache._check()


@pytest.mark.parametrize("size_mode", ["equal", "per_key", "per_access"])
def test_exclusive_matches_naive_on_random_traces(size_mode: str) -> None:
    rng = random.Random(f"exclusive-{size_mode}")
    for trial in range(150):
        universe = rng.randint(1, 14)
        max_size = rng.randint(1, 5)
        total = universe * max_size
        capacities = [rng.randint(0, total // 2 + 2) for _ in range(rng.randint(2, 4))]
        trace = random_trace(rng, rng.randint(0, 120), universe, size_mode, max_size)
        cache, naive = ExclusiveTierCache(capacities), NaiveExclusive(capacities)
        for step, (key, size) in enumerate(trace):
            assert cache.access(key, size) == naive.access(key, size), (trial, step, capacities)
            cache._check()
            assert [tier.items() for tier in cache.tiers] == naive.tiers, (trial, step, capacities)


def test_exclusive_total_footprint_fits_then_everything_hits() -> None:
    # With room for all keys across the tiers, the second pass of a scan never misses.
    for capacities in ([2, 2], [1, 1, 3], [3, 9]):
        cache = ExclusiveTierCache(capacities)
        keys = range(sum(capacities))
        assert [cache.access(k, 1) for k in keys] == [MISS] * len(keys)
        assert MISS not in [cache.access(k, 1) for k in keys]


def test_kvsim_doctests_pass() -> None:
    result = doctest.testmod(kvsim, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_numpy_integers_are_accepted_as_sizes_and_capacities() -> None:
    import numpy as np

    cache = LRUCache(np.int64(10))
    assert cache.access("a", np.int64(4)) is False and cache.access("a", np.int32(4)) is True
    assert cache.used == 4 and type(cache.used) is int
    two = TwoTierCache(np.int64(4), np.uint16(8))
    assert [two.access(k, np.int64(4)) for k in ("a", "b", "a")] == ["miss", "miss", "cpu"]
    with pytest.raises(TypeError, match="size must be a positive int"):
        cache.access("b", np.bool_(True))
    with pytest.raises(TypeError, match="size must be a positive int"):
        cache.access("b", 4.0)
