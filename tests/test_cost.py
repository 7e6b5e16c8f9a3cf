"""Cost (planning/prices.py deployment_cost, the plan's --gpu / --gpu-price / --prices): US$ per hour and
per million input tokens by hand on a small trace, the override flag, the errors, and no US$ where
there is no deployment."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from naive import real_trace_paths, run_stackdist

from stackdist.planning.budgets import BudgetOptions, budget_report
from stackdist.planning.geometry import model_spec
from stackdist.planning.hardware import HardwareOptions, gpu_table
from stackdist.planning.prices import (
    AMORTISATION_HOURS,
    DeploymentPrices,
    deployment_cost,
    input_tokens_per_hour,
)
from stackdist.serving.semantics import replay_requests
from stackdist.traces import RequestTrace

SMALL = "tests/data/mooncake_small.jsonl"
# its four requests: timestamps 0, 1.5, 3, 3 s; input tokens 1024 + 1100 + 1 + 513 = 2,638 over 3 s
SMALL_TOKENS_PER_HOUR = 2638 * 3600 / 3.0  # 3,165,600


def plan_json(capsys, *argv):
    code, out, err = run_stackdist(capsys, "plan", *argv, "--json", "-")
    assert code == 0, err
    return json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_amortisation_and_formula_by_hand():
    assert AMORTISATION_HOURS == 3 * 8760
    prices = DeploymentPrices("h100", 3.0, "assumed", {"dram": 2.628, "ssd": 0.2628})
    assert prices.usd_per_gb_hour == pytest.approx({"dram": 1e-4, "ssd": 1e-5})
    gib_of_100_gb = 100e9 / 2**30
    cost = deployment_cost(8, prices, cpu_gib=gib_of_100_gb, disk_gib=10 * gib_of_100_gb, input_tokens_per_hour=5e6,
                           hit_rate=0.6)
    # 8 x 3.00 + 100 GB x 1e-4 + 1,000 GB x 1e-5 = 24 + 0.01 + 0.01
    assert cost["usd_per_hour"] == pytest.approx(24.02)
    assert (cost["gpu_usd_per_hour"], cost["cpu_usd_per_hour"], cost["disk_usd_per_hour"]) == pytest.approx((24, 0.01, 0.01))
    assert cost["usd_per_million_input_tokens"] == pytest.approx(24.02 / 5)
    assert cost["usd_per_million_uncached_input_tokens"] == pytest.approx(24.02 / 2)  # 40 % of 5 M left to prefill
    full = deployment_cost(1, prices, input_tokens_per_hour=1e6, hit_rate=1.0)
    assert "usd_per_million_uncached_input_tokens" not in full and full["usd_per_million_uncached_input_tokens_not_given"]
    none = deployment_cost(1, prices, input_tokens_per_hour=None, no_rate_reason="no span")
    assert none["usd_per_hour"] == 3.0 and none["usd_per_million_input_tokens_not_given"] == "no span"
    assert "usd_per_million_input_tokens" not in none


def test_input_tokens_per_hour():
    assert input_tokens_per_hour(2638, 3.0)[0] == SMALL_TOKENS_PER_HOUR
    for tokens, span in ((10, 0.0), (10, math.nan), (0, 5.0)):
        rate, why = input_tokens_per_hour(tokens, span)
        assert rate is None and why


def test_every_gpu_has_a_sourced_price():
    for gpu in gpu_table().values():
        assert 0 < gpu.usd_per_gpu_hour < 100
        source = gpu.source["usd_per_gpu_hour"]
        assert source.startswith("assumption: ") and any(y in source for y in ("2025", "2026"))


def test_plan_prices_the_deployment_by_hand(capsys):
    report = plan_json(capsys, SMALL, "--gpu", "h200", "--semantics", "engine,vllm")
    budgets = report["budgets"]
    inputs = budgets["cost"]
    assert (inputs["input_tokens"], inputs["span_s"]) == (2638, 3.0)
    assert inputs["input_tokens_per_hour"] == pytest.approx(SMALL_TOKENS_PER_HOUR)
    assert inputs["gpu"] == "h200" and inputs["usd_per_gpu_hour"] == gpu_table()["h200"].usd_per_gpu_hour == 4.0
    assert inputs["gpu_price_source"] == gpu_table()["h200"].source["usd_per_gpu_hour"]
    assert inputs["usd_per_gb"] == {"dram": 3.5, "ssd": 0.08} and inputs["usd_per_gb_source"]["dram"] == "assumed"
    whole = budgets["hardware"]["cost"]
    assert (whole["gpus"], whole["usd_per_hour"]) == (1, 4.0)
    assert whole["usd_per_million_input_tokens"] == pytest.approx(4.0 / 3.1656)  # $1.2636
    row = budgets["rows"][0]
    assert row["budget"] == "HBM of 1 replica" and row["cost"] == whole
    # the whole trace fits in one H200: 1,024 of 2,638 tokens hit, 1,614 left to prefill
    engine = row["semantics"]["engine"]
    assert engine["hit_tokens"] == 1024
    assert engine["usd_per_million_uncached_input_tokens"] == pytest.approx(4.0 / (SMALL_TOKENS_PER_HOUR * 1614 / 2638 / 1e6))
    assert row["engine_models"]["vllm"]["usd_per_million_uncached_input_tokens"] == pytest.approx(
        engine["usd_per_million_uncached_input_tokens"])
    for target in budgets["requirements"]["targets"]:
        if target["reachable"]:
            assert target["cost"]["replicas"]["usd_per_hour"] == 4.0 * target["replicas"]
    code, out, err = run_stackdist(capsys, "plan", SMALL, "--gpu", "h200", "--semantics", "engine")
    assert code == 0, err
    assert "cost    1 x h200 at $4.00/GPU-hour = $4.00/hour, $1.2636 per million input tokens" in out
    assert "3,165,600 input tokens/hour" in out and "per million uncached input tokens" in out


def test_gpu_price_overrides_and_replicas_multiply(capsys):
    report = plan_json(capsys, SMALL, "--gpu", "h100", "--gpus", "4", "--gpus-per-replica", "2", "--gpu-price", "2.5",
                       "--semantics", "engine")
    budgets = report["budgets"]
    assert budgets["cost"]["usd_per_gpu_hour"] == 2.5 and budgets["cost"]["gpu_price_source"] == "given: --gpu-price"
    assert budgets["hardware"]["cost"]["usd_per_hour"] == 10.0 and budgets["hardware"]["cost"]["gpus"] == 4
    rows = {r["budget"]: r for r in budgets["rows"]}
    assert rows["HBM of 1 replica"]["cost"]["usd_per_hour"] == 5.0
    assert rows["HBM of 2 replicas"]["cost"]["usd_per_hour"] == 10.0
    free = plan_json(capsys, SMALL, "--gpu", "h100", "--gpu-price", "0", "--semantics", "engine")
    assert free["budgets"]["hardware"]["cost"]["usd_per_million_input_tokens"] == 0.0


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "abc", ""])
def test_gpu_price_errors_name_the_flag(capsys, value):
    code, _out, err = run_stackdist(capsys, "plan", SMALL, "--gpu", "h200", "--gpu-price", value)
    assert code == 2 and "--gpu-price" in err and "Traceback" not in err


def test_gpu_price_needs_a_gpu(capsys):
    code, _out, err = run_stackdist(capsys, "plan", SMALL, "--capacity", "1GiB", "--gpu-price", "3")
    assert code == 2 and "--gpu-price" in err and "--gpu too" in err


def test_capacity_rows_name_no_hardware_and_get_no_usd(capsys):
    report = plan_json(capsys, SMALL, "--capacity", "1GiB", "--semantics", "engine")
    assert "cost" not in report["budgets"] and all("cost" not in r for r in report["budgets"]["rows"])
    code, out, _err = run_stackdist(capsys, "plan", SMALL, "--capacity", "1GiB", "--semantics", "engine")
    assert code == 0 and "/hour" not in out


def test_a_trace_without_a_time_span_has_no_usd_per_token(capsys, tmp_path):
    path = tmp_path / "instant.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 7, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}) + "\n"
                            for _ in range(2)))
    report = plan_json(capsys, path, "--gpu", "h200", "--semantics", "engine")
    cost = report["budgets"]["hardware"]["cost"]
    assert cost["usd_per_hour"] == 4.0 and "usd_per_million_input_tokens" not in cost
    assert "no time span" in cost["usd_per_million_input_tokens_not_given"]
    assert "no time span" in report["budgets"]["cost"]["input_tokens_per_hour_not_given"]
    code, out, _err = run_stackdist(capsys, "plan", path, "--gpu", "h200", "--semantics", "engine")
    assert code == 0 and "no US$ per million input tokens" in out and "no input tokens per hour" in out


def test_dram_and_ssd_behind_one_replica(capsys, tmp_path):
    head = tmp_path / "head.jsonl"
    with open(real_trace_paths()[0]) as src:
        head.write_text("".join(line for _, line in zip(range(300), src)))
    report = plan_json(capsys, head, "--model", "qwen3-8b", "--gpu", "l40s", "--prices", "hbm=1,dram=2.628,ssd=0.2628",
                       "--semantics", "engine")
    budgets = report["budgets"]
    assert budgets["cost"]["usd_per_gb_source"] == {"dram": "given", "ssd": "given"}
    assert report["prices_per_gb_usd"]["hbm"] == 1.0  # the tier plan still reads every price
    price = gpu_table()["l40s"].usd_per_gpu_hour
    behind = [t for t in budgets["requirements"]["targets"] if t["reachable"] and t["behind_one_replica_gib"] > 0]
    assert behind, "the 300-request head should outgrow one L40S"
    for t in behind:
        gb = t["behind_one_replica_gib"] * 2**30 / 1e9
        cost = t["cost"]
        assert cost["replicas"]["usd_per_hour"] == pytest.approx(price * t["replicas"])
        assert cost["one_replica_plus_dram"]["usd_per_hour"] == pytest.approx(price + gb * 1e-4)
        assert cost["one_replica_plus_ssd"]["usd_per_hour"] == pytest.approx(price + gb * 1e-5)
        assert cost["one_replica_plus_dram"]["cpu_gib"] == t["behind_one_replica_gib"]
        rate = budgets["cost"]["input_tokens_per_hour"]
        assert cost["replicas"]["usd_per_million_uncached_input_tokens"] == pytest.approx(
            cost["replicas"]["usd_per_hour"] / (rate * (1 - t["prefix_token_hit_rate"]) / 1e6))


def test_weights_that_do_not_fit_get_no_usd():
    """A deployment that cannot run is refused (DeploymentError, exit 1 in the CLI): no US$ for it."""
    from stackdist.errors import DeploymentError

    trace = RequestTrace.from_blocks([[1, 2, 3], [1, 2]], block_size=16, last_tokens=[16, 16])  # one per second
    spec = model_spec("llama-3.1-405b")
    prices = DeploymentPrices("a100-40g", 1.3, "assumed")
    options = BudgetOptions((), spec, HardwareOptions("a100-40g"), prices=prices)
    counted = np.ones(trace.n_requests, bool)
    with pytest.raises(DeploymentError, match="does not fit"):
        budget_report(trace, {"engine": replay_requests(trace, "engine")}, counted, spec.geometry, options)
