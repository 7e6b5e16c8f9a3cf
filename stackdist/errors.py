"""The two user-facing error kinds and the exit-code convention of every command.

Exit status: :data:`EXIT_OK` (0) success; :data:`EXIT_DATA` (1) the data cannot answer the
question (a malformed trace names its file and line; an empty trace; an infeasible pool);
:data:`EXIT_USAGE` (2) a bad argument (names the flag and the allowed values);
:data:`EXIT_INTERRUPTED` (130) Ctrl-C (one line, files left whole); :data:`EXIT_BROKEN_PIPE`
(141, as a process killed by SIGPIPE) when the reader of stdout went away. Output files are
always written before stdout, so a closed stdout never loses them.

Ctrl-C: :func:`install_interrupt_handler` (every entry point, before the heavy imports) makes it
one line and :data:`EXIT_INTERRUPTED` at any moment, never a traceback.

Empty or unanswerable input (an empty file, a window or warm-up that leaves nothing counted,
every line skipped) is one :class:`EmptyInputError` (exit 1), raised by :func:`require_data`.

>>> str(TraceFormatError("t.jsonl", 3, "hash_ids must be a list"))
't.jsonl:3: hash_ids must be a list'
>>> str(TraceFormatError("t.npy", None, "no such file"))
't.npy: no such file'
"""

from __future__ import annotations

# signal and atexit are imported here, never inside the Ctrl-C handler: an import in a handler
# that interrupted an import re-enters the import lock and breaks it (a KeyError out of
# importlib's _ModuleLock.acquire instead of exit 130).
import atexit
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # the entry points import this module first: no typing or contextlib at run time
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_DATA",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "INT64_MAX",
    "DeploymentError",
    "EmptyInputError",
    "TraceFormatError",
    "UsageError",
    "freeze_for_exit",
    "install_interrupt_handler",
    "require_data",
    "started_as",
    "writing_files",
]

EXIT_OK = 0
EXIT_DATA = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
INT64_MAX = 2**63 - 1
"""The largest integer argument any command accepts (counts, capacities, sizes are int64)."""


class TraceFormatError(ValueError):
    """A trace file is missing or malformed; names the file and (when known) the 1-based line."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, message: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.message = message
        super().__init__(self.path, line, message)

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"


class UsageError(ValueError):
    """A bad argument (unknown format, impossible block size, missing config field, ...).

    Every command maps it to :data:`EXIT_USAGE`; kvlab's commands use this same class.
    """


class EmptyInputError(ValueError):
    """The input holds nothing to answer from (exit 1): an empty trace, an empty window, a
    warm-up covering every request, every line skipped.

    >>> str(EmptyInputError("t.csv", "no accesses in --window 5:5"))
    't.csv: nothing to answer from: no accesses in --window 5:5'
    """

    def __init__(self, source: str | os.PathLike[str], why: str) -> None:
        self.source = os.fspath(source)
        self.why = why
        super().__init__(f"{self.source}: nothing to answer from: {why}")


class DeploymentError(ValueError):
    """The deployment asked for cannot run (exit 1): the weights leave no room for the KV cache,
    or its KV pool cannot hold the trace's longest prompt. The message names the reason and what
    would run.
    """


def require_data(count: int, source: str | os.PathLike[str], why: str) -> None:
    """Raise :class:`EmptyInputError` (``why`` says what is empty) unless ``count`` > 0.

    >>> require_data(3, "t.csv", "no accesses")
    """
    if count <= 0:
        raise EmptyInputError(source, why)


# ------------------------------------------------------------------ Ctrl-C
_STATE: dict[str, Any] = {"prog": "stackdist", "guarded": False, "writing": 0}
_RETRY_S = 0.02


_UNSAFE = ("importlib._bootstrap", "llvmlite")


def _in_unsafe_frame(frame: Any) -> bool:
    """True inside an import (a C extension's import turns any exception into an ImportError)
    or llvmlite (numba's compiler, whose ctypes callbacks swallow any exception)."""
    depth = 0
    while frame is not None and depth < 400:
        if any(part in frame.f_code.co_filename for part in _UNSAFE):
            return True
        frame, depth = frame.f_back, depth + 1
    return False


def _on_sigint(signum: int, frame: Any) -> None:
    """Ctrl-C: a :class:`KeyboardInterrupt` once the command's guard is in place (the guard
    prints one line, the writers remove their temporary files); before it, one line and exit
    130. Inside an import or numba's compiler, where an exception would be turned into another
    or swallowed, the signal is taken again a moment later (an interval timer), once out."""
    if _in_unsafe_frame(frame) and hasattr(signal, "setitimer"):
        if not _STATE.get("pending"):
            atexit.register(_cancel_retry)  # the timer must not outlive the handler (SIGALRM would kill the process)
        _STATE["pending"] = True
        signal.signal(signal.SIGALRM, _on_sigint)
        signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
        return
    _cancel_retry()
    if _STATE["writing"] or _STATE["guarded"]:
        raise KeyboardInterrupt
    print(f"{_STATE['prog']}: interrupted", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_INTERRUPTED)


def _cancel_retry() -> None:
    """Stop a pending retry of a deferred Ctrl-C (see :func:`_on_sigint`). O(1)."""
    if _STATE.get("pending"):
        _STATE["pending"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def install_interrupt_handler(prog: str, guarded: bool = True) -> Callable[[], None]:
    """Handle Ctrl-C for the command ``prog`` (see :func:`_on_sigint`); return a function that
    puts the previous handler back. Every entry point installs it before its heavy imports
    (numpy, numba: the first second of every command), so Ctrl-C is one line and exit 130,
    never a traceback. Off the main thread (no signals there) it does nothing. O(1).

    >>> restore = install_interrupt_handler("demo"); restore()
    """
    previous_state = dict(_STATE)
    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError, AttributeError):  # not the main thread, or no signals here
        return lambda: None
    _STATE.update(prog=prog, guarded=guarded)

    def restore() -> None:
        _cancel_retry()
        _STATE.update(prog=previous_state["prog"], guarded=previous_state["guarded"])
        try:
            signal.signal(signal.SIGINT, previous)
        except (ValueError, OSError, TypeError):
            pass

    return restore


def started_as(*names: str) -> bool:
    """True when this process was started as one of the commands ``names`` (its ``argv[0]``). O(1)."""
    return bool(sys.argv) and os.path.basename(sys.argv[0] or "") in names


def freeze_for_exit() -> None:
    """Move every live object to the collector's permanent generation, just before a command
    line process returns its exit status: the interpreter's exit then skips their collection.
    Freeing numba's and the importer's object graph one by one took a quarter of a small run's
    CPU (0.28 s of a 1.14 s ``stackdist plan``). Only for a process's own command line, never a
    ``main([...])`` called in-process. O(objects).

    >>> import gc; before = gc.get_freeze_count(); freeze_for_exit(); gc.get_freeze_count() >= before
    True
    """
    import gc

    gc.freeze()


class writing_files:
    """While output files are being written (``with writing_files():``), Ctrl-C raises (so the
    writer removes its temporary file) instead of exiting at once. O(1)."""

    def __enter__(self) -> None:
        _STATE["writing"] += 1

    def __exit__(self, *exc: object) -> None:
        _STATE["writing"] -= 1


if started_as("stackdist"):  # the console script imports this module first (stackdist/__init__.py): from here on,
    install_interrupt_handler("stackdist", guarded=False)  # Ctrl-C during the imports is one line and exit 130
