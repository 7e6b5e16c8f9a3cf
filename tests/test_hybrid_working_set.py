"""The pool a target needs for a hybrid KV cache (stackdist/planning/hybrid_working_set.py), checked
directly: on tiny traces every pool from 2 to the never-evicting one is run (a brute-force scan),
and each answer must reach its target, its bracket's lower end must not, the answer must be the
scan's smallest pool whenever the scan's hits are monotone, a target is unreachable exactly when
the never-evicting pool misses it, and every non-monotone pair of probes is reported."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist

from stackdist.planning.hybrid_working_set import hybrid_search, non_monotone
from stackdist.serving.hybrid import GroupSpec, kv_cache_groups, simulate_hybrid
from stackdist.serving.hybrid_kernel import simulate_hybrid_fast
from stackdist.serving.schedule import Schedule
from stackdist.traces import read_mooncake

sys.path.insert(0, str(Path(__file__).resolve().parent / "serving"))
from traces_random import random_trace

MODELS = [
    [GroupSpec("sliding", 16, window=33), GroupSpec("full", 16)],
    [GroupSpec("chunked", 16, chunk=32)] * 2 + [GroupSpec("full", 16)],
    [GroupSpec("mamba", 32, checkpoint_alignment=32)] * 3 + [GroupSpec("full", 32)],
]


def _scan(t, groups, schedule, decode, counted):
    upper = len(groups) * int((-(-(t.input_length + (np.maximum(t.output_length, 1) - 1 if decode else 0)) // 16)).sum()) + 2
    pools = list(range(2, upper + 1))
    r = simulate_hybrid_fast(t, groups, pools, schedule, decode, chunk_tokens=48)
    hits = {p: int(r.hit_tokens[i][counted].sum()) if r.failed_request[i] < 0 else -1 for i, p in enumerate(pools)}
    return hits, upper


@pytest.mark.parametrize("seed", range(6))
def test_each_answer_against_a_scan_of_every_pool(seed):
    t = random_trace(seed, 14)
    layers = MODELS[seed % 3]
    groups = kv_cache_groups(layers)
    decode = bool(seed % 2)
    schedule = Schedule.serial(t.n_requests) if seed < 4 else Schedule.from_service_model(t)
    counted = np.ones(t.n_requests, bool)
    counted[:2] = False  # a warm-up: only the counted requests' hits
    targets = [0.3, 0.6, 0.9, 1.0]
    def run(model, pools):  # the model's own hybrid run, as the plan gives it
        return simulate_hybrid_fast(t, model, pools, schedule, decode, chunk_tokens=48)

    ws = hybrid_search(t, groups, run, decode, counted, 1024, targets)
    hyb, upper = _scan(t, groups, schedule, decode, counted)
    full = tuple(g for g in groups if g.kind == "full")
    fa, fa_upper = _scan(t, full, schedule, decode, counted)
    assert ws["ceiling_hit_tokens"] == hyb[upper] and ws["full_attention_ceiling_hit_tokens"] == fa[fa_upper]
    for target, row in zip(targets, ws["rows"], strict=True):
        need = math.ceil(target * fa[fa_upper] - 1e-9)
        assert row["hit_tokens_needed"] == need
        assert row["reachable"] == (need <= hyb[upper])
        checks = [(row["full_attention"], fa, need)] + ([(row, hyb, need)] if row["reachable"] else [])
        checks.append((row["of_own_ceiling"], hyb, math.ceil(target * hyb[upper] - 1e-9)))
        for answer, scan, want in checks:
            pool = answer["gpu_blocks"]
            assert scan[pool] >= want and answer["hit_tokens"] == scan[pool]
            below = answer["one_smaller"]
            if below is not None:
                assert scan[below["gpu_blocks"]] < want and below["gpu_blocks"] >= pool / 1.01 - 1
            feasible = [scan[p] for p in sorted(scan) if scan[p] >= 0]
            if all(a <= b for a, b in itertools.pairwise(feasible)):  # monotone: the scan's smallest pool
                assert pool == min(p for p in scan if scan[p] >= want)
        if not row["reachable"]:
            assert row["gpu_blocks"] is None and f"{hyb[upper]:,}" in row["unreachable"]
    probed = {p["gpu_blocks"]: p["hit_tokens"] for p in ws["points"]}
    assert all(hyb[p] == h for p, h in probed.items())
    assert "not a proof" in ws["search"]


def test_the_scan_itself_is_the_python_model():
    t = random_trace(3, 10)
    groups = kv_cache_groups(MODELS[0])
    counted = np.ones(t.n_requests, bool)
    fast, upper = _scan(t, groups, Schedule.serial(t.n_requests), False, counted)
    pools = list(range(2, upper + 1, 7))
    r = simulate_hybrid(t, groups, pools, "serial", False, chunk_tokens=48)
    assert [int(r.hit_tokens[i].sum()) if r.failed_request[i] < 0 else -1 for i in range(len(pools))] == \
        [fast[p] for p in pools]


def test_non_monotone_probes_are_reported():
    assert non_monotone({2: -1, 3: 10, 4: 10, 5: 8, 6: 12, 7: 11}) == [
        {"smaller_pool": 3, "smaller_hit_tokens": 10, "pool": 5, "hit_tokens": 8},
        {"smaller_pool": 6, "smaller_hit_tokens": 12, "pool": 7, "hit_tokens": 11}]


def test_the_plan_fills_the_working_set_of_a_hybrid_model(tmp_path, capsys):
    # hybrid_two_miss: full attention alone hits 2,304 tokens with a pool that never evicts, the
    # gpt-oss hybrid 1,792 (tests/test_hybrid_end_to_end.py): 50 % of 2,304 is reachable, 90 % is not
    trace_path = Path(__file__).parent / "data" / "hybrid_two_miss.jsonl"
    js = tmp_path / "plan.json"
    code, out, err = run_stackdist(capsys, "plan", trace_path, "--format", "mooncake", "--semantics", "vllm", "--model",
                                   "gpt-oss-120b", "--schedule", "serial", "--no-decode", "--gpu-blocks", "inf",
                                   "--targets", "0.5,0.9", "--json", js)
    assert code == 0, err
    section = json.loads(js.read_text())["engine_models"]["vllm"]
    ws = section["working_set"]
    assert (ws["full_attention_ceiling_hit_tokens"], ws["ceiling_hit_tokens"]) == (2304, 1792)
    low, high = ws["rows"]
    assert low["reachable"] and not high["reachable"] and high["gpu_blocks"] is None
    assert "1,792" in high["unreachable"] and "unreachable" in out and "not a proof" in out
    t = read_mooncake(trace_path)
    groups = kv_cache_groups([GroupSpec("sliding", 16, window=128), GroupSpec("full", 16)] * 18)
    pools = [low["gpu_blocks"], low["one_smaller"]["gpu_blocks"]]
    ref = simulate_hybrid(t, groups, pools, "serial", False, chunk_tokens=8192)  # the pure-Python model
    got = [int(ref.hit_tokens[i].sum()) if ref.failed_request[i] < 0 else -1 for i in range(2)]
    assert got[0] == low["hit_tokens"] >= 1152 > got[1]
    assert low["gib"] == pytest.approx(low["gpu_blocks"] * section["hybrid"]["bytes_per_block"] / 2**30)
    assert low["other_groups_cost_blocks"] == low["gpu_blocks"] - low["full_attention"]["gpu_blocks"]


def test_on_workers_each_probe_runs_every_workers_cache():
    # two workers behind round-robin: every answer is checked against each worker's own hybrid
    # cache run directly (the pure-Python model on that worker's requests at that pool)
    from stackdist.planning.engine_plan import EngineOptions, run_engine_models
    from stackdist.planning.engine_working_set import engine_working_set

    t = random_trace(11, 16)
    groups = kv_cache_groups(MODELS[0])
    opts = EngineOptions(models=("vllm",), pools=(None,), schedule="serial", decode=False, workers=2,
                         router="round-robin", kv_groups=groups, max_num_batched_tokens=48, kv_block_bytes=1024)
    counted = np.ones(t.n_requests, bool)
    ws = engine_working_set(run_engine_models(t, opts)["vllm"], t, opts, counted, 64, [0.3, 0.6, 1.0])

    def hits(pool):
        total = 0
        for w in range(2):
            sub = t.select(np.arange(w, t.n_requests, 2))
            r = simulate_hybrid(sub, groups, [pool], "serial", False, chunk_tokens=48)
            if r.failed_request[0] >= 0:
                return -1
            total += int(r.hit_tokens[0].sum())
        return total

    assert ws["ceiling_hit_tokens"] == hits(None)
    for row in ws["rows"]:
        for answer in [row["of_own_ceiling"]] + ([row] if row["reachable"] else []):
            need = answer["hit_tokens_needed"]
            assert hits(answer["gpu_blocks"]) == answer["hit_tokens"] >= need
            if answer["one_smaller"] is not None:
                assert hits(answer["one_smaller"]["gpu_blocks"]) < need
