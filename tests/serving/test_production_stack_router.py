"""The vLLM Production Stack's prefixaware router (stackdist.serving.production_stack_router):
hand-worked traces, a plain reference (hashtrie.py's HashTrie as a dict trie of chunk keys, its
longest_prefix_match intersection walk, routing_logic.py's choice among the matched endpoints)
on seeded random traces and schedules, the draws' uniformity, and the plan CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from traces_random import random_trace, router_trace_file

from stackdist.planning.engine_plan import (
    ROUTERS,
    STATIC_ROUTERS,
    EngineOptions,
    assign_workers,
)
from stackdist.serving.production_stack_router import (
    PRODUCTION_STACK_PREFIXAWARE,
    PrefixAwareConfig,
    prefixaware_pages,
    production_stack_prefixaware,
)
from stackdist.serving.schedule import Schedule
from stackdist.traces import RequestTrace


def _route(trace, k, seed=0, schedule=None):
    return production_stack_prefixaware(prefixaware_pages(trace), schedule or Schedule.serial(trace.n_requests),
                                        k, seed).tolist()


def _trace(blocks, tokens=None):
    """One 32-token chunk per block; every request's chunks full unless ``tokens`` says."""
    return RequestTrace.from_blocks(blocks, block_size=32, last_tokens=tokens or [32] * len(blocks))


def test_hand_worked_the_longest_match_holders():
    """Whatever the draws (20 seeds, 3 workers):

    - r0 [1, 2]: nothing in the trie -> any worker, w0 say.
    - r1 [1, 3]: chunk 1 is held by w0 only -> w0 (the walk stops at chunk 3, not in the trie).
    - r2 [4]: nothing matches -> any worker.
    - r3 [1, 2, 5]: [1, 2] is held by w0 only -> w0.
    - r4 [4, 6]: chunk 4 is held by r2's worker only -> r2's.
    """
    t = _trace([[1, 2], [1, 3], [4], [1, 2, 5], [4, 6]])
    seen = set()
    for seed in range(20):
        w = _route(t, 3, seed)
        assert w[1] == w[0] and w[3] == w[0] and w[4] == w[2], (seed, w)
        seen.add((w[0], w[2]))
    assert len(seen) > 3  # the unmatched requests do go to different workers


def test_every_first_chunk_stays_on_one_worker():
    """An insert adds its worker to every node of the path and a matched request can only go to
    the deepest matched node's workers, so every node holds one worker: requests sharing a first
    chunk (block and tokens) share a worker, whatever the rest (random traces, 4 workers)."""
    for seed in range(20):
        trace = random_trace(seed, 50, pages_per_block=2)  # 32-token blocks: one chunk each
        w = _route(trace, 4, seed)
        first: dict[tuple[int, int], int] = {}
        for r in range(trace.n_requests):
            chunk = (int(trace.block_ids[trace.offsets[r]]), min(32, int(trace.input_length[r])))
            assert first.setdefault(chunk, w[r]) == w[r], (seed, r)
    # every request sharing its first chunk: all on the first request's worker (no load is read)
    shared = _trace([[1, *range(10 * i + 2, 10 * i + 2 + (i % 3))] for i in range(30)])
    for seed in range(5):
        w = _route(shared, 4, seed)
        assert w == [w[0]] * 30


def test_a_short_last_chunk_matches_only_the_same_prompt_end():
    """r0: block 1 with 8 tokens (a short chunk); r1: block 1 with 32 tokens (a full chunk, a
    different string: no match, any worker); r2: block 1 with 8 tokens again (r0's worker)."""
    t = _trace([[1], [1], [1]], tokens=[8, 32, 8])
    routes = [_route(t, 2, seed) for seed in range(40)]
    assert all(w[2] == w[0] for w in routes)
    assert any(w[1] != w[0] for w in routes) and any(w[1] == w[0] for w in routes)


def test_an_empty_prompt_goes_anywhere():
    t = RequestTrace.from_blocks([[1, 2], [], [1, 2], []], block_size=32)
    for seed in range(10):
        w = _route(t, 2, seed)
        assert w[2] == w[0]


def test_the_unmatched_choice_is_uniform():
    """The first request (nothing in the trie) over 600 seeds and 3 workers: each worker 200
    times expected (sd 11.5); every count within 150..250."""
    t = _trace([[1]])
    counts = np.bincount([_route(t, 3, seed)[0] for seed in range(600)], minlength=3)
    assert counts.sum() == 600 and counts.min() >= 150 and counts.max() <= 250, counts


def _reference(trace, schedule, k, seed, chunk_tokens=32):
    """hashtrie.py and PrefixAwareRouter.route_request as plain Python: a dict trie keyed by each
    chunk's content (block id, chunk within the block, tokens), node endpoint sets, the
    intersection walk, the choice ``tied[floor(u x len)]`` among the sorted selection."""
    n = trace.n_requests
    bs = trace.block_size
    P = trace.input_length
    C = chunk_tokens if bs % chunk_tokens == 0 and (P >= 1).all() else bs
    draws = np.random.default_rng(seed).random(n)
    root = {"children": {}, "endpoints": set()}
    out = [-1] * n
    for r in sorted(range(n), key=lambda r: (schedule.arrival_s[r], r)):
        a = int(trace.offsets[r])
        chunks = []
        for j in range(-(-int(P[r]) // C)):
            block = int(trace.block_ids[a + (j * C) // bs])
            chunks.append((block, (j * C % bs) // C, min(C, int(P[r]) - j * C)))
        node, selected = root, set(range(k))
        for c in chunks:  # longest_prefix_match
            node = node["children"].get(c)
            if node is None:
                break
            inter = node["endpoints"] & selected
            if not inter:
                break
            selected = inter
        tied = sorted(selected)
        w = tied[min(int(draws[r] * len(tied)), len(tied) - 1)]
        node = root  # insert
        node["endpoints"].add(w)
        for c in chunks:
            node = node["children"].setdefault(c, {"children": {}, "endpoints": set()})
            node["endpoints"].add(w)
        out[r] = w
    return out


def _random_schedule(rng, n):
    arrival = rng.integers(0, max(n // 2, 1), n).astype(float)  # ties, and not in index order
    return Schedule(arrival, arrival + 1, arrival + 2)


def test_equals_the_reference_on_random_traces():
    for seed in range(80):  # one test item, 80 seeded cases
        rng = np.random.default_rng(seed)
        trace = random_trace(seed, int(rng.integers(1, 60)), pages_per_block=int(rng.integers(1, 5)))
        k = int(rng.integers(1, 6))
        schedule = (Schedule.serial(trace.n_requests) if seed % 3 == 0 else
                    Schedule.from_service_model(trace, 2000.0, 20.0) if seed % 3 == 1 else
                    _random_schedule(rng, trace.n_requests))
        got = production_stack_prefixaware(prefixaware_pages(trace), schedule, k, seed).tolist()
        assert got == _reference(trace, schedule, k, seed), (seed, k, trace.block_size)


def test_a_static_router_of_the_plan():
    assert PRODUCTION_STACK_PREFIXAWARE in ROUTERS and PRODUCTION_STACK_PREFIXAWARE in STATIC_ROUTERS
    trace = random_trace(3, 30)
    schedule = Schedule.from_service_model(trace, 2000.0, 20.0)
    got = assign_workers(trace, EngineOptions(workers=3, router=PRODUCTION_STACK_PREFIXAWARE, seed=5), schedule)
    assert got.tolist() == _reference(trace, schedule, 3, 5)
    assert PrefixAwareConfig().chunk_tokens == 32 and PrefixAwareConfig(chunk_chars=64, chars_per_token=2).chunk_tokens == 32
    with pytest.raises(ValueError, match="chunk_chars"):
        PrefixAwareConfig(chunk_chars=0)
    with pytest.raises(ValueError, match="workers"):
        production_stack_prefixaware(prefixaware_pages(trace), schedule, 0)


def test_plan_cli_routes_with_it(tmp_path, capsys):
    from naive import run_stackdist

    out = tmp_path / "plan.json"
    code, stdout, _ = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics",
                                    "vllm,engine", "--workers", "2", "--router", PRODUCTION_STACK_PREFIXAWARE,
                                    "--gpu-blocks", "inf", "--json", out)
    assert code == 0, stdout
    assert f"router {PRODUCTION_STACK_PREFIXAWARE}" in stdout
    text = out.read_text()
    assert f'"router": "{PRODUCTION_STACK_PREFIXAWARE}"' in text
    assert f'"{PRODUCTION_STACK_PREFIXAWARE}":' in text  # a routing-worth column
    sections = [s for s in _sections(json.loads(text)) if s.get("router") == PRODUCTION_STACK_PREFIXAWARE]
    assert len(sections) == 2 and all(s["router_rule"].startswith("vLLM Production Stack router prefixaware")
                                      for s in sections)  # the model's and the semantics'
    assert stdout.count(f"{PRODUCTION_STACK_PREFIXAWARE}: vLLM Production Stack router prefixaware") == 2


def _sections(node):
    """Every dict of a JSON report that has a 'router_rule' key."""
    if isinstance(node, dict):
        if "router_rule" in node:
            yield node
        for value in node.values():
            yield from _sections(value)
    elif isinstance(node, list):
        for value in node:
            yield from _sections(value)


def test_plan_cli_under_the_scheduler(tmp_path, capsys):
    from naive import run_stackdist

    code, stdout, stderr = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics",
                                         "vllm", "--workers", "2", "--router", PRODUCTION_STACK_PREFIXAWARE,
                                         "--gpu-blocks", "64", "--schedule", "scheduler", "--step-time", "0.01,0.0001")
    assert code == 0, stderr
    assert f"router {PRODUCTION_STACK_PREFIXAWARE}; each worker's own scheduler" in stdout


DRIVEN = Path(__file__).resolve().parent.parent / "data" / "engines" / "routers" / "production_stack_prefixaware.json"


def test_equals_the_product_trie_driven():
    """validation/drive_production_stack_router.py ran production-stack's own hashtrie.py (text of
    128 characters a block) with recorded draws: the model given the same draws picks the same
    worker for every request, and its candidates are the product's (one worker when anything
    matched, all when nothing did)."""
    report = json.loads(DRIVEN.read_text())
    assert report["chars_per_token"] * PrefixAwareConfig().chunk_tokens == 128
    total = 0
    for case in report["cases"]:
        reqs, routed = case["requests"], case["routed"]
        trace = RequestTrace.from_blocks([r["blocks"] for r in reqs], block_size=case["block_tokens"],
                                         last_tokens=[r["last_tokens"] for r in reqs])
        got = production_stack_prefixaware(prefixaware_pages(trace), Schedule.serial(trace.n_requests), case["workers"],
                                           draws=np.array([x["draw"] for x in routed]))
        assert got.tolist() == [x["worker"] for x in routed], case["seed"]
        assert all(len(x["matched"]) == (1 if x["match_chars"] else case["workers"]) for x in routed)
        total += len(reqs)
    assert total > 500
