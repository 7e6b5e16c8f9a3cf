"""Workers, routing and shared pools in the plan: the ``engine`` semantics on K workers.

``stackdist plan --semantics engine --workers K --router R --gpu-blocks C1,C2 [--shared-blocks S1]``
serves the trace on K workers, each with its own engine-semantics GPU cache of C blocks (of the
trace's block size: ``--gpu-blocks`` is per worker), plus an optional shared tier of S blocks
(the rules: :mod:`stackdist.serving.cluster`). Per (C, S) pair the plan reports the prefix hit
tokens per worker and in total, split into GPU and shared-tier hits; and **what routing is
worth**: every router (round-robin, random, session, prefix-hash, least-loaded, sglang-cache-aware,
kv-aware) at K workers of C against one cache of K x C (the same shared tier beside it), on the
same trace.
Static routers are :func:`~.engine_plan.assign_workers` (``least-loaded`` and
``sglang-cache-aware``, whose own trees are not the caches, under the plan's schedule);
``kv-aware`` is simulated with the caches. Counted requests only (warm-up excluded).

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2], [1, 3], [1, 3]], block_size=4)
>>> opts = RoutingOptions(workers=2, router="round-robin", gpu_blocks=(2,), shared_blocks=(0, 4))
>>> section = routing_section(run_routing(t, opts), t, opts, None, 1)
>>> [(p["shared_blocks"], p["gpu_hit_tokens"], p["shared_hit_tokens"]) for p in section["pools"]]
[(0, 8, 0), (4, 8, 12)]
>>> section["routing_worth"][0]["one_cache_prefix_token_hit_rate"], section["routing_worth"][0]["routers"]["kv-aware"]
(0.625, 0.625)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stackdist.engine.keys import unique_sorted
from stackdist.serving.cluster import KV_AWARE, ClusterResult, simulate_cluster
from stackdist.serving.router_pick import describe_dynamo
from stackdist.serving.sglang_router import (
    SGLANG_CACHE_AWARE,
    CacheAwareConfig,
    describe,
)
from stackdist.traces import RequestTrace

from .engine_plan import (
    ONE_CACHE,
    ROUTERS,
    EngineOptions,
    assign_workers,
    cluster_pool_row,
    router_rule,
    routing_worth_rows,
    schedule_for,
)
from .schema import ClusterPlan

__all__ = [
    "ONE_CACHE",
    "ROUTING_ROUTERS",
    "RoutingOptions",
    "default_gpu_blocks",
    "parse_sizes",
    "routing_section",
    "run_routing",
]

ROUTING_ROUTERS = (*ROUTERS, KV_AWARE)
KV_AWARE_MAX_ENTRIES = 2**28
"""The comparison runs kv-aware (state: 8 bytes per distinct block and worker) only up to this
many entries; asked for with ``--router kv-aware`` it always runs."""


@dataclass(frozen=True)
class RoutingOptions:
    """K workers (or ``"recorded"``: the trace's own), the router, per-worker GPU sizes (empty:
    :func:`default_gpu_blocks`), shared-tier sizes (0: none), whether to compare every router,
    and the engine options whose schedule and seed the static routers use."""

    workers: int | str = 1
    router: str = "round-robin"
    gpu_blocks: Sequence[int | None] = ()
    shared_blocks: Sequence[int | None] = (0,)
    compare: bool = True
    engine: EngineOptions = field(default_factory=EngineOptions)
    overlap_weight: float = 1.0


def parse_sizes(text: str, flag: str) -> tuple[int | None, ...]:
    """``"0,4000,inf"`` as sizes in blocks (``inf`` is None); ValueError naming ``flag`` otherwise.

    >>> parse_sizes("0, 4000, inf", "--shared-blocks")
    (0, 4000, None)
    """
    sizes: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() in ("inf", "infinite", "unlimited"):
            sizes.append(None)
        elif part.isdigit() and int(part) < 2**62:
            sizes.append(int(part))
        else:
            raise ValueError(f"{flag} must be comma-separated sizes in blocks (non-negative integers, or inf); got {text!r}")
    if len(sizes) > 64:
        raise ValueError(f"{flag} takes at most 64 sizes; got {len(sizes)}")
    return tuple(dict.fromkeys(sizes))


def default_gpu_blocks(trace: RequestTrace, workers: int, points: int = 4) -> tuple[int, ...]:
    """Per-worker sizes spread geometrically from the longest request to the distinct blocks
    over ``workers`` (an even share of everything). O(blocks).

    >>> default_gpu_blocks(RequestTrace.from_blocks([[1, 2], [3, 4], [5, 6], [7, 8]]), 1, 3)
    (2, 4, 8)
    """
    low = max(int(np.diff(trace.offsets).max(initial=1)), 1)
    high = max(low + 1, -(-int(unique_sorted(trace.block_ids).size) // max(workers, 1)))
    return tuple(int(g) for g in np.unique(np.round(np.geomspace(low, high, points)).astype(np.int64)))


def _workers(trace: RequestTrace, options: RoutingOptions) -> tuple[int, np.ndarray | None]:
    """K and, for recorded workers, each request's worker as an index into the sorted labels."""
    if options.workers != "recorded":
        return int(options.workers), None
    if trace.workers is None:
        raise ValueError("--workers recorded needs a trace that records each request's worker (e.g. --format dynamo)")
    labels = np.unique(trace.workers)
    return max(labels.size, 1), np.searchsorted(labels, trace.workers)


def _route(trace: RequestTrace, router: str, k: int, options: RoutingOptions) -> np.ndarray | str:
    if router == KV_AWARE:
        return KV_AWARE
    engine = dataclasses.replace(options.engine, workers=k, router=router)
    return assign_workers(trace, engine, schedule_for(trace, engine))


def run_routing(trace: RequestTrace, options: RoutingOptions) -> dict[str, ClusterResult]:
    """The chosen router's run (the first key), and with ``compare`` (K > 1) every router's and
    the one-cache baseline (key :data:`ONE_CACHE`). O(blocks) per pool pair and static router, O(blocks x K)
    for kv-aware; runs on two threads (the kernel releases the GIL)."""
    if options.router not in ROUTING_ROUTERS:
        raise ValueError(f"--router must be one of {', '.join(ROUTING_ROUTERS)}; got {options.router!r}")
    k, recorded = _workers(trace, options)
    gpus = tuple(options.gpu_blocks) or default_gpu_blocks(trace, k)
    shared = tuple(options.shared_blocks) or (0,)
    chosen = "recorded" if recorded is not None else options.router
    jobs: dict[str, tuple[int, Any, tuple[int | None, ...]]] = {
        chosen: (k, recorded if recorded is not None else _route(trace, chosen, k, options), gpus)}
    too_big = int(unique_sorted(trace.block_ids).size) * k > KV_AWARE_MAX_ENTRIES
    if options.compare and k > 1:
        for name in ROUTING_ROUTERS:
            if name not in jobs and not (name == KV_AWARE and too_big):
                jobs[name] = (k, _route(trace, name, k, options), gpus)
        jobs[ONE_CACHE] = (1, np.zeros(trace.n_requests, np.int64), tuple(None if g is None else g * k for g in gpus))

    def run(name: str) -> ClusterResult:
        workers, route, sizes = jobs[name]
        held = name != ONE_CACHE and workers > 1 and not too_big  # every router's regret (kv-aware: always)
        result = simulate_cluster(trace, workers, route, sizes, shared, options.overlap_weight,
                                  options.engine.router_temperature, options.engine.seed, available=held)
        return result if isinstance(route, str) else dataclasses.replace(result, router=name)  # not "static"

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(jobs, pool.map(run, list(jobs))))


def routing_section(results: dict[str, ClusterResult], trace: RequestTrace, options: RoutingOptions,
                    counted: np.ndarray | None, bytes_per_block: int) -> ClusterPlan:
    """The plan's ``cluster`` section: per pool pair, per worker and in total, GPU and shared
    hits of the chosen router; the routing-worth table when every router ran. O(pairs x
    (requests + K))."""
    mask = np.ones(trace.n_requests, bool) if counted is None else counted
    name = next(iter(results))
    main = results[name]
    labels: list[Any] = list(range(main.workers))
    if name == "recorded" and trace.workers is not None:
        labels = [int(x) for x in np.unique(trace.workers)]
    rows = [cluster_pool_row(main, i, mask, trace.input_length, bytes_per_block, labels, True)
            for i in range(len(main.pools))]  # the engine semantics: always serial
    total = int(trace.input_length[mask].sum())
    worth = routing_worth_rows(results, mask, total, True) if ONE_CACHE in results else None
    notes = [] if worth is None or KV_AWARE in results else [
        (f"kv-aware left out of the comparison: distinct blocks x {main.workers} workers is over "
         f"{KV_AWARE_MAX_ENTRIES:,} entries of state (ask for it with --router kv-aware)")]
    return ClusterPlan(
        semantics="engine", workers=main.workers, router=name, worker_labels=labels,
        order="serial: one request at a time in trace order, as the engine semantics",
        pool_unit=f"blocks of {trace.block_size} tokens (the trace's block size); gpu_blocks per worker",
        shared_tier=("one LRU for all workers; a request's hit is its GPU prefix continued in the shared tier; "
                     "every block received or computed is written through, tail first; neither inclusive nor exclusive"),
        kv_aware=describe_dynamo(options.overlap_weight, options.engine.router_temperature, options.engine.seed)
        + " (serial: nothing else running, so the longest cached GPU prefix for any weight > 0)",
        llm_d="",
        sglang_cache_aware=(describe(CacheAwareConfig(cache_threshold=options.engine.router_cache_threshold),
                                     options.engine.engine_block_size) if name == SGLANG_CACHE_AWARE else ""),
        router_rule=router_rule(name, options.engine),
        requests=int(mask.sum()), input_tokens=total, pools=rows,
        routing_worth=worth, notes=notes)
