"""The per-request CSV: one row per request in replay order, the hit tokens at each pool size."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence

import numpy as np

from stackdist.output import write_atomic
from stackdist.traces import RequestTrace

__all__ = ["PER_REQUEST_COLUMNS", "per_request_text", "write_per_request"]

PER_REQUEST_COLUMNS = ("request", "id", "arrival_s", "worker", "input_tokens", "output_tokens")


def per_request_text(trace: RequestTrace, hit_columns: Sequence[tuple[str, np.ndarray]],
                     arrival_s: np.ndarray | None = None, workers: np.ndarray | None = None) -> str:
    """The CSV text: ``request`` (0-based position), ``id`` (the trace's request id, else the
    position), ``arrival_s`` (from the first request), ``worker`` (``workers`` when given: the
    worker a router chose; else the trace's own, 0 when it has none), the prompt and output
    lengths, then the given columns (``hit_tokens_<N>`` per pool; on a cluster also
    ``worker_<N>`` and ``shared_hit_tokens_<N>_<S>``). O(requests x pools).

    >>> t = RequestTrace.from_blocks([[1], [1]], block_size=4)
    >>> print(per_request_text(t, [("hit_tokens_inf", np.array([0, 3]))]), end="")
    request,id,arrival_s,worker,input_tokens,output_tokens,hit_tokens_inf
    0,0,0.0,0,4,0,0
    1,1,1.0,0,4,0,3
    """
    n = trace.n_requests
    ids = next((v for v in (trace.request_labels, trace.request_ids) if v is not None), np.arange(n))
    if workers is None:
        workers = np.zeros(n, np.int64) if trace.workers is None else trace.workers
    arrival = trace.timestamps_s - (trace.timestamps_s[0] if n else 0.0) if arrival_s is None else arrival_s
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*PER_REQUEST_COLUMNS, *(name for name, _ in hit_columns)])
    columns = [np.arange(n), ids, arrival, workers, trace.input_length, trace.output_length,
               *(values for _, values in hit_columns)]
    for row in zip(*(c.tolist() for c in columns)):
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
    return buf.getvalue()


def write_per_request(path: str | os.PathLike[str], trace: RequestTrace, hit_columns: Sequence[tuple[str, np.ndarray]],
                      arrival_s: np.ndarray | None = None, workers: np.ndarray | None = None) -> None:
    """Write :func:`per_request_text` atomically to ``path``."""
    write_atomic(path, per_request_text(trace, hit_columns, arrival_s, workers))
