"""Exact agreement of kvlab.placement's tiered cache with the stack-distance bands and kvlab.kvsim."""

from __future__ import annotations

import random

import numpy as np
import pytest

import stackdist
from kvlab.kvsim import ExclusiveTierCache, LRUCache, TwoTierCache
from kvlab.placement.hierarchy import TieredCache
from kvlab.placement.policies import POLICIES, make_policy
from kvlab.placement.simulator import SimConfig, simulate
from kvlab.placement.workloads import Workload

COLD = np.iinfo(np.int64).max


def naive_stack_distances(keys: list[int]) -> list[int]:
    """O(n^2) LRU stack distance, unit sizes: 1 + distinct other keys since the last access."""
    out = []
    for i, key in enumerate(keys):
        j = i - 1
        while j >= 0 and keys[j] != key:
            j -= 1
        out.append(COLD if j < 0 else 1 + len(set(keys[j + 1 : i]) - {key}))
    return out


def band(distance: int, capacities: list[int]) -> int:
    """Tier k iff c0+..+c(k-1) < d <= c0+..+ck; -1 beyond the total (or cold)."""
    bound = 0
    for k, cap in enumerate(capacities):
        if bound < distance <= bound + cap:
            return k
        bound += cap
    return -1


def random_keys(rng: random.Random, n: int) -> list[int]:
    kind = rng.choice(["uniform", "skewed", "cyclic", "one"])
    if kind == "uniform":
        return [rng.randrange(rng.randint(1, 30)) for _ in range(n)]
    if kind == "skewed":
        return [int(rng.paretovariate(1.2)) % 40 for _ in range(n)]
    if kind == "cyclic":
        period = rng.randint(1, 12)
        return [i % period for i in range(n)]
    return [7] * n


def random_capacities(rng: random.Random, n_tiers: int) -> list[int]:
    return [rng.choice([0, 0, 1, 2, 3, 5, 8]) for _ in range(n_tiers)]


# --------------------------------------------------------------------- exclusive = bands
def test_exclusive_lru_hits_are_the_stack_distance_bands() -> None:
    for seed in range(60):  # one test item, 60 seeded cases
        rng = random.Random(seed)
        keys = random_keys(rng, rng.randint(0, 120))
        caps = random_capacities(rng, 3)
        cache = TieredCache(caps, "lru", "exclusive")
        got = [cache.access(k) for k in keys]
        naive = naive_stack_distances(keys)
        assert got == [band(d, caps) for d in naive]
        engine = stackdist.stack_distances(np.array(keys, dtype=np.int64)).tolist() if keys else []
        assert engine == naive
        cache._check()


def test_exclusive_lru_equals_kvsim_exclusive_tier_cache() -> None:
    for seed in range(40):  # one test item, 40 seeded cases
        rng = random.Random(1000 + seed)
        keys = random_keys(rng, rng.randint(0, 150))
        caps = random_capacities(rng, rng.choice([2, 3]))
        ours = TieredCache(caps, "lru", "exclusive")
        ref = ExclusiveTierCache(caps)
        for k in keys:
            assert ours.access(k) == ref.access(k, 1)
            ours._check()
        assert ours.contents() == [tier.keys() for tier in ref.tiers]


def test_simulator_block_mode_reproduces_the_bands_on_a_workload() -> None:
    rng = np.random.default_rng(5)
    offsets = np.array([0, 3, 3, 7, 9, 14, 20], dtype=np.int64)
    blocks = rng.integers(0, 9, size=20).astype(np.int64)
    n = len(offsets) - 1
    w = Workload("t", blocks, offsets, np.full(n, 100), np.full(n, 4), np.arange(n, dtype=float), np.zeros(n, np.int64), 16)
    caps = [2, 3, 4]
    result = simulate(w, SimConfig(capacities=tuple(caps), mode="block", record_tiers=True, check_every=1))
    expected = [band(d, caps) for d in stackdist.stack_distances(blocks).tolist()]
    assert result.tiers.tolist() == expected
    assert result.hits == [expected.count(k) for k in range(3)]


def test_prefix_mode_arrival_tiers_are_the_engine_depth_bands() -> None:
    """Prefix mode (arrival lookup, tail-first commit) agrees with stackdist.engine_depths."""
    for seed in range(25):  # one test item, 25 seeded cases
        rng = np.random.default_rng(seed)
        lengths = rng.integers(0, 6, size=int(rng.integers(1, 25)))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        # distinct blocks inside a request, reused across requests
        blocks = np.concatenate([rng.choice(15, size=int(m), replace=False) for m in lengths]).astype(np.int64)
        n = len(lengths)
        w = Workload("t", blocks, offsets, np.maximum(lengths * 16, 1), np.ones(n, np.int64), np.arange(n, dtype=float),
                     np.zeros(n, np.int64), 16)
        caps = [int(c) for c in rng.integers(0, 5, size=3)]
        result = simulate(w, SimConfig(capacities=tuple(caps), mode="prefix", record_tiers=True, check_every=1))
        depths = stackdist.engine_depths(blocks, offsets).tolist() if len(blocks) else []
        assert result.tiers.tolist() == [band(d, caps) for d in depths]


# --------------------------------------------------------------------- inclusive = TwoTierCache
_NAMES = {"gpu": 0, "cpu": 1, "miss": -1}


def test_inclusive_lru_two_tier_equals_kvsim_two_tier_cache() -> None:
    for seed in range(40):  # one test item, 40 seeded cases
        rng = random.Random(2000 + seed)
        keys = random_keys(rng, rng.randint(0, 150))
        caps = random_capacities(rng, 2)
        ours = TieredCache(caps, "lru", "inclusive")
        ref = TwoTierCache(*caps)
        for k in keys:
            assert ours.access(k) == _NAMES[ref.access(k, 1)]
            ours._check()
        assert ours.contents() == [ref.gpu.keys(), ref.cpu.keys()]


def filtered_lru_reference(caps: list[int], keys: list[int]) -> list[int]:
    """Inclusive N tiers as N LRUCaches: tier k sees the accesses that missed tiers 0..k-1."""
    tiers = [LRUCache(c) for c in caps]
    out = []
    for k in keys:
        hit = next((i for i, t in enumerate(tiers) if k in t), -1)
        for i, t in enumerate(tiers):
            if hit == -1 or i <= hit:
                t.access(k, 1)
        out.append(hit)
    return out


def test_inclusive_lru_three_tiers_is_a_filtered_lru_cascade() -> None:
    for seed in range(30):  # one test item, 30 seeded cases
        rng = random.Random(3000 + seed)
        keys = random_keys(rng, rng.randint(0, 150))
        caps = random_capacities(rng, 3)
        ours = TieredCache(caps, "lru", "inclusive")
        assert [ours.access(k) for k in keys] == filtered_lru_reference(caps, keys)


# --------------------------------------------------------------------- traffic, hand-derived
def test_exclusive_traffic_hand_derived() -> None:
    cache = TieredCache([1, 1, 1], "lru", "exclusive")
    assert [cache.access(b) for b in (1, 2, 3, 1, 4)] == [-1, -1, -1, 2, -1]
    # 2 demotes 1 (pcie down); 3 demotes 2 (pcie) and 1 (nvme); the hit on 1 in the SSD crosses
    # both links up and demotes 3 (pcie) and 2 (nvme); 4 demotes 1 (pcie), 3 (nvme), drops 2.
    assert (cache.up, cache.down, cache.dropped) == ([1, 1], [4, 3], 1)
    assert cache.contents() == [[4], [1], [3]]


def test_inclusive_traffic_hand_derived() -> None:
    cache = TieredCache([1, 2, 4], "lru", "inclusive")
    assert [cache.access(b) for b in (1, 2, 1, 3, 2)] == [-1, -1, 1, -1, 2]
    # misses write through both links (3 misses); hit on 1 in DRAM crosses pcie up; the hit on 2
    # in the SSD (DRAM held 1, 3) crosses both links up.
    assert (cache.up, cache.down) == ([2, 1], [3, 3])
    assert cache.contents() == [[2], [3, 2], [1, 3, 2]]  # the DRAM hit left the SSD order alone


def test_zero_capacity_top_tier_passes_through() -> None:
    cache = TieredCache([0, 2], "lru", "exclusive")
    assert [cache.access(b) for b in (1, 1, 2, 3, 1)] == [-1, 1, -1, -1, -1]
    # misses are written from the GPU to DRAM; the hit still crosses pcie to be used.
    assert (cache.up, cache.down) == ([1], [4])


def test_recompute_is_placed_like_a_hit_but_charged_like_a_miss() -> None:
    cache = TieredCache([1, 4], "lru", "exclusive")
    cache.access(1)
    cache.access(2)  # 1 demoted to DRAM
    up, down = list(cache.up), list(cache.down)
    assert cache.access(1, usable=False) == 1
    assert cache.up == up and cache.down == [down[0] + 1]  # 2 demoted; no fetch of 1
    assert cache.contents() == [[1], [2]]


def test_all_zero_capacity_and_empty_inputs() -> None:
    for org in ("exclusive", "inclusive"):
        cache = TieredCache([0, 0, 0], "lru", org)
        assert [cache.access(b) for b in (1, 1, 2)] == [-1, -1, -1]
        cache._check()
        assert cache.contents() == [[], [], []]
    n = 0
    w = Workload("empty", np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
                 np.zeros(n), np.zeros(n, np.int64), 16)
    result = simulate(w, SimConfig())
    assert result.to_dict()["requests"] == 0 and result.hits == [0, 0, 0]


def test_one_tier_only() -> None:
    cache = TieredCache([2], "lru", "exclusive")
    assert [cache.access(b) for b in (1, 2, 1, 3, 2)] == [-1, -1, 0, -1, -1]
    assert cache.up == [] and cache.dropped == 2


# --------------------------------------------------------------------- prefetch and invariants
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("organisation", ["exclusive", "inclusive"])
def test_stress_invariants_with_prefetch(policy: str, organisation: str) -> None:
    rng = random.Random(hash((policy, organisation)) & 0xFFFF)
    for _ in range(8):
        caps = random_capacities(rng, 3)
        cache = TieredCache(caps, policy, organisation)
        for _ in range(250):
            b = int(rng.paretovariate(1.1)) % 30
            op = rng.random()
            if op < 0.15:
                source = cache.prefetch(b)
                if policy == "lru":  # other policies may demote a low-scored block at once
                    assert source == -1 or cache.locate(b) == cache.top
            else:
                before = cache.locate(b)
                assert cache.access(b, usable=op > 0.25) == before
                if cache.top < len(caps) and policy == "lru":
                    assert cache.locate(b) == cache.top
            cache._check()


def test_prefetch_moves_a_lower_block_up_and_counts_it_apart() -> None:
    cache = TieredCache([1, 1, 1], "lru", "exclusive")
    for b in (1, 2, 3):
        cache.access(b)
    assert cache.locate(1) == 2
    assert cache.prefetch(1) == 2
    assert cache.locate(1) == 0 and cache.prefetch_up == [1, 1] and cache.prefetch_down == [1, 1]
    assert cache.prefetch(1) == -1 and cache.prefetch(99) == -1


# --------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "caps, org, message",
    [
        ([1, -1], "exclusive", r"capacities\[1\] must be a non-negative int, got -1\."),
        ([1, 1.5], "exclusive", r"capacities\[1\] must be a non-negative int"),
        ([], "exclusive", "capacities must name at least one tier."),
        ([1], "both", "organisation must be one of exclusive, inclusive; got 'both'."),
    ],
)
def test_bad_arguments_are_named(caps: list, org: str, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        TieredCache(caps, "lru", org)


def test_unknown_policy_is_named() -> None:
    with pytest.raises(ValueError, match="policy must be one of lru, lfu, predicted, ewma; got 'arc'."):
        make_policy("arc")
