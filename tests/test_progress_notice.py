"""Progress where a person waits (issue 26): the first-run compile notice (only when numba is about
to compile), a line per engine model pool size, all on stderr, off a terminal only with
``--progress``."""

from __future__ import annotations

import importlib
import io

import pytest
from naive import run_stackdist

from stackdist.engine.compile_notice import on_first_compile
from stackdist.output import (
    Progress,
    progress_enabled,
    set_progress,
    set_step_sink,
    stage,
    step,
)

numba = pytest.importorskip("numba")
main_module = importlib.import_module("stackdist.cli.main")  # the module (stackdist.cli re-exports its main function)
run = run_stackdist
SMALL = "tests/data/mooncake_small.jsonl"
NOTICE = "compiling kernels (first run only, ~10 s)"


def fresh_kernel():
    """A function numba has never seen (no cache): calling it compiles."""
    return numba.njit(lambda x: x * 3 + 1)


def test_the_callback_fires_once_before_the_first_compile_only():
    calls = []
    stop = on_first_compile(lambda: calls.append("notice"))
    try:
        f, g = fresh_kernel(), fresh_kernel()
        assert calls == []
        assert f(2) == 7 and calls == ["notice"]
        assert g(2) == 7 and f(3.0) == 10.0 and calls == ["notice"]  # more compiles: still one notice
    finally:
        stop()
    h = fresh_kernel()
    assert h(1) == 4 and calls == ["notice"]  # stopped: not heard


def test_no_callback_when_nothing_compiles():
    f = fresh_kernel()
    f(1)  # compiled now, before listening
    calls = []
    stop = on_first_compile(lambda: calls.append("notice"))
    try:
        assert f(5) == 16
    finally:
        stop()
    assert calls == []


def fake_runner(compiles: bool):
    def run(_args):
        if compiles:
            fresh_kernel()(1)
        return 0

    return lambda _command: run


@pytest.mark.parametrize("flag, compiles, shown", [(["--progress"], True, True), ([], True, False),
                                                   (["--progress"], False, False), (["--no-progress"], True, False)])
def test_the_command_says_it_compiles_only_when_it_does_and_progress_is_on(capsys, monkeypatch, flag, compiles, shown):
    monkeypatch.setattr(main_module, "_runner", fake_runner(compiles))
    code, out, err = run(capsys, "curve", "t.csv", *flag)
    assert code == 0 and out == ""
    assert err == (f"stackdist curve: {NOTICE}\n" if shown else "")


def test_progress_lines_per_engine_pool_size_with_progress(capsys):
    pools = ["100", "200", "inf"]
    code, _out, err = run(capsys, "plan", SMALL, "--semantics", "vllm,sglang", "--schedule", "model", "--gpu-blocks",
                          ",".join(pools), "--progress")
    assert code == 0, err
    for model in ("vllm", "sglang"):
        assert f"stackdist plan: {model} model, 3 pool sizes, 1 worker(s)" in err
        done = [line for line in err.splitlines() if line.startswith(f"stackdist plan: {model} model: pool size ")]
        assert sorted(line.split("pool size ")[1].split(" done")[0] for line in done[:3]) == sorted(pools)
        assert [line.rsplit("(", 1)[1] for line in done[:3]] == ["1/3)", "2/3)", "3/3)"]


def test_progress_lines_per_pool_size_under_the_scheduler(capsys):
    code, _out, err = run(capsys, "plan", SMALL, "--semantics", "vllm", "--schedule", "scheduler", "--gpu-blocks",
                          "100,inf", "--progress")
    assert code == 0, err
    lines = err.splitlines()
    start = lines.index("stackdist plan: vllm model under its scheduler, 2 pool sizes")
    assert lines[start + 1:start + 3] == ["stackdist plan: scheduler: pool size 100 done (1/2)",
                                          "stackdist plan: scheduler: pool size inf done (2/2)"]


def test_no_progress_off_a_terminal_unless_asked(capsys):
    code, _out, err = run(capsys, "plan", SMALL, "--semantics", "vllm", "--schedule", "model", "--gpu-blocks", "100,inf",
                          "--model", "qwen2.5-1.5b")
    assert code == 0 and err == ""


def test_progress_switch_and_stream():
    tty = io.StringIO()
    tty.isatty = lambda: True  # type: ignore[method-assign]
    assert progress_enabled(io.StringIO()) is False and progress_enabled(tty) is True
    try:
        set_progress(True)
        assert progress_enabled(io.StringIO()) is True and Progress("x", io.StringIO()).enabled
        set_progress(False)
        assert progress_enabled(tty) is False
        buf = io.StringIO()
        stage("stackdist plan", "hidden", buf)
        assert buf.getvalue() == ""
    finally:
        set_progress(None)
    seen: list[str] = []
    set_step_sink(seen.append)
    try:
        step("pool size 5 done (1/1)")
    finally:
        set_step_sink(None)
    step("unheard")
    assert seen == ["pool size 5 done (1/1)"]
