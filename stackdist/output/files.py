"""The one output-path guard and atomic writer: outputs appear whole or not at all, never
over an input, and behave like the files users know.

Rules (every writer of the project goes through :func:`write_atomic`; every command checks its
outputs with :func:`check_outputs` before any work):

- ``-`` is stdout; ``/dev/stdout``, other character devices and FIFOs are written directly
  (never replaced by a regular file).
- An output that is the same file as an input (also through a symlink or a hard link) is
  refused (a :class:`~stackdist.errors.UsageError`, exit 2); so are two outputs naming one file,
  a folder, and an empty path.
- A symlinked output is written through to its target (the link stays).
- A regular file is written to a temporary file beside the target, flushed and renamed over
  it, so a failure (a full disk, Ctrl-C) leaves the old file whole. The new file keeps the
  existing file's permission bits, or gets ``0666 & ~umask`` as ``open()`` would.
- Errors are :class:`OSError` naming the output path (never the temporary name, never ``None``).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stackdist.errors import UsageError, writing_files

from .jsonfmt import dumps_json

__all__ = ["check_outputs", "check_writable", "is_stream", "same_file", "write_atomic", "write_json", "write_stdout"]


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when ``a`` and ``b`` are one existing file (symlinks followed, hard links seen).

    >>> same_file(__file__, __file__), same_file(__file__, "/nonexistent")
    (True, False)
    """
    sa, sb = _stat(os.fspath(a)), _stat(os.fspath(b))
    return sa is not None and sb is not None and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def is_stream(path: str | os.PathLike[str]) -> bool:
    """True for ``-`` and for paths that are character devices or FIFOs (written directly).

    >>> is_stream("-"), is_stream("/dev/null"), is_stream(__file__)
    (True, True, False)
    """
    text = os.fspath(path)
    if text == "-" or _std_fd(text) is not None:
        return True
    st = _stat(text)
    return st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode))


_STD_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/fd/1": 1, "/dev/fd/2": 2, "/proc/self/fd/1": 1,
              "/proc/self/fd/2": 2}


def _std_fd(path: str) -> int | None:
    """1 or 2 when ``path`` names this process's stdout or stderr (written to the open stream,
    never reopened, so a redirected ``> file`` is neither truncated nor replaced)."""
    return _STD_NAMES.get(os.path.normpath(path)) if path.startswith(("/dev/", "/proc/")) else None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fail(exc: OSError, path: str) -> OSError:
    """The same error, naming the user's path (not a temporary file, not None)."""
    code = exc.errno or errno.EIO
    return OSError(code, exc.strerror or os.strerror(code), path)


def write_stdout(data: str | bytes) -> None:
    """Write to stdout and flush (so a closed stdout or a broken pipe is seen here, as an
    :class:`OSError`, not at exit)."""
    stream = sys.stdout
    if stream is None:
        raise OSError(errno.EBADF, "stdout is closed", "<stdout>")
    if isinstance(data, bytes):
        stream.flush()
        stream.buffer.write(data)
        stream.buffer.flush()
    else:
        stream.write(data)
        stream.flush()


def _write_stream(path: str, data: str | bytes) -> None:
    fd = 1 if path == "-" else _std_fd(path)
    if fd == 1:
        write_stdout(data)
        return
    if fd == 2:
        sys.stderr.write(data if isinstance(data, str) else data.decode("utf-8", "replace"))
        sys.stderr.flush()
        return
    try:
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
    except OSError as exc:
        raise _fail(exc, path) from None


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` to ``path`` under the rules of the module docstring (``-`` is stdout)."""
    with writing_files():  # Ctrl-C now raises, so the temporary file is removed
        _write_atomic(os.fspath(path), data)


def _write_atomic(shown: str, data: str | bytes) -> None:
    if is_stream(shown):
        _write_stream(shown, data)
        return
    if not shown:
        raise UsageError("an output path is empty")
    target = Path(os.path.realpath(shown))  # write through a symlink to its target
    if target.is_dir():
        raise OSError(errno.EISDIR, "is a folder, not a file", shown)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = _stat(os.fspath(target))
        mode = stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _fail(exc, shown) from None
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _fail(exc, shown) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_files_atomic(folder: str | os.PathLike[str], files: Mapping[str, str | bytes]) -> list[Path]:
    """Write several files into ``folder`` (created if needed) as one unit; return their paths.

    Every file is first written whole into a hidden staging folder inside ``folder``; only when
    all are there are they renamed into place, so a failure (a full disk, Ctrl-C) leaves the
    folder with its old files, never a mix of new and old. Existing files keep their modes.
    """
    with writing_files():
        return _write_files(folder, files)


def _write_files(folder: str | os.PathLike[str], files: Mapping[str, str | bytes]) -> list[Path]:
    import shutil

    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "it exists and is not a directory", os.fspath(folder))
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging.", suffix=".tmp", dir=out))
    except OSError as exc:
        raise _fail(exc, os.fspath(folder)) from None
    try:
        for name, content in files.items():
            write_atomic(staging / name, content)
            if (out / name).exists():
                shutil.copymode(out / name, staging / name)
        written = []
        for name in files:
            os.replace(staging / name, out / name)
            written.append(out / name)
        return written
    except OSError as exc:
        raise _fail(exc, os.fspath(out / name)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_writable(path: str | os.PathLike[str] | None, name: str) -> None:
    """Fail early (before a long computation) when ``path`` cannot be written.

    Raises :class:`OSError` naming the flag and the path (exit 1) for an unwritable folder or a
    folder that cannot be created, :class:`UsageError` for an empty path or a path that is a
    folder; ``None``, ``-`` and character devices pass.
    """
    if path is None:
        return
    text = os.fspath(path)
    if text == "" or "\0" in text:
        raise UsageError(f"{name} needs a file name; got {text!r}.")
    if is_stream(text):
        return
    real = Path(os.path.realpath(text))
    if real.is_dir() or text.endswith(os.sep):
        raise UsageError(f"{name} {text} is a folder; give a file name.")
    folder = real.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"{name} {text}: cannot create folder {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK):
        raise OSError(errno.EACCES, f"{name} {text}: folder {folder} is not writable")


def check_outputs(outputs: Sequence[tuple[str, Any]], inputs: Iterable[Any] = ()) -> None:
    """Check every ``(flag, path)`` output before any work: writable (:func:`check_writable`),
    not the same file as any input (symlinks and hard links included), and no two outputs
    naming one file. ``None`` outputs are skipped."""
    given = [(flag, os.fspath(p)) for flag, p in outputs if p is not None]
    sources = [os.fspath(p) for p in inputs if p is not None and os.fspath(p) not in ("", "-")]
    for flag, out in given:
        check_writable(out, flag)
        if is_stream(out):
            continue
        for source in sources:
            if same_file(out, source) or os.path.realpath(out) == os.path.realpath(source):
                raise UsageError(f"{flag} {out} is the input {source}; refusing to overwrite the input "
                                 "(choose another output file).")
    files = [(flag, out) for flag, out in given if not is_stream(out)]
    for i, (flag, out) in enumerate(files):
        for other_flag, other in files[:i]:
            if os.path.realpath(out) == os.path.realpath(other) or same_file(out, other):
                raise UsageError(f"{flag} and {other_flag} name the same file {out}; give each its own file.")


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (``-`` means stdout)."""
    write_atomic(path, dumps_json(data))
