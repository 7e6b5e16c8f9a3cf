"""The one registry of trace formats: a row per format, read by every reader, command and plot.

A row says what a format is (:class:`TraceFormat`): its name, its kind (a request trace, whose
prompts are prefix-chained blocks, or an access stream of ``key[,size]`` accesses), the function
that reads a whole file, the one that reads a path chunk by chunk (several files, ``-``,
``.gz``/``.zst``), the compiled scanner that reads the common shape of it fast (exact fallback
to the reader), the file suffixes that imply it, its default block size, the unit of its
capacities in plots and reports, and a line of help. Adding a format is one reader module and
one :func:`register` call here.

The functions are named ``"module:function"`` and imported on first use (:meth:`TraceFormat.load`),
so this module imports neither numpy nor numba: the command line builds its ``--format`` choices
and help from it without loading the readers.

>>> [f.name for f in formats(ACCESSES)]
['csv', 'tsv', 'jsonl', 'npy']
>>> get("mooncake").block_size, get("dynamo").block_size
(512, None)
>>> format_of_path("t.ndjson.gz").name
'jsonl'
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stackdist.errors import UsageError
from stackdist.input_names import strip_compression

if TYPE_CHECKING:  # the readers' types; importing them would import numpy
    from .requests import RequestTrace

__all__ = [
    "ACCESSES",
    "FORMATS",
    "KINDS",
    "REQUESTS",
    "SNIFFED_SUFFIX",
    "TraceFormat",
    "access_suffix",
    "call_reader",
    "format_help",
    "format_names",
    "format_of_path",
    "formats",
    "get",
    "is_request_format",
    "read_requests",
    "register",
    "unit_of",
]

REQUESTS = "requests"
"""A request trace: each request's prompt as prefix-chained KV blocks (:class:`~.requests.RequestTrace`)."""
ACCESSES = "accesses"
"""An access stream: one ``key[,size]`` access after another (:class:`~.access.AccessTrace`)."""
KINDS = (REQUESTS, ACCESSES)

SNIFFED_SUFFIX = ".txt"
"""The suffix of ``key[,size]`` text whose delimiter is the file's first tab or comma: no format
name, the access readers' default for ``-`` and for a name without a suffix."""

_ACCESS_UNIT = "size units of the trace's size column (1 per access if none)"


@dataclass(frozen=True)
class TraceFormat:
    """One trace format. The callables are ``"module:function"`` names (:meth:`load`).

    - ``reader(path, **options)`` reads a whole file into the kind's trace; it is given the
      options its signature names among ``format``, ``block_size``, ``skip_bad`` and
      ``partial_last_block``.
    - ``streamed`` reads one path chunk by chunk, exactly as ``reader`` would: for an access
      stream ``(path, suffix, lines)`` yields ``(uint64 key values, sizes or None)``; for a
      request trace ``(path, format, block_size, skip_bad, partial_last_block, lines)`` yields
      :class:`~.requests.RequestTrace` chunks of whole requests.
    - ``fast_scan`` (optional) is the compiled form of ``streamed`` for the common shape (same
      arguments, same chunks; a block it cannot take goes through the exact reader), and
      ``fast_block_ids`` (optional, request traces) ``(path, block_size)`` yields only the
      block ids (what ``curve`` replays).
    - ``line_records``: every line is a record on its own, so a growing file can be followed
      line by line (``stackdist watch``) and chunks are independent. False when the reader
      needs the whole input (it sorts, or numbers ids across lines) or the file is binary.
    - ``block_size``: tokens per block when ``--block-size`` is not given; None for an access
      stream, or when the file states its own (Dynamo's ``trace_block_size``, LMCache's
      ``chunk_size``).
    """

    name: str
    kind: str
    reader: str
    streamed: str
    help: str
    suffixes: tuple[str, ...] = ()
    block_size: int | None = None
    fast_scan: str | None = None
    fast_block_ids: str | None = None
    line_records: bool = True
    unit: str = "blocks"

    def load(self, field: str) -> Callable[..., Any]:
        """The function named by the row's ``field`` (``"reader"``, ``"streamed"``, ...),
        imported on first use. O(1) after the first import.

        >>> get("csv").load("reader").__name__
        'read_access_trace'
        """
        spec = getattr(self, field)
        if spec is None:
            raise ValueError(f"format {self.name!r} has no {field}")
        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]

    @property
    def is_requests(self) -> bool:
        return self.kind == REQUESTS


FORMATS: dict[str, TraceFormat] = {}
"""Every registered format by name, in registration order (the order of ``--format`` choices)."""


def register(fmt: TraceFormat) -> TraceFormat:
    """Add ``fmt`` to :data:`FORMATS` (a name taken, an unknown kind or a suffix another format
    owns is a ValueError). O(formats).

    >>> register(TraceFormat("csv", ACCESSES, "m:f", "m:g", "again"))
    Traceback (most recent call last):
    ...
    ValueError: format 'csv' is already registered
    """
    if fmt.name in FORMATS:
        raise ValueError(f"format {fmt.name!r} is already registered")
    if fmt.kind not in KINDS:
        raise ValueError(f"format {fmt.name!r}: kind must be one of {', '.join(KINDS)}, got {fmt.kind!r}")
    taken = {s: f.name for f in FORMATS.values() for s in f.suffixes}
    for suffix in fmt.suffixes:
        if suffix in taken or suffix == SNIFFED_SUFFIX:
            raise ValueError(f"format {fmt.name!r}: suffix {suffix} already implies {taken.get(suffix, 'sniffed text')}")
    FORMATS[fmt.name] = fmt
    return fmt


def formats(kind: str | None = None, line_records: bool | None = None) -> list[TraceFormat]:
    """The registered formats, of ``kind`` only and with ``line_records`` only when given. O(formats)."""
    return [f for f in FORMATS.values()
            if (kind is None or f.kind == kind) and (line_records is None or f.line_records == line_records)]


def format_names(kind: str | None = None, line_records: bool | None = None) -> list[str]:
    """The names of :func:`formats` (a command's ``--format`` choices). O(formats).

    >>> format_names(REQUESTS)
    ['mooncake', 'qwen', 'tokens', 'dynamo', 'lmcache']
    """
    return [f.name for f in formats(kind, line_records)]


def get(name: str, kind: str | None = None, line_records: bool | None = None, what: str | None = None) -> TraceFormat:
    """The row of ``name``; an unknown name (or one not of ``kind`` / ``line_records``) is a
    UsageError naming ``what`` (the flag), the allowed names and the closest one. O(formats).

    >>> get("mooncak", what="--format")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: --format: unknown format 'mooncak' (did you mean 'mooncake'?); one of csv, tsv, jsonl, npy, mooncake, qwen, tokens, dynamo, lmcache
    >>> get("npy", line_records=True).name
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: format 'npy' is not allowed here; one of csv, tsv, jsonl, mooncake, qwen, tokens
    """
    allowed = format_names(kind, line_records)
    if name in allowed:
        return FORMATS[name]
    close = difflib.get_close_matches(str(name), allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    problem = f"format {name!r} is not allowed here" if name in FORMATS else f"unknown format {name!r}{hint}"
    raise UsageError(f"{what + ': ' if what else ''}{problem}; one of {', '.join(allowed)}")


def is_request_format(name: str | None) -> bool:
    """True when ``name`` is a registered request-trace format (None: inferred from a suffix,
    an access stream). O(1).

    >>> is_request_format("qwen"), is_request_format("csv"), is_request_format(None)
    (True, False, False)
    """
    return name is not None and name in FORMATS and FORMATS[name].is_requests


def format_of_path(path: str) -> TraceFormat | None:
    """The format a file's suffix implies (a compression suffix is skipped), or None (``-``, no
    suffix, :data:`SNIFFED_SUFFIX` or a suffix no format owns). O(formats).

    >>> format_of_path("a.CSV").name, format_of_path("-"), format_of_path("a.txt")
    ('csv', None, None)
    """
    if path == "-":
        return None
    ext = os.path.splitext(strip_compression(path))[1].lower()
    return next((f for f in FORMATS.values() if ext in f.suffixes), None)


def access_suffix(path: str, format: str | None) -> str:
    """The suffix an access stream's chunk is read under: the suffix of ``format`` when given,
    else the one the path's suffix implies (``.json`` -> ``.jsonl``); :data:`SNIFFED_SUFFIX`
    when neither names one. O(formats).

    >>> access_suffix("x.ndjson", None), access_suffix("-", "tsv"), access_suffix("x", None)
    ('.jsonl', '.tsv', '.txt')
    """
    if format is not None:
        fmt = FORMATS.get(format)
        return fmt.suffixes[0] if fmt is not None and fmt.suffixes else SNIFFED_SUFFIX
    fmt = format_of_path(path)
    if fmt is not None:
        return fmt.suffixes[0]
    return (os.path.splitext(strip_compression(path))[1].lower() or SNIFFED_SUFFIX) if path != "-" else SNIFFED_SUFFIX


def unit_of(name: str | None) -> str:
    """What one unit of capacity is for a trace of format ``name`` (None: an access stream
    whose format its suffix implies), for plots and reports. O(1).

    >>> unit_of("qwen")
    'blocks'
    """
    return FORMATS[name].unit if name in FORMATS else _ACCESS_UNIT  # type: ignore[index]


def format_help(kind: str | None = None, line_records: bool | None = None) -> str:
    """``name (help), ...`` for a command's ``--format`` help. O(formats)."""
    return ", ".join(f"{f.name} ({f.help})" for f in formats(kind, line_records))


def call_reader(fmt: TraceFormat, path: str | os.PathLike[str], **options: Any) -> Any:
    """``fmt``'s reader on ``path`` with those of ``options`` its signature names (``format``
    is the row's name). O(that of the reader).

    >>> import tempfile; p = os.path.join(tempfile.mkdtemp(), "t"); _ = open(p, "w").write("1,2\\n")
    >>> call_reader(get("csv"), p, block_size=9, skip_bad=True).sizes.tolist()
    [2]
    """
    reader = fmt.load("reader")
    taken = inspect.signature(reader).parameters
    return reader(path, **{k: v for k, v in {"format": fmt.name, **options}.items() if k in taken})


def read_requests(path: str | os.PathLike[str], format: str = "mooncake", block_size: int | None = None,
                  skip_bad: bool = False, partial_last_block: bool = False) -> RequestTrace:
    """Read a request trace (:class:`~.requests.RequestTrace`) in ``format``, a registered
    request format: its reader with the options it takes.

    ``block_size`` defaults to the format's (512 for mooncake, 16 for qwen and tokens; dynamo and
    lmcache files state their own); ``partial_last_block`` applies to "tokens" only.
    Complexity: that of the reader.

    >>> read_requests("trace.jsonl", "parquet")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: unknown format 'parquet'; one of mooncake, qwen, tokens, dynamo, lmcache
    """
    from .requests import check_block_size

    fmt = get(format, REQUESTS)
    size = fmt.block_size if block_size is None else check_block_size(block_size)
    options: dict[str, Any] = {"skip_bad": skip_bad, "partial_last_block": partial_last_block}
    if size is not None:
        options["block_size"] = size
    trace: RequestTrace = call_reader(fmt, path, **options)
    return trace


_STREAM = "stackdist.traces.stream_input"

register(TraceFormat("csv", ACCESSES, "stackdist.traces.access:read_access_trace", f"{_STREAM}:access_line_chunks",
                     "key[,size] lines, comma-separated", (".csv",), fast_scan=f"{_STREAM}:fast_delimited_chunks",
                     unit=_ACCESS_UNIT))
register(TraceFormat("tsv", ACCESSES, "stackdist.traces.access:read_access_trace", f"{_STREAM}:access_line_chunks",
                     "key[,size] lines, tab-separated", (".tsv",), fast_scan=f"{_STREAM}:fast_delimited_chunks",
                     unit=_ACCESS_UNIT))
register(TraceFormat("jsonl", ACCESSES, "stackdist.traces.access:read_access_trace", f"{_STREAM}:access_line_chunks",
                     'one {"key": K, "size": S} a line', (".jsonl", ".json", ".ndjson"),
                     fast_scan=f"{_STREAM}:fast_jsonl_chunks", unit=_ACCESS_UNIT))
register(TraceFormat("npy", ACCESSES, "stackdist.traces.access:read_access_trace", f"{_STREAM}:npy_chunks",
                     "a numpy array of keys, or of (key, size) rows", (".npy",), line_records=False, unit=_ACCESS_UNIT))
register(TraceFormat("mooncake", REQUESTS, "stackdist.traces.hashed:read_mooncake", f"{_STREAM}:request_line_chunks",
                     "Mooncake JSONL: hash_ids of 512-token blocks", block_size=512,
                     fast_scan=f"{_STREAM}:fast_mooncake_chunks", fast_block_ids=f"{_STREAM}:fast_mooncake_block_ids"))
register(TraceFormat("qwen", REQUESTS, "stackdist.traces.hashed:read_qwen", f"{_STREAM}:request_line_chunks",
                     "Qwen-Bailian JSONL: hash_ids of 16-token blocks", block_size=16))
register(TraceFormat("tokens", REQUESTS, "stackdist.traces.tokens:read_token_ids", f"{_STREAM}:request_line_chunks",
                     "token-id JSONL, hashed into 16-token chained blocks", block_size=16))
register(TraceFormat("dynamo", REQUESTS, "stackdist.traces.logs.dynamo:read_dynamo", f"{_STREAM}:whole_request_chunks",
                     "NVIDIA Dynamo's dynamo.request.trace.v1 JSONL, with workers and engine-reported hits",
                     line_records=False))
register(TraceFormat("lmcache", REQUESTS, "stackdist.traces.logs.lmcache:read_lmcache", f"{_STREAM}:whole_request_chunks",
                     "LMCache's lookup-hash logs: a file or its folder", line_records=False))
