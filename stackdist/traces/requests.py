"""RequestTrace: LLM requests as numpy arrays, each a list of prefix-chained prompt KV blocks.

The one request-trace type of the project: every reader returns it, every serving model and
planner reads it (the placement simulator's workloads convert to and from it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError, UsageError

from .lines import fit_int_keys

__all__ = ["RequestTrace", "assemble", "check_block_size", "concat_requests"]



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
    Qwen ``chat_id``, or None). Engine logs add: ``request_labels`` (the log's own request ids as
    strings, or None), ``workers`` (int64 worker each request ran on, or None),
    ``engine_cached_tokens`` (int64 prompt tokens the engine reported serving from cache, or
    None) and ``recorded_schedule_s`` (float64, shape (n, 3): when each request started running,
    ended prefill and finished, in seconds on the ``timestamps_s`` clock, or None). Token-id
    files with output ids add ``answer_block_ids`` (object array: per request, the chained ids,
    in the trace's block ids, of the full blocks of prompt + answer beyond the full prompt blocks,
    i.e. the blocks an engine fills while decoding; or None; see :mod:`stackdist.traces.tokens`).
    Dynamo logs add ``decode_workers`` (int64, the worker that decoded each request, in the ids
    of ``workers``: another one under disaggregated prefill, where the answer's KV stays there).
    LMCache logs add ``kv_bytes_per_block`` (the KV bytes of one full block as the log's own
    ``shapes`` and ``dtypes`` state them, or None).

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
    request_labels: np.ndarray | None = None
    workers: np.ndarray | None = None
    engine_cached_tokens: np.ndarray | None = None
    recorded_schedule_s: np.ndarray | None = None
    answer_block_ids: np.ndarray | None = None
    decode_workers: np.ndarray | None = None
    kv_bytes_per_block: int | None = None

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
        for name in ("workers", "engine_cached_tokens"):
            if getattr(self, name) is not None:
                setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        if self.request_labels is not None:
            self.request_labels = np.asarray(self.request_labels, dtype=object)
        if self.recorded_schedule_s is not None:
            self.recorded_schedule_s = np.asarray(self.recorded_schedule_s, dtype=np.float64).reshape(-1, 3)
        self._check()

    @classmethod
    def from_blocks(
        cls,
        requests: Sequence[Sequence[int]],
        block_size: int = 16,
        last_tokens: Sequence[int] | None = None,
        output_length: Sequence[int] | None = None,
    ) -> RequestTrace:
        """A trace from per-request lists of block ids: full blocks, or ``last_tokens[r]`` tokens in
        request r's last block; one request per second; prompts exactly cover their blocks. O(blocks).

        >>> t = RequestTrace.from_blocks([[7, 8], [7]], block_size=4, last_tokens=[3, 4])
        >>> t.input_length.tolist(), t.block_tokens.tolist()
        ([7, 4], [4, 3, 4])
        """
        lengths = [len(r) for r in requests]
        offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        tokens = np.full(int(offsets[-1]), block_size, np.int64)
        if last_tokens is not None:
            has_blocks = np.asarray(lengths) > 0
            tokens[offsets[1:][has_blocks] - 1] = np.asarray(last_tokens, np.int64)[has_blocks]
        cumulative = np.r_[0, np.cumsum(tokens)]
        n = len(requests)
        outputs = np.zeros(n, np.int64) if output_length is None else np.asarray(output_length, np.int64)
        ids = _as_id_array([b for r in requests for b in r])
        return cls(ids, offsets, tokens, np.arange(n, dtype=float), cumulative[offsets[1:]] - cumulative[offsets[:-1]],
                   outputs, block_size=block_size)

    @property
    def n_requests(self) -> int:
        """Number of requests. O(1).

        >>> RequestTrace.from_blocks([[0], [0, 1]]).n_requests
        2
        """
        return int(self.offsets.shape[0]) - 1

    @property
    def n_blocks(self) -> int:
        """Number of block accesses (all requests' blocks together). O(1).

        >>> RequestTrace.from_blocks([[0], [0, 1]]).n_blocks
        3
        """
        return int(self.block_ids.shape[0])

    def request_blocks(self, r: int) -> np.ndarray:
        """Block ids of request ``r`` (a view), head first. O(1).

        >>> RequestTrace.from_blocks([[0], [0, 1]]).request_blocks(-1).tolist()
        [0, 1]
        """
        if not -self.n_requests <= r < self.n_requests:
            raise IndexError(f"request index {r} is out of range for {self.n_requests} requests")
        r %= self.n_requests
        return self.block_ids[self.offsets[r] : self.offsets[r + 1]]

    def blocks_per_request(self) -> np.ndarray:
        """Number of blocks of each request (int64). O(requests).

        >>> RequestTrace.from_blocks([[0], [0, 1]]).blocks_per_request().tolist()
        [1, 2]
        """
        return np.diff(self.offsets)

    def select(self, which: slice | np.ndarray | list[int] | list[bool]) -> RequestTrace:
        """A sub-trace of the chosen requests, in the given order.

        ``which`` is a slice, a boolean mask of length n_requests, or an array of request
        indices. Complexity: O(requests + blocks selected).

        >>> RequestTrace.from_blocks([[0], [0, 1], [2]]).select([2, 0]).block_ids.tolist()
        [2, 0]
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
            request_labels=pick(self.request_labels),
            workers=pick(self.workers),
            engine_cached_tokens=pick(self.engine_cached_tokens),
            recorded_schedule_s=pick(self.recorded_schedule_s),
            answer_block_ids=pick(self.answer_block_ids),
            decode_workers=pick(self.decode_workers),
            kv_bytes_per_block=self.kv_bytes_per_block,
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
        for name in ("timestamps_s", "input_length", "output_length", "session_ids", "request_ids",
                     "request_labels", "workers", "engine_cached_tokens", "recorded_schedule_s"):
            values = getattr(self, name)
            if values is not None and values.shape[:1] != (n,):
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
    fitted = fit_int_keys(listed)
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


def assemble(
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
    """Build a RequestTrace from per-request Python lists and the flat block id array (the
    readers' shared last step; each request's final block gets its real token count)."""
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


def check_block_size(block_size: Any) -> int:
    """A positive integer block size, else UsageError.

    >>> check_block_size(16)
    16
    """
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise UsageError(f"block_size must be a positive integer (tokens per KV block), got {block_size!r}")
    return int(block_size)


def concat_requests(traces: Sequence[RequestTrace], source: str = "") -> RequestTrace:
    """One request trace from chunks in order (all of one block size). O(total size).

    >>> a = RequestTrace.from_blocks([[1, 2]], block_size=4); b = RequestTrace.from_blocks([[1]], block_size=4)
    >>> t = concat_requests([a, b], "x"); t.offsets.tolist(), t.block_ids.tolist(), t.source
    ([0, 2, 3], [1, 2, 1], 'x')
    """
    if not traces:
        raise TraceFormatError(source or "-", None, "no requests in the input")
    sizes = {t.block_size for t in traces}
    if len(sizes) != 1:
        raise UsageError(f"the input files have different block sizes: {sorted(sizes)}")
    big = any(t.block_ids.dtype == np.uint64 for t in traces)
    starts = np.cumsum([0] + [t.n_blocks for t in traces[:-1]])
    offsets = np.concatenate([np.zeros(1, np.int64)] + [t.offsets[1:] + b for t, b in zip(traces, starts)])

    def joined(name: str) -> np.ndarray | None:
        parts = [getattr(t, name) for t in traces]
        return None if any(p is None for p in parts) else np.concatenate(parts)

    def required(name: str) -> np.ndarray:
        return np.concatenate([getattr(t, name) for t in traces])

    ids = np.concatenate([t.block_ids.astype(np.uint64) if big else t.block_ids for t in traces])
    return RequestTrace(ids, offsets, required("block_tokens"), required("timestamps_s"), required("input_length"),
                        required("output_length"), block_size=traces[0].block_size, source=source or traces[0].source,
                        session_ids=joined("session_ids"), skipped=sum(t.skipped for t in traces),
                        request_ids=joined("request_ids"))
