"""Atomic output files and a small stderr progress bar."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays and paths."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps_json(data: Any) -> str:
    """Indented JSON with lists of scalars kept on one line, numpy values converted, and a
    trailing newline.

    >>> print(dumps_json({"a": [1, 2], "b": {"c": np.int64(3)}}), end="")
    {
      "a": [1, 2],
      "b": {
        "c": 3
      }
    }
    """
    return _format(json.loads(json.dumps(data, default=json_default)), 0) + "\n"


def _format(value: Any, level: int) -> str:
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {_format(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [f"{inner}{_format(v, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename, so a
    failure never leaves a partial file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: str | os.PathLike[str] | None, name: str) -> None:
    """Fail early (before a long computation) when ``path``'s folder cannot be written.

    Raises OSError naming the argument; ``None`` and ``-`` (stdout) pass.
    """
    if path is None or os.fspath(path) == "-":
        return
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"{name} {os.fspath(path)}: cannot create folder {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK):
        raise OSError(f"{name} {os.fspath(path)}: folder {folder} is not writable")


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (``-`` means stdout)."""
    text = dumps_json(data)
    if os.fspath(path) == "-":
        sys.stdout.write(text)
    else:
        write_atomic(path, text)


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
