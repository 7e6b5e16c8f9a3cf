"""The line-level parsing every trace reader shares: bytes, JSON lines, checked fields.

Package-internal (shared by the readers of :mod:`stackdist.traces`). A malformed line raises
:class:`LineError` with the reason; the reader adds the file name and line number and raises
:class:`~stackdist.errors.TraceFormatError` (``FILE:LINE: reason``).

>>> count_field({"input_length": 7}, "input_length")
7
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import numpy as np

from stackdist.errors import TraceFormatError

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
BLOCK_BYTES = 1 << 25
"""The block size of the compiled scans (32 MiB of whole lines)."""

__all__ = [
    "BLOCK_BYTES",
    "INT64_MAX",
    "UINT64_MAX",
    "LineError",
    "count_field",
    "data_lines",
    "field",
    "fit_int_keys",
    "helper_thread",
    "int_array",
    "is_int",
    "is_regular_file",
    "json_line",
    "json_object",
    "read_bytes",
    "scan_in_halves",
    "shown",
    "shown_text",
    "time_field",
    "whole_line_blocks",
]


class LineError(Exception):
    """A malformed line's message; the reader adds the file name and line number."""


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Return the file's bytes (UTF-8 BOM removed); a missing file is a TraceFormatError."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise TraceFormatError(path, None, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, None, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot read the file: {exc.strerror}") from None
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data


def is_regular_file(path: str | os.PathLike[str]) -> bool:
    """True for a regular file: one that can be read twice (a compiled scan that gives up hands
    the file to the exact reader, which must see it whole; a FIFO, ``/dev/stdin`` or a
    ``<(...)`` substitution cannot be read again). O(1).

    >>> is_regular_file(__file__), is_regular_file("/dev/null"), is_regular_file("/no/such/file")
    (True, False, False)
    """
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def whole_line_blocks(stream: IO[bytes], block_bytes: int | None = None) -> Iterator[bytes]:
    """The stream in blocks of whole lines of about ``block_bytes`` (default :data:`BLOCK_BYTES`;
    the last may lack its newline), the UTF-8 BOM cut from the first; empty blocks are not yielded. O(bytes).

    >>> import io
    >>> list(whole_line_blocks(io.BytesIO(b"\\xef\\xbb\\xbfa\\nbb\\nc"), 3))
    [b'a\\n', b'bb\\n', b'c']
    """
    size = block_bytes or BLOCK_BYTES
    rest, first = b"", True
    while True:
        data = stream.read(size)
        cut = data.rfind(b"\n") + 1 if data else len(data)
        if cut == 0 and data:  # no line ends in this read: keep it all for the next
            rest += data
            continue
        block = b"".join((rest, memoryview(data)[:cut])) if rest else (data if cut == len(data) else data[:cut])
        rest = data[cut:]
        if first and block:
            block, first = (block[3:] if block.startswith(b"\xef\xbb\xbf") else block), False
        if block:
            yield block
        if not data:
            return


_HELPER: list[ThreadPoolExecutor] = []


def helper_thread() -> ThreadPoolExecutor:
    """The one helper thread of the readers (created on first use), for the half of a scan the
    calling thread does not run. O(1).

    >>> helper_thread() is helper_thread()
    True
    """
    if not _HELPER:
        _HELPER.append(ThreadPoolExecutor(1, thread_name_prefix="stackdist-scan"))
    return _HELPER[0]


def scan_in_halves(kernel: Callable[..., Any], block: bytes, *args: Any) -> tuple[np.ndarray, np.ndarray, int, Any, bool]:
    """A compiled line scan ``kernel(buf, *args) -> (keys, sizes, lines, flag, ok)`` (it must
    release the GIL) run on the two halves of a block of whole lines at once, cut at a newline:
    the keys and sizes joined in order, ``ok`` only when both halves are and share ``flag`` (the
    column count or the size field). Small blocks are scanned whole. O(bytes / 2) wall.
    """
    buf = np.frombuffer(block, np.uint8)
    mid = block.find(b"\n", buf.size // 2) + 1 if buf.size >= 1 << 20 else 0
    if mid <= 0 or mid >= buf.size:
        return kernel(buf, *args)  # type: ignore[no-any-return]
    first = helper_thread().submit(kernel, buf[:mid], *args)
    k2, s2, m2, f2, ok2 = kernel(buf[mid:], *args)
    k1, s1, m1, f1, ok1 = first.result()
    ok = bool(ok1 and ok2 and (not m1 or not m2 or f1 == f2))
    return np.concatenate([k1, k2]), np.concatenate([s1, s2]), m1 + m2, (f1 if m1 else f2), ok


def data_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, raw line) for every non-blank line of the file."""
    for lineno, raw in enumerate(read_bytes(path).splitlines(), 1):
        if raw.strip():
            yield lineno, raw


def shown(value: Any) -> str:
    """A short JSON-ish rendering of a bad value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def shown_text(text: str) -> str:
    """A short quoted rendering of a bad text field for error messages."""
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def json_line(raw: bytes) -> Any:
    """Parse one line as JSON, turning a decode error into a LineError."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:  # bad UTF-8, or an integer too long to convert
        raise LineError(f"not valid JSON: {exc}") from None


def json_object(raw: bytes) -> dict[str, Any]:
    """Parse one line that must hold a JSON object."""
    obj = json_line(raw)
    if type(obj) is not dict:
        raise LineError(f"expected a JSON object, got {shown(obj)}")
    return obj


def is_int(value: Any) -> bool:
    """True for a JSON integer (a Python int that is not a bool)."""
    return type(value) is int


def field(obj: dict[str, Any], name: str) -> Any:
    """Return obj[name] or raise a 'missing field' LineError."""
    try:
        return obj[name]
    except KeyError:
        raise LineError(f"missing field '{name}'") from None


def count_field(obj: dict[str, Any], name: str, default: int | None = None) -> int:
    """A non-negative integer field (input_length, output_length); default when absent."""
    if default is not None and name not in obj:
        return default
    value = field(obj, name)
    if not is_int(value) or value < 0 or value > INT64_MAX:
        raise LineError(f"'{name}' must be a non-negative integer, got {shown(value)}")
    return value


def time_field(obj: dict[str, Any], name: str) -> float:
    """A non-negative finite number field (a timestamp)."""
    value = field(obj, name)
    try:
        seconds = float(value) if type(value) in (int, float) else math.nan
    except OverflowError:  # an integer beyond float range
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise LineError(f"'{name}' must be a non-negative number, got {shown(value)}")
    return seconds


def int_array(values: list[int], big: bool) -> np.ndarray:
    """Exact int64 array, or uint64 when ``big`` (some value exceeds int64)."""
    return np.array(values, dtype=np.uint64 if big else np.int64)


def fit_int_keys(values: list[int]) -> np.ndarray | None:
    """int64 if all fit, uint64 if all are in 0..2**64-1, else None."""
    if not values:
        return np.empty(0, dtype=np.int64)
    lo, hi = min(values), max(values)
    if lo >= -(2**63) and hi <= INT64_MAX:
        return np.array(values, dtype=np.int64)
    if lo >= 0 and hi <= UINT64_MAX:
        return np.array(values, dtype=np.uint64)
    return None
