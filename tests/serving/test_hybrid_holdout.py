"""Held-out runs of vLLM 0.33.0's own hybrid KV cache (tests/data/engines/hybrid_holdout/, recorded
by validation/drive_vllm_hybrid.py, picked by validation/sweep_hybrid_holdout.py): ``stackdist plan
--semantics vllm --model-config CONFIG --schedule serial`` must give vLLM's hit on every request at
every pool, fail at the same request where vLLM cannot admit one, and size the blocks as vLLM did.
Each run's ``why`` in the manifest says what it covers (e.g. the Qwen3.5 SSM state dtype)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from naive import run_stackdist

TESTS = Path(__file__).parent.parent
DATA = TESTS / "data" / "engines" / "hybrid_holdout"
RUNS = json.loads((DATA / "manifest.json").read_text())["runs"]


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_plan_equals_vllm_on_every_held_out_request(run, tmp_path, capsys):
    summary = json.loads((DATA / run["summary"]).read_text())
    pools = [str(r["pool"]) for r in summary["runs"]]
    out, js = tmp_path / "per.csv", tmp_path / "plan.json"
    args = ["plan", TESTS / run["trace"], "--format", "mooncake", "--semantics", "vllm", "--model-config",
            TESTS / run["config"], "--gpu-blocks", ",".join(pools), "--schedule", "serial",
            "--decode" if summary["decode"] else "--no-decode", "--max-num-batched-tokens", summary["max_num_batched_tokens"],
            "--per-request", out, "--json", js]
    if run.get("engine_block_size"):
        args += ["--engine-block-size", run["engine_block_size"]]
    code, _, stderr = run_stackdist(capsys, *args)
    infeasible = {str(r["pool"]): r["failure"]["request"] for r in summary["runs"] if not r["feasible"]}
    assert code == (1 if infeasible else 0), stderr
    plan = json.loads(js.read_text())["engine_models"]["vllm"]
    assert {str(r["gpu_blocks"]): r["failed_request"] for r in plan["pools"] if not r["feasible"]} == infeasible
    assert plan["hybrid"]["block_size_tokens"] == summary["layout"]["groups"][0]["block_size"]
    assert plan["hybrid"]["bytes_per_block"] == summary["layout"]["bytes_per_block_all_layers"]
    with out.open() as f:
        ours = list(csv.DictReader(f))
    with (DATA / run["csv"]).open() as f:
        theirs = list(csv.DictReader(f))
    feasible = [p for p in pools if p not in infeasible]
    assert len(ours) == len(theirs) and feasible
    for mine, engine in zip(ours, theirs):
        assert mine["input_tokens"] == engine["input_tokens"]
        for p in feasible:
            assert mine[f"hit_tokens_{p}"] == engine[f"hit_tokens_{p}"], f"request {engine['request']} pool {p}"
