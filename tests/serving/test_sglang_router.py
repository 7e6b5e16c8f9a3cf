"""SGLang's cache-aware router (stackdist.serving.sglang_router): hand-worked traces, a plain
reference (a dict trie per worker, tree.rs's heap eviction, the load counted by scanning) on
seeded random traces and schedules, the joint run and the plan CLI."""

from __future__ import annotations

import heapq
import json
import math

import numpy as np
import pytest
from traces_random import random_trace, router_trace_file

from stackdist.planning.engine_plan import (
    ROUTERS,
    STATIC_ROUTERS,
    EngineOptions,
    assign_workers,
)
from stackdist.serving.pages import engine_pages
from stackdist.serving.routed import simulate_routed
from stackdist.serving.schedule import Schedule
from stackdist.serving.sglang_router import (
    SGLANG_CACHE_AWARE,
    CacheAwareConfig,
    router_pages,
    sglang_cache_aware,
)
from stackdist.traces import RequestTrace

PAGE_CHARS = 4 * 16  # max_tree_size characters per page (4 characters a token)


def _trace(blocks, tokens=None):
    """One 16-token page per block; every request's pages full unless ``tokens`` says."""
    return RequestTrace.from_blocks(blocks, block_size=16, last_tokens=tokens or [16] * len(blocks))


def _route(blocks, schedule=None, **config):
    t = _trace(blocks)
    return sglang_cache_aware(engine_pages(t), schedule or Schedule.serial(t.n_requests), 2,
                              CacheAwareConfig(**config)).tolist()


def test_hand_worked_match_threshold_and_smallest_tree():
    """Defaults (cache_threshold 0.3), serial (no load), 2 workers:

    - r0 [1,2,3,4]: no tree matches, rate 0 -> the smallest tree, 0 = 0 -> worker 0 (lowest
      index); w0 holds 4 pages.
    - r1 [5,6,7]: no match -> the smallest tree, w1 (0 < 4); w1 holds 3 pages.
    - r2 [1,2,8,9]: w0 matches 2 pages: 32/64 = 0.5 > 0.3 -> w0 (now 6 pages).
    - r3 [5,6,10]: w1 matches 2 pages: 32/48 = 0.67 > 0.3 -> w1.

    At cache_threshold 0.5 r2's 0.5 is not above it: the smallest tree, w1 (3 < 4), which then
    holds 7 pages; r3's 0.67 still wins w1. At 0.8 r3 is not above it either: the smallest
    tree, w0 (4 < 7).
    """
    blocks = [[1, 2, 3, 4], [5, 6, 7], [1, 2, 8, 9], [5, 6, 10]]
    assert _route(blocks) == [0, 1, 0, 1]
    assert _route(blocks, cache_threshold=0.5) == [0, 1, 1, 1]
    assert _route(blocks, cache_threshold=0.8) == [0, 1, 1, 0]
    # a partial last page: 20 tokens of which 16 match -> rate 0.8 (tokens, not pages)
    t = _trace([[1, 2], [1, 3]], tokens=[16, 4])
    assert sglang_cache_aware(engine_pages(t), Schedule.serial(2), 2, CacheAwareConfig(cache_threshold=0.79)).tolist() == [0, 0]
    assert sglang_cache_aware(engine_pages(t), Schedule.serial(2), 2, CacheAwareConfig(cache_threshold=0.8)).tolist() == [0, 1]


def test_hand_worked_imbalance_goes_to_the_least_loaded():
    """All four requests run from their arrival (0, 1, 2, 3) to 10.

    balance_abs_threshold 0, balance_rel_threshold 1.5:
    - r0 [1,2]: loads (0, 0), balanced; no match -> smallest tree, w0.
    - r1 [1,2]: loads (1, 0): 1 - 0 > 0 and 1 > 0 x 1.5 -> imbalanced: the least loaded, w1
      (its tree gets [1,2] too, no match is made).
    - r2 [1,2]: loads (1, 1), balanced; both match 2 pages: the lowest index, w0.
    - r3 [3,4]: loads (2, 1): 1 > 0 and 2 > 1.5 -> w1.
    With the defaults (64, 1.5) nothing is imbalanced: r1, r2 follow r0's tree to w0, r3 [3,4]
    matches nothing and goes to the smallest tree, w1 (0 pages against 2).
    """
    schedule = Schedule(np.arange(4.0), np.arange(4.0) + 0.5, np.full(4, 10.0))
    blocks = [[1, 2], [1, 2], [1, 2], [3, 4]]
    assert _route(blocks, schedule, balance_abs_threshold=0, balance_rel_threshold=1.5) == [0, 1, 0, 1]
    assert _route(blocks, schedule) == [0, 0, 0, 1]
    # finished requests are not load: each one over before the next arrives, nothing is imbalanced
    done = Schedule(np.arange(4.0), np.arange(4.0) + 0.25, np.arange(4.0) + 1.0)
    assert _route(blocks, done, balance_abs_threshold=0, balance_rel_threshold=1.5) == [0, 0, 0, 1]


def test_hand_worked_eviction_by_size():
    """max_tree_size 64 characters = 1 page, eviction every second (serial: request i at i):

    - r0 [1,2,3,4] at 0 -> w0 (4 pages, stamped 1).
    - t=1: w0 evicted to 1 page, oldest first, deeper first: pages 4, 3, 2 go, page 1 stays.
      r1 [5] matches nothing -> the smallest tree, w1 (0 < 1).
    - t=2: nothing over. r2 [6]: sizes (1, 1) -> w0 (holds 1, 6).
    - t=3: w0 over: page 1 (stamped 1) is older than page 6 (stamped 3) and goes.
      r3 [1,2,3,4] matches nothing anywhere -> sizes (1, 1) -> w0.
    Without eviction r2 goes to the smaller tree w1 (1 page against 4) and r3 to w0's full match.
    """
    blocks = [[1, 2, 3, 4], [5], [6], [1, 2, 3, 4]]
    assert _route(blocks, max_tree_size=PAGE_CHARS, eviction_interval_s=1.0) == [0, 1, 0, 0]
    assert _route(blocks, max_tree_size=PAGE_CHARS, eviction_interval_s=0.0) == [0, 1, 1, 0]


class _Node:
    __slots__ = ("children", "depth", "page", "parent", "ts")

    def __init__(self, page, parent, depth):
        self.children: dict[int, _Node] = {}
        self.page, self.parent, self.depth, self.ts = page, parent, depth, 0


def _reference(pages, schedule, k, config):
    """SGLang's cache_aware.rs select_worker and tree.rs, as plain Python: a dict trie per worker
    (a node per page), the load by scanning the requests routed so far, tree.rs's eviction (a
    heap of leaves, a parent pushed when it becomes one; ties: deeper, then the lower page id)."""
    B = pages.page_tokens
    roots = [_Node(-1, None, -1) for _ in range(k)]
    sizes = [0] * k
    limit = int(config.max_tree_size // (config.chars_per_token * B))
    n = pages.n_requests
    order = sorted(range(n), key=lambda r: (schedule.arrival_s[r], r))
    out = [-1] * n
    t0 = schedule.arrival_s[order[0]] if n else 0.0
    I = config.eviction_interval_s
    next_evict = t0 + I if I > 0 else math.inf

    def evict(w):
        heap = []
        stack = list(roots[w].children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if not node.children:
                heapq.heappush(heap, (node.ts, -node.depth, node.page, id(node), node))
        while heap and sizes[w] > limit:
            *_, node = heapq.heappop(heap)
            del node.parent.children[node.page]
            sizes[w] -= 1
            parent = node.parent
            if parent is not roots[w] and not parent.children:
                heapq.heappush(heap, (parent.ts, -parent.depth, parent.page, id(parent), parent))

    for clock, r in enumerate(order, start=1):
        t = schedule.arrival_s[r]
        if t >= next_evict:
            for w in range(k):
                evict(w)
            next_evict = t0 + (math.floor((t - t0) / I) + 1) * I
        load = [0] * k
        for q in range(n):
            if out[q] >= 0 and schedule.finish_s[q] > t:
                load[out[q]] += 1
        P = int(pages.input_tokens[r])
        text = pages.key[pages.offsets[r]:pages.offsets[r + 1]].tolist()[:-(-P // B)]
        if max(load) - min(load) > config.balance_abs_threshold and \
                np.float32(max(load)) > np.float32(min(load)) * np.float32(config.balance_rel_threshold):
            w = min(range(k), key=lambda i: (load[i], i))
        else:
            best, best_path = 0, []
            for v in range(k):
                node, path = roots[v], []
                for page in text:
                    if page not in node.children:
                        break
                    node = node.children[page]
                    path.append(node)
                if len(path) > len(best_path):
                    best, best_path = v, path
            for node in best_path:
                node.ts = clock
            rate = np.float32(min(B * len(best_path), P)) / np.float32(P) if P else np.float32(0)
            w = best if rate > np.float32(config.cache_threshold) else min(range(k), key=lambda i: (sizes[i], i))
        node = roots[w]
        for depth, page in enumerate(text):
            if page not in node.children:
                node.children[page] = _Node(page, node, depth)
                sizes[w] += 1
            node = node.children[page]
            node.ts = clock
        out[r] = w
    return out


def _random_schedule(rng, n):
    arrival = np.sort(rng.integers(0, max(n // 2, 1), n)).astype(float)  # ties
    prefill = arrival + rng.integers(0, 3, n)
    finish = prefill + rng.integers(0, 8, n)  # some zero-length
    return Schedule(arrival, prefill, finish)


def _random_config(rng):
    return CacheAwareConfig(
        cache_threshold=float(rng.choice([0.0, 0.3, 0.5, 0.9])),
        balance_abs_threshold=int(rng.choice([0, 1, 2, 64])),
        balance_rel_threshold=float(rng.choice([1.0, 1.1, 1.5])),
        eviction_interval_s=float(rng.choice([0.0, 0.5, 1.0, 3.0])),
        max_tree_size=int(rng.integers(1, 12)) * PAGE_CHARS + int(rng.integers(0, 2)) * 10)


def test_equals_the_reference_on_random_traces():
    for seed in range(60):  # one test item, 60 seeded cases
        rng = np.random.default_rng(seed)
        trace = random_trace(seed, int(rng.integers(1, 60)))
        pages = engine_pages(trace)
        k = int(rng.integers(1, 5))
        schedule = (Schedule.serial(trace.n_requests) if seed % 4 == 0 else Schedule.from_service_model(trace, 2000.0, 20.0)
                    if seed % 4 == 1 else _random_schedule(rng, trace.n_requests))
        config = CacheAwareConfig() if seed % 5 == 0 else _random_config(rng)
        got = sglang_cache_aware(pages, schedule, k, config).tolist()
        assert got == _reference(pages, schedule, k, config), (seed, k, config)


def test_joint_run_is_the_static_run_of_its_choices():
    trace = random_trace(7, 40)
    schedule = Schedule.from_service_model(trace, 2000.0, 20.0)  # overlapping requests
    pages = engine_pages(trace)
    chosen = sglang_cache_aware(pages, schedule, 3)
    for model in ("vllm", "sglang"):
        routed = simulate_routed(pages, model, 3, SGLANG_CACHE_AWARE, [None, 40], [0, 16], schedule)
        static = simulate_routed(pages, model, 3, chosen, [None, 40], [0, 16], schedule)
        assert routed.router == SGLANG_CACHE_AWARE
        for row in range(len(routed.pools)):
            assert routed.worker[row].tolist() == (chosen.tolist() if routed.failed_request[row] < 0 else [-1] * 40)
        assert np.array_equal(routed.gpu_hit_tokens, static.gpu_hit_tokens)
        assert np.array_equal(routed.shared_hit_tokens, static.shared_hit_tokens)


def test_a_router_of_the_plan_not_static_under_the_scheduler():
    assert SGLANG_CACHE_AWARE in ROUTERS and SGLANG_CACHE_AWARE not in STATIC_ROUTERS
    trace = random_trace(3, 30)
    schedule = Schedule.serial(trace.n_requests)
    options = EngineOptions(workers=3, router=SGLANG_CACHE_AWARE, router_cache_threshold=0.5)
    assert assign_workers(trace, options, schedule).tolist() == \
        sglang_cache_aware(engine_pages(trace), schedule, 3, CacheAwareConfig(cache_threshold=0.5)).tolist()
    small = RequestTrace.from_blocks([[1, 2], [1, 2], [], [3]], block_size=4)  # blocks of 4 tokens, an empty prompt
    assert router_pages(small).page_tokens == 4
    assert assign_workers(small, EngineOptions(workers=2, router=SGLANG_CACHE_AWARE), Schedule.serial(4)).tolist() == [0, 0, 1, 1]


def test_plan_cli_routes_with_it(tmp_path, capsys):
    from naive import run_stackdist

    out = tmp_path / "plan.json"
    code, stdout, _ = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics",
                                    "vllm,engine", "--workers", "2", "--router", SGLANG_CACHE_AWARE,
                                    "--router-cache-threshold", "0.3", "--gpu-blocks", "inf", "--json", out)
    assert code == 0, stdout
    assert f"router {SGLANG_CACHE_AWARE}" in stdout
    assert stdout.count(f"{SGLANG_CACHE_AWARE}: SGLang sgl-router cache_aware") == 2  # the model's and the semantics'
    report = json.loads(out.read_text())
    text = json.dumps(report)
    assert f'"router": "{SGLANG_CACHE_AWARE}"' in text
    assert f'"{SGLANG_CACHE_AWARE}":' in text  # a routing-worth column (both the model and the semantics)


@pytest.mark.parametrize("argv, says", [
    (["--router-cache-threshold", "1.5"], "--router-cache-threshold must be"),
    (["--schedule", "scheduler"], "--router must be one of"),
])
def test_plan_cli_checks_it(tmp_path, capsys, argv, says):
    from naive import run_stackdist

    code, _, stderr = run_stackdist(capsys, "plan", router_trace_file(tmp_path), "--block-size", "32", "--semantics", "vllm",
                                    "--workers", "2", "--router", SGLANG_CACHE_AWARE, *argv)
    assert code == 2 and says in stderr
