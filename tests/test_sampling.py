"""SHARDS sampling (stackdist.engine.scale.sampling) against obviously correct references.

The reference is a plain-Python SHARDS: a list stack over the sampled keys, a dict of hashes, and
(fixed size) eviction of the largest hash with the threshold lowered to it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from naive import naive_distances

from stackdist.engine import HitCurve, dense_keys
from stackdist.engine.scale.sampling import (
    COLD,
    ShardsSampler,
    feed_all,
    key_hashes,
    rate_of_threshold,
    sample_mask,
    sampled_curve,
    spread,
    threshold_for_rate,
)


def naive_shards(keys, sizes, rate, max_keys, seed):
    """(distance or None, rate) per sampled access; SKIP accesses are left out (index kept)."""
    hashes = key_hashes(np.asarray(keys), seed).tolist()
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    thresh = threshold_for_rate(rate)
    stack: list = []
    size_of: dict = {}
    out = {}
    for i, (h, s) in enumerate(zip(hashes, sizes)):
        if h > thresh:
            continue
        if h in size_of:
            depth = stack.index(h)
            d = s + sum(size_of[k] for k in stack[:depth])
            stack.pop(depth)
        else:
            d = None
        size_of[h] = s
        stack.insert(0, h)
        if max_keys is not None and len(stack) > max_keys:
            gone = max(stack)
            stack.remove(gone)
            del size_of[gone]
            thresh = gone - 1
            if gone == h:
                continue
        out[i] = (d, float(rate_of_threshold(thresh)))
    return out


def estimate(sampled: dict, n: int, capacity: int) -> float:
    """SHARDS_adj hits at ``capacity`` from the reference's sampled accesses."""
    weight = sum(1 / r for _, r in sampled.values())
    finite = [(math.ceil(d / r - 1e-9), 1 / r) for d, r in sampled.values() if d is not None]
    if not finite:
        return 0.0
    first = min(c for c, _ in finite)
    if capacity < first:
        return 0.0
    got = sum(w for c, w in finite if c <= capacity) + (n - weight)
    return min(max(got, 0.0), float(n))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["rate", "size", "both"])
def test_kernel_matches_the_plain_python_shards(seed, mode):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    keys = rng.zipf(1.3, n) % 60
    sizes = rng.integers(1, 4, 60)[keys] if seed % 2 else None
    rate = {"rate": 0.4, "size": 1.0, "both": 0.7}[mode]
    max_keys = None if mode == "rate" else int(rng.integers(1, 12))
    ref = naive_shards(keys, sizes, rate, max_keys, seed)
    sampler = ShardsSampler(rate=rate, max_keys=max_keys, seed=seed)
    got = []
    for lo in range(0, n, 37):  # chunked, as a stream
        got.append(sampler.feed(keys[lo : lo + 37], None if sizes is None else sizes[lo : lo + 37]))
    d = np.concatenate(got)
    sampled = {i for i in range(n) if d[i] != -1}
    assert sampled == set(ref)
    for i in sampled:
        assert (None if d[i] == COLD else int(d[i])) == ref[i][0]
    curve = sampler.curve()
    assert curve.n_sampled_keys <= (max_keys or n)
    for capacity in (0, 1, 3, 10, 40, 200, 10_000):
        expected = estimate(ref, n, capacity) if mode != "size" else None
        if expected is not None:
            assert curve.hits_at(capacity) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["rate", "size", "both"])
def test_one_pass_for_several_seeds_matches_the_plain_python_shards(seed, mode):
    from stackdist.engine.scale.sampling import feed_all

    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 400))
    keys = rng.zipf(1.3, n) % 60
    sizes = rng.integers(1, 4, 60)[keys] if seed % 2 else None
    rate = {"rate": 0.4, "size": 1.0, "both": 0.7}[mode]
    max_keys = None if mode == "rate" else int(rng.integers(1, 12))
    seeds = [seed, seed + 7, seed + 8]
    samplers = [ShardsSampler(rate=rate, max_keys=max_keys, seed=s) for s in seeds]
    lo_count, hi_count = n // 5, n - n // 7
    for lo in range(0, n, 37):
        hi = min(n, lo + 37)
        counted = slice(min(max(lo_count - lo, 0), hi - lo), min(max(hi_count - lo, 0), hi - lo))
        feed_all(samplers, keys[lo:hi], None if sizes is None else sizes[lo:hi], counted)
    for s, sampler in zip(seeds, samplers):
        ref = naive_shards(keys, sizes, rate, max_keys, s)
        alone = ShardsSampler(rate=rate, max_keys=max_keys, seed=s)
        alone.feed(keys, sizes, slice(lo_count, hi_count), distances=False)
        got, want = sampler.curve(), alone.curve()
        assert got.n_accesses == want.n_accesses == hi_count - lo_count
        assert got.n_sampled_keys == want.n_sampled_keys <= (max_keys or n)
        assert got.rate == want.rate
        counted_ref = {i: v for i, v in ref.items() if lo_count <= i < hi_count}
        for capacity in (0, 1, 3, 10, 40, 200, 10_000):
            assert got.hits_at(capacity) == pytest.approx(want.hits_at(capacity), abs=1e-9)
            if mode == "rate":
                assert got.hits_at(capacity) == pytest.approx(estimate(counted_ref, hi_count - lo_count, capacity), abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_rate_one_equals_the_exact_curve(seed):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 50, 500)
    sizes = rng.integers(1, 5, 50)[keys]
    ref = naive_distances(keys.tolist(), sizes.tolist())
    got = sampled_curve(keys, sizes, rate=1.0, seed=seed)
    for c in range(int(sizes.max()), 260, 7):  # at or above the largest object, where distances are exact
        assert got.hits_at(c) == sum(1 for d in ref if d is not None and d <= c)
        assert got.hit_size_at(c) == sum(int(s) for d, s in zip(ref, sizes) if d is not None and d <= c)
    assert got.ceiling_hits == sum(d is not None for d in ref)
    unit = HitCurve.from_trace(keys)
    assert np.array_equal(sampled_curve(keys, rate=1.0).hits_at(np.arange(60)), unit.hits_at(np.arange(60)))
    assert sampled_curve(keys, rate=1.0).min_capacity_for(hit_rate=0.5) == unit.min_capacity_for(hit_rate=0.5)


def test_distances_match_the_list_stack_at_rate_one():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 30, 300)
    d = ShardsSampler(rate=1.0).feed(keys)
    assert [None if v == COLD else int(v) for v in d] == naive_distances(keys.tolist())


def test_edges_empty_one_key_window_and_capacity_beyond_the_trace():
    empty = sampled_curve(np.zeros(0, np.int64), rate=0.5)
    assert empty.n_accesses == 0 and empty.hits_at(10) == 0.0 and empty.min_capacity_for(hit_rate=0.5) == 0
    one = sampled_curve(np.full(10, 7), rate=1.0)
    assert one.hits_at(1) == 9.0 and one.hits_at(10**12) == 9.0 and one.hit_rate_at(0) == 0.0
    keys = np.array([0, 1, 0, 1, 2, 0])
    windowed = sampled_curve(keys, rate=1.0, window="2:")
    assert windowed.n_accesses == 4 and windowed.hits_at(3) == HitCurve.from_trace(keys, window="2:").hits_at(3)
    assert sampled_curve(keys, rate=1.0).hits_at(10**15) == HitCurve.from_trace(keys).ceiling_hits


def test_fixed_size_keeps_at_most_s_keys_and_the_rate_only_falls():
    keys = np.arange(50_000) % 5_000
    sampler = ShardsSampler(max_keys=100, seed=2)
    rates = []
    for lo in range(0, keys.size, 5_000):
        sampler.feed(keys[lo : lo + 5_000])
        rates.append(sampler.rate)
        assert sampler.n_sampled_keys <= 100
    assert rates == sorted(rates, reverse=True) and rates[-1] == pytest.approx(100 / 5_000, rel=0.3)
    assert sampler.curve().hit_rate_at(5_000) == pytest.approx(0.9, abs=0.02)


def test_estimates_are_close_on_a_large_zipf_trace_and_reproducible():
    rng = np.random.default_rng(5)
    keys = rng.zipf(1.2, 200_000) % 20_000
    exact = HitCurve.from_trace(keys)
    caps = np.linspace(100, 20_000, 40).astype(np.int64)
    for rate in (0.1, 0.05):
        errors = [np.abs(sampled_curve(keys, rate=rate, seed=s).hit_rate_at(caps) - exact.hit_rate_at(caps)).mean()
                  for s in range(3)]
        assert max(errors) < 0.02
    a, b = sampled_curve(keys, rate=0.05, seed=9), sampled_curve(keys, rate=0.05, seed=9)
    assert np.array_equal(a.hits_at(caps), b.hits_at(caps))
    assert sampled_curve(keys, max_keys=500, seed=1).hit_rate_at(caps).tolist() == \
        sampled_curve(keys, max_keys=500, seed=1).hit_rate_at(caps).tolist()


def test_string_keys_sizes_that_change_and_bad_arguments():
    c = sampled_curve(["a", "b", "a", "c", "b"], rate=1.0)
    assert c.hits_at(3) == 2.0
    with pytest.raises(ValueError, match="changed size"):
        ShardsSampler(rate=1.0).feed([1, 1], [2, 3])
    with pytest.raises(ValueError, match="sample rate"):
        ShardsSampler(rate=0.0)
    with pytest.raises(ValueError, match="sample size"):
        ShardsSampler(max_keys=0)
    with pytest.raises(ValueError, match="give"):
        ShardsSampler()


def test_sample_mask_and_spread():
    mask = sample_mask(np.arange(10_000), 0.25, seed=4)
    assert 2_200 < mask.sum() < 2_800
    assert np.array_equal(mask, sample_mask(np.arange(10_000), 0.25, seed=4))
    assert spread([1.0, 3.0])["max"] == 3.0 and spread([None])["seeds"] == 0


def _chained_trace(seed):
    from stackdist.traces import RequestTrace

    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(int(rng.integers(5, 60))):
        root, length = int(rng.integers(0, 6)), int(rng.integers(1, 8))
        branch = int(rng.integers(0, 3))
        requests.append([root * 1000 + (branch * 100 if j >= 3 else 0) + j for j in range(length)])
    return RequestTrace.from_blocks(requests, block_size=4)


@pytest.mark.parametrize("seed", range(6))
def test_the_chaining_claim_depths_never_decrease_along_a_request(seed):
    from stackdist.serving.semantics import replay_requests
    from stackdist.traces.sampled import is_chained

    trace = _chained_trace(seed)
    assert is_chained(trace)
    for semantics in ("engine", "per-access"):
        replay = replay_requests(trace, semantics)
        assert np.array_equal(replay.effective, replay.depths)


def test_sampled_request_traces():
    from stackdist.traces import RequestTrace
    from stackdist.traces.sampled import is_chained, sample_request_trace

    trace = _chained_trace(1)
    same, rate = sample_request_trace(trace, rate=1.0)
    assert rate == 1.0 and same.block_ids.tolist() == trace.block_ids.tolist()
    assert same.input_length.tolist() == trace.input_length.tolist()
    sub, rate = sample_request_trace(trace, max_keys=5, seed=2)
    assert len(set(sub.block_ids.tolist())) <= 5 and sub.n_requests == trace.n_requests and rate < 1
    assert not is_chained(RequestTrace.from_blocks([[1, 2], [3, 2]]))


def test_plan_sampled_at_rate_one_equals_the_exact_plan(tmp_path):
    import json

    from stackdist.cli.main import main

    def ids(i):  # prefix-chained: each id determines its parent
        h2 = 100 + (i % 4) * 10 + i % 5
        h3 = 10_000 + h2 * 10 + i % 7
        return [i % 4, h2, h3, 10**6 + i]

    rows = [{"timestamp": i, "input_length": 64, "hash_ids": ids(i)} for i in range(60)]
    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    exact, sampled = tmp_path / "e.json", tmp_path / "s.json"
    assert main(["plan", str(trace), "--block-size", "16", "--json", str(exact)]) == 0
    assert main(["plan", str(trace), "--block-size", "16", "--json", str(sampled), "--sample-rate", "1"]) == 0
    e, s = json.loads(exact.read_text()), json.loads(sampled.read_text())
    assert s["sampled"] and s["sampling"]["sample_rate"] == 1.0 and s["sampling"]["chained"]
    def answers(rows):  # the sizes, and which targets are unreachable (a sampled reason says "estimated")
        return [{k: (sorted(v) if k == "unreachable" else v) for k, v in row.items()} for row in rows]

    for name in ("engine", "per-access"):
        assert answers(s["semantics"][name]["working_set"]) == answers(e["semantics"][name]["working_set"])
        assert s["semantics"][name]["curve"] == e["semantics"][name]["curve"]
        for key in ("tier_plan", "tier_plan_by_coverage"):  # corrected too: at rate 1 the correction is nil
            got, want = s["semantics"][name][key], e["semantics"][name][key]
            assert got["total_cost_usd"] == pytest.approx(want["total_cost_usd"], rel=1e-12)
            for g, w in zip(got["tiers"], want["tiers"], strict=True):
                assert g.pop("tier") == w.pop("tier") and g == pytest.approx(w, rel=1e-12)
        for key in ("ceiling_token_hit_rate", "ceiling_block_hit_rate"):
            assert s["semantics"][name]["summary"][key] == pytest.approx(e["semantics"][name]["summary"][key], rel=1e-12)
    assert s["comparison"]["working_sets"] == e["comparison"]["working_sets"]
    for g, w in zip(s["comparison"]["per_access_block_hit_rate_at_engine_ws"],
                    e["comparison"]["per_access_block_hit_rate_at_engine_ws"], strict=True):
        assert g == pytest.approx(w, rel=1e-12)
    assert main(["plan", str(trace), "--block-size", "16", "--dask", "local:2", "--sample-rate", "1"]) == 2


_PREFIXES: dict = {}


def _chained(ids):
    """Prefix-chained ids for a list of block ids: one id per whole prefix."""
    return [_PREFIXES.setdefault(tuple(ids[: j + 1]), len(_PREFIXES)) for j in range(len(ids))]


def test_a_sampled_plans_sections_agree_with_its_corrected_working_sets(tmp_path):
    # The tier plan (token basis), the comparison and the working sets are read from one
    # SHARDS_adj estimate per semantics, so where their targets coincide they give one answer.
    import json

    from stackdist.cli.main import main

    rng = np.random.default_rng(5)
    rows = [{"timestamp": i, "input_length": 16 * 6, "hash_ids": [int(rng.integers(0, 3)), 50 + i % 9, 10**6 + i % 37,
                                                                  10**7 + i % 53, 10**8 + i % 71, 10**9 + i]}
            for i in range(600)]
    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "s.json"
    # These ids are not prefix-chained (an id with several parents): a block sample cannot
    # estimate them, so the sampled plan refuses (exit 1); chained, the same shape plans.
    assert main(["plan", str(trace), "--block-size", "16", "--json", str(out), "--sample-rate", "0.3"]) == 1
    trace.write_text("".join(json.dumps(dict(r, hash_ids=_chained(r["hash_ids"]))) + "\n" for r in rows))
    assert main(["plan", str(trace), "--block-size", "16", "--json", str(out), "--sample-rate", "0.3",
                 "--targets", "0.5,0.9,0.99"]) == 0
    s = json.loads(out.read_text())
    for name, key in (("engine", "engine"), ("per-access", "per_access")):
        ws = {row["target"]: row["fraction_of_ceiling"] for row in s["semantics"][name]["working_set"]}
        tiers = s["semantics"][name]["tier_plan"]["tiers"]
        assert [t["cumulative_blocks"] for t in tiers] == [ws[t["target"]]["blocks"] for t in tiers]
        assert [row[key] for row in s["comparison"]["working_sets"]] == [ws[t] for t in (0.5, 0.9, 0.99)]
        rates = [t["token_hit_rate_at_cumulative"] for t in tiers]
        ceiling = s["semantics"][name]["summary"]["ceiling_token_hit_rate"]
        assert rates == sorted(rates) and rates[-1] <= ceiling + 1e-12
        for row in s["semantics"][name]["working_set"]:  # an unreachable target quotes the (exact) ceiling
            if row["token_hit_rate"] is None:
                assert f"is {ceiling:.2%}" in row["unreachable"]["token_hit_rate"]["reason"]
        assert any(row["token_hit_rate"] is None for row in s["semantics"][name]["working_set"])


@pytest.mark.parametrize("seed", range(5))
def test_weighted_estimate_is_the_shards_adj_formula(seed):
    from stackdist.engine.scale.sampling import weighted_estimate

    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 60))
    d = np.where(rng.random(m) < 0.3, COLD, rng.integers(1, 30, m))
    w = rng.integers(1, 17, m)
    rate = float(rng.choice([1.0, 0.5, 0.1]))
    n, total = int(m / rate) + 3, float(w.sum() / rate + rng.integers(-20, 20))
    est = weighted_estimate(d, w, rate, n, total)
    finite = [(math.ceil(int(x) / rate - 1e-9), int(y)) for x, y in zip(d, w) if x != COLD]
    first = min((c for c, _ in finite), default=None)
    for cap in (0, 1, 5, 29, 30, 100, 400):
        hit = sum(y / rate for c, y in finite if c <= cap)
        want = 0.0 if first is None or cap < first else min(max(hit + total - w.sum() / rate, 0.0), round(total))
        assert est.hit_size_at(cap) == pytest.approx(want, abs=1e-6)


def test_plan_sampling_with_shards_adj_recovers_a_hot_prefix(tmp_path):
    import json

    from stackdist.cli.main import main

    rng = np.random.default_rng(3)
    rows = []
    for i in range(400):  # every request starts with one hot block, then its session's blocks
        session = int(rng.integers(0, 60))
        ids = [7] + [1000 + session * 50 + j for j in range(int(rng.integers(1, 6)))]
        rows.append({"timestamp": i, "input_length": 16 * len(ids), "hash_ids": ids})
    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    exact = tmp_path / "e.json"
    assert main(["plan", str(trace), "--block-size", "16", "--semantics", "engine", "--json", str(exact)]) == 0
    truth = json.loads(exact.read_text())["semantics"]["engine"]["summary"]["ceiling_token_hit_rate"]
    errors = []
    for seed in range(4):
        out = tmp_path / f"s{seed}.json"
        assert main(["plan", str(trace), "--block-size", "16", "--semantics", "engine", "--json", str(out),
                     "--sample-rate", "0.3", "--seed", str(seed), "--sample-seeds", "1"]) == 0
        got = json.loads(out.read_text())
        assert got["sampled"] and "SHARDS_adj" in got["sampling"]["estimator"]
        errors.append(abs(got["semantics"]["engine"]["summary"]["ceiling_token_hit_rate"] - truth))
    assert max(errors) < 0.05


def _request_trace(rng, n_requests, keys=40):
    lengths = rng.integers(0, 7, n_requests)
    ids = [rng.choice(keys, size=k, replace=False) for k in lengths]
    return (np.concatenate(ids) if ids else np.zeros(0, np.int64)).astype(np.int64), np.r_[0, np.cumsum(lengths)].astype(np.int64)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_engine_semantics_on_the_sample_are_the_sub_traces_exact_depths(seed, rate):
    from stackdist.engine import engine_depths
    from stackdist.engine.kernels import segment_running_max

    rng = np.random.default_rng(300 + seed)
    ids, offsets = _request_trace(rng, int(rng.integers(0, 60)))
    sampler = ShardsSampler(rate=rate, seed=seed)
    got = []
    cut = sorted({0, len(offsets) - 1, *rng.integers(0, len(offsets), 3).tolist()})
    for a, b in itertools.pairwise(cut):  # whole requests, in a few batches
        got.append(sampler.feed_requests(ids[offsets[a] : offsets[b]], offsets[a : b + 1] - offsets[a]))
    got = np.concatenate(got) if got else np.zeros(0, np.int64)
    keep = sample_mask(ids, rate, seed) if ids.size else np.zeros(0, bool)
    sub_offsets = np.r_[0, np.cumsum(keep)][offsets].astype(np.int64)
    depths = np.asarray(engine_depths(ids[keep], sub_offsets)) if keep.any() else np.zeros(0, np.int64)
    eff = segment_running_max(depths, sub_offsets) if depths.size else depths
    want = np.full(ids.size, -1, np.int64)
    warm = eff != COLD
    scaled = np.full(eff.size, COLD, np.int64)
    scaled[warm] = np.ceil(eff[warm] / rate - 1e-9).astype(np.int64)
    want[keep] = scaled
    assert got.tolist() == want.tolist()
    curve = sampler.curve()
    assert curve.n_accesses == ids.size
    if rate == 1.0:
        exact = HitCurve(dense_keys(ids), None, eff, (0, ids.size)) if ids.size else None
        for cap in (0, 1, 3, 10, 100):
            assert curve.hits_at(cap) == (exact.hits_at(cap) if exact is not None else 0)


def test_engine_semantics_fixed_size_keeps_at_most_s_keys():
    rng = np.random.default_rng(9)
    ids, offsets = _request_trace(rng, 2000, keys=500)
    sampler = ShardsSampler(max_keys=30, seed=2)
    d = sampler.feed_requests(ids, offsets)
    assert sampler.n_sampled_keys <= 30 and sampler.rate < 0.2 and d.shape == ids.shape
    big = ShardsSampler(max_keys=10_000, seed=2)
    assert big.feed_requests(ids, offsets).tolist() == ShardsSampler(rate=1.0, seed=2).feed_requests(ids, offsets).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_is_chained_equals_a_dict_of_parents(seed):
    from stackdist.traces import RequestTrace
    from stackdist.traces.sampled import is_chained

    rng = np.random.default_rng(seed)
    base = [0, 2**63 + 5, -7, 10**18][seed % 4]  # small, uint64, negative and huge ids
    for _ in range(40):
        requests = []
        for _ in range(int(rng.integers(0, 8))):
            n = int(rng.integers(0, 6))
            requests.append([base + int(v) for v in rng.integers(0, 4 if rng.random() < 0.5 else 40, n)])
        if not requests:
            continue
        parents: dict[int, set] = {}
        for req in requests:
            for i, b in enumerate(req):
                parents.setdefault(b, set()).add(req[i - 1] if i else None)
        assert is_chained(RequestTrace.from_blocks(requests)) == all(len(p) == 1 for p in parents.values())


@pytest.mark.parametrize("seed", range(5))
def test_sample_request_trace_equals_a_loop_over_requests(seed):
    # A request keeps its sampled blocks in order; its prompt tokens are their tokens, plus the
    # uncovered tail (input_length beyond its blocks) when its last block is kept or it has none.
    from stackdist.engine.scale.sampling import key_hashes, threshold_for_rate
    from stackdist.traces import RequestTrace
    from stackdist.traces.sampled import sample_request_trace

    rng = np.random.default_rng(seed)
    requests = [[int(v) for v in rng.integers(0, 30, int(rng.integers(0, 7)))] for _ in range(int(rng.integers(1, 40)))]
    trace = RequestTrace.from_blocks(requests, block_size=4)
    trace.input_length = trace.input_length + rng.integers(0, 4, trace.n_requests) * (np.diff(trace.offsets) > 0)
    rate = float(rng.choice([1.0, 0.5, 0.2]))
    sub, got_rate = sample_request_trace(trace, rate=rate, seed=seed)
    limit = threshold_for_rate(rate)
    hashes = key_hashes(trace.block_ids, seed)
    ids, offsets, tokens, inputs = [], [0], [], []
    for r in range(trace.n_requests):
        lo, hi = int(trace.offsets[r]), int(trace.offsets[r + 1])
        kept = [i for i in range(lo, hi) if int(hashes[i]) <= limit]
        ids += [int(trace.block_ids[i]) for i in kept]
        tokens += [int(trace.block_tokens[i]) for i in kept]
        offsets.append(len(ids))
        tail = int(trace.input_length[r]) - int(trace.block_tokens[lo:hi].sum())
        inputs.append(sum(int(trace.block_tokens[i]) for i in kept) + (tail if hi == lo or (kept and kept[-1] == hi - 1) else 0))
    assert got_rate == pytest.approx(rate, rel=1e-12)
    assert sub.block_ids.tolist() == ids and sub.offsets.tolist() == offsets
    assert sub.block_tokens.tolist() == tokens and sub.input_length.tolist() == inputs


def test_a_seed_whose_sample_keeps_nothing_is_exit_1_not_a_zero_curve(tmp_path, capsys):
    # 30 accesses over 3 keys at rate 0.5: for some first seeds every one of the 3 seeds keeps a
    # key, for others one keeps none. The run answers (exit 0) exactly when every seed keeps an
    # access, else exit 1 naming the flag and the seed (an empty sample used to estimate a hit
    # rate of 0 at every size). One first seed of each kind, per command.
    from stackdist.cli import main

    keys = np.arange(30) % 3
    blocks = np.concatenate([[k, k + 3] for k in keys])
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{k}\n" for k in keys))
    requests = tmp_path / "m.jsonl"
    requests.write_text("".join(f'{{"timestamp": {i}, "input_length": 1024, "hash_ids": [{k}, {k + 3}]}}\n'
                                for i, k in enumerate(keys)))

    def kept(ids, first):
        return [int(sample_mask(ids, 0.5, first + i).sum()) for i in range(3)]

    def firsts(ids):  # the first seed where all three keep something, and one where one does not
        ok = next(f for f in range(100) if min(kept(ids, f)))
        empty = next(f for f in range(100) if not min(kept(ids, f)))
        return ok, empty

    runs = {"curve": (["curve", str(trace), "-o", str(tmp_path / "c.json")], keys, "accesses"),
            "tiers": (["tiers", str(trace), "--gpu", "1", "-o", str(tmp_path / "t.json")], keys, "accesses"),
            "plan": (["plan", str(requests), "--json", str(tmp_path / "p.json")], blocks, "prompt blocks")}
    for argv, ids, unit in runs.values():
        ok, empty = firsts(ids)
        assert main([*argv, "--sample-rate", "0.5", "--seed", str(ok)]) == 0
        capsys.readouterr()
        assert main([*argv, "--sample-rate", "0.5", "--seed", str(empty)]) == 1
        seed = empty + kept(ids, empty).index(0)
        how = "a sample rate of 0.5" if argv[0] == "plan" else "--sample-rate 0.5"  # plan: the library's words
        assert f"{how} (seed {seed}) kept none of the {ids.size} {unit}" in capsys.readouterr().err


def test_seeds_replayed_on_two_threads_equal_one_loop_and_raise_the_first_error():
    # A chunk of 2**16 accesses or more replays the seeds on two threads: the same curves as each
    # seed fed alone, and a key whose size changes raises the error the first seed's loop would.
    from stackdist.engine.scale.sampling import feed_all

    rng = np.random.default_rng(5)
    keys = rng.zipf(1.2, 1 << 16) % 5_000
    samplers = [ShardsSampler(rate=0.3, seed=s) for s in range(4)]
    feed_all(samplers, keys)
    for s, sampler in enumerate(samplers):
        alone = ShardsSampler(rate=0.3, seed=s)
        alone.feed(keys, distances=False)
        assert sampler.curve().hits_at(500) == alone.curve().hits_at(500)
        assert sampler.n_sampled_accesses == alone.n_sampled_accesses
    # Two keys change size: ``early`` (sampled by seed 1 only) before ``late`` (sampled by seed 0).
    # A loop in seed order stops at seed 0's error (the late key); so must the threads.
    by_seed = [set(np.unique(keys[sample_mask(keys, 0.5, s)]).tolist()) for s in (0, 1)]
    early = next(k for k in keys.tolist() if k in by_seed[1] and k not in by_seed[0])
    late = next(k for k in keys[::-1].tolist() if k in by_seed[0] and k != early)
    sizes = np.ones(keys.size, np.int64)
    sizes[np.flatnonzero(keys == early)[1:]] = 2
    sizes[np.flatnonzero(keys == late)[-1]] = 3
    with pytest.raises(ValueError) as first_seed:
        ShardsSampler(rate=0.5, seed=0).feed(keys, sizes, distances=False)
    with pytest.raises(ValueError) as threaded:
        feed_all([ShardsSampler(rate=0.5, seed=s) for s in (0, 1)], keys, sizes)
    assert str(threaded.value) == str(first_seed.value) and f"key {late}" in str(first_seed.value)


def test_feed_all_takes_more_seeds_than_one_pass_holds():
    keys = np.random.default_rng(4).integers(0, 90, 700)
    many = [ShardsSampler(0.4, None, s) for s in range(64)]
    feed_all(many, keys)
    for seed in (0, 61, 62, 63):
        alone = ShardsSampler(0.4, None, seed)
        alone.feed(keys)
        assert np.array_equal(many[seed].curve().hit_rate_at(np.arange(100)), alone.curve().hit_rate_at(np.arange(100)))


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_curve_sampled_on_empty_inputs_is_exit_1_and_draws_its_plot(tmp_path, capsys):
    # (Once the C sampler's tests, now the one sampled path's.) An empty or blank file, or a
    # sample that keeps nothing, is exit 1 with the reason; a sampled curve draws its plot.
    from stackdist.cli import main

    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "blank.csv").write_text("\n\n")
    (tmp_path / "one.csv").write_text("5\n")
    for name, rate in (("empty.csv", "0.5"), ("blank.csv", "0.5"), ("one.csv", "0.000001")):
        assert main(["curve", str(tmp_path / name), "--sample-rate", rate, "-o", str(tmp_path / "o.json")]) == 1, name
    assert "kept none" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    np.save(tmp_path / "k.npy", np.random.default_rng(1).zipf(1.3, 3000) % 400)
    png = tmp_path / "s.png"
    assert main(["curve", str(tmp_path / "k.npy"), "--sample-rate", "0.5", "--plot", str(png), "-o",
                 str(tmp_path / "s.json")]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 1025, 5000])
def test_multi_filter_equals_each_seeds_hash_under_its_cut(n):
    # The block-wise, vectorized filter against the obvious per-seed comparison, for cuts at
    # both ends and above 2**63 (an unsigned comparison), up to the 62 seeds a pass holds.
    from stackdist.engine.scale.hashed_stack import hash_values, multi_filter

    rng = np.random.default_rng(n)
    values = rng.integers(0, 2**64, n, dtype=np.uint64)
    for k in (1, 3, 62):
        salts = rng.integers(0, 2**64, k, dtype=np.uint64)
        cuts = rng.integers(0, 2**64, k, dtype=np.uint64)
        cuts[0], cuts[-1] = 2**64 - 1, (0 if k > 1 else cuts[-1])
        want = np.zeros(n, np.int64)
        for j in range(k):
            want |= (hash_values(values, salts[j]) <= cuts[j]).astype(np.int64) << j
        idx, own = multi_filter(values, salts, cuts)
        assert idx.tolist() == np.flatnonzero(want).tolist() and own.tolist() == want[want != 0].tolist()
