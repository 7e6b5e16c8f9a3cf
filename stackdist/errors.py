"""The two user-facing error kinds and the exit-code convention of every command.

Exit status: :data:`EXIT_OK` (0) success; :data:`EXIT_DATA` (1) the data cannot answer the
question (a malformed trace names its file and line; an empty trace; an infeasible pool);
:data:`EXIT_USAGE` (2) a bad argument (names the flag and the allowed values);
:data:`EXIT_INTERRUPTED` (130) Ctrl-C.

>>> str(TraceFormatError("t.jsonl", 3, "hash_ids must be a list"))
't.jsonl:3: hash_ids must be a list'
>>> str(TraceFormatError("t.npy", None, "no such file"))
't.npy: no such file'
"""

from __future__ import annotations

import os

__all__ = ["EXIT_OK", "EXIT_DATA", "EXIT_USAGE", "EXIT_INTERRUPTED", "TraceFormatError", "UsageError"]

EXIT_OK = 0
EXIT_DATA = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


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
