"""A one-line progress bar on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "stage"]


class Progress:
    """A one-line progress bar on stderr, shown only when stderr is a terminal.

    Call it with (done, total); it redraws at most ten times a second and clears itself in
    :meth:`close`.
    """

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} ({done:,}/{total:,})")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * 79 + "\r")
            self.stream.flush()


def stage(command: str, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
    """Name a stage of a long command on stderr (``stackdist curve: replaying 3,000,000 accesses``),
    only when stderr is a terminal (so scripts and tests see a clean stderr)."""
    out = stream or sys.stderr
    if out is None or not (out.isatty() if enabled is None else enabled):
        return
    out.write(f"{command}: {label}\n")
    out.flush()
