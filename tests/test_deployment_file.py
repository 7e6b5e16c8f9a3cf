"""``stackdist plan --deployment FILE.toml``: the file equals its flags, flags override it, paths
resolve against it, bad files name the file and key; the JSON echo writes back as the same file."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
from naive import real_trace_paths, run_stackdist

from stackdist.cli.deployment_file import (
    KEYS,
    apply_deployment,
    deployment_table,
    dumps_toml,
    resolved_deployment,
)
from stackdist.cli.main import build_parser

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-32b-8xh200.toml"

# Every key at a value that is not its flag's default (the model by name; config in the other file).
FULL = {
    "model": {"name": "qwen3-8b", "kv_dtype": "fp8", "weights_gib": 20.5},
    "hardware": {"gpu": "h100", "gpus_per_replica": 2, "gpus": 8, "gpu_memory_utilization": 0.85,
                 "activation_gib": 1.5, "non_torch_gib": 0.25, "cudagraph_gib": 0.75, "prefill_efficiency": 0.4,
                 "load_gbps": 25.0, "ttft_overhead_ms": 3.0, "ttft_calibration": "ttft.jsonl"},
    "engine": {"semantics": ["vllm", "engine"], "gpu_blocks": [1000, "inf"], "block_size": 32, "decode": False,
               "decode_reuse": True, "schedule": "scheduler", "step_time": [0.01, 2e-05], "max_num_seqs": 256,
               "max_num_batched_tokens": 4096, "async_scheduling": True, "prefill_tokens_per_s": 5000.0,
               "decode_tokens_per_s": 40.0},
    "router": {"workers": 4, "policy": "kv-aware", "cache_threshold": 0.5, "overlap_weight": "inf", "temperature": 0.5,
               "weights": {"prefix": 2.0, "queue": 1.0}, "table_blocks": 1000, "seed": 7, "max_replicas": 16},
    "tiers": {"offload": ["lmcache:cpu=64GiB", "vllm-native:cpu=32GiB"], "shared_blocks": [0, 5000]},
    "prices": {"gpu_usd_per_hour": 2.5, "usd_per_gb": {"dram": 3.0, "ssd": 0.1}},
    "targets": {"hit_rates": [0.5, 0.8], "tier_targets": [0.4, 0.8, 0.95], "coverage": 0.9,
                "capacity": ["40GiB", "2Mtokens"], "ttft": {"p99": 2.0, "p50": 0.5}},
}


def _write(path: Path, data: dict) -> Path:
    path.write_text(dumps_toml(data))
    return path


def _apply(path: Path, *argv: str):
    return apply_deployment(build_parser, ["plan", "trace.jsonl", "--deployment", str(path), *argv], str(path))


def test_every_key_is_a_plan_flag_and_the_docs_table_is_current():
    parser = build_parser("plan")
    plan = next(a for a in parser._actions if a.dest == "command").choices["plan"]
    dests = {a.dest for a in plan._actions}
    assert all(k.dest in dests for k in KEYS), [k.flag for k in KEYS if k.dest not in dests]
    assert set(FULL) == {k.section for k in KEYS}
    assert sum(map(len, FULL.values())) == len(KEYS) - 1  # all but [model] config (excludes name)
    assert deployment_table() in (ROOT / "docs" / "deployment.md").read_text()


@pytest.mark.parametrize("model", ["name", "config"])
def test_a_full_file_round_trips_through_the_flags_and_back(tmp_path, model):
    data = copy.deepcopy(FULL)
    if model == "config":
        data["model"] = {"config": "cfg/config.json", "kv_dtype": "auto"}
    path = _write(tmp_path / "d.toml", data)
    args = _apply(path)
    echo = resolved_deployment(args)
    expected = copy.deepcopy(data)
    expected["hardware"]["ttft_calibration"] = str(tmp_path / "ttft.jsonl")  # relative to the file
    if model == "config":
        expected["model"]["config"] = str(tmp_path / "cfg" / "config.json")
        assert args.model is None
    for key in KEYS:  # defaults the file did not set are echoed too; none are missing
        assert key.name in echo.get(key.section, {}) or key.name not in expected[key.section]
    assert echo == expected
    assert tomllib.loads(dumps_toml(echo)) == echo


def test_flags_override_the_file_even_when_equal_to_their_defaults(tmp_path):
    path = _write(tmp_path / "d.toml", FULL)
    args = _apply(path, "--router", "round-robin", "--gpus-per-replica", "1", "--offload", "lmcache:cpu=1GiB",
                  "--model-config", "other.json", "--no-decode", "--targets", "0.9,0.95,0.99")
    assert args.router == "round-robin" and args.gpus_per_replica == 1  # the defaults, given
    assert args.offload == ["lmcache:cpu=1GiB"]  # a repeated flag replaces the file's list
    assert args.model_config == "other.json" and args.model is None  # the exclusive pair: the file's name dropped
    assert args.decode is False and args.targets == "0.9,0.95,0.99"
    assert args.gpu == "h100" and args.workers == "4"  # the rest from the file
    assert _apply(path, "--async-scheduling").async_scheduling is True


def test_without_the_file_the_defaults_stay(tmp_path):
    path = _write(tmp_path / "d.toml", {"hardware": {"gpu": "h200"}})
    args = _apply(path)
    default = build_parser("plan").parse_args(["plan", "trace.jsonl"])
    assert args.gpu == "h200"
    assert {k: v for k, v in vars(args).items() if k not in ("gpu", "deployment")} == \
        {k: v for k, v in vars(default).items() if k not in ("gpu", "deployment")}


@pytest.mark.parametrize("text, code, words", [
    ("[hardwar]\ngpu = 'h200'\n", 2, ["unknown section [hardwar]", "did you mean hardware?"]),
    ("[hardware]\ngpus_per_replcia = 2\n", 2, ["unknown key [hardware] gpus_per_replcia", "did you mean gpus_per_replica?"]),
    ("[engine]\ngpu = 'h200'\n", 2, ["unknown key [engine] gpu", "it is in [hardware] gpu"]),
    ("[hardware]\ngpus = '8'\n", 2, ["[hardware] gpus must be an integer", "a string"]),
    ("[targets]\nhit_rates = 0.9\n", 2, ["[targets] hit_rates must be an array of numbers", "a float"]),
    ("hardware = 3\n", 2, ["hardware must be a table"]),
    ("[model]\nname = 'qwen3-8b'\nconfig = 'c.json'\n", 2, ["[model] has both name and config"]),
    ("[targets]\nttft = { p95 = 2 }\n", 2, ["[targets] ttft must be a table of seconds by percentile (p50, p90, p99)"]),
    ("[prices]\nusd_per_gb = { nvme = 0.1 }\n", 2, ["[prices] usd_per_gb must be a table of numbers by tier"]),
    ("[hardware]\ngpu = 'h2000'\n", 2, ["[hardware] gpu (for --gpu)", "unknown GPU 'h2000' (did you mean 'h200'?)"]),
    ("[engine]\nsemantics = ['vlm']\n", 2, ["[engine] semantics (for --semantics)"]),
    ("[hardware]\ngpu = 'h200'\ngpus = \n", 1, ["d.toml:3: not valid TOML"]),
])
def test_a_bad_file_names_itself_and_the_key(capsys, tmp_path, text, code, words):
    path = tmp_path / "d.toml"
    path.write_text(text)
    got, out, err = run_stackdist(capsys, "plan", "t.jsonl", "--deployment", path)
    assert got == code and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and str(path) in err
    for word in words:
        assert word in err


def test_a_missing_or_unreadable_file_exits_1(capsys, tmp_path):
    got, _, err = run_stackdist(capsys, "plan", "t.jsonl", "--deployment", tmp_path / "no.toml")
    assert got == 1 and "no.toml: no such deployment file" in err
    got, _, err = run_stackdist(capsys, "plan", "t.jsonl", "--deployment", tmp_path)
    assert got == 1 and "is a folder" in err
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.toml"
        locked.write_text("")
        locked.chmod(0)
        got, _, err = run_stackdist(capsys, "plan", "t.jsonl", "--deployment", locked)
        assert got == 1 and "cannot read" in err


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """The first 200 requests of the README's trace (the conversation trace)."""
    path = tmp_path_factory.mktemp("depfile") / "head.jsonl"
    with open(real_trace_paths()[0]) as src, open(path, "w") as dst:
        dst.writelines(line for _, line in zip(range(200), src))
    return path


EXAMPLE_FLAGS = ["--model", "qwen3-32b", "--kv-dtype", "fp8", "--gpu", "h200", "--gpus", "8", "--gpus-per-replica", "2",
                 "--gpu-memory-utilization", "0.9", "--semantics", "vllm", "--engine-block-size", "16",
                 "--router", "session", "--max-replicas", "8", "--offload", "lmcache:cpu=256GiB", "--gpu-price", "3.5",
                 "--prices", "dram=3,ssd=0.1", "--targets", "0.1,0.2"]
"""The example file as flags, written out by hand from examples/qwen3-32b-8xh200.toml."""


def test_the_example_file_is_its_flags_and_its_echo_reproduces_it(capsys, tmp_path, head):
    code, out, err = run_stackdist(capsys, "plan", head, "--deployment", EXAMPLE, "--json", "-",
                                   "--write-deployment", tmp_path / "echo.toml")
    assert code == 0, err
    from_file = json.loads(out)
    code, out, err = run_stackdist(capsys, "plan", head, *EXAMPLE_FLAGS, "--json", "-")
    assert code == 0, err
    from_flags = json.loads(out)
    assert from_file.pop("deployment_file") == str(EXAMPLE) and from_flags.pop("deployment_file") is None
    assert from_file["deployment"]["replicas"] == 4 and from_file["deployment"]["offload"]
    assert from_file == from_flags  # the whole report (it holds no timings), the echo included
    code, out, err = run_stackdist(capsys, "plan", head, "--deployment", tmp_path / "echo.toml", "--json", "-")
    assert code == 0, err
    again = json.loads(out)
    assert again.pop("deployment_file") == str(tmp_path / "echo.toml")
    assert again == from_flags
    assert tomllib.loads((tmp_path / "echo.toml").read_text()) == from_flags["resolved_deployment"]


def test_relative_paths_resolve_against_the_file_not_the_working_folder(tmp_path, monkeypatch):
    folder = tmp_path / "deploy"
    folder.mkdir()
    _write(folder / "d.toml", {"model": {"config": "../cfg.json"}, "engine": {"schedule": "s.csv"},
                               "hardware": {"ttft_calibration": str(tmp_path / "abs.jsonl")}})
    monkeypatch.chdir(tmp_path)
    args = _apply(Path("deploy") / "d.toml")
    assert os.path.normpath(args.model_config) == str(tmp_path / "cfg.json")
    assert args.schedule == str(folder / "s.csv") and args.ttft_calibration == str(tmp_path / "abs.jsonl")
    assert _apply(_write(folder / "e.toml", {"engine": {"schedule": "serial"}})).schedule == "serial"
