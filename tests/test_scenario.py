"""Tests for kvlab.scenario: hand-derived scan results, the CLI (in process and as scripts),
bad arguments, and the standalone copy of kvsim.py/scenario.py/summarize.py."""

from __future__ import annotations

import doctest
import json
import shutil
import sys
from pathlib import Path

import pytest

from kvlab import scenario
from kvlab.kvsim import LRUCache
from kvlab.scenario import main, run_scenario, scenario_trace

DOC_TOKENS = 5011  # 10 documents: 50110 tokens in all
FOUR_DOCS_GPU = 21520  # 4 * 5011 = 20044 <= 21520 < 25055 = 5 * 5011


def miss_pass(order: str, misses: int = 10) -> dict[str, object]:
    return {"order": order, "gpu_hits": 0, "cpu_hits": 0, "misses": misses, "hit_docs": []}


# --------------------------------------------------------------------------------------
# run_scenario / scenario_trace: hand-derived results
# --------------------------------------------------------------------------------------


def test_default_scenario_gpu_only() -> None:
    # GPU holds 4 docs. fwd: all miss; fwd again: LRU thrashes (all miss), leaving 6,7,8,9;
    # rev: 9,8,7,6 hit, then 5..0 miss.
    expected = {
        "passes": [
            miss_pass("fwd"),
            miss_pass("fwd"),
            {"order": "rev", "gpu_hits": 4, "cpu_hits": 0, "misses": 6, "hit_docs": [9, 8, 7, 6]},
        ]
    }
    assert run_scenario() == expected
    assert run_scenario(gpu=21520, cpu=0, docs=10, tokens=5011, passes=("fwd", "fwd", "rev")) == expected


def test_result_key_order() -> None:
    result = run_scenario(passes=("fwd",))
    assert list(result) == ["passes"]
    assert list(result["passes"][0]) == ["order", "gpu_hits", "cpu_hits", "misses", "hit_docs"]


def test_cyclic_scan_second_pass_all_misses() -> None:
    assert run_scenario(passes=("fwd", "fwd")) == {"passes": [miss_pass("fwd"), miss_pass("fwd")]}


def test_offload_cpu_tier_turns_second_pass_into_cpu_hits() -> None:
    # CPU 56000 holds 11 docs, so all 10 stay there; the GPU keeps the last 4 loaded.
    result = run_scenario(gpu=21520, cpu=56000, passes=("fwd", "fwd", "rev"))
    assert result == {
        "passes": [
            miss_pass("fwd"),
            {"order": "fwd", "gpu_hits": 0, "cpu_hits": 10, "misses": 0, "hit_docs": list(range(10))},
            {"order": "rev", "gpu_hits": 4, "cpu_hits": 6, "misses": 0, "hit_docs": list(range(9, -1, -1))},
        ]
    }


@pytest.mark.parametrize("gpu", [0, 5010, 5011, 21520, 30000, 40000, 45000, 50109, 50110, 60000])
def test_gpu_cliff_and_reverse_pass_by_hand(gpu: int) -> None:
    # A GPU of k = gpu // 5011 docs: a cyclic re-read hits all 10 only when k >= 10; otherwise
    # it misses everything and leaves the last k docs, which a reverse pass then hits.
    k = min(gpu // DOC_TOKENS, 10)
    second, rev = run_scenario(gpu=gpu, passes=("fwd", "fwd", "rev"))["passes"][1:]
    assert second["gpu_hits"] == (10 if k == 10 else 0)
    assert rev["hit_docs"] == list(range(9, 9 - k, -1))
    assert rev["gpu_hits"] == k and rev["misses"] == 10 - k and rev["cpu_hits"] == 0


@pytest.mark.parametrize("cpu", [0, 20000, 30000, 40000, 50109, 50110, 56000])
def test_cpu_cliff_by_hand(cpu: int) -> None:
    # With GPU 21520 the second fwd pass is all CPU hits once the CPU holds all 10 docs
    # (cpu >= 50110), and all misses below that (the CPU tier thrashes like the GPU).
    second = run_scenario(gpu=FOUR_DOCS_GPU, cpu=cpu, passes=("fwd", "fwd"))["passes"][1]
    holds_all = cpu >= 10 * DOC_TOKENS
    assert second["misses"] == (0 if holds_all else 10)
    assert second["cpu_hits"] == (10 if holds_all else 0)


def test_cache_carries_over_between_passes() -> None:
    # A new cache per pass would make every pass all misses.
    result = run_scenario(gpu=50110, passes=("fwd", "fwd", "rev"))
    assert [p["gpu_hits"] for p in result["passes"]] == [0, 10, 10]
    assert run_scenario(gpu=FOUR_DOCS_GPU, passes=("fwd", "rev"))["passes"][1]["hit_docs"] == [9, 8, 7, 6]


def test_cpu_zero_is_the_one_tier_lru_result() -> None:
    # Compared with a plain LRUCache run over the same trace.
    for gpu in range(0, 60, 3):
        for passes in (("fwd", "fwd", "rev"), ("rev", "fwd", "rev", "rev")):
            result = run_scenario(gpu=gpu, cpu=0, docs=6, tokens=4, passes=passes)
            assert result == run_scenario(gpu=gpu, docs=6, tokens=4, passes=passes)
            lru = LRUCache(gpu)
            for order, summary in zip(passes, result["passes"]):
                keys = range(6) if order == "fwd" else range(5, -1, -1)
                hits = [key for key in keys if lru.access(key, 4)]
                assert summary == {"order": order, "gpu_hits": len(hits), "cpu_hits": 0,
                                   "misses": 6 - len(hits), "hit_docs": hits}


def test_small_example_by_hand() -> None:
    # 3 docs of 2 tokens, GPU 4 (2 docs), CPU 2 (1 doc); passes rev, fwd.
    # rev 2,1,0: all miss; GPU [1,0]; CPU [0].  fwd: 0 GPU hit -> GPU [1,0];
    # 1 GPU hit -> GPU [0,1]; 2: miss in both -> GPU [1,2], CPU [2].
    result = run_scenario(gpu=4, cpu=2, docs=3, tokens=2, passes="rev,fwd")
    assert result["passes"] == [
        miss_pass("rev", 3),
        {"order": "fwd", "gpu_hits": 2, "cpu_hits": 0, "misses": 1, "hit_docs": [0, 1]},
    ]


def test_scenario_trace() -> None:
    assert scenario_trace(3, ("fwd", "rev")) == [0, 1, 2, 2, 1, 0]
    assert scenario_trace(3, "rev,rev") == [2, 1, 0, 2, 1, 0]
    assert scenario_trace(1, ["fwd", "rev"]) == [0, 0]
    assert scenario_trace(10, ("fwd", "fwd", "rev")) == list(range(10)) * 2 + list(range(9, -1, -1))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"gpu": -1}, ValueError, "gpu must be a non-negative int, got -1."),
        ({"cpu": -2}, ValueError, "cpu must be a non-negative int, got -2."),
        ({"docs": 0}, ValueError, "docs must be a positive int, got 0."),
        ({"tokens": 0}, ValueError, "tokens must be a positive int, got 0."),
        ({"docs": 2.5}, TypeError, "docs must be a positive int, got 2.5."),
        ({"gpu": True}, TypeError, "gpu must be a non-negative int, got True."),
        ({"passes": ("fwd", "up")}, ValueError,
         "unknown pass name 'up'; allowed values: fwd, rev (comma-separated, e.g. fwd,fwd,rev)."),
        ({"passes": ()}, ValueError,
         "passes must list at least one pass; allowed values: fwd, rev (comma-separated, e.g. fwd,fwd,rev)."),
        ({"passes": ""}, ValueError,
         "passes must list at least one pass; allowed values: fwd, rev (comma-separated, e.g. fwd,fwd,rev)."),
    ],
)
def test_run_scenario_rejects_bad_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        run_scenario(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


# --------------------------------------------------------------------------------------
# CLI in process
# --------------------------------------------------------------------------------------


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpu", "21520", "--cpu", "56000", "--passes", "fwd,fwd,rev"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err == ""
    assert json.loads(out) == run_scenario(cpu=56000)
    assert out.startswith('{"passes": [{"order": "fwd", "gpu_hits": 0, "cpu_hits": 0, "misses": 10, "hit_docs": []}')


def test_cli_defaults_and_cpu_zero_match(capsys: pytest.CaptureFixture[str]) -> None:
    main([])
    default_out = capsys.readouterr().out
    main(["--cpu", "0", "--docs", "10", "--tokens", "5011", "--gpu", "21520"])
    assert capsys.readouterr().out == default_out
    assert json.loads(default_out) == run_scenario()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--passes", "fwd,up"], "argument --passes: unknown pass name 'up'; allowed values: fwd, rev"),
        (["--passes", ""], "argument --passes: passes must list at least one pass; allowed values: fwd, rev"),
        (["--passes", "fwd,,rev"], "argument --passes: passes must not contain an empty pass name; allowed values: fwd, rev"),
        (["--gpu", "-1"], "argument --gpu: must be a non-negative integer, got '-1'"),
        (["--cpu", "-5"], "argument --cpu: must be a non-negative integer, got '-5'"),
        (["--gpu", "lots"], "argument --gpu: must be a non-negative integer, got 'lots'"),
        (["--docs", "0"], "argument --docs: must be a positive integer, got '0'"),
        (["--docs", "2.5"], "argument --docs: must be a positive integer, got '2.5'"),
        (["--tokens", "0"], "argument --tokens: must be a positive integer, got '0'"),
        (["--tokens", "1e3"], "argument --tokens: must be a positive integer, got '1e3'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_cli_bad_arguments_exit_2(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert expected in err and "usage:" in err and "Traceback" not in err


def test_cli_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "--passes fwd,fwd" in out and "--cpu 56000" in out


def test_scenario_doctests_pass() -> None:
    result = doctest.testmod(scenario)
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------------------
# Running as a module, as a script, and as a standalone copy
# --------------------------------------------------------------------------------------

OFFLOAD_ARGS = ["--gpu", "21520", "--cpu", "56000", "--passes", "fwd,fwd,rev"]


def test_runs_as_module(run_python, repo_root: Path) -> None:
    proc = run_python(["-m", "kvlab.scenario", *OFFLOAD_ARGS], cwd=repo_root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == run_scenario(cpu=56000)


def test_runs_as_script_in_place(run_python, repo_root: Path, tmp_path: Path) -> None:
    # No PYTHONPATH: only the script's folder (kvlab/) is on sys.path.
    for cwd, script in ((repo_root, "kvlab/scenario.py"), (tmp_path, str(repo_root / "kvlab" / "scenario.py"))):
        proc = run_python([script, *OFFLOAD_ARGS], cwd=cwd, see_repo=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == run_scenario(cpu=56000)


def test_script_bad_argument_exit_2_without_traceback(run_python, repo_root: Path) -> None:
    proc = run_python(["kvlab/scenario.py", "--passes", "fwd,sideways"], cwd=repo_root, see_repo=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "argument --passes: unknown pass name 'sideways'; allowed values: fwd, rev" in proc.stderr
    assert "Traceback" not in proc.stderr


STANDALONE_FILES = ("kvsim.py", "scenario.py", "summarize.py")


@pytest.fixture
def standalone_dir(tmp_path: Path, repo_root: Path) -> Path:
    """An empty folder holding copies of the three standalone files only."""
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in STANDALONE_FILES:
        shutil.copy(repo_root / "kvlab" / name, folder / name)
    return folder


def test_standalone_copy_runs_scenario(run_python, standalone_dir: Path) -> None:
    proc = run_python(["scenario.py", *OFFLOAD_ARGS], cwd=standalone_dir, see_repo=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == run_scenario(cpu=56000)
    bad = run_python(["scenario.py", "--docs", "0"], cwd=standalone_dir, see_repo=False)
    assert bad.returncode == 2 and bad.stdout == "" and "argument --docs" in bad.stderr


def test_standalone_copy_uses_only_the_copies_and_the_standard_library(run_python, standalone_dir: Path) -> None:
    probe = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "import kvsim, scenario, summarize\n"
        "mods = {n.split('.')[0] for n in set(sys.modules) - before}\n"
        "foreign = sorted(m for m in mods if m not in sys.stdlib_module_names\n"
        "                 and m not in ('kvsim', 'scenario', 'summarize', '__main__'))\n"
        "print(json.dumps({'files': [kvsim.__file__, scenario.__file__, summarize.__file__],\n"
        "                  'cache_module': scenario.TwoTierCache.__module__,\n"
        "                  'foreign': foreign, 'kvlab': 'kvlab' in sys.modules}))\n"
    )
    (standalone_dir / "probe.py").write_text(probe)
    proc = run_python(["probe.py"], cwd=standalone_dir, see_repo=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [Path(f).resolve().parent for f in report["files"]] == [standalone_dir.resolve()] * 3
    assert report["cache_module"] == "kvsim"
    assert report["foreign"] == [] and report["kvlab"] is False
    assert sys.stdlib_module_names  # the probe relies on it (Python >= 3.10)
