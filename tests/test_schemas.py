"""The published JSON Schemas (``schemas/``) and the field reference (``docs/json.md``) equal
what ``python -m stackdist.cli.schemas`` generates, and real outputs of every command validate
against them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from naive import real_trace_paths, run_stackdist

from stackdist.version import SCHEMA_VERSION

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("write_schemas", ROOT / "tools" / "write_schemas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCHEMAS = _tool().all_schemas()


def test_the_committed_schemas_and_reference_are_the_generated_ones(tmp_path):
    tool = _tool()
    committed = {p.name.removesuffix(".schema.json"): json.loads(p.read_text()) for p in (ROOT / "schemas").glob("*.json")}
    assert committed == SCHEMAS, "regenerate: python tools/write_schemas.py"
    assert (ROOT / "docs" / "json.md").read_text() == tool.reference()
    assert tool.main(["--schemas", str(tmp_path / "s"), "--docs", str(tmp_path / "json.md")]) == 0
    assert {p.name: p.read_text() for p in (tmp_path / "s").iterdir()} == \
        {p.name: p.read_text() for p in (ROOT / "schemas").glob("*.json")}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_each_schema_is_valid_and_carries_its_version(name):
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == f"urn:stackdist:schema:{name}:v{SCHEMA_VERSION}"
    root = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    assert root["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    assert "schema_version" in root["required"]


def _errors(name: str, report: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMAS[name])
    return [f"{list(e.absolute_path)}: {e.message[:300]}" for e in validator.iter_errors(report)]


def test_the_schemas_refuse_what_they_should():
    """A schema that accepts anything would pass every test below: a wrong type, an unknown key
    and a missing key are refused."""
    good = {"schema_version": SCHEMA_VERSION, "kind": "curve", "tool": {"name": "stackdist", "version": "0"},
            "trace": "t", "sampled": False, "summary": {"accesses": 1, "total_size": 1, "cold_misses": 1,
                                                        "ceiling_hits": 0, "ceiling_hit_rate": 0.0},
            "min_capacity_for_hit_rate": {"0.5": None}, "min_capacity_for_fraction_of_ceiling": {"0.5": None},
            "curve": {"capacity": [1], "hits": [0], "hit_rate": [0.0], "hit_size": [0], "size_hit_rate": [0.0]}}
    assert _errors("curve", good) == []
    assert _errors("curve", {**good, "summary": {**good["summary"], "accesses": "1"}})
    assert _errors("curve", {**good, "surprise": 1})
    assert _errors("curve", {k: v for k, v in good.items() if k != "curve"})
    assert _errors("curve", {**good, "schema_version": SCHEMA_VERSION + 1})
    assert _errors("curve", {**good, "kind": "tiers"})


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """The first 200 requests of the conversation trace."""
    path = tmp_path_factory.mktemp("schemas") / "head.jsonl"
    with open(real_trace_paths()[0]) as src, open(path, "w") as dst:
        dst.writelines(line for _, line in zip(range(200), src))
    return path


PLANS = {
    "default": ["--every", "10m", "--optimal", "--prices", "dram=3"],
    "engines": ["--semantics", "all", "--gpu-blocks", "50000,inf"],
    "decode_reuse": ["--semantics", "vllm", "--decode-reuse", "--gpu-blocks", "50000,inf"],
    "deployment": ["--deployment", ROOT / "examples" / "qwen3-32b-8xh200.toml", "--ttft-target", "p99=30",
                   "--ttft-target", "p50=0.01", "--targets", "0.1,0.9", "--max-replicas", "5"],
    "offload": ["--semantics", "vllm", "--gpu-blocks", "50000", "--offload", "lmcache:cpu=1GiB/4GiB,disk=8GiB",
                "--offload", "vllm-native:cpu=2GiB", "--model", "qwen3-8b"],
    "scheduler": ["--semantics", "vllm", "--schedule", "scheduler", "--model", "qwen3-8b", "--gpu", "h200",
                  "--workers", "2", "--router", "session", "--capacity", "10GiB"],
    "cluster": ["--semantics", "engine,vllm", "--workers", "3", "--router", "kv-aware", "--shared-blocks", "0,500",
                "--gpu-blocks", "20000"],
    "sampled": ["--sample-rate", "0.5", "--sample-seeds", "2", "--every", "10m"],
}


@pytest.mark.parametrize("case", list(PLANS))
def test_plan_outputs_validate(capsys, head, case):
    code, out, err = run_stackdist(capsys, "plan", head, "--json", "-", *PLANS[case])
    assert code == 0, err
    assert _errors("plan", json.loads(out)) == []


def test_a_plan_with_an_infeasible_pool_validates(capsys, head, tmp_path):
    code, _, err = run_stackdist(capsys, "plan", head, "--json", tmp_path / "p.json", "--semantics", "vllm",
                                 "--gpu-blocks", "2000,inf")
    assert code == 1 and "cannot hold" in err  # exit 1, the report written first
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["engine_models"]["vllm"]["min_feasible_pool"]["gpu_blocks"] > 2000
    assert _errors("plan", report) == []


@pytest.mark.parametrize("args", [
    ["--capacities", "100,1000"],
    ["--sample-rate", "0.5", "--sample-seeds", "2"],
    ["--window", "10:", "--warmup", "5"],
])
def test_curve_outputs_validate(capsys, head, args):
    code, out, err = run_stackdist(capsys, "curve", head, "--format", "mooncake", *args)
    assert code == 0, err
    assert _errors("curve", json.loads(out)) == []


def test_a_curve_without_reuse_validates(capsys, tmp_path):
    trace = tmp_path / "once.csv"
    trace.write_text("1\n2\n3\n")
    code, out, err = run_stackdist(capsys, "curve", trace)
    assert code == 0, err
    report = json.loads(out)
    assert "no_reuse" in report and _errors("curve", report) == []


@pytest.mark.parametrize("args", [
    ["--gpu", "100", "--cpu", "100,1000", "--exclusive"],
    ["--gpu", "100", "--cpu", "100,1000", "--exclusive", "--sample-rate", "0.5", "--sample-seeds", "2"],
])
def test_tiers_outputs_validate(capsys, head, args):
    code, out, err = run_stackdist(capsys, "tiers", head, "--format", "mooncake", *args)
    assert code == 0, err
    assert _errors("tiers", json.loads(out)) == []


def _lab(capsys, *argv: str) -> dict:
    from kvlab.placement.__main__ import main as placement

    assert placement(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_placement_outputs_validate(capsys):
    simulate = _lab(capsys, "simulate", "--workload", "chat", "--param", "n_sessions=2", "--param",
                    "accesses_per_session=300", "--prefetch", "causal")
    assert _errors("placement-simulate", simulate) == []
    other = _lab(capsys, "simulate", "--workload", "chat", "--param", "n_sessions=2", "--param",
                 "accesses_per_session=300", "--model", "qwen3-8b", "--gpu", "h100")
    assert other["served"]["latency_factors"] and _errors("placement-simulate", other) == []
    assert _errors("placement-calibration", _lab(capsys, "calibration")) == []


@pytest.mark.parametrize("args", [
    ["--format", "mooncake", "--capacities", "100,1000"],
    ["--format", "mooncake", "--semantics", "engine", "--sample-size", "500", "--targets", "0.01,0.5",
     "--bytes-per-unit", "1048576"],
])
def test_watch_lines_validate(capsys, head, args):
    code, out, err = run_stackdist(capsys, "watch", head, "--no-follow", *args)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines and lines[-1]["final"]
    for line in lines:
        assert _errors("watch", line) == []


def test_placement_experiments_results_validate(capsys, tmp_path):
    from kvlab.placement.__main__ import main as placement

    assert placement(["experiments", "--quick", "--out", str(tmp_path), "--no-plots"]) == 0
    capsys.readouterr()
    assert _errors("placement-experiments", json.loads((tmp_path / "results.json").read_text())) == []


def test_a_plan_whose_deployment_is_not_answered_validates(capsys, tmp_path):
    """An LMCache lookup log (full chunks only) gets a deployment section that says why it has no answer."""
    log = tmp_path / "lookup.jsonl"
    log.write_text("".join(json.dumps({"timestamp": float(i), "request_id": f"r{i}", "chunk_size": 256,
                                       "seq_len": 256 * 2 + 100, "chunk_hashes": ["0x1", f"0x2{i}"]}) + "\n"
                           for i in range(5)))
    code, out, err = run_stackdist(capsys, "plan", log, "--format", "lmcache", "--gpu", "h200", "--model", "qwen3-8b",
                                   "--json", "-")
    assert code == 0, err
    report = json.loads(out)
    assert "not_answered" in report["deployment"] and _errors("plan", report) == []
    assert _errors("plan", {**report, "deployment": {"not_answered": 1}})


@pytest.mark.parametrize("argv", [[], ["--passes", "fwd,rev,fwd", "--docs", "4", "--gpu", "12000"]])
def test_block_lab_outputs_validate(capsys, argv):
    from kvlab.__main__ import main as kvlab

    assert kvlab(["block-lab", "--json", "-", *argv]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "block-lab" and _errors("block-lab", report) == []
    del report["passes"][0]["requests"][0]["per-access"]["cached_blocks"]  # what per-access must carry
    assert _errors("block-lab", report)


def test_the_lab_manifest_validates(capsys, tmp_path):
    from kvlab.__main__ import main as kvlab

    assert kvlab(["run-lab", "--out", str(tmp_path / "lab")]) == 0
    manifest = json.loads((tmp_path / "lab" / "manifest.json").read_text())
    assert len(manifest["files"]) == 7 and _errors("kvlab-lab-manifest", manifest) == []
    manifest["files"]["cliff.json"]["sha256"] = 7
    assert _errors("kvlab-lab-manifest", manifest)
