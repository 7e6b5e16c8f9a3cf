"""Compile the numba kernels once, before the test workers start (``conftest.pytest_configure``).

From a fresh checkout numba compiles every kernel on its first call and writes it to its
on-disk cache (``cache=True``). Under pytest-xdist each worker would compile the kernels it
needs on its own, so a kernel both workers call was compiled twice. Here two processes (the
groups below, one per core) run the commands that reach the kernels on tiny inputs, so the
workers load them from the cache instead. Nothing is skipped: the compile time is still in the
test run, once. A signature the groups do not reach is compiled by the worker that needs it.

Run by hand: ``python tests/warm_kernels.py engine`` (or ``serving``).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def _stackdist(*argv: str) -> None:
    from stackdist.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    if code:
        print(f"warm_kernels: stackdist {argv[0]} exited {code}", file=sys.stderr)


def engine_group(out: str) -> None:
    """The engine's replays, the readers' compiled scans, tiers, sampling."""
    mooncake = str(DATA / "mooncake_small.jsonl")
    keys = os.path.join(out, "keys.csv")
    with open(keys, "w") as f:
        f.write("".join(f"{i % 7},{1 + i % 7 % 3}\n" for i in range(50)))
    unit = os.path.join(out, "unit.csv")
    with open(unit, "w") as f:
        f.write("".join(f"{i % 5}\n" for i in range(50)))
    _stackdist("curve", unit, "-o", os.path.join(out, "a.json"))
    _stackdist("curve", keys, "-o", os.path.join(out, "b.json"))
    _stackdist("tiers", keys, "--gpu", "4", "-o", os.path.join(out, "c.json"))
    _stackdist("tiers", keys, "--gpu", "4", "--exclusive", "-o", os.path.join(out, "d.json"))
    _stackdist("curve", unit, "--sample-rate", "0.5", "-o", os.path.join(out, "e.json"))
    _stackdist("curve", mooncake, "--format", "mooncake", "-o", os.path.join(out, "f.json"))
    _stackdist("plan", mooncake, "--json", os.path.join(out, "g.json"))


def serving_group(out: str) -> None:
    """The engine models, routing, decode reuse, Belady, the placement simulator."""
    mooncake = str(DATA / "mooncake_small.jsonl")
    _stackdist("plan", mooncake, "--semantics", "vllm,sglang", "--json", os.path.join(out, "h.json"))
    _stackdist("plan", mooncake, "--semantics", "vllm,sglang", "--workers", "2", "--router", "kv-aware",
               "--json", os.path.join(out, "i.json"))
    _stackdist("plan", mooncake, "--semantics", "vllm", "--decode-reuse", "--json", os.path.join(out, "k.json"))
    _stackdist("plan", mooncake, "--optimal", "--json", os.path.join(out, "j.json"))
    from kvlab.placement.__main__ import main as placement

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(SystemExit):
            placement(["simulate"])


GROUPS = {"engine": engine_group, "serving": serving_group}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        GROUPS[sys.argv[1]](folder)
