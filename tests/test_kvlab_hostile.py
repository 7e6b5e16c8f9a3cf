"""Hostile inputs to every kvlab command (issue 26, "the first hour"): each finding pinned.

- ``block-lab``'s fixture not UTF-8, a folder, or holding a 5,000-digit number: exit 1, file and line;
- the placement simulator: an empty or blank trace names the file (exit 1), a bad ``--reblock``
  names the flag and the allowed values (exit 2), a missing ``--fixtures`` folder is exit 1;
- ``scenario`` takes any integer its spec allows (arbitrary precision), still refusing negatives/zero;
- ``scenario.py`` copied without ``kvsim.py`` says so in one line (exit 1);
- ``--version`` on every command and subcommand, the standalone scripts included;
- with stdout closed every command says so on stderr (one line) and exits 1, never silently;
- ``simulate --model/--model-config/--gpu``: KV bytes, HBM bound and latency of the served model;
- the ``hit_split.png`` legend covers no bar.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvlab.__main__ import main as kvlab_main
from kvlab.placement.__main__ import main as placement_main

REPO = Path(__file__).resolve().parent.parent
TTFT = REPO / "data" / "ttft.jsonl"
SMALL_CHAT = ["--workload", "chat", "--param", "n_sessions=2", "--param", "accesses_per_session=100"]


def _call(main, capsys, argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own exits (2 for usage, 0 for --help/--version)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def kv(capsys, *argv):
    return _call(kvlab_main, capsys, argv)


def placement(capsys, *argv):
    return _call(placement_main, capsys, argv)


def one_error(err, code, expected, *needles):
    assert code == expected, err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err
    for needle in needles:
        assert needle in err, err


def closed_stdout(args, cwd, env=None, timeout=120):
    """Run ``python *args`` with fd 1 closed (not /dev/null: Python then has sys.stdout None)."""
    return subprocess.run([sys.executable, *args], cwd=cwd, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, preexec_fn=lambda: os.close(1),
                          env=env if env is not None else {**os.environ, "PYTHONPATH": str(REPO)})


# ------------------------------------------------------------------ block-lab's fixture
def test_block_lab_fixture_not_utf8_names_file_and_line_exit_1(capsys, tmp_path):
    fixture = tmp_path / "f.json"
    fixture.write_bytes(b'{\n  "doc_tokens": 4864,\n  "x": "\xff"\n}\n')
    code, _, err = kv(capsys, "block-lab", "--fixture", fixture)
    one_error(err, code, 1, f"{fixture}:3:", "not UTF-8")


def test_block_lab_fixture_folder_is_exit_1_naming_it(capsys, tmp_path):
    code, _, err = kv(capsys, "block-lab", "--fixture", tmp_path)
    one_error(err, code, 1, str(tmp_path), "cannot read")


def test_block_lab_fixture_with_a_5000_digit_number(capsys, tmp_path):
    fixture = tmp_path / "f.json"
    fixture.write_text('{\n  "doc_tokens": 4864,\n  "question_tokens": ' + "9" * 5000 + "\n}\n")
    code, _, err = kv(capsys, "block-lab", "--fixture", fixture)
    one_error(err, code, 1, f"{fixture}:3:", "5,000 digits", "at most 4,300 digits")
    assert "Exceeds the limit" not in err and "set_int_max_str_digits" not in err


# ------------------------------------------------------------------ the placement simulator's inputs
@pytest.mark.parametrize("content,why", [
    ("", "no requests"), ("\n  \n\n", "no requests"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}\n', "no block accesses"),
], ids=["empty", "blank", "no prompt blocks"])
def test_placement_empty_trace_names_the_file_exit_1(capsys, tmp_path, content, why):
    trace = tmp_path / "t.jsonl"
    trace.write_text(content)
    code, out, err = placement(capsys, "simulate", "--workload", f"mooncake:{trace}")
    one_error(err, code, 1, f"{trace}: nothing to answer from: {why}")
    assert out == ""


def test_placement_bad_reblock_names_the_flag_and_the_divisors(capsys):
    trace = REPO / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
    code, _, err = placement(capsys, "simulate", "--workload", f"mooncake:{trace}", "--reblock", "7")
    one_error(err, code, 2, "--reblock", "--block-size", "one of 1, 2, 4, 8, 16, 32, 64, 128, 256, 512; got 7")
    code, _, err = placement(capsys, "simulate", "--workload", f"mooncake:{trace}", "--block-size", "48", "--reblock", "32")
    one_error(err, code, 2, "one of 1, 2, 3, 4, 6, 8, 12, 16, 24, 48; got 32")
    code, _, err = placement(capsys, "simulate", "--workload", f"mooncake:{trace}", "--block-size", str(2**31),
                             "--reblock", "3")  # 2^31: the divisors are found in O(sqrt), not by a 2^31 loop
    one_error(err, code, 2, "one of 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,")
    code, _, err = placement(capsys, "simulate", *SMALL_CHAT, "--reblock", "16")
    one_error(err, code, 2, "--reblock applies to a mooncake:PATH trace")


@pytest.mark.parametrize("param,needle", [
    ("n_sessions=99999999999999999999", "--param n_sessions must be at most 100,000,000"),  # ran until Ctrl-C
    ("accesses_per_session=1e400", "--param accesses_per_session must be at most 100,000,000; got inf"),
    ("think_time_s=1e400", "--param: think_time_s must be a positive finite number, got inf."),
])
def test_placement_generator_counts_are_bounded(capsys, param, needle):
    code, _, err = placement(capsys, "simulate", "--workload", "chat", "--param", param)
    one_error(err, code, 2, needle.replace("; got", " (the generator makes every request); got"))


def test_placement_missing_fixtures_folder_is_exit_1(capsys, tmp_path):
    code, _, err = placement(capsys, "calibration", "--fixtures", tmp_path / "nope")
    one_error(err, code, 1, f"--fixtures {tmp_path / 'nope'}: no such folder")


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe", "gpu_busy_h200.json:1: not UTF-8"),
    (b'{"rows": [{"doc_tokens": 1}]}', "gpu_busy_h200.json: rows[0].question_tokens must be a finite number"),
    (b'{"rows": [\n{"doc_tokens": ' + b"7" * 5000 + b"}]}", "gpu_busy_h200.json: a number has more than 4300 digits"),
])
def test_placement_malformed_fixture_names_the_file_exit_1(capsys, tmp_path, content, needle):
    folder = tmp_path / "fixtures"
    shutil.copytree(REPO / "data" / "fixtures", folder)
    (folder / "gpu_busy_h200.json").write_bytes(content)
    code, out, err = placement(capsys, "calibration", "--fixtures", folder)
    one_error(err, code, 1, needle)
    assert out == ""


# ------------------------------------------------------------------ scenario: any integer its spec allows
def _passes(*rows):
    return {"passes": [dict(zip(("order", "gpu_hits", "cpu_hits", "misses", "hit_docs"), row)) for row in rows]}


ALL_FIT = _passes(("fwd", 0, 0, 3, []), ("fwd", 3, 0, 0, [0, 1, 2]), ("rev", 3, 0, 0, [2, 1, 0]))
NONE_FIT = _passes(("fwd", 0, 0, 3, []), ("fwd", 0, 0, 3, []), ("rev", 0, 0, 3, []))


@pytest.mark.parametrize("argv,expected", [
    (["--gpu", "99999999999999999999"], ALL_FIT),  # the case: 10^20 - 1 tokens hold 3 documents
    (["--gpu", "9" * 6000, "--tokens", "1" + "0" * 5999], ALL_FIT),  # 3 x 10^5999 <= 10^6000 - 1
    (["--gpu", "9" * 6000, "--tokens", "1" + "0" * 6000], NONE_FIT),  # one document of 10^6000 > the GPU
    (["--gpu", "0", "--cpu", "9" * 5000, "--tokens", "9" * 4999], _passes(
        ("fwd", 0, 0, 3, []), ("fwd", 0, 3, 0, [0, 1, 2]), ("rev", 0, 3, 0, [2, 1, 0]))),
])
def test_scenario_takes_integers_of_any_length(capsys, argv, expected):
    code, out, err = kv(capsys, "scenario", "--docs", "3", *argv)
    assert code == 0 and err == "", err
    assert json.loads(out) == expected


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "-" + "9" * 6000], "argument --gpu: must be a non-negative integer, got '-999"),
    (["--tokens", "0"], "argument --tokens: must be a positive integer, got '0'"),
    (["--docs", "0"], "argument --docs: must be a positive integer, got '0'"),
    (["--cpu", "1e30"], "argument --cpu: must be a non-negative integer, got '1e30'"),
])
def test_scenario_still_refuses_what_its_spec_refuses(capsys, argv, needle):
    code, out, err = kv(capsys, "scenario", *argv)
    assert code == 2 and needle in err and out == "" and "Traceback" not in err, err


def test_standalone_copy_takes_a_huge_gpu(tmp_path):
    for name in ("kvsim.py", "scenario.py"):
        shutil.copy(REPO / "kvlab" / name, tmp_path / name)
    proc = subprocess.run([sys.executable, "-E", "-s", "scenario.py", "--docs", "3", "--gpu", "99999999999999999999"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0 and json.loads(proc.stdout) == ALL_FIT, proc.stderr


# ------------------------------------------------------------------ scenario.py without kvsim.py
def test_scenario_copied_without_kvsim_says_so_in_one_line(tmp_path):
    shutil.copy(REPO / "kvlab" / "scenario.py", tmp_path / "scenario.py")
    env = {"PATH": os.environ.get("PATH", "")}
    proc = subprocess.run([sys.executable, "-E", "-s", "scenario.py", "--docs", "3"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False, env=env)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("scenario.py: error: kvsim.py is missing") and "copy kvsim.py next to it" in proc.stderr
    imported = subprocess.run([sys.executable, "-E", "-s", "-c", "import scenario"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, check=False, env=env)
    assert imported.returncode == 1 and "ModuleNotFoundError: kvsim.py is missing" in imported.stderr


# ------------------------------------------------------------------ --version everywhere
@pytest.mark.parametrize("argv,prog", [
    (["--version"], "kvlab"), (["run-lab", "--version"], "kvlab"), (["scenario", "--version"], "kvlab scenario"),
    (["summarize", "--version"], "kvlab summarize"), (["block-lab", "--version"], "kvlab block-lab"),
    (["scenario", "--docs", "3", "--version"], "kvlab scenario"),
])
def test_kvlab_version_on_every_subcommand(capsys, argv, prog):
    from stackdist.version import __version__

    code, out, _ = kv(capsys, *argv)
    assert code == 0 and out == f"{prog} (stackdist) {__version__}\n"


@pytest.mark.parametrize("command", [[], ["experiments"], ["simulate"], ["generate"], ["calibration"],
                                     ["generate", "chat"]])
def test_placement_version_on_every_subcommand(capsys, command):
    from stackdist.version import __version__

    code, out, _ = placement(capsys, *command, "--version")  # before experiments' required --out
    assert code == 0 and out == f"kvlab.placement (stackdist) {__version__}\n"


@pytest.mark.parametrize("module", ["kvlab.scenario", "kvlab.summarize", "kvlab.blocklab"])
def test_module_clis_have_version(capsys, module):
    import importlib

    code, out, _ = _call(importlib.import_module(module).main, capsys, ["--version"])
    assert code == 0 and "(stackdist)" in out and out.split()[-1][0].isdigit()


@pytest.mark.parametrize("script", ["scenario.py", "summarize.py"])
def test_standalone_scripts_have_version(tmp_path, script):
    for name in ("kvsim.py", "scenario.py", "summarize.py"):
        shutil.copy(REPO / "kvlab" / name, tmp_path / name)
    proc = subprocess.run([sys.executable, "-E", "-s", script, "--version"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False, env={"PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0 and proc.stdout.startswith(f"{script} ("), proc.stderr


# ------------------------------------------------------------------ closed stdout
@pytest.mark.parametrize("args", [
    ["{kvlab}/summarize.py", str(TTFT), "-"],  # wrote into None: a traceback before
    ["{kvlab}/scenario.py", "--docs", "2"],
    ["-m", "kvlab", "summarize", str(TTFT), "-"],  # an internal error before
    ["-m", "kvlab.blocklab", "--docs", "2", "--tokens", "64"],  # a traceback before
])
def test_closed_stdout_is_one_line_and_exit_1(tmp_path, args):
    proc = closed_stdout([a.replace("{kvlab}", str(REPO / "kvlab")) for a in args], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].endswith("stdout is closed"), proc.stderr


def test_closed_stdout_subcommand_version_is_never_silent(tmp_path):
    # It was exit 0 with nothing anywhere. argparse (3.11+) prints --version on stderr when stdout is
    # closed, as for the top level; Python 3.10's argparse raises on the write: one error line, exit 1.
    proc = closed_stdout(["-m", "kvlab", "scenario", "--version"], tmp_path)
    if sys.version_info >= (3, 11):
        assert proc.returncode == 0 and proc.stderr.startswith("kvlab scenario (stackdist) "), proc.stderr
    else:
        assert proc.returncode == 1 and "stdout is closed" in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv", [["simulate", *SMALL_CHAT], ["generate", "chat", "--param", "n_sessions=1", "--out", "-"]])
def test_placement_with_stdout_closed_is_exit_1(capsys, monkeypatch, argv):
    monkeypatch.setattr(sys, "stdout", None)  # what Python gives a process started with fd 1 closed
    code, _, err = placement(capsys, *argv)
    one_error(err, code, 1, "stdout is closed")


def test_placement_experiments_with_stdout_closed_writes_its_files(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdout", None)  # nothing goes to stdout: the answer is the folder
    code, _, err = placement(capsys, "experiments", "--quick", "--no-plots", "--out", tmp_path / "out")
    assert code == 0 and "error" not in err and (tmp_path / "out" / "results.json").is_file(), err
    assert "note: no model given: KV bytes and TTFT are for qwen2.5-1.5b (the measured model)" in err


def test_importing_the_placement_package_loads_no_numpy(tmp_path):
    # python -m kvlab.placement imports the package before its __main__ installs the Ctrl-C handler:
    # with numpy/numba imported there, a Ctrl-C in the first second was a traceback.
    probe = "import sys, kvlab.placement; print(sorted(m for m in ('numpy', 'numba') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
