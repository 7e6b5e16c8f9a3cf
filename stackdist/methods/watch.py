"""Online planning over a growing trace: feed it lines as they arrive, ask for the answers of the
last interval and of everything so far at any time (what ``stackdist watch`` writes each interval).

The replay is per-access LRU (block by block for request traces), or for request traces with the
``engine`` semantics the engine's prefix semantics (a block counts as a hit when its whole prefix
hits: its effective depth); memory is O(distinct keys), or O(S) with a fixed-size sample. One
:class:`~stackdist.engine.scale.sampling.ShardsSampler` serves every method: exact is the sampler
at rate 1 (its hash is a bijection: every key kept, the exact curve), sampled is the method's
seeded filter (the first seed: one answer per interval).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.output import tool_header
from stackdist.traces.formats import is_request_format

from .method import EXACT, Method, Sampled

__all__ = ["OnlinePlan", "WatchOptions"]


@dataclass(frozen=True)
class WatchOptions:
    """What a watch answers: the trace's ``source`` (for messages) and ``format``, the request
    formats' ``block_size``, the ``semantics`` (``per-access`` or ``engine``), the ``method``
    (:class:`~.method.Exact` or :class:`~.method.Sampled`), the ``targets`` (fractions of the
    window's ceiling: the working set of 0.9 is the smallest capacity reaching 90% of an infinite
    cache's hits), the ``capacities`` whose hit rate is reported (in the trace's unit: blocks of a
    request trace), ``bytes_per_unit`` for the ``_bytes`` answers, ``window_intervals``: the
    trailing window is the last that many snapshots' intervals (named ``window_label``, e.g.
    ``10m``, in the answers), and ``capacity_labels``: how each capacity is named in the answers
    (default its number)."""

    source: str
    format: str | None
    block_size: int | None = None
    semantics: str = "per-access"
    method: Method = EXACT
    targets: Sequence[float] = (0.5, 0.9, 0.95, 0.99)
    capacities: Sequence[int] | None = None
    bytes_per_unit: int | None = None
    window_intervals: int = 1
    capacity_labels: Sequence[str] | None = None
    window_label: str = "interval"


class OnlinePlan:
    """The state of one watch: the sampler, the coverage counters and the last snapshot.

    Complexity: :meth:`feed` O(lines) plus the replay (O(log keys) per access);
    :meth:`snapshot` O(distinct distances + targets + capacities).

    >>> p = OnlinePlan(WatchOptions("t.csv", "csv", targets=(0.5, 1.0)))
    >>> p.feed([(1, b"1"), (2, b"2"), (3, b"1"), (4, b"2")])
    >>> r = p.snapshot(final=True); r["cumulative"]["accesses"], r["cumulative"]["working_set"]
    (4, {'0.5': 2, '1': 2})
    >>> p.snapshot(final=True)["window"]["ceiling_hit_rate"] is None  # no new access: no answer, not 0
    True
    """

    def __init__(self, options: WatchOptions) -> None:
        from stackdist.engine.scale.estimate import QuantileCounter
        from stackdist.engine.scale.sampling import ShardsSampler
        from stackdist.traces.stream_input import AccessLineParser

        self.options = options
        method = options.method
        self.sampled = isinstance(method, Sampled)
        self.sample_size = method.size if isinstance(method, Sampled) else None
        rate = method.rate if isinstance(method, Sampled) else 1.0  # a fixed-size sample starts at rate 1
        self.sampler = ShardsSampler(rate, self.sample_size, method.seed if isinstance(method, Sampled) else 0)
        self.requests = is_request_format(options.format)
        self.parser = None if self.requests else AccessLineParser(options.source, options.format)
        self.cover_all, self.cover_window = QuantileCounter(), QuantileCounter()
        self.n_requests = [0, 0]
        self.last = self.sampler.curve()
        # the trailing window: the curves at the last snapshots, and each interval's coverage and requests
        self.history: deque[Any] = deque([self.last], maxlen=max(options.window_intervals, 1))
        self.intervals_cover: deque[tuple[Any, int]] = deque(maxlen=max(options.window_intervals, 1))
        self.block_size = options.block_size
        self.tokens = 0
        self.intervals = 0
        self.pending: list[tuple[int, bytes]] = []  # lines taken from the reader, not replayed yet

    def flush(self) -> None:
        """Replay the pending lines. O(pending)."""
        batch, self.pending = self.pending, []
        self.feed(batch)

    def feed(self, lines: list[tuple[int, bytes]]) -> None:
        """Replay ``(line number, line)`` records (a malformed one names its file and line). O(lines)."""
        from stackdist.traces.stream_input import parse_request_lines

        if not lines:
            return
        if self.parser is not None:
            keys, sizes = self.parser.parse(lines)
            self.sampler.feed(keys, sizes)
            return
        trace = parse_request_lines(self.options.source, lines, str(self.options.format), self.options.block_size)
        self.block_size = trace.block_size
        self.tokens += int(trace.block_tokens.sum())
        if self.options.semantics == "engine":  # effective depths, already scaled
            d = self.sampler.feed_requests(trace.block_ids, trace.offsets)
            scaled = np.where((d >= 0) & (d != np.iinfo(np.int64).max), d, -1)
        else:
            got = self.sampler.feed(trace.block_ids)
            assert got is not None
            rate = self.sampler.rate
            scaled = np.where((got >= 0) & (got != np.iinfo(np.int64).max), np.ceil(got / rate), -1).astype(np.int64)
        lengths = np.diff(trace.offsets)
        has = lengths > 0
        needs = np.full(trace.n_requests, -1, np.int64)
        if trace.n_blocks:
            needs[has] = np.maximum.reduceat(scaled, trace.offsets[:-1][has])
        reused = needs[needs > 0]
        self.cover_all.add(reused)
        self.cover_window.add(reused)
        self.n_requests[0] += trace.n_requests
        self.n_requests[1] += trace.n_requests

    def _answers(self, curve: Any, cover: Any, n_requests: int) -> dict[str, Any]:
        """One scope's answers; every rate and size None when it has no access (no answer, not 0)."""
        unit = self.options.bytes_per_unit
        empty = curve.n_accesses == 0
        ws = {f"{t:g}": None if empty else curve.min_capacity_for(hits=t * curve.ceiling_hits) for t in self.options.targets}
        out: dict[str, Any] = {"accesses": curve.n_accesses, "ceiling_hit_rate": None if empty else curve.ceiling_hit_rate,
                               "targets_of": "ceiling", "working_set": ws}
        if self.requests and self.block_size:
            out["working_set_tokens"] = {k: None if v is None else v * self.block_size for k, v in ws.items()}
        if unit:
            out["working_set_bytes"] = {k: None if v is None else v * unit for k, v in ws.items()}
        if self.options.capacities is not None:
            names = self.options.capacity_labels or [str(c) for c in self.options.capacities]
            out["hit_rate"] = {name: None if empty else float(curve.hit_rate_at(c))
                               for name, c in zip(names, self.options.capacities)}
        if self.requests:
            out["coverage"] = {"requests": n_requests, "requests_with_reuse": cover.count,
                               **{f"p{q * 100:g}": cover.quantile(q) for q in (0.5, 0.9, 0.99)}}
        return out

    def snapshot(self, final: bool) -> dict[str, Any]:
        """The answers of the trailing window (the last ``window_intervals`` intervals, this one
        included: ``window``) and of everything so far (``cumulative``), as one JSON record;
        starts the next interval. O(distinct distances x window_intervals)."""
        now = self.sampler.curve()
        self.intervals_cover.append((self.cover_window, self.n_requests[1]))
        window_cover = _merged([c for c, _ in self.intervals_cover])
        window_requests = sum(n for _, n in self.intervals_cover)
        base = self.history[0]
        record = {**tool_header("watch"), "time_s": round(time.time(), 3), "interval": self.intervals, "final": final,
                  "sampled": self.sampled, "sample_rate": now.rate, "sample_size": self.sample_size,
                  "state_bytes": self.sampler.state_nbytes,
                  "window_info": {"label": self.options.window_label, "intervals": len(self.intervals_cover)},
                  "window": self._answers(now.since(base), window_cover, window_requests),
                  "cumulative": {**self._answers(now, self.cover_all, self.n_requests[0]),
                                 **({"tokens": self.tokens} if self.requests else {})}}
        self.history.append(now)
        self.last, self.intervals = now, self.intervals + 1
        self.cover_window = type(self.cover_window)()
        self.n_requests[1] = 0
        return record


def _merged(counters: Sequence[Any]) -> Any:
    """One :class:`~stackdist.engine.scale.estimate.QuantileCounter` holding every count of
    ``counters`` (their values are already rounded: merged exactly). O(bins log bins)."""
    from stackdist.engine.scale.estimate import QuantileCounter

    out = QuantileCounter()
    values = np.concatenate([c.values for c in counters] + [np.zeros(0, np.int64)])
    counts = np.concatenate([c.counts for c in counters] + [np.zeros(0, np.int64)])
    if values.size:
        order = np.argsort(values, kind="stable")
        values, counts = values[order], counts[order]
        starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
        out.values, out.counts = values[starts], np.add.reduceat(counts, starts)
    return out
