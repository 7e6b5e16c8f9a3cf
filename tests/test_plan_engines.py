"""``stackdist plan`` with engine models: flags, per-request CSV, workers, infeasible pools, and the
Dynamo reader with its engine-reported hits."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
from naive import request_trace, run_stackdist

from stackdist.errors import TraceFormatError
from stackdist.planning.engine_plan import (
    EngineOptions,
    assign_workers,
    run_engine_models,
)
from stackdist.serving.schedule import Schedule
from stackdist.serving.vllm import simulate_vllm
from stackdist.traces import read_dynamo


def _dynamo_line(rid, received_ms, hashes, input_tokens, cached, worker=1, session="s", output=5, ttft=20.0, total=100.0):
    event = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "agent_context": {"session_id": session},
             "request": {"request_id": rid, "input_tokens": input_tokens, "output_tokens": output, "cached_tokens": cached,
                         "request_received_ms": received_ms, "prefill_time_ms": 10.0, "ttft_ms": ttft,
                         "total_time_ms": total, "worker": {"prefill_worker_id": worker, "decode_worker_id": worker},
                         "replay": {"trace_block_size": 16, "input_length": input_tokens, "input_sequence_hashes": hashes}}}
    return json.dumps({"timestamp": received_ms, "event": event})


@pytest.fixture
def dynamo_file(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [
        _dynamo_line("b", 2000, [1, 2, 4], 40, 32, worker=7),   # written out of order: end order
        _dynamo_line("a", 1000, [1, 2, 3], 35, 0, worker=7),
        json.dumps({"timestamp": 5, "event": {"schema": "dynamo.request.trace.v1", "event_type": "request_start"}}),
        _dynamo_line("c", 3000, [1, 9], 20, 0, worker=8),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dynamo_reader_orders_by_received_time_and_keeps_request_end(dynamo_file):
    t = read_dynamo(dynamo_file)
    assert t.request_labels.tolist() == ["a", "b", "c"]
    assert t.block_tokens.tolist() == [16, 16, 3, 16, 16, 8, 16, 4]
    assert t.workers.tolist() == [7, 7, 8] and t.engine_cached_tokens.tolist() == [0, 32, 0]
    assert t.timestamps_s.tolist() == [0.0, 1.0, 2.0]
    assert t.recorded_schedule_s[0].tolist() == [0.01, 0.02, 0.1]  # queue 10 ms, ttft 20 ms, total 100 ms


@pytest.mark.parametrize("bad, says", [
    ('{"event": {"event_type": "request_end", "request": {"input_tokens": 40}}}', "missing field"),
    ("not json", "not valid JSON"),
])
def test_dynamo_reader_names_file_and_line(tmp_path, bad, says):
    path = tmp_path / "bad.jsonl"
    path.write_text(_dynamo_line("a", 1, [1], 10, 0) + "\n" + bad + "\n")
    with pytest.raises(TraceFormatError, match=rf"bad.jsonl:2: .*{says}"):
        read_dynamo(path)


def test_dynamo_block_count_mismatch_says_what_fits(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(_dynamo_line("a", 1, [1, 2], 40, 0) + "\n")
    with pytest.raises(TraceFormatError, match=r"has 2 entries but input_length 40 needs ceil\(40/16\) = 3"):
        read_dynamo(path)


def test_plan_dynamo_recorded_workers_reports_against_the_engine(dynamo_file, tmp_path, capsys):
    out, js = tmp_path / "per.csv", tmp_path / "plan.json"
    code, stdout, _ = run_stackdist(capsys, "plan", str(dynamo_file), "--format", "dynamo", "--semantics", "vllm",
                                    "--gpu-blocks", "inf", "--workers", "recorded", "--per-request", str(out),
                                    "--json", str(js))
    assert code == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["id"] for r in rows] == ["a", "b", "c"] and [r["worker"] for r in rows] == ["7", "7", "8"]
    assert [int(r["hit_tokens_inf"]) for r in rows] == [0, 32, 0]  # c is on another worker: no hit on block 1
    vs = json.loads(js.read_text())["engine_models"]["vllm"]["pools"][0]["vs_engine"]
    assert vs["requests_exact"] == 3 and vs["error_tokens"] == 0
    assert "vs the engine's own count" in stdout


def test_one_worker_would_share_the_prefix(dynamo_file, tmp_path, capsys):
    out = tmp_path / "per.csv"
    code, _, _ = run_stackdist(capsys, "plan", str(dynamo_file), "--format", "dynamo", "--semantics", "vllm",
                               "--gpu-blocks", "inf", "--per-request", str(out))
    assert code == 0
    assert [int(r["hit_tokens_inf"]) for r in csv.DictReader(out.open())] == [0, 32, 16]


def test_per_worker_run_equals_separate_runs_of_each_workers_requests():
    rng = np.random.default_rng(5)
    requests = [[0, 1, int(rng.integers(2, 6)), int(rng.integers(6, 9))] for _ in range(24)]
    trace = request_trace(requests, block_size=16)
    options = EngineOptions(models=("vllm",), pools=(6, 9, None), schedule="serial", decode=False, workers=3)
    merged = run_engine_models(trace, options)["vllm"]
    workers = assign_workers(trace, options, Schedule.serial(trace.n_requests))
    for w in range(3):
        index = np.flatnonzero(workers == w)
        alone = simulate_vllm(trace.select(index), (6, 9, None), "serial", decode=False)
        assert np.array_equal(merged.hit_tokens[:, index], alone.hit_tokens)


def test_routers_are_reproducible_and_use_every_worker():
    trace = request_trace([[i % 5, 10 + i] for i in range(40)], block_size=16)
    for router in ("round-robin", "random", "session", "prefix-hash", "least-loaded"):
        opts = EngineOptions(workers=4, router=router)
        a = assign_workers(trace, opts, Schedule.from_service_model(trace))
        b = assign_workers(trace, opts, Schedule.from_service_model(trace))
        assert np.array_equal(a, b) and a.min() >= 0 and a.max() < 4
    prefix = assign_workers(trace, EngineOptions(workers=4, router="prefix-hash"), Schedule.serial(40))
    first_block = np.array([i % 5 for i in range(40)])
    for b in range(5):  # the same first block always goes to the same worker
        assert len(set(prefix[first_block == b].tolist())) == 1


def test_infeasible_asked_pool_exits_1_and_names_the_smallest_feasible(tmp_path, capsys):
    trace_path = tmp_path / "t.jsonl"
    trace_path.write_text('{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1, 2, 3, 4]}\n')
    code, stdout, stderr = run_stackdist(capsys, "plan", str(trace_path), "--block-size", "32", "--semantics", "vllm",
                                         "--gpu-blocks", "3,inf", "--schedule", "serial")
    assert code == 1
    assert "infeasible: request 0 cannot allocate" in stdout
    assert "smallest feasible pool: 8" in stderr  # ceil(100/16) = 7 blocks + the null block


@pytest.mark.parametrize("argv, says", [
    (["--semantics", "vllm", "--gpu-blocks", "0"], "--gpu-blocks must be"),
    (["--semantics", "vllm,lru"], "argument --semantics: must be"),
    (["--semantics", "vllm", "--workers", "x"], "--workers must be"),
    (["--semantics", "vllm", "--engine-block-size", "7"], "--engine-block-size must be"),
    (["--semantics", "vllm", "--prefill-tokens-per-s", "0"], "--prefill-tokens-per-s must be"),
])
def test_engine_flags_are_checked(tmp_path, capsys, argv, says):
    trace_path = tmp_path / "t.jsonl"
    trace_path.write_text('{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n')
    code, _, stderr = run_stackdist(capsys, "plan", str(trace_path), *argv)
    assert code == 2 and says in stderr


def test_decode_reuse_lets_the_next_turn_hit_the_answer():
    # turn 2 carries turn 1's 32-token prompt and its 20-token answer (pages 1, 2, 3 ...)
    trace = request_trace([[1, 2], [1, 2, 3, 4]], block_size=16)
    trace.output_length[:] = [20, 1]
    plain = EngineOptions(models=("vllm",), pools=(None,), schedule="serial", decode=True)
    base = run_engine_models(trace, plain)["vllm"].hit_tokens[0].tolist()
    reused = run_engine_models(trace, dataclasses.replace(plain, decode_reuse=True))["vllm"].hit_tokens[0].tolist()
    assert base == [0, 32]
    assert reused == [0, 48]  # turn 1 wrote 32 + 19 tokens: its third block is full and holds the answer


def test_decode_reuse_is_per_worker_and_refused_for_sglang():
    trace = request_trace([[1, 2], [1, 2, 3, 4]], block_size=16)
    trace.output_length[:] = [20, 1]
    opts = EngineOptions(models=("vllm",), pools=(None,), schedule="serial", decode=True, decode_reuse=True, workers=2)
    assert run_engine_models(trace, opts)["vllm"].hit_tokens[0].tolist() == [0, 0]  # round-robin: other worker
    with pytest.raises(ValueError, match="vllm model only"):
        run_engine_models(trace, dataclasses.replace(opts, models=("sglang",)))
