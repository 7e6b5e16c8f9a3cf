"""Shared pytest fixtures (kvlab CLI tests: running Python in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

RunPython = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (the folder holding kvlab/, stackdist/ and data/)."""
    return REPO_ROOT


@pytest.fixture
def run_python() -> RunPython:
    """Return ``run(args, cwd=..., see_repo=True)``: run ``sys.executable *args``, capture text.

    With ``see_repo=True`` the repository is on PYTHONPATH. With ``see_repo=False`` the child
    gets only PATH in its environment and runs with ``-E -s`` (no PYTHON* variables, no user
    site-packages), so only ``cwd``/the script's folder and the interpreter's own library are
    importable. ``-I`` is not used because it also drops the script's folder from sys.path.
    """

    def run(args: Sequence[str], *, cwd: Path, see_repo: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        if see_repo:
            env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
            command = [sys.executable, *args]
        else:
            env = {"PATH": os.environ.get("PATH", "")}
            command = [sys.executable, "-E", "-s", *args]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)

    return run


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, compile the numba kernels once, in two processes, before the workers
    start (``tests/warm_kernels.py``): each worker then loads them from numba's cache instead of
    compiling them again. The controller only (a worker has ``workerinput``)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    script = str(Path(__file__).with_name("warm_kernels.py"))
    groups = [subprocess.Popen([sys.executable, script, group], cwd=REPO_ROOT) for group in ("engine", "serving")]
    for process in groups:
        process.wait()
