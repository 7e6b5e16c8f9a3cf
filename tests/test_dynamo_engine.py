"""The held-out check's command on Dynamo traces served by vLLM's own KV-cache manager.

``tests/data/engines/dynamo/`` holds agentic traces (multi-turn sessions, overlapping
sub-agents, 2-4 workers, chunked prefill) that ``validation/drive_vllm_dynamo.py`` ran through
vLLM 0.33.0's ``KVCacheManager`` (one per worker); each request's ``cached_tokens`` is vLLM's
own count. On traces where every answer is reused verbatim the plan must equal it on every
request; where some answers had their thinking tokens stripped before reuse (a hash-id trace
cannot tell), the engine must lie between the plan without and with the inferred reuse, and
the plan must equal it exactly once the edited answers (the driver's ground truth) are not
counted as reused.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist

from stackdist.planning.engine_plan import EngineOptions, assign_workers, schedule_for
from stackdist.serving.decode_reuse import continuations
from stackdist.serving.pages import engine_pages
from stackdist.serving.vllm import simulate_vllm
from stackdist.traces import read_dynamo

DATA = Path(__file__).parent / "data" / "engines" / "dynamo"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
TRACES = sorted(MANIFEST["traces"])


def _engine(path: Path) -> tuple[dict[str, int], dict[str, int], int]:
    """(cached_tokens by request id, thinking tokens stripped by id, input tokens), read directly."""
    cached, edited, inputs = {}, {}, 0
    for line in path.read_text().splitlines():
        req = json.loads(line)["event"]["request"]
        cached[req["request_id"]] = req["cached_tokens"]
        edited[req["request_id"]] = req["validation"]["answer_thinking_tokens_stripped_before_reuse"]
        inputs += req["input_tokens"]
    return cached, edited, inputs


def _scored(capsys, tmp_path: Path, name: str, reuse: bool = True) -> dict[str, int]:
    out = tmp_path / "per.csv"
    argv = ["plan", DATA / name, "--format", "dynamo", "--semantics", "vllm", "--gpu-blocks", "inf",
            "--workers", "recorded", "--per-request", out] + (["--decode-reuse"] if reuse else [])
    code, _, err = run_stackdist(capsys, *argv)
    assert code == 0, err
    return {row["id"]: int(row["hit_tokens_inf"]) for row in csv.DictReader(out.open())}


def test_manifest_lists_every_file_with_its_hash():
    names = {p.name for p in DATA.glob("*.jsonl")}
    assert names == set(MANIFEST["traces"]) | set(MANIFEST["token_traces"])
    for name in MANIFEST["traces"]:
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == MANIFEST["traces"][name]["sha256"]
    assert any(MANIFEST["traces"][n]["unambiguous"] for n in TRACES) and not all(MANIFEST["traces"][n]["unambiguous"] for n in TRACES)


@pytest.mark.parametrize("name", [n for n in TRACES if MANIFEST["traces"][n]["unambiguous"]])
def test_scored_command_equals_vllm_on_every_request(name, capsys, tmp_path):
    engine, _, _ = _engine(DATA / name)
    predicted = _scored(capsys, tmp_path, name)
    assert predicted == engine
    assert sum(engine.values()) == MANIFEST["traces"][name]["cached_tokens"]


@pytest.mark.parametrize("name", [n for n in TRACES if not MANIFEST["traces"][n]["unambiguous"]])
def test_edited_answers_bracket_the_engine(name, capsys, tmp_path):
    engine, _, _ = _engine(DATA / name)
    with_reuse, without = _scored(capsys, tmp_path, name), _scored(capsys, tmp_path, name, reuse=False)
    assert sum(without.values()) < sum(engine.values()) < sum(with_reuse.values())
    assert all(without[k] <= engine[k] <= with_reuse[k] for k in engine)


@pytest.mark.parametrize("name", TRACES)
def test_exact_once_the_edited_answers_are_known(name):
    """The only disagreement is the inference's: drop the continuations of edited answers and
    the model equals vLLM on every request (so timing, chunked prefill, workers and the
    final-token rule are all exact)."""
    engine, edited, _ = _engine(DATA / name)
    trace = read_dynamo(DATA / name)
    options = EngineOptions(models=("vllm",), pools=(None,), schedule="recorded", workers="recorded", decode_reuse=True)
    schedule = schedule_for(trace, options)
    workers = assign_workers(trace, options, schedule)
    labels = trace.request_labels.tolist()
    predicted = np.zeros(trace.n_requests, np.int64)
    for w in np.unique(workers).tolist():
        index = np.flatnonzero(workers == w)
        sub = trace.select(index)
        pages = engine_pages(sub)
        cont = continuations(sub, pages)
        cont[[edited[labels[i]] > 0 for i in index]] = -1
        sched = type(schedule)(schedule.arrival_s[index], schedule.prefill_end_s[index], schedule.finish_s[index])
        predicted[index] = simulate_vllm(dataclasses.replace(pages, continued_by=cont), [None], sched, decode=True).hit_tokens[0]
    assert dict(zip(labels, predicted.tolist())) == engine
