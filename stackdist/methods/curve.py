"""The LRU hit curve of a key trace (or a request trace's block stream) by a method.

:func:`curve_of` is the one call: exact in this process, SHARDS-sampled (every seed's estimate,
the first as the answer), or exact on a Dask cluster. It returns a :class:`CurveResult` whichever
the method; what changes is only how its curve was computed (``result.curve`` is a
:class:`~stackdist.engine.HitCurve` when exact, a
:class:`~stackdist.engine.scale.estimate.SampledCurve` when sampled: both answer the same
queries, ``hits_at``, ``hit_rate_at``, ``min_capacity_for``, ``sample``, ``summary``).

Plain values in: a :class:`TraceInput` (what to read, which records count) and a method value
(:mod:`.method`). No flags: an error names the input's labels (``TraceInput.labels``), which the
CLI sets to its flags.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.engine import HitCurve, dense_keys
from stackdist.engine.keys import first_size_change
from stackdist.errors import TraceFormatError, UsageError, require_data
from stackdist.input_names import expand_inputs
from stackdist.output import Progress, stage
from stackdist.traces.access import record_line
from stackdist.traces.counting import (
    access_window,
    resolve_window,
    warmup_accesses,
    warmup_count,
    window_spec,
)
from stackdist.traces.formats import is_request_format

from .method import EXACT, Distributed, Method, Sampled

__all__ = [
    "BOUNDED_INPUT_BYTES",
    "CurveResult",
    "TraceInput",
    "access_range",
    "cluster_client",
    "counted_range",
    "curve_of",
    "distributed_curve",
    "exact_curve",
    "iter_keys",
    "read_keys_checked",
    "require_sample",
    "sample_file",
    "sampled_curves",
    "sampled_from_files",
    "sampled_on_cluster",
]

BOUNDED_INPUT_BYTES = 1 << 30
"""From this much input (a compressed file counts four times its size; standard input always),
a curve (one file or streamed) is replayed in memory bounded by its distinct keys rather than holding the
trace: slower by about a third (its keys are hashed as they come), but a day's log fits."""


@dataclass(frozen=True)
class TraceInput:
    """What to read and which of its records count.

    ``spec``: a file, several files (one trace, in order), a glob, or ``-``; ``format``: a
    format name (None: from the suffix); ``window``: ``START:STOP`` text (indices, durations,
    percentages); ``warmup``: ``N``, ``P%`` or a duration; ``labels``: what errors call the
    window, the warm-up, the sample rate, the sample size and the cluster (the CLI passes its flags); ``command``: the progress lines' prefix.

    >>> TraceInput("t.csv").spec, TraceInput(["a.csv", "b.csv"]).spec
    ('t.csv', ('a.csv', 'b.csv'))
    """

    spec: str | Sequence[str]
    format: str | None = None
    window: str | None = None
    warmup: str | None = None
    labels: tuple[str, str, str, str, str] = ("window", "warmup", "sample rate", "sample size", "a cluster")
    command: str = "stackdist"

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str):
            object.__setattr__(self, "spec", tuple(os.fspath(s) for s in self.spec))

    @property
    def is_request_trace(self) -> bool:
        """True when the format is a request trace (its block stream is replayed). O(1)."""
        return is_request_format(self.format)

    @property
    def splits_by_file(self) -> bool:
        """Each input file can be read alone (every line is a record on its own, ids global):
        not so for formats whose readers order and number records across the whole input. O(1)."""
        from stackdist.traces.formats import get

        return self.format is None or get(self.format).line_records

    @property
    def counts_by_position(self) -> bool:
        """A window or warm-up counts records by position. O(1)."""
        return bool(self.window or self.warmup)


@dataclass(frozen=True)
class CurveResult:
    """The curve of an input by a method: ``curve`` answers (exact, or the first seed's
    estimate), ``seeds`` holds every seed's estimate when sampled (the error bars),
    ``distributed`` the cluster's account (workers, chunks, how much the merge replayed)."""

    curve: Any
    method: Method
    seeds: tuple[Any, ...] = ()
    distributed: dict[str, Any] | None = None

    @property
    def sampled(self) -> bool:
        """True when the curve is a SHARDS estimate. O(1)."""
        return isinstance(self.method, Sampled)


def curve_of(source: TraceInput, method: Method = EXACT, *, bounded: bool = True) -> CurveResult:
    """The hit curve of ``source`` by ``method``. ``bounded``: only the curve's queries are
    needed, so a large unit-size input without a window or warm-up is replayed in memory bounded
    by its distinct keys. Complexity: exact O(n log n); sampled O(n x seeds) hashing plus the
    samples' replays; distributed O(n log n / workers) plus the merge.
    """
    window_spec(source.window, source.labels[0])  # a bad window is a usage error before any reading
    if isinstance(method, Sampled):
        curves = sampled_curves(source, method) if method.cluster is None else sampled_on_cluster(source, method)
        return CurveResult(curves[0], method, tuple(curves))
    if isinstance(method, Distributed):
        with cluster_client(method) as client:
            got, info = distributed_curve(source, client, method.client)
        return CurveResult(got, method, distributed=info)
    return CurveResult(exact_curve(source, bounded), method)


def read_keys_checked(source: TraceInput) -> tuple[np.ndarray, np.ndarray | None, Any]:
    """The keys, sizes (or None) and request trace (or None) of ``source``, with a key whose
    size changes reported at its line. O(n)."""
    from stackdist.traces import read_access_trace
    from stackdist.traces.stream_input import is_streamed, read_keys, read_request_input

    requests = None
    streamed = is_streamed(source.spec)
    if source.is_request_trace:  # one plain file, or streamed: several files, a glob, -, .gz/.zst
        requests = read_request_input(source.spec, str(source.format))
        keys, sizes = requests.block_ids, None
    elif streamed:
        keys, sizes = read_keys(source.spec, source.format)
    else:
        trace = read_access_trace(str(source.spec), source.format)
        keys, sizes = trace.keys, trace.sizes
    _check_fixed_sizes(source, keys, sizes, streamed)
    return keys, sizes, requests


def _check_fixed_sizes(source: TraceInput, keys: np.ndarray, sizes: np.ndarray | None, streamed: bool) -> None:
    if sizes is None:
        return
    changed = first_size_change(keys, sizes)
    if changed is not None:
        where = f"{_shown(source.spec)}: access {changed + 1:,}" if streamed else record_line(str(source.spec), source.format, changed)
        key = keys[changed].item() if hasattr(keys[changed], "item") else keys[changed]
        raise TraceFormatError(where, None, f"key {key!r} has size {int(sizes[changed])} here but another size earlier; "
                               "a key's size must be fixed")


def _shown(spec: str | Sequence[str]) -> str:
    return spec if isinstance(spec, str) else str(list(spec))


def counted_range(source: TraceInput, n: int, requests: Any = None) -> tuple[int, int]:
    """The counted accesses [start, stop) of ``n`` from the window and warm-up: over accesses
    for a key trace, over the requests of ``requests`` (whose timestamps give durations) mapped
    to their blocks. O(n) with a duration, else O(1)."""
    spec = window_spec(source.window, source.labels[0])
    if requests is None:
        start, stop = resolve_window(spec, n, None, source.labels[0])
        return min(stop, start + warmup_count(source.warmup, start, stop, None, source.labels[1])), stop
    ts = requests.timestamps_s
    first, last = resolve_window(spec, requests.n_requests, ts, source.labels[0])
    first = min(last, first + warmup_count(source.warmup, first, last, ts, source.labels[1]))
    return int(requests.offsets[first]), int(requests.offsets[last])


def exact_curve(source: TraceInput, bounded: bool = False) -> HitCurve:
    """Read ``source`` and replay it once into a HitCurve (progress on stderr). O(n log n)."""
    stage(source.command, f"reading {_shown(source.spec)}")
    if bounded and not source.counts_by_position and _large_input(source.spec):
        streamed, read = _stream_curve(source)
        if streamed is not None:
            return streamed
        keys, sizes = read
        _check_fixed_sizes(source, keys, sizes, True)
        requests = None
    else:
        keys, sizes, requests = read_keys_checked(source)
    n = len(keys)
    require_data(n, _shown(source.spec), "the trace has no accesses")
    start, stop = counted_range(source, n, requests)
    require_data(stop - start, _shown(source.spec), f"no accesses are counted ({source.labels[0]} {source.window or ':'}, "
                 f"{source.labels[1]} {source.warmup or 0}, {n:,} accesses in the trace)")
    stage(source.command, f"replaying {n:,} accesses (counting {stop - start:,})")
    progress = Progress("replay")
    try:
        return HitCurve.from_trace(keys, sizes, (start, stop), progress=progress)
    finally:
        progress.close()


def _large_input(spec: str | Sequence[str]) -> bool:
    """True when the inputs of ``spec`` hold at least :data:`BOUNDED_INPUT_BYTES` (or are read from
    standard input: their size is unknown). O(files)."""
    total = 0
    for path in expand_inputs(spec):
        if path == "-":
            return True
        try:
            total += os.path.getsize(path) * (4 if path.lower().endswith((".gz", ".zst")) else 1)
        except OSError:
            return False  # the reader says what is wrong with it
    return total >= BOUNDED_INPUT_BYTES


def iter_keys(source: TraceInput) -> Any:
    """The input's ``(keys, sizes)`` chunks as they are read (a request trace's block ids). O(chunk) memory."""
    from stackdist.traces.stream_input import (
        iter_access_chunks,
        iter_block_id_chunks,
        key_values,
    )

    if source.is_request_trace:
        return ((key_values(ids), None) for ids in iter_block_id_chunks(source.spec, str(source.format)))
    return iter_access_chunks(source.spec, source.format)


def _stream_curve(source: TraceInput) -> tuple[Any, Any]:
    """A large unit-size trace replayed chunk by chunk in memory bounded by its distinct keys
    (:class:`~stackdist.engine.stream.KeyValueStream`): ``(curve, None)``; a trace with sizes is
    read whole instead (below its largest size the curve replays filtered traces):
    ``(None, (keys, sizes))``. O(accesses) time, O(distinct keys) memory when unit."""
    from stackdist.engine.stream import KeyValueStream
    from stackdist.traces.stream_input import joined_sizes

    chunks = iter_keys(source)
    first = next((c for c in chunks if c[0].shape[0]), None)
    if first is None:
        return None, (np.zeros(0, np.uint64), None)
    if first[1] is not None:
        parts = [first, *chunks]
        return None, (np.concatenate([k for k, _ in parts]), joined_sizes(parts, _shown(source.spec)))
    stream, shown = KeyValueStream(), time.monotonic()
    for keys, sizes in itertools.chain([first], chunks):
        joined_sizes([first, (keys, sizes)], _shown(source.spec))  # a size column in a later input is an error
        stream.feed(keys)
        if time.monotonic() - shown > 10:
            stage(source.command, f"replayed {stream.n_accesses:,} accesses so far (state {stream.state_nbytes / 2**20:,.0f} MiB)")
            shown = time.monotonic()
    return stream.curve(), None


# --- sampled -------------------------------------------------------------------------------------


def access_range(source: TraceInput, n: int) -> tuple[int, int]:
    """The counted accesses [start, stop) of ``n`` when counting by index only (the sampled and
    distributed paths: no durations or percentages of a window). O(1)."""
    from stackdist.engine import parse_window

    start, stop = parse_window(access_window(source.window, source.labels[0]), n)
    return min(stop, start + warmup_accesses(source.warmup, stop - start, source.labels[1])), stop


def _needs_length(source: TraceInput) -> bool:
    window = access_window(source.window, source.labels[0])
    warm = (source.warmup or "").strip()
    return bool(window and any(v is not None and v < 0 for v in window)) or warm.endswith("%")


def require_sample(kept: Sequence[int], total: int, method: Sampled, source: str, unit: str = "accesses",
                   seeds: Sequence[int] | None = None, labels: Sequence[str] = ("sample rate", "sample size")) -> None:
    """Exit 1 (no answer) when a seed's sample kept nothing (``kept[i]`` of ``total`` for the
    i-th of ``seeds``, default the method's): an empty sample says nothing about the trace (its
    estimate would be a hit rate of 0 at every size). O(seeds).

    >>> require_sample([0], 10, Sampled(rate=0.5), "t.csv")
    Traceback (most recent call last):
    ...
    stackdist.errors.EmptyInputError: t.csv: nothing to answer from: sample rate 0.5 (seed 0) kept none of the 10 accesses: raise the rate or the size, or drop sampling for the exact answer
    """
    for seed, count in zip(method.seed_list() if seeds is None else seeds, kept):
        what = f"{labels[0]} {method.rate:g}" if method.size is None else f"{labels[1]} {method.size}"
        require_data(count, source, f"{what} (seed {seed}) kept none of the {total:,} {unit}: raise the rate or "
                     "the size, or drop sampling for the exact answer")


def sampled_curves(source: TraceInput, method: Sampled) -> list[Any]:
    """One SHARDS curve per seed (the method's), the input read once in chunks: the reader's
    stream goes through every seed's hash filter in one pass (bounded memory unless the window
    or warm-up counts from the end). O(n x seeds) plus the samples' replays."""
    from stackdist.engine.scale.sampling import ShardsSampler, feed_all
    from stackdist.traces.stream_input import joined_sizes, read_keys

    samplers = [ShardsSampler(method.rate, method.size, s) for s in method.seed_list()]
    shown = _shown(source.spec)
    if _needs_length(source):
        keys, sizes = read_keys(source.spec, source.format)
        chunks: Any = [(keys, sizes)]
        start, stop = access_range(source, keys.shape[0])
    else:
        chunks = iter_keys(source)
        start, stop = access_range(source, 2**62)
    pos, first = 0, None
    for keys, sizes in chunks:
        n = keys.shape[0]
        first = (keys, sizes) if first is None and n else first
        if n and first is not None:
            joined_sizes([first, (keys, sizes)], shown)  # a size column in some inputs only is an error
        feed_all(samplers, keys, sizes, slice(min(max(start - pos, 0), n), min(max(stop - pos, 0), n)))
        pos += n
    require_data(pos, shown, "the trace has no accesses")
    require_data(samplers[0].n_accesses, shown, f"no accesses are counted ({source.labels[0]}, {source.labels[1]})")
    require_sample([s.n_sampled_accesses for s in samplers], samplers[0].n_accesses, method, shown,
                   labels=source.labels[2:4])
    return [s.curve() for s in samplers]


def sample_file(path: str, fmt: str | None, rate: float, seeds: list[int]) -> tuple[list[Any], int, int]:
    """A worker's job for one input file: read it, keep each seed's sampled accesses. Returns
    ([(keys, sizes) per seed], accesses, total size). O(n x seeds)."""
    from stackdist.engine.scale.sampling import HashFilter
    from stackdist.traces.stream_input import read_keys

    keys, sizes = read_keys(path, fmt)
    out = []
    for seed in seeds:
        mask = HashFilter.at_rate(rate, seed).mask(keys)
        out.append((keys[mask], None if sizes is None else sizes[mask]))
    return out, int(keys.shape[0]), int(keys.shape[0] if sizes is None else sizes.sum())


def sampled_from_files(files: list[str], fmt: str | None, samplers: list[Any], mapper: Any) -> list[Any]:
    """Fixed-rate samples of several files: the workers read and filter (``mapper``), the
    samplers here replay the sampled accesses in file order. Equal to one process's samples."""
    seeds = [s.seed for s in samplers]
    results = mapper(functools.partial(sample_file, fmt=fmt, rate=samplers[0].rate, seeds=seeds), files)
    for per_seed, n, total in results:
        for sampler, (keys, sizes) in zip(samplers, per_seed):
            sampler.feed(keys, sizes, distances=False)
            kept = int(keys.shape[0])
            sampler.add_unsampled(n - kept, total - (kept if sizes is None else int(sizes.sum())))
    return [s.curve() for s in samplers]


def sampled_on_cluster(source: TraceInput, method: Sampled) -> list[Any]:
    """Fixed-rate samples whose files are read and filtered on a cluster's workers (one file
    each), replayed here: the same curves as :func:`sampled_curves`."""
    from stackdist.engine.scale.distributed import dask_map
    from stackdist.engine.scale.sampling import ShardsSampler

    labels = source.labels
    if not source.splits_by_file:  # its files cannot be read apart: the same sample, read here
        return sampled_curves(source, method)
    if method.size is not None or source.counts_by_position:
        raise UsageError(f"{labels[4]} with sampling takes {labels[2]} only (no {labels[3]}, {labels[0]} or {labels[1]}).")
    samplers = [ShardsSampler(method.rate, None, s) for s in method.seed_list()]
    with cluster_client(Distributed(method.cluster)) as client:
        curves = sampled_from_files(expand_inputs(source.spec), source.format, samplers, dask_map(client))
    require_data(curves[0].n_accesses, _shown(source.spec), "the trace has no accesses")
    require_sample([c.n_sampled_accesses for c in curves], curves[0].n_accesses, method, _shown(source.spec),
                   labels=labels[2:4])
    return curves


# --- distributed ---------------------------------------------------------------------------------


class cluster_client:
    """The client of a :class:`Distributed` method: the caller's (never closed), or one opened
    from an address and closed on exit."""

    def __init__(self, method: Distributed) -> None:
        self.method, self.own, self.client = method, isinstance(method.client, str), None

    def __enter__(self) -> Any:
        from stackdist.engine.scale.distributed import connect

        self.client = connect(self.method.client) if self.own else self.method.client
        return self.client

    def __exit__(self, *exc: object) -> None:
        from stackdist.engine.scale.distributed import close

        if self.own and self.client is not None:
            close(self.client)


def distributed_curve(source: TraceInput, client: Any, scheduler: Any = None) -> tuple[HitCurve, dict[str, Any]]:
    """The exact curve from time chunks replayed on the cluster of ``client``; several unit-size
    files without a window merge the workers' histograms only. O(n log n / workers) plus the merge."""
    from stackdist.engine.scale.distributed import (
        chunk_summary,
        dask_map,
        merge_chunks,
        split_even,
    )
    from stackdist.traces.stream_input import joined_sizes, read_keys

    shown = _shown(source.spec)
    workers = max(1, len(client.nthreads()))
    files = expand_inputs(source.spec)
    label = scheduler if isinstance(scheduler, str) else "client"
    split = len(files) > 1 and source.splits_by_file
    if split and not source.counts_by_position:  # unit-size files: histograms only, O(distinct) here
        parts = dask_map(client)(functools.partial(_read_and_histogram, fmt=source.format), files)
        if all(part[0] is not None for part in parts):
            return _histogram_curve(shown, parts, workers, label)
    if split:  # one chunk per file: the workers parse them too
        results = dask_map(client)(functools.partial(_read_and_summarize, fmt=source.format), files)
        summaries = [r[0] for r in results]
        keys = np.concatenate([r[1] for r in results])
        sizes = joined_sizes([(r[1], r[2]) for r in results], shown)
    else:
        keys, sizes = read_keys(source.spec, source.format)
        parts = [(keys[a:b], None if sizes is None else sizes[a:b]) for a, b in split_even(keys.shape[0], workers)]
        summaries = dask_map(client)(chunk_summary, parts)
    distances = merge_chunks(summaries)
    require_data(int(keys.shape[0]), shown, "the trace has no accesses")
    start, stop = access_range(source, keys.shape[0])
    merged = int(sum(s.keys.shape[0] for s in summaries))
    info = {"scheduler": label, "workers": workers, "chunks": len(summaries), "merge_accesses": merged,
            "merge_share": merged / max(int(keys.shape[0]), 1)}
    return HitCurve(dense_keys(keys), sizes, distances, (start, stop)), info


def _read_and_histogram(path: str, fmt: str | None) -> tuple[Any, int]:
    """A worker's job for one unit-size input file: read it, replay it alone, return its
    summary and distance histogram, O(its distinct keys), and its length; ``(None, length)``
    for a file with sizes."""
    from stackdist.engine.scale.distributed import chunk_histogram
    from stackdist.traces.stream_input import read_keys

    keys, sizes = read_keys(path, fmt)
    if sizes is not None:
        return None, int(keys.shape[0])
    return chunk_histogram(keys), int(keys.shape[0])


def _histogram_curve(shown: str, parts: list[Any], workers: int, label: str) -> tuple[HitCurve, dict[str, Any]]:
    """The exact curve of unit-size files from the workers' histograms, merged here. O(merged accesses)."""
    from stackdist.engine.histogram import Histogram
    from stackdist.engine.scale.distributed import merge_histograms

    n = sum(length for _, length in parts)
    require_data(n, shown, "the trace has no accesses")
    values, counts, _cold = merge_histograms([part for part, _ in parts])
    cum = np.cumsum(counts)
    merged = int(sum(part[0].keys.shape[0] for part, _ in parts))
    info = {"scheduler": label, "workers": workers, "chunks": len(parts), "merge_accesses": merged,
            "merge_share": merged / n, "merged": "histograms"}
    return HitCurve.from_histogram(Histogram(values, cum, cum.copy()), n), info


def _read_and_summarize(path: str, fmt: str | None) -> tuple[Any, np.ndarray, np.ndarray | None]:
    """A worker's job for one input file: read it, replay it alone."""
    from stackdist.engine.scale.distributed import chunk_summary
    from stackdist.traces.stream_input import read_keys

    keys, sizes = read_keys(path, fmt)
    return chunk_summary((keys, sizes)), keys, sizes

