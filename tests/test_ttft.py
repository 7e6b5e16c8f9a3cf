"""TTFT estimates (planning/hardware.py): the FLOP/bandwidth model by hand, monotone in hits, the fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stackdist.errors import UsageError
from stackdist.planning.geometry import model_spec
from stackdist.planning.hardware import (
    CalibratedTTFT,
    RooflineTTFT,
    calibration_rows,
    fit_calibration,
    gpu_for,
    sliding_pairs,
    ttft_summary,
)

ROOT = Path(__file__).resolve().parents[1]


def test_roofline_by_hand():
    model = RooflineTTFT(model_spec("qwen3-8b"), gpu_for("h200"), efficiency=0.5)
    flops = 2 * 8.2e9 * 1000 + 2 * 32 * 256 * 36 * (1000 * 1001 / 2)  # no hit: 1000 new tokens
    assert model.estimate_s(np.array([1000]), np.array([0]), np.array([0]))[0] == pytest.approx(flops / (989.4e12 * 0.5))
    # 900 of them cached: 100 new tokens see 901..1000 keys; a 10-token prompt is bound by reading the weights
    flops = 2 * 8.2e9 * 100 + 2 * 32 * 256 * 36 * (100 * 900 + 100 * 101 / 2)
    assert model.estimate_s(np.array([1000]), np.array([900]), np.array([0]))[0] == pytest.approx(flops / (989.4e12 * 0.5))
    assert model.estimate_s(np.array([10]), np.array([0]), np.array([0]))[0] == pytest.approx(8.2e9 * 2 / 4.8e12)
    # hits loaded from below HBM add their KV bytes over the link (55 GB/s measured on the H200)
    loaded = model.estimate_s(np.array([1000]), np.array([900]), np.array([900]))[0]
    assert loaded - model.estimate_s(np.array([1000]), np.array([900]), np.array([0]))[0] == pytest.approx(900 * 147456 / 55e9)


def test_a_full_hit_still_computes_the_last_token():
    model = RooflineTTFT(model_spec("qwen3-8b"), gpu_for("h200"))
    full, all_but_one = model.estimate_s(np.array([64, 64]), np.array([64, 63]), np.zeros(2))
    assert full == all_but_one > 0


def test_sliding_pairs_by_hand_and_fp8_peak():
    assert int(sliding_pairs(0, 5, 3)) == 1 + 2 + 3 + 3 + 3
    assert int(sliding_pairs(4, 6, 3)) == 3 + 3
    assert RooflineTTFT(model_spec("deepseek-v3"), gpu_for("h200")).peak_flops == 1978.9e12  # fp8 checkpoint
    assert RooflineTTFT(model_spec("deepseek-v3"), gpu_for("a100-80g")).peak_flops == 312e12  # no fp8 on A100
    assert RooflineTTFT(model_spec("qwen3-8b"), gpu_for("h200")).peak_flops == 989.4e12


@pytest.mark.parametrize("name", ["qwen3-8b", "gemma-3-27b", "gpt-oss-120b", "deepseek-v3", "llama-3.2-1b"])
def test_monotone_in_hbm_hits(name):
    model = RooflineTTFT(model_spec(name), gpu_for("h100"), tensor_parallel=8)
    rng = np.random.default_rng(0)
    inputs = rng.integers(1, 200_000, 300)
    hits = np.sort(rng.integers(0, 200_000, (300, 12)), axis=1) % (inputs[:, None] + 1)
    hits = np.sort(hits, axis=1)
    times = np.stack([model.estimate_s(inputs, hits[:, k], np.zeros(300)) for k in range(12)], axis=1)
    assert (np.diff(times, axis=1) <= 1e-15).all()
    calibrated = CalibratedTTFT(20.0, 0.002, 0.0005)
    times = np.stack([calibrated.estimate_s(inputs, hits[:, k], np.zeros(300)) for k in range(12)], axis=1)
    assert (np.diff(times, axis=1) <= 0).all()


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(1)
    new, loaded = rng.integers(1, 10_000, 50).astype(float), rng.integers(0, 10_000, 50).astype(float)
    rows = np.column_stack([new, loaded, 12.5 + 0.003 * new + 0.0004 * loaded])
    fit = fit_calibration(rows)
    assert (fit.a_ms, fit.b_ms_per_token, fit.c_ms_per_token) == pytest.approx((12.5, 0.003, 0.0004))
    assert fit.fit["rmse_ms"] < 1e-9 and fit.fit["rows"] == 50
    no_loads = fit_calibration(np.column_stack([new, np.zeros(50), 5 + 0.01 * new]))
    assert no_loads.c_ms_per_token == 0.0 and no_loads.a_ms == pytest.approx(5)


def test_fit_to_the_bundled_measurements():
    records = [json.loads(line) for line in (ROOT / "data" / "ttft.jsonl").read_text().splitlines() if line.strip()]
    rows = calibration_rows(records)
    assert rows.shape == (180, 3)
    fit = fit_calibration(rows)
    # data/fixtures/README.md: misses (4896 tokens prefilled) median 37.1 ms; hits (32 tokens) host-bound 22-42 ms
    miss = fit.estimate_s(np.array([4896]), np.array([0]), np.array([0]))[0] * 1e3
    hit = fit.estimate_s(np.array([4896]), np.array([4864]), np.array([0]))[0] * 1e3
    assert 35 < miss < 39 and 20 < hit < 35 and hit < miss
    assert fit.b_ms_per_token > 0 and fit.fit["rmse_ms"] < 6


def test_calibration_errors():
    with pytest.raises(UsageError, match="record 1 needs ttft_ms"):
        calibration_rows([{"tier": "miss"}])
    with pytest.raises(UsageError, match="record 1 needs ttft_ms"):
        calibration_rows([{"tier": "disk", "doc_tokens": 1, "question_tokens": 1, "ttft_ms": 1}])
    with pytest.raises(UsageError, match="negative or non-finite"):
        calibration_rows([{"prefill_tokens": 10, "ttft_ms": float("nan")}])
    with pytest.raises(UsageError, match="at least two different uncached-token counts"):
        fit_calibration(calibration_rows([{"prefill_tokens": 10, "ttft_ms": 1}, {"prefill_tokens": 10, "ttft_ms": 2}]))


def test_summary_and_models_without_parameters():
    assert ttft_summary(np.array([0.001, 0.002, 0.003])) == {"p50_ms": 2.0, "p99_ms": pytest.approx(2.98), "mean_ms": 2.0}
    assert ttft_summary(np.array([])) == {"p50_ms": 0.0, "p99_ms": 0.0, "mean_ms": 0.0}
    from dataclasses import replace

    spec = replace(model_spec("qwen3-8b"), params=None, active_params=None)
    with pytest.raises(UsageError, match="needs the model's parameter count"):
        RooflineTTFT(spec, gpu_for("h200")).estimate_s(np.array([10]), np.array([0]), np.array([0]))
