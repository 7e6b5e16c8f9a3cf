"""The two user-facing error kinds and the exit-code convention of every command.

Exit status: :data:`EXIT_OK` (0) success; :data:`EXIT_DATA` (1) the data cannot answer the
question (a malformed trace names its file and line; an empty trace; an infeasible pool);
:data:`EXIT_USAGE` (2) a bad argument (names the flag and the allowed values);
:data:`EXIT_INTERRUPTED` (130) Ctrl-C (one line, files left whole); :data:`EXIT_BROKEN_PIPE`
(141, as a process killed by SIGPIPE) when the reader of stdout went away. Output files are
always written before stdout, so a closed stdout never loses them.

Empty or unanswerable input (an empty file, a window or warm-up that leaves nothing counted,
every line skipped) is one :class:`EmptyInputError` (exit 1), raised by :func:`require_data`.

>>> str(TraceFormatError("t.jsonl", 3, "hash_ids must be a list"))
't.jsonl:3: hash_ids must be a list'
>>> str(TraceFormatError("t.npy", None, "no such file"))
't.npy: no such file'
"""

from __future__ import annotations

import os

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_DATA",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "INT64_MAX",
    "EmptyInputError",
    "TraceFormatError",
    "UsageError",
    "require_data",
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


def require_data(count: int, source: str | os.PathLike[str], why: str) -> None:
    """Raise :class:`EmptyInputError` (``why`` says what is empty) unless ``count`` > 0.

    >>> require_data(3, "t.csv", "no accesses")
    """
    if count <= 0:
        raise EmptyInputError(source, why)
