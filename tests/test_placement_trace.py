"""Placement workloads as the project's one request-trace type, and ``generate`` -> ``stackdist plan``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvlab.placement.__main__ import main as placement_main
from kvlab.placement.workloads import (
    Workload,
    agent,
    chat,
    docqa,
    from_mooncake,
    mooncake_jsonl,
    write_mooncake,
)
from stackdist.cli import main as stackdist_main
from stackdist.traces import RequestTrace, read_mooncake

ROOT = Path(__file__).resolve().parents[1]
SMALL = {
    "chat": lambda seed=0: chat(n_sessions=3, accesses_per_session=120, seed=seed),
    "agent": lambda seed=0: agent(n_agents=2, steps_per_agent=12, system_tokens=100, tool_output_tokens_mean=40.0, seed=seed),
    "docqa": lambda seed=0: docqa(n_docs=3, n_questions=25, doc_tokens=203, seed=seed),
}


def _same_trace(a: RequestTrace, b: RequestTrace, timestamps_exact: bool = True) -> None:
    for name in ("block_ids", "offsets", "block_tokens", "input_length", "output_length"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.block_size == b.block_size
    if timestamps_exact:
        assert np.array_equal(a.timestamps_s, b.timestamps_s)
    else:
        assert np.allclose(a.timestamps_s, b.timestamps_s, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_workload_round_trips_through_request_trace(kind: str) -> None:
    workload = SMALL[kind]()
    trace = workload.to_request_trace()
    assert trace.source == workload.name and trace.block_size == workload.block_tokens
    assert np.array_equal(trace.session_ids, workload.session)
    # Mooncake's rule: ceil(input_length / block_size) blocks; only a request's last block is partial.
    assert np.array_equal(np.diff(trace.offsets), -(-trace.input_length // trace.block_size))
    assert np.array_equal(np.add.reduceat(trace.block_tokens, trace.offsets[:-1]), trace.input_length)
    back = Workload.from_request_trace(trace)
    assert back == workload and back.name == workload.name
    _same_trace(back.to_request_trace(), trace)


def test_request_trace_round_trips_through_workload() -> None:
    trace = read_mooncake(ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl").select(slice(0, 200))
    workload = Workload.from_request_trace(trace, name="synthetic")
    _same_trace(workload.to_request_trace(), trace)
    assert workload.name == "synthetic" and workload.block_tokens == trace.block_size


def test_from_mooncake_is_the_trace_conversion() -> None:
    path = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
    replay = from_mooncake(path)
    assert replay == Workload.from_request_trace(read_mooncake(path), name=replay.name)


def test_mooncake_file_reads_back_exactly(tmp_path: Path) -> None:
    trace = SMALL["agent"]().to_request_trace()
    write_mooncake(tmp_path / "agent.jsonl", trace)
    _same_trace(read_mooncake(tmp_path / "agent.jsonl", block_size=trace.block_size), trace, timestamps_exact=False)


def test_uint64_ids_survive_the_int64_view() -> None:
    big = 2**64 - 5
    trace = RequestTrace(np.array([big, 7, big], np.uint64), np.array([0, 2, 3]), np.array([4, 2, 4]),
                         np.array([0.0, 1.0]), np.array([6, 4]), np.array([1, 1]), block_size=4)
    workload = Workload.from_request_trace(trace)
    assert workload.blocks.dtype == np.int64 and workload.blocks[0] == workload.blocks[2] < 0
    line = mooncake_jsonl(workload.to_request_trace()).splitlines()[0]
    assert f"[{big}, 7]" in line


def test_decreasing_timestamps_are_refused() -> None:
    trace = RequestTrace(np.array([1, 2]), np.array([0, 1, 2]), np.array([4, 4]), np.array([1.0, 0.5]),
                         np.array([4, 4]), np.array([0, 0]), block_size=4, source="t.jsonl")
    with pytest.raises(ValueError, match="t.jsonl: timestamps must not decrease"):
        Workload.from_request_trace(trace)


GENERATE = {
    "chat": ["--param", "n_sessions=2", "--param", "accesses_per_session=150"],
    "agent": ["--param", "n_agents=2", "--param", "steps_per_agent=10"],
    "docqa": ["--param", "n_docs=3", "--param", "n_questions=20", "--param", "doc_tokens=300"],
}


@pytest.mark.parametrize("kind", sorted(GENERATE))
def test_generated_trace_is_planned_by_stackdist(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"{kind}.jsonl"
    assert placement_main(["generate", kind, "--out", str(out), "--seed", "3", *GENERATE[kind]]) == 0
    assert f"stackdist plan {out} --block-size 16" in capsys.readouterr().err
    assert stackdist_main(["plan", str(out), "--block-size", "16"]) == 0
    assert "requests" in capsys.readouterr().out


def test_generate_is_seeded(tmp_path: Path) -> None:
    paths = [tmp_path / name for name in ("a.jsonl", "b.jsonl", "c.jsonl")]
    for path, seed in zip(paths, ("1", "1", "2")):
        assert placement_main(["generate", "docqa", "--out", str(path), "--seed", seed, *GENERATE["docqa"]]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()
    expected = mooncake_jsonl(docqa(n_docs=3, n_questions=20, doc_tokens=300, seed=1).to_request_trace())
    assert paths[0].read_text() == expected


@pytest.mark.parametrize("argv, message", [
    (["generate", "chat", "--out", "x.jsonl", "--param", "seed=3"], "give the seed as --seed"),
    (["generate", "chat", "--out", "x.jsonl", "--param", "n_sessions=0"], "--param: n_sessions must be a positive number"),
    (["generate", "tweets", "--out", "x.jsonl"], "invalid choice: 'tweets'"),
])
def test_generate_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = placement_main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    assert code == 2 and message in capsys.readouterr().err
