"""Decode reuse, honestly (issue 24): where the trace holds no hashes or ids of the generated
tokens, the plan gives both bounds in one run (no answer reused; every inferred continuation
reused), whatever --decode-reuse chose; with the answers' token ids the reuse is exact and no
bounds are given."""

from __future__ import annotations

import json
from pathlib import Path

from naive import run_stackdist

DYNAMO = Path(__file__).resolve().parent / "data" / "engines" / "dynamo"


def _plan(capsys, tmp_path: Path, *argv) -> tuple[dict, str]:
    out = tmp_path / "plan.json"
    code, text, err = run_stackdist(capsys, "plan", *argv, "--semantics", "vllm", "--json", out)
    assert code == 0, err
    return json.loads(out.read_text())["engine_models"]["vllm"], text


def test_bounds_bracket_the_answers(capsys, tmp_path: Path) -> None:
    trace = DYNAMO / "agentic_think100.jsonl"
    plain, text = _plan(capsys, tmp_path, trace, "--format", "dynamo")
    reuse, _ = _plan(capsys, tmp_path, trace, "--format", "dynamo", "--decode-reuse")
    bounds = plain["decode_reuse_bounds"]
    assert bounds == reuse["decode_reuse_bounds"] and "no hashes or ids of the generated tokens" in bounds["why"]
    assert "decode reuse, bounds" in text and "with every inferred continuation reused" in text
    rows = {r["gpu_blocks"]: r for r in plain["pools"] if r["feasible"]}
    with_reuse = {r["gpu_blocks"]: r for r in reuse["pools"] if r["feasible"]}
    assert len(bounds["pools"]) == len(rows) > 3
    assert any(b["every_continuation_hit_tokens"] > b["without_reuse_hit_tokens"] for b in bounds["pools"])
    for b in bounds["pools"]:
        pool = b["gpu_blocks"]
        assert b["without_reuse_hit_tokens"] == rows[pool]["hit_tokens"]  # the plan without --decode-reuse is the floor
        assert b["without_reuse_hit_tokens"] <= with_reuse[pool]["hit_tokens"] <= b["every_continuation_hit_tokens"]


def test_exact_answers_need_no_bounds(capsys, tmp_path: Path) -> None:
    section, text = _plan(capsys, tmp_path, DYNAMO / "agentic_tinythink2.tokens.jsonl", "--format", "tokens",
                          "--block-size", 16, "--decode-reuse")
    assert section["decode_reuse"]["method"].startswith("exact") and section["decode_reuse_bounds"] is None
    assert "decode reuse, bounds" not in text
