"""Budgets (planning/budgets.py, the plan's --capacity / --gpu / --kv-dtype flags): units, conversions by
hand, per-request hits against the curve, the CLI's errors and strict JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from naive import real_trace_paths, run_stackdist

from stackdist.errors import UsageError
from stackdist.planning.budgets import (
    Budget,
    BudgetOptions,
    budget_capacity,
    budget_report,
    parse_budgets,
    per_request_hits,
)
from stackdist.planning.geometry import model_spec
from stackdist.planning.prefix_curve import PrefixCurve
from stackdist.serving.semantics import replay_requests
from stackdist.traces import RequestTrace

GIB = 2**30


def test_parse_units():
    got = parse_budgets("880GiB,2TiB,1.5GB,40000blocks,2Mtokens,64Ktokens,3kblocks,512MiB")
    assert [(b.unit, b.amount) for b in got] == [
        ("bytes", 880 * GIB), ("bytes", 2 * 2**40), ("bytes", 1_500_000_000), ("blocks", 40000),
        ("tokens", 2_000_000), ("tokens", 64_000), ("blocks", 3000), ("bytes", 512 * 2**20)]
    assert got[0].label == "880GiB"


@pytest.mark.parametrize("text", ["880", "880GiBs", "-1GiB", "0tokens", "1.5tokens", "GiB", "1e3GiB", "", "4 zettabytes",
                                  "880GiB,,2TiB", "99999999999999999999blocks"])
def test_bad_units_name_the_flag_and_the_allowed_units(text):
    with pytest.raises(UsageError) as info:
        parse_budgets(text)
    message = str(info.value)
    assert message.startswith("--capacity must be comma-separated positive sizes with a unit")
    assert "GiB" in message and "Mtokens" in message and "blocks" in message


def test_conversions_by_hand():
    qwen = model_spec("qwen3-8b").geometry  # 147456 B/token
    c = budget_capacity(Budget("80GiB", "bytes", 80 * GIB), 512, qwen, 10_000)
    tokens = 80 * GIB // 147456
    assert c["blocks"] == tokens // 512 and c["tokens"] == tokens // 512 * 512
    assert c["vllm_gpu_blocks"] == 80 * GIB // (16 * 147456) + 1 and c["sglang_pages"] == 80 * GIB // (16 * 147456)
    assert c["conservative_blocks"] == c["blocks"] and c["sliding_reserve_bytes"] == 0
    t = budget_capacity(Budget("2Mtokens", "tokens", 2_000_000), 512, qwen, 10_000)
    assert (t["blocks"], t["vllm_gpu_blocks"], t["sglang_pages"]) == (2_000_000 // 512, 125_001, 125_000)
    b = budget_capacity(Budget("100blocks", "blocks", 100), 512, qwen, 10_000)
    assert (b["blocks"], b["tokens"], b["vllm_gpu_blocks"]) == (100, 51200, 3201)
    assert b["gib"] == 51200 * 147456 / GIB


def test_sliding_window_reserve_and_conservative_bound():
    gemma = model_spec("gemma-3-27b").geometry  # 10 full layers x 8192 B, 52 sliding layers x 8192 B, window 1024
    c = budget_capacity(Budget("10GiB", "bytes", 10 * GIB), 16, gemma, 50_000)
    reserve = 52 * 8192 * 1024
    assert c["sliding_reserve_bytes"] == reserve
    assert c["blocks"] == (10 * GIB - reserve) // 81920 // 16
    assert c["conservative_blocks"] == 10 * GIB // (16 * 62 * 8192)
    assert 5 < c["blocks"] / c["conservative_blocks"] < 6.3  # the "about 5x" over-count, removed
    short = budget_capacity(Budget("10GiB", "bytes", 10 * GIB), 16, gemma, 100)  # requests shorter than the window
    assert short["sliding_reserve_bytes"] == 52 * 8192 * 100


def small_trace(seed=0, n=60):
    rng = np.random.default_rng(seed)
    requests = [list(rng.integers(0, 12, rng.integers(1, 6))) for _ in range(n)]
    for r in requests:  # shared prefixes
        r.insert(0, 100)
    return RequestTrace.from_blocks(requests, block_size=16, last_tokens=[int(x) for x in rng.integers(1, 17, n)])


@pytest.mark.parametrize("semantics", ["engine", "per-access"])
def test_per_request_hits_sum_to_the_curve(semantics):
    trace = small_trace()
    replay = replay_requests(trace, semantics)
    counted = np.arange(trace.n_requests) >= 10
    curve = PrefixCurve(replay, counted)
    for capacity in range(40):
        hits = per_request_hits(replay, capacity)
        assert int(hits[counted].sum()) == curve.prefix_token_hits_at(capacity)
        assert (hits <= trace.input_length).all()


def test_report_rows_and_lower_tier_loads():
    trace = small_trace(1)
    replays = {"engine": replay_requests(trace, "engine")}
    counted = np.ones(trace.n_requests, bool)
    spec = model_spec("qwen3-8b")
    from stackdist.planning.hardware import CalibratedTTFT

    options = BudgetOptions(parse_budgets("7blocks,40blocks"), spec, None, CalibratedTTFT(10.0, 0.01, 0.001))
    report = budget_report(trace, replays, counted, spec.geometry, options)
    small, large = (row["semantics"]["engine"] for row in report["rows"])
    assert small["hit_tokens"] <= large["hit_tokens"]
    assert small["ttft"]["mean_ms"] >= large["ttft"]["mean_ms"] and report["hardware"] is None
    assert report["ttft_model"]["estimate"] is True and large["hit_tokens_from_lower_tier"] == 0


def test_cli_bad_capacity_is_exit_2(capsys):
    code, _out, err = run_stackdist(capsys, "plan", real_trace_paths()[0], "--capacity", "80GB,12 parsecs")
    assert code == 2 and "--capacity must be comma-separated positive sizes" in err and "'12 parsecs'" in err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    path = tmp_path_factory.mktemp("budgets") / "head.jsonl"
    with open(real_trace_paths()[0]) as src, open(path, "w") as dst:
        dst.writelines(line for _, line in zip(range(300), src))
    return path


def test_cli_end_to_end_strict_json(capsys, head):
    code, out, err = run_stackdist(capsys, "plan", head, "--model", "qwen3-8b", "--gpu", "h200", "--gpus", "2",
                                   "--capacity", "10GiB,40GiB,500GiB", "--kv-dtype", "fp8", "--semantics", "engine,vllm",
                                   "--json", "-")
    assert code == 0, err
    report = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    budgets = report["budgets"]
    assert report["model"]["kv_bytes_per_token"] == 147456 // 2
    assert [r["budget"] for r in budgets["rows"]] == ["HBM of 1 replica", "HBM of 2 replicas", "10GiB", "40GiB", "500GiB"]
    pools = {row["gpu_blocks"]: row for row in report["engine_models"]["vllm"]["pools"]}
    for row in budgets["rows"]:
        e = row["engine_models"]["vllm"]
        assert e["pool"] == row["vllm_gpu_blocks"] and pools[e["pool"]]["feasible"] == e["feasible"]
        if e["feasible"]:
            assert pools[e["pool"]]["hit_tokens"] == e["hit_tokens"] and e["ttft"]["p50_ms"] > 0
        assert row["semantics"]["engine"]["ttft"]["p99_ms"] >= row["semantics"]["engine"]["ttft"]["p50_ms"]
    assert budgets["rows"][2]["vllm_gpu_blocks"] == 10 * GIB // (16 * 73728) + 1
    big = budgets["rows"][-1]["semantics"]["engine"]  # 500 GiB is beyond the HBM of both replicas: loads from below
    hbm = budgets["rows"][1]["semantics"]["engine"]
    assert big["hit_tokens"] >= hbm["hit_tokens"]
    assert big["hit_tokens_from_lower_tier"] == big["hit_tokens"] - hbm["hit_tokens"]
    assert budgets["hardware"]["replicas"] == 2 and budgets["ttft_model"]["kind"] == "roofline"
    assert budgets["requirements"]["targets"][0]["kind"] == "fraction_of_ceiling"


def test_cli_table_and_calibration(capsys, head, tmp_path):
    calib = tmp_path / "ttft.jsonl"
    calib.write_text("".join(json.dumps({"prefill_tokens": n, "ttft_ms": 5 + 0.01 * n}) + "\n" for n in (10, 100, 1000)))
    code, out, err = run_stackdist(capsys, "plan", head, "--model", "gemma-3-27b", "--capacity", "20GiB",
                                   "--ttft-calibration", calib, "--semantics", "engine")
    assert code == 0, err
    assert "== budgets" in out and "conservative (every layer full)" in out and "ESTIMATE (calibrated" in out
    assert "81,920 KV bytes/token" in out and "sliding-window layers add 425,984 B/token for at most 1,024 tokens" in out
    code, out, err = run_stackdist(capsys, "plan", head, "--capacity", "2GiB", "--ttft-calibration", tmp_path / "none.jsonl")
    assert code == 2 and "--ttft-calibration" in err
    code, out, err = run_stackdist(capsys, "plan", head, "--gpu", "h200", "--gpus", "3", "--gpus-per-replica", "2")
    assert code == 2 and "multiple of --gpus-per-replica" in err


def test_help_lists_the_catalog_and_gpus(capsys):
    code, out, _err = run_stackdist(capsys, "plan", "--help")
    assert code == 0
    for name in ("qwen3-8b", "gpt-oss-120b", "gemma-3-27b", "deepseek-v3", "glm-4.5", "mixtral-8x7b", "h200", "b200"):
        assert name in out


def test_hits_beyond_the_hbm_pool_are_loads_from_below():
    import math

    from stackdist.planning.hardware import HardwareOptions, RooflineTTFT, gpu_for

    trace = small_trace(2, 200)
    replay = replay_requests(trace, "engine")
    spec = model_spec("qwen3-8b")
    requested = math.ceil(143771 * 2**20 * 0.9)
    weights_gib = (requested - 3 * GIB - 8 * 2359296) / GIB  # leaves 8 blocks of 16 tokens: 7 usable
    hardware = HardwareOptions("h200", weights_gib=weights_gib)
    options = BudgetOptions(parse_budgets("40blocks"), spec, hardware, RooflineTTFT(spec, gpu_for("h200")))
    counted = np.ones(trace.n_requests, bool)
    report = budget_report(trace, {"engine": replay}, counted, spec.geometry, options)
    assert report["hardware"]["num_gpu_blocks"] == 8 and report["hardware"]["kv_tokens"] == 7 * 16
    hbm, forty = report["rows"]
    assert hbm["budget"] == "HBM of 1 replica" and hbm["blocks"] == 7
    expected = int(per_request_hits(replay, 40).sum() - per_request_hits(replay, 7).sum())
    row = forty["semantics"]["engine"]
    assert row["hit_tokens_from_lower_tier"] == expected > 0
    assert row["hit_tokens"] == hbm["semantics"]["engine"]["hit_tokens"] + expected


def test_a_byte_budget_of_a_hybrid_model_is_each_engines_own_pool(tmp_path, capsys):
    """gpt-oss-120b, 8 GiB: vLLM's hybrid cache spends 8 GiB on 589,824-byte blocks of either group
    (18 layers x 16 tokens x 8 heads x 64 x 2 x 2 B); SGLang splits it between a full pool and a
    sliding-window pool of 0.8 x its tokens (36,864 B per token each)."""
    from pathlib import Path

    code, _, err = run_stackdist(capsys, "plan", Path(__file__).parent / "data" / "hybrid_two_miss.jsonl", "--format",
                                 "mooncake", "--semantics", "vllm,sglang", "--model", "gpt-oss-120b", "--capacity", "8GiB",
                                 "--schedule", "serial", "--no-decode", "--json", tmp_path / "b.json")
    assert code == 0, err
    row = json.loads((tmp_path / "b.json").read_text())["budgets"]["rows"][0]
    assert row["vllm_gpu_blocks"] == 8 * 2**30 // (18 * 16 * 8 * 64 * 2 * 2) == 14563
    assert row["sglang_pages"] == int(8 * 2**30 // (16 * (36864 + 0.8 * 36864))) == 8090
    assert {k: v["pool"] for k, v in row["engine_models"].items()} == {"vllm": 14563, "sglang": 8090}


def test_sglangs_hbm_pool_of_a_sliding_window_model_splits_the_replicas_kv(tmp_path, capsys):
    from pathlib import Path

    code, _, err = run_stackdist(capsys, "plan", Path(__file__).parent / "data" / "hybrid_two_miss.jsonl", "--format",
                                 "mooncake", "--semantics", "vllm,sglang", "--model", "gpt-oss-120b", "--gpu", "h200",
                                 "--schedule", "serial", "--no-decode", "--json", tmp_path / "g.json")
    assert code == 0, err
    budgets = json.loads((tmp_path / "g.json").read_text())["budgets"]
    available = budgets["hardware"]["available_kv_gib_per_gpu"] * 2**30
    per_token = 8 * 64 * 2 * 2 * (18 + 0.8 * 18)  # K and V of 8 heads x 64 in bf16, 18 full + 0.8 x 18 sliding layers
    row = budgets["rows"][0]
    assert row["sglang_pages"] == int(available // (16 * per_token))
    assert row["engine_models"]["sglang"]["pool"] == row["sglang_pages"]
    assert row["engine_models"]["vllm"]["pool"] == budgets["hardware"]["num_gpu_blocks"]
