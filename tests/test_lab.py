"""Tests for kvlab.lab and ``python -m kvlab``: the 7 run-lab files equal what run_scenario and
summarize compute (and the hand-derived cliffs), plus the CLI's output, errors and dispatch."""

from __future__ import annotations

import doctest
import json

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]
from pathlib import Path

import pytest

from kvlab import lab
from kvlab.__main__ import main
from kvlab.lab import (
    CLIFF_GPU_CAPACITIES,
    CPU_CLIFF_CAPACITIES,
    DEFAULT_MEASURED,
    LAB_FILES,
    MANIFEST,
    cliff_direct,
    cpu_cliff_direct,
    run_lab,
)
from kvlab.scenario import run_scenario
from kvlab.summarize import summarize

# Hand-derived (10 docs of 5011 tokens = 50110): a cyclic re-read hits all 10 documents only
# when the tier holds all of them, and misses all of them otherwise.
HAND_CLIFF = {"21520": 0, "30000": 0, "40000": 0, "45000": 0, "50109": 0, "50110": 10}
HAND_CPU_CLIFF = {"0": 10, "20000": 10, "30000": 10, "40000": 10, "50109": 10, "50110": 0, "56000": 0}


def json_text(value: object) -> str:
    return json.dumps(value, indent=2) + "\n"


def second_pass(gpu: int, cpu: int) -> dict[str, object]:
    return run_scenario(gpu=gpu, cpu=cpu, passes=("fwd", "fwd"))["passes"][1]


def test_capacity_constants_are_the_specified_lists() -> None:
    assert CLIFF_GPU_CAPACITIES == (21520, 30000, 40000, 45000, 50109, 50110)
    assert CPU_CLIFF_CAPACITIES == (0, 20000, 30000, 40000, 50109, 50110, 56000)


def test_default_measured_is_the_bundled_file(repo_root: Path) -> None:
    # package data: kvlab/data links to the checkout's data/ (so an installed kvlab finds it anywhere)
    assert DEFAULT_MEASURED.resolve() == (repo_root / "data" / "ttft.jsonl").resolve() and DEFAULT_MEASURED.is_file()


def test_cliff_builders_match_hand_derivation_and_run_scenario() -> None:
    assert cliff_direct() == HAND_CLIFF
    assert cpu_cliff_direct() == HAND_CPU_CLIFF
    assert cliff_direct() == {str(c): second_pass(c, 0)["gpu_hits"] + second_pass(c, 0)["cpu_hits"]
                              for c in CLIFF_GPU_CAPACITIES}
    assert cpu_cliff_direct() == {str(c): second_pass(21520, c)["misses"] for c in CPU_CLIFF_CAPACITIES}
    assert list(cliff_direct()) == [str(c) for c in CLIFF_GPU_CAPACITIES]


@pytest.mark.parametrize(("docs", "tokens"), [(1, 1), (3, 2), (7, 5)])
def test_cliff_builders_follow_the_cyclic_rule(docs: int, tokens: int) -> None:
    footprint = docs * tokens
    capacities = list(range(footprint + 3))
    assert cliff_direct(capacities, docs=docs, tokens=tokens) == {
        str(c): (docs if c >= footprint else 0) for c in capacities}
    # A GPU one document short of the footprint thrashes; the CPU tier decides the misses.
    assert cpu_cliff_direct(capacities, gpu=footprint - tokens, docs=docs, tokens=tokens) == {
        str(c): (0 if c >= footprint else docs) for c in capacities}


def test_run_lab_writes_the_seven_files(tmp_path: Path, repo_root: Path) -> None:
    out = tmp_path / "new" / "lab"  # parents are created
    written = run_lab(out)
    assert written == [out / name for name in LAB_FILES]
    assert sorted(p.name for p in out.iterdir()) == sorted((*LAB_FILES, MANIFEST))  # and no temporary files
    expected_json = {
        "cyclic.json": run_scenario(passes=("fwd", "fwd")),
        "baseline.json": run_scenario(passes=("fwd", "fwd", "rev")),
        "cliff.json": HAND_CLIFF,
        "offload.json": run_scenario(gpu=21520, cpu=56000, passes=("fwd", "fwd", "rev")),
        "cpu_cliff.json": HAND_CPU_CLIFF,
        "measured.json": summarize(repo_root / "data" / "ttft.jsonl"),
    }
    for name, value in expected_json.items():
        assert (out / name).read_text() == json_text(value), name
    assert (out / "ttft.jsonl").read_bytes() == (repo_root / "data" / "ttft.jsonl").read_bytes()


def test_lab_results_by_hand(tmp_path: Path) -> None:
    run_lab(tmp_path)
    cyclic = json.loads((tmp_path / "cyclic.json").read_text())["passes"]
    assert [p["misses"] for p in cyclic] == [10, 10]
    baseline = json.loads((tmp_path / "baseline.json").read_text())["passes"]
    assert baseline[2]["hit_docs"] == [9, 8, 7, 6] and baseline[2]["gpu_hits"] == 4
    offload = json.loads((tmp_path / "offload.json").read_text())["passes"]
    assert offload[1]["cpu_hits"] == 10 and (offload[2]["gpu_hits"], offload[2]["cpu_hits"]) == (4, 6)
    measured = json.loads((tmp_path / "measured.json").read_text())
    assert measured["lmcache"]["pass2-replay"]["p50_ms"] == 26.1  # data/fixtures/README.md table


def test_measured_override(tmp_path: Path) -> None:
    custom = tmp_path / "mine.jsonl"
    custom.write_text(
        '{"config": "baseline", "pass": "only", "doc": 3, "doc_tokens": 9, "ttft_ms": 12, "total_ms": 40}\n\n'
        '{"config": "lmcache", "pass": "only", "doc": 3, "doc_tokens": 9, "ttft_ms": 4, "total_ms": 30}\n'
    )
    run_lab(tmp_path / "out", measured=custom)
    assert json.loads((tmp_path / "out" / "measured.json").read_text())["ratio"] == {"only": {"p50": 3.0, "mean": 3.0}}
    assert (tmp_path / "out" / "ttft.jsonl").read_bytes() == custom.read_bytes()


def test_rerun_overwrites_in_place(tmp_path: Path) -> None:
    (tmp_path / "cliff.json").write_text("stale\n")
    run_lab(tmp_path)
    assert json.loads((tmp_path / "cliff.json").read_text()) == HAND_CLIFF
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted((*LAB_FILES, MANIFEST))


# --------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------


def test_cli_prints_folder_and_files_and_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lab"
    assert main(["run-lab", "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout.splitlines() == [str(out)] + [str(out / name) for name in LAB_FILES]
    assert "rev pass hits docs [9, 8, 7, 6]" in stderr and "50110: 10" in stderr
    assert "pass2-replay 1.42" in stderr  # 37.0 / 26.1 from the README medians -> 1.4176 -> 1.42


def test_cli_bad_measured_line_exit_1_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "ttft_ms": 1, "total_ms": 2}\n'
                   '{"config": "other", "pass": "p", "doc": 0, "doc_tokens": 1, "ttft_ms": 1, "total_ms": 2}\n')
    out = tmp_path / "lab"
    assert main(["run-lab", "--out", str(out), "--measured", str(bad)]) == 1
    stdout, stderr = capsys.readouterr()
    assert stdout == ""
    assert f'{bad}:2: config must be one of baseline, lmcache, got "other"' in stderr and "Traceback" not in stderr
    assert not out.exists()


def test_cli_missing_measured_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.jsonl"
    assert main(["run-lab", "--out", str(tmp_path / "lab"), "--measured", str(missing)]) == 1
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and f"{missing}: cannot read the input file: No such file or directory" in stderr
    assert not (tmp_path / "lab").exists()


def test_cli_out_is_a_file_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    assert main(["run-lab", "--out", str(target)]) == 1
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and f"cannot write the lab files into {target}: it exists and is not a directory" in stderr
    assert target.read_text() == "x"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "the following arguments are required: command"),
        (["bogus"], "invalid choice: 'bogus' (choose from 'run-lab', 'scenario', 'summarize', 'block-lab')"),
        (["run-lab"], "the following arguments are required: --out"),
        (["run-lab", "--out", ""], "argument --out: must be a directory path, got an empty string"),
        (["run-lab", "--out", "x", "--docs", "3"], "unrecognized arguments: --docs 3"),
    ],
)
def test_cli_usage_errors_exit_2(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and expected in stderr and "usage: kvlab" in stderr


def test_cli_dispatches_scenario_and_summarize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "--cpu", "56000"]) == 0
    assert json.loads(capsys.readouterr().out) == run_scenario(cpu=56000)
    with pytest.raises(SystemExit) as info:
        main(["scenario", "--passes", "up"])
    assert info.value.code == 2 and "kvlab scenario: error: argument --passes" in capsys.readouterr().err
    output = tmp_path / "m.json"
    assert main(["summarize", str(DEFAULT_MEASURED), str(output)]) == 0
    assert output.read_text() == json_text(summarize(DEFAULT_MEASURED))


def test_python_m_kvlab_end_to_end(run_python, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    # The whole lab from another folder (the package's bundled data, not the checkout's), through
    # the main() that python -m kvlab runs, in-process; then a real python -m kvlab process (a
    # usage error, exit 2 before any work). Full kvlab processes run in test_hostile (closed
    # stdout, Ctrl-C, Ctrl-C during the imports).
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "lab"
    assert main(["run-lab", "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(out)] + [str(out / name) for name in LAB_FILES]
    assert json.loads((out / "cliff.json").read_text()) == HAND_CLIFF
    bad = run_python(["-m", "kvlab", "run-lab"], cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == "" and "--out" in bad.stderr and "Traceback" not in bad.stderr


def test_console_script_points_at_main(repo_root: Path) -> None:
    if tomllib is None:
        pytest.skip("tomllib is Python 3.11+")
    scripts = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["scripts"]
    module_name, function_name = scripts["kvlab"].split(":")
    assert module_name == "kvlab.__main__" and function_name == "main" and callable(main)


def test_lab_doctests_pass() -> None:
    result = doctest.testmod(lab)
    assert result.attempted > 0 and result.failed == 0


STANDALONE = {"kvsim.py", "scenario.py", "summarize.py"}


def test_kvlab_uses_one_writer_one_plot_loader_one_price_table_one_usage_error(repo_root: Path) -> None:
    """docs/architecture.md rule 4, for kvlab: only the standalone lab files (standard library
    only) may carry their own atomic writer; everything else uses stackdist's one of each."""
    import ast

    for path in sorted((repo_root / "kvlab").rglob("*.py")):
        if path.name in STANDALONE and path.parent.name == "kvlab":
            continue
        tree = ast.parse(path.read_text())
        imported = {(node.module or "", alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for alias in node.names}
        modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        where = path.relative_to(repo_root)
        assert "tempfile" not in modules, f"{where}: its own temporary-file writer"
        assert not {m for m in modules if m.startswith("matplotlib")}, f"{where}: its own matplotlib loader"
        assert not {name for module, name in imported if module.endswith("summarize") and "atomic" in name}, \
            f"{where}: uses summarize's standalone writer"
        prices = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == 187.5]  # the HBM price
        assert not prices, f"{where}:{prices[0].lineno if prices else 0}: its own price table"
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "UsageError"], \
            f"{where}: its own UsageError"
