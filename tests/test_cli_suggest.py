"""Usage errors in one vocabulary across the stackdist commands (issue 26): an unknown flag,
choice, command, model, GPU or format is reported by the subcommand that got it, with the closest
name; ``--version`` works on every command; a negative value apart from its flag gets the hint."""

from __future__ import annotations

import pytest
from naive import run_stackdist

from stackdist.cli.common import closest, did_you_mean
from stackdist.cli.main import SUBCOMMANDS
from stackdist.version import __version__

run = run_stackdist
TRACE = "t.jsonl"  # never read: every case fails while parsing


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv, expected", [
    (["plan", TRACE, "--gpu-blok", "3"], "stackdist plan: error: unrecognized arguments: --gpu-blok (did you mean --gpu-blocks?) 3"),
    (["plan", TRACE, "--targts=0.9"], "stackdist plan: error: unrecognized arguments: --targts=0.9 (did you mean --targets?)"),
    (["curve", TRACE, "--capacites", "1"], "stackdist curve: error: unrecognized arguments: --capacites (did you mean --capacities?) 1"),
    (["tiers", TRACE, "--gpu", "1", "--exclusve"], "stackdist tiers: error: unrecognized arguments: --exclusve (did you mean --exclusive?)"),
    (["watch", TRACE, "--intervall", "5"], "stackdist watch: error: unrecognized arguments: --intervall (did you mean --interval?) 5"),
    (["plan", TRACE, "--zzzzzz"], "stackdist plan: error: unrecognized arguments: --zzzzzz"),
])
def test_unknown_flags_are_named_by_their_subcommand_with_the_closest_flag(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert error_line(err) == expected
    assert err.startswith(f"usage: stackdist {argv[0]}")  # the subcommand's usage, not the top level's


@pytest.mark.parametrize("argv, expected", [
    (["plna", TRACE], "stackdist: error: unknown command: 'plna' (did you mean 'plan'?)"),
    (["plan", TRACE, "--router", "kvaware"], "stackdist plan: error: argument --router: invalid choice: 'kvaware' (did you mean 'kv-aware'?)"),
    (["plan", TRACE, "--gpu", "H20"], "stackdist plan: error: argument --gpu: unknown GPU 'H20' (did you mean 'h200'?)"),
    (["plan", TRACE, "--model", "qwen3-33b"], "stackdist plan: error: argument --model: unknown model 'qwen3-33b' (did you mean 'qwen3-32b'?)"),
    (["curve", TRACE, "--model", "Qwen/Qwen3-8C"], "stackdist curve: error: argument --model: unknown model 'Qwen/Qwen3-8C' (did you mean 'qwen3-8b'?)"),
    (["plan", TRACE, "--format", "mooncak"], "stackdist plan: error: argument --format: unknown format 'mooncak' (did you mean 'mooncake'?)"),
    (["plan", TRACE, "--semantics", "vlm"], "(did you mean 'vllm'?)"),
    (["plan", TRACE, "--kv-dtype", "fp9"], "stackdist plan: error: argument --kv-dtype: unknown KV dtype 'fp9' (did you mean 'fp8'?)"),
    (["watch", TRACE, "--semantics", "engin"], "stackdist watch: error: argument --semantics: invalid choice: 'engin' (did you mean 'engine'?)"),
])
def test_unknown_names_get_the_closest_name(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert expected in error_line(err)


def test_a_schedule_name_that_is_no_file_gets_the_closest_name(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]}\n')
    code, _out, err = run(capsys, "plan", trace, "--semantics", "vllm", "--schedule", "schedular")
    assert code == 2 and "--schedule must be serial, model, scheduler, recorded or a CSV file; got 'schedular' (did you " \
        "mean 'scheduler'?)" in error_line(err)


@pytest.mark.parametrize("command", ["", *SUBCOMMANDS])
def test_version_on_every_command(capsys, command):
    code, out, err = run(capsys, *([command] if command else []), "--version")
    assert code == 0 and out == f"stackdist {__version__}\n" and err == ""


@pytest.mark.parametrize("argv, flag, value", [
    (["plan", TRACE, "--window", "-2:"], "--window", "-2:"),
    (["curve", TRACE, "--window", "-1000:"], "--window", "-1000:"),
    (["tiers", TRACE, "--gpu", "3", "--window", "-5:-1"], "--window", "-5:-1"),
])
def test_a_negative_value_apart_from_its_flag_gets_the_hint(capsys, argv, flag, value):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    assert error_line(err).endswith(f"expected one argument (a value starting with '-' must be attached to its flag: "
                                    f"write {flag}={value})")


def test_closest_is_case_insensitive_and_none_when_nothing_is_near():
    assert closest("H200", ["h100", "h200"]) == "h200"
    assert closest("--GPU-BLOCKS", ["--gpu-blocks"]) == "--gpu-blocks"
    assert closest("completely-different", ["plan", "curve"]) is None
    assert did_you_mean("nothing-like-it", ["plan"]) == ""
