"""Reader of LMCache lookup-hash logs (the input of LMCache's own cache simulator).

An LMCache server started with ``--lookup-hash-log-dir DIR`` writes rotating JSONL files
``lookup_hashes_*.jsonl``, one lookup a line: ``timestamp`` (Unix seconds), ``request_id``,
``model_name``, ``chunk_size`` (tokens per chunk), ``seq_len`` (input tokens, the partial tail
included), ``dtypes`` and ``shapes`` (the KV tensors of one chunk) and ``chunk_hashes`` (hex
strings of the *complete* chunks only, head first, prefix-chained). Requests are ordered by
timestamp, as LMCache's simulator does; the tail (``seq_len mod chunk_size`` tokens) is never
a block, so it is always a miss, as in LMCache. A directory reads every ``lookup_hashes_*.jsonl``
in it, in name order.

KV bytes per chunk: the sum over the line's ``(shape, dtype)`` pairs of the shape's product x
the dtype's bytes, as LMCache's simulator computes them (``compute_kv_bytes_per_chunk`` in
``lmcache/tools/cache_simulator/simulator.py``, LMCache commit 0967a04, with its dtype table:
float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, int8, int32, int64; its README's example,
``shapes [[32, 256, 128]]`` of ``float8_e4m3fn`` at chunk_size 256, is 1 MiB a chunk). LMCache
counts an unknown dtype as 0 bytes with a warning; here it is an error naming the line (a plan
must not be silently wrong). Every line that states them must agree; the trace carries the value
as ``kv_bytes_per_block`` (None when no line states shapes and dtypes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError

from ..lines import LineError, count_field, data_lines, field, json_object, shown
from ..requests import RequestTrace

__all__ = ["DTYPE_BYTES", "chunk_bytes", "read_lmcache"]


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "int32": 4,
               "int64": 8}
"""LMCache's simulator's ``_DTYPE_BYTES`` (the module docstring's commit); ``torch.`` prefixes are dropped."""


def chunk_bytes(shapes: Any, dtypes: Any) -> int | None:
    """KV bytes of one chunk from a line's ``shapes`` and ``dtypes`` (None when either is absent
    or empty); a :class:`LineError` for a malformed pair or an unknown dtype. O(tensors).

    >>> chunk_bytes([[32, 256, 128]], ["float8_e4m3fn"]), chunk_bytes([[2, 4], [2, 4]], ["torch.bfloat16", "float32"])
    (1048576, 48)
    """
    if not shapes or not dtypes:
        return None
    if type(shapes) is not list or type(dtypes) is not list or len(shapes) != len(dtypes):
        raise LineError(f"'shapes' and 'dtypes' must be lists of the same length, got {shown(shapes)} and {shown(dtypes)}")
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        if type(shape) is not list or not shape or not all(type(d) is int and d > 0 for d in shape):
            raise LineError(f"each of 'shapes' must be a list of positive integers, got {shown(shape)}")
        name = dtype.removeprefix("torch.") if type(dtype) is str else None
        if name not in DTYPE_BYTES:
            raise LineError(f"'dtypes' entry {shown(dtype)} is not one of {', '.join(DTYPE_BYTES)}")
        size = DTYPE_BYTES[name]
        for d in shape:
            size *= d
        total += size
    return total


def _line(obj: dict[str, Any]) -> dict[str, Any]:
    chunk = count_field(obj, "chunk_size")
    seq_len = count_field(obj, "seq_len")
    hashes = field(obj, "chunk_hashes")
    if type(hashes) is not list or not all(type(h) is str and h for h in hashes):
        raise LineError(f"'chunk_hashes' must be a list of hash strings, got {shown(hashes)}")
    if chunk < 1 or len(hashes) > seq_len // chunk:
        raise LineError(f"chunk_hashes has {len(hashes)} entries but seq_len {seq_len} holds only "
                        f"{seq_len // max(chunk, 1)} complete chunks of {chunk} tokens")
    timestamp = obj.get("timestamp", 0.0)
    if type(timestamp) not in (int, float) or not 0 <= timestamp < 1e15:
        raise LineError(f"'timestamp' must be a non-negative number, got {shown(timestamp)}")
    return {"t": float(timestamp), "chunk": chunk, "seq_len": seq_len, "hashes": hashes,
            "id": str(obj.get("request_id", "")), "model": obj.get("model_name"),
            "bytes": chunk_bytes(obj.get("shapes"), obj.get("dtypes"))}


def _files(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("lookup_hashes_*.jsonl"))
        if not files:
            raise TraceFormatError(path, None, "this folder holds no lookup_hashes_*.jsonl files")
        return files
    return [p]


def read_lmcache(path: str | os.PathLike[str], skip_bad: bool = False, model: str | None = None) -> RequestTrace:
    """Read LMCache lookup-hash logs (a file or a folder; see the module docstring), optionally
    only the lookups of ``model``. Complexity: O(file size).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "lookup_hashes_0.jsonl")
    >>> _ = open(path, "w").write('{"timestamp": 2.0, "request_id": "b", "chunk_size": 256, "seq_len": 600, '
    ...                           '"chunk_hashes": ["0xaa", "0xbb"]}\\n'
    ...                           '{"timestamp": 1.0, "request_id": "a", "chunk_size": 256, "seq_len": 300, '
    ...                           '"chunk_hashes": ["0xaa"]}\\n')
    >>> t = read_lmcache(path)
    >>> t.request_labels.tolist(), t.block_ids.tolist(), t.input_length.tolist(), t.kv_bytes_per_block
    (['a', 'b'], [0, 0, 1], [300, 600], None)
    """
    rows, skipped = [], 0
    for file in _files(path):
        for lineno, raw in data_lines(file):
            try:
                row = _line(json_object(raw))
            except LineError as exc:
                if not skip_bad:
                    raise TraceFormatError(file, lineno, str(exc)) from None
                skipped += 1
                continue
            if model is None or row["model"] == model:
                rows.append(row)
    rows.sort(key=lambda r: r["t"])
    chunks = {r["chunk"] for r in rows}
    if len(chunks) > 1:
        raise TraceFormatError(path, None, f"every lookup must use one chunk_size; got {sorted(chunks)} (use --model to pick one)")
    chunk = chunks.pop() if chunks else 256
    sizes = {r["bytes"] for r in rows if r["bytes"] is not None}
    if len(sizes) > 1:
        raise TraceFormatError(path, None, f"every lookup must have one KV size per chunk; its shapes and dtypes give "
                               f"{', '.join(f'{b:,}' for b in sorted(sizes))} bytes (one model_name's lookups at a time)")
    ids: dict[str, int] = {}
    flat = [ids.setdefault(h.lower(), len(ids)) for r in rows for h in r["hashes"]]
    counts = np.array([len(r["hashes"]) for r in rows], np.int64)
    start = rows[0]["t"] if rows else 0.0
    return RequestTrace(
        block_ids=np.array(flat, np.int64), offsets=np.r_[0, np.cumsum(counts)].astype(np.int64),
        block_tokens=np.full(len(flat), chunk, np.int64), timestamps_s=np.array([r["t"] - start for r in rows]),
        input_length=np.array([r["seq_len"] for r in rows], np.int64), output_length=np.zeros(len(rows), np.int64),
        block_size=chunk, source=os.fspath(path), skipped=skipped,
        request_labels=np.array([r["id"] for r in rows], dtype=object),
        kv_bytes_per_block=sizes.pop() if sizes else None,
    )
