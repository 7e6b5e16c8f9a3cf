"""Hostile input, every command: never lose a file, never a wrong answer with exit 0, one clear
line and the documented exit code (0 ok, 1 data, 2 usage, 130 Ctrl-C, 141 broken pipe).

In-process (``stackdist.cli.main``) except where a real process is needed (closed stdout,
signals). Tiny inputs only.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stackdist.cli import main
from stackdist.output import check_outputs, is_stream, same_file, write_atomic

INT64_MAX = 2**63 - 1
REPO = Path(__file__).resolve().parent.parent

MOONCAKE = "".join(
    json.dumps({"timestamp": 1000 * i, "input_length": 1536, "output_length": 4, "hash_ids": [0, 1 + i % 3, 10 + i]}) + "\n"
    for i in range(8)
)


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors (exit 2) and --help
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def t(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\nb\na\nb\nc\nd\n")
    return path


@pytest.fixture()
def req(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(MOONCAKE)
    return path


def one_line_error(err, code, expected_code, *needles):
    assert code == expected_code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error" in line or "interrupted" in line]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in err, err


# ------------------------------------------------------------------ data loss
OUTPUT_AS_INPUT = [
    ("curve", "{t}", "-o", "{t}"),
    ("curve", "{t}", "--output", "{t}"),
    ("curve", "{t}", "--plot", "{t}"),
    ("curve", "{t}", "--csv", "-o", "{link}"),
    ("curve", "{t}", "-o", "{hard}"),
    ("tiers", "{t}", "--gpu", "1", "-o", "{t}"),
    ("tiers", "{t}", "--gpu", "1", "--plot", "{link}"),
    ("plan", "{r}", "--json", "{r}"),
    ("plan", "{r}", "--plot", "{r}"),
    ("plan", "{r}", "--output", "{rlink}"),
]


@pytest.mark.parametrize("argv", OUTPUT_AS_INPUT)
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(capsys, tmp_path, t, req, argv):
    (tmp_path / "link.csv").symlink_to(t)
    os.link(t, tmp_path / "hard.csv")
    (tmp_path / "rlink.jsonl").symlink_to(req)
    names = {"{t}": t, "{link}": tmp_path / "link.csv", "{hard}": tmp_path / "hard.csv", "{r}": req,
             "{rlink}": tmp_path / "rlink.jsonl"}
    before = t.read_bytes(), req.read_bytes()
    code, _, err = run(capsys, *[names.get(a, a) for a in argv])
    one_line_error(err, code, 2, "is the input")
    assert (t.read_bytes(), req.read_bytes()) == before
    assert (tmp_path / "link.csv").is_symlink()


def test_two_outputs_naming_one_file_are_refused(capsys, tmp_path, t):
    code, _, err = run(capsys, "curve", t, "-o", tmp_path / "x", "--plot", tmp_path / "x")
    one_line_error(err, code, 2, "same file")
    assert not (tmp_path / "x").exists()


def test_a_symlinked_output_is_written_through(capsys, tmp_path, t):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    code, _, err = run(capsys, "curve", t, "-o", link)
    assert code == 0, err
    assert link.is_symlink() and json.loads(target.read_text())["kind"] == "curve"


def test_modes_follow_the_umask_and_the_existing_file(capsys, tmp_path, t):
    old = os.umask(0o002)
    try:
        fresh, kept = tmp_path / "new.json", tmp_path / "kept.json"
        kept.write_text("{}")
        kept.chmod(0o664)
        assert run(capsys, "curve", t, "-o", fresh)[0] == 0
        assert run(capsys, "curve", t, "-o", kept)[0] == 0
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o664
        assert stat.S_IMODE(kept.stat().st_mode) == 0o664
    finally:
        os.umask(old)


def test_character_devices_and_fifos_are_written_directly(tmp_path):
    assert is_stream("-") and is_stream("/dev/stdout") and is_stream("/dev/null")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_atomic(fifo, "through the pipe\n")
    reader.join(5)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_full_disk_keeps_the_old_file_and_names_the_output(capsys, tmp_path, t, monkeypatch):
    out = tmp_path / "out.json"
    out.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    code, _, err = run(capsys, "curve", t, "-o", out)
    one_line_error(err, code, 1, f"{out}: No space left on device")
    assert "None" not in err and out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "t.csv"]


def test_dev_full_is_a_clear_error(capsys, t):
    code, _, err = run(capsys, "curve", t, "-o", "/dev/full")
    one_line_error(err, code, 1, "/dev/full: No space left on device")


def test_same_file_sees_links(tmp_path, t):
    (tmp_path / "l").symlink_to(t)
    assert same_file(t, tmp_path / "l") and not same_file(t, tmp_path / "missing")
    check_outputs([("-o", "-"), ("--plot", None)], [t])


# ------------------------------------------------------------------ wrong numbers
def test_capacity_int64_max_never_counts_cold_misses(capsys, t):
    code, out, err = run(capsys, "tiers", t, "--gpu", INT64_MAX, "--cpu", "0", "--exclusive")
    assert code == 0, err
    result = json.loads(out)
    assert result["inclusive"]["gpu_hits"] == [[2]] and result["inclusive"]["misses"] == [[4]]
    assert result["exclusive"]["gpu_hits"] == [[2]]


def test_exclusive_band_edges_do_not_overflow(capsys, t):
    code, out, err = run(capsys, "tiers", t, "--gpu", 2**62, "--cpu", 2**62, "--exclusive")
    assert code == 0, err
    ex = json.loads(out)["exclusive"]
    assert ex["gpu_hits"] == [[2]] and ex["cpu_hits"] == [[0]] and ex["misses"] == [[4]]


def test_sizes_summing_beyond_int64_are_refused(capsys, tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(f"a,{2**62}\nb,{2**62}\na,{2**62}\n")
    code, out, err = run(capsys, "curve", path)
    one_line_error(err, code, 1, "2^63")
    assert out == ""


EMPTY_INPUTS = {"empty": "", "blank": "\n  \n\n", "comments": "# nothing\n"}


@pytest.mark.parametrize("command", [["curve"], ["tiers", "--gpu", "1"]])
@pytest.mark.parametrize("content", sorted(EMPTY_INPUTS))
def test_empty_traces_are_exit_1(capsys, tmp_path, command, content):
    path = tmp_path / "e.csv"
    path.write_text(EMPTY_INPUTS[content])
    code, out, err = run(capsys, command[0], path, *command[1:])
    one_line_error(err, code, 1, "nothing to answer from")
    assert out == ""


@pytest.mark.parametrize("extra", [["--window", "3:3"], ["--window=-1:-2"], ["--warmup", "100%"], ["--warmup", "6"]])
@pytest.mark.parametrize("command", [["curve"], ["tiers", "--gpu", "1"]])
def test_nothing_counted_is_exit_1(capsys, t, command, extra):
    code, _, err = run(capsys, command[0], t, *command[1:], *extra)
    one_line_error(err, code, 1, "nothing to answer from")


def test_dev_null_is_empty(capsys):
    code, _, err = run(capsys, "curve", "/dev/null", "--format", "csv")
    one_line_error(err, code, 1, "nothing to answer from")


def test_warmup_as_a_percentage(capsys, t):
    code, out, _ = run(capsys, "curve", t, "--warmup", "50%", "--capacities", "2")
    assert code == 0 and json.loads(out)["summary"]["accesses"] == 3


# ------------------------------------------------------------------ crashes and bounds
@pytest.mark.parametrize("argv,flag", [
    (["curve", "{t}", "--capacities", str(2**63)], "--capacities"),
    (["curve", "{t}", "--capacities", "1" + "0" * 400], "--capacities"),
    (["curve", "{t}", "--points", str(10**12)], "--points"),
    (["curve", "{t}", "--points", "1e30"], "--points"),
    (["tiers", "{t}", "--gpu", str(2**63)], "--gpu"),
    (["tiers", "{t}", "--gpu", "1e30"], "--gpu"),
    (["tiers", "{t}", "--gpu", "1", "--cpu", str(-1)], "--cpu"),
    (["tiers", "{t}", "--gpu", "1", "--cpu", str(2**64)], "--cpu"),
    (["tiers", "{t}", "--gpu", "1", "--cpu-points", "1"], "--cpu-points"),
    (["tiers", "{t}", "--gpu", "1", "--cpu-points", str(10**12)], "--cpu-points"),
    (["curve", "{t}", "--window", "x:"], "--window"),
    (["curve", "{t}", "--window", "1:2:3"], "--window"),
    (["curve", "{t}", "--window", str(2**70) + ":"], "--window"),
    (["curve", "{t}", "--warmup", "150%"], "--warmup"),
    (["curve", "{t}", "--output", ""], "--output"),
])
def test_bad_arguments_are_exit_2_naming_the_flag(capsys, t, argv, flag):
    code, out, err = run(capsys, *[str(t) if a == "{t}" else a for a in argv])
    assert code == 2 and "Traceback" not in err and flag in err, err
    assert out == ""


def test_library_names_do_not_leak(capsys, t):
    code, _, err = run(capsys, "tiers", t, "--gpu", "1", "--cpu-points", "1")
    assert code == 2 and "--cpu-points" in err and "--points" not in err.replace("--cpu-points", "")


def test_help_shows_the_negative_window_form(capsys):
    with pytest.raises(SystemExit):
        main(["curve", "--help"])
    assert "--window=-2:" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["curve", "tiers", "plan"])
def test_version_on_every_subcommand(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("stackdist ")


# ------------------------------------------------------------------ messages
def test_a_key_whose_size_changes_is_reported_by_file_and_line(capsys, tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("key,size\n# a comment\na,2\nb,2\na,3\n")
    code, _, err = run(capsys, "curve", path)
    one_line_error(err, code, 1, f"{path}:5:", "size")
    jl = tmp_path / "s.jsonl"
    jl.write_text('{"key": 1, "size": 2}\n\n{"key": 1, "size": 5}\n')
    code, _, err = run(capsys, "tiers", jl, "--gpu", "1")
    one_line_error(err, code, 1, f"{jl}:3:")


def test_an_output_folder_is_named_as_given_and_checked_before_any_work(capsys, tmp_path, t):
    code, _, err = run(capsys, "curve", t, "--output", tmp_path / "ok.json", "--plot", tmp_path)
    one_line_error(err, code, 2, f"--plot {tmp_path}", "folder")
    assert not (tmp_path / "ok.json").exists() and ".tmp" not in err


def test_an_output_under_a_file_is_a_clear_error(capsys, tmp_path, t):
    code, _, err = run(capsys, "curve", t, "-o", t.parent / "t.csv" / "x.json")
    assert code == 1 and "Traceback" not in err and "--output" in err


def test_unreachable_targets_say_why(capsys, t):
    code, out, _ = run(capsys, "curve", t, "--targets", "0.9")
    result = json.loads(out)
    assert code == 0 and result["min_capacity_for_hit_rate"]["0.9"] is None
    assert "cold misses" in result["unreachable"]["0.9"]["reason"]  # the same shape as plan's


def test_json_outputs_carry_schema_and_tool_version(capsys, t):
    from stackdist.version import __version__

    for argv in (["curve", t], ["tiers", t, "--gpu", "1"]):
        result = json.loads(run(capsys, *argv)[1])
        assert result["schema_version"] >= 1 and result["tool"] == {"name": "stackdist", "version": __version__}


# ------------------------------------------------------------------ real processes
def test_closed_stdout_never_loses_the_output_files(tmp_path, req):
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "stackdist", "plan", str(req), "--json", str(out)], cwd=REPO, check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["schema_version"] >= 1


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    fifo = tmp_path / "never.csv"
    os.mkfifo(fifo)  # opening it blocks until interrupted
    proc = subprocess.Popen([sys.executable, "-m", "stackdist", "curve", str(fifo), "-o", str(tmp_path / "o.json")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:  # wait until the child opens the FIFO (it is then past its imports, reading)
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    os.close(writer)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o.json").exists()


# ------------------------------------------------------------------ plan: bounds, empty input, table
@pytest.mark.parametrize("argv,code,needle", [
    (["--window", ""], 2, "--window"),
    (["--every", "1e-6s"], 2, "windows"),
    (["--warmup", "100%"], 1, "nothing to answer from"),
    (["--warmup", "8"], 1, "nothing to answer from"),
    (["--warmup", "101%"], 2, "--warmup"),
    (["--block-size", "1e30"], 2, "--block-size"),
    (["--reblock", "7"], 2, "--reblock must divide"),
    (["--reblock", str(2**70)], 2, "--reblock"),
    (["--prices", "hbm=nan"], 2, "--prices"),
    (["--prices", "hbm=inf"], 2, "--prices"),
])
def test_plan_arguments(capsys, req, argv, code, needle):
    got, out, err = run(capsys, "plan", req, *argv)
    assert got == code and "Traceback" not in err and needle in err, err
    assert out == ""


@pytest.mark.parametrize("content", ["", "\n\n", "not json\n{}\n"])
def test_plan_on_empty_or_all_bad_input_is_exit_1(capsys, tmp_path, content):
    path = tmp_path / "e.jsonl"
    path.write_text(content)
    code, _, err = run(capsys, "plan", path, "--skip-bad")
    one_line_error(err, code, 1, "nothing to answer from")


def test_plan_csv_key_changing_size_names_the_line(capsys, tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("a,2\nb,2\na,3\n")
    code, _, err = run(capsys, "plan", path, "--format", "csv")
    one_line_error(err, code, 1, f"{path}:3:")


def test_model_config_beyond_int64_is_a_clear_error(capsys, tmp_path, req):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 1%s, "num_attention_heads": 8, "hidden_size": 512, '
                   '"torch_dtype": "float16"}' % ("0" * 30))
    code, _, err = run(capsys, "plan", req, "--model-config", cfg)
    one_line_error(err, code, 2, "--model-config")
    cfg.write_text('{"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512}')
    code, _, err = run(capsys, "plan", req, "--model-config", cfg)
    one_line_error(err, code, 2, "torch_dtype")
    assert "dtype=" not in err


def test_plan_table_says_what_the_json_has(capsys, req, tmp_path):
    code, out, err = run(capsys, "plan", req, "--window", "3s", "--targets", "0.5,0.9", "-o", tmp_path / "p.json")
    assert code == 0, err
    assert "reuse hit rate" not in out.split("working set")[0]  # never a line that is 100 % by definition
    assert "percentage points" in out and "cumulative" in out
    report = json.loads((tmp_path / "p.json").read_text())
    windows = report["semantics"]["engine"]["time_windows"]
    assert out.count("of ceiling  ") >= 0 and len(windows) >= 2
    assert out.count("50.0% of ceiling") >= 2 * len(windows) and out.count("90.0% of ceiling") >= 2 * len(windows)
    assert "unreachable (no capacity reaches" in out or "unreachable" not in out  # with the JSON's reason


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_plan_plot_and_json_are_written(capsys, req, tmp_path):
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, "plan", req, "--json", tmp_path / "p.json", "--plot", tmp_path / "p.png")
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_plan_per_request_output_is_guarded_too(capsys, req):
    before = req.read_bytes()
    code, _, err = run(capsys, "plan", req, "--semantics", "vllm", "--per-request", req)
    one_line_error(err, code, 2, "is the input")
    assert req.read_bytes() == before


def test_tiers_bounds_the_number_of_gpu_capacities(capsys, t):
    code, _, err = run(capsys, "tiers", t, "--gpu", ",".join(["1"] * 300))
    one_line_error(err, code, 2, "--gpu")


def test_output_names_with_nul_are_usage_errors(capsys, t):
    code, _, err = run(capsys, "curve", t, "-o", "a\0b")
    assert code == 2 and "Traceback" not in err


def test_a_folder_of_files_is_written_as_one_unit(tmp_path, monkeypatch):
    from stackdist.output import write_files_atomic

    out = tmp_path / "lab"
    write_files_atomic(out, {"a.json": "old a", "b.json": "old b", "c.json": "old c"})
    (out / "a.json").chmod(0o640)
    calls = []

    def full_on_third(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_on_third)
    with pytest.raises(OSError, match="No space left"):
        write_files_atomic(out, {"a.json": "new a", "b.json": "new b", "c.json": "new c"})
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "b.json", "c.json"]
    assert [(out / n).read_text() for n in ("a.json", "b.json", "c.json")] == ["old a", "old b", "old c"]
    monkeypatch.undo()
    write_files_atomic(out, {"a.json": "new a"})
    assert (out / "a.json").read_text() == "new a" and stat.S_IMODE((out / "a.json").stat().st_mode) == 0o640


def test_warmup_as_a_duration_on_a_request_trace(capsys, req):
    code, out, err = run(capsys, "curve", req, "--format", "mooncake", "--warmup", "3s", "--capacities", "4")
    assert code == 0, err
    assert json.loads(out)["summary"]["accesses"] == 5 * 3  # requests at 3, 4, ..., 7 s, three blocks each
    code, _, err = run(capsys, "curve", req, "--format", "mooncake", "--warmup", "1h")
    one_line_error(err, code, 1, "nothing to answer from")
    code, _, err = run(capsys, "curve", req, "--warmup", "3s", "--format", "jsonl")
    assert code in (1, 2) and "Traceback" not in err


def test_a_trace_without_reuse_reports_no_capacity_as_reaching_a_fraction_of_its_ceiling(capsys, tmp_path):
    path = tmp_path / "u.csv"
    path.write_text("a\nb\nc\n")
    code, out, _ = run(capsys, "curve", path, "--targets", "0.5")
    result = json.loads(out)
    assert code == 0 and result["min_capacity_for_fraction_of_ceiling"] == {"0.5": None} and "no_reuse" in result


def test_plan_with_no_prompt_blocks_is_exit_1(capsys, tmp_path):
    path = tmp_path / "nob.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 0, "output_length": 5, "hash_ids": []}) + "\n"
                            for i in range(3)))
    code, out, err = run(capsys, "plan", path)
    one_line_error(err, code, 1, "nothing to answer from", "no prompt blocks")
    assert out == ""


def test_plan_table_without_reuse_does_not_claim_zero_capacity_meets_a_fraction_of_the_ceiling(capsys, tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 1024, "output_length": 5,
                                        "hash_ids": [2 * i, 2 * i + 1]}) + "\n" for i in range(3)))
    code, out, _ = run(capsys, "plan", path, "--semantics", "engine")
    assert code == 0 and "no block is ever reused" in out
# ------------------------------------------------------------------ kvlab
from kvlab.__main__ import main as kvlab_main

TTFT_LINES = "".join(
    json.dumps({"config": c, "pass": "p1", "doc": 0, "doc_tokens": 8, "ttft_ms": ms, "total_ms": 90}) + "\n"
    for c, ms in (("baseline", 30), ("lmcache", 20))
)
SMALL_BLOCK_LAB = ["--gpu", "128", "--docs", "3", "--tokens", "64", "--question-tokens", "16"]


def kv(capsys, *argv):
    try:
        code = kvlab_main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_kvlab_summarize_never_overwrites_its_input(capsys, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(TTFT_LINES)
    (tmp_path / "link.json").symlink_to(src)
    for out in (src, tmp_path / "link.json"):
        code, _, err = kv(capsys, "summarize", src, out)
        one_line_error(err, code, 2, "is the input")
    assert src.read_text() == TTFT_LINES


@pytest.mark.parametrize("value", ["1" + "0" * 400, "1" + "0" * 5000])
def test_kvlab_summarize_huge_numbers_are_one_line_errors(capsys, tmp_path, value):
    src = tmp_path / "in.jsonl"
    src.write_text(TTFT_LINES.replace("30", value, 1))
    code, _, err = kv(capsys, "summarize", src, tmp_path / "out.json")
    one_line_error(err, code, 1, f"{src}:1:")
    assert not (tmp_path / "out.json").exists() and len(err) < 400


def test_kvlab_summarize_near_the_float_maximum_writes_strict_json(capsys, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(TTFT_LINES.replace("30", "1.7e308", 1).replace('"p1", "doc": 0, "doc_tokens": 8, "ttft_ms": 20',
                                                                    '"p1", "doc": 0, "doc_tokens": 8, "ttft_ms": 1e-300'))
    with open(src, "a") as f:
        f.write(json.dumps({"config": "baseline", "pass": "p1", "doc": 1, "doc_tokens": 8, "ttft_ms": 1.7e308, "total_ms": 1}) + "\n")
    code, _, err = kv(capsys, "summarize", src, tmp_path / "out.json")
    assert code == 0, err
    text = (tmp_path / "out.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_kvlab_block_lab_guards_and_bounds(capsys, tmp_path):
    from kvlab.partial_prefix import DEFAULT_FIXTURE

    fixture = tmp_path / "f.json"
    fixture.write_bytes(Path(DEFAULT_FIXTURE).read_bytes())
    before = fixture.read_bytes()
    code, _, err = kv(capsys, "block-lab", *SMALL_BLOCK_LAB, "--fixture", fixture, "--json", fixture)
    one_line_error(err, code, 2, "is the input")
    assert fixture.read_bytes() == before
    for argv, flag in ((["--gpu", str(2**63)], "--gpu"), (["--gpu", "1e30"], "--gpu"), (["--tokens", str(10**12)], "--tokens"),
                       (["--docs", "100000", "--tokens", "10000"], "--docs")):
        code, _, err = kv(capsys, "block-lab", *argv)
        assert code == 2 and flag in err and "Traceback" not in err, err
    code, out, err = kv(capsys, "block-lab", *SMALL_BLOCK_LAB, "--json", "-")
    assert code == 0 and json.loads(out)["schema_version"] >= 1 and json.loads(out)["tool"]["name"] == "stackdist"


def test_kvlab_run_lab_folder_is_one_unit(tmp_path, monkeypatch):
    from kvlab import lab

    out = tmp_path / "lab"
    lab.run_lab(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    calls = []

    def full_on_fourth(fd):
        calls.append(fd)
        if len(calls) == 4:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_on_fourth)
    files = dict(lab.build_lab())
    files = {name: content + b" " if name.endswith(".json") else content for name, content in files.items()}
    with pytest.raises(OSError):
        lab.write_lab(out, files)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("argv,flag", [
    (["experiments", "--quick", "--out", "{file}"], "--out"),
    (["experiments", "--quick", "--out", "{file}/under"], "--out"),
    (["experiments", "--quick", "--out", ""], "--out"),
    (["experiments", "--quick", "--out", "{dir}/x", "--gpu-sessions", "inf"], "--gpu-sessions"),
    (["experiments", "--quick", "--out", "{dir}/x", "--slo-ms", "-5"], "--slo-ms"),
    (["calibration", "--fixtures", "{file}"], "--fixtures"),
    (["simulate", "--capacities", str(2**64)], "--capacities"),
])
def test_placement_arguments(capsys, tmp_path, argv, flag):
    from kvlab.placement.__main__ import main as placement_main

    (tmp_path / "f").write_text("x")
    argv = [a.replace("{file}", str(tmp_path / "f")).replace("{dir}", str(tmp_path)) for a in argv]
    try:
        code = placement_main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and flag in err and "Traceback" not in err, err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("argv", [["--version"], ["run-lab", "--version"], ["scenario", "--version"],
                                  ["summarize", "--version"], ["block-lab", "--version"]])
def test_kvlab_version_everywhere(capsys, argv):
    code, out, _ = kv(capsys, *argv)
    assert code == 0 and "kvlab" in out and out.strip().split()[-1][0].isdigit()


# One real process per entry point (python -m kvlab, python -m kvlab.placement): the interpreter
# starts with fd 1 closed (sys.stdout is None) and exits after the command. The other kvlab
# commands get the same sys.stdout = None in-process below (the command's own handling of it).
@pytest.mark.parametrize("argv", [
    ["-m", "kvlab", "scenario", "--docs", "2", "--tokens", "64", "--gpu", "64"],
    ["-m", "kvlab.placement", "calibration"],
])
def test_kvlab_closed_stdout_is_exit_1_without_traceback(tmp_path, argv):
    proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1),
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "stdout is closed" in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv", [["block-lab", *SMALL_BLOCK_LAB], ["run-lab", "--out", "{out}"]])
def test_kvlab_commands_with_stdout_closed_are_exit_1(capsys, monkeypatch, tmp_path, argv):
    # sys.stdout is None: what Python gives a process started with fd 1 closed.
    argv = [a.replace("{out}", str(tmp_path / "lab")) for a in argv]
    monkeypatch.setattr(sys, "stdout", None)
    code, _, err = kv(capsys, *argv)
    assert code == 1 and "Traceback" not in err and "stdout is closed" in err, err
    if "run-lab" in argv:
        assert len(list((tmp_path / "lab").iterdir())) == 8  # the files (and manifest.json) are written before stdout


def test_kvlab_ctrl_c_is_one_line_and_exit_130(tmp_path):
    fifo = tmp_path / "never.jsonl"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "kvlab", "summarize", str(fifo), str(tmp_path / "o.json")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while True:
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    os.close(writer)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("argv,flag", [(["--gpu", "-1"], "--gpu"), (["--docs", "1e30"], "--docs"),
                                       (["--docs", str(10**7 + 1)], "--docs"), (["--cpu", "-" + "9" * 50], "--cpu")])
def test_kvlab_scenario_integers_are_bounded(capsys, argv, flag):  # any size is allowed: tests/test_kvlab_hostile.py
    code, out, err = kv(capsys, "scenario", *argv)
    assert code == 2 and flag in err and "Traceback" not in err and out == "", err


def test_standalone_scenario_with_closed_stdout(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "kvlab" / "scenario.py"), "--docs", "2", "--tokens", "64", "--gpu", "64"],
                          cwd=tmp_path, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=60, preexec_fn=lambda: os.close(1))
    assert proc.returncode == 1 and "stdout is closed" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ Ctrl-C during the imports
_EARLY = """import os, sys
sys.argv = [{prog!r}, *{argv!r}]
import {first}  # installs the Ctrl-C handler (started as {prog!r}), before numpy and numba
os.write(2, b"ready\\n")
from {entry} import main
sys.exit(main())
"""


@pytest.mark.parametrize("prog,first,entry,argv", [
    ("stackdist", "stackdist", "stackdist.cli.main", ["curve", "{fifo}", "-o", "{out}"]),
    ("kvlab", "kvlab.__main__", "kvlab.__main__", ["block-lab", "--fixture", "{fifo}", "--json", "{out}"]),
])
def test_ctrl_c_during_the_heavy_imports_is_one_line_and_exit_130(tmp_path, prog, first, entry, argv):
    """SIGINT right after the entry point's first import (the numpy/numba imports follow) and
    a little later: exit 130, one line, no traceback, no file; children run side by side."""
    fifo = tmp_path / "never.jsonl"
    os.mkfifo(fifo)  # the command never gets past reading it
    procs = []
    for delay in (0.0, 0.3):
        out = tmp_path / f"out{delay}.json"
        code = _EARLY.format(prog=prog, first=first, entry=entry,
                             argv=[a.replace("{fifo}", str(fifo)).replace("{out}", str(out)) for a in argv])
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        procs.append((delay, out, proc))
    for delay, out, proc in procs:
        assert proc.stderr is not None and proc.stderr.readline() == "ready\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
    for delay, out, proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err, (delay, err)
        assert len(err.splitlines()) == 1 and "interrupted" in err, (delay, err)
        assert not out.exists()


# ------------------------------------------------------------------ the guard's inputs come from the parsers
@pytest.mark.parametrize("argv", [
    ("watch", "{t}", "--no-follow", "--prometheus", "{t}"),
    ("watch", "{t}", "--no-follow", "-o", "{t}"),
    ("watch", "{t}", "--no-follow", "--output", "{link}"),
    ("curve", "{t}", "--sample-rate", "0.5", "-o", "{t}"),
    ("tiers", "{t}", "--gpu", "1", "--sample-rate", "0.5", "--plot", "{t}"),
    ("plan", "{r}", "--ttft-calibration", "{cal}", "--json", "{cal}"),
    ("plan", "{r}", "--schedule", "{cal}", "--plot", "{cal}"),
    ("plan", "{r}", "--semantics", "vllm", "--per-request", "{r}"),
])
def test_every_commands_inputs_are_guarded(capsys, tmp_path, t, req, argv):
    cal = tmp_path / "cal.jsonl"
    cal.write_text('{"uncached_tokens": 10, "ttft_ms": 5}\n')
    link = tmp_path / "link.csv"
    link.symlink_to(t)
    before = {p: p.read_bytes() for p in (t, req, cal)}
    code, _, err = run(capsys, *[a.format(t=t, r=req, cal=cal, link=link) for a in argv])
    one_line_error(err, code, 2, "is the input")
    assert {p: p.read_bytes() for p in (t, req, cal)} == before


def _file_like(action) -> bool:
    import re

    words = set(re.split(r"[^A-Z0-9]+", " ".join([*(action.option_strings or [action.dest]), str(action.metavar or "")]).upper()))
    return action.dest == "trace" or bool(words & {"FILE", "PNG", "OUT", "OUTPUT", "JSON", "PLOT", "PATH", "DIR", "CONFIG",
                                                   "CALIBRATION", "PROMETHEUS", "SCHEDULE"})


def test_every_path_argument_declares_itself_an_input_or_an_output():
    """The guard reads InputPath / OutputPath off the parsed arguments: a path argument without
    one of those types would be forgotten by the guard."""
    from stackdist.cli.args import InputPath, OutputPath
    from stackdist.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.choices and "curve" in a.choices)
    untyped = [f"{name} {action.option_strings or action.dest}" for name, parser in sub.choices.items()
               for action in parser._actions if _file_like(action) and action.type not in (InputPath, OutputPath)]
    assert not untyped, untyped


def test_schedule_csv_goes_through_the_atomic_writer(tmp_path, monkeypatch):
    from stackdist.output import files
    from stackdist.serving.schedule import Schedule

    path = tmp_path / "s.csv"
    path.write_text("old\n")
    path.chmod(0o640)

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OSError, match="No space left") as info:
        Schedule.serial(3).write_csv(path)
    assert info.value.filename == str(path) and path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]  # no temporary file left
    monkeypatch.undo()
    link = tmp_path / "link.csv"
    link.symlink_to(path)
    Schedule.serial(3).write_csv(link)
    assert link.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert Schedule.read_csv(path, 3).arrival_s.tolist() == [0.0, 1.0, 2.0]


def test_plan_json_says_why_a_target_is_unreachable(capsys, req):
    code, out, err = run(capsys, "plan", req, "--targets", "0.5,0.999", "--json", "-", "--gpu", "h100", "--model", "qwen3-8b")
    assert code == 0, err
    report = json.loads(out)
    for sem in report["semantics"].values():
        ceiling = sem["summary"]["ceiling_token_hit_rate"]
        assert ceiling < 0.999
        rows = {row["target"]: row for row in sem["working_set"]}
        assert rows[0.999]["token_hit_rate"] is None
        assert "ceiling" in rows[0.999]["unreachable"]["token_hit_rate"]["reason"]
        assert f"{ceiling:.2%}" in rows[0.999]["unreachable"]["token_hit_rate"]["reason"]
        assert all(row[k] is None for row in rows.values() for k in row["unreachable"])  # a reason only when None
    needs = report["budgets"]["requirements"]["targets"]
    assert all("reason" in r["unreachable"] for r in needs if not r["reachable"]) and not all(r["reachable"] for r in needs)


# ------------------------------------------------------------------ one --window, one --warmup
@pytest.mark.parametrize("window,warmup,counted", [
    ("2:6", None, 4), ("=-2:", None, 2), ("3s:", None, 5), (":5s", None, 5), ("=-3s:", None, 4), ("25%:75%", None, 4),
    ("2:6", "1", 3), ("2:6", "50%", 2), ("2:", "2s", 4), (None, "3s", 5),
])
def test_window_and_warmup_mean_the_same_in_curve_and_plan(capsys, req, window, warmup, counted):
    """Requests at 0, 1, ..., 7 s, three blocks each: the counted requests (plan) and their
    blocks (curve, tiers on the request trace) from one --window / --warmup vocabulary."""
    flags = ([f"--window{window}"] if window and window.startswith("=") else ["--window", window] if window else [])
    flags += ["--warmup", warmup] if warmup else []
    code, out, err = run(capsys, "plan", req, *flags, "--json", "-")
    assert code == 0, err
    assert json.loads(out)["counted"]["requests"] == counted
    code, out, err = run(capsys, "curve", req, "--format", "mooncake", *flags, "--capacities", "4")
    assert code == 0, err
    assert json.loads(out)["summary"]["accesses"] == 3 * counted
    code, out, err = run(capsys, "tiers", req, "--format", "mooncake", *flags, "--gpu", "2", "--cpu", "4")
    assert code == 0, err
    assert json.loads(out)["summary"]["accesses"] == 3 * counted


def test_window_on_a_key_trace_counts_accesses_and_refuses_durations(capsys, t):
    code, out, err = run(capsys, "curve", t, "--window", "50%:", "--capacities", "1")
    assert code == 0 and json.loads(out)["summary"]["accesses"] == 3, err
    code, out, err = run(capsys, "curve", t, "--window", "1:5", "--warmup", "50%", "--capacities", "1")
    assert code == 0 and json.loads(out)["summary"]["accesses"] == 2, err
    for flags in (["--window", "10m:"], ["--warmup", "10m"], ["--window", "1:2:3"], ["--window", "x:"]):
        code, _, err = run(capsys, "curve", t, *flags)
        one_line_error(err, code, 2, flags[0])


def test_plan_every_replaces_the_old_window_duration(capsys, req, tmp_path):
    code, new, err = run(capsys, "plan", req, "--every", "3s", "--json", "-")
    assert code == 0 and "deprecated" not in err, err
    code, old, err = run(capsys, "plan", req, "--window", "3s", "--json", "-")
    assert code == 0 and "deprecated" in err and "--every 3s" in err, err
    windows = json.loads(new)["semantics"]["engine"]["time_windows"]
    assert len(windows) == 3 and [w["requests"] for w in windows] == [3, 3, 2]
    assert json.loads(old)["semantics"] == json.loads(new)["semantics"]
    code, _, err = run(capsys, "plan", req, "--window", "3s", "--every", "2s")
    one_line_error(err, code, 2, "--every")
    code, _, err = run(capsys, "plan", req, "--window", "7:7")
    one_line_error(err, code, 1, "--window")


@pytest.mark.parametrize("command", ["curve", "tiers", "plan"])
def test_help_documents_one_window_vocabulary(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    text = " ".join(out.split())
    assert code == 0 and "--window=-2:" in text and "10m" in text and "%" in text and "START:STOP" in text


def test_lab_folder_has_a_manifest_and_its_result_files_keep_their_fixed_format(tmp_path):
    """The lab's seven files are fixed by its spec (no key added); manifest.json beside them
    carries the schema and tool versions and describes (and hashes) each file."""
    import hashlib

    from kvlab import lab
    from stackdist.version import __version__

    out = tmp_path / "lab"
    written = lab.run_lab(out)
    assert [p.name for p in written] == list(lab.LAB_FILES)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema_version"] >= 1 and manifest["tool"]["version"] == __version__
    assert list(manifest["files"]) == list(lab.LAB_FILES)
    for name, entry in manifest["files"].items():
        data = (out / name).read_bytes()
        assert entry["description"] and entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        if name.endswith(".json"):
            assert "schema_version" not in json.loads(data) if isinstance(json.loads(data), dict) else True


@pytest.mark.parametrize("argv", [
    ("curve", "{t}", "--sample-rate", "0.5"),
    ("curve", "{t}", "--sample-rate", "1", "--sample-seeds", "1"),
    ("tiers", "{t}", "--gpu", "1", "--sample-rate", "0.5"),
    ("watch", "{t}", "--no-follow"),
])
def test_every_stackdist_json_carries_the_schema_and_tool_version(capsys, t, argv):
    from stackdist.version import __version__

    code, out, err = run(capsys, *[a.format(t=t) for a in argv])
    assert code == 0, err
    for line in out.strip().splitlines() if argv[0] == "watch" else [out]:
        record = json.loads(line)
        assert record["schema_version"] >= 1 and record["tool"]["version"] == __version__ and record["kind"] == argv[0]


def test_kvlab_placement_calibration_carries_the_schema_version(capsys):
    from kvlab.placement.__main__ import main as placement_main

    assert placement_main(["calibration"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema_version"] >= 1 and report["kind"] == "placement-calibration" and report["fields"]


def _many_step_trace(tmp_path):
    import random

    rng = random.Random(7)
    lines = [json.dumps({"timestamp": i, "input_length": 512 * 3, "output_length": 1,
                         "hash_ids": [a, 1000 + 300 * a + rng.randrange(300), 10**6 + i]})  # chained ids
             for i, a in ((i, rng.randrange(300)) for i in range(400))]
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("sampled", [False, True])
def test_plan_plot_draws_exact_steps_and_sampled_points_as_points(capsys, tmp_path, monkeypatch, sampled):
    from stackdist.render import plot

    drawn = {}
    monkeypatch.setattr(plot, "curves_figure", lambda series, **kw: drawn.update(series=series, **kw) or "figure")
    monkeypatch.setattr(plot, "save_png", lambda fig, path: None)
    trace, out = _many_step_trace(tmp_path), tmp_path / "p.json"
    extra = ["--sample-rate", "0.5"] if sampled else []
    code, _, err = run(capsys, "plan", trace, "--plot", tmp_path / "p.png", "--json", out, *extra)
    assert code == 0, err
    report = json.loads(out.read_text())
    for (label, x, y), style in zip(drawn["series"], drawn["styles"]):
        name, metric = label.split(": ")[0], label.split(": ")[1].replace(" (sampled)", "").replace(" ", "_")
        table = report["semantics"][name]["curve"]
        if sampled:
            assert style["sampled"] and list(x) == table["capacity_gib"]  # points at the sampled capacities only
            continue
        assert not style["sampled"] and len(x) > len(table["capacity_gib"])  # every step, more than the sample
        at = np.searchsorted(np.asarray(x), np.asarray(table["capacity_gib"]) * (1 + 1e-12), side="right") - 1
        assert np.allclose(np.asarray(y)[at], table[metric])  # the steps pass through every sampled (exact) point
    assert ("exact curves" in drawn["title"]) != sampled


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_sampled_points_are_not_joined(tmp_path):
    pytest.importorskip("matplotlib")
    from stackdist.render import plot

    plt = plot.pyplot()
    lines = []
    original = plt.Axes.plot
    try:
        plt.Axes.plot = lambda self, *a, **kw: lines.append(kw) or original(self, *a, **kw)
        plot.plot_curves(tmp_path / "x.png", [("s", np.array([0, 1, 2]), np.array([0, 0.5, 0.7]))], xlabel="x",
                         styles=[{"sampled": True, "ls": "-"}])
    finally:
        plt.Axes.plot = original
    assert lines and lines[0]["ls"] == "none" and lines[0]["marker"]


# ------------------------------------------------------------------ found by validation/hostile_sweep.py
# (plan --semantics vllm --plot, once refused here, draws the engine models: tests/test_engine_first_class.py)


def test_an_unexpected_exception_is_one_line_not_a_traceback(capsys, t, monkeypatch):
    from stackdist.cli import curve

    def boom(_args):
        raise StopIteration

    monkeypatch.setattr(curve, "run_curve", boom)
    monkeypatch.delenv("STACKDIST_DEBUG", raising=False)
    code, _, err = run(capsys, "curve", t)
    one_line_error(err, code, 1, "internal error", "StopIteration")


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_watch_on_an_empty_trace_is_exit_1(capsys, tmp_path, content):
    path = tmp_path / "e.csv"
    path.write_text(content)
    code, out, err = run(capsys, "watch", path, "--no-follow")
    one_line_error(err, code, 1, "nothing to answer from")
    assert out == ""


@pytest.mark.parametrize("output", ["{dir}", ""])
def test_kvlab_summarize_output_folder_or_empty_is_a_usage_error(capsys, tmp_path, output):
    inp = tmp_path / "in.jsonl"
    inp.write_text(TTFT_LINES)
    code, _, err = kv(capsys, "summarize", inp, output.format(dir=tmp_path))
    one_line_error(err, code, 2, "OUTPUT.json")


@pytest.mark.parametrize("out", ["{dir}", "", "{dir}/t.csv/x"])
def test_placement_generate_checks_its_output_before_any_work(capsys, tmp_path, out):
    from kvlab.placement.__main__ import main as placement_main

    (tmp_path / "t.csv").write_text("a\n")
    code = placement_main(["generate", "chat", "--param", "n_sessions=2", "--out", out.format(dir=tmp_path)])
    _, err = capsys.readouterr()
    one_line_error(err, code, 2 if "t.csv" not in out else 1, "--out")
    assert (tmp_path / "t.csv").read_text() == "a\n"


def test_scaled_request_trace_window_is_refused_not_counted_in_blocks(capsys, req):
    """--window counts requests on a request trace; the sampled path reads blocks only, so it refuses."""
    code, _, err = run(capsys, "curve", req, "--format", "mooncake", "--window", "2:", "--sample-rate", "0.5")
    one_line_error(err, code, 2, "--window")
