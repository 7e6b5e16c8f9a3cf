"""Shared pytest fixtures (kvlab CLI tests: running Python in a subprocess)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
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


_WARM_ENV = "STACKDIST_WARM_FOLDER"
_WARM_PROCESSES = 2
_warm_key = pytest.StashKey[tuple[list, Path, str]]()


def _warm_stamp() -> tuple[Path, str]:
    """Where the last complete warm-up is recorded, and the key it must match: the interpreter,
    numba's version, the checkout and each source file's path, mtime and size (what numba's
    cache index checks), so that an edited, touched or other checkout is warmed up again."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    digest = hashlib.sha256(f"{sys.executable}|{sys.version}|{importlib.metadata.version('numba')}|{cache}".encode())
    sources = [p for folder in ("stackdist", "kvlab") for p in sorted((REPO_ROOT / folder).rglob("*.py"))]
    for path in [*sources, Path(__file__).with_name("warm_kernels.py")]:
        st = path.stat()
        digest.update(f"|{path}|{st.st_mtime_ns}|{st.st_size}".encode())
    where = Path(cache) if cache else REPO_ROOT / "stackdist" / "__pycache__"
    return where / "warm_kernels.stamp", digest.hexdigest()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, compile the numba kernels once, in two processes sharing the tasks of
    ``tests/warm_kernels.py``, while the workers start and collect: each worker then loads the
    kernels from numba's cache instead of compiling them again. The controller only (a worker has
    ``workerinput``); the workers wait for the warm-up before their first test
    (:func:`pytest_runtestloop`), and find its folder in the environment they inherit. Skipped
    when a complete warm-up of these very sources is recorded (:func:`_warm_stamp`)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    stamp, key = _warm_stamp()
    with contextlib.suppress(OSError):
        if stamp.read_text() == key:
            return
    folder = tempfile.mkdtemp(prefix="stackdist-warm-")
    script = str(Path(__file__).with_name("warm_kernels.py"))
    processes = [
        subprocess.Popen([sys.executable, script, "--share", folder], cwd=REPO_ROOT) for _ in range(_WARM_PROCESSES)
    ]
    config.stash[_warm_key] = (processes, stamp, key)
    os.environ[_WARM_ENV] = folder


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """In a worker: wait until the warm-up processes have finished (at most 10 minutes)."""
    folder = os.environ.get(_WARM_ENV)
    if not folder or not hasattr(session.config, "workerinput"):
        return
    deadline = time.monotonic() + 600
    while len([f for f in os.listdir(folder) if f.startswith("exit-")]) < _WARM_PROCESSES and time.monotonic() < deadline:
        time.sleep(0.05)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Reap the warm-up processes, record a complete warm-up, remove its folder (the controller)."""
    if hasattr(config, "workerinput") or _warm_key not in config.stash:
        return
    processes, stamp, key = config.stash[_warm_key]
    if all(process.wait() == 0 for process in processes):
        with contextlib.suppress(OSError):
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(key)
    folder = os.environ.pop(_WARM_ENV, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


_frozen_module = pytest.StashKey[str]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection built (numba, numpy, the imported packages, the test modules) to the
    collector's permanent generation: the automatic collections during the tests then no longer
    walk that graph each time (about 2.5 s of CPU per worker otherwise)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """At each new test file, collect what the last one left and freeze what survives (the file's
    imports and module fixtures), as :func:`pytest_collection_finish` does; also undoes a test's
    ``gc.unfreeze()``. Cyclic garbage is collected before each freeze, so none is kept."""
    module = str(item.path)
    if item.session.stash.get(_frozen_module, None) != module:
        item.session.stash[_frozen_module] = module
        gc.collect()
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep ``--dist loadgroup``'s groups (a worker, under pytest-xdist).

    xdist sends the tests marked ``xdist_group(NAME)`` to one worker by suffixing their node ids
    with ``@NAME`` in each worker's collection. It sets ``Node._nodeid``; pytest 9.2 reads a node
    id from ``Node._id`` instead, so the suffix was lost and every group was spread over both
    workers (the memoised reference replays of ``real_lru``, the one dask cluster, the matplotlib
    import ran on each). Set the same suffix where this pytest reads it, when it is missing."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own suffix works
        return
    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        if names and "@" not in item.nodeid and isinstance(getattr(item, "_id", None), NodeId):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(names))}")
