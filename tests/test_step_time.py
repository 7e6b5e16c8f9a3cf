"""The scheduler's step time: where it comes from (given, a calibration fit, the bundled H200 fit
where it applies, the roofline, an assumption), its values against a hand computation, and the
plan's TTFT under load (engine section and budgets) coming from the scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist

from stackdist.errors import UsageError
from stackdist.planning.geometry import model_spec
from stackdist.planning.hardware import CalibratedTTFT, RooflineTTFT, gpu_for
from stackdist.planning.step_time import (
    bundled_h200_fit,
    parse_step_time,
    step_time_from_calibration,
    step_time_from_roofline,
)
from stackdist.serving.scheduler import SchedulerSettings, simulate_scheduler
from stackdist.traces import RequestTrace

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "tests" / "data" / "engines" / "gen_chat_b16.jsonl"


def _trace(prompts: list[int], outputs: list[int]) -> RequestTrace:
    blocks = [list(range(100 * i, 100 * i + -(-p // 16))) for i, p in enumerate(prompts)]
    last = [p - 16 * (len(b) - 1) for p, b in zip(prompts, blocks)]
    return RequestTrace.from_blocks(blocks, block_size=16, last_tokens=last, output_length=outputs)


def test_roofline_by_hand() -> None:
    spec, gpu = model_spec("qwen3-8b"), gpu_for("h200")
    roof = RooflineTTFT(spec, gpu, tensor_parallel=2, efficiency=0.4, overhead_ms=1.5)
    trace = _trace([100, 300], [11, 1])
    g, flops = spec.geometry, 2 * roof.peak_flops * 0.4
    hbm = 2 * gpu.hbm_gbps * 1e9
    keys = (100 * 101 / 2 + 300 * 301 / 2) / 400  # keys a prompt token sees, token-weighted
    prompt = (2 * spec.active + spec.attention_flops_per_pair * g.num_full_layers * keys) / flops
    context = 100 + 10 / 2  # the one decoding request: 10 generated tokens written
    decode = (2 * spec.active + spec.attention_flops_per_pair * g.num_full_layers * context) / flops \
        + context * g.kv_bytes_per_token / hbm
    s = step_time_from_roofline(roof, trace, decode=True)
    assert s.source == "roofline" and s.fixed_s == pytest.approx(spec.weights_bytes / hbm + 1.5e-3)
    assert s.per_token_s == pytest.approx((400 * prompt + 10 * decode) / 410)
    assert step_time_from_roofline(roof, trace, decode=False).per_token_s == pytest.approx(prompt)


def test_calibration_and_refusals() -> None:
    s = step_time_from_calibration(CalibratedTTFT(12.0, 0.004, 0.0, {"rmse_ms": 1.0}), "f.jsonl")
    assert (s.fixed_s, s.per_token_s) == pytest.approx((0.012, 4e-6)) and s.source == "calibration"
    with pytest.raises(ValueError, match="negative part"):
        step_time_from_calibration(CalibratedTTFT(-3.0, 0.004), "f.jsonl")
    for bad in ("0.02", "a,b", "-1,0", "0,0", "inf,0"):
        with pytest.raises(UsageError, match="--step-time"):
            parse_step_time(bad, "--step-time")
    fit = bundled_h200_fit()
    assert fit is not None and 20 < fit.a_ms < 40 and 0 < fit.b_ms_per_token < 0.01


@pytest.mark.parametrize(("extra", "source"), [
    ([], "assumed"),
    (["--gpu", "h200"], "h200-fixture"),
    (["--gpu", "h200", "--model", "qwen3-8b"], "roofline"),
    (["--gpu", "h100", "--model", "qwen2.5-1.5b"], "roofline"),
    (["--ttft-calibration", ROOT / "data" / "ttft.jsonl"], "calibration"),
    (["--gpu", "h200", "--step-time", "0.01,0.0001"], "given"),
])
def test_the_plan_states_its_step_time(capsys, tmp_path: Path, extra: list, source: str) -> None:
    out = tmp_path / "plan.json"
    pr = tmp_path / "pr.csv"
    code, text, err = run_stackdist(capsys, "plan", CHAT, "--block-size", 16, "--semantics", "vllm", "--schedule",
                                    "scheduler", "--gpu-blocks", "100", "--json", out, "--per-request", pr, *extra)
    assert code == 0, err
    sched = json.loads(out.read_text())["engine_models"]["vllm"]["schedule"]
    assert sched["step_time_source"] == source and sched["step_time_detail"] in text
    if source == "given":
        assert (sched["step_fixed_s"], sched["step_per_token_s"]) == (0.01, 0.0001)


def test_budget_ttft_comes_from_the_scheduler(capsys, tmp_path: Path) -> None:
    """With --capacity and --gpu under the scheduler, each engine row's TTFT is the scheduler's
    first-token times (queueing included), not the zero-load estimate."""
    out = tmp_path / "plan.json"
    code, text, err = run_stackdist(capsys, "plan", CHAT, "--block-size", 16, "--semantics", "vllm", "--schedule",
                                    "scheduler", "--gpu", "h200", "--capacity", "20MiB,40MiB", "--json", out)
    assert code == 0, err
    plan = json.loads(out.read_text())
    assert plan["budgets"]["engine_ttft_under_load"] and "TTFT under load" in text
    sched = plan["engine_models"]["vllm"]["schedule"]
    settings = SchedulerSettings(sched["max_num_seqs"], sched["max_num_batched_tokens"], sched["step_fixed_s"],
                                 sched["step_per_token_s"])
    from stackdist.traces.stream_input import read_as_requests

    trace = read_as_requests([str(CHAT)], "mooncake", 16, False, True)
    rows = [r["engine_models"]["vllm"] for r in plan["budgets"]["rows"] if r["engine_models"]]
    assert len(rows) == 3  # one replica's HBM, 20 MiB, 40 MiB
    for row in rows:
        assert row["feasible"]
        want = simulate_scheduler(trace, [row["pool"]], True, settings).first_token_s[0]
        assert row["ttft"]["under_load"] and row["ttft"]["p50_ms"] == pytest.approx(np.percentile(want, 50) * 1e3)
        assert row["ttft"]["p99_ms"] == pytest.approx(np.percentile(want, 99) * 1e3)


def test_pooled_replicas_get_no_ttft_under_load(capsys, tmp_path: Path) -> None:
    """The HBM of N replicas as one pool is no deployment to put under load: its row says so
    instead of a TTFT, with one worker or N; the 1-replica row has one."""
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / "plan.json"
        code, text, err = run_stackdist(capsys, "plan", CHAT, "--block-size", 16, "--semantics", "vllm", "--schedule",
                                        "scheduler", "--gpu", "h200", "--gpus", "2", "--json", out, *extra)
        assert code == 0, err
        rows = json.loads(out.read_text())["budgets"]["rows"]
        pooled = next(r for r in rows if r["budget"] == "HBM of 2 replicas")["engine_models"]["vllm"]
        single = next(r for r in rows if r["budget"] == "HBM of 1 replica")["engine_models"]["vllm"]
        assert pooled["ttft"] is None and "idealized cache" in pooled["ttft_not_given"] and "idealized" in text
        assert single["ttft"]["under_load"] and "ttft_not_given" not in single
