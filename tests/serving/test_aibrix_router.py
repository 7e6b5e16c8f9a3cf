"""AIBrix's prefix-cache router (stackdist.serving.aibrix_router): hand-worked traces, a plain
reference (prefix_cache.go's routeOriginal with hash.go's table as an OrderedDict LRU of chunk
keys, lru_store.go's expiry at every tick, the load counted by scanning) on seeded random traces,
schedules and settings, and the plan CLI."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
from traces_random import random_trace, router_trace_file

from stackdist.planning.engine_plan import (
    ROUTERS,
    STATIC_ROUTERS,
    EngineOptions,
    assign_workers,
)
from stackdist.serving.aibrix_router import (
    AIBRIX_PREFIX_CACHE,
    PrefixCacheConfig,
    aibrix_prefix_cache,
)
from stackdist.serving.schedule import Schedule
from stackdist.serving.sglang_router import router_pages
from stackdist.traces import RequestTrace

PAGE = 16  # tokens; a page is block_number // 16 of the table at 4 bytes a block and 4 characters a token


def _trace(blocks, tokens=None):
    """One 16-token page per block; every request's pages full unless ``tokens`` says."""
    return RequestTrace.from_blocks(blocks, block_size=16, last_tokens=tokens or [16] * len(blocks))


def _route(trace, k, seed=0, schedule=None, **config):
    return aibrix_prefix_cache(router_pages(trace), schedule or Schedule.serial(trace.n_requests), k,
                               PrefixCacheConfig(**config), seed).tolist()


def test_hand_worked_serial_affinity_and_the_highest_match():
    """Serial (no load), 3 workers, whatever the draws:

    - r0 [1, 2, 3] -> any worker, a. r1 [1, 2, 4] -> a (66 %, the only holder).
    - r2 [5] -> any. r3 [5, 6] -> r2's worker.
    """
    t = _trace([[1, 2, 3], [1, 2, 4], [5], [5, 6]])
    seen = set()
    for seed in range(20):
        w = _route(t, 3, seed)
        assert w[1] == w[0] and w[3] == w[2], (seed, w)
        seen.add((w[0], w[2]))
    assert len(seen) > 3


def test_hand_worked_imbalance_and_the_std_bound():
    """Requests 0-9 of [1] at t = 0..9, all running until 100, 2 workers.

    Imbalance 0 (any difference): r0 -> any worker, a; r1: loads (1, 0) differ -> only b takes
    part, b does not hold [1]: no match -> the least loaded, b; r2: loads equal, both hold [1]
    (100 %) -> one at random; r3: unequal -> only the less loaded takes part and holds [1] -> it;
    so the loads are equal after every pair: 5 requests each.
    Defaults (imbalance 8, bound mean + 1 std): r_j sees loads (j, 0), bound j/2 + j/sqrt(2) >= j,
    so a (100 %) is within and wins, up to r8 (8 - 0 is not above 8); r9 sees (9, 0): imbalanced,
    only b takes part, no match -> b.
    Std factor 0: r1 sees (1, 0), bound 0.5: a is above it -> the least loaded, b.
    """
    schedule = Schedule(np.arange(10.0), np.arange(10.0) + 0.5, np.full(10, 100.0))
    t = _trace([[1]] * 10)
    for seed in range(5):
        w = _route(t, 2, seed, schedule, imbalance_abs_count=0)
        assert sorted(np.bincount(w, minlength=2).tolist()) == [5, 5], w
        d = _route(t, 2, seed, schedule)
        assert d == [d[0]] * 9 + [1 - d[0]], d
        z = _route(t, 2, seed, schedule, std_factor=0.0)
        assert z[1] != z[0], z


def test_hand_worked_lru_capacity_and_expiry():
    """A table of 2 pages (block_number 32): r0 [1, 2, 3] leaves pages 2 and 3 (page 1, written
    first, is the tail and goes): r1 [1, 2, 3] matches nothing (page 1 is the walk's start) ->
    any worker. With room for 3 pages r1 follows r0. Expiry: ttl 1.5 s, serial (request i at
    i s): r1 [7] at 1 s, r2 [1, 2, 3] at 2 s: page 1 stamped 0 is 2 s old at the tick of 2 s
    (> 1.5) and gone -> any worker; ttl 2.5 s keeps it -> r2 follows r0."""
    t = _trace([[1, 2, 3], [1, 2, 3]])
    assert any(_route(t, 4, s, block_number=32)[1] != _route(t, 4, s, block_number=32)[0] for s in range(10))
    assert all(_route(t, 4, s, block_number=48)[1] == _route(t, 4, s, block_number=48)[0] for s in range(10))
    e = _trace([[1, 2, 3], [7], [1, 2, 3]])
    assert any((w := _route(e, 4, s, ttl_s=1.5))[2] != w[0] for s in range(10))
    assert all((w := _route(e, 4, s, ttl_s=2.5))[2] == w[0] for s in range(10))


def test_the_unmatched_choice_is_uniform():
    t = _trace([[1]])
    counts = np.bincount([_route(t, 3, seed)[0] for seed in range(600)], minlength=3)
    assert counts.min() >= 150 and counts.max() <= 250, counts


def _go_bound(loads, factor):
    values = [float(x) for x in loads]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean + factor * std


def _reference(trace, schedule, k, config, seed):
    """prefix_cache.go's routeOriginal as plain Python (module docstring of the tests)."""
    n, bs = trace.n_requests, trace.block_size
    P = trace.input_length
    cap = int(config.block_number * config.block_bytes // (config.chars_per_token * PAGE))
    draws = np.random.default_rng(seed).random(n)
    store: OrderedDict = OrderedDict()  # chunk -> [pods, last write]; the most recent last
    order = sorted(range(n), key=lambda r: (schedule.arrival_s[r], r))
    out = [-1] * n
    t0 = schedule.arrival_s[order[0]] if n else 0.0
    ticks = 0
    for r in order:
        t = schedule.arrival_s[r]
        while config.eviction_interval_s > 0 and t0 + (ticks + 1) * config.eviction_interval_s <= t:
            ticks += 1
            now = t0 + ticks * config.eviction_interval_s
            for c in [c for c, (_, last) in store.items() if now - last > config.ttl_s]:
                del store[c]
        load = [0] * k
        for q in range(n):
            if out[q] >= 0 and schedule.finish_s[q] > t:
                load[out[q]] += 1
        a, p = int(trace.offsets[r]), int(P[r])
        chunks = [(int(trace.block_ids[a + (j * PAGE) // bs]), (j * PAGE % bs) // PAGE, min(PAGE, p - j * PAGE))
                  for j in range(-(-p // PAGE))]
        ready = set(range(k))
        if max(load) - min(load) > config.imbalance_abs_count:
            ready = {w for w in range(k) if load[w] == min(load)}
        matched: dict[int, int] = {}
        for i, c in enumerate(chunks):
            if c not in store or not store[c][0]:
                break
            percent = min(PAGE * (i + 1), p) * 100 // p
            hit = False
            for w in sorted(ready):
                if w in store[c][0]:
                    matched[w] = percent
                    hit = True
                else:
                    ready.discard(w)
            if not hit:
                break
        bound = _go_bound(load, config.std_factor)
        ranked = sorted(matched, key=lambda w: (-matched[w], load[w]))  # stable over index order
        within = [w for w in ranked if load[w] <= bound]
        if within:
            tied = [w for w in within if (matched[w], load[w]) == (matched[within[0]], load[within[0]])]
        else:
            tied = [w for w in range(k) if load[w] == min(load)]
        w = tied[min(int(draws[r] * len(tied)), len(tied) - 1)]
        for c in chunks:  # AddPrefix
            if c in store:
                store[c][0].add(w)
                store[c][1] = t
                store.move_to_end(c)
            else:
                store[c] = [{w}, t]
                if len(store) > cap:
                    store.popitem(last=False)
        out[r] = w
    return out


def _random_schedule(rng, n):
    arrival = rng.integers(0, max(n // 2, 1), n).astype(float)  # ties, not in index order
    finish = arrival + rng.integers(0, 12, n)  # some zero-length
    return Schedule(arrival, arrival, finish)


def _random_config(rng):
    return PrefixCacheConfig(imbalance_abs_count=int(rng.choice([0, 1, 2, 8])), std_factor=float(rng.choice([0, 0.5, 1])),
                             block_number=16 * int(rng.integers(0, 30)), ttl_s=float(rng.choice([0.5, 2, 5, 1200])),
                             eviction_interval_s=float(rng.choice([0, 0.5, 1])))


def test_equals_the_reference_on_random_traces():
    for seed in range(80):  # one test item, 80 seeded cases
        rng = np.random.default_rng(seed)
        trace = random_trace(seed, int(rng.integers(1, 60)))
        k = int(rng.integers(1, 6))
        schedule = (Schedule.serial(trace.n_requests) if seed % 3 == 0 else
                    Schedule.from_service_model(trace, 500.0, 20.0) if seed % 3 == 1 else
                    _random_schedule(rng, trace.n_requests))
        config = PrefixCacheConfig() if seed % 5 == 0 else _random_config(rng)
        got = aibrix_prefix_cache(router_pages(trace), schedule, k, config, seed).tolist()
        assert got == _reference(trace, schedule, k, config, seed), (seed, k, config)


def test_a_router_of_the_plan_not_static():
    assert AIBRIX_PREFIX_CACHE in ROUTERS and AIBRIX_PREFIX_CACHE not in STATIC_ROUTERS
    trace = random_trace(3, 30)
    schedule = Schedule.from_service_model(trace, 500.0, 20.0)
    got = assign_workers(trace, EngineOptions(workers=3, router=AIBRIX_PREFIX_CACHE, seed=4), schedule)
    assert got.tolist() == _reference(trace, schedule, 3, PrefixCacheConfig(), 4)
    with pytest.raises(ValueError, match="workers"):
        aibrix_prefix_cache(router_pages(trace), schedule, 0)
    with pytest.raises(ValueError, match="block_number"):
        PrefixCacheConfig(block_number=-1)


def test_plan_cli_routes_with_it(tmp_path, capsys):
    from naive import run_stackdist

    out = tmp_path / "plan.json"
    code, stdout, _ = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics",
                                    "vllm,engine", "--workers", "2", "--router", AIBRIX_PREFIX_CACHE,
                                    "--gpu-blocks", "inf", "--json", out)
    assert code == 0, stdout
    assert stdout.count(f"{AIBRIX_PREFIX_CACHE}: AIBrix prefix-cache") == 2  # the model's and the semantics'
    text = out.read_text()
    assert f'"router": "{AIBRIX_PREFIX_CACHE}"' in text and f'"{AIBRIX_PREFIX_CACHE}":' in text
    assert "an LRU of 200,000 4-byte blocks of text, 12,500 16-token pages" in stdout
    code, stdout, _ = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics", "vllm",
                                    "--workers", "2", "--router", AIBRIX_PREFIX_CACHE, "--router-table-blocks", "1600000",
                                    "--gpu-blocks", "inf")
    assert code == 0 and "an LRU of 1,600,000 4-byte blocks of text, 100,000 16-token pages" in stdout
    code, _, stderr = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics", "vllm",
                                    "--workers", "2", "--router", AIBRIX_PREFIX_CACHE, "--schedule", "scheduler")
    assert code == 2 and "--router must be one of" in stderr
    code, _, stderr = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--semantics", "vllm", "--workers", "2",
                                    "--router", AIBRIX_PREFIX_CACHE, "--router-table-blocks", "-1")
    assert code == 2 and "--router-table-blocks" in stderr
