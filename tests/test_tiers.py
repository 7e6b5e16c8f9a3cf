"""Two- and three-tier curves against kvlab's TwoTierCache and ExclusiveTierCache."""

from __future__ import annotations

import numpy as np
import pytest
from naive import mooncake_block_stream, random_trace, real_trace_paths

from kvlab.kvsim import ExclusiveTierCache, TwoTierCache
from stackdist import hit_curve
from stackdist.engine.tiers import (
    compare_organisations,
    exclusive_grid,
    exclusive_hits,
    inclusive_grid,
    inclusive_tiers,
)


def two_tier_counts(keys, sizes, gpu, cpu, window=(0, None)):
    start, stop = window
    stop = len(keys) if stop is None else stop
    cache = TwoTierCache(gpu, cpu)
    counts = {"gpu": 0, "cpu": 0, "miss": 0}
    for i, (k, s) in enumerate(zip(keys, sizes)):
        where = cache.access(k, int(s))
        if start <= i < stop:
            counts[where] += 1
    return counts


def exclusive_counts(keys, sizes, capacities):
    cache = ExclusiveTierCache(capacities)
    hits = [0] * len(capacities)
    misses = 0
    for k, s in zip(keys, sizes):
        tier = cache.access(k, int(s))
        if tier < 0:
            misses += 1
        else:
            hits[tier] += 1
    return hits, misses


@pytest.mark.parametrize("size_kind", ["unit", "equal", "varied"])
def test_inclusive_equals_two_tier_cache_at_every_grid_point(size_kind):
    rng = np.random.default_rng({"unit": 21, "equal": 22, "varied": 23}[size_kind])
    # 25 unit traces, 15 equal and 15 varied ones, each windowed, on a 14 x 14 grid from 0 to past
    # the working set (test_outcomes_access_by_access checks every access's tier against
    # TwoTierCache on 30 more, at four GPU/CPU pairs with a zero tier on either side)
    for _ in range(25 if size_kind == "unit" else 15):
        keys, sizes = random_trace(rng, max_len=60, max_keys=10, size_kind=size_kind)
        key_list, size_list = keys.tolist(), sizes.tolist()
        total = int(sizes[np.unique(keys, return_index=True)[1]].sum()) if keys.size else 0
        caps = list(range(0, total + 2, max(1, total // 12))) + [total, total + 1]
        start = int(rng.integers(0, keys.size + 1))
        tiers = inclusive_tiers(keys, None if size_kind == "unit" else sizes, caps, window=(start, None))
        grid = inclusive_grid(tiers, caps)
        for i, gpu in enumerate(caps):
            for j, cpu in enumerate(caps):
                direct = two_tier_counts(key_list, size_list, gpu, cpu, (start, None))
                got = (grid["gpu_hits"][i, j], grid["cpu_hits"][i, j], grid["misses"][i, j])
                assert got == (direct["gpu"], direct["cpu"], direct["miss"]), (gpu, cpu)


def test_min_cpu_capacity_for_targets():
    rng = np.random.default_rng(31)
    for _ in range(30):
        keys, sizes = random_trace(rng, max_len=60, max_keys=10)
        total = int(sizes[np.unique(keys, return_index=True)[1]].sum()) if keys.size else 0
        caps = list(range(total + 2))
        for gpu in (0, total // 3, total):
            tier = inclusive_tiers(keys, sizes, [gpu])[0]
            misses = np.asarray(tier.misses_at(np.array(caps)))
            for limit in range(0, keys.size + 1, 3):
                expected = next((c for c, m in zip(caps, misses) if m <= limit), None)
                assert tier.min_cpu_capacity_for(max_misses=limit) == expected


def test_lab_cpu_cliff_from_one_curve():
    docs, tokens = 10, 5011
    keys = list(range(docs)) * 2
    tier = inclusive_tiers(keys, [tokens] * 20, [21520], window=(docs, None))[0]
    for cpu in (0, 20000, 30000, 40000, 50109, 50110, 56000):
        assert tier.misses_at(cpu) == two_tier_counts(keys, [tokens] * 20, 21520, cpu, (docs, None))["miss"]
    assert tier.min_cpu_capacity_for(max_misses=0) == docs * tokens


@pytest.mark.parametrize("n_tiers", [2, 3])
@pytest.mark.parametrize("size_kind", ["unit", "equal"])
def test_exclusive_bands_equal_reference(n_tiers, size_kind):
    rng = np.random.default_rng(40 + n_tiers)
    for _ in range(40):
        keys, sizes = random_trace(rng, max_len=60, max_keys=10, size_kind=size_kind)
        curve = hit_curve(keys, None if size_kind == "unit" else sizes)
        for _ in range(8):
            caps = rng.integers(0, 3 * int(sizes.max(initial=1)) + 2, n_tiers).tolist()
            result = exclusive_hits(curve, caps)
            assert result["exact"]
            assert (result["tier_hits"], result["misses"]) == exclusive_counts(keys.tolist(), sizes.tolist(), caps)


def test_exclusive_bands_with_varied_sizes_are_flagged_and_close():
    rng = np.random.default_rng(50)
    worst = 0
    for _ in range(60):
        keys, sizes = random_trace(rng, max_len=60, max_keys=10, size_kind="varied")
        curve = hit_curve(keys, sizes)
        caps = rng.integers(0, 80, 2).tolist()
        result = exclusive_hits(curve, caps)
        hits, _ = exclusive_counts(keys.tolist(), sizes.tolist(), caps)
        if np.unique(sizes).size > 1:
            assert result["exact"] is False
        worst = max(worst, abs(sum(result["tier_hits"]) - sum(hits)))
    assert worst > 0  # the approximation is really inexact somewhere, so the flag matters


def test_exclusive_grid_and_organisation_comparison():
    keys = [0, 1, 2, 3] * 5
    curve = hit_curve(keys)
    grid = exclusive_grid(curve, [1, 2], [0, 2, 3])
    assert grid["gpu_hits"].tolist() == [[0, 0, 0], [0, 0, 0]]
    assert grid["cpu_hits"].tolist() == [[0, 0, 16], [0, 16, 16]]
    cmp = compare_organisations(curve, gpu_capacity=2, total_capacity=4)
    # Exclusive 2 + 2 holds all four keys; inclusive CPU 2 duplicates and thrashes.
    assert cmp["exclusive"]["cpu_hits"] == 16 and cmp["inclusive"]["cpu_hits"] == 0
    direct = two_tier_counts(keys, [1] * 20, 2, 2)
    assert cmp["inclusive"]["misses"] == direct["miss"]


@pytest.mark.xdist_group("real_lru")  # one worker: naive's memoised block streams of the real traces are shared
@pytest.mark.parametrize("path", real_trace_paths(), ids=lambda p: p.stem)
def test_real_trace_tiers_at_a_few_points(path):
    # The first 30,000 blocks (about 1,200 conversation requests): 10x the GPU tier's 3,000, with
    # the trace's own reuse; each point is a Python replay of kvlab's TwoTierCache and
    # ExclusiveTierCache, so the prefix bounds the time (60,000 took twice as long for the same paths).
    ids = mooncake_block_stream(path)[:30_000]
    keys = ids.tolist()
    curve = hit_curve(ids)
    tiers = inclusive_tiers(gpu_capacities=[500, 3000], curve=curve)
    # One CPU tier larger than its GPU tier and one smaller (every grid point is checked on the
    # random traces of test_inclusive_equals_two_tier_cache_at_every_grid_point and the exclusive
    # tests): the real trace adds scale and real reuse, one replay per point.
    for tier, cpu in zip(tiers, (8000, 1000)):
        direct = two_tier_counts(keys, [1] * len(keys), tier.gpu_capacity, cpu)
        assert (tier.gpu_hits, tier.cpu_hits_at(cpu)) == (direct["gpu"], direct["cpu"])
        assert exclusive_hits(curve, [tier.gpu_capacity, cpu])["tier_hits"] == exclusive_counts(keys, [1] * len(keys), [tier.gpu_capacity, cpu])[0]


def test_outcomes_access_by_access():
    rng = np.random.default_rng(70)
    for _ in range(30):
        keys, sizes = random_trace(rng, max_len=50, max_keys=8)
        for gpu, cpu in ((0, 5), (6, 10), (12, 0), (3, 40)):
            tier = inclusive_tiers(keys, sizes, [gpu])[0]
            cache = TwoTierCache(gpu, cpu)
            expected = [cache.access(int(k), int(s)) for k, s in zip(keys, sizes)]
            assert [("gpu", "cpu", "miss")[o] for o in tier.outcomes(cpu)] == expected
