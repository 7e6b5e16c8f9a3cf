"""Seeded workload generators and trace replay, all producing a :class:`Workload`.

A request is a list of block ids, head first, with prefix-chained identity: two requests share
a block id only if they share the whole prompt up to the end of that block (as vLLM's and
Mooncake's block hashes do). A prompt's final partial block gets an id of its own that is
never reused. Outputs are not cached: the next turn's prompt holds the previous answer as new
blocks (Mooncake's convention).

Generators (every parameter is a keyword with the default shown in its signature):

- :func:`chat`: N concurrent multi-turn chat sessions; each turn appends the previous answer
  and a new user message; a session restarts with a fresh conversation when its prompt would
  exceed ``max_context_tokens``; each session stops once it has made ``accesses_per_session``
  block accesses (the paper: 6 sessions of 4,000 accesses). Think time between a session's
  turns is exponential.
- :func:`agent`: agent loops; each step appends a tool call and a tool output; with
  probability ``revisit_prob`` the agent instead returns to the state right after one of its
  ``revisit_window`` most recent tool outputs and continues from there (a retry / backtrack,
  which reuses that prefix exactly).
- :func:`docqa`: repeated document QA: a question about one of ``n_docs`` documents chosen by a
  Zipf(``zipf_s``) popularity; prompt = system + document + question; Poisson arrivals.
- :func:`from_mooncake`: replay a Mooncake trace through ``stackdist.traces.read_mooncake``.

A workload converts to and from the project's one request-trace type,
:class:`stackdist.traces.RequestTrace` (:meth:`Workload.to_request_trace`,
:meth:`Workload.from_request_trace`); :func:`write_mooncake` writes that trace as Mooncake JSONL,
so a generated workload can also be planned with ``stackdist plan``.

Token lengths drawn "around a mean" are lognormal with sigma 0.6 and that mean, rounded, >= 1.

>>> w = chat(n_sessions=2, accesses_per_session=50, seed=1)
>>> w.n_requests > 0 and w.n_accesses >= 100
True
>>> w == chat(n_sessions=2, accesses_per_session=50, seed=1)
True
>>> Workload.from_request_trace(w.to_request_trace()) == w
True
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stackdist.errors import require_data
from stackdist.output import write_atomic
from stackdist.traces import RequestTrace, read_mooncake
from stackdist.traces import reblock as reblock_trace

__all__ = ["GENERATORS", "Workload", "agent", "chat", "docqa", "from_mooncake", "mooncake_jsonl", "write_mooncake"]


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests as flat arrays: request r's blocks are ``blocks[offsets[r]:offsets[r+1]]``."""

    name: str
    blocks: np.ndarray
    offsets: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray
    session: np.ndarray
    block_tokens: int
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.input_tokens)
        if len(self.offsets) != n + 1 or (n and (self.offsets[0] != 0 or self.offsets[-1] != len(self.blocks))):
            raise ValueError("offsets must have one entry per request plus one, from 0 to the number of blocks.")
        if np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must be non-decreasing.")
        for name in ("output_tokens", "arrival_s", "session"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} must have one entry per request ({n}), got {len(getattr(self, name))}.")
        if np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("arrival_s must be non-decreasing (requests in arrival order).")
        if self.block_tokens <= 0:
            raise ValueError(f"block_tokens must be a positive int, got {self.block_tokens!r}.")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        arrays = ("blocks", "offsets", "input_tokens", "output_tokens", "arrival_s", "session")
        return (
            self.name == other.name
            and self.block_tokens == other.block_tokens
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays)
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def n_requests(self) -> int:
        return len(self.input_tokens)

    @property
    def n_accesses(self) -> int:
        return len(self.blocks)

    @property
    def n_distinct_blocks(self) -> int:
        return int(np.unique(self.blocks).size)

    def request_blocks(self, r: int) -> list[int]:
        """Block ids of request ``r``, head first."""
        return self.blocks[self.offsets[r] : self.offsets[r + 1]].tolist()

    def session_footprint_blocks(self) -> float:
        """Mean over sessions of the largest request (in blocks) each session made."""
        lengths = np.diff(self.offsets)
        largest: dict[int, int] = {}
        for s, length in zip(self.session.tolist(), lengths.tolist()):
            largest[s] = max(largest.get(s, 0), length)
        return float(np.mean(list(largest.values()))) if largest else 0.0

    def head(self, n_requests: int) -> Workload:
        """The first ``n_requests`` requests as a workload."""
        n = min(n_requests, self.n_requests)
        end = int(self.offsets[n])
        return Workload(
            self.name, self.blocks[:end], self.offsets[: n + 1], self.input_tokens[:n], self.output_tokens[:n],
            self.arrival_s[:n], self.session[:n], self.block_tokens, dict(self.params, head=n),
        )

    def summary(self) -> dict[str, Any]:
        """Counts for reports."""
        return {
            "name": self.name,
            "requests": self.n_requests,
            "block_accesses": self.n_accesses,
            "distinct_blocks": self.n_distinct_blocks,
            "block_tokens": self.block_tokens,
            "sessions": int(np.unique(self.session).size),
            "params": self.params,
        }

    def to_request_trace(self) -> RequestTrace:
        """The workload as a :class:`~stackdist.traces.RequestTrace` (``source`` = its name).

        Every block holds ``block_tokens`` tokens except a request's last, which holds what is
        left of ``input_tokens`` (at most ``block_tokens``): the Mooncake convention, where
        ``len(hash_ids) == ceil(input_length / block_size)``. Sessions become ``session_ids``.
        ValueError (from RequestTrace) when a request's tokens do not reach its last block.
        O(blocks).
        """
        lengths = np.diff(self.offsets)
        block_tokens = np.full(self.n_accesses, self.block_tokens, np.int64)
        has_blocks = lengths > 0
        last = np.minimum(self.block_tokens, self.input_tokens - self.block_tokens * (lengths - 1))
        block_tokens[self.offsets[1:][has_blocks] - 1] = last[has_blocks]
        return RequestTrace(
            block_ids=np.asarray(self.blocks, np.int64), offsets=np.asarray(self.offsets, np.int64),
            block_tokens=block_tokens, timestamps_s=self.arrival_s, input_length=self.input_tokens,
            output_length=self.output_tokens, block_size=self.block_tokens, source=self.name,
            session_ids=np.asarray(self.session, np.int64),
        )

    @classmethod
    def from_request_trace(
        cls, trace: RequestTrace, name: str | None = None, params: dict[str, Any] | None = None,
        session_block: int = 1,
    ) -> Workload:
        """A workload replaying ``trace`` in file order (``name`` defaults to its ``source``).

        Block ids are kept (uint64 ids are viewed as int64: a bijection). The session of a
        request is the trace's session id when it has them, else the id of the request's block
        ``session_block`` (a request's first block is often a shared system prompt), or of its
        first block when it is shorter. Every block takes a page: ``block_tokens`` is the
        trace's ``block_size``. ValueError when the timestamps decrease. O(blocks).
        """
        ids = np.asarray(trace.block_ids)
        blocks = ids.view(np.int64) if ids.dtype == np.uint64 else ids.astype(np.int64)  # bijective
        offsets = np.asarray(trace.offsets, dtype=np.int64)
        arrival = np.asarray(trace.timestamps_s, dtype=np.float64)
        if np.any(np.diff(arrival) < 0):
            raise ValueError(f"{trace.source}: timestamps must not decrease (requests are replayed in file order).")
        if trace.session_ids is not None:
            session = np.asarray(trace.session_ids, dtype=np.int64)
        else:
            starts, ends = offsets[:-1], offsets[1:]
            pick = np.where(ends - starts > session_block, starts + session_block, starts)
            session = blocks[np.minimum(pick, max(0, len(blocks) - 1))] if len(blocks) else np.zeros(len(starts), np.int64)
        return cls(
            name=trace.source if name is None else name, blocks=blocks, offsets=offsets,
            input_tokens=np.asarray(trace.input_length, dtype=np.int64),
            output_tokens=np.asarray(trace.output_length, dtype=np.int64), arrival_s=arrival, session=session,
            block_tokens=int(trace.block_size), params=dict(params or {}),
        )


class _Builder:
    """Accumulates requests, then sorts them by arrival into a :class:`Workload`."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, int, list[int], int, int, int]] = []
        self._next_id = 0

    def new_ids(self, count: int) -> list[int]:
        start = self._next_id
        self._next_id += count
        return list(range(start, start + count))

    def add(self, arrival: float, session: int, ids: list[int], tokens: int, out: int) -> None:
        self.requests.append((arrival, len(self.requests), ids, tokens, out, session))

    def build(self, name: str, block_tokens: int, params: dict[str, Any]) -> Workload:
        self.requests.sort(key=lambda item: (item[0], item[1]))
        lengths = [len(item[2]) for item in self.requests]
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        blocks = np.fromiter((b for item in self.requests for b in item[2]), dtype=np.int64, count=int(offsets[-1]))
        return Workload(
            name=name,
            blocks=blocks,
            offsets=offsets,
            input_tokens=np.array([item[3] for item in self.requests], dtype=np.int64),
            output_tokens=np.array([item[4] for item in self.requests], dtype=np.int64),
            arrival_s=np.array([item[0] for item in self.requests], dtype=np.float64),
            session=np.array([item[5] for item in self.requests], dtype=np.int64),
            block_tokens=block_tokens,
            params=params,
        )


class _Context:
    """A growing prompt with chained block ids: full blocks keep their ids as it grows."""

    def __init__(self, builder: _Builder, shared_ids: list[int], block_tokens: int) -> None:
        self.builder, self.block_tokens = builder, block_tokens
        self.ids = list(shared_ids)
        self.tokens = len(shared_ids) * block_tokens

    def extend(self, tokens: int) -> None:
        self.tokens += tokens
        full = self.tokens // self.block_tokens
        if full > len(self.ids):
            self.ids.extend(self.builder.new_ids(full - len(self.ids)))

    def truncate(self, tokens: int, n_ids: int) -> None:
        self.tokens = tokens
        del self.ids[n_ids:]

    def request_ids(self) -> list[int]:
        """The prompt's blocks: the full ones, then a fresh id for a partial tail."""
        tail = self.builder.new_ids(1) if self.tokens % self.block_tokens else []
        return self.ids[: self.tokens // self.block_tokens] + tail


def _lengths(rng: np.random.Generator, mean: float) -> int:
    sigma = 0.6
    return max(1, round(rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma)))


def _check_positive(**values: float) -> None:
    """ValueError unless every value is a positive finite number (infinity would never end)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}.")
        if value == math.inf:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}.")


def chat(
    n_sessions: int = 6,
    accesses_per_session: int = 4000,
    block_tokens: int = 16,
    system_tokens: int = 512,
    user_tokens_mean: float = 120.0,
    output_tokens_mean: float = 250.0,
    think_time_s: float = 20.0,
    max_context_tokens: int = 32768,
    seed: int = 0,
) -> Workload:
    """Long multi-turn chat: ``n_sessions`` concurrent sessions sharing a system prompt."""
    _check_positive(n_sessions=n_sessions, accesses_per_session=accesses_per_session, block_tokens=block_tokens,
                    user_tokens_mean=user_tokens_mean, output_tokens_mean=output_tokens_mean,
                    think_time_s=think_time_s, max_context_tokens=max_context_tokens)
    params = dict(locals())
    rng = np.random.default_rng(seed)
    builder = _Builder()
    shared = builder.new_ids(system_tokens // block_tokens)
    for session in range(n_sessions):
        context = _Context(builder, shared, block_tokens)
        context.extend(system_tokens - len(shared) * block_tokens)
        clock = float(rng.uniform(0.0, think_time_s))
        made, previous_out = 0, 0
        while made < accesses_per_session:
            user = _lengths(rng, user_tokens_mean)
            if context.tokens + previous_out + user > max_context_tokens:
                context = _Context(builder, shared, block_tokens)
                context.extend(system_tokens - len(shared) * block_tokens)
                previous_out = 0
            context.extend(previous_out + user)
            ids = context.request_ids()
            out = _lengths(rng, output_tokens_mean)
            builder.add(clock, session, ids, context.tokens, out)
            made += len(ids)
            previous_out = out
            clock += float(rng.exponential(think_time_s))
    return builder.build("chat", block_tokens, params)


def agent(
    n_agents: int = 4,
    steps_per_agent: int = 150,
    block_tokens: int = 16,
    system_tokens: int = 2048,
    task_tokens_mean: float = 256.0,
    call_tokens_mean: float = 60.0,
    tool_output_tokens_mean: float = 600.0,
    revisit_prob: float = 0.3,
    revisit_window: int = 4,
    max_context_tokens: int = 32768,
    step_time_s: float = 3.0,
    seed: int = 0,
) -> Workload:
    """Agent loops that append tool outputs and often return to a recent tool output."""
    _check_positive(n_agents=n_agents, steps_per_agent=steps_per_agent, block_tokens=block_tokens,
                    task_tokens_mean=task_tokens_mean, call_tokens_mean=call_tokens_mean,
                    tool_output_tokens_mean=tool_output_tokens_mean, revisit_window=revisit_window,
                    max_context_tokens=max_context_tokens, step_time_s=step_time_s)
    if not 0.0 <= revisit_prob <= 1.0:
        raise ValueError(f"revisit_prob must be a probability in [0, 1], got {revisit_prob!r}.")
    params = dict(locals())
    rng = np.random.default_rng(seed)
    builder = _Builder()
    shared = builder.new_ids(system_tokens // block_tokens)

    def fresh_task() -> tuple[_Context, list[tuple[int, int]]]:
        context = _Context(builder, shared, block_tokens)
        context.extend(system_tokens - len(shared) * block_tokens + _lengths(rng, task_tokens_mean))
        return context, []

    for session in range(n_agents):
        context, checkpoints = fresh_task()
        clock = float(rng.uniform(0.0, step_time_s))
        for _ in range(steps_per_agent):
            if checkpoints and rng.random() < revisit_prob:
                recent = checkpoints[-revisit_window:]
                pick = int(rng.integers(len(recent)))
                tokens, n_ids = recent[pick]
                del checkpoints[len(checkpoints) - len(recent) + pick + 1 :]
                context.truncate(tokens, n_ids)
            else:
                growth = _lengths(rng, call_tokens_mean) + _lengths(rng, tool_output_tokens_mean)
                if context.tokens + growth > max_context_tokens:
                    context, checkpoints = fresh_task()
                context.extend(growth)
                checkpoints.append((context.tokens, len(context.ids)))
            builder.add(clock, session, context.request_ids(), context.tokens, _lengths(rng, call_tokens_mean))
            clock += float(rng.exponential(step_time_s))
    return builder.build("agent", block_tokens, params)


def docqa(
    n_docs: int = 32,
    n_questions: int = 1500,
    doc_tokens: int = 4864,
    block_tokens: int = 16,
    system_tokens: int = 256,
    question_tokens_mean: float = 32.0,
    output_tokens_mean: float = 64.0,
    zipf_s: float = 1.1,
    rate_per_s: float = 2.0,
    seed: int = 0,
) -> Workload:
    """Repeated document QA: Zipf-popular documents behind a shared system prompt."""
    _check_positive(n_docs=n_docs, n_questions=n_questions, doc_tokens=doc_tokens, block_tokens=block_tokens,
                    question_tokens_mean=question_tokens_mean, output_tokens_mean=output_tokens_mean,
                    zipf_s=zipf_s, rate_per_s=rate_per_s)
    params = dict(locals())
    rng = np.random.default_rng(seed)
    builder = _Builder()
    shared = builder.new_ids(system_tokens // block_tokens)
    documents = []
    for _ in range(n_docs):
        context = _Context(builder, shared, block_tokens)
        context.extend(system_tokens - len(shared) * block_tokens + doc_tokens)
        documents.append((context.tokens, list(context.ids)))
    weights = 1.0 / np.arange(1, n_docs + 1, dtype=float) ** zipf_s
    popularity = rng.permutation(n_docs)
    clock = 0.0
    for _ in range(n_questions):
        doc = int(popularity[rng.choice(n_docs, p=weights / weights.sum())])
        tokens, ids = documents[doc]
        context = _Context(builder, [], block_tokens)
        context.ids, context.tokens = list(ids), tokens
        context.extend(_lengths(rng, question_tokens_mean))
        clock += float(rng.exponential(1.0 / rate_per_s))
        builder.add(clock, doc, context.request_ids(), context.tokens, _lengths(rng, output_tokens_mean))
    return builder.build("docqa", block_tokens, params)


def from_mooncake(path: str | Path, block_size: int = 512, reblock: int | None = None) -> Workload:
    """Replay a Mooncake trace read by ``stackdist.traces.read_mooncake`` (optionally re-blocked).

    The session key of a request is the trace's session id when it has one, else the id of its
    second coarse block (the first is the shared system prompt in the conversation trace), or
    of its first block (:meth:`Workload.from_request_trace`). Every block counts as a full block
    (a partial tail still takes a page). A trace without requests is an
    :class:`~stackdist.errors.EmptyInputError` naming the file (exit 1 on the command line).
    """
    trace = read_mooncake(path, block_size=block_size)
    require_data(trace.n_requests, path, "no requests (the trace is empty or holds only blank lines)")
    if reblock is not None:
        trace = reblock_trace(trace, reblock)
    skip = max(1, block_size // int(trace.block_size))  # pages of the first coarse block
    workload = Workload.from_request_trace(
        trace, name=f"mooncake:{Path(path).stem}", params={"path": str(path), "block_size": block_size, "reblock": reblock},
        session_block=skip,
    )
    require_data(workload.n_accesses, path, "no block accesses (every request's prompt is empty)")
    return workload


def mooncake_jsonl(trace: RequestTrace) -> str:
    """``trace`` as Mooncake JSONL: one ``{"timestamp": ms, "input_length", "output_length",
    "hash_ids"}`` line per request, in order (ids as unsigned 64-bit integers).

    ``stackdist.traces.read_mooncake(path, block_size=trace.block_size)`` reads it back (the
    hash ids, lengths and block tokens exactly; timestamps to float precision), when every
    request has ``ceil(input_length / block_size)`` blocks, as :meth:`Workload.to_request_trace`
    makes them. O(blocks).
    """
    ids = trace.block_ids.view(np.uint64) if trace.block_ids.dtype == np.int64 else trace.block_ids
    flat, offsets = ids.tolist(), trace.offsets.tolist()
    stamps, inputs, outputs = (trace.timestamps_s * 1e3).tolist(), trace.input_length.tolist(), trace.output_length.tolist()
    lines = [
        json.dumps({"timestamp": stamps[r], "input_length": inputs[r], "output_length": outputs[r],
                    "hash_ids": flat[offsets[r] : offsets[r + 1]]})
        for r in range(trace.n_requests)
    ]
    return "".join(line + "\n" for line in lines)


def write_mooncake(path: str | os.PathLike[str], trace: RequestTrace) -> None:
    """Write ``trace`` as Mooncake JSONL (:func:`mooncake_jsonl`) to ``path`` atomically."""
    write_atomic(path, mooncake_jsonl(trace))


#: The seeded generators by name (each takes keyword parameters only, ``seed`` included).
GENERATORS: dict[str, Callable[..., Workload]] = {"chat": chat, "agent": agent, "docqa": docqa}
