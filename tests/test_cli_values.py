"""Targets as fractions or percentages, durations with their unit (issue 26)."""

from __future__ import annotations

import json

import pytest
from naive import run_stackdist

from stackdist.cli.args import duration, fraction, fraction_list
from stackdist.errors import UsageError

run = run_stackdist
SMALL = "tests/data/mooncake_small.jsonl"


@pytest.mark.parametrize("text, value", [("90%", 0.9), ("0.9", 0.9), ("100%", 1.0), ("1", 1.0), ("0.5%", 0.005),
                                         (" 25% ", 0.25)])
def test_a_fraction_or_a_percentage(text, value):
    assert fraction(text, "--targets") == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("bad", ["0", "0%", "101%", "1.5", "-5%", "nan", "inf", "%", "ninety"])
def test_fractions_outside_zero_one_are_refused(bad):
    with pytest.raises(UsageError, match="--targets must be"):
        fraction_list(bad, "--targets")


def test_target_lists_mix_forms_in_order():
    assert fraction_list("90%,0.95,99%", "--targets") == pytest.approx([0.9, 0.95, 0.99], rel=1e-15)


@pytest.mark.parametrize("command", ["curve", "plan"])
def test_percent_targets_answer_as_the_fractions(capsys, command, tmp_path):
    extra = ["--format", "mooncake"] if command == "curve" else ["--json", "-", "--semantics", "engine"]
    code, as_pct, err = run(capsys, command, SMALL, *extra, "--targets", "20%,25%")
    assert code == 0, err
    code, as_frac, _ = run(capsys, command, SMALL, *extra, "--targets", "0.2,0.25")
    assert code == 0
    assert json.loads(as_pct) == json.loads(as_frac)


def test_coverage_and_tier_targets_take_percentages(capsys):
    code, a, err = run(capsys, "plan", SMALL, "--json", "-", "--semantics", "engine", "--coverage", "50%",
                       "--tier-targets", "50%,90%,99%")
    assert code == 0, err
    code, b, _ = run(capsys, "plan", SMALL, "--json", "-", "--semantics", "engine", "--coverage", "0.5",
                     "--tier-targets", "0.5,0.9,0.99")
    assert json.loads(a) == json.loads(b)


@pytest.mark.parametrize("text, seconds", [("10s", 10.0), ("5m", 300.0), ("1h", 3600.0), ("1.5h", 5400.0),
                                           ("250ms", 0.25), ("2d", 172800.0), ("90 s", 90.0), ("10M", 600.0)])
def test_durations_with_units(text, seconds):
    assert duration(text, "--every") == seconds


@pytest.mark.parametrize("bare", ["10", "0.5", "600", "1e3"])
def test_a_bare_number_is_not_a_duration(bare):
    with pytest.raises(UsageError) as info:
        duration(bare, "--every")
    assert str(info.value) == f"--every needs a unit: write --every {bare}s (or {bare}m, {bare}h); got {bare!r}."


@pytest.mark.parametrize("bad", ["10y", "m", "-5m", "nanm", "inf s", ""])
def test_bad_durations_name_the_flag_and_an_example(bad):
    with pytest.raises(UsageError, match="--every must be a duration with its unit"):
        duration(bad, "--every")


@pytest.mark.parametrize("argv, message", [
    (["--every", "10"], "--every needs a unit: write --every 10s (or 10m, 10h); got '10'."),
    (["--warmup", "1.5"], "--warmup must be N requests, a duration with its unit (90s, 10m, 1.5h) or a percentage"),
    (["--window", "600"], "--window must look like START:STOP"),
])
def test_plan_refuses_unitless_durations(capsys, argv, message):
    code, out, err = run(capsys, "plan", SMALL, *argv)
    assert code == 2 and out == "" and message in err


def test_every_with_a_unit_runs(capsys):
    code, out, err = run(capsys, "plan", SMALL, "--json", "-", "--semantics", "engine", "--every", "2s")
    assert code == 0, err
    windows = json.loads(out)["semantics"]["engine"]["time_windows"]
    assert [(w["start_s"], w["end_s"]) for w in windows] == [(0.0, 2.0), (2.0, 4.0)]  # timestamps 0, 1.5, 3, 3 s


@pytest.mark.parametrize("flag", ["--gpu-memory-utilization", "--prefill-efficiency"])
def test_fraction_flags_take_percentages(flag):
    from stackdist.cli.main import build_parser

    parser = build_parser("plan")
    dest = flag[2:].replace("-", "_")
    assert getattr(parser.parse_args(["plan", "t.jsonl", flag, "85%"]), dest) == pytest.approx(0.85, rel=1e-15)
    assert getattr(parser.parse_args(["plan", "t.jsonl", flag, "0.85"]), dest) == 0.85


@pytest.mark.parametrize("text, expected", [("p99=2", ("p99", 2.0)), ("p90=500ms", ("p90", 0.5)), ("p50=1.5s", ("p50", 1.5)),
                                            ("p99=1m", ("p99", 60.0))])
def test_ttft_targets_in_seconds_or_with_a_unit(text, expected):
    import importlib

    plan_cli = importlib.import_module("stackdist.cli.plan")
    assert plan_cli._ttft_targets([text]) == (expected,)


@pytest.mark.parametrize("bad", ["p99=0", "p95=2", "p99=-1s", "p99=2y", "p99"])
def test_bad_ttft_targets(bad):
    import importlib

    plan_cli = importlib.import_module("stackdist.cli.plan")
    with pytest.raises(UsageError, match="--ttft-target must be p50, p90 or p99"):
        plan_cli._ttft_targets([bad])
