"""Exact distributed replay (PARDA, Niu et al., IPDPS 2012): chunks in parallel, one short merge.

Cut the trace into time chunks. A worker replays its chunk alone (:func:`chunk_summary`): every
access whose key was seen *earlier in the same chunk* already has its exact distance, since the
distinct keys since that earlier access all lie inside the chunk. Only each chunk's *first
occurrences* are unresolved. The merge resolves them against the stack of all earlier chunks:

*Claim.* Let ``compressed(c)`` be chunk ``c``'s accesses that are the first or the last
occurrence of their key inside the chunk, in trace order. One replay of ``compressed(0)``,
``compressed(1)``, ... in sequence gives every first occurrence its exact distance, and leaves
the stack of the whole trace after each chunk.

*Proof.* By induction over chunks, suppose the replay state before ``compressed(c)`` is the true
LRU stack after chunk ``c - 1`` (true for ``c = 0``: empty). (i) The distance of a first
occurrence of key ``k`` at position ``i`` is its size plus the sizes of the distinct keys
accessed since ``k``'s last access: those of the stack above ``k``, together with the keys
accessed in chunk ``c`` before ``i``. Every key accessed in chunk ``c`` before ``i`` has its first
occurrence before ``i``, which is in ``compressed(c)``; so the replay of ``compressed(c)`` sees the
same set of distinct keys above ``k`` and gives the same distance. (ii) After chunk ``c`` the true
stack holds the chunk's keys on top, ordered by their last access in the chunk, above the older
keys in their old order. The replay moves the same keys to the top, ordered by their last
occurrence in ``compressed(c)``, which is their last access in the chunk. So the state is the true
stack after chunk ``c``. The same argument holds for engine semantics (read a request's depths,
then commit it tail first), with "occurrence" meaning a request containing the key: a key is in
a request at most once, the keys committed before request ``r`` in the chunk are above a key not
yet committed in it, and a key's last commit fixes its final place.

So the merge replays at most twice the sum over chunks of the chunk's distinct keys, not the
trace: its share of the work is ``2 x distinct-per-chunk / chunk length``. Workers also run the
readers (one input file per chunk), so parsing and hashing scale out too. The result equals the
single-process replay access for access (tested).

>>> keys = np.array([0, 1, 0, 2, 1, 0, 3, 0])
>>> distributed_distances([keys[:4], keys[4:]]).tolist() == stack_distances(keys).tolist()
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.errors import UsageError

from ..distances import engine_depths, stack_distances
from ..kernels import COLD
from ..keys import check_sizes, dense_keys

__all__ = [
    "ChunkSummary",
    "chunk_histogram",
    "chunk_summary",
    "close",
    "connect",
    "dask_map",
    "distributed_distances",
    "distributed_inclusive_tiers",
    "distributed_request_depths",
    "merge_chunks",
    "merge_histograms",
    "sequential_map",
    "split_even",
    "split_requests",
]

Mapper = Callable[[Callable[[Any], Any], Sequence[Any]], list]


@dataclass
class ChunkSummary:
    """One chunk's local replay: ``distances`` (COLD at the chunk's first occurrences), the
    compressed sequence (``keys``, ``sizes`` or None, request ``offsets`` or None) and, for each
    compressed access, whether it is a first occurrence (``is_first``)."""

    distances: np.ndarray
    keys: np.ndarray
    sizes: np.ndarray | None
    offsets: np.ndarray | None
    is_first: np.ndarray

    @property
    def n_accesses(self) -> int:
        """Accesses in the chunk. O(1)."""
        return int(self.distances.shape[0])


def _first_last(ids: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the first and the last occurrence of every id. O(n)."""
    n = ids.shape[0]
    first_at = np.empty(n_keys, np.int64)
    first_at[ids[::-1]] = np.arange(n - 1, -1, -1)  # a scatter keeps the last write: the first occurrence
    last_at = np.empty(n_keys, np.int64)
    last_at[ids] = np.arange(n)
    positions = np.arange(n)
    return first_at[ids] == positions, last_at[ids] == positions


def chunk_summary(chunk: Any) -> ChunkSummary:
    """Replay one chunk alone (a worker's job): ``chunk`` is ``keys``, ``(keys, sizes)`` or
    ``(keys, sizes, offsets)`` (engine semantics: request offsets within the chunk), or a
    zero-argument callable returning one of those (a reader, run on the worker).
    O(n log k) for the chunk's n accesses over its k keys.

    >>> s = chunk_summary(np.array([5, 6, 5, 5]))
    >>> s.keys.tolist(), s.is_first.tolist()
    ([5, 6, 5], [True, True, False])
    """
    if callable(chunk):
        chunk = chunk()
    keys, sizes, offsets = (chunk, None, None) if isinstance(chunk, np.ndarray) else (tuple(chunk) + (None, None))[:3]
    keys = np.asarray(keys)
    size_arr = check_sizes(sizes, keys.shape[0])
    dense = dense_keys(keys)
    if offsets is None:
        distances = stack_distances(dense.ids, size_arr)
        first, last = _first_last(dense.ids, dense.n_keys)
        keep = first | last
        comp_offsets = None
    else:
        offs = np.asarray(offsets, np.int64)
        distances = engine_depths(dense.ids, offs, size_arr)
        first, last = _first_last(dense.ids, dense.n_keys)
        keep = first | last
        kept_before = np.r_[0, np.cumsum(keep)]
        comp_offsets = kept_before[offs]
    return ChunkSummary(distances, keys[keep], None if size_arr is None else size_arr[keep], comp_offsets, first[keep])


def chunk_histogram(chunk: Any) -> tuple[ChunkSummary, np.ndarray, np.ndarray]:
    """:func:`chunk_summary` for a trace too long to hold its distances: the summary without
    its per-access distances (an empty array), and the chunk's resolved distances as a
    histogram (sorted distinct values, counts; the first occurrences are left to
    :func:`merge_histograms`). O(n log k); what a worker returns is O(distinct keys of the chunk).

    >>> _, values, counts = chunk_histogram(np.array([5, 6, 5, 5]))
    >>> values.tolist(), counts.tolist()
    ([1, 2], [1, 1])
    """
    summary = chunk_summary(chunk)
    d = summary.distances[summary.distances != COLD]
    values, counts = np.unique(d, return_counts=True)
    empty = ChunkSummary(np.zeros(0, np.int64), summary.keys, summary.sizes, summary.offsets, summary.is_first)
    return empty, values.astype(np.int64), counts.astype(np.int64)


def merge_histograms(parts: Sequence[tuple[ChunkSummary, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, int]:
    """The exact distance histogram of the whole trace from :func:`chunk_histogram` parts, by
    the merge of :func:`merge_chunks` (same proof): (sorted distinct distances, counts, cold
    misses). O(m log k) for the m compressed accesses; memory O(m), not the trace.

    >>> keys = np.array([0, 1, 0, 2, 1, 0, 3, 0])
    >>> v, c, cold = merge_histograms([chunk_histogram(keys[:4]), chunk_histogram(keys[4:])])
    >>> v.tolist(), c.tolist(), cold
    ([2, 3], [2, 2], 4)
    """
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    firsts = _resolve([p[0] for p in parts])
    cold = int(np.count_nonzero(firsts == COLD))
    values = np.concatenate([firsts[firsts != COLD]] + [p[1] for p in parts])
    counts = np.concatenate([np.ones(int((firsts != COLD).sum()), np.int64)] + [p[2] for p in parts])
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]]) if values.size else np.zeros(0, np.int64)
    return values[starts], np.add.reduceat(counts, starts) if values.size else counts, cold


def _resolve(summaries: Sequence[ChunkSummary]) -> np.ndarray:
    """The merge's replay of the compressed sequences: the exact distances of every chunk's
    first occurrences, chunk after chunk. O(m log k)."""
    keys = np.concatenate([s.keys for s in summaries])
    sized = [s.sizes is not None for s in summaries if s.keys.shape[0]]  # an empty chunk has no say
    if any(sized) and not all(sized):
        raise ValueError("chunks must all have sizes or all be unit-sized.")
    sizes = (np.concatenate([np.zeros(0, np.int64) if s.sizes is None else s.sizes for s in summaries])
             if any(sized) else None)
    engine = [s.offsets is not None for s in summaries]
    if any(engine) and not all(engine):
        raise ValueError("chunks must all carry request offsets (engine semantics) or none.")
    if all(engine):
        starts = np.cumsum([0] + [s.keys.shape[0] for s in summaries[:-1]])
        pieces: list[np.ndarray] = [np.zeros(1, np.int64)]
        pieces += [np.asarray(s.offsets)[1:] + b for s, b in zip(summaries, starts)]
        resolved = engine_depths(keys, np.concatenate(pieces), sizes)
    else:
        resolved = stack_distances(keys, sizes)
    return resolved[np.concatenate([s.is_first for s in summaries])]


def merge_chunks(summaries: Sequence[ChunkSummary]) -> np.ndarray:
    """The sequential merge: replay the compressed sequences in order, resolve every chunk's
    first occurrences, and return the exact distances of the whole trace. O(m log k) for the m
    compressed accesses, plus O(n) to assemble.

    >>> merge_chunks([chunk_summary(np.array([0, 1])), chunk_summary(np.array([0, 0]))]).tolist()[2:]
    [2, 1]
    """
    if not summaries:
        return np.zeros(0, np.int64)
    firsts = _resolve(summaries)
    out = []
    pos = 0
    for s in summaries:
        d = s.distances.copy()
        m = int(np.count_nonzero(s.is_first))
        d[d == COLD] = firsts[pos : pos + m]
        out.append(d)
        pos += m
    return np.concatenate(out)


def sequential_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
    """Map in this process (the default mapper, and the reference for the parallel ones). O(items).

    >>> sequential_map(abs, [-1, 2])
    [1, 2]
    """
    return [fn(x) for x in items]


def dask_map(client: Any) -> Mapper:
    """A mapper running each item on a Dask worker (results in order). O(items) round trips.

    >>> callable(dask_map(None))
    True
    """
    def run(fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
        # Scatter the items first: large arrays go to the workers once, not inside the task graph;
        # unique keys, so a second map of equal items never shares (and loses) the first one's.
        futures = client.scatter(list(items), hash=False) if items else []
        return client.gather(client.map(fn, futures, pure=False))

    return run


def connect(spec: str) -> Any:
    """A Dask client from ``local``, ``local:N`` (N worker processes on this machine) or
    ``tcp://HOST:PORT`` (a running scheduler); UsageError naming ``--dask`` otherwise. O(1).

    >>> connect("udp://x")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: --dask must be local, local:N (N >= 1 workers) or tcp://HOST:PORT; got 'udp://x'
    """
    bad = UsageError(f"--dask must be local, local:N (N >= 1 workers) or tcp://HOST:PORT; got {spec!r}")
    workers: int | None = None
    if spec == "local":
        workers = 2
    elif spec.startswith("local:"):
        text = spec.partition(":")[2]
        if not text.isdigit() or int(text) < 1:
            raise bad
        workers = int(text)
    elif not (spec.startswith("tcp://") and spec.rpartition(":")[2].isdigit()):
        raise bad
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--dask needs the 'distributed' package: pip install 'stackdist[dask]'") from None
    if workers is None:
        return Client(spec)
    return Client(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None))


def close(client: Any) -> None:
    """Close a client of :func:`connect` and the local cluster it started (if any). O(1).

    >>> close(None)
    """
    if client is None:
        return
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None and type(cluster).__name__ == "LocalCluster":
        cluster.close()


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous [lo, hi) ranges covering 0..n (no empty range unless n < parts). O(parts).

    >>> split_even(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    parts = max(1, min(parts, max(n, 1)))
    bounds = [-(-n * i // parts) for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def split_requests(offsets: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous request ranges [r0, r1) with about equal blocks each. O(parts log R).

    >>> split_requests(np.array([0, 2, 4, 6, 8]), 2)
    [(0, 2), (2, 4)]
    """
    n_req = offsets.shape[0] - 1
    targets = [offsets[-1] * i / max(parts, 1) for i in range(1, parts)]
    cuts = sorted({0, n_req, *(int(np.searchsorted(offsets, t, side="left")) for t in targets)})
    return [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]


def distributed_distances(chunks: Iterable[Any], mapper: Mapper = sequential_map) -> np.ndarray:
    """Exact stack distances (or engine depths, when the chunks carry request offsets) of the
    trace made of ``chunks`` in order (arrays, tuples or reader callables, see
    :func:`chunk_summary`), the chunks replayed by ``mapper`` in parallel. O(n log k / workers)
    plus the merge.

    >>> distributed_distances([(np.array([0, 1]), None, np.array([0, 2])), (np.array([0, 1]), None, np.array([0, 2]))]).tolist()[2:]
    [1, 2]
    """
    return merge_chunks(mapper(chunk_summary, list(chunks)))


def distributed_inclusive_tiers(curve: Any, gpu_capacities: Sequence[int], mapper: Mapper = sequential_map,
                                parts: int = 2) -> list[Any]:
    """:func:`stackdist.engine.tiers.inclusive_tiers` of an exact ``curve`` with every GPU-miss
    stream replayed in ``parts`` time chunks by ``mapper`` (:func:`distributed_distances`): the
    same tiers, hit for hit, as the one-process replay. O(n log k / workers) per GPU capacity
    plus the merges.

    >>> from stackdist.engine import HitCurve
    >>> t = distributed_inclusive_tiers(HitCurve.from_trace([0, 1, 2, 0, 1, 2]), [1])
    >>> t[0].cpu_hits_at(3)
    3
    """
    from ..curve import HitCurve
    from ..keys import DenseKeys
    from ..tiers import InclusiveTierCurve

    start, stop = curve.window
    result = []
    for gpu in gpu_capacities:
        gpu_hit = curve.hit_mask(int(gpu))
        miss = ~gpu_hit
        ids = curve.keys.ids[miss]
        sub_sizes = None if curve.sizes is None else curve.sizes[miss]
        chunks = [(ids[a:b], None if sub_sizes is None else sub_sizes[a:b]) for a, b in split_even(ids.shape[0], parts)]
        distances = distributed_distances(chunks, mapper) if ids.shape[0] else np.zeros(0, np.int64)
        before = np.cumsum(np.r_[0, miss])
        cpu = HitCurve(DenseKeys(ids, curve.keys.n_keys, None), sub_sizes, distances, (int(before[start]), int(before[stop])))
        in_window = gpu_hit[start:stop]
        gpu_hit_size = int(np.count_nonzero(in_window)) if curve.sizes is None else int(curve.sizes[start:stop][in_window].sum())
        result.append(InclusiveTierCurve(int(gpu), curve.n_accesses, int(np.count_nonzero(in_window)), gpu_hit_size, cpu, gpu_hit))
    return result


def distributed_request_depths(block_ids: np.ndarray, offsets: np.ndarray, semantics: str, mapper: Mapper = sequential_map,
                               parts: int = 2) -> np.ndarray:
    """Per-block depths of a request trace (``offsets`` into ``block_ids``) with the requests
    cut into ``parts`` time chunks replayed by ``mapper``: engine semantics (arrival depths,
    committed tail first) or per-access stack distances, equal to the one-process replay.
    O(n log k / workers) plus the merge.

    >>> ids, offs = np.array([1, 2, 1, 3]), np.array([0, 2, 4])
    >>> distributed_request_depths(ids, offs, "engine").tolist() == engine_depths(ids, offs).tolist()
    True
    """
    if semantics not in ("engine", "per-access"):
        raise ValueError(f"semantics must be engine or per-access; got {semantics!r}.")
    chunks: list[Any] = []
    for r0, r1 in split_requests(np.asarray(offsets, np.int64), parts):
        a, b = int(offsets[r0]), int(offsets[r1])
        part = block_ids[a:b]
        chunks.append((part, None, np.asarray(offsets[r0 : r1 + 1], np.int64) - a) if semantics == "engine" else part)
    if not chunks or block_ids.shape[0] == 0:
        return np.zeros(0, np.int64)
    return distributed_distances(chunks, mapper)
