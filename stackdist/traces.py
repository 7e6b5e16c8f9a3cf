"""Trace readers: key/size access traces and request-level KV-block traces, as numpy arrays.

Two kinds of trace come in:

- :class:`AccessTrace` -- a flat sequence of object accesses (``key`` and optional ``size``),
  read from CSV/TSV, JSONL or ``.npy`` by :func:`read_access_trace`.
- :class:`RequestTrace` -- LLM requests, each a list of prompt KV blocks (prefix-chained block
  ids, head first), read from Mooncake (:func:`read_mooncake`), Alibaba Qwen-Bailian
  (:func:`read_qwen`) or token-id files (:func:`read_token_ids`); :func:`read_requests`
  dispatches by format name.

Parsing is exact: integers go through Python ``int`` (``json`` gives exact integers), never
through ``float``, so 64-bit unsigned hash ids such as ``18446744073709551615`` survive. A
malformed line raises :class:`~stackdist.errors.TraceFormatError` naming ``file:line``; with
``skip_bad=True`` the request readers skip such lines instead and count them in
``RequestTrace.skipped``. Blank lines are always ignored.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from stackdist.errors import TraceFormatError, UsageError

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

ACCESS_FORMATS = ("csv", "tsv", "jsonl", "npy")
REQUEST_FORMATS = ("mooncake", "qwen", "tokens")
DEFAULT_BLOCK_SIZE = {"mooncake": 512, "qwen": 16, "tokens": 16}

_EXTENSION_FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".txt": "delimited",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".npy": "npy",
}


class _LineError(Exception):
    """A malformed line's message; the reader adds the file name and line number."""


# --------------------------------------------------------------------------------------------
# Small shared helpers
# --------------------------------------------------------------------------------------------


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
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


def _data_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, raw line) for every non-blank line of the file."""
    for lineno, raw in enumerate(_read_bytes(path).splitlines(), 1):
        if raw.strip():
            yield lineno, raw


def _shown(value: Any) -> str:
    """A short JSON-ish rendering of a bad value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shown_text(text: str) -> str:
    """A short quoted rendering of a bad text field for error messages."""
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _json_line(raw: bytes) -> Any:
    """Parse one line as JSON, turning a decode error into a _LineError."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _LineError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:  # bad UTF-8, or an integer too long to convert
        raise _LineError(f"not valid JSON: {exc}") from None


def _json_object(raw: bytes) -> dict[str, Any]:
    """Parse one line that must hold a JSON object."""
    obj = _json_line(raw)
    if type(obj) is not dict:
        raise _LineError(f"expected a JSON object, got {_shown(obj)}")
    return obj


def _is_int(value: Any) -> bool:
    """True for a JSON integer (a Python int that is not a bool)."""
    return type(value) is int


def _field(obj: dict[str, Any], name: str) -> Any:
    """Return obj[name] or raise a 'missing field' _LineError."""
    try:
        return obj[name]
    except KeyError:
        raise _LineError(f"missing field '{name}'") from None


def _count_field(obj: dict[str, Any], name: str, default: int | None = None) -> int:
    """A non-negative integer field (input_length, output_length); default when absent."""
    if default is not None and name not in obj:
        return default
    value = _field(obj, name)
    if not _is_int(value) or value < 0 or value > INT64_MAX:
        raise _LineError(f"'{name}' must be a non-negative integer, got {_shown(value)}")
    return value


def _time_field(obj: dict[str, Any], name: str) -> float:
    """A non-negative finite number field (a timestamp)."""
    value = _field(obj, name)
    try:
        seconds = float(value) if type(value) in (int, float) else math.nan
    except OverflowError:  # an integer beyond float range
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise _LineError(f"'{name}' must be a non-negative number, got {_shown(value)}")
    return seconds


def _int_array(values: list[int], big: bool) -> np.ndarray:
    """Exact int64 array, or uint64 when ``big`` (some value exceeds int64)."""
    return np.array(values, dtype=np.uint64 if big else np.int64)


# --------------------------------------------------------------------------------------------
# Access traces: key[,size]
# --------------------------------------------------------------------------------------------


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
        """Number of accesses."""
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
    """Resolve the access-trace format from ``format`` or the file extension."""
    if format is not None:
        if format not in ACCESS_FORMATS:
            raise UsageError(
                f"format must be one of {', '.join(ACCESS_FORMATS)} (or None to use the file "
                f"extension), got {format!r}"
            )
        return format
    ext = os.path.splitext(os.fspath(path))[1].lower()
    try:
        return _EXTENSION_FORMATS[ext]
    except KeyError:
        raise UsageError(
            f"cannot tell the format of {os.fspath(path)!r} from its extension {ext!r}: use "
            f".csv, .tsv, .txt, .jsonl, .json, .ndjson or .npy, or pass format= one of "
            f"{', '.join(ACCESS_FORMATS)}"
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
    """
    fmt = _access_format(path, format)
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
        raise _LineError(f"size must be a positive integer, got {_shown_text(text)}")
    return int(text)


def _is_int_literal(text: str) -> bool:
    """True for an optionally signed ASCII decimal integer of at most 20 significant digits.

    Longer literals cannot fit 64 bits (and ``int()`` refuses very long ones), so such keys
    stay strings.
    """
    body = text[1:] if text[:1] in ("+", "-") else text
    return body.isascii() and body.isdigit() and len(body.lstrip("0")) <= 20


def _read_access_delimited(path: str | os.PathLike[str], delimiter: str | None) -> AccessTrace:
    """Read the CSV/TSV/TXT form of an access trace."""
    lines = []
    for lineno, raw in _data_lines(path):
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
                raise _LineError(f"expected 1 or 2 columns (key[,size]), got {len(fields)}")
            if index == 0:
                n_columns, first_lineno = len(fields), lineno
                if fields[0].lower() == "key":
                    continue
            elif len(fields) != n_columns:
                raise _LineError(
                    f"has {len(fields)} column(s) but line {first_lineno} has {n_columns}; the "
                    f"size column must be present on every line or on none"
                )
            if not fields[0]:
                raise _LineError("missing key (the first column is empty)")
            if n_columns == 2:
                sizes.append(_parse_size(fields[1]))
            keys.append(fields[0])
        except _LineError as exc:
            raise TraceFormatError(path, lineno, str(exc)) from None
    trace = AccessTrace(_key_array_from_text(keys), _size_array(sizes, n_columns == 2), os.fspath(path))
    trace._check()
    return trace


def _key_array_from_text(keys: list[str]) -> np.ndarray:
    """Integer array if every key is an integer literal that fits one 64-bit dtype, else str."""
    if all(_is_int_literal(k) for k in keys):
        values = [int(k) for k in keys]
        array = _fit_int_keys(values)
        if array is not None:
            return array
    return np.array(keys, dtype=object) if keys else np.empty(0, dtype=np.int64)


def _fit_int_keys(values: list[int]) -> np.ndarray | None:
    """int64 if all fit, uint64 if all are in 0..2**64-1, else None."""
    if not values:
        return np.empty(0, dtype=np.int64)
    lo, hi = min(values), max(values)
    if lo >= -(2**63) and hi <= INT64_MAX:
        return np.array(values, dtype=np.int64)
    if lo >= 0 and hi <= UINT64_MAX:
        return np.array(values, dtype=np.uint64)
    return None


def _size_array(sizes: list[int], present: bool) -> np.ndarray | None:
    """int64 sizes, or None when the size column is absent."""
    return np.array(sizes, dtype=np.int64) if present else None


def _read_access_jsonl(path: str | os.PathLike[str]) -> AccessTrace:
    """Read the JSONL form of an access trace."""
    keys: list[Any] = []
    sizes: list[int] = []
    first: tuple[int, bool, bool] | None = None  # (line, key is int, has size)
    for lineno, raw in _data_lines(path):
        try:
            obj = _json_object(raw)
            key = _field(obj, "key")
            key_is_int = _is_int(key)
            if not key_is_int and type(key) is not str:
                raise _LineError(f"'key' must be an integer or a string, got {_shown(key)}")
            has_size = "size" in obj
            if first is None:
                first = (lineno, key_is_int, has_size)
            elif key_is_int != first[1]:
                kinds = ("a string", "an integer") if key_is_int else ("an integer", "a string")
                raise _LineError(
                    f"key is {kinds[1]} but line {first[0]}'s key is {kinds[0]}; keys must be "
                    f"all integers or all strings"
                )
            elif has_size != first[2]:
                raise _LineError(
                    f"{'has' if has_size else 'lacks'} 'size' but line {first[0]} "
                    f"{'lacks' if has_size else 'has'} it; the size field must be present on "
                    f"every line or on none"
                )
            if has_size:
                size = obj["size"]
                if not _is_int(size) or not 1 <= size <= INT64_MAX:
                    raise _LineError(f"'size' must be a positive integer, got {_shown(size)}")
                sizes.append(size)
            keys.append(key)
        except _LineError as exc:
            raise TraceFormatError(path, lineno, str(exc)) from None
    if first is None or not first[1]:
        key_array = np.array(keys, dtype=object) if keys else np.empty(0, dtype=np.int64)
    else:
        fitted = _fit_int_keys(keys)
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


# --------------------------------------------------------------------------------------------
# Request traces: per-request lists of prefix-chained KV blocks
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class RequestTrace:
    """LLM requests as numpy arrays: each request's prompt KV blocks, head first.

    Request ``r`` reads ``block_ids[offsets[r]:offsets[r+1]]``; ``block_tokens`` holds each
    block's token count: ``block_size`` for every block except possibly the last block of a
    request (a partial tail, counted by its real length). Block ids are prefix-chained: equal
    ids mean the same whole prefix up to and including that block.

    Fields: ``block_ids`` (int64 or uint64), ``offsets`` (int64, n_requests + 1, from 0),
    ``block_tokens`` (int64 in 1..block_size), ``timestamps_s`` (float64 seconds from the
    trace start; file order, not necessarily sorted), ``input_length`` and ``output_length``
    (int64 tokens; output 0 when unknown), ``block_size`` (tokens per full block), ``source``
    (file name), ``session_ids`` (int64 conversation ids, or None), ``skipped`` (malformed
    lines skipped by ``skip_bad``), ``request_ids`` (int64 per-request ids from the file, e.g.
    Qwen ``chat_id``, or None).

    The sum of a request's ``block_tokens`` is at most its ``input_length``: equal when the
    blocks cover the whole prompt (Mooncake, Qwen, token files with ``partial_last_block``),
    smaller when a trailing partial block is not represented.

    >>> t = RequestTrace(np.array([0, 1, 0, 2]), np.array([0, 2, 4]), np.array([4, 1, 4, 3]),
    ...                  np.array([0.0, 1.5]), np.array([5, 7]), np.array([0, 0]), block_size=4)
    >>> t.n_requests, t.n_blocks, t.request_blocks(1).tolist()
    (2, 4, [0, 2])
    """

    block_ids: np.ndarray
    offsets: np.ndarray
    block_tokens: np.ndarray
    timestamps_s: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    block_size: int
    source: str = ""
    session_ids: np.ndarray | None = None
    skipped: int = 0
    request_ids: np.ndarray | None = field(default=None)

    def __post_init__(self) -> None:
        self.block_ids = _as_id_array(self.block_ids)
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        self.block_tokens = np.asarray(self.block_tokens, dtype=np.int64)
        self.timestamps_s = np.asarray(self.timestamps_s, dtype=np.float64)
        self.input_length = np.asarray(self.input_length, dtype=np.int64)
        self.output_length = np.asarray(self.output_length, dtype=np.int64)
        if self.session_ids is not None:
            self.session_ids = np.asarray(self.session_ids, dtype=np.int64)
        if self.request_ids is not None:
            self.request_ids = np.asarray(self.request_ids, dtype=np.int64)
        self._check()

    @property
    def n_requests(self) -> int:
        """Number of requests."""
        return int(self.offsets.shape[0]) - 1

    @property
    def n_blocks(self) -> int:
        """Number of block accesses (all requests' blocks together)."""
        return int(self.block_ids.shape[0])

    def request_blocks(self, r: int) -> np.ndarray:
        """Block ids of request ``r`` (a view), head first."""
        if not -self.n_requests <= r < self.n_requests:
            raise IndexError(f"request index {r} is out of range for {self.n_requests} requests")
        r %= self.n_requests
        return self.block_ids[self.offsets[r] : self.offsets[r + 1]]

    def blocks_per_request(self) -> np.ndarray:
        """Number of blocks of each request (int64)."""
        return np.diff(self.offsets)

    def select(self, which: slice | np.ndarray | list[int] | list[bool]) -> RequestTrace:
        """A sub-trace of the chosen requests, in the given order.

        ``which`` is a slice, a boolean mask of length n_requests, or an array of request
        indices. Complexity: O(requests + blocks selected).
        """
        index = _request_index(which, self.n_requests)
        lengths = self.offsets[index + 1] - self.offsets[index]
        new_offsets = np.zeros(index.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=new_offsets[1:])
        shift = np.repeat(self.offsets[index] - new_offsets[:-1], lengths)
        blocks = shift + np.arange(int(new_offsets[-1]), dtype=np.int64)

        def pick(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[index]

        return RequestTrace(
            block_ids=self.block_ids[blocks],
            offsets=new_offsets,
            block_tokens=self.block_tokens[blocks],
            timestamps_s=self.timestamps_s[index],
            input_length=self.input_length[index],
            output_length=self.output_length[index],
            block_size=self.block_size,
            source=self.source,
            session_ids=pick(self.session_ids),
            skipped=self.skipped,
            request_ids=pick(self.request_ids),
        )

    def _check(self) -> None:
        """Verify every invariant in O(n); raise ValueError naming the broken one."""
        n = self.n_requests
        if not isinstance(self.block_size, (int, np.integer)) or self.block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {self.block_size!r}")
        if self.block_ids.dtype not in (np.int64, np.uint64) or self.block_ids.ndim != 1:
            raise ValueError("block_ids must be a 1-D int64 or uint64 array")
        if self.offsets.ndim != 1 or n < 0 or self.offsets[0] != 0:
            raise ValueError("offsets must be a 1-D array starting at 0")
        if self.offsets[-1] != self.n_blocks:
            raise ValueError(f"offsets must end at n_blocks = {self.n_blocks}, not {self.offsets[-1]}")
        if n and np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        if self.block_tokens.shape != self.block_ids.shape:
            raise ValueError("block_tokens must have one entry per block")
        if self.n_blocks and (self.block_tokens.min() < 1 or self.block_tokens.max() > self.block_size):
            raise ValueError(f"block_tokens must lie in 1..block_size ({self.block_size})")
        for name in ("timestamps_s", "input_length", "output_length", "session_ids", "request_ids"):
            values = getattr(self, name)
            if values is not None and values.shape != (n,):
                raise ValueError(f"{name} must have one entry per request ({n})")
        if not np.all(np.isfinite(self.timestamps_s)):
            raise ValueError("timestamps_s must be finite")
        if n and (self.input_length.min() < 0 or self.output_length.min() < 0):
            raise ValueError("input_length and output_length must be non-negative")
        self._check_block_tokens()

    def _check_block_tokens(self) -> None:
        """Only a request's last block may be partial; its blocks' tokens fit its input_length."""
        lengths = np.diff(self.offsets)
        is_last = np.zeros(self.n_blocks, dtype=bool)
        is_last[self.offsets[1:][lengths > 0] - 1] = True
        if np.any(self.block_tokens[~is_last] != self.block_size):
            raise ValueError("every block except a request's last must hold block_size tokens")
        if self.n_blocks == 0:
            return
        per_request = np.add.reduceat(self.block_tokens, self.offsets[:-1][lengths > 0])
        if np.any(per_request > self.input_length[lengths > 0]):
            raise ValueError("a request's blocks hold more tokens than its input_length")


def _as_id_array(values: Any) -> np.ndarray:
    """Block ids as int64 (or uint64 when some id exceeds int64); lists are converted exactly."""
    if isinstance(values, np.ndarray) and values.dtype in (np.int64, np.uint64):
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.uint64 if values.dtype == np.uint64 else np.int64)
    if isinstance(values, np.ndarray) and values.dtype != object:
        raise ValueError(f"block ids must be integers, got dtype {values.dtype}")
    listed = list(values)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in listed):
        raise ValueError("block ids must be integers")
    listed = [int(v) for v in listed]
    fitted = _fit_int_keys(listed)
    if fitted is None:
        raise ValueError("block ids must all fit in int64, or all in uint64")
    return fitted


def _request_index(which: Any, n: int) -> np.ndarray:
    """Turn a slice, boolean mask or index array into an int64 array of request indices."""
    if isinstance(which, slice):
        return np.arange(n, dtype=np.int64)[which]
    array = np.asarray(which)
    if array.dtype == bool:
        if array.shape != (n,):
            raise UsageError(f"a boolean request mask must have length n_requests = {n}, got {array.shape}")
        return np.flatnonzero(array).astype(np.int64)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise UsageError("select() takes a slice, a boolean mask or a 1-D array of request indices")
    if array.min() < -n or array.max() >= n:
        raise UsageError(f"request indices must lie in -{n}..{n - 1}")
    return np.where(array < 0, array + n, array).astype(np.int64)


def _last_block_tokens(input_length: np.ndarray, n_blocks: np.ndarray, block_size: int) -> np.ndarray:
    """Tokens of each request's last block: the remainder after its full blocks, at most block_size."""
    return np.minimum(block_size, input_length - block_size * (n_blocks - 1))


def _assemble(
    path: str | os.PathLike[str],
    block_ids: np.ndarray,
    n_blocks: list[int],
    timestamps_s: list[float],
    input_length: list[int],
    output_length: list[int],
    block_size: int,
    skipped: int,
    session_ids: list[int] | None = None,
    request_ids: list[int] | None = None,
) -> RequestTrace:
    """Build a RequestTrace from per-request Python lists and the flat block id array."""
    counts = np.array(n_blocks, dtype=np.int64)
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    inputs = np.array(input_length, dtype=np.int64)
    block_tokens = np.full(block_ids.shape[0], block_size, dtype=np.int64)
    has_blocks = counts > 0
    block_tokens[offsets[1:][has_blocks] - 1] = _last_block_tokens(inputs[has_blocks], counts[has_blocks], block_size)
    return RequestTrace(
        block_ids=block_ids,
        offsets=offsets,
        block_tokens=block_tokens,
        timestamps_s=np.array(timestamps_s, dtype=np.float64),
        input_length=inputs,
        output_length=np.array(output_length, dtype=np.int64),
        block_size=block_size,
        source=os.fspath(path),
        session_ids=None if session_ids is None else np.array(session_ids, dtype=np.int64),
        skipped=skipped,
        request_ids=None if request_ids is None else np.array(request_ids, dtype=np.int64),
    )


def _check_block_size(block_size: Any) -> int:
    """A positive integer block size, else UsageError."""
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise UsageError(f"block_size must be a positive integer (tokens per KV block), got {block_size!r}")
    return int(block_size)


def _hash_ids(obj: dict[str, Any], input_length: int, block_size: int) -> tuple[list[int], int]:
    """Validate ``hash_ids`` against input_length; return (ids, largest id or -1)."""
    ids = _field(obj, "hash_ids")
    if type(ids) is not list:
        raise _LineError(f"'hash_ids' must be a list of non-negative integers, got {_shown(ids)}")
    expected = -(-input_length // block_size)
    if len(ids) != expected:
        raise _LineError(
            f"hash_ids has {len(ids)} entries but input_length {input_length} needs "
            f"ceil({input_length}/{block_size}) = {expected} blocks"
        )
    if not ids:
        return ids, -1
    if not all(type(h) is int for h in ids) or min(ids) < 0 or max(ids) > UINT64_MAX:
        position, bad = next(
            (i, h) for i, h in enumerate(ids) if type(h) is not int or not 0 <= h <= UINT64_MAX
        )
        raise _LineError(f"hash_ids[{position}] must be an integer in 0..2**64-1, got {_shown(bad)}")
    return ids, max(ids)


def _read_hash_id_trace(
    path: str | os.PathLike[str],
    block_size: int,
    skip_bad: bool,
    parse_extra: Callable[[dict[str, Any]], Any],
    timestamp_divisor: float,
) -> tuple[RequestTrace, list[Any]]:
    """Shared loop of the Mooncake and Qwen readers; ``parse_extra`` reads format-specific fields."""
    block_size = _check_block_size(block_size)
    flat: list[int] = []
    n_blocks: list[int] = []
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    extras: list[Any] = []
    largest = -1
    skipped = 0
    for lineno, raw in _data_lines(path):
        try:
            obj = _json_object(raw)
            timestamp = _time_field(obj, "timestamp") / timestamp_divisor
            input_length = _count_field(obj, "input_length")
            output_length = _count_field(obj, "output_length", default=0)
            ids, line_max = _hash_ids(obj, input_length, block_size)
            extra = parse_extra(obj)
        except _LineError as exc:
            if not skip_bad:
                raise TraceFormatError(path, lineno, str(exc)) from None
            skipped += 1
            continue
        flat.extend(ids)
        n_blocks.append(len(ids))
        times.append(timestamp)
        inputs.append(input_length)
        outputs.append(output_length)
        extras.append(extra)
        largest = max(largest, line_max)
    block_ids = _int_array(flat, largest > INT64_MAX)
    trace = _assemble(path, block_ids, n_blocks, times, inputs, outputs, block_size, skipped)
    return trace, extras


def read_mooncake(path: str | os.PathLike[str], block_size: int = 512, skip_bad: bool = False) -> RequestTrace:
    """Read a Mooncake (FAST'25) trace: ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``.

    Each ``hash_ids`` entry is a prefix-chained block id (an integer in 0..2**64-1, parsed
    exactly; uint64 dtype if any exceeds int64). ``len(hash_ids)`` must equal
    ``ceil(input_length / block_size)``: the final partial block is covered and gets
    ``input_length - block_size * (n - 1)`` tokens. Timestamps are converted from ms to s.
    ``output_length`` may be absent (0). Complexity: O(file size).
    """
    trace, _ = _read_hash_id_trace(path, block_size, skip_bad, lambda obj: None, 1000.0)
    return trace


def _qwen_ids(obj: dict[str, Any]) -> tuple[int, int]:
    """(chat_id, parent_chat_id) of a Qwen-Bailian line; a missing or null parent is -1."""
    chat_id = _field(obj, "chat_id")
    if not _is_int(chat_id) or not -(2**63) <= chat_id <= INT64_MAX:
        raise _LineError(f"'chat_id' must be an integer, got {_shown(chat_id)}")
    parent = obj.get("parent_chat_id", -1)
    if parent is None:
        parent = -1
    if not _is_int(parent) or not -(2**63) <= parent <= INT64_MAX:
        raise _LineError(f"'parent_chat_id' must be an integer (-1 for a first turn), got {_shown(parent)}")
    return chat_id, parent


def _conversation_roots(chat_ids: list[int], parents: list[int]) -> list[int]:
    """For each request, the chat_id at the root of its parent chain (its conversation).

    A parent of -1 (or any negative id) ends a chain; so does a parent that is not a request
    of the file (that parent id is then the root, so siblings still share a conversation) and
    a cycle. Complexity: O(n) with memoisation.
    """
    parent_of = dict(zip(chat_ids, parents))
    root: dict[int, int] = {}
    out = []
    for chat in chat_ids:
        path, node, seen = [], chat, set()
        while node not in root:
            parent = parent_of.get(node)
            if parent is None or parent < 0 or node in seen:
                root[node] = node
                break
            seen.add(node)
            path.append(node)
            node = parent
        for visited in path:
            root[visited] = root[node]
        out.append(root[chat])
    return out


def read_qwen(path: str | os.PathLike[str], block_size: int = 16, skip_bad: bool = False) -> RequestTrace:
    """Read an Alibaba Qwen-Bailian trace (github.com/alibaba-edu/qwen-bailian-usagetraces-anon).

    Documented fields per line: ``chat_id`` (int), ``parent_chat_id`` (-1 for a root request;
    a missing or null value is read as -1), ``timestamp`` (seconds), ``input_length``,
    ``output_length``, ``type`` (text/search/image/file; ignored), ``turn`` (ignored) and
    ``hash_ids`` (salted SipHash ids of 16-token blocks, remapped to integers). The hash ids
    are taken as given (they are not re-chained here), with the same checks as
    :func:`read_mooncake`, including ``len(hash_ids) == ceil(input_length / block_size)``.

    ``request_ids`` holds each line's ``chat_id`` (in the published traces one id per
    request, i.e. per turn); ``session_ids`` holds the conversation: the ``chat_id`` at the
    root of the ``parent_chat_id`` chain (see :func:`_conversation_roots`).
    Complexity: O(file size).
    """
    trace, extras = _read_hash_id_trace(path, block_size, skip_bad, _qwen_ids, 1.0)
    chat_ids = [chat for chat, _ in extras]
    trace.request_ids = np.array(chat_ids, dtype=np.int64)
    trace.session_ids = np.array(_conversation_roots(chat_ids, [parent for _, parent in extras]), dtype=np.int64)
    trace._check()
    return trace


def _token_list(obj: Any) -> tuple[list[int], dict[str, Any]]:
    """(token ids, the object or {}) from a list line or an object with input_ids/token_ids."""
    if type(obj) is list:
        tokens, fields = obj, {}
    elif type(obj) is dict:
        name = "input_ids" if "input_ids" in obj else "token_ids"
        if name not in obj:
            raise _LineError("missing field 'input_ids' (or 'token_ids')")
        tokens, fields = obj[name], obj
        if type(tokens) is not list:
            raise _LineError(f"'{name}' must be a list of token ids, got {_shown(tokens)}")
    else:
        raise _LineError(f"expected a JSON list of token ids or an object, got {_shown(obj)}")
    if not all(type(t) is int and 0 <= t <= INT64_MAX for t in tokens):
        position, bad = next((i, t) for i, t in enumerate(tokens) if type(t) is not int or not 0 <= t <= INT64_MAX)
        raise _LineError(f"token id {position} must be a non-negative integer, got {_shown(bad)}")
    return tokens, fields


def read_token_ids(
    path: str | os.PathLike[str],
    block_size: int = 16,
    partial_last_block: bool = False,
    skip_bad: bool = False,
) -> RequestTrace:
    """Read one request per line as token ids and hash them into prefix-chained blocks.

    A line is a JSON list of token ids, or an object with ``input_ids`` (or ``token_ids``), an
    optional ``timestamp`` (seconds; on every line or on none -- 0.0 when absent) and an
    optional ``output_length`` (0 when absent). Block ids come from
    :func:`stackdist.prefix.chain_hashes` (uint64). ``input_length`` is the number of tokens.

    With ``partial_last_block=False`` (vLLM's behaviour: only full blocks are cached) a
    trailing partial block is not represented: every block holds ``block_size`` tokens and
    prefix-token hit rates computed from the blocks exclude each prompt's tail. With
    ``True`` the tail becomes a block of its own, counted by its real length.
    Complexity: O(tokens).
    """
    from stackdist.prefix import chain_hashes

    block_size = _check_block_size(block_size)
    pieces: list[np.ndarray] = []
    n_blocks: list[int] = []
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    first_timestamp: tuple[int, bool] | None = None
    skipped = 0
    for lineno, raw in _data_lines(path):
        try:
            tokens, fields = _token_list(_json_line(raw))
            has_time = "timestamp" in fields
            if first_timestamp is None:
                first_timestamp = (lineno, has_time)
            elif has_time != first_timestamp[1]:
                raise _LineError(
                    f"{'has' if has_time else 'lacks'} 'timestamp' but line {first_timestamp[0]} "
                    f"{'lacks' if has_time else 'has'} it; timestamps must be on every line or on none"
                )
            timestamp = _time_field(fields, "timestamp") if has_time else 0.0
            output_length = _count_field(fields, "output_length", default=0)
        except _LineError as exc:
            if not skip_bad:
                raise TraceFormatError(path, lineno, str(exc)) from None
            skipped += 1
            continue
        ids = chain_hashes(tokens, block_size, partial_last_block=partial_last_block)
        pieces.append(ids)
        n_blocks.append(int(ids.shape[0]))
        times.append(timestamp)
        inputs.append(len(tokens))
        outputs.append(output_length)
    block_ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint64)
    return _assemble(path, block_ids.astype(np.uint64), n_blocks, times, inputs, outputs, block_size, skipped)


def read_requests(
    path: str | os.PathLike[str],
    format: str = "mooncake",
    block_size: int | None = None,
    skip_bad: bool = False,
    partial_last_block: bool = False,
) -> RequestTrace:
    """Read a request trace in ``format`` ("mooncake", "qwen" or "tokens").

    ``block_size`` defaults to 512 for mooncake and 16 for qwen and tokens;
    ``partial_last_block`` applies to "tokens" only.
    """
    if format not in REQUEST_FORMATS:
        raise UsageError(f"format must be one of {', '.join(REQUEST_FORMATS)}, got {format!r}")
    size = DEFAULT_BLOCK_SIZE[format] if block_size is None else _check_block_size(block_size)
    if format == "mooncake":
        return read_mooncake(path, block_size=size, skip_bad=skip_bad)
    if format == "qwen":
        return read_qwen(path, block_size=size, skip_bad=skip_bad)
    return read_token_ids(path, block_size=size, partial_last_block=partial_last_block, skip_bad=skip_bad)
