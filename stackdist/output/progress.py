"""Progress on stderr: a one-line bar (:class:`Progress`) and stage lines (:func:`stage`).

Shown on a terminal only, unless the user asks (``--progress``: :func:`set_progress`): scripts,
pipes and tests see a clean stderr (errors only). ``--no-progress`` turns it off on a terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "progress_enabled", "set_progress", "set_step_sink", "stage", "step"]

_SINK: list[Callable[[str], None] | None] = [None]


def set_step_sink(sink: Callable[[str], None] | None) -> None:
    """Where :func:`step` lines go (a command installs one for its run; None: nowhere). O(1)."""
    _SINK[0] = sink


def step(label: str) -> None:
    """One step of a long library call (an engine model's pool size done), handed to the sink the
    running command installed (:func:`set_step_sink`), which shows it like a stage; nothing
    without one. The library says what is done, the command decides whether it is shown. O(1).

    >>> seen = []; set_step_sink(seen.append); step("pool 3/8 done"); set_step_sink(None); step("x"); seen
    ['pool 3/8 done']
    """
    sink = _SINK[0]
    if sink is not None:
        sink(label)

_FORCED: list[bool | None] = [None]  # None: on a terminal only


def set_progress(enabled: bool | None) -> None:
    """Show progress always (True), never (False) or on a terminal only (None, the default). O(1).

    >>> set_progress(True); progress_enabled(None); set_progress(None)
    True
    """
    _FORCED[0] = enabled


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether progress is shown on ``stream`` (default stderr): as :func:`set_progress` says, or
    when it is a terminal. O(1)."""
    if _FORCED[0] is not None:
        return _FORCED[0]
    out = stream or sys.stderr
    try:
        return out is not None and out.isatty()
    except (ValueError, AttributeError):  # a closed or odd stream
        return False


class Progress:
    """A one-line progress bar on stderr, shown only when :func:`progress_enabled`.

    Call it with (done, total); on a terminal it redraws at most ten times a second and clears
    itself in :meth:`close`; elsewhere (``--progress`` into a file or a pipe) it writes one line
    when the work is done, no carriage returns.
    """

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = progress_enabled(self.stream) if enabled is None else enabled
        try:
            self._tty = self.stream.isatty()
        except (ValueError, AttributeError):
            self._tty = False
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        if not self._tty:
            if done >= total and not self._shown:
                self.stream.write(f"{self.label}: {done:,}/{total:,} done\n")
                self.stream.flush()
                self._shown = True
            return
        self._last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} ({done:,}/{total:,})")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown and self._tty:
            self.stream.write("\r" + " " * 79 + "\r")
            self.stream.flush()


def stage(command: str, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
    """Name a stage of a long command on stderr (``stackdist curve: replaying 3,000,000 accesses``),
    only when :func:`progress_enabled` (so scripts and tests see a clean stderr)."""
    out = stream or sys.stderr
    if out is None or not (progress_enabled(out) if enabled is None else enabled):
        return
    out.write(f"{command}: {label}\n")
    out.flush()
