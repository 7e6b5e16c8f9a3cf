"""stackdist plan: the report's answers checked against direct simulation; errors and outputs."""

from __future__ import annotations

import json
import math

import pytest
from naive import direct_requests, real_trace_paths, run_stackdist

from stackdist.traces import read_mooncake

CONVERSATION = real_trace_paths()[0]


run = run_stackdist


@pytest.fixture(scope="module")
def first_requests(tmp_path_factory):
    """The first 1500 requests of the conversation trace as a small Mooncake file."""
    path = tmp_path_factory.mktemp("plan") / "head.jsonl"
    with open(CONVERSATION) as src, open(path, "w") as dst:
        dst.writelines(line for _, line in zip(range(1500), src))
    return path


def test_json_report_answers_match_direct_simulation(capsys, first_requests):
    code, out, err = run(capsys, "plan", first_requests, "--json", "-", "--targets", "0.5,0.9", "--warmup", "300")
    assert code == 0 and "Traceback" not in err
    report = json.loads(out)
    trace = read_mooncake(first_requests)
    requests = [trace.request_blocks(r).tolist() for r in range(trace.n_requests)]
    counted = slice(300, None)
    input_tokens = int(trace.input_length[counted].sum())
    for semantics in ("engine", "per-access"):
        sem = report["semantics"][semantics]
        ceiling = sem["summary"]["ceiling_token_hit_rate"] * input_tokens
        for row in sem["working_set"]:
            blocks = row["fraction_of_ceiling"]["blocks"]

            def prefix_tokens(c, semantics=semantics):
                direct = direct_requests(requests, c, semantics)
                return sum(int(trace.block_tokens[trace.offsets[r]:trace.offsets[r] + p].sum())
                           for r, (p, _) in enumerate(direct) if r >= 300)

            target = math.ceil(row["target"] * round(ceiling))
            assert prefix_tokens(blocks) >= target > prefix_tokens(blocks - 1)
    assert report["comparison"]["working_sets"][0]["fraction_of_ceiling"] == 0.5
    assert report["model"]["kv_bytes_per_token"] == 28672


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_table_windows_plot_and_json_file(capsys, tmp_path, first_requests):
    pytest.importorskip("matplotlib")
    code, out, _err = run(capsys, "plan", first_requests, "--semantics", "engine", "--window", "2m",
                         "--json", tmp_path / "p.json", "--plot", tmp_path / "p.png", "--model", "llama-3.1-8b")
    assert code == 0
    assert "== engine semantics ==" in out and "per-access" not in out and "window" in out
    report = json.loads((tmp_path / "p.json").read_text())
    windows = report["semantics"]["engine"]["time_windows"]
    assert sum(w["requests"] for w in windows) == report["counted"]["requests"]
    assert report["model"]["bytes_per_block"] == 512 * 131072
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_reblock_and_csv_formats(capsys, tmp_path, first_requests):
    code, out, _ = run(capsys, "plan", first_requests, "--reblock", "16", "--json", "-", "--semantics", "engine")
    assert code == 0
    report = json.loads(out)
    assert report["trace"]["block_size_tokens"] == 16 and report["trace"]["reblocked_to"] == 16
    csv_path = tmp_path / "k.csv"
    csv_path.write_text("key\n" + "\n".join(str(k) for k in [1, 2, 3, 1, 2, 3, 1]) + "\n")
    code, out, _ = run(capsys, "plan", csv_path, "--format", "csv", "--json", "-", "--semantics", "per-access")
    assert code == 0
    summary = json.loads(out)["semantics"]["per-access"]["summary"]
    assert summary["blocks"] == 7 and summary["cold_blocks"] == 3


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--targets", "0.9,2"], 2, "--targets must be"),
        (["--warmup", "ten"], 2, "--warmup must be N requests, a duration with its unit"),
        (["--window", "0s"], 2, "--window must be a positive duration"),
        (["--prices", "gpu=3"], 2, "--prices must look like"),
        (["--model", "gpt-9"], 2, "argument --model: unknown model 'gpt-9'"),
        (["--tier-targets", "0.9,0.5"], 2, "--tier-targets must be"),
        (["--coverage", "0"], 2, "argument --coverage: must be a fraction in (0, 1]"),
        (["--semantics", "lru"], 2, "argument --semantics: must be a comma-separated list of engine, per-access, vllm, sglang"),
        (["--block-size", "0"], 2, "argument --block-size: must be an integer from 1"),
    ],
)
def test_bad_arguments(capsys, first_requests, extra, code, message):
    got, out, err = run(capsys, "plan", first_requests, *extra)
    assert got == code and out == ""
    assert message.lower() in err.lower()
    assert "Traceback" not in err


def test_bad_trace_lines_name_file_and_line(capsys, tmp_path, first_requests):
    bad = tmp_path / "bad.jsonl"
    lines = first_requests.read_text().splitlines()[:5]
    lines.insert(3, '{"timestamp": 0, "input_length": 10}')
    bad.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "plan", bad)
    assert code == 1 and out == "" and "bad.jsonl:4:" in err
    code, out, err = run(capsys, "plan", bad, "--skip-bad", "--json", "-")
    assert code == 0 and json.loads(out)["trace"]["skipped_lines"] == 1
