"""The two user-facing error kinds: bad data (exit 1) and bad arguments (exit 2).

>>> str(TraceFormatError("t.jsonl", 3, "hash_ids must be a list"))
't.jsonl:3: hash_ids must be a list'
>>> str(TraceFormatError("t.npy", None, "no such file"))
't.npy: no such file'
"""

from __future__ import annotations

import os


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

    The CLI maps it to exit status 2.
    """
