"""Capacities with units on every command that takes one (issue 26): ``curve --capacities``,
``tiers --gpu/--cpu``, ``plan --weights``. A bare integer keeps meaning the command's unit;
tokens, pages and bytes become whole blocks of a request trace; bytes need ``--model``."""

from __future__ import annotations

import json
import random

import pytest
from naive import run_stackdist

from stackdist.cli.args import Size, resolve_sizes, size_list
from stackdist.errors import UsageError

run = run_stackdist
QWEN25_15B_KV = 28 * 2 * 2 * 128 * 2  # layers x (K, V) x KV heads x head_dim x bf16 bytes (the model's config.json)
BLOCK = 512  # tokens per Mooncake block


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    """200 requests over a few shared prefixes (seeded), so that capacities change the hits."""
    rng = random.Random(26)
    lines = []
    for i in range(200):
        prefix = rng.randrange(6)
        ids = [1000 * prefix + j for j in range(rng.randrange(1, 6))] + [10**6 + i]
        lines.append(json.dumps({"timestamp": 100 * i, "input_length": BLOCK * len(ids), "output_length": 2,
                                 "hash_ids": ids}))
    path = tmp_path_factory.mktemp("units") / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def naive_blocks(text: str, kv_bytes: int | None) -> int:
    """The expected blocks of one size, written out by hand for the units the tests use."""
    units = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "GB": 10**9, "MB": 10**6}
    for suffix, per in (("Ktokens", 1000), ("tokens", 1), ("pages", 16), ("blocks", BLOCK)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * per) // BLOCK
    for suffix, per in units.items():
        if text.endswith(suffix):
            assert kv_bytes is not None
            return int(float(text[: -len(suffix)]) * per) // kv_bytes // BLOCK
    return int(text)


@pytest.mark.parametrize("text", ["7", "1024tokens", "1.5Ktokens", "64pages", "3blocks", "100MiB", "0.5GB", "14680064B"])
def test_resolve_sizes_matches_the_hand_conversion(text):
    kv = QWEN25_15B_KV
    assert resolve_sizes(size_list(text, "--x"), "--x", BLOCK, kv) == [naive_blocks(text.replace("14680064B", "14MiB"), kv)]


@pytest.mark.parametrize("bad", ["", "x", "5 parsecs", "-3", "1.5", "2.5tokens", "1e400GiB", "1,,x"])
def test_bad_sizes_name_the_flag(bad):
    with pytest.raises(UsageError, match="--capacities"):
        size_list(bad, "--capacities")


def test_bytes_need_a_model_and_access_traces_take_bare_integers():
    with pytest.raises(UsageError, match="add --model"):
        resolve_sizes([Size("1GiB", "bytes", 2**30)], "--gpu", BLOCK, None)
    with pytest.raises(UsageError, match="own size unit"):
        resolve_sizes([Size("4tokens", "tokens", 4)], "--gpu", None, None)
    assert resolve_sizes([Size("4", "", 4)], "--gpu", None, None) == [4]


def test_curve_capacities_with_units_equal_the_same_blocks(capsys, mooncake):
    sizes = ["1024tokens", "64pages", "100MiB", "2GiB", "5"]
    blocks = [str(naive_blocks(s, QWEN25_15B_KV)) for s in sizes]
    code, with_units, err = run(capsys, "curve", mooncake, "--format", "mooncake", "--capacities", ",".join(sizes),
                                "--model", "Qwen/Qwen2.5-1.5B-Instruct")
    assert code == 0 and err == ""
    code, in_blocks, _ = run(capsys, "curve", mooncake, "--format", "mooncake", "--capacities", ",".join(blocks))
    assert code == 0
    assert json.loads(with_units) == json.loads(in_blocks)
    assert len(set(json.loads(in_blocks)["curve"]["hits"])) > 2  # the sizes matter on this trace


def test_tiers_gpu_and_cpu_with_units_equal_the_same_blocks(capsys, mooncake):
    code, with_units, err = run(capsys, "tiers", mooncake, "--format", "mooncake", "--gpu", "2048tokens", "--gpu", "3",
                                "--cpu", "0,128pages,50MiB", "--model", "qwen2.5-1.5b")
    assert code == 0 and err == ""
    cpu = ",".join(str(naive_blocks(s, QWEN25_15B_KV)) for s in ("0", "128pages", "50MiB"))
    code, in_blocks, _ = run(capsys, "tiers", mooncake, "--format", "mooncake", "--gpu", "4,3", "--cpu", cpu)
    assert code == 0 and json.loads(with_units) == json.loads(in_blocks)


@pytest.mark.parametrize("argv, message", [
    (["curve", "{m}", "--format", "mooncake", "--capacities", "1GiB"], ("--capacities 1GiB: a size in bytes needs the "
     "model's KV bytes per token; add --model")),
    (["tiers", "{m}", "--format", "mooncake", "--gpu", "80GiB"], ("--gpu 80GiB: a size in bytes needs the model's KV "
     "bytes per token; add --model")),
    (["curve", "{csv}", "--capacities", "10tokens"], "--capacities 10tokens: the capacities of an access"),
    (["tiers", "{csv}", "--gpu", "2", "--cpu", "3GiB", "--model", "qwen3-8b"], "--cpu 3GiB: the capacities of an access"),
    (["curve", "{m}", "--format", "mooncake", "--capacities", "2parsecs"], "--capacities must be a comma-separated list of sizes"),
])
def test_unit_errors_are_usage_errors_naming_the_flag(capsys, mooncake, tmp_path, argv, message):
    (tmp_path / "t.csv").write_text("a\nb\na\n")
    argv = [a.replace("{m}", str(mooncake)).replace("{csv}", str(tmp_path / "t.csv")) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err and err.count("error:") == 1


def test_model_without_byte_sizes_is_a_warning_not_silence(capsys, mooncake):
    code, out, err = run(capsys, "curve", mooncake, "--format", "mooncake", "--capacities", "2,3", "--model", "qwen3-8b")
    assert code == 0 and json.loads(out)["kind"] == "curve"
    assert "warning: --model only converts capacities given in bytes" in err


@pytest.mark.parametrize("text, gib", [("65GB", 65e9 / 2**30), ("60GiB", 60.0), ("17.5", 17.5), ("1TB", 1e12 / 2**30)])
def test_plan_weights_take_units(capsys, text, gib):
    from stackdist.cli.main import build_parser

    args = build_parser("plan").parse_args(["plan", "t.jsonl", "--weights", text])
    assert args.weights == pytest.approx(gib, rel=1e-12)


@pytest.mark.parametrize("bad", ["0", "-5GB", "65parsecs", "4tokens", "nan"])
def test_plan_weights_refuse_non_sizes(capsys, bad):
    code, out, err = run(capsys, "plan", "t.jsonl", f"--weights={bad}")
    assert code == 2 and out == "" and "argument --weights: must be a positive size" in err


def test_gpu_blocks_in_bytes_point_to_capacity(capsys):
    code, out, err = run(capsys, "plan", "tests/data/mooncake_small.jsonl", "--semantics", "vllm", "--gpu-blocks",
                         "40GiB,inf", "--model", "qwen2.5-1.5b")
    assert code == 2 and out == ""
    assert err == ("stackdist plan: error: --gpu-blocks 40GiB,inf: pool sizes are in each engine's own count "
                   "(num_gpu_blocks, pages); for a size in bytes or tokens give --capacity 40GiB (each engine model runs "
                   "at its own pool for it).\n")
    code, _out, err = run(capsys, "plan", "tests/data/mooncake_small.jsonl", "--semantics", "vllm", "--capacity", "40GiB",
                          "--json", "-")
    assert code == 0, err


def test_curve_and_tiers_import_the_planner_only_for_bytes(tmp_path):
    import subprocess
    import sys

    (tmp_path / "t.csv").write_text("a\nb\na\n")
    code = ("import sys, contextlib, io\nfrom stackdist.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['curve', {str(tmp_path / 't.csv')!r}, '--capacities', '1,2']) == 0\n"
            f"    assert main(['tiers', {str(tmp_path / 't.csv')!r}, '--gpu', '1', '--cpu', '0,1']) == 0\n"
            "print('stackdist.planning' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("pages, page_tokens", [(64, 16), (40, 32), (3, 16)])
def test_plan_capacity_in_pages_is_that_many_engine_pages_of_tokens(capsys, mooncake, pages, page_tokens):
    def rows(size):
        code, out, err = run(capsys, "plan", mooncake, "--semantics", "engine", "--engine-block-size", page_tokens,
                             "--capacity", size, "--json", "-")
        assert code == 0, err
        found = json.loads(out)["budgets"]["rows"]
        assert [r.pop("budget") for r in found] == [size]
        return found

    assert rows(f"{pages}pages") == rows(f"{pages * page_tokens}tokens")
