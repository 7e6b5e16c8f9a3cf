"""Every stackdist command started with its standard output closed (``>&-``) says so in one line
on stderr and exits 1 (an output error, :mod:`stackdist.errors`): before any work when stdout is
its only output; after writing its files when it has some (issue 26). Real processes: the file
descriptor matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = str(ROOT / "tests" / "data" / "mooncake_small.jsonl")


def closed_stdout(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "stackdist", *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                          preexec_fn=lambda: os.close(1))


@pytest.fixture()
def keys(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\nb\na\nc\nb\na\n")
    return str(path)


@pytest.mark.parametrize("argv, prog", [
    (["plan", SMALL], "stackdist plan"),
    (["plan", SMALL, "--json", "-"], "stackdist plan"),
    (["curve", "{keys}"], "stackdist curve"),
    (["curve", "{keys}", "--csv"], "stackdist curve"),
    (["tiers", "{keys}", "--gpu", "2"], "stackdist tiers"),
    (["watch", "{keys}", "--no-follow"], "stackdist watch"),
])
def test_stdout_only_commands_refuse_before_any_work(tmp_path, keys, argv, prog):
    proc = closed_stdout(*[a.replace("{keys}", keys) for a in argv], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == f"{prog}: error: standard output is closed (the answer goes there); open it or redirect it " \
        "to a file\n"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["plan", "--version"], ["watch", "--version"],
                                  ["curve", "--help"]])
def test_help_and_version_with_nowhere_to_print(tmp_path, argv):
    proc = closed_stdout(*argv, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == "stackdist: error: standard output is closed (the help or version goes there); open it or " \
        "redirect it to a file\n"


def test_a_command_writing_a_file_needs_no_stdout(tmp_path, keys):
    out = tmp_path / "c.json"
    proc = closed_stdout("curve", keys, "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(out.read_text())["summary"]["accesses"] == 6


def test_plan_writes_its_json_then_fails_on_the_table(tmp_path):
    out = tmp_path / "p.json"
    proc = closed_stdout("plan", SMALL, "--semantics", "engine", "--model", "qwen2.5-1.5b", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("stackdist plan: error: <stdout>: stdout is closed")
    assert json.loads(out.read_text())["counted"]["requests"] == 4


def test_the_console_script_too(tmp_path, keys):
    script = Path(sys.executable).with_name("stackdist")
    if not script.exists():
        pytest.skip("no installed console script beside this interpreter")
    proc = subprocess.run([str(script), "tiers", keys, "--gpu", "2"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 1
    assert proc.stderr == "stackdist tiers: error: standard output is closed (the answer goes there); open it or " \
        "redirect it to a file\n"
