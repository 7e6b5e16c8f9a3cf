"""The compiled vLLM model equals the pure-Python reference written from vLLM's code, and the
one-replay path equals the per-size simulation where its claim applies."""

from __future__ import annotations

import numpy as np
import pytest
from serving_reference import vllm_reference
from traces_random import random_trace

import stackdist
from stackdist.serving.pages import engine_pages
from stackdist.serving.schedule import Schedule
from stackdist.serving.vllm import (
    _no_duplicates,
    _serial_min_pool,
    simulate_vllm,
    vllm_one_replay,
    vllm_pool_run,
)


def _pools(lo: int) -> list[int | None]:
    return [max(lo - 1, 1), lo, lo + 1, lo + 3, lo + 12, 2 * lo + 5, None]


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("decode", [False, True])
def test_kernel_equals_reference(timed: bool, decode: bool) -> None:
    checked = evicting = infeasible = 0
    for seed in range(30):
        tr = random_trace(seed, n_requests=20, aligned=0.5 if seed % 3 else 0.0)
        pg = engine_pages(tr)
        sched = Schedule.from_service_model(tr, 3000, 30) if timed else Schedule.serial(pg.n_requests)
        inf_hits = None
        for n in _pools(_serial_min_pool(pg, decode, 16))[::-1]:
            hits, failed = vllm_pool_run(pg, sched, decode, n)
            rh, rf = vllm_reference(pg, n, sched.arrival_s, sched.prefill_end_s, sched.finish_s, decode)
            assert failed == rf, (seed, n)
            if failed < 0:
                assert hits.tolist() == rh, (seed, n)
                inf_hits = hits if inf_hits is None else inf_hits
                evicting += int((hits != inf_hits).any())
            infeasible += failed >= 0
            checked += 1
    assert evicting > 10 and checked > 200
    assert infeasible > 0


@pytest.mark.parametrize("decode", [False, True])
def test_one_replay_equals_per_size(decode: bool) -> None:
    compared = 0
    for seed in range(50):
        tr = random_trace(seed, n_requests=30, aligned=0.0 if seed % 2 else 0.5)
        pg = engine_pages(tr)
        lo = _serial_min_pool(pg, decode, 16)
        pools = [lo - 1, lo, lo + 1, lo + 2, lo + 5, lo + 20, None]
        a = simulate_vllm(pg, pools, "serial", decode=decode, method="per-size")
        b = simulate_vllm(pg, pools, "serial", decode=decode)
        assert b.method == ("one-replay" if _no_duplicates(pg, 16) else "per-size")
        np.testing.assert_array_equal(a.hit_tokens, b.hit_tokens)
        np.testing.assert_array_equal(a.failed_request, b.failed_request)
        assert a.min_feasible_pool == b.min_feasible_pool == lo
        compared += b.method == "one-replay"
    assert compared >= 20


def test_one_replay_needs_its_hypothesis() -> None:
    """With a 16-aligned resend of a cached prompt (a duplicate block) the replay can differ."""
    differ = 0
    for seed in range(40):
        pg = engine_pages(random_trace(seed, n_requests=30))
        if _no_duplicates(pg, 16):
            continue
        lo = _serial_min_pool(pg, False, 16)
        pools = [lo, lo + 1, lo + 2, lo + 5, lo + 20]
        differ += not np.array_equal(simulate_vllm(pg, pools, "serial", method="per-size").hit_tokens,
                                     vllm_one_replay(pg, pools))
    assert differ > 0


def test_min_feasible_pool() -> None:
    for seed in range(12):
        tr = random_trace(seed, n_requests=20)
        pg = engine_pages(tr)
        for decode in (False, True):
            lo = _serial_min_pool(pg, decode, 16)
            res = simulate_vllm(pg, [lo - 1, lo], "serial", decode=decode, method="per-size")
            assert res.failed_request[0] >= 0 and res.failed_request[1] < 0
            assert res.min_feasible_pool == lo and res.min_feasible_proved
            timed = simulate_vllm(tr, [lo - 1], "model", decode=decode)
            n = timed.min_feasible_pool
            assert n is not None and not timed.min_feasible_proved
            assert vllm_pool_run(pg, Schedule.from_service_model(tr), decode, n)[1] < 0
            assert n == lo or vllm_pool_run(pg, Schedule.from_service_model(tr), decode, n - 1)[1] >= 0


def test_known_engine_rules() -> None:
    """Whole-prompt hit 16 * floor((P - 1) / 16); N - 1 usable blocks; partial pages never hit."""
    ids = np.array([7, 7, 7, 8, 7])
    tr = stackdist.RequestTrace(ids, np.array([0, 1, 2, 3, 4, 5]), np.array([16, 16, 16, 16, 9]),
                                np.zeros(5), np.array([16, 16, 16, 16, 9]), np.ones(5, np.int64), block_size=16)
    res = simulate_vllm(tr, [1, 2, None], "serial", decode=False)
    assert res.failed_request.tolist() == [0, -1, -1]
    assert res.hit_tokens[2].tolist() == [0, 0, 0, 0, 0]  # P = 16: (P - 1) // 16 = 0 pages
    tr2 = stackdist.RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 16, 16, 16]),
                                 np.zeros(2), np.array([32, 32]), np.ones(2, np.int64), block_size=16)
    assert simulate_vllm(tr2, [None], "serial").hit_tokens[0].tolist() == [0, 16]


def test_bad_arguments() -> None:
    tr = random_trace(1, n_requests=5)
    with pytest.raises(ValueError, match="pool_blocks must be"):
        simulate_vllm(tr, [0])
    with pytest.raises(ValueError, match="pool_blocks must be"):
        simulate_vllm(tr, [True])
    with pytest.raises(ValueError, match="schedule must"):
        simulate_vllm(tr, [None], Schedule.serial(3))
    with pytest.raises(ValueError, match="method must"):
        simulate_vllm(tr, [None], method="fast")
