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
    """Without reuse the plan under-counts; trusting every inferred continuation over-counts on
    every request it changes; dropping it in the sessions the trace shows editing comes closer."""
    engine, _, _ = _engine(DATA / name)
    with_reuse, without = _scored(capsys, tmp_path, name), _scored(capsys, tmp_path, name, reuse=False)
    trusting = dict(zip(read_dynamo(DATA / name).request_labels.tolist(), _model(name, trust=True).tolist()))
    assert sum(without.values()) <= sum(engine.values()) < sum(trusting.values())  # = when every answer is edited
    assert all(without[k] <= engine[k] <= trusting[k] for k in engine)
    assert all(without[k] <= with_reuse[k] <= trusting[k] for k in engine)
    assert abs(sum(with_reuse.values()) - sum(engine.values())) < sum(trusting.values()) - sum(engine.values())


def _model(name: str, trust: bool, drop_edited: bool = False) -> np.ndarray:
    """The scored model in-process (per worker, recorded schedule, decode reuse), optionally
    trusting edited sessions or told which answers were edited (the driver's ground truth)."""
    _, edited, _ = _engine(DATA / name)
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
        cont = continuations(sub, pages, trust_edited_sessions=trust)
        if drop_edited:
            cont[[edited[labels[i]] > 0 for i in index]] = -1
        sched = type(schedule)(schedule.arrival_s[index], schedule.prefill_end_s[index], schedule.finish_s[index])
        predicted[index] = simulate_vllm(dataclasses.replace(pages, continued_by=cont), [None], sched, decode=True).hit_tokens[0]
    return predicted


@pytest.mark.parametrize("name", TRACES)
def test_exact_once_the_edited_answers_are_known(name):
    """The only disagreement is the inference's: drop the continuations of edited answers (and
    only those) and the model equals vLLM on every request (so timing, chunked prefill, workers
    and the final-token rule are all exact)."""
    engine, _, _ = _engine(DATA / name)
    labels = read_dynamo(DATA / name).request_labels.tolist()
    assert dict(zip(labels, _model(name, trust=True, drop_edited=True).tolist())) == engine

def _line(rid, received, request_extra=None, worker=None, bare=False, schema="dynamo.request.trace.v1", hashes=(1, 2)):
    request = {"request_id": rid, "input_tokens": 20, "output_tokens": 3, "cached_tokens": 16, "request_received_ms": received,
               "ttft_ms": 10.0, "prefill_time_ms": 4.0, "total_time_ms": 50.0,
               "worker": worker or {"prefill_worker_id": 5, "decode_worker_id": 5},
               "replay": {"trace_block_size": 16, "input_length": 20, "input_sequence_hashes": list(hashes)}}
    for k, v in (request_extra or {}).items():
        if v is None:
            request.pop(k, None)
        else:
            request[k] = v
    event = {"schema": schema, "event_type": "request_end", "request": request}
    return json.dumps(event if bare else {"timestamp": 1, "event": event})


def _read(tmp_path, *lines):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return read_dynamo(path)


def test_reader_prefers_the_wait_time_and_survives_missing_times(tmp_path):
    t = _read(tmp_path, _line("a", 1000, {"prefill_wait_time_ms": 2.0}), _line("b", 2000, {"prefill_time_ms": None}),
              _line("c", 3000, {"ttft_ms": None}), _line("d", 4000, {"total_time_ms": None, "output_tokens": None}))
    s = t.recorded_schedule_s * 1000
    assert np.allclose(s[:, 0], [2.0, 1010.0, 2000.0, 3006.0])  # wait; no prefill time: start at the first token
    assert np.allclose(s[:, 1:], [[10, 50], [1010, 1050], [2004, 2050], [3010, 3010]], atol=0.01) and t.output_length.tolist() == [3, 3, 3, 0]
    assert (s[:, 0] < s[:, 1]).all() and (s[:, 1] < s[:, 2]).all()


def test_reader_separates_data_parallel_ranks_and_reads_bare_agent_events(tmp_path):
    w = [{"prefill_worker_id": 5, "prefill_dp_rank": r, "decode_worker_id": 5} for r in (0, 1)]
    t = _read(tmp_path, _line("a", 1000, worker=w[0]), _line("b", 2000, worker=w[1], bare=True, schema="dynamo.agent.trace.v1"),
              _line("c", 3000, {"cached_tokens": None, "input_tokens": None}, worker=w[1]))
    assert t.workers.tolist() == [0, 1, 1] and t.engine_cached_tokens.tolist() == [16, 16, -1]
    assert t.input_length.tolist() == [20, 20, 20]


def test_a_one_token_answer_replays(capsys, tmp_path):
    """ttft == total (one output token) used to make the whole plan exit 1."""
    path = tmp_path / "d.jsonl"
    path.write_text(_line("a", 1000, {"output_tokens": 1, "total_time_ms": 10.0}) + "\n" + _line("b", 2000) + "\n")
    code, _, err = run_stackdist(capsys, "plan", path, "--format", "dynamo", "--semantics", "vllm", "--gpu-blocks", "inf",
                                 "--workers", "recorded", "--decode-reuse")
    assert code == 0, err


def test_an_answer_decoded_on_another_worker_is_not_reused(tmp_path):
    """Disaggregated prefill: the answer's KV stays on the decode worker."""
    lines = []
    for i, decode in enumerate((5, 6)):
        first = _line(f"a{i}", 1000 + 10_000 * i, {"output_tokens": 40, "input_tokens": 20},
                      worker={"prefill_worker_id": 5, "decode_worker_id": decode}, hashes=(1 + 100 * i, 2 + 100 * i))
        nxt = json.loads(_line(f"b{i}", 5000 + 10_000 * i, {"input_tokens": 70}))
        nxt["event"]["request"]["replay"].update(input_length=70, input_sequence_hashes=[1 + 100 * i, 3 + 100 * i, 4 + 100 * i, 5, 6])
        nxt["event"]["agent_context"] = {"session_id": "s"}
        lines += [first.replace('"request_end"', '"request_end", "agent_context": {"session_id": "s"}'), json.dumps(nxt)]
    t = _read(tmp_path, *lines)
    assert t.decode_workers.tolist() == [5, 5, 6, 5]
    assert continuations(t, engine_pages(t)).tolist() == [1, -1, -1, -1]


@pytest.mark.parametrize("name", TRACES)
def test_the_plan_flags_edited_answers_exactly_on_the_edited_traces(name, capsys, tmp_path):
    js = tmp_path / "plan.json"
    code, out, err = run_stackdist(capsys, "plan", DATA / name, "--format", "dynamo", "--semantics", "vllm", "--gpu-blocks",
                                   "inf", "--workers", "recorded", "--decode-reuse", "--json", js)
    assert code == 0, err
    reuse = json.loads(js.read_text())["engine_models"]["vllm"]["decode_reuse"]
    assert reuse["method"].startswith("inferred") and reuse["known_failure_modes"]
    flagged = reuse["requests_next_prompt_shorter_than_prompt_plus_answer"]
    assert (flagged == 0) == MANIFEST["traces"][name]["unambiguous"]
    assert ("answers look edited before reuse" in out) == (flagged > 0)
