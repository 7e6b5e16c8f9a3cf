"""End to end against the real engines: ``stackdist plan --semantics vllm|sglang`` run as a user
runs it, on every committed validation trace, must write the per-request CSV the engines' own
code wrote (tests/data/engines/, recorded by validation/), request for request, at every pool
size, serial and timed, with and without decode, and agree on which pools are infeasible."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from naive import run_stackdist

DATA = Path(__file__).parent / "data" / "engines"
MANIFEST = DATA / "manifest.json"


def _runs() -> list[dict]:
    if not MANIFEST.exists():
        return []
    manifest = json.loads(MANIFEST.read_text())
    traces = manifest.get("traces", {})
    return [dict(run, trace_info=traces[run["trace"]]) for run in manifest.get("runs", []) if run["trace"] in traces]


RUNS = _runs()


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.mark.skipif(not RUNS, reason="no engine results committed in tests/data/engines")
@pytest.mark.parametrize("run", RUNS, ids=[f"{r['trace']}-{r['engine']}-{r['schedule']}-{r['decode']}" for r in RUNS])
def test_plan_cli_equals_the_engine_on_every_request(run, tmp_path, capsys):
    info = run["trace_info"]
    pools = [str(p) for p in run["pools"]]
    schedule = "serial" if run["schedule"] == "serial" else str(DATA / info["schedule_csv"])
    out, js = tmp_path / "per.csv", tmp_path / "plan.json"
    code, _, stderr = run_stackdist(
        capsys, "plan", DATA / info["file"], "--block-size", info["hash_block_size"], "--semantics", run["engine"],
        "--gpu-blocks", ",".join(pools), "--schedule", schedule,
        "--decode" if run["decode"] == "decode" else "--no-decode", "--per-request", out, "--json", js)
    infeasible = {str(x["pool"]) for x in run["infeasible"]}
    assert code == (1 if infeasible else 0), stderr
    plan = json.loads(js.read_text())["engine_models"][run["engine"]]
    assert {str(r["gpu_blocks"]) for r in plan["pools"] if not r["feasible"]} == infeasible
    ours_cols, ours = _read(out)
    theirs_cols, theirs = _read(DATA / run["file"])
    assert ours_cols == theirs_cols
    assert len(ours) == len(theirs)
    for mine, engine in zip(ours, theirs):
        if run["schedule"] != "serial":  # the schedule's arrival (serial runs have no clock of their own)
            assert float(mine["arrival_s"]) == pytest.approx(float(engine["arrival_s"]), abs=1e-9)
        mine.pop("arrival_s"), engine.pop("arrival_s")
        assert mine == engine, f"request {engine['request']}"
