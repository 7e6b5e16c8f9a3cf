"""Tests for kvlab.summarize: hand-computed statistics, the documented choices (pass order,
rounding, null ratios, unknown configs), malformed lines, and the CLI's files and exit codes."""

from __future__ import annotations

import doctest
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from kvlab import summarize as summarize_module
from kvlab.summarize import SummaryError, main, summarize, write_json_atomic


def line(config: str, pass_name: str, ttft: object, doc: int = 0, **extra: object) -> str:
    record = {"config": config, "pass": pass_name, "doc": doc, "doc_tokens": 4864, "ttft_ms": ttft, "total_ms": 500.0}
    record.update(extra)
    return json.dumps(record)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(text + "\n" for text in lines))
    return path


# --------------------------------------------------------------------------------------
# Statistics, by hand
# --------------------------------------------------------------------------------------


def test_odd_count_median_and_mean() -> None:
    summary = summarize([line("baseline", "p", v) for v in (30, 10, 20.5)])
    assert summary["baseline"] == {"p": {"n": 3, "p50_ms": 20.5, "mean_ms": 20.2}}  # 60.5 / 3 = 20.1666
    assert summary["lmcache"] == {} and summary["ratio"] == {}


def test_even_count_median_is_mean_of_two_middle_values() -> None:
    summary = summarize([line("lmcache", "p", v) for v in (12.0, 10.0, 11.2, 10.4)])
    # sorted 10.0 10.4 11.2 12.0: median (10.4 + 11.2) / 2 = 10.8; mean 43.6 / 4 = 10.9
    assert summary["lmcache"]["p"] == {"n": 4, "p50_ms": 10.8, "mean_ms": 10.9}


def test_values_rounded_to_one_decimal() -> None:
    summary = summarize([line("baseline", "p", v) for v in (1.23, 1.27, 1.31)])
    assert summary["baseline"]["p"] == {"n": 3, "p50_ms": 1.3, "mean_ms": 1.3}  # 1.27 and 1.27


def test_ratio_uses_unrounded_statistics() -> None:
    # Both p50s round to 1.0 ms, but the ratio is 1.04 / 0.96 = 1.0833 -> 1.08 (not 1.0).
    summary = summarize([line("baseline", "p", 1.04), line("lmcache", "p", 0.96)])
    assert summary["baseline"]["p"]["p50_ms"] == 1.0 and summary["lmcache"]["p"]["p50_ms"] == 1.0
    assert summary["ratio"] == {"p": {"p50": 1.08, "mean": 1.08}}


def test_ratio_is_baseline_over_lmcache_two_decimals() -> None:
    lines = [line("baseline", "x", v) for v in (30, 40)] + [line("lmcache", "x", v) for v in (9, 12, 30)]
    # baseline p50 35, mean 35; lmcache p50 12, mean 17 -> 2.9166 -> 2.92, 2.0588 -> 2.06
    assert summarize(lines)["ratio"] == {"x": {"p50": 2.92, "mean": 2.06}}


def test_zero_lmcache_statistic_gives_null_ratio() -> None:
    lines = [line("baseline", "p", 20), line("lmcache", "p", 0), line("lmcache", "p", 0), line("lmcache", "p", 3)]
    # lmcache p50 0 -> null; mean 1 -> 20 / 1 = 20.0
    summary = summarize(lines)
    assert summary["lmcache"]["p"] == {"n": 3, "p50_ms": 0.0, "mean_ms": 1.0}
    assert summary["ratio"] == {"p": {"p50": None, "mean": 20.0}}
    both_zero = summarize([line("baseline", "q", 0), line("lmcache", "q", 0)])
    assert both_zero["ratio"] == {"q": {"p50": None, "mean": None}}


def test_ratio_only_for_passes_in_both_configs() -> None:
    lines = [line("baseline", "only-base", 5), line("lmcache", "only-lm", 5), line("baseline", "both", 8),
             line("lmcache", "both", 4)]
    summary = summarize(lines)
    assert list(summary["baseline"]) == ["only-base", "both"]
    assert list(summary["lmcache"]) == ["only-lm", "both"]
    assert summary["ratio"] == {"both": {"p50": 2.0, "mean": 2.0}}


def test_any_pass_names_and_number_of_documents() -> None:
    names = ["warm-up", "pass 7 (hot)", "\u00fcber", "1", "fwd"]
    lines = [line(config, name, 10 + doc, doc=doc) for name in names for config in ("baseline", "lmcache")
             for doc in range(len(name))]
    summary = summarize(lines)
    assert list(summary["baseline"]) == names == list(summary["ratio"])
    assert {name: stats["n"] for name, stats in summary["lmcache"].items()} == {n: len(n) for n in names}


def test_pass_order_is_first_appearance_in_the_file() -> None:
    lines = [line("lmcache", "B", 1), line("baseline", "A", 2), line("baseline", "B", 3), line("lmcache", "A", 4)]
    summary = summarize(lines)
    assert list(summary["baseline"]) == ["B", "A"]
    assert list(summary["lmcache"]) == ["B", "A"]
    assert list(summary["ratio"]) == ["B", "A"]


def test_line_order_does_not_change_statistics() -> None:
    rng = random.Random(5)
    lines = [line(rng.choice(["baseline", "lmcache"]), rng.choice("abc"), round(rng.uniform(0, 50), 1), doc=i)
             for i in range(200)]
    reference = summarize(lines)
    for _ in range(5):
        shuffled = lines[:]
        rng.shuffle(shuffled)
        result = summarize(shuffled)
        assert json.dumps(result, sort_keys=True) == json.dumps(reference, sort_keys=True)


def test_against_independent_computation_on_random_data() -> None:
    rng = random.Random(11)
    lines = [line(rng.choice(["baseline", "lmcache"]), rng.choice(["p", "q"]), rng.randint(0, 400) / 10, doc=i)
             for i in range(301)]
    summary = summarize(lines)
    for config in ("baseline", "lmcache"):
        for pass_name in ("p", "q"):
            values = sorted(json.loads(t)["ttft_ms"] for t in lines
                            if json.loads(t)["config"] == config and json.loads(t)["pass"] == pass_name)
            n = len(values)
            median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
            assert summary[config][pass_name] == {"n": n, "p50_ms": round(median, 1),
                                                  "mean_ms": round(sum(values) / n, 1)}


def test_blank_lines_and_extra_fields_are_ignored() -> None:
    lines = ["", line("baseline", "p", 7, tier="gpu", rep=2, store_ms=1.3), "   ", "\t", line("lmcache", "p", 7)]
    summary = summarize(lines)
    assert summary["baseline"] == {"p": {"n": 1, "p50_ms": 7.0, "mean_ms": 7.0}}
    assert summary["ratio"] == {"p": {"p50": 1.0, "mean": 1.0}}


def test_empty_input_gives_empty_sections() -> None:
    assert summarize([]) == {"baseline": {}, "lmcache": {}, "ratio": {}}
    assert summarize(["", "  "]) == {"baseline": {}, "lmcache": {}, "ratio": {}}


def test_bytes_lines_and_utf8_bom() -> None:
    raw = ("\ufeff" + line("baseline", "p", 3) + "\n" + line("lmcache", "p", 1) + "\n").encode("utf-8")
    assert summarize(raw.splitlines(keepends=True))["ratio"] == {"p": {"p50": 3.0, "mean": 3.0}}
    with pytest.raises(SummaryError, match=r"^data\.jsonl:2: line is not valid UTF-8$"):
        summarize([line("baseline", "p", 3).encode(), b"\xff\xfe{}\n"], name="data.jsonl")


# --------------------------------------------------------------------------------------
# Malformed lines: FILE:LINE messages, pinned
# --------------------------------------------------------------------------------------

BAD_LINES = [
    ("{not json", "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
    ('{"config": "baseline",', "invalid JSON: Expecting property name enclosed in double quotes (column 23)"),
    ("[1, 2]", "each line must be a JSON object, got a JSON array"),
    ("null", "each line must be a JSON object, got a JSON null"),
    ("42", "each line must be a JSON object, got a JSON number"),
    ('"text"', "each line must be a JSON object, got a JSON string"),
    ('{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "total_ms": 2}',
     "missing required field(s) ttft_ms; every line needs config, pass, doc, doc_tokens, ttft_ms, total_ms"),
    ('{"ttft_ms": 3}',
     ("missing required field(s) config, pass, doc, doc_tokens, total_ms; every line needs config, pass, doc, "
     "doc_tokens, ttft_ms, total_ms")),
    (line("vllm", "p", 3), 'config must be one of baseline, lmcache, got "vllm"'),
    (line("Baseline", "p", 3), 'config must be one of baseline, lmcache, got "Baseline"'),
    (line("baseline", 3, 3), "pass must be a non-empty string, got 3"),
    (line("baseline", "", 3), 'pass must be a non-empty string, got ""'),
    (line("baseline", "p", "37.2"), 'ttft_ms must be a finite number >= 0, got "37.2"'),
    (line("baseline", "p", None), "ttft_ms must be a finite number >= 0, got null"),
    (line("baseline", "p", True), "ttft_ms must be a finite number >= 0, got true"),
    (line("baseline", "p", -0.1), "ttft_ms must be a finite number >= 0, got -0.1"),
    (line("baseline", "p", float("nan")), "ttft_ms must be a finite number >= 0, got nan"),
    (line("baseline", "p", float("inf")), "ttft_ms must be a finite number >= 0, got inf"),
    ('{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "total_ms": 2, "ttft_ms": 1e999}',
     "ttft_ms must be a finite number >= 0, got inf"),
]


@pytest.mark.parametrize(("bad", "reason"), BAD_LINES)
def test_malformed_line_names_file_and_line(bad: str, reason: str, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [line("baseline", "p", 1), "", bad, line("lmcache", "p", 1)])
    with pytest.raises(SummaryError) as info:
        summarize(source)
    assert str(info.value) == f"{source}:3: {reason}"


@pytest.mark.parametrize(("bad", "reason"), BAD_LINES[::3])
def test_cli_malformed_line_exit_1_and_no_output(bad: str, reason: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    source = write_lines(tmp_path / "in.jsonl", [line("baseline", "p", 1), bad])
    output = tmp_path / "out.json"
    assert main([str(source), str(output)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"{source}:2: {reason}" in err and "Traceback" not in err
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # no temporary file left


def test_cli_error_keeps_existing_output_unchanged(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", ["{broken"])
    output = tmp_path / "out.json"
    output.write_text("previous\n")
    assert main([str(source), str(output)]) == 1
    assert output.read_text() == "previous\n"


def test_cli_missing_input_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.jsonl"
    assert main([str(missing), str(tmp_path / "out.json")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"{missing}: cannot read the input file: No such file or directory" in err
    assert not (tmp_path / "out.json").exists()


def test_cli_input_is_a_directory_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), str(tmp_path / "out.json")]) == 1
    assert "cannot read the input file: Is a directory" in capsys.readouterr().err


def test_cli_unwritable_output_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_lines(tmp_path / "in.jsonl", [line("baseline", "p", 1)])
    output = tmp_path / "no-such-dir" / "out.json"
    assert main([str(source), str(output)]) == 1
    assert f"cannot write {output}: No such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["only-input.jsonl"], ["a", "b", "c"]])
def test_cli_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage:" in err and "Traceback" not in err


def test_cli_writes_indented_json_with_trailing_newline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [line("baseline", "p", 30), line("lmcache", "p", 20)]
    source = write_lines(tmp_path / "in.jsonl", lines)
    output = tmp_path / "out.json"
    assert main([str(source), str(output)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"wrote {output}" in err
    expected = {"baseline": {"p": {"n": 1, "p50_ms": 30.0, "mean_ms": 30.0}},
                "lmcache": {"p": {"n": 1, "p50_ms": 20.0, "mean_ms": 20.0}},
                "ratio": {"p": {"p50": 1.5, "mean": 1.5}}}
    assert output.read_text() == json.dumps(expected, indent=2) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.json"]


def test_atomic_write_cleans_up_when_replace_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(summarize_module.os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / "out.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_gives_normal_permissions(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "out.json", {})
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o666 & ~mask


# --------------------------------------------------------------------------------------
# The bundled measurements, and running as a script / standalone copy
# --------------------------------------------------------------------------------------

# Medians over all reps from data/fixtures/README.md (protocol 1 table), an independent source.
README_MEDIANS = {
    "baseline": {"pass1-cold": 37.0, "pass2-replay": 37.0, "pass3-reverse": 37.0},
    "lmcache": {"pass1-cold": 37.5, "pass2-replay": 26.1, "pass3-reverse": 29.0},
}


def test_bundled_measurements_match_the_data_readme(repo_root: Path) -> None:
    summary = summarize(repo_root / "data" / "ttft.jsonl")
    for config, medians in README_MEDIANS.items():
        assert list(summary[config]) == list(medians)
        assert {p: s["p50_ms"] for p, s in summary[config].items()} == medians
        assert all(stats["n"] == 30 for stats in summary[config].values())
    assert list(summary["ratio"]) == ["pass1-cold", "pass2-replay", "pass3-reverse"]


def test_runs_as_module_and_as_standalone_copy(run_python, repo_root: Path, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [line("baseline", "p", 9), line("lmcache", "p", 3)])
    proc = run_python(["-m", "kvlab.summarize", str(source), str(tmp_path / "a.json")], cwd=repo_root)
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("kvsim.py", "scenario.py", "summarize.py"):
        shutil.copy(repo_root / "kvlab" / name, copy / name)
    proc = run_python(["summarize.py", str(source), str(tmp_path / "b.json")], cwd=copy, see_repo=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert json.loads((tmp_path / "b.json").read_text())["ratio"] == {"p": {"p50": 3.0, "mean": 3.0}}
    bad = write_lines(tmp_path / "bad.jsonl", ["", "[]"])
    proc = run_python(["summarize.py", str(bad), str(tmp_path / "c.json")], cwd=copy, see_repo=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"{bad}:2: each line must be a JSON object" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "c.json").exists()


def test_summarize_doctests_pass() -> None:
    result = doctest.testmod(summarize_module)
    assert result.attempted > 0 and result.failed == 0
