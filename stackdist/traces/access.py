r"""Access traces: a flat sequence of ``key[,size]`` accesses from CSV/TSV, JSONL or ``.npy``.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
>>> _ = open(path, "w").write("key,size\na,5\nb,3\na,5\n")
>>> t = read_access_trace(path)
>>> t.keys.tolist(), t.sizes.tolist()
(['a', 'b', 'a'], [5, 3, 5])
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError, UsageError

from .formats import ACCESSES, FORMATS, SNIFFED_SUFFIX, format_names, formats, get
from .lines import (
    INT64_MAX,
    LineError,
    data_lines,
    field,
    fit_int_keys,
    is_int,
    json_object,
    shown,
    shown_text,
)
from .requests import RequestTrace, check_block_size

__all__ = ["AccessTrace", "access_as_requests", "read_access_trace", "record_line"]

_READER = "stackdist.traces.access:read_access_trace"  # the registry's name of the reader below


@dataclass(frozen=True, eq=False)
class AccessTrace:
    """A flat access sequence: ``keys[i]`` is the i-th access, ``sizes[i]`` its size.

    ``keys`` is int64 (or uint64 when some key exceeds int64) if every key is an integer,
    otherwise an object array of ``str``. ``sizes`` is None for unit sizes, else int64 >= 1.
    """

    keys: np.ndarray
    sizes: np.ndarray | None
    source: str

    @property
    def n_accesses(self) -> int:
        """Number of accesses. O(1).

        >>> AccessTrace(np.array([1, 2, 1]), None, "t.csv").n_accesses
        3
        """
        return int(self.keys.shape[0])

    def __len__(self) -> int:
        return self.n_accesses

    def _check(self) -> None:
        """Verify the invariants in O(n); raise ValueError naming the broken one."""
        if self.keys.ndim != 1:
            raise ValueError("AccessTrace.keys must be 1-D")
        if self.keys.dtype not in (np.int64, np.uint64, np.object_):
            raise ValueError(f"AccessTrace.keys must be int64, uint64 or object, not {self.keys.dtype}")
        if self.sizes is not None:
            if self.sizes.dtype != np.int64 or self.sizes.shape != self.keys.shape:
                raise ValueError("AccessTrace.sizes must be int64 with one entry per key")
            if self.sizes.size and int(self.sizes.min()) < 1:
                raise ValueError("AccessTrace.sizes must all be >= 1")


def _access_format(path: str | os.PathLike[str], format: str | None) -> str:
    """The access stream's format name from ``format`` or the file's suffix (``.txt``: delimited,
    the delimiter sniffed), through the registry (:mod:`.formats`)."""
    if format is not None:
        return get(format, ACCESSES).name
    name = os.fspath(path)
    ext = os.path.splitext(name)[1].lower()
    if ext == SNIFFED_SUFFIX:
        return "delimited"
    fmt = next((f for f in formats(ACCESSES) if ext in f.suffixes), None)
    if fmt is not None:
        return fmt.name
    suffixes = [s for f in formats(ACCESSES) for s in f.suffixes] + [SNIFFED_SUFFIX]
    raise UsageError(
        f"cannot tell the format of {name!r} from its extension {ext!r}: use {', '.join(suffixes[:-1])} or "
        f"{suffixes[-1]}, or give the format (--format on the command line, format= in Python): one of "
        f"{', '.join(format_names(ACCESSES))}"
    ) from None


def read_access_trace(path: str | os.PathLike[str], format: str | None = None) -> AccessTrace:
    """Read a ``key[,size]`` access trace from CSV/TSV, JSONL or ``.npy``.

    Complexity: O(n) in the file size.

    - Delimited text (.csv, .tsv, .txt): one ``key[,size]`` per line; the delimiter is ``,``
      for .csv, a tab for .tsv, otherwise the first tab or comma seen in the file. Fields are
      split on the delimiter and stripped (no quoting). An optional first line whose first
      field is ``key`` (any case) is a header. ``#`` lines and blank lines are skipped.
      If every key is a decimal integer literal the keys are integers (so ``007`` equals
      ``7``), else strings; integer keys that do not fit one 64-bit dtype stay strings.
    - JSONL (.jsonl, .json, .ndjson): ``{"key": int|str, "size": int}`` per line; keys must be
      all integers or all strings.
    - .npy: a 1-D integer array (keys, unit sizes), an (n, 2) integer array (key, size) or a
      structured array with fields ``key`` and optional ``size``; never unpickled.

    The size column is optional but must be present on every line or on none.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> _ = open(path, "w").write('{"key": 7, "size": 2}\\n{"key": 8, "size": 2}\\n')
    >>> read_access_trace(path).keys.tolist()
    [7, 8]
    """
    fmt = _access_format(path, format)
    row = FORMATS.get(fmt)
    if row is not None and row.reader != _READER:  # an access format with a reader of its own
        trace: AccessTrace = row.load("reader")(path)
        return trace
    if fmt == "npy":
        return _read_access_npy(path)
    if fmt == "jsonl":
        return _read_access_jsonl(path)
    delimiter = {"csv": ",", "tsv": "\t"}.get(fmt)
    return _read_access_delimited(path, delimiter)


def _sniff_delimiter(lines: list[tuple[int, str]]) -> str:
    """The first tab or comma found in the data lines (comma when there is none)."""
    for _, text in lines:
        if "\t" in text:
            return "\t"
        if "," in text:
            return ","
    return ","


def _parse_size(text: str) -> int:
    """A size field: a decimal integer in 1..2**63-1."""
    digits = text.lstrip("0")
    if not (text.isascii() and text.isdigit()) or len(digits) > 19 or not 1 <= int(text) <= INT64_MAX:
        raise LineError(f"size must be a positive integer, got {shown_text(text)}")
    return int(text)


def _is_int_literal(text: str) -> bool:
    """True for an optionally signed ASCII decimal integer of at most 20 significant digits.

    Longer literals cannot fit 64 bits (and ``int()`` refuses very long ones), so such keys
    stay strings.
    """
    body = text[1:] if text[:1] in ("+", "-") else text
    return body.isascii() and body.isdigit() and len(body.lstrip("0")) <= 20


def _read_access_delimited(path: str | os.PathLike[str], delimiter: str | None) -> AccessTrace:
    """Read the CSV/TSV/TXT form of an access trace (the compiled scan when every line is a
    plain integer ``key[,size]``, else line by line)."""
    from .fast_delimited import scan_delimited_file

    scanned = scan_delimited_file(path, delimiter)
    if scanned is not None:
        return _checked(AccessTrace(scanned[0], scanned[1], os.fspath(path)))
    lines = []
    for lineno, raw in data_lines(path):
        try:
            text = raw.decode("utf-8").strip(" \r")  # keep tabs: "a\t" has an empty size
        except UnicodeDecodeError:
            raise TraceFormatError(path, lineno, "not valid UTF-8 text") from None
        if not text.startswith("#"):
            lines.append((lineno, text))
    if delimiter is None:
        delimiter = _sniff_delimiter(lines)
    keys: list[str] = []
    sizes: list[int] = []
    n_columns = 0
    first_lineno = 0
    for index, (lineno, text) in enumerate(lines):
        fields = [part.strip() for part in text.split(delimiter)]
        try:
            if len(fields) > 2:
                raise LineError(f"expected 1 or 2 columns (key[,size]), got {len(fields)}")
            if index == 0:
                n_columns, first_lineno = len(fields), lineno
                if fields[0].lower() == "key":
                    continue
            elif len(fields) != n_columns:
                raise LineError(
                    f"has {len(fields)} column(s) but line {first_lineno} has {n_columns}; the "
                    f"size column must be present on every line or on none"
                )
            if not fields[0]:
                raise LineError("missing key (the first column is empty)")
            if n_columns == 2:
                sizes.append(_parse_size(fields[1]))
            keys.append(fields[0])
        except LineError as exc:
            raise TraceFormatError(path, lineno, str(exc)) from None
    trace = AccessTrace(_key_array_from_text(keys), _size_array(sizes, n_columns == 2), os.fspath(path))
    trace._check()
    return trace


def _checked(trace: AccessTrace) -> AccessTrace:
    trace._check()
    return trace


def _key_array_from_text(keys: list[str]) -> np.ndarray:
    """Integer array if every key is an integer literal that fits one 64-bit dtype, else str."""
    if all(_is_int_literal(k) for k in keys):
        values = [int(k) for k in keys]
        array = fit_int_keys(values)
        if array is not None:
            return array
    return np.array(keys, dtype=object) if keys else np.empty(0, dtype=np.int64)


def _size_array(sizes: list[int], present: bool) -> np.ndarray | None:
    """int64 sizes, or None when the size column is absent."""
    return np.array(sizes, dtype=np.int64) if present else None


def _read_access_jsonl(path: str | os.PathLike[str]) -> AccessTrace:
    """Read the JSONL form of an access trace (the compiled scan when every line is a plain
    ``{"key": INT[, "size": INT]}``, else ``json.loads`` line by line)."""
    from .fast_json import scan_jsonl_file

    scanned = scan_jsonl_file(path)
    if scanned is not None:
        return _checked(AccessTrace(scanned[0], scanned[1], os.fspath(path)))
    keys: list[Any] = []
    sizes: list[int] = []
    first: tuple[int, bool, bool] | None = None  # (line, key is int, has size)
    for lineno, raw in data_lines(path):
        try:
            obj = json_object(raw)
            key = field(obj, "key")
            key_is_int = is_int(key)
            if not key_is_int and type(key) is not str:
                raise LineError(f"'key' must be an integer or a string, got {shown(key)}")
            has_size = "size" in obj
            if first is None:
                first = (lineno, key_is_int, has_size)
            elif key_is_int != first[1]:
                kinds = ("a string", "an integer") if key_is_int else ("an integer", "a string")
                raise LineError(
                    f"key is {kinds[1]} but line {first[0]}'s key is {kinds[0]}; keys must be "
                    f"all integers or all strings"
                )
            elif has_size != first[2]:
                raise LineError(
                    f"{'has' if has_size else 'lacks'} 'size' but line {first[0]} "
                    f"{'lacks' if has_size else 'has'} it; the size field must be present on "
                    f"every line or on none"
                )
            if has_size:
                size = obj["size"]
                if not is_int(size) or not 1 <= size <= INT64_MAX:
                    raise LineError(f"'size' must be a positive integer, got {shown(size)}")
                sizes.append(size)
            keys.append(key)
        except LineError as exc:
            raise TraceFormatError(path, lineno, str(exc)) from None
    if first is None or not first[1]:
        key_array = np.array(keys, dtype=object) if keys else np.empty(0, dtype=np.int64)
    else:
        fitted = fit_int_keys(keys)
        key_array = fitted if fitted is not None else np.array([str(k) for k in keys], dtype=object)
    trace = AccessTrace(key_array, _size_array(sizes, bool(first and first[2])), os.fspath(path))
    trace._check()
    return trace


_NPY_SHAPES = (
    "expected a 1-D integer array of keys, an (n, 2) integer array of key,size rows, or a "
    "structured array with fields 'key' and 'size'"
)


def _read_access_npy(path: str | os.PathLike[str]) -> AccessTrace:
    """Read the .npy form of an access trace (allow_pickle=False)."""
    if not os.path.exists(path):
        raise TraceFormatError(path, None, "no such file")
    if os.path.isdir(path):
        raise TraceFormatError(path, None, "is a directory, not a trace file")
    try:
        array = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise TraceFormatError(path, None, f"cannot load the .npy array: {exc}") from None
    except (OSError, EOFError) as exc:
        raise TraceFormatError(path, None, f"not a valid .npy file: {exc}") from None
    if not isinstance(array, np.ndarray):
        raise TraceFormatError(path, None, f"not a .npy array file; {_NPY_SHAPES}")
    shown = f"got shape {array.shape} dtype {array.dtype}"
    if array.dtype.names is not None:
        if "key" not in array.dtype.names or array.ndim != 1:
            raise TraceFormatError(path, None, f"{_NPY_SHAPES}; {shown}")
        keys = _npy_keys(path, array["key"])
        sizes = _npy_sizes(path, array["size"]) if "size" in array.dtype.names else None
    elif array.ndim == 1:
        keys, sizes = _npy_keys(path, array), None
    elif array.ndim == 2 and array.shape[1] == 2:
        keys, sizes = _npy_keys(path, array[:, 0]), _npy_sizes(path, array[:, 1])
    else:
        raise TraceFormatError(path, None, f"{_NPY_SHAPES}; {shown}")
    trace = AccessTrace(keys, sizes, os.fspath(path))
    trace._check()
    return trace


def _npy_keys(path: str | os.PathLike[str], column: np.ndarray) -> np.ndarray:
    """Keys from a .npy column: integers as int64/uint64, unicode strings as str objects."""
    kind = column.dtype.kind
    if kind == "U":
        return column.astype(object)
    if kind == "u" and column.dtype.itemsize == 8:
        if column.size and int(column.max()) > INT64_MAX:
            return column.astype(np.uint64)
        return column.astype(np.int64)
    if kind in "iu":
        return column.astype(np.int64)
    raise TraceFormatError(path, None, f"keys must be integers or strings, got dtype {column.dtype}")


def _npy_sizes(path: str | os.PathLike[str], column: np.ndarray) -> np.ndarray:
    """Sizes from a .npy column: integers in 1..2**63-1, as int64."""
    if column.dtype.kind not in "iu":
        raise TraceFormatError(path, None, f"sizes must be integers, got dtype {column.dtype}")
    if column.size:
        out_of_range = column < 1
        if column.dtype == np.uint64:
            out_of_range |= column > INT64_MAX
        bad = np.flatnonzero(out_of_range)
        if bad.size:
            row = int(bad[0])
            raise TraceFormatError(
                path, None, f"sizes must be positive integers; row {row} (0-based) has {column[row]}"
            )
    return column.astype(np.int64)


def record_line(path: str, fmt: str | None, position: int) -> str:
    """``file:line`` of the record at 0-based ``position`` of an access trace (text formats),
    ``file: row N`` for ``.npy``, or ``file: access N`` when the file cannot be re-read.
    O(position) lines.

    >>> import tempfile; p = os.path.join(tempfile.mkdtemp(), "t.csv"); _ = open(p, "w").write("key\\n# c\\n7\\n8\\n")
    >>> record_line(p, None, 1).endswith("t.csv:4")
    True
    """
    where = f"{path}: access {position + 1:,}"
    kind = fmt or os.path.splitext(path)[1].lower()
    if kind in ("npy", ".npy"):
        return f"{path}: row {position:,}"
    text_kind, first, index = kind not in ("jsonl", *get("jsonl").suffixes), True, -1
    try:
        for lineno, raw in data_lines(path):
            text = raw.decode("utf-8", "replace").strip()
            if text_kind and text.startswith("#"):
                continue
            if first and text_kind:
                first = False
                if text.replace("\t", ",").split(",")[0].strip().lower() == "key":
                    continue
            index += 1
            if index == position:
                return f"{path}:{lineno}"
    except Exception:  # noqa: BLE001 - only the message is at stake
        return where
    return where


def access_as_requests(access: AccessTrace, block_size: int | None = None) -> RequestTrace:
    """A ``key[,size]`` access stream as a request trace: every access is a one-block request
    whose block holds ``size`` tokens (1 when unsized), so it can be planned like any trace.

    ``block_size`` defaults to the largest size and must be at least it. O(n).

    >>> from stackdist.traces import AccessTrace
    >>> t = access_as_requests(AccessTrace(np.array([3, 4, 3]), np.array([2, 5, 2]), "x.csv"))
    >>> t.n_requests, t.block_size, t.block_tokens.tolist()
    (3, 5, [2, 5, 2])
    """
    from stackdist.engine.keys import dense_keys

    n = access.n_accesses
    tokens = np.ones(n, np.int64) if access.sizes is None else access.sizes
    size = int(tokens.max(initial=1)) if block_size is None else check_block_size(block_size)
    if n and int(tokens.max()) > size:
        raise UsageError(f"--block-size ({size}) must be at least the largest size in {access.source} ({int(tokens.max())}).")
    return RequestTrace(dense_keys(access.keys).ids, np.arange(n + 1), tokens, np.zeros(n), tokens,
                        np.zeros(n, np.int64), block_size=size, source=os.fspath(access.source))
