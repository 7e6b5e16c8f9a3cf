"""The planner's two semantics against direct request-level simulators; coverage by brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from naive import (
    direct_requests,
    mooncake_block_stream,
    random_requests,
    real_lru_flags,
    real_trace_capacities,
    real_trace_paths,
    request_trace,
)

from stackdist.planning import PrefixCurve, coverage_needs, tier_plan
from stackdist.planning.geometry import DEFAULT_MODEL
from stackdist.serving import replay_requests
from stackdist.traces import read_mooncake

make_trace = request_trace


@pytest.mark.parametrize("semantics", ["engine", "per-access"])
def test_semantics_equal_direct_simulators_at_every_capacity(semantics):
    rng = np.random.default_rng(60)
    for _ in range(40):
        requests = random_requests(rng, n_requests=int(rng.integers(1, 30)))
        last = rng.integers(1, 5, len(requests)).tolist()
        trace = make_trace(requests, last_tokens=last)
        first = int(rng.integers(0, len(requests)))
        curve = PrefixCurve(replay_requests(trace, semantics), slice(first, None))
        n_distinct = len({b for r in requests for b in r})
        for c in range(n_distinct + 2):
            direct = direct_requests(requests, c, semantics)[first:]
            block_hits = sum(sum(flags) for _, flags in direct)
            prefix_tokens = sum(sum(int(trace.block_tokens[trace.offsets[r + first] + i]) for i in range(p))
                                for r, (p, _) in enumerate(direct))
            assert curve.block_hits_at(c) == block_hits, (semantics, c)
            assert curve.prefix_token_hits_at(c) == prefix_tokens, (semantics, c)


def test_engine_keeps_the_head_per_access_loses_it():
    # One long request, then enough traffic to push half of it out, then the request again.
    long_req = list(range(8))
    filler = [[100 + i] for i in range(4)]
    requests = [long_req] + filler + [long_req]
    trace = make_trace(requests)
    c = 10  # 8 blocks of the long request + 4 filler blocks do not fit
    engine = PrefixCurve(replay_requests(trace, "engine"), slice(5, 6))
    per_access = PrefixCurve(replay_requests(trace, "per-access"), slice(5, 6))
    assert engine.block_hits_at(c) == direct_requests(requests, c, "engine")[5][0] == 6  # head survives
    assert per_access.prefix_token_hits_at(c) == 0  # head was evicted first


def test_coverage_equals_brute_force():
    rng = np.random.default_rng(61)
    for _ in range(25):
        requests = random_requests(rng, n_requests=25)
        trace = make_trace(requests)
        n_distinct = len({b for r in requests for b in r})
        # prefix[c][r]: request r's hit prefix at capacity c (one direct simulation per capacity)
        prefix = [[p for p, _ in direct_requests(requests, c, "engine")] for c in range(n_distinct + 2)]
        for target in (1.0, 0.5, 0.9):
            needs = coverage_needs(replay_requests(trace, "engine"), target)
            for r, h in enumerate(prefix[n_distinct + 1]):
                k = math.ceil(h * target - 1e-12)
                served = [c for c in range(n_distinct + 2) if prefix[c][r] >= k]
                assert needs[r] == min(served), (r, target)


def test_coverage_quantiles_are_order_statistics():
    rng = np.random.default_rng(62)
    requests = random_requests(rng, n_requests=200)
    curve = PrefixCurve(replay_requests(make_trace(requests), "engine"))
    needs = np.sort(curve.coverage_needs(1.0))
    q = curve.coverage_capacity(1.0, (0.5, 0.9, 1.0))
    for name, frac in (("p50", 0.5), ("p90", 0.9), ("p100", 1.0)):
        served = np.mean(needs <= q[name])
        assert served >= frac and (q[name] == 0 or np.mean(needs <= q[name] - 1) < frac)


def test_working_set_and_tier_plan():
    rng = np.random.default_rng(63)
    requests = random_requests(rng, n_requests=300, branching=4)
    curve = PrefixCurve(replay_requests(make_trace(requests), "engine"))
    c = curve.min_capacity_for(fraction_of_ceiling=0.9)
    target = math.ceil(0.9 * curve.ceiling_token_hits)
    assert curve.prefix_token_hits_at(c) >= target > curve.prefix_token_hits_at(c - 1)
    assert curve.min_capacity_for(token_hit_rate=1.0) is None or curve.ceiling_token_hit_rate == 1.0
    plan = tier_plan(curve, DEFAULT_MODEL, (0.5, 0.9, 0.99))
    sizes = [t["blocks"] for t in plan["tiers"]]
    assert sum(sizes) == curve.min_capacity_for(fraction_of_ceiling=0.99)
    assert plan["tiers"][0]["gib"] == pytest.approx(sizes[0] * 4 * DEFAULT_MODEL.kv_bytes_per_token / 2**30)


@pytest.mark.xdist_group("real_lru")  # one worker: the memoised naive.real_lru_flags replays are shared
@pytest.mark.parametrize("path", real_trace_paths(), ids=lambda p: p.stem)
def test_real_traces_both_semantics_against_direct(path):
    trace = read_mooncake(path)
    assert trace.block_ids.tolist() == mooncake_block_stream(path).tolist()  # the stream real_lru_flags replays
    requests = [trace.request_blocks(r).tolist() for r in range(trace.n_requests)]
    bounds = list(zip(trace.offsets[:-1].tolist(), trace.offsets[1:].tolist()))
    cum_tokens = np.concatenate([[0], np.cumsum(trace.block_tokens)]).tolist()
    n_keys = len(set(trace.block_ids.tolist()))
    for semantics in ("engine", "per-access"):
        curve = PrefixCurve(replay_requests(trace, semantics))
        # The capacities of test_curve's real-trace check: the per-access references are the same
        # LRU replays of the block stream (direct_requests' per-access rule), run once.
        for c in real_trace_capacities(n_keys):
            if semantics == "engine" and c == 0:  # an empty cache hits nothing (no replay needed)
                direct = [(0, [False] * len(r)) for r in requests]
            elif semantics == "engine":
                direct = direct_requests(requests, c, semantics)
            else:
                flags = real_lru_flags(path, c).tolist()
                direct = [(next((i for i, f in enumerate(flags[a:b]) if not f), b - a), flags[a:b]) for a, b in bounds]
            assert curve.block_hits_at(c) == sum(sum(f) for _, f in direct)
            tokens = sum(cum_tokens[a + p] - cum_tokens[a] for (a, _), (p, _) in zip(bounds, direct))
            assert curve.prefix_token_hits_at(c) == tokens


def test_tier_plan_by_coverage_uses_request_quantiles():
    rng = np.random.default_rng(64)
    requests = random_requests(rng, n_requests=300, branching=4)
    curve = PrefixCurve(replay_requests(make_trace(requests), "engine"))
    plan = tier_plan(curve, DEFAULT_MODEL, (0.5, 0.9), basis="coverage")
    quantiles = curve.coverage_capacity(1.0, (0.5, 0.9), reusable_only=True)
    needs = curve.coverage_needs(1.0)
    assert quantiles["p50"] == int(np.sort(needs[needs > 0])[math.ceil(0.5 * (needs > 0).sum()) - 1])
    assert [t["cumulative_blocks"] for t in plan["tiers"]] == [quantiles["p50"], quantiles["p90"]]
    assert sum(t["blocks"] for t in plan["tiers"]) == quantiles["p90"]
    with pytest.raises(ValueError, match="basis must be"):
        tier_plan(curve, DEFAULT_MODEL, basis="bytes")
