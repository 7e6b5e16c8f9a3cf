"""Reader of NVIDIA Dynamo request traces (``dynamo.request.trace.v1`` JSONL).

One event a line (``{"timestamp": ..., "event": {...}}``, or the event object itself); only
``request_end`` events of ``dynamo.request.trace.v1`` (or ``dynamo.agent.trace.v1``, whose
request object is the same) are kept (others are skipped and not counted as malformed). The
file is in end order, so requests are ordered by ``request_received_ms``. Each request's
``replay.input_sequence_hashes`` are prefix-chained hashes of its prompt in blocks of
``replay.trace_block_size`` tokens (16), the final partial block included, so
``len(hashes) == ceil(input_length / block size)``. The worker is ``worker.prefill_worker_id``
(with ``prefill_dp_rank``, when a rank other than 0 appears: each data-parallel rank has its
own KV cache, see :func:`_workers`); the session is ``agent_context.session_id``; the engine's
own hit count is ``cached_tokens`` (-1 when absent). Dynamo omits what it did not observe:
``input_tokens`` falls back to ``replay.input_length``, a missing ``output_tokens`` is 0, and
missing times are handled by :func:`_schedule_ms`. The recorded schedule: a request starts
running when it was received plus its queueing time (``prefill_wait_time_ms`` when given, else
``ttft_ms - prefill_time_ms``, at least 0), ends prefill at ``request_received_ms + ttft_ms``
and finishes at ``request_received_ms + total_time_ms`` (then :func:`fcfs_starts` and
:func:`strict_schedule` remove rounding ties).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError

from ..lines import (
    UINT64_MAX,
    LineError,
    count_field,
    data_lines,
    field,
    int_array,
    json_object,
    shown,
)
from ..requests import RequestTrace

__all__ = ["fcfs_starts", "read_dynamo", "strict_schedule"]

_SCHEMA = "dynamo.request.trace.v1"
_SCHEMAS = (_SCHEMA, "dynamo.agent.trace.v1")  # the agent trace's request_end events have the same request object


def _number(obj: dict[str, Any], name: str, default: float | None = None) -> float:
    value = obj.get(name, default) if default is not None else field(obj, name)
    if type(value) not in (int, float) or not 0 <= value < 1e18:
        raise LineError(f"'{name}' must be a non-negative number, got {shown(value)}")
    return float(value)


def _object(obj: dict[str, Any], name: str) -> dict[str, Any]:
    value = field(obj, name)
    if type(value) is not dict:
        raise LineError(f"'{name}' must be an object, got {shown(value)}")
    return value


def _hashes(replay: dict[str, Any], input_length: int) -> tuple[list[int], int]:
    block = count_field(replay, "trace_block_size")
    hashes = field(replay, "input_sequence_hashes")
    if type(hashes) is not list or not all(type(h) is int and 0 <= h <= UINT64_MAX for h in hashes):
        raise LineError(f"'input_sequence_hashes' must be a list of integers in 0..2**64-1, got {shown(hashes)}")
    if block < 1 or len(hashes) != -(-input_length // block):
        raise LineError(f"input_sequence_hashes has {len(hashes)} entries but input_length {input_length} needs "
                        f"ceil({input_length}/{block}) = {-(-input_length // max(block, 1))} blocks of trace_block_size {block}")
    return hashes, block


def _optional(obj: dict[str, Any], name: str) -> float | None:
    """A non-negative number field, or None when absent or null (Dynamo omits what it did not observe)."""
    return None if obj.get(name) is None else _number(obj, name)


def _schedule_ms(request: dict[str, Any], received: float) -> tuple[float, float, float]:
    """(start, prefill end, finish) in ms: start = received + ``prefill_wait_time_ms`` (receipt to
    prefill start) when given, else received + ``ttft_ms - prefill_time_ms`` (at least 0); a
    missing ``ttft_ms`` is the wait plus the prefill time (no queueing when the wait is missing too)
    and a missing ``total_time_ms`` the ttft."""
    wait, prefill = _optional(request, "prefill_wait_time_ms"), _optional(request, "prefill_time_ms") or 0.0
    ttft, total = _optional(request, "ttft_ms"), _optional(request, "total_time_ms")
    if ttft is None:
        ttft = min((wait or 0.0) + prefill, total if total is not None else float("inf"))
    total = ttft if total is None else total
    if ttft > total:
        raise LineError(f"ttft_ms must be at most total_time_ms; got {ttft} and {total}")
    start = received + (min(wait, ttft) if wait is not None else max(ttft - prefill, 0.0))
    return start, received + ttft, received + total


def _request(event: dict[str, Any]) -> dict[str, Any]:
    """One request_end event's fields, checked."""
    request = _object(event, "request")
    worker = _object(request, "worker")
    replay = _object(request, "replay")
    context = event.get("agent_context") or {}
    input_length = count_field(request, "input_tokens") if request.get("input_tokens") is not None else count_field(replay, "input_length")
    hashes, block = _hashes(replay, input_length)
    received = _number(request, "request_received_ms")
    rank = worker.get("prefill_dp_rank")
    decode = count_field(worker, "decode_worker_id") if worker.get("decode_worker_id") is not None else None
    decode_rank = count_field(worker, "decode_dp_rank") if worker.get("decode_dp_rank") is not None else None
    return {
        "id": str(field(request, "request_id")), "input": input_length,
        "output": count_field(request, "output_tokens", default=0) if request.get("output_tokens") is not None else 0,
        "cached": count_field(request, "cached_tokens") if request.get("cached_tokens") is not None else -1,
        "received_ms": received, "schedule_ms": _schedule_ms(request, received),
        "worker": int(count_field(worker, "prefill_worker_id")), "rank": 0 if rank is None else count_field(worker, "prefill_dp_rank"),
        "decode": (decode, decode_rank),
        "session": str(context.get("session_id", "")), "hashes": hashes, "block": block,
    }


def _workers(rows: list[dict[str, Any]], decode: bool = False) -> np.ndarray:
    """The pool each request was prefilled in (or, with ``decode``, decoded in; a missing decode
    worker or rank is the prefill one): ``prefill_worker_id``, or, when some request names a data-
    parallel rank other than 0 (each rank has its own KV cache), the index of its (worker, rank)
    pair in sorted order. O(requests log requests)."""
    pre = [(r["worker"], r["rank"]) for r in rows]
    dec = [(p[0] if r["decode"][0] is None else r["decode"][0], p[1] if r["decode"][1] is None else r["decode"][1])
           for p, r in zip(pre, rows)]
    chosen = dec if decode else pre
    if all(rank == 0 for _, rank in pre + dec):
        return np.array([w for w, _ in chosen], np.int64)
    index = {p: i for i, p in enumerate(sorted(set(pre + dec)))}
    return np.array([index[p] for p in chosen], np.int64)


def _events(path: str | os.PathLike[str], skip_bad: bool) -> tuple[list[dict[str, Any]], int]:
    rows, skipped = [], 0
    for lineno, raw in data_lines(path):
        try:
            line = json_object(raw)
            event = _object(line, "event") if "event" in line or "request" not in line else line  # bare events too
            if event.get("schema", _SCHEMA) not in _SCHEMAS or event.get("event_type") != "request_end":
                continue
            rows.append(_request(event))
        except LineError as exc:
            if not skip_bad:
                raise TraceFormatError(path, lineno, str(exc)) from None
            skipped += 1
    return rows, skipped


def read_dynamo(path: str | os.PathLike[str], skip_bad: bool = False) -> RequestTrace:
    """Read a Dynamo request trace (see the module docstring). Complexity: O(file size).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "d.jsonl")
    >>> _ = open(path, "w").write('{"timestamp": 2100, "event": {"schema": "dynamo.request.trace.v1", '
    ...     '"event_type": "request_end", "agent_context": {"session_id": "demo:root"}, "request": '
    ...     '{"request_id": "r-2", "input_tokens": 40, "output_tokens": 7, "cached_tokens": 32, '
    ...     '"request_received_ms": 1700000001000, "prefill_time_ms": 12.5, "ttft_ms": 14.0, '
    ...     '"total_time_ms": 220.0, "worker": {"prefill_worker_id": 11, "decode_worker_id": 11}, '
    ...     '"replay": {"trace_block_size": 16, "input_length": 40, "input_sequence_hashes": [9001, 9002, 9003]}}}}\\n')
    >>> t = read_dynamo(path)
    >>> t.block_tokens.tolist(), t.workers.tolist(), t.engine_cached_tokens.tolist(), t.request_labels.tolist()
    ([16, 16, 8], [11], [32], ['r-2'])
    """
    rows, skipped = _events(path, skip_bad)
    rows.sort(key=lambda r: r["received_ms"])
    blocks = {r["block"] for r in rows}
    if len(blocks) > 1:
        raise TraceFormatError(path, None, f"every request must use one trace_block_size; got {sorted(blocks)}")
    block = blocks.pop() if blocks else 16
    counts = np.array([len(r["hashes"]) for r in rows], np.int64)
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int64)
    inputs = np.array([r["input"] for r in rows], np.int64)
    tokens = np.full(int(offsets[-1]), block, np.int64)
    has = counts > 0
    tokens[offsets[1:][has] - 1] = inputs[has] - block * (counts[has] - 1)
    flat = [h for r in rows for h in r["hashes"]]
    start = rows[0]["received_ms"] if rows else 0.0
    sessions: dict[str, int] = {}
    return RequestTrace(
        block_ids=int_array(flat, any(h > 2**63 - 1 for h in flat)), offsets=offsets, block_tokens=tokens,
        timestamps_s=np.array([(r["received_ms"] - start) / 1000 for r in rows]), input_length=inputs,
        output_length=np.array([r["output"] for r in rows], np.int64), block_size=block, source=os.fspath(path),
        session_ids=np.array([sessions.setdefault(r["session"], len(sessions)) for r in rows], np.int64),
        skipped=skipped, request_labels=np.array([r["id"] for r in rows], dtype=object),
        workers=_workers(rows), decode_workers=_workers(rows, decode=True),
        engine_cached_tokens=np.array([r["cached"] for r in rows], np.int64),
        recorded_schedule_s=strict_schedule(
            fcfs_starts(np.array([[(t - start) / 1000 for t in r["schedule_ms"]] for r in rows]).reshape(-1, 3),
                        _workers(rows)),
            np.array([r["output"] for r in rows], np.int64)),
    )


def fcfs_starts(times: np.ndarray, workers: np.ndarray, tolerance_s: float = 1e-3) -> np.ndarray:
    """Starts (column 0) made first-come first-served per worker where the recorded times
    invert the order by less than ``tolerance_s``. vLLM's waiting queue is FCFS, so on one
    worker requests are first scheduled in arrival order, and requests admitted in one
    scheduler step (which share a start) see each other's blocks in that order; but the start
    is recomputed from three rounded fields (``received + ttft - prefill``), so two requests of
    one step can come out a microsecond apart in the wrong order. An inversion below the
    tolerance (a scheduler step is longer) is taken as such a tie: the later-received request
    starts with the earlier one. Rows are in received order. O(requests).

    >>> fcfs_starts(np.array([[1.0005, 2, 3], [1.0004, 2, 3], [0.5, 2, 3]]), np.array([0, 0, 0]))[:, 0].tolist()
    [1.0005, 1.0005, 0.5]
    """
    out = times.astype(np.float64, copy=True)
    latest: dict[int, float] = {}
    for i, w in enumerate(workers.tolist()):
        seen = latest.get(w)
        if seen is not None and seen - tolerance_s < out[i, 0] < seen:
            out[i, 0] = seen
        latest[w] = max(out[i, 0], seen) if seen is not None else out[i, 0]
    return out


def strict_schedule(times: np.ndarray, output: np.ndarray, gap_s: float = 1e-6) -> np.ndarray:
    """The recorded (start, prefill end, finish) in seconds, made strictly increasing per request
    so the events replay in order: a one-token answer has ``ttft_ms == total_time_ms`` (prefill end
    = finish) and a request served at once can have ``ttft_ms == prefill_time_ms``. The prefill
    end is moved inside ``(start, finish)`` (it changes no hit: vLLM caches a prompt's blocks when
    it is scheduled), leaving ``gap_s`` per output token before the finish for the decode steps;
    the finish moves (later, by microseconds) only when the whole request took less than that.
    O(requests).

    >>> strict_schedule(np.array([[0.0, 1.0, 1.0], [2.0, 2.0, 3.0]]), np.array([1, 4])).tolist()
    [[0.0, 0.999999, 1.0], [2.0, 2.000001, 3.0]]
    """
    out = times.astype(np.float64, copy=True)
    if out.size == 0:
        return out
    steps = np.maximum(output, 1).astype(np.float64)
    start = out[:, 0]
    out[:, 2] = np.maximum(out[:, 2], start + gap_s * (steps + 1))
    out[:, 1] = np.minimum(np.maximum(out[:, 1], start + gap_s), out[:, 2] - gap_s * steps)
    return out
