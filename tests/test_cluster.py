"""serving/cluster.py (K workers, shared tier, kv-aware routing) against a direct simulation."""

from __future__ import annotations

import numpy as np
import pytest
from naive import random_requests, request_trace, run_stackdist

from kvlab.kvsim import EnginePrefixCache
from stackdist.planning.engine_plan import ROUTERS, EngineOptions, assign_workers
from stackdist.planning.routing import (
    ONE_CACHE,
    ROUTING_ROUTERS,
    RoutingOptions,
    routing_section,
    run_routing,
)
from stackdist.serving.cluster import simulate_cluster
from stackdist.serving.schedule import Schedule
from stackdist.serving.semantics import replay_requests, request_hits

BIG = 10**9  # "infinite" for the reference caches


def reference_cluster(requests, tokens, k, router, gpu_blocks, shared_blocks, weight=1.0, block_size=4, seed=0,
                      held=None):
    """The rules of serving/cluster.py, directly: one EnginePrefixCache (OrderedDict) per worker
    and one for the shared tier; per request (worker, GPU hit tokens, shared-tier hit tokens).
    kv-aware ties: request r's draw u_r = default_rng(seed).random(n)[r] picks the
    floor(u_r x m)-th of the m cheapest workers (Dynamo: uniformly at random)."""
    gpus = [EnginePrefixCache(BIG if gpu_blocks is None else gpu_blocks) for _ in range(k)]
    shared = EnginePrefixCache(BIG if shared_blocks is None else shared_blocks)
    draws = np.random.default_rng(seed).random(len(requests)).tolist()
    out = []
    for r, blocks in enumerate(requests):
        if held is not None:  # the best worker's GPU prefix at the arrival (the regret's reference)
            held.append(max(sum(tokens[r][: gpu.lookup(blocks)]) for gpu in gpus))
        if isinstance(router, str):  # kv-aware: Dynamo's cost (nothing running), ties at random
            found = [sum(tokens[r][: gpu.lookup(blocks)]) for gpu in gpus]
            p = sum(tokens[r])
            cost = [-float(found[v]) if weight == float("inf") else
                    weight * float(p - found[v]) / block_size + float(len(blocks)) for v in range(k)]
            tied = [v for v in range(k) if cost[v] == min(cost)]
            w = tied[int(draws[r] * len(tied))]
        else:
            w = int(router[r])
        g = gpus[w].lookup(blocks)
        s = shared.lookup(blocks[g:])
        shared.commit(blocks[g:])  # received (s hits) and computed blocks, written through
        gpus[w].commit(blocks)  # everything, the shared hits copied in
        out.append((w, sum(tokens[r][:g]), sum(tokens[r][g:g + s])))
    return out


def _case(seed):
    rng = np.random.default_rng(seed)
    requests = random_requests(rng, int(rng.integers(1, 40)), int(rng.integers(1, 9)), int(rng.integers(1, 4)))
    last = [int(rng.integers(1, 5)) for _ in requests]
    trace = request_trace(requests, 4, last)
    tokens = np.split(trace.block_tokens, trace.offsets[1:-1])
    return rng, requests, [t.tolist() for t in tokens], trace


def _routes(trace, k, rng):
    schedule = Schedule.from_service_model(trace, 20.0, 5.0)  # some overlap, so least-loaded spreads
    routes = {name: assign_workers(trace, EngineOptions(workers=k, router=name, seed=int(rng.integers(9))), schedule)
              for name in ROUTERS}
    routes["kv-aware"] = "kv-aware"
    return routes


def test_kernel_equals_direct_simulation():
    for seed in range(40):  # one test item, 40 seeded cases
        rng, requests, tokens, trace = _case(seed)
        k = int(rng.integers(1, 5))
        longest = max((len(r) for r in requests), default=0)
        gpus = [0, 1, longest, longest + 1, int(rng.integers(0, 3 * longest + 2)), None]
        shared = [0, 1, longest + 1, int(rng.integers(0, 4 * longest + 2)), None]
        for name, route in _routes(trace, k, rng).items():
            got = simulate_cluster(trace, k, route, gpus, shared, available=seed % 2 == 0)
            assert (got.available_hit_tokens is not None) == (name == "kv-aware" or seed % 2 == 0)
            for i, (c, s) in enumerate(got.pools):
                held: list[int] = []
                want = reference_cluster(requests, tokens, k, route, c, s, held=held)
                assert got.worker[i].tolist() == [w for w, _, _ in want], (name, c, s)
                assert got.gpu_hit_tokens[i].tolist() == [g for _, g, _ in want], (name, c, s)
                assert got.shared_hit_tokens[i].tolist() == [x for _, _, x in want], (name, c, s)
                if got.available_hit_tokens is not None:
                    assert got.available_hit_tokens[i].tolist() == held, (name, c, s)


def test_no_shared_tier_is_independent_engine_caches():
    for seed in range(15):  # one test item, 15 seeded cases
        rng, _, _, trace = _case(seed)
        k = int(rng.integers(1, 5))
        caps = [0, 1, 3, 7, 20]
        for route in _routes(trace, k, rng).values():
            got = simulate_cluster(trace, k, route, caps, [0])
            assert not got.shared_hit_tokens.any()
            for i, c in enumerate(caps):
                workers = got.worker[i]
                for w in range(k):
                    index = np.flatnonzero(workers == w)
                    if index.size:
                        replay = replay_requests(trace.select(index), "engine")
                        assert request_hits(replay, c, tokens=True).tolist() == got.gpu_hit_tokens[i][index].tolist()


def test_one_worker_is_the_engine_curve_and_the_routing_baseline():
    for seed in range(15):  # one test item, 15 seeded cases
        rng, _, _, trace = _case(seed)
        k = int(rng.integers(2, 5))
        replay = replay_requests(trace, "engine")
        caps = [0, 1, 2, 5, 9]
        one = simulate_cluster(trace, 1, np.zeros(trace.n_requests, np.int64), [c * k for c in caps])
        for i, c in enumerate(caps):  # one cache of K x C: the engine semantics at K x C
            assert one.gpu_hit_tokens[i].tolist() == request_hits(replay, c * k, tokens=True).tolist()
        alone = simulate_cluster(trace, 3, "kv-aware", [0], caps)  # no GPU: the shared tier is one engine cache
        for i, s in enumerate(caps):
            assert alone.shared_hit_tokens[i].tolist() == request_hits(replay, s, tokens=True).tolist()
            ties = np.floor(np.random.default_rng(0).random(trace.n_requests) * 3).astype(int)  # all 3 tied
            assert alone.worker[i].tolist() == ties.tolist()


def test_kv_aware_follows_the_prefix_and_ties_at_random():
    trace = request_trace([[1, 2], [3], [1, 2, 4], [5], [3, 6]], 4)
    got = simulate_cluster(trace, 2, "kv-aware", [10])  # seed 0
    # draws u = default_rng(0).random(5) = 0.637, 0.270, 0.041, 0.017, 0.813; a tie of 2 -> floor(2u)
    # r0 [1,2]: nothing cached, tie -> floor(1.27) = 1; r1 [3]: tie -> floor(0.54) = 0;
    # r2 [1,2,4]: worker 1 holds 1,2 (8 tokens; cost 1 x (12 - 8) / 4 + 3 = 4 < 6) -> 1;
    # r3 [5]: tie -> floor(0.03) = 0; r4 [3,6]: worker 0 holds 3 (cost 1 + 2 = 3 < 4) -> 0
    assert got.worker[0].tolist() == [1, 0, 1, 0, 0]
    assert got.gpu_hit_tokens[0].tolist() == [0, 0, 8, 0, 4]
    assert got.available_hit_tokens[0].tolist() == [0, 0, 8, 0, 4]  # the router took the best each time
    other = simulate_cluster(trace, 2, "kv-aware", [10], seed=3)  # another seed moves the ties only
    assert other.gpu_hit_tokens[0].tolist() == [0, 0, 8, 0, 4]


def test_bad_arguments():
    trace = request_trace([[1], [2]], 4)
    with pytest.raises(ValueError, match="router"):
        simulate_cluster(trace, 2, "least-busy", [1])
    with pytest.raises(ValueError, match="0..1"):
        simulate_cluster(trace, 2, np.array([0, 2]), [1])
    with pytest.raises(ValueError, match="gpu_blocks"):
        simulate_cluster(trace, 2, "kv-aware", [-1])
    with pytest.raises(ValueError, match="workers"):
        simulate_cluster(trace, 0, "kv-aware", [1])
    empty = simulate_cluster(request_trace([], 4), 2, "kv-aware", [1, None], [0, 3])
    assert empty.worker.shape == (4, 0)


# ---- planning/routing.py and the CLI ------------------------------------------------------------


def test_routing_section_adds_up_and_compares_every_router():
    _, requests, tokens, trace = _case(3)
    opts = RoutingOptions(workers=3, router="kv-aware", gpu_blocks=(2, None), shared_blocks=(0, 5))
    results = run_routing(trace, opts)
    assert set(results) == {*ROUTING_ROUTERS, ONE_CACHE} and next(iter(results)) == "kv-aware"
    counted = np.arange(trace.n_requests) >= 2  # warm-up: the first two requests
    section = routing_section(results, trace, opts, counted, 10)
    assert [(p["gpu_blocks"], p["shared_blocks"]) for p in section["pools"]] == [(2, 0), (2, 5), ("inf", 0), ("inf", 5)]
    for i, row in enumerate(section["pools"]):
        assert row["hit_tokens"] == sum(w["hit_tokens"] for w in row["per_worker"]) == row["gpu_hit_tokens"] + row["shared_hit_tokens"]
        assert sum(w["requests"] for w in row["per_worker"]) == section["requests"] == trace.n_requests - 2
        c, s = results["kv-aware"].pools[i]
        want = reference_cluster(requests, tokens, 3, "kv-aware", c, s)[2:]
        assert row["hit_tokens"] == sum(g + x for _, g, x in want)
    for row in section["routing_worth"]:
        one = results[ONE_CACHE]
        i = one.pools.index((None if row["one_cache_blocks"] == "inf" else row["one_cache_blocks"],
                             None if row["shared_blocks"] == "inf" else row["shared_blocks"]))
        assert row["one_cache_prefix_token_hit_rate"] == one.hit_tokens[i][counted].sum() / trace.input_length[counted].sum()
        assert row["best_router"] in ROUTING_ROUTERS and set(row["routers"]) == set(ROUTING_ROUTERS)
        assert set(row["routing_regret_percentage_points"]) == set(ROUTING_ROUTERS)  # every router probed the fleet
        if row["shared_blocks"] != 0:
            continue
        c = None if row["gpu_blocks"] == "inf" else row["gpu_blocks"]
        for name in ROUTING_ROUTERS:  # the regret from the direct simulation's best worker at each arrival
            route = name if name == "kv-aware" else results[name].worker[0]
            held: list[int] = []
            want = reference_cluster(requests, tokens, 3, route, c, 0, held=held)
            lost = sum(h - g for h, (_, g, _), on in zip(held, want, counted) if on)
            total = trace.input_length[counted].sum()
            assert row["routing_regret_percentage_points"][name] == pytest.approx(100 * lost / total), name


def test_recorded_workers_use_the_trace_labels():
    trace = dataclass_replace(request_trace([[1, 2], [1, 2], [1, 3]], 4), workers=np.array([7, 9, 7]))
    results = run_routing(trace, RoutingOptions(workers="recorded", gpu_blocks=(4,), compare=False))
    assert list(results) == ["recorded"] and results["recorded"].worker[0].tolist() == [0, 1, 0]
    section = routing_section(results, trace, RoutingOptions(workers="recorded"), None, 1)
    assert section["worker_labels"] == [7, 9] and section["routing_worth"] is None
    assert [w["hit_tokens"] for w in section["pools"][0]["per_worker"]] == [4, 0]


def dataclass_replace(trace, **fields):
    import dataclasses

    return dataclasses.replace(trace, **fields)


def test_cli_cluster_json_and_table(capsys, tmp_path):
    import json

    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": i * 100, "input_length": 512 * (2 + i % 3), "output_length": 1,
             "hash_ids": [0, 1 + i % 2, *range(10 + i, 10 + i + i % 3)]} for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run_stackdist(capsys, "plan", path, "--semantics", "engine", "--workers", "2", "--router", "kv-aware",
                                   "--gpu-blocks", "2,4", "--shared-blocks", "0,3", "--json", "-")
    assert code == 0, err
    plan = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    cluster = plan["cluster"]
    assert cluster["workers"] == 2 and cluster["router"] == "kv-aware" and len(cluster["pools"]) == 4
    assert len(cluster["routing_worth"]) == 4
    code, out, err = run_stackdist(capsys, "plan", path, "--semantics", "engine", "--workers", "2", "--gpu-blocks", "3")
    assert code == 0, err
    assert "what routing is worth" in out and "per worker: 0:" in out
    code, out, err = run_stackdist(capsys, "plan", path, "--workers", "2", "--json", "-")  # default sizes
    assert code == 0, err
    assert len(json.loads(out)["cluster"]["pools"]) >= 2


def test_kv_aware_left_out_of_a_huge_comparison(monkeypatch):
    from stackdist.planning import routing

    monkeypatch.setattr(routing, "KV_AWARE_MAX_ENTRIES", 3)
    _, _, _, trace = _case(4)
    opts = RoutingOptions(workers=2, gpu_blocks=(3,))
    results = run_routing(trace, opts)
    assert "kv-aware" not in results and "round-robin" in results
    assert "kv-aware left out" in routing_section(results, trace, opts, None, 1)["notes"][0]


@pytest.mark.parametrize("extra, message", [
    (["--shared-blocks", "x"], "--shared-blocks must be"),
    (["--shared-blocks", "2", "--semantics", "per-access"], "--shared-blocks"),
    (["--router", "kv-aware", "--semantics", "engine,vllm", "--workers", "recorded"], "--router kv-aware"),
    (["--router", "kv-aware", "--semantics", "engine"], "--router kv-aware"),
    (["--router", "kv-aware", "--semantics", "vllm"], "--router kv-aware"),
    (["--router-overlap-weight", "-1", "--workers", "2"], "--router-overlap-weight"),
    (["--router-overlap-weight", "nan", "--workers", "2"], "--router-overlap-weight"),
    (["--shared-blocks", "2", "--semantics", "vllm", "--gpu-blocks", "x"], "--gpu-blocks"),
    (["--router", "nearest", "--workers", "2"], "invalid choice"),
])
def test_cli_bad_arguments_exit_2(capsys, extra, message):
    code, out, err = run_stackdist(capsys, "plan", "tests/data/mooncake_small.jsonl", *extra)
    assert code == 2 and out == "" and message in err, err


def test_kv_aware_overlap_weight_equals_direct_simulation():
    for seed in range(10):  # one test item, 10 seeded cases
        rng, requests, tokens, trace = _case(seed)
        k = int(rng.integers(2, 5))
        weight = [0.0, 0.25, 1.0, 3.0, float("inf")][seed % 5]
        got = simulate_cluster(trace, k, "kv-aware", [2, 5, None], [0, 3], overlap_weight=weight)
        for i, (c, s) in enumerate(got.pools):
            want = reference_cluster(requests, tokens, k, "kv-aware", c, s, weight)
            assert got.worker[i].tolist() == [w for w, _, _ in want], (weight, c, s)
            assert got.hit_tokens[i].tolist() == [g + x for _, g, x in want], (weight, c, s)
        if weight == 0.0:  # load only: the caches are ignored, every worker tied: uniformly at random
            ties = np.floor(np.random.default_rng(0).random(trace.n_requests) * k).astype(int)
            assert got.worker[0].tolist() == ties.tolist()
