"""The compiled hybrid KV cache (stackdist/serving/hybrid_kernel.py) against the pure-Python model
it restates (stackdist/serving/hybrid.py, itself checked against vLLM 0.33.0 and a restatement of
the rules): per request the hit, the longest single-group hit and the failing request, on seeded
random traces of every group kind (full, sliding, chunked, Mamba with and without checkpoints,
equal specs looked up jointly), pools from infeasible to never evicting, decode on and off,
serial (chunked prefill, Mamba's split) and timed schedules. The committed vLLM runs go through
the plan, which runs the kernel (tests/test_hybrid_end_to_end.py)."""

from __future__ import annotations

import numpy as np
import pytest
from traces_random import random_trace

from stackdist.serving.hybrid import GroupSpec, kv_cache_groups, simulate_hybrid
from stackdist.serving.hybrid_kernel import (
    hybrid_pool_run,
    simulate_hybrid_fast,
)
from stackdist.serving.schedule import Schedule


def _groups(rng: np.random.Generator, kinds: list[str] | None = None) -> tuple[GroupSpec, ...]:
    kinds = kinds or [str(k) for k in rng.choice(["full", "sliding", "chunked", "mamba"], size=int(rng.integers(1, 5)))]
    b = int(rng.choice([16, 32, 64]))
    layers = []
    for k in kinds:
        layers += [GroupSpec(k, b, window=int(rng.choice([2, 16, 17, 33, 48, 100])) if k == "sliding" else 0,
                             chunk=int(rng.choice([16, 32, 64, 100])) if k == "chunked" else 0,
                             checkpoint_alignment=int(rng.choice([0, b, 2 * b])) if k == "mamba" else 0)
                   ] * int(rng.integers(1, 4))
    if rng.random() < 0.5:
        layers = [layers[i] for i in rng.permutation(len(layers))]
    return kv_cache_groups(layers)


def _case(seed: int, kinds: list[str] | None = None):
    rng = np.random.default_rng(seed)
    t = random_trace(seed, int(rng.integers(5, 30)), aligned=float(rng.random()))
    groups = _groups(rng, kinds)
    decode = bool(rng.random() < 0.5)
    schedule = Schedule.serial(t.n_requests) if rng.random() < 0.6 else Schedule.from_service_model(t)
    chunk = int(rng.choice([16, 24, 40, 64, 100, 8192]))
    peak = int(max(-(-(t.input_length + t.output_length) // 16)))
    pools = [2, peak + 1, peak + 2, peak * 2 + 3, len(groups) * peak + 5,
             int(rng.integers(2, 4 * peak * len(groups) + 10)), None]
    return t, groups, pools, schedule, decode, chunk


def _same(t, groups, pools, schedule, decode, chunk, max_model_len=1 << 40) -> None:
    want = simulate_hybrid(t, groups, pools, schedule, decode, chunk_tokens=chunk, max_model_len=max_model_len)
    got = simulate_hybrid_fast(t, groups, pools, schedule, decode, chunk_tokens=chunk, max_model_len=max_model_len)
    where = ([g.kind for g in groups], groups[0].block_size, decode, schedule.is_serial, chunk)
    assert got.failed_request.tolist() == want.failed_request.tolist(), where
    assert got.hit_tokens.tolist() == want.hit_tokens.tolist(), where
    assert got.group_hit_tokens.tolist() == want.group_hit_tokens.tolist(), where


@pytest.mark.parametrize("batch", range(4))
def test_the_kernel_equals_the_python_model_on_random_traces(batch):
    for seed in range(30 * batch, 30 * batch + 30):
        _same(*_case(seed))


@pytest.mark.parametrize("kinds", [["mamba", "full"], ["mamba", "mamba", "full"], ["sliding", "full"],
                                   ["chunked", "full"], ["sliding", "chunked", "full"], ["mamba"], ["sliding"]])
def test_the_kernel_equals_the_python_model_per_kind(kinds):
    for seed in range(15):
        _same(*_case(7000 + seed, kinds))


def test_the_admission_cap_follows_max_model_len():
    # the sliding and chunked groups' admission caps are min(window or chunk + chunk_tokens, max_model_len) in blocks
    for seed in range(15):
        _same(*_case(8000 + seed, ["sliding", "chunked", "full"]), max_model_len=int(np.random.default_rng(seed).choice([17, 64, 200])))


def test_the_random_cases_reach_what_they_are_for():
    """Not a tautology check of the kernel: the cases above must hit, fail and cut hits."""
    failed = hits = cut = 0
    for seed in range(40):
        t, groups, pools, schedule, decode, chunk = _case(seed)
        r = simulate_hybrid_fast(t, groups, pools, schedule, decode, chunk_tokens=chunk)
        failed += int((r.failed_request >= 0).sum())
        hits += int((r.hit_tokens > 0).sum())
        cut += int((r.group_hit_tokens > r.hit_tokens).sum())
    assert failed > 20 and hits > 100 and cut > 10


def test_one_pool_run_is_the_simulation():
    t, groups, pools, schedule, decode, chunk = _case(5)
    want = simulate_hybrid(t, groups, pools, schedule, decode, chunk_tokens=chunk)
    for i, pool in enumerate(pools):
        hits, _, failed = hybrid_pool_run(t, groups, pool, schedule, decode, chunk)
        assert failed == want.failed_request[i] and hits.tolist() == want.hit_tokens[i].tolist()
