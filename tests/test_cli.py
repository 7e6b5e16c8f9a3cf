"""The stackdist command: outputs equal the library, bad input gives clear errors and codes."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from naive import lru_hits, run_stackdist


@pytest.fixture()
def trace_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("key,size\na,3\nb,2\na,3\nc,4\nb,2\na,3\n")
    return path


run = run_stackdist


def test_curve_json_matches_lru(capsys, trace_csv):
    code, out, err = run(capsys, "curve", trace_csv, "--capacities", "0,2,3,5,9,12")
    assert code == 0 and err == ""
    result = json.loads(out)
    keys, sizes = list("abacba"), [3, 2, 3, 4, 2, 3]
    assert result["curve"]["hits"] == [lru_hits(keys, sizes, c)[0] for c in (0, 2, 3, 5, 9, 12)]
    assert result["summary"]["accesses"] == 6


def test_curve_csv_window_and_formats(capsys, tmp_path):
    keys = np.array([1, 2, 3, 1, 2, 3, 1], dtype=np.int64)
    np.save(tmp_path / "k.npy", keys)
    (tmp_path / "k.jsonl").write_text("".join(json.dumps({"key": int(k)}) + "\n" for k in keys))
    outputs = []
    for name in ("k.npy", "k.jsonl"):
        code, out, _ = run(capsys, "curve", tmp_path / name, "--capacities", "2,3", "--window", "3:", "--csv")
        assert code == 0
        outputs.append(list(csv.DictReader(io.StringIO(out))))
    assert outputs[0] == outputs[1]
    assert [int(r["hits"]) for r in outputs[0]] == [lru_hits(keys.tolist(), None, c, (3, None))[0] for c in (2, 3)]


def test_tiers_json(capsys, trace_csv):
    code, out, _ = run(capsys, "tiers", trace_csv, "--gpu", "3", "--gpu", "5", "--cpu", "0,4,9", "--exclusive")
    assert code == 0
    result = json.loads(out)
    assert result["inclusive"]["gpu_capacity"] == [3, 5]
    assert np.array(result["inclusive"]["misses"]).shape == (2, 3)
    assert result["exclusive"]["exact"] is False


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_output_file_and_plot(capsys, tmp_path, trace_csv):
    pytest.importorskip("matplotlib")
    out_json, png = tmp_path / "o" / "c.json", tmp_path / "c.png"
    code, out, _ = run(capsys, "curve", trace_csv, "--output", out_json, "--plot", png)
    assert code == 0 and out == ""
    assert json.loads(out_json.read_text())["summary"]["accesses"] == 6
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, _ = run(capsys, "tiers", trace_csv, "--gpu", "3", "--plot", tmp_path / "t.png", "--output", tmp_path / "t.json")
    assert code == 0 and (tmp_path / "t.png").exists()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["curve", "{missing}"], 1, "no such file"),
        (["curve", "{bad}"], 1, "bad.csv:3:"),
        (["curve", "{good}", "--capacities", "1,x"], 2, "--capacities must be a comma-separated list"),
        (["curve", "{good}", "--targets", "1.5"], 2, "--targets must be a comma-separated list of fractions"),
        (["curve", "{good}", "--window", "1:2:3"], 2, "--window must look like START:STOP"),
        (["curve", "{good}", "--points", "1"], 2, "--points: must be an integer from 2"),
        (["curve", "{good}", "--format", "xml"], 2, "argument --format: unknown format 'xml'; one of csv, tsv"),
        (["plan", "{good}", "--format", "qwenn"], 2, "argument --format: unknown format 'qwenn' (did you mean 'qwen'?)"),
        (["tiers", "{good}"], 2, "--gpu"),
        (["tiers", "{good}", "--gpu", "-3"], 2, "--gpu must be"),
        (["frobnicate"], 2, "unknown command: 'frobnicate'"),
    ],
)
def test_bad_input(capsys, tmp_path, trace_csv, argv, code, message):
    (tmp_path / "bad.csv").write_text("key,size\na,1\nb,zero\n")
    paths = {"{missing}": str(tmp_path / "nope.csv"), "{bad}": str(tmp_path / "bad.csv"), "{good}": str(trace_csv)}
    got, out, err = run(capsys, *[paths.get(a, a) for a in argv])
    assert got == code
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_help_has_examples_and_module_entry_point(capsys):
    result = subprocess.run([sys.executable, "-m", "stackdist", "curve", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "examples:" in result.stdout
    # A usage error (no --gpu), in-process: the same main() that -m runs (test_hostile runs the
    # error paths in fresh processes).
    code, _, err = run(capsys, "tiers", "x.csv")
    assert code == 2 and "--gpu" in err and "Traceback" not in err


@pytest.mark.xdist_group("real_lru")  # one worker: the memoised naive.real_lru_flags replays are shared
def test_request_trace_formats_replay_the_block_stream(capsys):
    from naive import real_lru_flags, real_trace_paths

    path = real_trace_paths()[1]
    code, out, _ = run(capsys, "curve", path, "--format", "mooncake", "--capacities", "37,2000")
    assert code == 0
    # An LRU over the trace's block stream (naive.real_lru_flags, the replays test_curve checks too)
    assert json.loads(out)["curve"]["hits"] == [int(real_lru_flags(path, c).sum()) for c in (37, 2000)]


@pytest.mark.parametrize("option", ["--output", "--plot"])
def test_unwritable_output_fails_early_and_cleanly(capsys, tmp_path, trace_csv, option):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, out, err = run(capsys, "curve", trace_csv, option, blocker / "out")
    assert code == 1 and out == "" and f"{option} {blocker / 'out'}: cannot create folder" in err
    assert "Traceback" not in err


def test_plan_unwritable_json(capsys, tmp_path):
    from naive import real_trace_paths

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, out, err = run(capsys, "plan", real_trace_paths()[1], "--json", blocker / "p.json")
    assert code == 1 and out == "" and "--json" in err and "Traceback" not in err


def test_progress_bar_only_on_a_terminal():
    import io as _io

    from stackdist.output import Progress

    quiet = _io.StringIO()
    bar = Progress("replay", stream=quiet)
    bar(5, 10)
    bar.close()
    assert quiet.getvalue() == ""  # a StringIO is not a terminal
    shown = _io.StringIO()
    shown.isatty = lambda: True  # a terminal: the redrawn bar
    bar = Progress("replay", stream=shown, enabled=True)
    bar(10, 10)
    bar.close()
    assert "replay [" in shown.getvalue() and "100.0%" in shown.getvalue()
    logged = _io.StringIO()  # asked for (--progress) off a terminal: one line at the end, no carriage returns
    bar = Progress("replay", stream=logged, enabled=True)
    bar(5, 10)
    bar(10, 10)
    bar.close()
    assert logged.getvalue() == "replay: 10/10 done\n"


def test_top_level_help_and_version_load_no_numpy_and_equal_the_full_parser():
    import contextlib
    import importlib

    cli_main = importlib.import_module("stackdist.cli.main")

    def answer(parser, argv):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()), \
                pytest.raises(SystemExit) as stop:
            parser.parse_args(argv)
        return buffer.getvalue(), stop.value.code

    for argv in (["--help"], ["-h"], ["--version"], []):
        assert answer(cli_main.top_level_parser(), argv) == answer(cli_main.build_parser(), argv)
    code = ("import sys, contextlib, io\nfrom stackdist.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['--help'])\n    except SystemExit: pass\n"
            "print(sorted(m for m in ('numpy', 'numba', 'stackdist.engine') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_lazy_package_exports_every_name_of_all():
    import stackdist

    assert set(stackdist.__all__) <= set(dir(stackdist))
    for name in stackdist.__all__:
        assert getattr(stackdist, name) is not None
    from stackdist import HitCurve, reblock  # noqa: F401  (the from-import form)

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        stackdist.nope  # noqa: B018
