"""The compiled SGLang model equals the pure-Python reference written from SGLang's code."""

from __future__ import annotations

import numpy as np
import pytest
from serving_reference import sglang_reference
from traces_random import random_trace

import stackdist
from stackdist.serving.pages import engine_pages
from stackdist.serving.results import bisect_feasible
from stackdist.serving.schedule import Schedule
from stackdist.serving.sglang import (
    _prepare,
    _run,
    _serial_min_pages,
    sglang_pool_run,
    simulate_sglang,
)


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("decode", [False, True])
def test_kernel_equals_reference(timed: bool, decode: bool) -> None:
    checked = evicting = infeasible = 0
    for seed in range(30):
        tr = random_trace(seed + 1000, n_requests=20, aligned=0.5 if seed % 3 else 0.0)
        pg = engine_pages(tr)
        sched = Schedule.from_service_model(tr, 3000, 30) if timed else Schedule.serial(pg.n_requests)
        lo = _serial_min_pages(pg, decode, 16)
        inf_hits = None
        for n in [None, 2 * lo + 5, lo + 12, lo + 3, lo + 1, lo, max(lo - 1, 1)]:
            hits, failed = sglang_pool_run(pg, sched, decode, n)
            rh, rf = sglang_reference(pg, n, sched.arrival_s, sched.prefill_end_s, sched.finish_s, decode)
            assert failed == rf, (seed, n)
            if failed < 0:
                assert hits.tolist() == rh, (seed, n)
                inf_hits = hits if inf_hits is None else inf_hits
                evicting += int((hits != inf_hits).any())
            infeasible += failed >= 0
            checked += 1
    assert evicting > 10 and checked > 200
    assert infeasible > 0


def test_heap_compaction() -> None:
    """A lazy heap kept at its minimum size (compacting all the time) evicts the same leaves."""
    for seed in range(15):
        tr = random_trace(seed + 2000, n_requests=25)
        pg = engine_pages(tr)
        for decode in (False, True):
            sched = Schedule.from_service_model(tr, 3000, 30)
            prep = _prepare(pg, sched, decode, 16)
            lo = _serial_min_pages(pg, decode, 16)
            for n in (lo + 2, lo + 8, 2 * lo):
                assert _run(pg, prep, n, 16, heap_cap=0)[0].tolist() == _run(pg, prep, n, 16)[0].tolist()


def test_serial_feasibility_bound() -> None:
    for seed in range(12):
        tr = random_trace(seed, n_requests=20)
        pg = engine_pages(tr)
        for decode in (False, True):
            lo = _serial_min_pages(pg, decode, 16)
            res = simulate_sglang(pg, [lo - 1, lo] if lo > 1 else [lo], "serial", decode=decode)
            assert res.failed_request[-1] < 0
            if lo > 1:
                assert res.failed_request[0] >= 0
                assert res.min_feasible_pool == lo and res.min_feasible_proved
            sched = Schedule.serial(pg.n_requests)
            ok = lambda n, pg=pg, sched=sched, decode=decode: sglang_pool_run(pg, sched, decode, n)[1] < 0
            assert bisect_feasible(ok, 1, 10 * lo) == lo


def test_hits_not_monotone_in_pool() -> None:
    """The module docstring's counterexample to inclusion (so there is no one-replay path)."""
    ids = [0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 0, 1, 7, 8, 4, 9]
    tok = [32, 32, 32, 23, 32, 32, 29, 32, 32, 29, 32, 32, 32, 8, 32, 31]
    cx = stackdist.RequestTrace(np.array(ids), np.array([0, 4, 7, 10, 14, 16]), np.array(tok), np.zeros(5),
                                np.array([119, 93, 93, 104, 63]), np.ones(5, np.int64), block_size=32)
    a, b = simulate_sglang(cx, [13, 14], "serial").hit_tokens
    assert (a > b).any() and (a < b).any()


def test_whole_prompt_hit_and_pool_unit() -> None:
    """N pages all usable; a resend hits 16 * floor((P - 1) / 16)."""
    tr = stackdist.RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 16, 16, 16]),
                                np.zeros(2), np.array([32, 32]), np.ones(2, np.int64), block_size=16)
    res = simulate_sglang(tr, [1, 2, None], "serial")
    assert res.failed_request.tolist() == [0, -1, -1]
    assert res.hit_tokens[1:].tolist() == [[0, 16], [0, 16]]
