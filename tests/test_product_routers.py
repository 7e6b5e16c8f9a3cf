"""The product routers (serving/router_pick.py, the kv-aware and llm-d modes of serving/routed.py)
on small traces worked out by hand, and the plan's flags for them. The seeded random traces
against the direct simulation are in tests/test_routing_models.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from naive import run_stackdist

from stackdist.serving.routed import simulate_routed
from stackdist.serving.router_pick import (
    dynamo_pick,
    llmd_pick,
    llmd_weights,
    router_draws,
)
from stackdist.serving.schedule import Schedule
from stackdist.traces import RequestTrace

U = np.random.default_rng(0).random(4)  # seed 0's draws: 0.637, 0.270, 0.041, 0.017


def test_dynamo_temperature_zero_is_the_least_cost_ties_uniform():
    assert dynamo_pick(np.array([3.0, 1.0, 2.0]), 0.99, 0.0) == 1  # one least: the draw does not matter
    # three tied at 1.0 (workers 0, 2, 3): floor(u x 3) -> 0, 1, 2 of them
    assert [dynamo_pick(np.array([1.0, 5.0, 1.0, 1.0]), u, 0.0) for u in (0.1, 0.4, 0.9)] == [0, 2, 3]


def test_dynamo_temperature_samples_the_softmax_of_the_scaled_costs():
    # costs 1, 2, 3 at T = 1: scaled -c / (3 - 1) = -0.5, -1, -1.5; exp(x + 0.5) = 1, e^-0.5, e^-1
    p = np.array([1.0, math.exp(-0.5), math.exp(-1.0)])
    p /= p.sum()  # 0.5065, 0.3072, 0.1863
    cost = np.array([1.0, 2.0, 3.0])
    assert [dynamo_pick(cost.copy(), u, 1.0) for u in (0.50, 0.51, 0.81, 0.82)] == [0, 1, 1, 2]
    assert p[0] < 0.51 and 0.81 < p[0] + p[1] < 0.82  # the draws straddle the cumulative 0.5065 and 0.8137
    # the frequencies over a fine grid of draws are the probabilities (to the grid's step)
    grid = (np.arange(100_000) + 0.5) / 100_000
    counts = np.bincount([dynamo_pick(cost.copy(), u, 1.0) for u in grid], minlength=3) / grid.size
    assert np.abs(counts - p).max() < 1e-4
    # a high temperature flattens it, equal costs are uniform
    assert dynamo_pick(np.array([2.0, 2.0]), 0.7, 1.0) == 1  # p = 0.5, 0.5: 0.7 > 0.5
    hot = np.bincount([dynamo_pick(cost.copy(), u, 100.0) for u in grid[::10]], minlength=3) / (grid.size // 10)
    assert np.abs(hot - 1 / 3).max() < 0.01


def test_llmd_picker_is_the_highest_ties_uniform():
    assert llmd_pick(np.array([0.5, 2.0, 1.0]), 0.99) == 1
    assert [llmd_pick(np.array([2.0, 0.0, 2.0]), u) for u in (0.2, 0.7)] == [0, 2]  # floor(2u)


def test_llmd_weights_and_draws():
    assert llmd_weights().tolist() == [2.0, 1.0, 1.0]  # llm-d's precise-prefix-cache sample configuration
    assert llmd_weights({"prefix": 3.0, "kv-cache": 2.0}).tolist() == [3.0, 2.0, 1.0]
    for bad in ({"load": 1.0}, {"queue": -1.0}, {"prefix": math.inf}):
        with pytest.raises(ValueError, match="llm-d weight"):
            llmd_weights(bad)
    assert router_draws(4, 0).tolist() == U.tolist()


def _trace(blocks):
    """Prompts of whole 16-token pages (``block_size`` 16), one output token each."""
    return RequestTrace.from_blocks(blocks, block_size=16, last_tokens=[16] * len(blocks))


def test_llm_d_serial_follows_the_index_match():
    # serial, infinite pools: no queue (score 1 each), usage 0 (score 1 each): score = 2 x prefix + 2
    t = _trace([[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3]])
    r = simulate_routed(t, "vllm", 2, "llm-d", [None], [0], "serial")
    # r0: prefix 0 on both: tie, floor(0.637 x 2) = 1 -> worker 1 (holds 1, 2, 3 after)
    # r1 [1,2,4]: worker 1 matches 2 of 3 blocks: 2 x 2/3 + 2 = 3.33 > 2 -> 1; the engine hits 2 pages (cap 47 // 16 = 2)
    # r2 [5,6]: tie, floor(0.041 x 2) = 0 -> worker 0
    # r3 [1,2,3]: worker 1's index matches all 3 blocks (score 4), the engine reports 2 (its P - 1 cap): 32 tokens
    assert r.worker[0].tolist() == [1, 1, 0, 1]
    assert r.gpu_hit_tokens[0].tolist() == [0, 32, 0, 32]
    assert r.available_hit_tokens[0].tolist() == [0, 32, 0, 32]


def test_llm_d_reads_queue_and_kv_usage():
    # vLLM pools of 10 blocks (9 usable: block 0 is the null block), prompts of 2 and 3 pages, no decode
    t = _trace([[1, 2], [3, 4], [1, 2, 5]])
    sched = Schedule(np.array([0.0, 0.5, 2.0]), np.array([1.0, 1.5, 2.5]), np.array([10.0, 10.0, 11.0]))
    r = simulate_routed(t, "vllm", 2, "llm-d", [10], [0], sched)
    # r0 at 0: all equal (2 + 1 + 1 = 4 each... prefix 0): tie -> floor(0.637 x 2) = 1; worker 1 uses 2 of 9 blocks
    # r1 at 0.5: worker 1 has r0 waiting (prefill ends at 1): queue scores w0 (1 - 0) / (1 - 0) = 1, w1 0;
    #   kv scores w0 1, w1 1 - (1 - 7/9) = 0.778; totals w0 2, w1 0.778 -> worker 0
    # r2 at 2: no one waiting (queue 1 each); both use 2 of 9 (kv 0.778 each); worker 1 matches 2 of 3 blocks:
    #   w1 = 2 x 2/3 + 0.778 + 1 = 3.11 > w0 = 1.78 -> worker 1, hit 2 pages
    assert r.worker[0].tolist() == [1, 0, 1]
    assert r.gpu_hit_tokens[0].tolist() == [0, 0, 32]
    # without the prefix scorer r2 is a tie (1.78 each): floor(0.041 x 2) = 0 -> worker 0, no hit; regret 32 tokens
    r = simulate_routed(t, "vllm", 2, "llm-d", [10], [0], sched, weights={"prefix": 0.0})
    assert r.worker[0].tolist() == [1, 0, 0] and r.gpu_hit_tokens[0].tolist() == [0, 0, 0]
    assert r.available_hit_tokens[0].tolist() == [0, 0, 32]


def test_kv_aware_temperature_and_seed():
    t = _trace([[1, 2], [1, 2, 3]])
    # r1 at T = 1: the holder's cost 1 x (48 - 32) / 16 + 3 = 4, the other's 48 / 16 + 3 = 6: p = 1 / (1 + e^-1) = 0.731
    p = 1 / (1 + math.exp(-1.0))
    hits = []
    for seed in range(400):
        r = simulate_routed(t, "vllm", 2, "kv-aware", [None], [0], "serial", temperature=1.0, seed=seed)
        u = np.random.default_rng(seed).random(2)
        holder = int(u[0] > 0.5)  # r0: equal costs, uniform: cumulative 0.5, 1 in index order
        # r1: worker 0 if u1 is within worker 0's probability (p if it is the holder, 1 - p if not)
        want = 0 if u[1] <= (p if holder == 0 else 1 - p) else 1
        assert r.worker[0].tolist() == [holder, want]
        hits.append(int(r.gpu_hit_tokens[0][1]))
    assert abs(np.mean(np.array(hits) == 32) - p) < 0.07  # 400 draws: about 0.731 of them hit
    same = [simulate_routed(t, "vllm", 2, "kv-aware", [None], [0], "serial", temperature=1.0, seed=7).worker.tolist()
            for _ in range(2)]
    assert same[0] == same[1]  # reproducible from the seed
    with pytest.raises(ValueError, match="temperature"):
        simulate_routed(t, "vllm", 2, "kv-aware", [None], temperature=-1.0)


def _jsonl(tmp_path, rows):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_llm_d_json_regret_and_the_serial_warning(capsys, tmp_path):
    # 40 requests sharing two 512-token blocks: serial, every router that follows the prefix piles onto one worker
    path = _jsonl(tmp_path, [{"timestamp": i * 1000, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 100 + i]}
                             for i in range(40)])
    code, out, err = run_stackdist(capsys, "plan", path, "--semantics", "vllm", "--workers", "2", "--router", "llm-d",
                                   "--gpu-blocks", "inf", "--schedule", "serial", "--router-weights", "queue=2",
                                   "--json", "-")
    assert code == 0, err
    cluster = json.loads(out)["engine_models"]["vllm"]["cluster"]
    assert cluster["router"] == "llm-d" and "2 x precise prefix-cache" in cluster["llm_d"] and "2 x queue" in cluster["llm_d"]
    row = cluster["pools"][0]
    assert row["routing_regret_percentage_points"] == 0.0 and row["available_hit_tokens"] == row["gpu_hit_tokens"]
    assert any("serial schedule: nothing is running" in w for w in row["warnings"])
    assert "llm-d" in cluster["routing_worth"][0]["routers"] and "kv-aware" in cluster["routing_worth"][0]["routers"]
    code, out, err = run_stackdist(capsys, "plan", path, "--semantics", "vllm", "--workers", "2", "--router", "kv-aware",
                                   "--gpu-blocks", "inf", "--schedule", "serial")
    assert code == 0 and "WARNING: router kv-aware sent 100.0%" in out and "serial schedule" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--router", "llm-d", "--router-weights", "prefix=x"], "--router-weights takes KEY=WEIGHT pairs, keys prefix, kv-cache, queue"),
    (["--router", "llm-d", "--router-weights", "load=1"], "keys prefix, kv-cache, queue"),
    (["--router", "llm-d", "--router-weights", "queue=-1"], "--router-weights"),
    (["--router", "kv-aware", "--router-temperature", "-0.5"], "--router-temperature"),
    (["--router", "kv-aware", "--router-temperature", "inf"], "--router-temperature"),
])
def test_cli_bad_router_flags_exit_2(capsys, extra, message):
    code, out, err = run_stackdist(capsys, "plan", "tests/data/mooncake_small.jsonl", "--semantics", "vllm",
                                   "--workers", "2", *extra)
    assert code == 2 and out == "" and message in err and "Traceback" not in err, err


def test_cli_llm_d_needs_an_engine_model(capsys):
    code, _, err = run_stackdist(capsys, "plan", "tests/data/mooncake_small.jsonl", "--semantics", "engine",
                                   "--workers", "2", "--router", "llm-d")
    assert code == 2 and "--router llm-d" in err and "--semantics" in err, err
    code, _, err = run_stackdist(capsys, "plan", "tests/data/mooncake_small.jsonl", "--semantics", "vllm",
                                   "--router", "llm-d")
    assert code == 2 and "--router llm-d spreads requests over --workers K" in err, err


def test_prompts_under_one_page_tie_on_every_worker():
    # P = 8 tokens: no full page, so llm-d's prefix score is 0 everywhere and the engines hit nothing
    # ((8 - 1) // 16 = 0 pages); serial: every score equal -> floor(2u): u = 0.637 -> 1, 0.270 -> 0
    t = RequestTrace.from_blocks([[1], [1]], block_size=16, last_tokens=[8, 8])
    for router in ("llm-d", "kv-aware"):
        for model in ("vllm", "sglang"):
            r = simulate_routed(t, model, 2, router, [None, 8], [0], "serial")
            assert r.worker.tolist() == [[1, 0], [1, 0]] and not r.gpu_hit_tokens.any(), (router, model)
