"""Streaming input: traces read in chunks, from several files, a glob, standard input, ``.gz`` or ``.zst``.

Memory is bounded by a chunk (``lines`` lines at a time), not by the trace. Each chunk is parsed
by the project's own readers (:mod:`.access`, :mod:`.hashed`, :mod:`.tokens`), so the parsing
and the ``FILE:LINE: reason`` errors are exactly theirs: the chunk's lines are handed to the reader
as a small file and an error's line number is mapped back to the line of the real input.

What a chunk cannot see (documented differences from reading a whole file at once):

- Keys are yielded as 64-bit values (:func:`key_values`): integer keys by their value, other
  keys by blake2b-64 of their text (a collision has probability about n**2 / 2**65). So a trace
  mixing integer and non-integer keys treats ``007`` and ``7`` as one key here (the whole-file
  reader makes every key a string then).
- "Present on every line or on none" (sizes, timestamps) and "all integers or all strings" are
  checked within each chunk. A Qwen conversation (``session_ids``) is followed within a chunk.
- A header line (``key[,size]``) is recognised on the first line of each file only.

``-`` reads standard input; a name with ``*``, ``?`` or ``[`` is a glob (sorted); several names
are one trace in order. ``.zst`` needs the ``zstandard`` package (``pip install 'stackdist[zstd]'``).

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> for name, text in (("a.csv", "key\\n1\\n2\\n"), ("b.csv", "1\\n")):
...     _ = open(os.path.join(d, name), "w").write(text)
>>> [k.tolist() for k, _ in iter_access_chunks(os.path.join(d, "*.csv"))]
[[1, 2], [1]]
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO, Any

import numpy as np

from stackdist.engine.keys import first_size_change
from stackdist.errors import TraceFormatError, UsageError
from stackdist.input_names import (
    compression_of,
    expand_inputs,
    input_specs,
    is_streamed,
)

from .access import AccessTrace, access_as_requests, read_access_trace, record_line
from .fast_delimited import parse_int_lines
from .formats import (
    ACCESSES,
    REQUESTS,
    SNIFFED_SUFFIX,
    TraceFormat,
    access_suffix,
    format_of_path,
    get,
    is_request_format,
    read_requests,
)
from .lines import scan_in_halves, whole_line_blocks
from .requests import RequestTrace, check_block_size, concat_requests

__all__ = [
    "CHUNK_LINES",
    "AccessLineParser",
    "access_line_chunks",
    "expand_inputs",
    "fast_delimited_chunks",
    "fast_jsonl_chunks",
    "fast_mooncake_block_ids",
    "fast_mooncake_chunks",
    "is_streamed",
    "iter_access_chunks",
    "iter_block_id_chunks",
    "iter_line_chunks",
    "iter_lines",
    "iter_request_chunks",
    "joined_sizes",
    "key_values",
    "npy_chunks",
    "open_input",
    "parse_int_lines",
    "parse_request_lines",
    "read_as_requests",
    "read_keys",
    "read_request_input",
    "request_line_chunks",
    "whole_request_chunks",
]

CHUNK_LINES = 1 << 18

_DELIMITERS = {".csv": ",", ".tsv": "\t"}  # the delimiter each delimited suffix fixes
_DELIMITED = (*_DELIMITERS, SNIFFED_SUFFIX)


def open_input(path: str) -> IO[bytes]:
    """A binary stream of ``path``: standard input for ``-``, decompressed for ``.gz`` and
    ``.zst``. Missing or unreadable files are TraceFormatError (``FILE: reason``). O(1).

    >>> open_input("/nonexistent.csv")
    Traceback (most recent call last):
    ...
    stackdist.errors.TraceFormatError: /nonexistent.csv: no such file
    """
    if path == "-":
        return sys.stdin.buffer
    try:
        raw = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        raise TraceFormatError(path, None, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, None, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot read the file: {exc.strerror}") from None
    kind = compression_of(path)
    if kind == "gz":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if kind == "zst":
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise UsageError(f"{path}: reading .zst needs the zstandard package: pip install 'stackdist[zstd]'") from None
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)  # type: ignore[return-value]
    return raw


def iter_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line without its end) for every non-blank line; a UTF-8 BOM on
    the first line is dropped. Reads incrementally. O(1) memory per line.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.gz"); _ = gzip.open(p, "wb").write(b"a\\n\\nb\\n")
    >>> list(iter_lines(p))
    [(1, b'a'), (3, b'b')]
    """
    stream = open_input(path)
    try:
        buffered = stream if isinstance(stream, io.BufferedIOBase) and hasattr(stream, "readline") else io.BufferedReader(stream)  # type: ignore[arg-type,type-var]
        try:
            for lineno, raw in enumerate(buffered, 1):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                line = raw.rstrip(b"\r\n")
                if line.strip():
                    yield lineno, line
        except (OSError, EOFError) as exc:
            raise TraceFormatError(path, None, f"cannot read the file: {exc}") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def iter_line_chunks(path: str, lines: int = CHUNK_LINES) -> Iterator[list[tuple[int, bytes]]]:
    """The non-blank lines of ``path`` in lists of at most ``lines``. O(lines) memory.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.txt"); _ = open(p, "w").write("1\\n2\\n3\\n")
    >>> [len(c) for c in iter_line_chunks(p, 2)]
    [2, 1]
    """
    chunk: list[tuple[int, bytes]] = []
    for item in iter_lines(path):
        chunk.append(item)
        if len(chunk) >= lines:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def key_values(keys: np.ndarray) -> np.ndarray:
    """Keys as uint64 values, the same in every chunk: integers by value (mod 2**64), integer
    literals in text by their value, other text by blake2b-64 of its UTF-8 bytes. O(n).

    >>> bool(key_values(np.array(["7", "x", "7"], dtype=object))[0] == key_values(np.array([7]))[0])
    True
    """
    if keys.dtype.kind in "iu":
        return keys.astype(np.int64, copy=False).view(np.uint64) if keys.dtype.kind == "i" else keys.astype(np.uint64)
    cache: dict[Any, int] = {}
    out = np.empty(keys.shape[0], np.uint64)
    for i, k in enumerate(keys.tolist()):
        v = cache.get(k)
        if v is None:
            text = str(k)
            body = text[1:] if text[:1] in "+-" else text
            if body.isascii() and body.isdigit() and -(2**63) <= int(text) < 2**64:
                v = int(text) % 2**64
            else:
                v = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            cache[k] = v
        out[i] = v
    return out


def _remap_error(exc: TraceFormatError, path: str, linenos: list[int]) -> TraceFormatError:
    """The reader's error on the temporary chunk file, with the real file and line numbers."""
    import re

    def real(n: int) -> int:
        return linenos[n - 1] if 1 <= n <= len(linenos) else n

    message = re.sub(r"\bline (\d+)\b", lambda m: f"line {real(int(m.group(1)))}", exc.message)
    return TraceFormatError(path, None if exc.line is None else real(exc.line), message)


def _parse_chunk(path: str, lines: list[tuple[int, bytes]], suffix: str, header: bytes | None, read: Any,
                 header_line: int = 1) -> Any:
    """Run ``read(tmp_path)`` on the chunk written as a small file, with an optional first line
    standing for the file's line ``header_line`` (the first line the reader compares others to)."""
    linenos = ([header_line] if header is not None else []) + [n for n, _ in lines]
    body = b"\n".join(([header] if header is not None else []) + [raw for _, raw in lines]) + b"\n"
    with tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False) as tmp:
        tmp.write(body)
    try:
        return read(tmp.name)
    except TraceFormatError as exc:
        raise _remap_error(exc, path, linenos) from None
    finally:
        os.unlink(tmp.name)


def npy_chunks(path: str, suffix: str, lines: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """A .npy access trace in slices of a memory map (plain integer arrays), else whole; from
    standard input or compressed, by lines (the streamed reader of the ``npy`` row). O(lines)."""
    if path == "-" or compression_of(path):
        yield from access_line_chunks(path, suffix, lines)
        return
    lines = max(lines, 1 << 21)
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        array = None
    if array is None or array.dtype.kind not in "iu" or array.ndim not in (1, 2) or (array.ndim == 2 and array.shape[1] != 2):
        trace = read_access_trace(path, "npy")
        yield key_values(trace.keys), trace.sizes
        return
    for lo in range(0, array.shape[0], lines):
        part = np.asarray(array[lo : lo + lines])
        keys, sizes = (part, None) if part.ndim == 1 else (part[:, 0], part[:, 1].astype(np.int64))
        if sizes is not None and sizes.size and int(sizes.min()) < 1:
            row = lo + int(np.argmax(sizes < 1))
            raise TraceFormatError(path, None, f"sizes must be positive integers; row {row} (0-based) has {int(part[row - lo, 1])}")
        yield key_values(keys), sizes


def iter_access_chunks(spec: str | Sequence[str], format: str | None = None, lines: int = CHUNK_LINES
                       ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """``(key values, sizes or None)`` chunk by chunk over the files of ``spec`` (one trace in
    order), parsed by each file's format's streamed reader (the registry, :mod:`.formats`; its
    compiled scan from :data:`CHUNK_LINES` lines), exactly as :func:`~.access.read_access_trace`
    would. O(lines) memory.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv"); _ = open(p, "w").write("key,size\\n1,2\\n1,3\\n")
    >>> next(iter_access_chunks(p))[1].tolist()
    [2, 3]
    """
    for path in expand_inputs(spec):
        fmt = get(format, ACCESSES, what="--format") if format is not None else format_of_path(path)
        suffix = access_suffix(path, format)
        yield from _access_chunker(fmt, suffix, lines)(path, suffix, lines)


def _access_chunker(fmt: TraceFormat | None, suffix: str, lines: int) -> Any:
    """The streamed reader of an access format (its compiled scan from :data:`CHUNK_LINES`
    lines); text no format names (``.txt``, ``-``) is delimited text, its delimiter sniffed
    (a suffix no format owns is left to the exact reader, which names it)."""
    fast = lines >= CHUNK_LINES
    if fmt is None or fmt.kind != ACCESSES:
        return fast_delimited_chunks if fast and suffix == SNIFFED_SUFFIX else access_line_chunks
    return fmt.load("fast_scan" if fast and fmt.fast_scan else "streamed")


def access_line_chunks(path: str, suffix: str, lines: int = CHUNK_LINES) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """An access trace's lines in batches of ``lines``, each parsed by :class:`AccessLineParser`
    (the streamed reader of the text access formats). O(lines) memory.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv"); _ = open(p, "w").write("1\\n2\\n")
    >>> [k.tolist() for k, _ in access_line_chunks(p, ".csv", 1)]
    [[1], [2]]
    """
    parser = AccessLineParser(path, None)
    parser.suffix = suffix
    for chunk in iter_line_chunks(path, lines):
        yield parser.parse(chunk)


def fast_jsonl_chunks(path: str, suffix: str = ".jsonl", lines: int = CHUNK_LINES
                      ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """A JSONL access trace in 32 MiB blocks, each by the compiled scan
    (:func:`~.fast_json.jsonl_access_chunks`) or, when a block is not plain, the exact reader. O(block).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl"); _ = open(p, "w").write('{"key": 4}\\n')
    >>> [k.tolist() for k, _ in fast_jsonl_chunks(p)]
    [[4]]
    """
    from .fast_json import jsonl_access_chunks

    yield from jsonl_access_chunks(line_blocks(path), AccessLineParser(path, None, suffix).parse)


class AccessLineParser:
    """Parse an access trace's lines batch by batch (the state a file's first batch sets: its
    header, its delimiter, its column count), with :func:`~.access.read_access_trace`.

    >>> p = AccessLineParser("t.csv", None)
    >>> p.parse([(1, b"key,size"), (2, b"7,2")])[1].tolist(), p.parse([(3, b"key,3")])[1].tolist()
    ([2], [3])
    """

    def __init__(self, path: str, format: str | None, suffix: str | None = None) -> None:
        self.path = path
        self.suffix = access_suffix(path, format) if suffix is None else suffix
        self.header: bytes | None = None
        self.first_line = 1
        self.batches = 0

    def parse(self, lines: list[tuple[int, bytes]]) -> tuple[np.ndarray, np.ndarray | None]:
        """(key values, sizes or None) of one batch of (line number, raw line). O(len(lines))."""
        if not lines:
            return np.zeros(0, np.uint64), None
        trace = _parse_chunk(self.path, lines, self.suffix, self.header if self.batches else None, read_access_trace,
                             self.first_line)
        if self.batches == 0 and self.suffix in _DELIMITED:
            self.first_line = next((n for n, raw in lines if not raw.lstrip().startswith(b"#")), 1)
            self.header, self.suffix = _later_header(lines, self.suffix, trace.sizes is not None)
        self.batches += 1
        return key_values(trace.keys), trace.sizes


def parse_request_lines(path: str, lines: list[tuple[int, bytes]], format: str = "mooncake",
                        block_size: int | None = None, skip_bad: bool = False,
                        partial_last_block: bool = False) -> RequestTrace:
    """One batch of a request trace's lines as a RequestTrace (whole requests), with
    :func:`~.formats.read_requests`. O(len(lines)).

    >>> t = parse_request_lines("m.jsonl", [(4, b'{"timestamp": 0, "input_length": 3, "hash_ids": [9]}')], block_size=16)
    >>> t.block_ids.tolist(), t.source
    ([9], 'm.jsonl')
    """
    size = get(format, REQUESTS).block_size if block_size is None else block_size
    trace = _parse_chunk(path, lines, ".jsonl", None, lambda tmp: read_requests(tmp, format, size, skip_bad, partial_last_block))
    trace.source = path
    return trace


def _later_header(first: list[tuple[int, bytes]], suffix: str, sized: bool) -> tuple[bytes, str]:
    """The header line that keeps a later chunk's first line a data line, and the suffix that
    fixes the delimiter the first chunk used (the first tab or comma of the file)."""
    if suffix == ".txt":
        delim = next((d for _, raw in first if not raw.lstrip().startswith(b"#") for d in (b"\t", b",") if d in raw), b",")
        suffix = ".tsv" if delim == b"\t" else ".csv"
    delim = b"\t" if suffix == ".tsv" else b","
    return (b"key" + delim + b"size" if sized else b"key"), suffix


def iter_request_chunks(spec: str | Sequence[str], format: str = "mooncake", block_size: int | None = None,
                        skip_bad: bool = False, partial_last_block: bool = False, lines: int = CHUNK_LINES
                        ) -> Iterator[RequestTrace]:
    """Request traces chunk by chunk (whole requests) over the files of ``spec``, by the format's
    streamed reader (the registry, :mod:`.formats`; its compiled scan from :data:`CHUNK_LINES`
    lines), exactly as :func:`~.read.read_requests` would. O(lines) memory (the whole input for
    a format whose records are not lines on their own).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "m.jsonl")
    >>> _ = open(p, "w").write('{"timestamp": 0, "input_length": 9, "hash_ids": [1]}\\n' * 3)
    >>> [t.n_requests for t in iter_request_chunks(p, block_size=16, lines=2)]
    [2, 1]
    """
    fmt = get(format, REQUESTS, what="--format")
    chunks = fmt.load("fast_scan" if fmt.fast_scan and lines >= CHUNK_LINES else "streamed")
    yield from chunks(expand_inputs(spec), fmt.name, block_size, skip_bad, partial_last_block, lines)


def request_line_chunks(paths: list[str], format: str, block_size: int | None = None, skip_bad: bool = False,
                        partial_last_block: bool = False, lines: int = CHUNK_LINES) -> Iterator[RequestTrace]:
    """A request trace whose every line is a request on its own, ``lines`` lines at a time,
    each batch by :func:`parse_request_lines` (the streamed reader of such formats). O(lines)."""
    for path in paths:
        for chunk in iter_line_chunks(path, lines):
            yield parse_request_lines(path, chunk, format, block_size, skip_bad, partial_last_block)


def whole_request_chunks(paths: list[str], format: str, block_size: int | None = None, skip_bad: bool = False,
                         partial_last_block: bool = False, lines: int = CHUNK_LINES) -> Iterator[RequestTrace]:
    """A request trace whose reader needs the whole input at once (it orders requests, or
    numbers blocks, across lines: Dynamo, LMCache) as one chunk: one plain file or folder by the
    reader, several files, ``-`` or ``.gz``/``.zst`` gathered (in order) and read once; an error
    names the real file and line. O(input) memory.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); line = '{"chunk_size": 4, "seq_len": 4, "chunk_hashes": ["%s"]}\\n'
    >>> for name, h in (("a", "0xa"), ("b", "0xb")): _ = open(os.path.join(d, name), "w").write(line % h)
    >>> [t.block_ids.tolist() for t in whole_request_chunks([os.path.join(d, "a"), os.path.join(d, "b")], "lmcache")]
    [[0, 1]]
    """
    if len(paths) == 1 and paths[0] != "-" and not compression_of(paths[0]):
        yield read_requests(paths[0], format, block_size, skip_bad, partial_last_block)
        return
    where = [(path, n, raw) for path in paths for n, raw in iter_lines(path)]
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as tmp:
        tmp.write(b"".join(raw + b"\n" for _, _, raw in where))
    try:
        trace = read_requests(tmp.name, format, block_size, skip_bad, partial_last_block)
    except TraceFormatError as exc:
        if exc.line is None or not 1 <= exc.line <= len(where):
            raise TraceFormatError(", ".join(paths), None, exc.message) from None
        path, n, _ = where[exc.line - 1]
        raise TraceFormatError(path, n, exc.message) from None
    finally:
        os.unlink(tmp.name)
    trace.source = ", ".join(paths) if len(paths) > 1 else paths[0]
    yield trace


def fast_mooncake_chunks(paths: list[str], format: str = "mooncake", block_size: int | None = None,
                         skip_bad: bool = False, partial_last_block: bool = False, lines: int = CHUNK_LINES
                         ) -> Iterator[RequestTrace]:
    """A Mooncake trace in 32 MiB blocks, each by the compiled scan (:func:`~.fast_json.mooncake_chunks`)
    or, when a block is not plain, the exact reader (same trace, same errors). O(block)."""
    from .fast_json import mooncake_chunks

    size = check_block_size(get(format, REQUESTS).block_size if block_size is None else block_size)
    for path in paths:
        yield from mooncake_chunks(line_blocks(path), path, size, functools.partial(
            parse_request_lines, path, format=format, block_size=size, skip_bad=skip_bad))


def fast_mooncake_block_ids(path: str, block_size: int) -> Iterator[np.ndarray]:
    """The block ids of a Mooncake trace straight from the compiled scan
    (:func:`~.fast_json.mooncake_block_ids`; the exact reader for a block it does not take). O(block)."""
    from .fast_json import mooncake_block_ids

    yield from mooncake_block_ids(line_blocks(path), block_size, functools.partial(
        parse_request_lines, path, format="mooncake", block_size=block_size))


def iter_block_id_chunks(spec: str | Sequence[str], format: str = "mooncake") -> Iterator[np.ndarray]:
    """The block ids of a request trace chunk by chunk (the block stream ``curve`` replays), at
    the format's default block size: by the format's compiled block-id scan when it has one (no
    per-request arrays are built), else from :func:`iter_request_chunks`. O(block).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "m.jsonl")
    >>> _ = open(p, "w").write('{"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}\\n')
    >>> [c.tolist() for c in iter_block_id_chunks(p)]
    [[1, 2]]
    """
    fmt = get(format, REQUESTS, what="--format")
    if fmt.fast_block_ids is None:
        yield from (t.block_ids for t in iter_request_chunks(spec, fmt.name))
        return
    for path in expand_inputs(spec):
        yield from fmt.load("fast_block_ids")(path, fmt.block_size)


def read_keys(spec: str | Sequence[str], fmt: str | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The whole trace (one file or several, ``-``, ``.gz``/``.zst``) as key values and sizes
    (a request trace's block ids), read chunk by chunk. O(accesses).

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); _ = open(os.path.join(d, "a.csv"), "w").write("1\\n2\\n")
    >>> _ = open(os.path.join(d, "b.csv"), "w").write("1\\n")
    >>> read_keys(os.path.join(d, "*.csv"), None)[0].tolist()
    [1, 2, 1]
    """
    if is_request_format(fmt):
        ids = [t.block_ids for t in iter_request_chunks(spec, str(fmt))]
        return (np.concatenate(ids) if ids else np.zeros(0, np.int64)), None
    parts = list(iter_access_chunks(spec, fmt))
    if not parts:
        return np.zeros(0, np.uint64), None
    return np.concatenate([k for k, _ in parts]), joined_sizes(parts, spec)


def joined_sizes(parts: list[tuple[np.ndarray, np.ndarray | None]], source: Any) -> np.ndarray | None:
    """The sizes of several (keys, sizes) parts of one trace: None when no part has sizes, else
    every non-empty part must have them (a TraceFormatError names the mix). O(n).

    >>> joined_sizes([(np.array([1]), np.array([2])), (np.zeros(0), None)], "t").tolist()
    [2]
    """
    if all(s is None for _, s in parts):
        return None
    if any(s is None and k.shape[0] for k, s in parts):
        raise TraceFormatError(str(source), None, "some inputs have a size column and some do not: give every file "
                               "the size column or none")
    return np.concatenate([np.zeros(0, np.int64) if s is None else s for _, s in parts])


def read_as_requests(spec: str | Sequence[str], format: str | None, block_size: int | None = None,
                     skip_bad: bool = False, partial_last_block: bool = False) -> RequestTrace:
    """Any trace as a request trace: a request format read as it is (:func:`read_request_input`),
    an access stream (``key[,size]``) as one one-block request per access
    (:func:`~.access.access_as_requests`; a key whose size changes is a :class:`TraceFormatError`
    at its line). One file or streamed input. O(trace).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "k.csv"); _ = open(p, "w").write("7,2\\n8,3\\n7,2\\n")
    >>> t = read_as_requests(p, None); t.n_requests, t.block_tokens.tolist()
    (3, [2, 3, 2])
    """
    if is_request_format(format):
        return read_request_input(spec, str(format), block_size, skip_bad, partial_last_block)
    streamed = is_streamed(spec)  # several files, a glob, -, .gz/.zst
    access = AccessTrace(*read_keys(spec, format), str(spec)) if streamed else read_access_trace(input_specs(spec)[0], format)
    changed = first_size_change(access.keys, access.sizes)
    if changed is not None:
        where = f"{spec}: access {changed + 1:,}" if streamed else record_line(input_specs(spec)[0], format, changed)
        raise TraceFormatError(where, None, "this key has another size earlier; a key's size must be fixed")
    return access_as_requests(access, block_size)


def read_request_input(spec: str | Sequence[str], format: str = "mooncake", block_size: int | None = None,
                       skip_bad: bool = False, partial_last_block: bool = False) -> RequestTrace:
    """A whole request trace from ``spec``: one plain file by :func:`~.formats.read_requests`,
    anything streamed (several files, a glob, ``-``, ``.gz``/``.zst``) as its chunks joined in
    order. O(trace).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "m.jsonl.gz")
    >>> _ = gzip.open(p, "wt").write('{"timestamp": 0, "input_length": 9, "hash_ids": [1]}\\n')
    >>> read_request_input(p, block_size=16).block_ids.tolist()
    [1]
    """
    if not is_streamed(spec):
        return read_requests(input_specs(spec)[0], format, block_size, skip_bad, partial_last_block)
    chunks = list(iter_request_chunks(spec, format, block_size, skip_bad, partial_last_block))
    if len(chunks) == 1:  # one chunk keeps what a reader records beyond the blocks (workers, labels, schedule)
        chunks[0].source = str(spec)
        return chunks[0]
    return concat_requests(chunks, str(spec))


_BLOCK_BYTES = 1 << 25


def fast_delimited_chunks(path: str, suffix: str, lines: int = CHUNK_LINES) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """A delimited access trace in blocks of about 32 MB, each parsed by :func:`parse_int_lines`
    when it has the common form, else by the exact reader (same keys, sizes and errors). O(block).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv"); _ = open(p, "w").write("key,size\\n5,2\\n-1,3\\n")
    >>> [(k.view(np.int64).tolist(), s.tolist()) for k, s in fast_delimited_chunks(p, ".csv")]
    [([5, -1], [2, 3])]
    """
    parser = AccessLineParser(path, None, suffix)
    state = {"lines": 0, "cols": 0}
    for block in line_blocks(path):
        if state["lines"] == 0:
            head_end = _nth_newline(block, 1024)
            yield from _block_chunks(block[:head_end], parser, state, exact=True)
            block = block[head_end:]
        yield from _block_chunks(block, parser, state, exact=False)


def line_blocks(path: str) -> Iterator[bytes]:
    """The input (file, ``-``, ``.gz``/``.zst``) in blocks of whole lines of about 32 MiB, the
    UTF-8 BOM cut from the first; the file is closed when the blocks end or the reader stops.
    O(bytes).
    """
    stream = open_input(path)
    try:
        yield from whole_line_blocks(stream, _BLOCK_BYTES)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _nth_newline(block: bytes, n: int) -> int:
    """The offset just after the n-th newline of ``block`` (its end if fewer). O(offset)."""
    pos = 0
    for _ in range(n):
        nxt = block.find(b"\n", pos)
        if nxt < 0:
            return len(block)
        pos = nxt + 1
    return pos


def _block_chunks(block: bytes, parser: AccessLineParser, state: dict[str, int], exact: bool
                  ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """One block of whole lines: the fast parse when it applies, else the exact reader's."""
    if not block:
        return
    if not exact and parser.batches > 0 and parser.suffix in _DELIMITERS:
        keys, sizes, m, cols, ok = scan_in_halves(parse_int_lines, block, ord(_DELIMITERS[parser.suffix]))
        if ok and m and cols == state["cols"]:
            state["lines"] += block.count(b"\n")
            yield keys.view(np.uint64), (sizes if cols == 2 else None)
            return
    lines = [(state["lines"] + j + 1, raw.rstrip(b"\r")) for j, raw in enumerate(block.split(b"\n"))]
    lines = [(j, raw) for j, raw in lines if raw.strip()]
    state["lines"] += block.count(b"\n")
    if lines:
        keys_v, sizes_v = parser.parse(lines)
        state["cols"] = 2 if sizes_v is not None else 1
        yield keys_v, sizes_v
