"""The routing regret (issue 24): per request the GPU prefix hit the best worker held at its
arrival (every worker probed, read-only) against the routed worker's; the longest-prefix router
(kv-aware with an infinite overlap weight) has none by construction; every router is at or below
what the fleet held; a static router's joint run equals its per-worker run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.planning.engine_plan import EngineOptions, assign_workers, run_engine_models
from stackdist.serving.routed import simulate_routed
from stackdist.serving.schedule import Schedule


@pytest.mark.parametrize(("seed", "model"), [(0, "vllm"), (1, "sglang"), (2, "vllm"), (3, "sglang")])
def test_longest_prefix_has_no_regret_and_no_router_beats_the_fleet(seed: int, model: str) -> None:
    trace = random_trace(seed, n_requests=60, pages_per_block=2)
    pools = (12, 40, None)
    longest = simulate_routed(trace, model, 3, "kv-aware", pools, overlap_weight=float("inf"))
    feasible = longest.failed_request < 0
    assert feasible.any()
    assert np.array_equal(longest.available_hit_tokens[feasible], longest.gpu_hit_tokens[feasible])
    rr = np.arange(trace.n_requests) % 3
    for router in ("kv-aware", rr):
        r = simulate_routed(trace, model, 3, router, pools)
        ok = r.failed_request < 0
        assert (r.available_hit_tokens[ok] >= r.gpu_hit_tokens[ok]).all()
    assert (r.available_hit_tokens[ok] > r.gpu_hit_tokens[ok]).any()  # round-robin leaves hits elsewhere


def test_plan_reports_regret_for_a_static_router(capsys, tmp_path: Path) -> None:
    trace = random_trace(4, n_requests=80, pages_per_block=2)
    from traces_random import write_mooncake

    path = tmp_path / "t.jsonl"
    write_mooncake(path, trace)
    out = tmp_path / "pr.csv"
    code, text, err = run_stackdist(capsys, "plan", path, "--block-size", trace.block_size, "--semantics", "vllm",
                                    "--workers", 2, "--router", "round-robin", "--gpu-blocks", "30,inf", "--schedule", "serial",
                                    "--per-request", out)
    assert code == 0, err
    assert "the fleet held" in text and "regret" in text
    rows = list(csv.DictReader(out.open()))
    for pool in ("30", "inf"):
        held = np.array([int(r[f"available_hit_tokens_{pool}"]) for r in rows])
        got = np.array([int(r[f"hit_tokens_{pool}"]) for r in rows])
        assert (held >= got).all()
    # the joint run of the static assignment gives the per-worker run's hits (what the plan reports)
    options = EngineOptions(models=("vllm",), pools=(30, None), schedule="serial", decode=True, workers=2,
                            compare_routers=False)
    result = run_engine_models(trace, options)["vllm"]
    workers = assign_workers(trace, options, Schedule.serial(trace.n_requests))
    joint = simulate_routed(trace, "vllm", 2, workers, (30, None), decode=True)
    assert np.array_equal(joint.gpu_hit_tokens, result.hit_tokens)


def test_longest_prefix_has_no_regret_on_the_real_trace(tmp_path: Path) -> None:
    """The first 300 requests of the bundled conversation trace on 3 vLLM workers: the longest
    prefix router none; session routing some, and never above what the fleet held."""
    from stackdist.traces.stream_input import read_as_requests

    root = Path(__file__).resolve().parents[2]
    head = tmp_path / "head.jsonl"
    head.write_text("\n".join((root / "data" / "traces" / "mooncake_conversation_trace.jsonl").read_text()
                              .splitlines()[:300]) + "\n")
    trace = read_as_requests([str(head)], "mooncake", 512, False, True)
    longest = simulate_routed(trace, "vllm", 3, "kv-aware", (20000,), overlap_weight=float("inf"))
    assert np.array_equal(longest.available_hit_tokens, longest.gpu_hit_tokens)
    options = EngineOptions(models=("vllm",), workers=3, router="session")
    session = simulate_routed(trace, "vllm", 3, assign_workers(trace, options, Schedule.serial(trace.n_requests)), (20000,))
    assert (session.available_hit_tokens >= session.gpu_hit_tokens).all()
    assert (session.available_hit_tokens > session.gpu_hit_tokens).any()
