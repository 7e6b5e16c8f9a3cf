"""vLLM's scheduler under load: equal to vLLM 0.33.0's own ``Scheduler`` and ``AsyncScheduler``
driven in simulated time (``tests/data/engines/scheduler/``, sync and async runs) on every request at
every pool, far below the concurrency floor too; and to the standard-library restatement
``validation/check_scheduler_rules.py`` on seeded random traces with bursty arrivals (sync and async);
the plan's interface and its refusals."""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace, write_mooncake

from stackdist.serving.scheduler import SchedulerSettings, simulate_scheduler
from stackdist.traces import RequestTrace
from stackdist.traces.stream_input import read_as_requests

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "engines"
MANIFEST = json.loads((DATA / "scheduler" / "manifest.json").read_text())
SYNC = [run for run in MANIFEST["runs"] if "async" not in run["file"]]
ASYNC = [run for run in MANIFEST["runs"] if "async" in run["file"]]
sys.path.insert(0, str(ROOT / "validation"))
import check_scheduler_rules as rules
import common


def _settings(run: dict) -> SchedulerSettings:
    s = run["settings"]
    return SchedulerSettings(s["max_num_seqs"], s["max_num_batched_tokens"], s["step_fixed_s"], s["step_per_token_s"],
                             async_scheduling="async" in run["file"])


@pytest.mark.parametrize("run", SYNC + ASYNC, ids=lambda r: r["file"])
def test_equal_to_the_engine_on_every_request(run: dict) -> None:
    trace = read_as_requests([str(DATA / run["trace"])], "mooncake", run["hash_block_size"], False, True)
    rows = list(csv.DictReader((DATA / "scheduler" / run["file"]).open()))
    pools = [None if p["pool"] == "inf" else int(p["pool"]) for p in run["runs"]]
    result = simulate_scheduler(trace, pools, run["decode"], _settings(run))
    for i, pool in enumerate(p["pool"] for p in run["runs"]):
        assert result.hit_tokens[i].tolist() == [int(r[f"hit_tokens_{pool}"]) for r in rows]
        assert result.preemptions[i].tolist() == [int(r[f"preemptions_{pool}"]) for r in rows]
        for name in ("queue_s", "first_token_s", "finish_s"):
            want = np.array([float(r[f"{name}_{pool}"]) for r in rows])
            assert np.abs(getattr(result, name)[i] - want).max() < 1e-6, name


def test_the_committed_runs_cover_what_matters() -> None:
    """Preemptions, queueing, chunked prefill (a budget smaller than prompts), decode on and off."""
    stats = [p["stats"] for r in SYNC for p in r["runs"]]
    assert any(s["total_preemptions"] for s in stats) and any(s["partial_prefill_chunks"] for s in stats)
    assert any(s["max_waiting"] > 5 for s in stats) and {r["decode"] for r in SYNC} == {True, False}


def test_the_committed_async_runs_cover_what_matters() -> None:
    """The same for the async runs, plus idle batches, and preemptions not followed by a
    re-admission (a preempted request finished by its in-flight output)."""
    stats = [p["stats"] for r in ASYNC for p in r["runs"]]
    assert any(s["total_preemptions"] for s in stats) and any(s["partial_prefill_chunks"] for s in stats)
    assert any(s["max_waiting"] > 5 for s in stats) and {r["decode"] for r in ASYNC} == {True, False}
    assert any(s["idle_schedule_calls"] for s in stats)
    assert any(s["readmissions"] < s["total_preemptions"] for s in stats)
    assert {r["trace"] for r in ASYNC} == {r["trace"] for r in SYNC}


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("seed", range(8))
def test_equal_to_the_restatement_on_random_traces(seed: int, async_scheduling: bool, tmp_path: Path) -> None:
    trace = random_trace(seed, n_requests=40, pages_per_block=1 + seed % 3)
    path = tmp_path / "t.jsonl"
    write_mooncake(path, trace)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rng = np.random.default_rng(seed)
    stamps = np.cumsum(rng.exponential(30 if seed % 2 else 5, size=len(rows))).astype(int)  # bursty to overloaded
    path.write_text("".join(json.dumps(dict(r, timestamp=int(t))) + "\n" for r, t in zip(rows, stamps)))
    reference = common.read_trace(str(path))
    ours = read_as_requests([str(path)], "mooncake", trace.block_size, False, True)
    peak = int(((trace.input_length + trace.output_length + 15) // 16).max()) + 1
    settings = SchedulerSettings(max_num_seqs=8, max_num_batched_tokens=64 if seed % 3 == 0 else 8192,
                                 async_scheduling=async_scheduling)
    pools = [peak, 2 * peak, 6 * peak]
    result = simulate_scheduler(ours, pools, True, settings)
    restated = rules.simulate_async if async_scheduling else rules.simulate
    for i, pool in enumerate(pools):
        want = restated(reference, trace.block_size, pool, True, settings.max_num_seqs,
                        settings.max_num_batched_tokens, settings.step_fixed_s, settings.step_per_token_s)
        assert result.hit_tokens[i].tolist() == [q.first_hit for q in want]
        assert result.preemptions[i].tolist() == [q.preemptions for q in want]
        assert np.allclose(result.queue_s[i], [q.first_sched - q.arrival for q in want], atol=1e-9)
        assert np.allclose(result.first_token_s[i], [q.first_token - q.arrival for q in want], atol=1e-9)
        assert np.allclose(result.finish_s[i], [q.finish - q.arrival for q in want], atol=1e-9)


@pytest.mark.parametrize("seed", range(24))
def test_compiled_equals_the_reference(seed: int) -> None:
    """The compiled kernel against the pure-Python model, request by request, on seeded random
    traces, sync and async: pools from the largest request up, chunked budgets, max_num_seqs caps,
    decode or not; the GPU time and the tokens scheduled too."""
    rng = np.random.default_rng(seed)
    trace = random_trace(seed, n_requests=60, pages_per_block=1 + seed % 3)
    arrival = np.sort(rng.exponential(0.02 if seed % 2 else 0.2, size=trace.n_requests).cumsum())
    decode = seed % 4 != 3
    written = trace.input_length + (np.maximum(trace.output_length, 1) - 1 if decode else 0)
    peak = int(((written + 15) // 16).max()) + 1
    settings = SchedulerSettings(max_num_seqs=int(rng.choice([2, 8, 1024])),
                                 max_num_batched_tokens=int(rng.choice([16, 64, 8192])))
    pools = [peak - 1, peak, peak + 3, 2 * peak, 5 * peak, None]
    for asynchronous in (False, True):
        s = dataclasses.replace(settings, async_scheduling=asynchronous)
        got = simulate_scheduler(trace, pools, decode, s, arrival_s=arrival)
        want = simulate_scheduler(trace, pools, decode, s, arrival_s=arrival, reference=True)
        for name in ("hit_tokens", "preemptions", "failed_request", "scheduled_tokens"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name
        for name in ("queue_s", "first_token_s", "finish_s", "busy_s"):
            assert np.array_equal(getattr(got, name), getattr(want, name), equal_nan=True), name
    assert got.failed_request[0] >= 0 and (got.failed_request[1:] == -1).all()


@pytest.mark.parametrize("file", ["gen_burst_b32.vllm-scheduler.decode.csv", "gen_burst_b32.vllm-scheduler.async.decode.csv"])
def test_plan_interface_equals_the_engine(capsys, tmp_path: Path, file: str) -> None:
    run = next(r for r in SYNC + ASYNC if r["file"] == file)
    pools = [p["pool"] for p in run["runs"]]
    out = tmp_path / "pr.csv"
    code, text, err = run_stackdist(capsys, "plan", DATA / run["trace"], "--block-size", 32, "--semantics", "vllm",
                                    "--gpu-blocks", ",".join(pools), "--schedule", "scheduler", "--step-time",
                                    "0.020,0.00001", "--max-num-seqs", 1024, "--max-num-batched-tokens", 8192,
                                    *(["--async-scheduling"] if "async" in file else []), "--per-request", out)
    assert code == 0, err
    got = list(csv.DictReader(out.open()))
    want = list(csv.DictReader((DATA / "scheduler" / run["file"]).open()))
    for name in ("hit_tokens", "preemptions"):
        assert [[r[f"{name}_{p}"] for p in pools] for r in got] == [[r[f"{name}_{p}"] for p in pools] for r in want]
    for name in ("queue_s", "first_token_s", "finish_s"):
        assert all(abs(float(a[f"{name}_{p}"]) - float(b[f"{name}_{p}"])) < 1e-6 for a, b in zip(got, want) for p in pools)
    assert f"the engine's {'async ' if 'async' in file else ''}scheduler under load" in text and "TTFT p50" in text
    assert "DOES NOT KEEP UP" in text and "short by" in text


@pytest.mark.parametrize(("argv", "match"), [
    (["--semantics", "sglang"], "for the vllm model"),
    (["--schedule", "serial", "--async-scheduling"], "--async-scheduling sets the engine's scheduler"),
    (["--schedule", "model", "--step-time", "0.02,0.001"], "--step-time sets the engine's scheduler"),
    (["--schedule", "serial", "--max-num-seqs", "8"], "--max-num-seqs sets the engine's scheduler"),
    (["--step-time", "0.02"], "--step-time must be FIXED_S,PER_TOKEN_S"),
    (["--workers", "2", "--router", "kv-aware"], "--router must be one of round-robin, random, session, prefix-hash"),
    (["--workers", "2", "--router", "least-loaded"], "least-loaded would need them jointly"),
    (["--offload", "vllm-native:cpu=100blocks"], "--offload is modelled on the serial schedule only"),
])
def test_plan_refusals(capsys, argv: list[str], match: str) -> None:
    code, _, err = run_stackdist(capsys, "plan", DATA / "gen_chat_b16.jsonl", "--block-size", 16, "--gpu-blocks", 100,
                                 "--schedule", "scheduler", *(["--semantics", "vllm"] if "--semantics" not in argv else []),
                                 *argv)
    assert code == 2 and match in err and "Traceback" not in err


def test_a_pool_smaller_than_a_request_is_infeasible(capsys) -> None:
    code, text, _err = run_stackdist(capsys, "plan", DATA / "gen_chat_b16.jsonl", "--block-size", 16, "--semantics", "vllm",
                                    "--gpu-blocks", "10,100", "--schedule", "scheduler")
    assert code == 1 and "infeasible" in text and "smallest feasible pool" in text


@pytest.mark.parametrize("run", MANIFEST["real_trace_runs"], ids=lambda r: r["file"])
def test_equal_to_the_engine_on_the_real_trace(run: dict, tmp_path: Path) -> None:
    """The first 1,000 requests of the bundled Mooncake conversation trace, vLLM's own Scheduler and
    AsyncScheduler (``manifest.json``'s ``real_trace_runs``) at every committed pool: every
    request's hit, preemptions and times."""
    head = tmp_path / "head.jsonl"
    head.write_text("\n".join((ROOT / run["trace"]).read_text().splitlines()[: run["first_requests"]]) + "\n")
    trace = read_as_requests([str(head)], "mooncake", run["hash_block_size"], False, True)
    rows = list(csv.DictReader((DATA / "scheduler" / run["file"]).open()))
    pools = [k[len("hit_tokens_"):] for k in rows[0] if k.startswith("hit_tokens_")]
    assert len(pools) >= 3
    result = simulate_scheduler(trace, [int(p) for p in pools], run["decode"], _settings(run))
    for i, pool in enumerate(pools):
        assert result.hit_tokens[i].tolist() == [int(r[f"hit_tokens_{pool}"]) for r in rows]
        assert result.preemptions[i].tolist() == [int(r[f"preemptions_{pool}"]) for r in rows]
        assert sum(result.preemptions[i]) > 0
        for name in ("queue_s", "first_token_s", "finish_s"):
            want = np.array([float(r[f"{name}_{pool}"]) for r in rows])
            assert np.abs(getattr(result, name)[i] - want).max() < 1e-6



def test_keeps_up_and_by_how_much() -> None:
    """One 32-token request a second, no decode: a step of 0.5 s keeps up (no queue); a step of
    2 s serves one request per 2 s, so the queue grows by a second per request and the deployment
    serves about half the arrival rate; the tokens and GPU time are what the steps add up to."""
    from stackdist.planning.engine_plan import load_summary

    n = 40
    t = RequestTrace.from_blocks([[i, 1000 + i] for i in range(n)], block_size=16)  # one request per second
    counted = np.ones(n, bool)
    light = simulate_scheduler(t, [100], False, SchedulerSettings(max_num_seqs=1, step_fixed_s=0.5, step_per_token_s=0.0))
    heavy = simulate_scheduler(t, [100], False, SchedulerSettings(max_num_seqs=1, step_fixed_s=2.0, step_per_token_s=0.0))
    ok, bad = load_summary(light, 0, counted, t), load_summary(heavy, 0, counted, t)
    assert ok["keeps_up"] and ok["queue_s"]["mean"] == 0 and ok["recomputed_tokens"] == 0
    assert not bad["keeps_up"] and bad["queue_s"]["p99"] > 30
    assert bad["served_fraction"] == pytest.approx((n - 1) / (2.0 * n), rel=1e-9)  # 39 s of arrivals, 80 s to serve
    assert heavy.busy_s[0] == pytest.approx(2.0 * n) and heavy.scheduled_tokens[0] == 32 * n
    assert bad["prompt_tokens_per_s"] == pytest.approx(32 * n / (2.0 * n))


@pytest.mark.parametrize("router", ["round-robin", "session"])
def test_workers_each_run_their_own_scheduler(capsys, tmp_path: Path, router: str) -> None:
    """--workers K behind a static router: every request's row is what one scheduler gives on its
    worker's requests alone, at their own arrival times; the table counts K GPUs."""
    trace_path = DATA / "gen_chat_b16.jsonl"
    out = tmp_path / "pr.csv"
    code, text, err = run_stackdist(capsys, "plan", trace_path, "--block-size", 16, "--semantics", "vllm",
                                    "--gpu-blocks", "48,100", "--schedule", "scheduler", "--workers", 3, "--router",
                                    router, "--per-request", out)
    assert code == 0, err
    assert "3 GPUs, one scheduler each" in text and "each worker's own scheduler under load" in text
    rows = list(csv.DictReader(out.open()))
    trace = read_as_requests([str(trace_path)], "mooncake", 16, False, True)
    workers = np.array([int(r["worker"]) for r in rows])
    assert len(np.unique(workers)) > 1
    arrival = trace.timestamps_s - trace.timestamps_s[0]
    for w in np.unique(workers):
        index = np.flatnonzero(workers == w)
        alone = simulate_scheduler(trace.select(index), [48, 100], True, arrival_s=arrival[index])
        for i, pool in enumerate((48, 100)):
            assert [int(rows[j][f"hit_tokens_{pool}"]) for j in index] == alone.hit_tokens[i].tolist()
            assert [int(rows[j][f"preemptions_{pool}"]) for j in index] == alone.preemptions[i].tolist()
            got = np.array([float(rows[j][f"first_token_s_{pool}"]) for j in index])
            assert np.abs(got - alone.first_token_s[i]).max() < 1e-6
