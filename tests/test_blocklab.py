"""kvlab.blocklab: hand-derived block-level passes, replay vs direct simulation, TTFT model, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from naive import random_requests, request_trace

from kvlab import blocklab
from kvlab.blocklab import (
    FixtureError,
    PartialPrefixTTFT,
    build_requests,
    direct_hits,
    load_partial_prefix,
    replay_hits,
    run_block_lab,
)
from kvlab.lab import LabMismatchError
from stackdist.traces.blocks import chain_hashes

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "fixtures" / "partial_prefix_h200.json"


def fixture_row(p: int) -> dict:
    """The fixture's row with P == p, read from the JSON (never typed in)."""
    rows = json.loads(FIXTURE.read_text())["rows"]
    return next(row for row in rows if row["P"] == p)


make_trace = request_trace


def rows_of(result: dict, pass_number: int) -> dict[int, dict]:
    return {entry["doc"]: entry for entry in result["passes"][pass_number - 1]["requests"]}


# ---------------------------------------------------------------- replay vs direct simulation

def test_replay_equals_direct_simulation_on_random_prefix_chained_traces_at_every_capacity():
    rng = np.random.default_rng(7)
    for _ in range(25):
        requests = random_requests(rng, n_requests=int(rng.integers(0, 16)), max_blocks=int(rng.integers(1, 7)),
                                   branching=int(rng.integers(1, 4)))
        trace = make_trace(requests)
        n_distinct = len({b for r in requests for b in r})
        for capacity in range(n_distinct + 2):
            assert replay_hits(trace, capacity) == direct_hits(trace, capacity), capacity


def test_replay_equals_direct_simulation_on_a_cyclic_scan_with_one_key_requests():
    requests = [[0], [0], [1], [2], [0], [1], [2]] + [[5, 6, 7]] * 2
    trace = make_trace(requests)
    for capacity in range(10):
        assert replay_hits(trace, capacity) == direct_hits(trace, capacity), capacity


def test_per_access_arrival_residency_by_hand():
    # LRU of 3 over a, b, c then request [a, x]: on arrival a, b, c are cached, so a is resident
    # (1 block); a hits, x misses. Request [b, c] then: on arrival the stack is x, a, c (b was
    # evicted by x), so only c is resident; b misses and evicts c before c is read.
    trace = make_trace([[1, 2, 3], [1, 9], [2, 3]])
    hits = replay_hits(trace, 3)["per-access"]
    assert hits["resident_at_arrival"] == [0, 1, 1]
    assert hits["cached_blocks"] == [0, 1, 0]
    assert hits["prefix_blocks"] == [0, 1, 0]


# ---------------------------------------------------------------- a hand-derived miniature of the lab

def test_miniature_lab_by_hand():
    # 3 documents of 64 tokens (4 blocks of 16) + a fresh 16-token question (1 block);
    # GPU 128 tokens = 8 blocks; passes fwd,rev.
    # engine after fwd (oldest..newest): b2 b1 b0 q2 c3 c2 c1 c0 (each commit is tail first).
    #   rev d2: c0..c3 cached -> prefix 4; its new question block evicts b2.
    #   rev d1: b0, b1 cached, b2 gone -> partial hit of 2 blocks (32 tokens).
    #   rev d0: nothing of a left -> 0.
    # per-access after fwd: b2 b3 q1 c0 c1 c2 c3 q2 (head first, so the heads go first).
    #   rev d2: 4 hits; its question evicts b2. rev d1: only b3 is resident on arrival; b0's
    #   miss evicts it, so no prefix and no block hits. rev d0: 0.
    result = run_block_lab(gpu=128, block_size=16, docs=3, tokens=64, question_tokens=16, passes="fwd,rev")
    assert result["config"]["capacity_blocks"] == 8 and result["config"]["doc_blocks"] == 4
    fwd, rev = rows_of(result, 1), rows_of(result, 2)
    assert all(fwd[d][s]["prefix_blocks"] == 0 for d in range(3) for s in ("engine", "per-access"))
    assert [rev[d]["engine"]["prefix_blocks"] for d in (2, 1, 0)] == [4, 2, 0]
    assert [rev[d]["engine"]["resident_at_arrival"] for d in (2, 1, 0)] == [4, 2, 0]
    assert [rev[d]["per-access"]["prefix_blocks"] for d in (2, 1, 0)] == [4, 0, 0]
    assert [rev[d]["per-access"]["cached_blocks"] for d in (2, 1, 0)] == [4, 0, 0]
    assert [rev[d]["per-access"]["resident_at_arrival"] for d in (2, 1, 0)] == [4, 1, 0]
    assert rev[1]["engine"]["prefix_tokens"] == 32 and rev[1]["engine"]["prefill_tokens"] == 80 - 32
    # The whole-document scenario holds 2 documents of 64 tokens in 128: d2 and d1 hit.
    assert [rev[d]["whole_document_hit"] for d in (2, 1, 0)] == [True, True, False]
    # Half the document cached -> the fixture's P = doc_tokens / 2 row (2432 of 4864), exactly.
    half = fixture_row(2432)["gpu_prefix"]
    ttft = rev[1]["engine"]["ttft"]
    assert (ttft["fixture_P"], ttft["wall_ms"], ttft["gpu_work_ms"]) == (2432, half["wall_ms_median"], half["gpu_work_ms"])
    miss = fixture_row(0)["gpu_prefix"]
    assert rev[0]["engine"]["ttft"]["wall_ms"] == miss["wall_ms_median"]


def test_default_lab_reverse_pass_by_hand():
    # 5011-token documents: 313 document blocks; request 5043 tokens = 315 hashed blocks (the
    # 314th mixes 3 document and 13 question tokens; the last 3 question tokens are not hashed).
    # Capacity 21520 // 16 = 1345 blocks. After pass 2 (all misses) the cache holds the last
    # 1345 blocks: docs 9, 8, 7, 6 whole (4 x 315 = 1260) and 85 blocks of doc 5:
    #   engine: its head (the 85 most recent of its blocks); per-access: its tail.
    # Reverse pass: docs 9..6 hit all 313 document blocks; each adds 2 fresh blocks, evicting
    # 8 of doc 5's blocks. Doc 5 then finds
    #   engine: its first 85 - 8 = 77 blocks -> a partial hit of 77 blocks (1232 tokens);
    #   per-access: its blocks 238..314 (77 blocks, 75 of them document blocks) but not block 0:
    #   no prefix, and its 238 misses before block 238 evict those oldest blocks first.
    result = run_block_lab()
    c = result["config"]
    assert (c["capacity_blocks"], c["doc_blocks"], c["request_blocks"]) == (1345, 313, 315)
    rev = rows_of(result, 3)
    for doc in (9, 8, 7, 6):
        for semantics in ("engine", "per-access"):
            assert rev[doc][semantics]["prefix_blocks"] == 313
        assert rev[doc]["whole_document_hit"]
    assert rev[5]["engine"]["prefix_blocks"] == 85 - 8 == rev[5]["engine"]["resident_at_arrival"]
    assert rev[5]["engine"]["prefix_tokens"] == 77 * 16
    assert rev[5]["per-access"]["prefix_blocks"] == 0 == rev[5]["per-access"]["cached_blocks"]
    assert rev[5]["per-access"]["resident_at_arrival"] == 75
    assert not rev[5]["whole_document_hit"]
    for doc in range(5):
        assert rev[doc]["engine"]["prefix_blocks"] == 0 == rev[doc]["per-access"]["resident_at_arrival"]
    for pass_number in (1, 2):
        assert all(e["engine"]["resident_at_arrival"] == 0 for e in result["passes"][pass_number - 1]["requests"])


# ---------------------------------------------------------------- the requests

def test_requests_share_document_blocks_and_have_fresh_questions():
    lab = build_requests(docs=2, tokens=40, question_tokens=20, passes="fwd,fwd", block_size=16, seed=3)
    assert lab.doc_blocks == 2 and lab.request_tokens == 60 and lab.docs == (0, 1, 0, 1)
    blocks = [lab.blocks(r) for r in range(4)]
    assert all(len(b) == 60 // 16 for b in blocks)
    assert blocks[0][:2] == blocks[2][:2] and blocks[1][:2] == blocks[3][:2]
    assert blocks[0][0] != blocks[1][0]
    question_blocks = [b for request in blocks for b in request[2:]]
    assert len(set(question_blocks)) == len(question_blocks)
    assert not set(question_blocks) & {b for request in blocks for b in request[:2]}


def test_requests_are_the_chain_hashes_of_document_plus_question():
    lab = build_requests(docs=2, tokens=20, question_tokens=12, passes="rev", block_size=8, seed=5)
    rng = np.random.default_rng(5)
    documents = rng.integers(0, blocklab.VOCAB_SIZE, size=(2, 20), dtype=np.int64)
    for r, doc in enumerate((1, 0)):
        question = rng.integers(0, blocklab.VOCAB_SIZE, size=12, dtype=np.int64)
        expected = chain_hashes(np.concatenate([documents[doc], question]), 8).tolist()
        assert lab.blocks(r) == expected


def test_a_colliding_question_is_drawn_again(monkeypatch):
    # Two token ids: the one-block requests (15 document tokens + 1 question token) collide half
    # the time; every question block must still come out fresh.
    monkeypatch.setattr(blocklab, "VOCAB_SIZE", 2)
    lab = build_requests(docs=1, tokens=15, question_tokens=1, passes="fwd,fwd", block_size=16, seed=0)
    assert lab.blocks(0) != lab.blocks(1)


def test_no_fresh_question_is_an_error(monkeypatch):
    monkeypatch.setattr(blocklab, "VOCAB_SIZE", 1)
    with pytest.raises(ValueError, match="could not draw a fresh 1-token question in 100 draws from 1 token ids"):
        build_requests(docs=1, tokens=15, question_tokens=1, passes="fwd,fwd", block_size=16, seed=0)


def test_no_question_means_whole_requests_repeat():
    result = run_block_lab(gpu=32, block_size=16, docs=1, tokens=32, question_tokens=0, passes="fwd,fwd")
    second = result["passes"][1]["requests"][0]
    assert second["engine"]["prefix_blocks"] == 2 == second["per-access"]["cached_blocks"]


# ---------------------------------------------------------------- verification

def test_a_direct_simulation_mismatch_is_an_error(monkeypatch):
    real = blocklab.direct_hits

    def off_by_one(trace, capacity):
        out = real(trace, capacity)
        out["engine"]["prefix_blocks"][20 + 4] += 1  # pass 3 (rev) reads 9, 8, 7, 6, then doc 5
        return out

    monkeypatch.setattr(blocklab, "direct_hits", off_by_one)
    with pytest.raises(LabMismatchError) as caught:
        run_block_lab()
    assert str(caught.value) == (
        "pass 3 (rev) doc 5, engine prefix_blocks: the stackdist replay gives 77 but direct simulation gives 78"
    )
    assert blocklab.main([]) == 1


def test_a_per_access_mismatch_is_caught_too(monkeypatch):
    real = blocklab.direct_hits

    def wrong(trace, capacity):
        out = real(trace, capacity)
        out["per-access"]["resident_at_arrival"][0] = 99
        return out

    monkeypatch.setattr(blocklab, "direct_hits", wrong)
    with pytest.raises(LabMismatchError, match=r"pass 1 \(fwd\) doc 0, per-access resident_at_arrival"):
        run_block_lab(docs=2, tokens=32)


# ---------------------------------------------------------------- TTFT model

def test_fixture_model_reads_the_fields():
    model = load_partial_prefix(FIXTURE)
    data = json.loads(FIXTURE.read_text())
    assert model.prefixes == tuple(data["prefixes"]) and model.doc_tokens == data["doc_tokens"]
    for p, wall, work in zip(model.prefixes, model.wall_ms, model.gpu_work_ms):
        assert (wall, work) == (fixture_row(p)["gpu_prefix"]["wall_ms_median"], fixture_row(p)["gpu_prefix"]["gpu_work_ms"])
        estimate = model.estimate(p / model.doc_tokens)
        assert (estimate["wall_ms"], estimate["gpu_work_ms"]) == (round(wall, 3), round(work, 3))


def test_estimate_interpolates_linearly_and_flags_the_path_switch():
    model = PartialPrefixTTFT("f.json", 1000, 10, (0, 100, 1000), (40.0, 60.0, 20.0), (30.0, 50.0, 5.0))
    middle = model.estimate(0.55)  # P = 550, halfway between 100 and 1000
    assert (middle["wall_ms"], middle["gpu_work_ms"], middle["between_P"]) == (40.0, 27.5, [100, 1000])
    assert not middle["mixes_attention_paths"]
    small = model.estimate(0.05)  # P = 50: between the no-cache path (P=0) and the masked path
    assert small["mixes_attention_paths"] and small["between_P"] == [0, 100] and small["wall_ms"] == 50.0
    assert not model.estimate(0.0)["mixes_attention_paths"] and not model.estimate(0.1)["mixes_attention_paths"]
    assert model.estimate(1.0)["between_P"] == [1000, 1000]
    with pytest.raises(ValueError, match="cached_fraction must be between 0 and 1, got 1.5."):
        model.estimate(1.5)


def write_fixture(tmp_path: Path, mutate) -> Path:
    data = json.loads(FIXTURE.read_text())
    mutate(data)
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("doc_tokens"), "doc_tokens must be a positive int, got None"),
        (lambda d: d["rows"][2]["gpu_prefix"].pop("wall_ms_median"),
         "rows[2].gpu_prefix.wall_ms_median must be a positive number of ms, got None"),
        (lambda d: d["rows"][3]["gpu_prefix"].update(gpu_work_ms="fast"),
         "rows[3].gpu_prefix.gpu_work_ms must be a positive number of ms, got 'fast'"),
        (lambda d: d["rows"][4].update(P=512), "rows[4].P must be greater than the previous row's P (1808), got 512"),
        (lambda d: d["rows"][1].update(P=99999), "rows[1].P must be an int in 0..doc_tokens (4864), got 99999"),
        (lambda d: d["rows"].pop(), "rows must run from P=0 to P=doc_tokens (4864), got P=0..4352"),
        (lambda d: d.update(rows=[]), "rows must be a list of at least 2 measured prefixes"),
        (lambda d: d["rows"][0].pop("gpu_prefix"), "rows[0].gpu_prefix must be an object"),
    ],
)
def test_bad_fixture_names_file_and_field(tmp_path, mutate, message):
    path = write_fixture(tmp_path, mutate)
    with pytest.raises(FixtureError) as caught:
        load_partial_prefix(path)
    assert str(caught.value) == f"{path}: {message}"


def test_unreadable_fixture_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"doc_tokens": 4864,\n "rows": [}')
    with pytest.raises(FixtureError, match=r"bad\.json:2: not valid JSON"):
        load_partial_prefix(bad)
    with pytest.raises(FixtureError, match=r"missing\.json: cannot read the partial-prefix fixture"):
        load_partial_prefix(tmp_path / "missing.json")


# ---------------------------------------------------------------- CLI

SMALL = ["--docs", "3", "--tokens", "64", "--question-tokens", "16", "--gpu", "128", "--passes", "fwd,rev"]


def test_cli_json_to_stdout_equals_run_block_lab(capsys):
    assert blocklab.main([*SMALL, "--json", "-"]) == 0
    out = capsys.readouterr().out
    expected = run_block_lab(gpu=128, docs=3, tokens=64, question_tokens=16, passes="fwd,rev")
    assert json.loads(out) == expected


def test_cli_json_file_is_written_and_the_table_printed(tmp_path, capsys):
    target = tmp_path / "lab.json"
    assert blocklab.main([*SMALL, "--json", str(target)]) == 0
    captured = capsys.readouterr()
    assert json.loads(target.read_text()) == run_block_lab(gpu=128, docs=3, tokens=64, question_tokens=16,
                                                           passes="fwd,rev")
    assert [p.name for p in tmp_path.iterdir()] == ["lab.json"]  # no temporary file left
    assert "pass 2 (rev)" in captured.out and f"wrote {target}" in captured.err
    lines = captured.out.splitlines()
    reverse = lines[lines.index("pass 2 (rev)"):]
    table_row = next(line for line in reverse if line.startswith("  1 "))
    assert table_row.split()[:6] == ["1", "hit", "|", "2", "32", "2"]  # doc 1: whole hit; engine prefix 2 blocks


def test_cli_table_marks_the_attention_path_switch(capsys):
    # 256-token documents (16 blocks) + 1 question block; 37 blocks. After fwd the engine cache
    # holds d2, d1 (17 each) and d0's first 3 blocks; in rev, d2 and d1 each add a fresh block,
    # so d0 hits 1 block = 1/16 of the document -> fixture P = 4864 / 16 = 304 < 512: flagged.
    assert blocklab.main(["--docs", "3", "--tokens", "256", "--question-tokens", "16", "--gpu", str(37 * 16),
                          "--passes", "fwd,rev"]) == 0
    out = capsys.readouterr().out
    result = run_block_lab(gpu=37 * 16, docs=3, tokens=256, question_tokens=16, passes="fwd,rev")
    d0 = rows_of(result, 2)[0]["engine"]
    assert d0["prefix_blocks"] == 1 and d0["ttft"]["fixture_P"] == 304 and d0["ttft"]["mixes_attention_paths"]
    assert [e["doc"] for e in result["passes"][1]["requests"] if e["engine"]["ttft"]["mixes_attention_paths"]] == [0]
    assert out.count("*") == 2 + 1  # doc 0's wall and gpu cells, and the column legend


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "-1"], "argument --gpu: must be a non-negative integer, got '-1'"),
        (["--block-size", "0"], "argument --block-size: must be a positive integer, got '0'"),
        (["--docs", "two"], "argument --docs: must be a positive integer, got 'two'"),
        (["--tokens", "0"], "argument --tokens: must be a positive integer, got '0'"),
        (["--question-tokens", "-3"], "argument --question-tokens: must be a non-negative integer, got '-3'"),
        (["--seed", "-1"], "argument --seed: must be a non-negative integer, got '-1'"),
        (["--passes", "fwd,back"], "argument --passes: unknown pass name 'back'; allowed values: fwd, rev"),
        (["--json", ""], "argument --json: must be a file path or -, got an empty string"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_cli_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        blocklab.main(argv, prog="kvlab block-lab")
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"kvlab block-lab: error: {message}" in err and "Traceback" not in err


def test_cli_data_errors_exit_1(tmp_path, capsys):
    assert blocklab.main([*SMALL, "--fixture", str(tmp_path / "none.json")], prog="kvlab block-lab") == 1
    assert "kvlab block-lab: error: " in capsys.readouterr().err
    (tmp_path / "file").write_text("")  # a folder cannot be created where a file is
    assert blocklab.main([*SMALL, "--json", str(tmp_path / "file" / "out.json")], prog="kvlab block-lab") == 1
    err = capsys.readouterr().err
    assert "cannot write" in err and "Traceback" not in err


def test_kvlab_block_lab_through_the_kvlab_command(capsys):
    # Through kvlab's own main (what `python -m kvlab` runs; a real `python -m kvlab` process runs
    # in test_lab's test_python_m_kvlab_end_to_end and in test_hostile's closed-stdout and Ctrl-C
    # checks). Usage errors: in-process in test_cli_usage_errors_exit_2; through `python -m kvlab`
    # (the same wrapper for every subcommand) in test_lab's test_python_m_kvlab_end_to_end.
    from kvlab.__main__ import main as kvlab_main

    assert kvlab_main(["block-lab", *SMALL, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["capacity_blocks"] == 8


def test_run_block_lab_rejects_bad_python_arguments():
    with pytest.raises(ValueError, match="question_tokens must be a non-negative int, got -1."):
        run_block_lab(question_tokens=-1)
    with pytest.raises(TypeError, match="gpu must be a non-negative int, got '1'."):
        run_block_lab(gpu="1")
    with pytest.raises(ValueError, match="unknown pass name 'up'"):
        run_block_lab(passes="up")


def test_the_readme_section_pastes_the_current_output(monkeypatch, capsys, repo_root):
    monkeypatch.chdir(repo_root)  # the table names the fixture relative to the current folder
    assert blocklab.main([]) == 0
    table = capsys.readouterr().out
    section = (repo_root / "docs" / "blocklab.md").read_text()
    assert f"$ python -m kvlab block-lab\n{table}```" in section
