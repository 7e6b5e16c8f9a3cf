"""The kvlab.placement command line: experiments --quick, simulate, calibration, exit codes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kvlab.placement.__main__ import main


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_experiments_quick_writes_json_and_figures(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # In-process (python -m kvlab.placement runs in a fresh process in test_hostile's
    # test_kvlab_closed_stdout_is_exit_1_without_traceback).
    code = main(["experiments", "--quick", "--out", str(tmp_path / "out")])
    stdout, stderr = capfd.readouterr()
    assert code == 0, stderr
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    assert (out / "claims.md").read_text().startswith("| # | paper's claim |")
    for name in ("migration_bytes.png", "hit_split.png", "frontier.png", "slo_capacity.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [w["name"] for w in results["workloads"]] == ["chat", "agent", "docqa"]
    assert len(results["grid"]["chat"]) == 4 * 2 * 3
    claims = results["claims"]
    assert claims["capacity_not_policy"]["arithmetic_1_8_64"]["sessions_ratio"] == 73.0
    assert set(claims["policies"]["ours"]["chat"]["exclusive"]["migration_gb"]) == {"lru", "lfu", "predicted", "ewma"}
    points = results["composition_sweep"]["points"]
    assert len(points) == 6 and results["composition_sweep"]["frontier"]  # 3 steps, HBM > 0: 3 + 2 + 1
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left
    assert stdout == ""  # data to files, progress to stderr
    assert "wrote" in stderr
    stages = re.findall(r"^\[(\d+)/9\] (.+): done, (?:(\d+) simulations in )?[\d.]+ s \(CPU [\d.]+ s\)", stderr, re.MULTILINE)
    assert [int(n) for n, _, _ in stages] == list(range(1, 10))  # one end line per stage, named, with times
    assert stages[0][1:] == ("grid chat", "24") and stages[-1][1] == "outputs"


def test_simulate_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--workload", "chat", "--param", "n_sessions=2", "--param", "accesses_per_session=100",
                 "--policy", "lfu", "--capacities", "16,128,1024"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["config"]["capacities"] == [16, 128, 1024] and summary["config"]["policy"] == "lfu"


def test_calibration_prints_defaults_next_to_derived(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibration"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema_version"] >= 1 and report["kind"] == "placement-calibration"
    rows = report["fields"]
    assert {r["field"] for r in rows} >= {"prefill_fixed_ms", "h2d_gbps", "host_floor_ms"}
    assert all(abs(r["default"] - r["derived"]) <= 2e-4 * abs(r["derived"]) for r in rows)


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--policy", "arc"], "argument --policy: invalid choice: 'arc'"),
    (["simulate", "--capacities", "1,x"], "--capacities must be 1 to 3 comma-separated non-negative ints"),
    (["simulate", "--workload", "tweets"], "--workload must be one of chat, agent, docqa or mooncake:PATH; got 'tweets'."),
    (["simulate", "--param", "n_sessions=0"], "--param: n_sessions must be a positive number, got 0."),
    (["simulate", "--param", "colour=1"], "--param: chat() got an unexpected keyword argument 'colour'"),
    (["simulate", "--lookahead", "0"], "lookahead must be a positive int, got 0."),
    (["experiments", "--out", "/tmp/x", "--gpu-sessions", "0"], "--gpu-sessions must be positive, got 0.0."),
])
def test_usage_errors_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_trace_is_a_data_error_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--workload", f"mooncake:{tmp_path / 'none.jsonl'}"]) == 1
    assert "none.jsonl: no such file" in capsys.readouterr().err


def test_malformed_trace_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n{"timestamp": 1}\n')
    assert main(["simulate", "--workload", f"mooncake:{bad}"]) == 1  # an exception would propagate here
    assert "bad.jsonl:2:" in capsys.readouterr().err


def test_an_unwritable_output_is_a_data_error_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    assert main(["generate", "docqa", "--out", str(tmp_path / "file" / "t.jsonl"), "--param", "n_questions=2"]) == 1
    assert "error:" in capsys.readouterr().err


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: test_hostile's closed-stdout check runs python -m kvlab.placement in a fresh process.
    with pytest.raises(SystemExit) as exc:
        main(["experiments", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "examples:" in out and "--quick" in out
