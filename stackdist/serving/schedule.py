"""When each request arrives, ends its prefill and finishes, and the order the engine sees it.

This is the schedule of ``validation/SPEC.md`` (section *Schedules*): request ``i`` has
``arrival_s <= prefill_end_s <= finish_s``. Three ways to build one:

- :meth:`Schedule.serial`: concurrency 1, each request runs to completion before the next
  arrives (the times are a canonical spacing that only serves the event order);
- :meth:`Schedule.from_service_model`: ``arrival_s = (timestamp_ms - timestamp_ms of request 0) / 1000``,
  ``prefill_end_s = arrival_s + P / prefill_tokens_per_s``,
  ``finish_s = prefill_end_s + max(O, 1) / decode_tokens_per_s`` (defaults 10000 and 50 tokens/s;
  an engine generates at least one token, so a trace's ``output_length`` 0 counts as 1);
- :meth:`Schedule.read_csv`: a schedule CSV ``request,arrival_s,prefill_end_s,finish_s``.

:func:`event_order` turns a schedule into the engine's events, sorted by the SPEC's key
``(time, kind, request, k)`` with kind finish = 0, decode = 1, prefill_end = 2, arrival = 3;
decode step ``k = 1..O-1`` of request ``i`` happens at
``prefill_end_s + (finish_s - prefill_end_s) * k / O`` (float64, evaluated in that order).

>>> s = Schedule.serial(2)
>>> ev = event_order(s, np.array([3, 1]), decode=True)
>>> [(int(k), int(r), int(j)) for k, r, j in zip(ev.kind, ev.request, ev.k)]
[(3, 0, 0), (2, 0, 0), (1, 0, 1), (1, 0, 2), (0, 0, 0), (3, 1, 0), (2, 1, 0), (0, 1, 0)]
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stackdist.traces import RequestTrace
from stackdist.traces.side_inputs import SCHEDULE_HEADER, read_schedule_rows

__all__ = [
    "ARRIVAL",
    "DECODE",
    "FINISH",
    "PREFILL_END",
    "Events",
    "Schedule",
    "event_order",
]

FINISH = 0
DECODE = 1
PREFILL_END = 2
ARRIVAL = 3



@dataclass(frozen=True)
class Schedule:
    """Per-request times in seconds (float64 arrays of one length, file order).

    ``is_serial`` is True for a concurrency-1 schedule (each request finishes before the next one
    arrives), which the engine models use for their closed-form feasibility bounds.

    >>> Schedule.serial(3).n_requests
    3
    """

    arrival_s: np.ndarray
    prefill_end_s: np.ndarray
    finish_s: np.ndarray
    is_serial: bool = False

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("arrival_s", "prefill_end_s", "finish_s"):
            arr = np.ascontiguousarray(getattr(self, name), dtype=np.float64)
            if arr.ndim != 1 or len(arr) != n:
                raise ValueError(f"{name} must be a 1-d array of {n} times; got shape {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must be finite; got {arr[~np.isfinite(arr)][:3].tolist()}")
            object.__setattr__(self, name, arr)
        bad = np.flatnonzero((self.arrival_s > self.prefill_end_s) | (self.prefill_end_s > self.finish_s))
        if len(bad):
            i = int(bad[0])
            raise ValueError(
                "each request must have arrival_s <= prefill_end_s <= finish_s; "
                f"got request {i}: {self.arrival_s[i]}, {self.prefill_end_s[i]}, {self.finish_s[i]}"
            )

    @property
    def n_requests(self) -> int:
        """Number of requests scheduled.

        >>> Schedule.serial(0).n_requests
        0
        """
        return len(self.arrival_s)

    @classmethod
    def serial(cls, n_requests: int) -> Schedule:
        """Concurrency 1: request ``i`` arrives at ``i``, ends prefill at ``i + 1/4``, finishes
        at ``i + 1/2``, so every event of request ``i`` precedes every event of ``i + 1``.

        Complexity: O(n).

        >>> Schedule.serial(2).finish_s.tolist()
        [0.5, 1.5]
        """
        if isinstance(n_requests, bool) or int(n_requests) != n_requests or n_requests < 0:
            raise ValueError(f"n_requests must be a non-negative integer; got {n_requests!r}")
        base = np.arange(int(n_requests), dtype=np.float64)
        return cls(base, base + 0.25, base + 0.5, is_serial=True)

    @classmethod
    def from_service_model(
        cls,
        trace: RequestTrace,
        prefill_tokens_per_s: float = 10000.0,
        decode_tokens_per_s: float = 50.0,
    ) -> Schedule:
        """The SPEC's service model: arrival from the timestamps, prefill at
        ``prefill_tokens_per_s`` over the prompt, decode at ``decode_tokens_per_s`` per output token.

        Complexity: O(n), vectorised.

        >>> import numpy as np
        >>> t = RequestTrace(np.array([0, 1]), np.array([0, 1, 2]), np.array([16, 16]),
        ...     np.array([0.0, 2.0]), np.array([16, 16]), np.array([50, 100]), block_size=16)
        >>> Schedule.from_service_model(t, 16000, 50).finish_s.round(6).tolist()
        [1.001, 4.001]
        """
        for name, rate in (("prefill_tokens_per_s", prefill_tokens_per_s), ("decode_tokens_per_s", decode_tokens_per_s)):
            if isinstance(rate, bool) or not np.isfinite(rate) or rate <= 0:
                raise ValueError(f"{name} must be a positive finite number; got {rate!r}")
        ts = np.asarray(trace.timestamps_s, dtype=np.float64)
        ms = ts * 1000.0
        ms_int = np.rint(ms)
        if np.all(np.abs(ms - ms_int) < 1e-3):  # integer ms (Mooncake): the SPEC's exact arithmetic
            ms = ms_int
        arrival = (ms - ms[0]) / 1000.0 if len(ms) else ms.copy()
        prefill_end = arrival + np.asarray(trace.input_length, dtype=np.float64) / float(prefill_tokens_per_s)
        answer = np.maximum(np.asarray(trace.output_length, dtype=np.float64), 1.0)  # an engine emits >= 1 token
        finish = prefill_end + answer / float(decode_tokens_per_s)
        return cls(arrival, prefill_end, finish)

    @classmethod
    def read_csv(cls, path: str | os.PathLike[str], n_requests: int | None = None) -> Schedule:
        """Read a schedule CSV ``request,arrival_s,prefill_end_s,finish_s`` (one row per request,
        rows ``0..n-1`` in order). A malformed line raises :class:`stackdist.TraceFormatError`
        naming the file and 1-based line.

        Complexity: O(n).

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "s.csv")
        >>> _ = open(path, "w").write("request,arrival_s,prefill_end_s,finish_s" + chr(10) + "0,0.0,0.5,2.0" + chr(10))
        >>> Schedule.read_csv(path).finish_s.tolist()
        [2.0]
        """
        arr = read_schedule_rows(path, n_requests)
        return cls(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy())

    def write_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the schedule CSV that :meth:`read_csv` reads (``repr`` floats, exact round trip),
        atomically through :func:`stackdist.output.write_atomic` (``-`` is stdout).

        Complexity: O(n).

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "s.csv")
        >>> Schedule.serial(2).write_csv(path)
        >>> Schedule.read_csv(path, 2).arrival_s.tolist()
        [0.0, 1.0]
        """
        import io

        from stackdist.output import write_atomic  # the one atomic writer

        buf = io.StringIO(newline="")
        w = csv.writer(buf)
        w.writerow(SCHEDULE_HEADER)
        for i in range(self.n_requests):
            w.writerow([i, repr(float(self.arrival_s[i])), repr(float(self.prefill_end_s[i])), repr(float(self.finish_s[i]))])
        write_atomic(path, buf.getvalue())


@dataclass(frozen=True)
class Events:
    """Engine events in processing order: ``time`` (float64 s), ``kind`` (int8: FINISH, DECODE,
    PREFILL_END, ARRIVAL), ``request`` (int64) and ``k`` (int64 decode step, 0 otherwise)."""

    time: np.ndarray
    kind: np.ndarray
    request: np.ndarray
    k: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)


DecodeFilter = Callable[[np.ndarray, np.ndarray], np.ndarray]


def event_order(
    schedule: Schedule,
    output_tokens: np.ndarray,
    decode: bool,
    keep_decode: DecodeFilter | None = None,
) -> Events:
    """All events of ``schedule`` sorted by ``(time, kind, request, k)`` (SPEC.md).

    With ``decode`` request ``i`` has decode steps ``k = 1..O_i-1``; ``keep_decode(request, k)``
    (vectorised, returns a bool mask) may drop steps a model knows change nothing, which keeps
    the relative order of the rest. Complexity: O(E log E) for E events, vectorised.

    >>> ev = event_order(Schedule.serial(1), np.array([4]), decode=True, keep_decode=lambda r, k: k % 2 == 0)
    >>> ev.k.tolist()
    [0, 0, 2, 0]
    """
    out = np.asarray(output_tokens, dtype=np.int64)
    n = schedule.n_requests
    if out.shape != (n,):
        raise ValueError(f"output_tokens must have one entry per request ({n}); got shape {out.shape}")
    if np.any(out < 0):
        raise ValueError(f"output_tokens must be >= 0; got {int(out.min())}")
    reqs = np.arange(n, dtype=np.int64)
    parts_t = [schedule.finish_s, schedule.prefill_end_s, schedule.arrival_s]
    parts_kind = [np.full(n, FINISH, np.int8), np.full(n, PREFILL_END, np.int8), np.full(n, ARRIVAL, np.int8)]
    parts_r = [reqs, reqs, reqs]
    parts_k = [np.zeros(n, np.int64)] * 3
    if decode:
        steps = np.maximum(out - 1, 0)
        dr = np.repeat(reqs, steps)
        starts = np.cumsum(steps) - steps
        dk = np.arange(len(dr), dtype=np.int64) - np.repeat(starts, steps) + 1
        if keep_decode is not None:
            mask = np.asarray(keep_decode(dr, dk), dtype=bool)
            dr, dk = dr[mask], dk[mask]
        pe = schedule.prefill_end_s[dr]
        dt = pe + (schedule.finish_s[dr] - pe) * dk.astype(np.float64) / out[dr].astype(np.float64)
        parts_t.append(dt)
        parts_kind.append(np.full(len(dr), DECODE, np.int8))
        parts_r.append(dr)
        parts_k.append(dk)
    t = np.concatenate(parts_t)
    kind = np.concatenate(parts_kind)
    r = np.concatenate(parts_r)
    k = np.concatenate(parts_k)
    order = np.lexsort((k, r, kind, t))
    ev = Events(t[order], kind[order], r[order], k[order])
    _check_request_order(ev, n)
    return ev


def _check_request_order(ev: Events, n: int) -> None:
    """Each request's events must come arrival, prefill_end, decode steps, finish (a schedule
    whose times tie across kinds, e.g. a decode step at ``finish_s``, cannot be replayed)."""
    if n == 0:
        return
    pos = np.arange(len(ev), dtype=np.int64)
    first = np.full(n, len(ev), np.int64)
    last = np.full(n, -1, np.int64)
    np.minimum.at(first, ev.request, pos)
    np.maximum.at(last, ev.request, pos)
    arr = np.flatnonzero(ev.kind == ARRIVAL)
    fin = np.flatnonzero(ev.kind == FINISH)
    pe = np.flatnonzero(ev.kind == PREFILL_END)
    bad = np.zeros(n, bool)
    bad[ev.request[arr]] |= first[ev.request[arr]] != arr
    bad[ev.request[fin]] |= last[ev.request[fin]] != fin
    dec = np.flatnonzero(ev.kind == DECODE)
    pe_pos = np.empty(n, np.int64)
    pe_pos[ev.request[pe]] = pe
    bad[ev.request[dec]] |= dec < pe_pos[ev.request[dec]]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            "every request's events must sort as arrival < prefill_end < decode steps < finish "
            f"under the key (time, kind, request, k); request {i} does not (times tie across kinds)"
        )
