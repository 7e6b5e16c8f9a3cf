"""serving/routed.py (K workers of the vllm / sglang models, kv-aware routing, shared tier) against
a direct simulation built from the reference engines of tests/serving/serving_reference.py."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "serving"))
from serving_reference import (
    B,
    SglangReference,
    VllmReference,
    _checkpoint,
    _common,
    dynamo_pick_ref,
    llmd_pick_ref,
    ref_events,
    request_pages,
    sglang_usage,
    vllm_usage,
)
from traces_random import random_trace

from stackdist.serving.cluster import simulate_cluster
from stackdist.serving.pages import engine_pages
from stackdist.serving.routed import simulate_routed
from stackdist.serving.schedule import Schedule
from stackdist.serving.sglang import simulate_sglang
from stackdist.serving.vllm import simulate_vllm


def _sglang_probe(eng, key):
    """Pages match_prefix would match, without stamping or splitting anything."""
    node, matched = eng.root, 0
    while key and key[0] in node.children:
        child = node.children[key[0]]
        n = _common(child.key, key)
        matched += n
        if n < len(child.key):
            break
        node, key = child, key[n:]
    return matched


class _Worker:
    """One reference engine (vLLM's block pool or SGLang's radix tree) and its request steps."""

    def __init__(self, model, pool, pages, decode):
        self.model, self.pages = model, pages
        P, O = pages.input_tokens.tolist(), pages.output_tokens.tolist()
        size = pool if pool is not None else sum(-(-(P[r] + max(O[r], 1)) // B) for r in range(len(P))) + 2
        self.eng = VllmReference(size) if model == "vllm" else SglangReference(size)
        self.P, self.hashes, self.state, self.pool = P, {}, {}, pool

    def probe(self, r):
        keys = request_pages(self.pages, r)
        if self.model == "vllm":
            return B * len(self.eng.lookup([("p", k) for k in keys[: self.P[r] // B]], self.P[r]))
        return B * _sglang_probe(self.eng, keys[: (self.P[r] - 1) // B])

    def full(self, r):
        """The full prompt pages the worker holds from the start (llm-d's KV-block index match)."""
        keys = request_pages(self.pages, r)[: self.P[r] // B]
        if self.model == "vllm":
            j = 0
            while j < len(keys) and self.eng.get_cached_block(("p", keys[j])) is not None:
                j += 1
            return j
        return _sglang_probe(self.eng, keys)

    def usage(self):
        if self.pool is None:
            return 0.0
        return vllm_usage(self.eng) if self.model == "vllm" else sglang_usage(self.eng, self.pool)

    def step(self, kind, r, k):
        """One event; returns the hit tokens at an arrival, False when an allocation fails."""
        keys, p, eng = request_pages(self.pages, r), self.P[r], self.eng
        if self.model == "vllm":
            if kind == 3:
                self.hashes[r] = [("p", keys[j]) for j in range(p // B)]
                computed = eng.lookup(self.hashes[r], p)
                return B * len(computed) if eng.allocate_slots(r, self.hashes[r], p, p, computed) else False
            if kind == 1:
                h = self.hashes[r]
                while len(h) < (p + k) // B:
                    h.append(("g", r, len(h)))
                return eng.allocate_slots(r, h, p + k, p + k)
            if kind == 0:
                eng.free_request(r)
            return True
        if kind == 3:
            m, node = eng.match_prefix(keys[: (p - 1) // B])
            eng.lock(node)
            eng.evict_to_free(p - B * m + B)
            need = -(-p // B) - m
            if need > eng.free_pages:
                return False
            eng.free_pages -= need
            self.state[r] = {"lock": node, "protected": m, "seq": p}
            return B * m
        if kind == 2:
            _checkpoint(eng, self.state[r], keys[: p // B])
        elif kind == 1:
            s = self.state[r]
            s["seq"] += 1
            eng.evict_to_free(B)
            if (s["seq"] - 1) % B == 0:
                if eng.free_pages < 1:
                    return False
                eng.free_pages -= 1
        elif kind == 0:
            s = self.state.pop(r)
            gen = [("g", r, j) for j in range(p // B, s["seq"] // B)]
            _checkpoint(eng, s, keys[: p // B] + gen, prompt_pages=p // B)
            if s["seq"] % B:
                eng.free_pages += 1
            eng.unlock(s["lock"])
        return True


def reference_routed(model, pages, schedule, decode, k, router, pool, shared, weight, temperature=0.0, weights=(2.0, 1.0, 1.0),
                     seed=0):
    """Per request (worker, GPU hit tokens, shared hit tokens), or the failing request (int).

    Random choices from ``np.random.default_rng(seed).random(n)``: request r's draw at its arrival."""
    workers = [_Worker(model, pool, pages, decode) for _ in range(k)]
    n = pages.n_requests
    P = pages.input_tokens.tolist()
    draws = np.random.default_rng(seed).random(n).tolist()
    where, gpu, tier = [-1] * n, [0] * n, [0] * n
    running = [{} for _ in range(k)]  # worker -> {request: its page keys}
    pending = [{} for _ in range(k)]  # worker -> {request: prompt tokens still to compute}
    lru = OrderedDict()
    cap = math.inf if shared is None else shared
    probes = [0] * n
    for _t, kind, r, step in ref_events(schedule.arrival_s, schedule.prefill_end_s, schedule.finish_s,
                                        pages.output_tokens, decode):
        keys = request_pages(pages, r)
        if kind == 3:
            hits = [workers[v].probe(r) for v in range(k)]
            if isinstance(router, str) and router == "llm-d":
                total = P[r] // B
                queue = [len(pending[v]) for v in range(k)]  # routed, prefill not ended
                scores = []
                for v in range(k):
                    prefix = min(workers[v].full(r) / total, 1.0) if total > 0 else 0.0
                    q = 1.0 if max(queue) == min(queue) else (max(queue) - queue[v]) / (max(queue) - min(queue))
                    s = 0.0
                    s += weights[0] * prefix
                    s += weights[1] * (1.0 - workers[v].usage())
                    s += weights[2] * q
                    scores.append(s)
                where[r] = llmd_pick_ref(scores, draws[r])
            elif isinstance(router, str):
                costs = []
                for v in range(k):
                    active = set().union(*running[v].values()) if running[v] else set()
                    blocks = len(active) + sum(1 for x in keys if x not in active)
                    cost = -float(hits[v]) if math.isinf(weight) else weight * float(sum(pending[v].values()) + P[r] - hits[v]) / B + float(blocks)
                    costs.append(cost)
                where[r] = dynamo_pick_ref(costs, draws[r], temperature)
            else:
                where[r] = int(router[r])
            probes[r] = hits[where[r]]
        w = where[r]
        got = workers[w].step(kind, r, step)
        if got is False:
            return r
        if kind == 3:
            assert got == probes[r]  # routed = delivered: the router probed the pool it lands in, at this moment
            gpu[r] = got
            running[w][r], pending[w][r] = set(keys), P[r] - got
            g, j = got // B, got // B
            while j < (P[r] - 1) // B and keys[j] in lru:
                j += 1
            tier[r] = B * (j - g)
            if shared != 0:
                for i in range(P[r] // B - 1, g - 1, -1):
                    lru[keys[i]] = True
                    lru.move_to_end(keys[i])
                    if len(lru) > cap:
                        lru.popitem(last=False)
        elif kind == 2:
            del pending[w][r]
        elif kind == 0:
            del running[w][r]
    return list(zip(where, gpu, tier))


def _check(model, trace, schedule, decode, k, router, pools, shared, weight=1.0, temperature=0.0, weights=None, seed=0):
    pages = engine_pages(trace)
    got = simulate_routed(trace, model, k, router, pools, shared, schedule, decode, overlap_weight=weight,
                          temperature=temperature, weights=weights, seed=seed)
    w3 = [{"prefix": 2.0, "kv-cache": 1.0, "queue": 1.0, **(weights or {})}[x] for x in ("prefix", "kv-cache", "queue")]
    for i, (pool, s) in enumerate(got.pools):
        want = reference_routed(model, pages, schedule, decode, k, router, pool, s, weight, temperature, w3, seed)
        label = (model, k, pool, s, weight)
        if isinstance(want, int):
            assert got.failed_request[i] == want and (got.gpu_hit_tokens[i] == -1).all(), label
            continue
        assert got.failed_request[i] == -1, label
        assert got.worker[i].tolist() == [w for w, _, _ in want], label
        assert got.gpu_hit_tokens[i].tolist() == [g for _, g, _ in want], label
        assert got.shared_hit_tokens[i].tolist() == [x for _, _, x in want], label
    return got


def _schedule(trace, rng, timed):
    if not timed:
        return Schedule.serial(trace.n_requests)
    return Schedule.from_service_model(trace, float(rng.choice([300.0, 3000.0])), float(rng.choice([5.0, 50.0])))


@pytest.mark.parametrize("model", ["vllm", "sglang"])
@pytest.mark.parametrize("seed", range(12))
def test_kv_aware_equals_direct_simulation(model, seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(seed, n_requests=int(rng.integers(2, 30)))
    k = 1 + seed % 4
    timed = seed % 3 != 0
    decode = bool(seed % 2)
    peak = int((-(-(trace.input_length + trace.output_length) // 16)).max())
    pools = [peak + 1, peak + 3, 2 * peak + int(rng.integers(0, 8)), None]  # tight (may be infeasible), loose, inf
    weight = [1.0, 0.0, math.inf, 0.5, 4.0][seed % 5]
    temperature = [0.0, 0.0, 0.5, 2.0][seed % 4]
    _check(model, trace, _schedule(trace, rng, timed), decode, k, "kv-aware", pools, [0, 3, None], weight, temperature,
           seed=seed)


@pytest.mark.parametrize("model", ["vllm", "sglang"])
@pytest.mark.parametrize("seed", range(12))
def test_llm_d_equals_direct_simulation(model, seed):
    """llm-d's scorers and picker against the reference: default and drawn weights, serial and
    timed schedules, tight (usage near 1, may be infeasible), loose and infinite pools."""
    rng = np.random.default_rng(500 + seed)
    trace = random_trace(500 + seed, n_requests=int(rng.integers(2, 30)))
    k = 1 + seed % 4
    peak = int((-(-(trace.input_length + trace.output_length) // 16)).max())
    pools = [peak + 1, peak + 3, 2 * peak + int(rng.integers(0, 8)), None]
    weights = None if seed % 3 == 0 else {"prefix": float(rng.choice([0.0, 1.0, 3.0])),
                                          "kv-cache": float(rng.choice([0.0, 1.0, 2.0])),
                                          "queue": float(rng.choice([0.0, 1.0, 2.0]))}
    _check(model, trace, _schedule(trace, rng, seed % 3 != 0), bool(seed % 2), k, "llm-d", pools, [0, 3], weights=weights,
           seed=seed)


@pytest.mark.parametrize("model", ["vllm", "sglang"])
@pytest.mark.parametrize("seed", range(6))
def test_static_routes_equal_the_per_worker_engines(model, seed):
    """With a static assignment the joint run is K independent engine runs (and the reference)."""
    rng = np.random.default_rng(100 + seed)
    trace = random_trace(100 + seed, n_requests=25)
    k = 2 + seed % 3
    route = rng.integers(0, k, trace.n_requests)
    schedule = _schedule(trace, rng, seed % 2 == 0)
    pools = [40, 90, None]
    got = _check(model, trace, schedule, True, k, route, pools, [0, 5])
    run = simulate_vllm if model == "vllm" else simulate_sglang
    for w in range(k):
        index = np.flatnonzero(route == w)
        if not index.size:
            continue
        sub = Schedule(schedule.arrival_s[index], schedule.prefill_end_s[index], schedule.finish_s[index])
        alone = run(trace.select(index), pools, sub, True)
        for i, pool in enumerate(pools):
            if alone.failed_request[i] < 0 and got.failed_request[2 * i] < 0:
                assert got.gpu_hit_tokens[2 * i][index].tolist() == alone.hit_tokens[i].tolist()


def test_conversation_trace_slice(repo_root, tmp_path):
    from stackdist.traces import read_requests

    with open(repo_root / "data/traces/mooncake_conversation_trace.jsonl") as fh:
        head = [next(fh) for _ in range(10)]
    (tmp_path / "head.jsonl").write_text("".join(head))
    trace = read_requests(str(tmp_path / "head.jsonl"), "mooncake")
    schedule = Schedule.from_service_model(trace, 10000.0, 50.0)
    for model in ("vllm", "sglang"):
        got = _check(model, trace, schedule, False, 3, "kv-aware", [1500, None], [1000])
        assert len(set(got.worker[-1].tolist())) > 1  # the load term spreads the requests


def test_serial_kv_aware_agrees_with_the_engine_semantics_cluster():
    """Where the semantics match (serial, no eviction, every prompt ending in a partial page of
    its own, so vLLM's P - 1 cap never bites), vLLM's kv-aware routing is the engine cluster's."""
    rng = np.random.default_rng(7)
    from naive import request_trace

    for _ in range(10):
        n = int(rng.integers(2, 25))
        ids: dict[tuple[int, ...], int] = {}  # prefix-chained: one id per whole prefix
        requests = []
        for r in range(n):
            head = tuple(int(x) for x in rng.integers(0, 3, int(rng.integers(0, 4))))
            requests.append([ids.setdefault(head[: i + 1], len(ids)) for i in range(len(head))] + [10_000 + r])
        trace = request_trace(requests, 16, [int(rng.integers(1, 16)) for _ in requests])
        for k in (1, 2, 4):
            for weight in (1.0, 0.0, math.inf):
                vllm = simulate_routed(trace, "vllm", k, "kv-aware", [None], [0], "serial", overlap_weight=weight)
                engine = simulate_cluster(trace, k, "kv-aware", [None], overlap_weight=weight)
                assert vllm.worker.tolist() == engine.worker.tolist()
                assert vllm.gpu_hit_tokens.tolist() == engine.gpu_hit_tokens.tolist()


def test_bad_arguments():
    trace = random_trace(1, n_requests=3)
    with pytest.raises(ValueError, match="model"):
        simulate_routed(trace, "trtllm", 2, "kv-aware", [10])
    with pytest.raises(ValueError, match="overlap_weight"):
        simulate_routed(trace, "vllm", 2, "kv-aware", [10], overlap_weight=-1.0)
    with pytest.raises(ValueError, match="shared_blocks"):
        simulate_routed(trace, "vllm", 2, "kv-aware", [10], [-2])
    with pytest.raises(ValueError, match="0..1"):
        simulate_routed(trace, "vllm", 2, np.array([0, 1, 2]), [10])
    with pytest.raises(ValueError, match="router"):
        simulate_routed(trace, "sglang", 2, "round-robin", [10])


# ---- the plan: run_engine_models / engine_section / the CLI ------------------------------------


def _plan_trace(seed=5, n=24):
    return random_trace(seed, n_requests=n)


@pytest.mark.parametrize("router", ["kv-aware", "llm-d", "round-robin"])
def test_plan_cluster_for_models_equals_the_joint_simulation(router):
    from stackdist.planning.engine_plan import (
        ONE_CACHE,
        ROUTERS,
        EngineOptions,
        assign_workers,
        engine_section,
        run_engine_models,
        schedule_for,
    )

    trace = _plan_trace()
    opts = EngineOptions(models=("vllm", "sglang"), pools=(60, None), schedule="model", decode=True, workers=3,
                         router=router, shared_blocks=(0, 40), prefill_tokens_per_s=300.0, decode_tokens_per_s=20.0)
    results = run_engine_models(trace, opts)
    schedule = schedule_for(trace, opts)
    counted = np.arange(trace.n_requests) >= 3
    for model, result in results.items():
        route = router if router in ("kv-aware", "llm-d") else assign_workers(trace, opts, schedule)
        want = simulate_routed(trace, model, 3, route, [60, None], [0, 40], schedule, True)
        got = result.cluster
        assert got.pools == want.pools and got.failed_request.tolist() == want.failed_request.tolist()
        for i in range(len(got.pools)):
            if want.failed_request[i] < 0:
                assert got.worker[i].tolist() == want.worker[i].tolist()
                assert got.gpu_hit_tokens[i].tolist() == want.gpu_hit_tokens[i].tolist()
                assert got.shared_hit_tokens[i].tolist() == want.shared_hit_tokens[i].tolist()
        section = engine_section(result, trace, opts, 2, counted)["cluster"]
        assert section["semantics"] == model and section["workers"] == 3
        for row in section["pools"]:
            assert row["hit_tokens"] == sum(w["hit_tokens"] for w in row["per_worker"])
            assert sum(w["requests"] for w in row["per_worker"]) == section["requests"] == trace.n_requests - 3
        assert set(result.worth) == {*ROUTERS, "kv-aware", "llm-d", ONE_CACHE}
        total = trace.input_length[counted].sum()
        for row in section["routing_worth"]:  # every router's regret against its own joint run's best worker
            i = [60, "inf"].index(row["gpu_blocks"]) * 2 + [0, 40].index(row["shared_blocks"])
            for name, pp in row["routing_regret_percentage_points"].items():
                joint = simulate_routed(trace, model, 3, name if name in ("kv-aware", "llm-d") else
                                        assign_workers(trace, dataclasses.replace(opts, router=name), schedule),
                                        [60, None], [0, 40], schedule, True)
                lost = (joint.available_hit_tokens[i] - joint.gpu_hit_tokens[i])[counted].sum()
                assert pp == (None if joint.failed_request[i] >= 0 else pytest.approx(100 * lost / total)), name
            assert set(row["routing_regret_percentage_points"]) == {*ROUTERS, "kv-aware", "llm-d"}
        run = simulate_vllm if model == "vllm" else simulate_sglang
        one = run(trace, [180, None], schedule, True)  # one pool of 3 x 60
        total = trace.input_length[counted].sum()
        for row in section["routing_worth"]:
            i = [180, "inf"].index(row["one_cache_blocks"])
            if one.failed_request[i] >= 0:
                assert row["one_cache_prefix_token_hit_rate"] is None
            elif row["shared_blocks"] == 0:
                assert row["one_cache_prefix_token_hit_rate"] == one.hit_tokens[i][counted].sum() / total


def test_cli_per_request_has_the_cluster_columns(capsys, tmp_path):
    import csv
    import json

    from naive import run_stackdist

    from stackdist.traces import read_requests

    path = tmp_path / "t.jsonl"
    rng = np.random.default_rng(3)
    rows = [{"timestamp": 1000 * i, "input_length": 512 * 2 + int(rng.integers(1, 500)), "output_length": 20,
             "hash_ids": [0, 1 + i % 3, 10 + i]} for i in range(14)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_csv = tmp_path / "out.csv"
    code, out, err = run_stackdist(capsys, "plan", path, "--semantics", "vllm", "--workers", "2", "--router", "kv-aware",
                                   "--gpu-blocks", "200,inf", "--shared-blocks", "0,64", "--per-request", out_csv,
                                   "--json", "-")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["engine_models"]["vllm"]["cluster"]["router"] == "kv-aware"
    table = list(csv.DictReader(out_csv.open()))
    assert list(table[0])[6:] == ["worker_200", "hit_tokens_200", "shared_hit_tokens_200_64",
                                  "worker_inf", "hit_tokens_inf", "shared_hit_tokens_inf_64",
                                  "available_hit_tokens_200", "available_hit_tokens_inf"]  # the fleet's best, last
    trace = read_requests(str(path), "mooncake")
    want = simulate_routed(trace, "vllm", 2, "kv-aware", [200, None], [64], Schedule.from_service_model(trace), True)
    for i, label in enumerate(["200", "inf"]):
        assert [int(r[f"worker_{label}"]) for r in table] == want.worker[i].tolist()
        assert [int(r[f"hit_tokens_{label}"]) for r in table] == want.gpu_hit_tokens[i].tolist()
        assert [int(r[f"shared_hit_tokens_{label}_64"]) for r in table] == want.shared_hit_tokens[i].tolist()
    assert {r["worker"] for r in table} == {"-1"}
    code, out, err = run_stackdist(capsys, "plan", path, "--semantics", "vllm", "--workers", "2", "--gpu-blocks", "inf",
                                   "--per-request", out_csv)
    assert code == 0, err
    assert [int(r["worker"]) for r in csv.DictReader(out_csv.open())] == [i % 2 for i in range(14)]
    assert "vllm model on 2 workers (router round-robin" in out and "what routing is worth" in out


def test_cli_per_request_for_the_engine_semantics_cluster(capsys, tmp_path):
    import csv

    from naive import run_stackdist

    from stackdist.serving.cluster import simulate_cluster
    from stackdist.traces import read_requests

    out_csv = tmp_path / "out.csv"
    source = "tests/data/mooncake_small.jsonl"
    code, _out, err = run_stackdist(capsys, "plan", source, "--semantics", "engine", "--workers", "2",
                                   "--router", "kv-aware", "--gpu-blocks", "2,inf", "--shared-blocks", "0,3",
                                   "--per-request", out_csv)
    assert code == 0, err
    engine = list(csv.DictReader(out_csv.open()))
    assert {r["worker"] for r in engine} == {"-1"}
    trace = read_requests(source, "mooncake")
    want = simulate_cluster(trace, 2, "kv-aware", [2, None], [0, 3])
    assert [int(r["worker_2"]) for r in engine] == want.worker[0].tolist()
    assert [int(r["hit_tokens_inf"]) for r in engine] == want.gpu_hit_tokens[2].tolist()
    assert [int(r["shared_hit_tokens_2_3"]) for r in engine] == want.shared_hit_tokens[1].tolist()


@pytest.mark.parametrize("seed", range(8))
def test_vllm_infinite_pool_bitmap_equals_the_block_pool(seed):
    """vLLM's inf pool (a cached-key bitmap) against the block pool at a size that never evicts,
    decode reuse included (random continuations), kv-aware and static, timed schedules."""
    import dataclasses

    rng = np.random.default_rng(300 + seed)
    trace = random_trace(300 + seed, n_requests=int(rng.integers(5, 30)))
    pages = engine_pages(trace)
    n = trace.n_requests
    later = [int(rng.integers(r + 1, n)) if r + 1 < n and rng.random() < 0.5 else -1 for r in range(n)]
    pages = dataclasses.replace(pages, continued_by=np.array(later, np.int64))
    never = int((-(-(trace.input_length + trace.output_length) // 16)).sum()) + 1
    schedule = _schedule(trace, rng, True)
    k = 1 + seed % 3
    for route in ("kv-aware", rng.integers(0, k, n)):
        got = simulate_routed(pages, "vllm", k, route, [None, never], [0], schedule, True, overlap_weight=[1.0, math.inf][seed % 2])
        assert got.worker[0].tolist() == got.worker[1].tolist()
        assert got.gpu_hit_tokens[0].tolist() == got.gpu_hit_tokens[1].tolist()
