"""The one atomic file writer: outputs appear whole or not at all, and ``-`` is stdout."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .jsonfmt import dumps_json

__all__ = ["write_atomic", "write_json", "check_writable"]


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
