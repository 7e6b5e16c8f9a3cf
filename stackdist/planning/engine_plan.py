"""Engine models in the plan: per-request hits at pool sizes in the engine's own count.

The curve semantics (``engine``, ``per-access``) answer every capacity from one replay; the
engine models (the registry of :mod:`stackdist.serving.engine_model`: ``vllm``, ``sglang``)
answer the pool sizes the user names (``--gpu-blocks``), as the engine counts them (each model's
``pool_unit``), under a schedule (serial, the service model, or a file)
with or without decode. This module runs them (:func:`run_engine_models`) and turns their
per-request results into the plan's rows (:func:`engine_section`); an infeasible pool gets no
hit numbers, only the first request that could not allocate and the smallest feasible pool.

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2]], block_size=16, last_tokens=[8, 8])
>>> opts = EngineOptions(models=("vllm",), pools=(2, 3, None), schedule="serial", decode=False)
>>> results = run_engine_models(t, opts)
>>> [(p["gpu_blocks"], p["hit_tokens"]) for p in engine_section(results["vllm"], t, opts, 2)["pools"]]
[(2, None), (3, 16), ('inf', 16)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.serving.aibrix_router import (
    AIBRIX_PREFIX_CACHE,
    PrefixCacheConfig,
    aibrix_prefix_cache,
)
from stackdist.serving.aibrix_router import describe as describe_aibrix
from stackdist.serving.cluster import KV_AWARE, ClusterResult
from stackdist.serving.decode_reuse import (
    continuations,
    exact_answers,
    reuse_pages,
    reuse_report,
)
from stackdist.serving.engine_model import ENGINE_MODELS, engine_model
from stackdist.serving.hybrid import GroupSpec, HybridResult
from stackdist.serving.offload import OffloadSpec
from stackdist.serving.pages import engine_pages
from stackdist.serving.production_stack_router import (
    PRODUCTION_STACK_PREFIXAWARE,
    prefixaware_pages,
    production_stack_prefixaware,
)
from stackdist.serving.production_stack_router import describe as describe_prefixaware
from stackdist.serving.results import ServingResult
from stackdist.serving.routed import (
    DEFAULT_OVERLAP_WEIGHT,
    routed_models,
    shared_tier_hits,
    simulate_routed,
)
from stackdist.serving.router_pick import (
    DEFAULT_TEMPERATURE,
    LLM_D,
    describe_dynamo,
    describe_llmd,
)
from stackdist.serving.schedule import Schedule
from stackdist.serving.scheduler import SchedulerResult, SchedulerSettings
from stackdist.serving.sglang_router import (
    SGLANG_CACHE_AWARE,
    CacheAwareConfig,
    describe,
    router_pages,
    sglang_cache_aware,
)
from stackdist.traces import RequestTrace

from .schema import ClusterPlan, ClusterPoolRow, ClusterWorkerRow, RoutingWorthRow

__all__ = [
    "JOINT_ROUTERS",
    "ONE_CACHE",
    "ROUTERS",
    "STATIC_ROUTERS",
    "EngineOptions",
    "LoadCluster",
    "LoadResult",
    "ModelCluster",
    "assign_workers",
    "check_models",
    "cluster_pool_row",
    "decode_reuse_bounds",
    "default_pools",
    "engine_section",
    "load_summary",
    "merge_loads",
    "model_cluster_section",
    "parse_pools",
    "per_request_columns",
    "per_request_workers",
    "per_worker_run",
    "router_rule",
    "routing_balance",
    "routing_worth_rows",
    "run_engine_models",
    "schedule_for",
    "scheduler_run",
]

@dataclass(frozen=True)
class EngineOptions:
    """What the engine models run: pool sizes (None = infinite; empty = :func:`default_pools`),
    the schedule (``"serial"``, ``"model"`` or a :class:`Schedule`), decode, the page size."""

    models: Sequence[str] = ()
    pools: Sequence[int | None] = ()
    schedule: str | Schedule = "model"
    decode: bool = True
    engine_block_size: int = 16
    prefill_tokens_per_s: float = 10000.0
    decode_tokens_per_s: float = 50.0
    schedule_source: str = "model"
    workers: str | int = "one"
    router: str = "round-robin"
    seed: int = 0
    decode_reuse: bool = False
    overlap_weight: float = DEFAULT_OVERLAP_WEIGHT
    router_cache_threshold: float = CacheAwareConfig.cache_threshold
    """sglang-cache-aware: SGLang's ``cache_threshold`` (the launcher's default 0.3)."""
    router_table_blocks: int = PrefixCacheConfig.block_number
    """aibrix-prefix-cache: the router's table in 4-byte blocks (``AIBRIX_PREFIX_CACHE_BLOCK_NUMBER``, default 200,000)."""
    router_temperature: float = DEFAULT_TEMPERATURE
    """kv-aware: Dynamo's ``router_temperature`` (0: the least cost, ties at random from ``seed``)."""
    router_weights: dict[str, float] | None = None
    """llm-d: scorer weights over :data:`~stackdist.serving.router_pick.LLMD_WEIGHTS` (None: those)."""
    shared_blocks: Sequence[int | None] = (0,)
    compare_routers: bool = True
    offload: Sequence[OffloadSpec] = ()
    """Offload tiers behind the models (:mod:`.offload_plan`), serial schedule."""
    scheduler: SchedulerSettings | None = None
    """With ``schedule="scheduler"``: the engine's own scheduler under load (:mod:`stackdist.serving.scheduler`)."""
    kv_groups: tuple[GroupSpec, ...] = ()
    """The model's KV cache groups when some are not full attention (:mod:`stackdist.serving.hybrid`);
    the models that support them run them all from one pool, pages stay ``engine_block_size``."""
    max_num_batched_tokens: int = 8192
    """The prefill chunk of a serial schedule with hybrid groups (vLLM's ``max_num_batched_tokens``)."""
    swa_full_tokens_ratio: float = 0.8
    """SGLang's sliding-window pool, in tokens per full-pool token (``swa_full_tokens_ratio``)."""
    layer_kv_bytes: tuple[int, int] = (0, 0)
    """With hybrid groups: KV bytes per token of all full-attention layers and of all sliding-window
    layers (a model with a separate sliding-window pool prices its pools from them)."""
    kv_block_bytes: int = 0
    """With hybrid groups: the bytes of one block (one group's layers x its block of tokens)."""


ROUTERS = ("round-robin", "random", "session", "prefix-hash", "least-loaded", SGLANG_CACHE_AWARE,
           PRODUCTION_STACK_PREFIXAWARE, AIBRIX_PREFIX_CACHE)
"""The routers :func:`assign_workers` computes before the engines run (``sglang-cache-aware``: SGLang's
router reads only its own trees and the load, :mod:`stackdist.serving.sglang_router`;
``production-stack-prefixaware``: the vLLM Production Stack router's trie of what it sent,
:mod:`stackdist.serving.production_stack_router`; ``aibrix-prefix-cache``: AIBrix's gateway reads its
own prefix table and the running counts, :mod:`stackdist.serving.aibrix_router`)."""
JOINT_ROUTERS = (KV_AWARE, LLM_D)
"""The routers that read the engines' pools at each arrival: the K pools run jointly
(:mod:`stackdist.serving.routed`); ``llm-d`` for the engine models only."""
ONE_CACHE = "one-cache"
"""The routing-worth baseline's key: one worker of K x the pool."""


def schedule_for(trace: RequestTrace, options: EngineOptions) -> Schedule:
    """The schedule the engine models run under: serial, the service model, recorded or given."""
    if options.schedule == "model":
        return Schedule.from_service_model(trace, options.prefill_tokens_per_s, options.decode_tokens_per_s)
    if options.schedule == "recorded":
        if trace.recorded_schedule_s is None:
            raise ValueError("--schedule recorded needs a trace that records when requests ran (e.g. --format dynamo)")
        times = trace.recorded_schedule_s
        return Schedule(times[:, 0], times[:, 1], times[:, 2])
    if options.schedule == "serial":
        return Schedule.serial(trace.n_requests)
    assert isinstance(options.schedule, Schedule)
    return options.schedule


def _subset(schedule: Schedule, index: np.ndarray) -> Schedule:
    if schedule.is_serial:
        return Schedule.serial(index.size)
    return Schedule(schedule.arrival_s[index], schedule.prefill_end_s[index], schedule.finish_s[index])


def assign_workers(trace: RequestTrace, options: EngineOptions, schedule: Schedule) -> np.ndarray:
    """The worker of every request: recorded in the trace, or chosen by ``options.router`` among
    ``options.workers`` workers (``least-loaded``: fewest requests running at arrival, ties to the
    lowest index; ``sglang-cache-aware``: SGLang's router over the engine pages under ``schedule``,
    :func:`~stackdist.serving.sglang_router.sglang_cache_aware`; ``production-stack-prefixaware``:
    the vLLM Production Stack's prefix trie in the order of ``schedule``'s arrivals, its random
    draws seeded by ``options.seed``,
    :func:`~stackdist.serving.production_stack_router.production_stack_prefixaware`).
    O(requests log requests) (sglang-cache-aware: O(prompt pages x workers);
    production-stack-prefixaware: O(prompt pages + requests x workers); aibrix-prefix-cache: AIBrix's
    gateway, :func:`~stackdist.serving.aibrix_router.aibrix_prefix_cache`, O(prompt pages x workers)).

    >>> t = RequestTrace.from_blocks([[1], [2], [3]])
    >>> assign_workers(t, EngineOptions(workers=2), Schedule.serial(3)).tolist()
    [0, 1, 0]
    """
    n = trace.n_requests
    if options.workers == "one":
        return np.zeros(n, np.int64)
    if options.workers == "recorded":
        if trace.workers is None:
            raise ValueError("--workers recorded needs a trace that records each request's worker (e.g. --format dynamo)")
        return trace.workers
    k = int(options.workers)
    if options.router == "round-robin":
        return np.arange(n, dtype=np.int64) % k
    if options.router == "random":
        return np.random.default_rng(options.seed).integers(0, k, n).astype(np.int64)
    if options.router == "session":
        sessions = trace.session_ids if trace.session_ids is not None else np.arange(n)
        return (_mix(sessions.astype(np.uint64)) % np.uint64(k)).astype(np.int64)
    if options.router == "prefix-hash":
        first = np.where(np.diff(trace.offsets) > 0, trace.block_ids[np.minimum(trace.offsets[:-1], max(trace.n_blocks - 1, 0))], 0)
        return (_mix(first.astype(np.uint64)) % np.uint64(k)).astype(np.int64)
    if options.router == SGLANG_CACHE_AWARE:
        return sglang_cache_aware(router_pages(trace, options.engine_block_size), schedule, k, CacheAwareConfig(cache_threshold=options.router_cache_threshold))
    if options.router == PRODUCTION_STACK_PREFIXAWARE:
        return production_stack_prefixaware(prefixaware_pages(trace), schedule, k, options.seed)
    if options.router == AIBRIX_PREFIX_CACHE:
        return aibrix_prefix_cache(router_pages(trace, options.engine_block_size), schedule, k,
                                   PrefixCacheConfig(block_number=options.router_table_blocks), options.seed)
    return _least_loaded(schedule, k)


def router_rule(router: str, options: EngineOptions) -> str:
    """A product's router in words with its settings (the cluster section's ``router_rule``), or
    "" for the plan's own routers. O(1).

    >>> router_rule("round-robin", EngineOptions())
    ''
    >>> router_rule(PRODUCTION_STACK_PREFIXAWARE, EngineOptions()).split(":")[0]
    'vLLM Production Stack router prefixaware'
    """
    if router == SGLANG_CACHE_AWARE:
        return describe(CacheAwareConfig(cache_threshold=options.router_cache_threshold), options.engine_block_size)
    if router == PRODUCTION_STACK_PREFIXAWARE:
        return describe_prefixaware(seed=options.seed)
    if router == AIBRIX_PREFIX_CACHE:
        return describe_aibrix(PrefixCacheConfig(block_number=options.router_table_blocks), options.engine_block_size,
                               options.seed)
    return ""


def _mix(values: np.ndarray) -> np.ndarray:
    """A fixed 64-bit mix (splitmix64's finaliser), so routing is reproducible across runs."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _least_loaded(schedule: Schedule, k: int) -> np.ndarray:
    import heapq

    order = np.argsort(schedule.arrival_s, kind="stable")
    running: list[tuple[float, int]] = []  # (finish, worker)
    load = [0] * k
    out = np.zeros(schedule.n_requests, np.int64)
    for r in order.tolist():
        while running and running[0][0] <= schedule.arrival_s[r]:
            load[heapq.heappop(running)[1]] -= 1
        w = min(range(k), key=lambda i: (load[i], i))
        out[r] = w
        load[w] += 1
        heapq.heappush(running, (float(schedule.finish_s[r]), w))
    return out


def default_pools(trace: RequestTrace, engine_block_size: int = 16, points: int = 8) -> tuple[int | None, ...]:
    """Pool sizes spread geometrically from the largest request's blocks to every distinct page
    (beyond which nothing is evicted serially), plus ``None`` (infinite). O(blocks).

    >>> default_pools(RequestTrace.from_blocks([[1, 2], [1, 3]], block_size=16), points=3)
    (4, 6, 8, None)
    """
    per_request = -(-(trace.input_length + np.maximum(trace.output_length, 1)) // engine_block_size)
    low = int(per_request.max(initial=1)) + 1
    pages = -(-trace.block_tokens // engine_block_size)
    high = max(low + 1, int(pages.sum()) + low)
    grid = np.unique(np.round(np.geomspace(low, high, points)).astype(np.int64))
    return (*(int(g) for g in grid), None)


def run_engine_models(trace: RequestTrace, options: EngineOptions, progress: Any = None) -> dict[str, ServingResult]:
    """Run each engine model of ``options`` once over all its pool sizes. Per size O(pages + events).

    With K workers (or recorded ones) or a shared tier the result is a :class:`ModelCluster`
    (the per-pool hits plus who served what and the hits by tier); ``--router kv-aware`` runs the
    K pools jointly (:mod:`stackdist.serving.routed`); with K > 1 and ``compare_routers`` also
    every router and one pool of K x N (what routing is worth)."""
    pools = tuple(options.pools) or default_pools(trace, options.engine_block_size)
    if options.schedule == "scheduler":  # the engine's own scheduler under load, one per worker
        return {model: scheduler_run(model, trace, options, pools, progress) for model in options.models}
    schedule = schedule_for(trace, options)
    kv_aware = options.router in JOINT_ROUTERS and options.workers not in ("one", "recorded")
    workers = np.zeros(0, np.int64) if kv_aware else assign_workers(trace, options, schedule)
    out: dict[str, ServingResult] = {}
    check_models(options)
    for model in options.models:
        if progress is not None:
            k = options.workers if kv_aware else len(np.unique(workers))
            routed = f", router {options.router}" if isinstance(options.workers, int) and options.workers > 1 else ""
            progress(f"{model} model, {len(pools)} pool sizes, {k} worker(s){routed}")
        cluster: ClusterResult | None
        if kv_aware:
            cluster = _kv_aware_run(model, trace, options, schedule, pools)
            result = _cluster_hits(cluster, len(_shared(options)))
        else:
            result = per_worker_run(model, trace, options, schedule, pools, workers)
            cluster = _static_cluster(model, result, trace, options, schedule, workers)
            cluster = _with_available(cluster, model, trace, options, schedule, workers, pools)
        worth = None
        if isinstance(options.workers, int) and options.workers > 1 and options.compare_routers:
            worth = _worth_runs(model, trace, options, schedule, pools, {options.router: cluster}, progress)
        out[model] = result if cluster is None else ModelCluster(**vars(result), cluster=cluster, worth=worth)
    return out


@dataclass(frozen=True)
class LoadResult(ServingResult):
    """An engine model's result under its own scheduler: :class:`ServingResult` (the hit at first
    admission per pool) plus the scheduler's per-request ``load`` (preemptions, queue, first token,
    finish)."""

    load: SchedulerResult | None = None


STATIC_ROUTERS = ("round-robin", "random", "session", "prefix-hash", PRODUCTION_STACK_PREFIXAWARE)
"""The routers whose choice does not depend on the workers' state or on time, only on the order of
the requests: under the scheduler each worker runs its requests alone (least-loaded,
sglang-cache-aware and kv-aware would need the schedulers jointly)."""


def scheduler_run(model: str, trace: RequestTrace, options: EngineOptions, pools: tuple[int | None, ...],
                   progress: Any) -> LoadResult | LoadCluster:
    """The model under its scheduler at every pool: one worker, or K workers behind a static
    router (each its requests, at their own arrival times, with its own pool and scheduler)."""
    spec = engine_model(model)
    settings = options.scheduler or SchedulerSettings()
    groups = options.kv_groups if spec.supports_hybrid_groups else ()  # the hybrid KV cache under the scheduler
    written = trace.input_length + (np.maximum(trace.output_length, 1) - 1 if options.decode else 0)
    smallest = int((-(-written // options.engine_block_size)).max(initial=0)) + 1
    if options.workers == "one":
        if progress is not None:
            progress(f"{model} model under its scheduler, {len(pools)} pool sizes")
        load = spec.simulate_scheduler(trace, pools, options.decode, settings, groups=groups)
        return LoadResult(model, load.pools, load.hit_tokens, load.failed_request,  # hybrid: the smallest pool unknown
                          smallest if (load.failed_request >= 0).any() and not groups else None, "scheduler", True,
                          load=load)
    if options.workers != "recorded" and options.router not in STATIC_ROUTERS:
        raise ValueError(f"under the scheduler the router must be one of {', '.join(STATIC_ROUTERS)} (each worker "
                         f"runs its own scheduler; {options.router} would need them jointly)")
    arrival = trace.timestamps_s - (trace.timestamps_s[0] if trace.n_requests else 0.0)
    workers = assign_workers(trace, options, Schedule(arrival, arrival, arrival))  # the static routers read the order at most
    ids = np.unique(workers)
    if progress is not None:
        progress(f"{model} model under its scheduler, {len(pools)} pool sizes, {ids.size} worker(s)")
    parts = []
    for w in ids.tolist():
        index = np.flatnonzero(workers == w)
        sub = trace if index.size == trace.n_requests else trace.select(index)
        parts.append((index, spec.simulate_scheduler(sub, pools, options.decode, settings, arrival_s=arrival[index],
                                                     groups=groups)))
    load = merge_loads(parts, trace.n_requests, int(options.workers) if isinstance(options.workers, int) else ids.size)
    result = ServingResult(model, load.pools, load.hit_tokens, load.failed_request,
                           smallest if (load.failed_request >= 0).any() and not groups else None, "scheduler", True)
    cluster = _static_cluster(model, result, trace, options, Schedule.serial(trace.n_requests), workers, force=True)
    return LoadCluster(**vars(result), cluster=cluster, load=load)


def merge_loads(parts: list[tuple[np.ndarray, SchedulerResult]], n: int, workers: int) -> SchedulerResult:
    """Per-worker scheduler runs as one over all ``n`` requests (rows by request index): a pool is
    feasible iff it is on every worker; GPU time and tokens add up; ``workers`` GPUs.

    >>> from stackdist.serving.scheduler import simulate_scheduler
    >>> t = RequestTrace.from_blocks([[1], [2]], block_size=16, last_tokens=[8, 8])
    >>> a, b = (simulate_scheduler(t.select(np.array([i])), [4], False, arrival_s=np.array([float(i)])) for i in (0, 1))
    >>> m = merge_loads([(np.array([0]), a), (np.array([1]), b)], 2, 2)
    >>> m.workers, m.scheduled_tokens.tolist()
    (2, [16])
    """
    first = parts[0][1]
    k = len(first.pools)
    hits, pre = np.full((k, n), -1, np.int64), np.full((k, n), -1, np.int64)
    longest = np.full((k, n), -1, np.int64) if first.group_hit_tokens is not None else None
    queue, tok, fin = (np.full((k, n), np.nan) for _ in range(3))
    failed = np.full(k, -1, np.int64)
    busy, tokens = np.zeros(k), np.zeros(k, np.int64)
    for index, r in parts:
        hits[:, index], pre[:, index] = r.hit_tokens, r.preemptions
        if longest is not None and r.group_hit_tokens is not None:
            longest[:, index] = r.group_hit_tokens
        queue[:, index], tok[:, index], fin[:, index] = r.queue_s, r.first_token_s, r.finish_s
        busy += r.busy_s
        tokens += r.scheduled_tokens
        for i, f in enumerate(r.failed_request.tolist()):
            if f >= 0 and (failed[i] < 0 or index[f] < failed[i]):
                failed[i] = index[f]
    bad = failed >= 0
    hits[bad], pre[bad], queue[bad], tok[bad], fin[bad] = -1, -1, np.nan, np.nan, np.nan
    if longest is not None:
        longest[bad] = -1
    busy[bad], tokens[bad] = np.nan, -1
    return dataclasses.replace(first, hit_tokens=hits, preemptions=pre, queue_s=queue, first_token_s=tok, finish_s=fin,
                               failed_request=failed, busy_s=busy, scheduled_tokens=tokens, workers=workers,
                               group_hit_tokens=longest)


CAPABILITIES = {"decode_reuse": "decode reuse", "tiers": "a shared tier", "routing": "the kv-aware and llm-d routers"}
"""What :func:`check_models` checks: an engine model's ``supports_<key>``, and its words."""


def check_models(options: EngineOptions, words: dict[str, str] = CAPABILITIES) -> None:
    """ValueError when a model of ``options`` is not registered, or is asked for what it does not
    model (decode reuse, a shared tier, the kv-aware joint run: its ``supports_*``), naming the
    capability in ``words`` (the caller's names for them). O(models).

    >>> check_models(EngineOptions(models=("sglang",), decode_reuse=True))
    Traceback (most recent call last):
    ValueError: decode reuse is modelled for the vllm model only
    """
    kv_aware = options.router in JOINT_ROUTERS and options.workers not in ("one", "recorded")
    asked = {"decode_reuse": options.decode_reuse, "tiers": _shared(options) != (0,), "routing": kv_aware}
    for spec in map(engine_model, options.models):
        for capability in CAPABILITIES:
            if asked[capability] and not getattr(spec, f"supports_{capability}"):
                able = [name for name, m in ENGINE_MODELS.items() if getattr(m, f"supports_{capability}")]
                raise ValueError(f"{words[capability]} is modelled for the {' and '.join(able)} "
                                 f"model{'s' if len(able) > 1 else ''} only")


def per_worker_run(model: str, trace: RequestTrace, options: EngineOptions, schedule: Schedule,
                    pools: tuple[int | None, ...], workers: np.ndarray) -> ServingResult:
    """The model on each worker's requests alone (a static assignment), merged."""
    spec = engine_model(model)

    def run(source: Any, pools: Any, schedule: Any, decode: bool, page: int) -> ServingResult:
        if options.kv_groups and spec.supports_hybrid_groups:
            return spec.simulate_hybrid(source, pools, schedule, decode, options.kv_groups, options.max_num_batched_tokens,
                                        options.swa_full_tokens_ratio)
        return spec.simulate(source, pools, schedule, decode, page)
    parts = []
    for w in np.unique(workers).tolist():
        index = np.flatnonzero(workers == w)
        sub = trace if index.size == trace.n_requests else trace.select(index)
        source: Any = sub
        if options.decode_reuse:  # only a request on the same worker can reuse its KV
            source = reuse_pages(sub, engine_pages(sub, options.engine_block_size))
        parts.append((index, run(source, pools, _subset(schedule, index), options.decode, options.engine_block_size)))
    return _merge(parts, trace.n_requests) if len(parts) != 1 else parts[0][1]


def _with_available(cluster: ClusterResult | None, model: str, trace: RequestTrace, options: EngineOptions,
                    schedule: Schedule, workers: np.ndarray, pools: tuple[int | None, ...]) -> ClusterResult | None:
    """A static router's cluster with what the fleet held: the same assignment run jointly
    (:func:`~stackdist.serving.routed.simulate_routed`, every worker probed at each arrival), for
    the routing regret. Not for recorded workers, decode reuse or models without a joint run."""
    if (cluster is None or not isinstance(options.workers, int) or options.workers < 2 or options.decode_reuse
            or model not in routed_models() or options.kv_groups and engine_model(model).supports_hybrid_groups):
        return cluster
    joint = simulate_routed(engine_pages(trace, options.engine_block_size), model, options.workers, workers, pools,
                            _shared(options), schedule, options.decode, options.overlap_weight,
                            options.engine_block_size)
    return dataclasses.replace(cluster, available_hit_tokens=joint.available_hit_tokens)


def _shared(options: EngineOptions) -> tuple[int | None, ...]:
    return tuple(options.shared_blocks) or (0,)


def _kv_aware_run(model: str, trace: RequestTrace, options: EngineOptions, schedule: Schedule,
                  pools: tuple[int | None, ...]) -> ClusterResult:
    """The K pools simulated jointly under ``options.router`` (kv-aware or llm-d; decode reuse over
    the whole trace: the earlier request's worker holds the answer's KV, whichever worker the later
    one lands on)."""
    pages = engine_pages(trace, options.engine_block_size)
    if options.decode_reuse:
        pages = reuse_pages(trace, pages)
    return simulate_routed(pages, engine_model(model), int(options.workers), options.router, pools, _shared(options),
                           schedule, options.decode, options.overlap_weight, options.engine_block_size,
                           temperature=options.router_temperature, weights=options.router_weights, seed=options.seed)


def _cluster_hits(cluster: ClusterResult, n_shared: int) -> ServingResult:
    """The GPU hits per pool of a joint run (the same at every shared-tier size)."""
    rows = np.arange(0, len(cluster.pools), n_shared)
    assert cluster.failed_request is not None
    return ServingResult(cluster.model, tuple(cluster.pools[i][0] for i in rows), cluster.gpu_hit_tokens[rows],
                         cluster.failed_request[rows], None, f"joint ({cluster.router})", False)


def _static_cluster(model: str, result: ServingResult, trace: RequestTrace, options: EngineOptions,
                    schedule: Schedule, workers: np.ndarray, force: bool = False) -> ClusterResult | None:
    """Who served what and the hits by tier under a static assignment (None for one worker and
    no shared tier, unless ``force``). The shared tier is a pass over the arrivals after the GPU
    runs (:func:`stackdist.serving.routed.shared_tier_hits`)."""
    shared = _shared(options)
    if options.workers == "one" and shared == (0,) and not force:
        return None
    index = np.unique(workers, return_inverse=True)[1].astype(np.int64).reshape(-1)
    k = int(options.workers) if isinstance(options.workers, int) else max(int(index.max(initial=0)) + 1, 1)
    pages = engine_pages(trace, options.engine_block_size)
    pairs, rows_w, rows_g, rows_s, failed = [], [], [], [], []
    for i, pool in enumerate(result.pools):
        f = int(result.failed_request[i])
        for s in shared:
            pairs.append((pool, s))
            hits = result.hit_tokens[i]
            rows_w.append(index if f < 0 else np.full(trace.n_requests, -1, np.int64))
            rows_g.append(hits)
            if f >= 0 or s == 0:
                rows_s.append(np.full(trace.n_requests, -1 if f >= 0 else 0, np.int64))
            else:
                rows_s.append(shared_tier_hits(pages, schedule, hits, s))
            failed.append(f)
    return ClusterResult(k, "recorded" if options.workers == "recorded" else options.router, tuple(pairs),
                         np.array(rows_w).reshape(len(pairs), -1), np.array(rows_g).reshape(len(pairs), -1),
                         np.array(rows_s).reshape(len(pairs), -1), failed_request=np.array(failed, np.int64), model=model)


def _worth_runs(model: str, trace: RequestTrace, options: EngineOptions, schedule: Schedule, pools: tuple[int | None, ...],
                done: dict[str, ClusterResult | None], progress: Any) -> dict[str, ClusterResult]:
    """Every router at K workers of N, and one pool of K x N (key ``one-cache``), same shared tier."""
    k = int(options.workers)
    out: dict[str, ClusterResult] = {}
    hybrid = bool(options.kv_groups) and engine_model(model).supports_hybrid_groups  # joint runs are full attention
    for name in (*ROUTERS, *(() if hybrid else JOINT_ROUTERS)):
        have = done.get(name)
        if have is not None:
            out[name] = have
            continue
        if progress is not None:
            progress(f"{model} model: what routing is worth, router {name}")
        other = dataclasses.replace(options, router=name)
        if name in JOINT_ROUTERS:
            out[name] = _kv_aware_run(model, trace, other, schedule, pools)
        else:
            workers = assign_workers(trace, other, schedule)
            cluster = _static_cluster(model, per_worker_run(model, trace, other, schedule, pools, workers), trace, other, schedule, workers)
            cluster = _with_available(cluster, model, trace, other, schedule, workers, pools)  # the router's regret
            assert cluster is not None
            out[name] = cluster
    one = dataclasses.replace(options, workers="one")
    big = tuple(None if p is None else p * k for p in pools)
    zeros = np.zeros(trace.n_requests, np.int64)
    cluster = _static_cluster(model, per_worker_run(model, trace, one, schedule, big, zeros), trace, one, schedule, zeros, True)
    assert cluster is not None
    out[ONE_CACHE] = cluster
    return out


@dataclass(frozen=True)
class ModelCluster(ServingResult):
    """An engine model's result on K workers or with a shared tier: :class:`ServingResult` (the
    GPU hits per pool) plus ``cluster`` (per pool pair: worker, GPU and shared hits) and, with K > 1,
    ``worth`` (every router and ``one-cache``, for what routing is worth)."""

    cluster: ClusterResult | None = None
    worth: dict[str, ClusterResult] | None = None


@dataclass(frozen=True)
class LoadCluster(ModelCluster):
    """An engine model under its own scheduler on K workers behind a static router: each worker
    its own pool and scheduler; :class:`ModelCluster` plus the merged per-request ``load``."""

    load: SchedulerResult | None = None


def _merge(parts: list[tuple[np.ndarray, ServingResult]], n: int) -> ServingResult:
    """Per-worker results as one: a pool is feasible iff it is on every worker (the pool is per
    worker); the smallest feasible pool is the largest of the workers' own."""
    first = parts[0][1]
    hits = np.full((len(first.pools), n), -1, np.int64)
    failed = np.full(len(first.pools), -1, np.int64)
    for index, result in parts:
        hits[:, index] = result.hit_tokens
        for i, f in enumerate(result.failed_request.tolist()):
            if f >= 0 and (failed[i] < 0 or index[f] < failed[i]):
                failed[i] = index[f]
    hits[failed >= 0] = -1
    mins = [r.min_feasible_pool for _, r in parts if r.min_feasible_pool is not None]
    proved = all(r.min_feasible_proved for _, r in parts if r.min_feasible_pool is not None) and len(mins) == len(parts)
    return ServingResult(first.engine, first.pools, hits, failed, max(mins) if mins else None,
                         "+".join(sorted({r.method for _, r in parts})), proved)


def _pool_label(pool: int | None) -> int | str:
    return "inf" if pool is None else int(pool)


def _label(blocks: int | None) -> int | str:
    return "inf" if blocks is None else int(blocks)


def _gib(blocks: int | None, bytes_per_block: int) -> float | None:
    return None if blocks is None else blocks * bytes_per_block / 2**30


def cluster_pool_row(result: ClusterResult, i: int, mask: np.ndarray, inputs: np.ndarray, bytes_per_block: int,
                     labels: list[Any], serial: bool = False) -> ClusterPoolRow:
    """Pool pair ``i`` of a cluster run over the counted requests ``mask``: hits by tier, in
    total and per worker (``labels`` name the workers; ``serial``: the run's schedule was, for
    the balance warning's reason). O(requests x workers)."""
    gpu, shared = result.gpu_hit_tokens[i], result.shared_hit_tokens[i]
    total = int(inputs[mask].sum())
    workers = []
    for w in range(result.workers):
        on = mask & (result.worker[i] == w)
        tokens = int(inputs[on].sum())
        hits = int(gpu[on].sum() + shared[on].sum())
        workers.append(ClusterWorkerRow(worker=labels[w], requests=int(on.sum()), input_tokens=tokens, hit_tokens=hits,
                                        gpu_hit_tokens=int(gpu[on].sum()), shared_hit_tokens=int(shared[on].sum()),
                                        prefix_token_hit_rate=hits / tokens if tokens else 0.0))
    g_hits, s_hits = int(gpu[mask].sum()), int(shared[mask].sum())
    c, s = result.pools[i]
    share, warning = routing_balance(result.worker[i][mask], result.workers, str(result.router), serial)
    row = ClusterPoolRow(
        gpu_blocks=_label(c), shared_blocks=_label(s), gpu_gib_per_worker=_gib(c, bytes_per_block),
        shared_gib=_gib(s, bytes_per_block), hit_tokens=g_hits + s_hits, gpu_hit_tokens=g_hits, shared_hit_tokens=s_hits,
        prefix_token_hit_rate=(g_hits + s_hits) / total if total else 0.0,
        gpu_token_hit_rate=g_hits / total if total else 0.0, shared_token_hit_rate=s_hits / total if total else 0.0,
        requests_with_hits=int(np.count_nonzero((gpu + shared)[mask])), per_worker=workers,
        busiest_worker_share=share, warnings=[warning] if warning else [])
    if result.available_hit_tokens is not None:  # what the fleet held at each arrival, against the routed worker's
        held = int(result.available_hit_tokens[i][mask].sum())
        row["available_hit_tokens"] = held
        row["available_token_hit_rate"] = held / total if total else 0.0
        row["routing_regret_percentage_points"] = 100.0 * (held - g_hits) / total if total else 0.0
        row["requests_routed_below_available"] = int(np.count_nonzero((result.available_hit_tokens[i] > gpu)[mask]))
    return row


IMBALANCE = 1.5
"""A router is flagged when its busiest worker takes over this many times its fair share
(1 / K) of the requests, over at least :data:`IMBALANCE_MIN_PER_WORKER` requests per worker (fewer
are imbalanced by chance): the K pools are not serving as K (the kv-aware router without a load
term, or prefix-hash on a trace whose prompts share their first block, send everything to one)."""

IMBALANCE_MIN_PER_WORKER = 10


SERIAL_COLLAPSE = (" (serial schedule: nothing is running when a request arrives, so the router's load terms are "
                   "the same on every worker and it sends each request to the longest cached prefix, as the product "
                   "would; a timed schedule (the service model or a recorded one) lets the load spread them)")
"""Why a load-aware router (kv-aware, llm-d) piles onto one worker under a serial schedule."""


def routing_balance(workers: np.ndarray, k: int, router: str, serial: bool = False) -> tuple[float, str]:
    """The busiest worker's share of the requests, and a warning when it is over
    :data:`IMBALANCE` times the fair share (none for one worker or the trace's recorded workers);
    for a router that reads the load (:data:`JOINT_ROUTERS`) under a ``serial`` schedule the
    warning says why (:data:`SERIAL_COLLAPSE`).

    >>> routing_balance(np.zeros(40, np.int64), 4, "prefix-hash")[1]
    'router prefix-hash sent 100.0% of the requests to worker 0 (a fair share is 25.0%): the 4 workers do not serve as 4'
    >>> routing_balance(np.arange(40) % 4, 4, "round-robin")
    (0.25, '')
    """
    valid = workers[workers >= 0]
    if k < 2 or valid.size == 0:
        return (1.0 if valid.size else 0.0), ""
    counts = np.bincount(valid, minlength=k)
    busiest = int(counts.argmax())
    share = float(counts[busiest] / valid.size)
    if router == "recorded" or share <= IMBALANCE / k or valid.size < IMBALANCE_MIN_PER_WORKER * k:
        return share, ""
    why = SERIAL_COLLAPSE if serial and router in JOINT_ROUTERS else ""
    return share, (f"router {router} sent {share:.1%} of the requests to worker {busiest} (a fair share is "
                   f"{1 / k:.1%}): the {k} workers do not serve as {k}{why}")


def _feasible(result: ClusterResult, i: int) -> bool:
    return result.failed_request is None or bool(result.failed_request[i] < 0)


def routing_worth_rows(results: dict[str, ClusterResult], mask: np.ndarray, total: int,
                       serial: bool = False) -> list[RoutingWorthRow]:
    """Per pool pair: every router's prefix token hit rate (GPU + shared) at K workers of C
    against one cache of K x C (key :data:`ONE_CACHE`), and the regret (what the fleet held at
    each arrival minus the GPU hit, percentage points of the prompt tokens) of every router whose
    run probed the workers; None where a pool is infeasible."""
    one = results[ONE_CACHE]
    rows = []
    for i, (c, s) in enumerate(one.pools):
        rate = {name: (int(r.hit_tokens[i][mask].sum()) / total if total else 0.0) if _feasible(r, i) else None
                for name, r in results.items() if name != ONE_CACHE}
        feasible = [name for name, x in rate.items() if x is not None]
        best = max(feasible, key=lambda name: rate[name] or 0.0) if feasible else None
        baseline = (int(one.hit_tokens[i][mask].sum()) / total if total else 0.0) if _feasible(one, i) else None
        gpu = next(iter(r for name, r in results.items() if name != ONE_CACHE)).pools[i][0]
        best_rate = rate[best] if best is not None else None
        shares = {name: routing_balance(r.worker[i][mask], r.workers, name, serial) for name, r in results.items()
                  if name != ONE_CACHE and _feasible(r, i)}
        regret = {name: (100.0 * int((r.available_hit_tokens[i] - r.gpu_hit_tokens[i])[mask].sum()) / total if total
                         else 0.0) if _feasible(r, i) else None
                  for name, r in results.items() if name != ONE_CACHE and r.available_hit_tokens is not None}
        rows.append(RoutingWorthRow(
            gpu_blocks=_label(gpu), shared_blocks=_label(s), one_cache_blocks=_label(c),
            one_cache_prefix_token_hit_rate=baseline, routers=rate, best_router=best,
            best_minus_one_cache_percentage_points=None if best_rate is None or baseline is None
            else 100.0 * (best_rate - baseline),
            busiest_worker_share={name: share for name, (share, _) in shares.items()},
            routing_regret_percentage_points=regret,
            warnings=[warning for _, warning in shares.values() if warning]))
    return rows


def model_cluster_section(result: ModelCluster, trace: RequestTrace, options: EngineOptions, counted: np.ndarray,
                          bytes_per_block: int) -> ClusterPlan:
    """An engine model's ``cluster`` part: per feasible (GPU, shared) pair, hits by tier per worker
    and in total; what routing is worth when every router ran. O(pairs x (requests + K))."""
    cluster = result.cluster
    assert cluster is not None
    labels: list[Any] = list(range(cluster.workers))
    if cluster.router == "recorded" and trace.workers is not None:
        labels = [int(x) for x in np.unique(trace.workers)]
    feasible = [i for i in range(len(cluster.pools)) if _feasible(cluster, i)]
    total = int(trace.input_length[counted].sum())
    weight = options.overlap_weight
    serial = not isinstance(result, LoadCluster) and schedule_for(trace, options).is_serial
    return ClusterPlan(
        semantics=result.engine, workers=cluster.workers, router=cluster.router, worker_labels=labels,
        order=("each worker's own scheduler under load, its requests at their arrival times"
               if isinstance(result, LoadCluster) else
               "the model's schedule: every worker's pool as the engine runs it, one event order"),
        pool_unit=f"gpu_blocks: each worker's pool in the engine's count ({result.engine}); shared_blocks: "
                  f"{options.engine_block_size}-token pages",
        shared_tier=("one LRU for all workers; after the GPU prefix hit the hit continues in it; the full prompt "
                     "pages from the GPU hit on are written through at arrival, tail first"),
        kv_aware=describe_dynamo(weight, options.router_temperature, options.seed),
        llm_d=describe_llmd(options.router_weights, options.seed) if cluster.router == LLM_D else "",
        sglang_cache_aware=(describe(CacheAwareConfig(cache_threshold=options.router_cache_threshold),
                                     options.engine_block_size) if cluster.router == SGLANG_CACHE_AWARE else ""),
        router_rule=router_rule(cluster.router, options),
        requests=int(counted.sum()), input_tokens=total,
        pools=[cluster_pool_row(cluster, i, counted, trace.input_length, bytes_per_block, labels, serial) for i in feasible],
        routing_worth=routing_worth_rows(result.worth, counted, total, serial) if result.worth else None,
        notes=[f"pool pair {cluster.pools[i]} infeasible (request {int(cluster.failed_request[i])} cannot allocate)"
               for i in range(len(cluster.pools)) if i not in feasible and cluster.failed_request is not None])


def engine_section(
    result: ServingResult, trace: RequestTrace, options: EngineOptions, bytes_per_token: int,
    counted: np.ndarray | None = None,
) -> dict[str, Any]:
    """The plan's rows for one engine model: per pool, hit tokens and rates over the counted
    requests (warm-up excluded), or why the pool is infeasible. O(pools x requests)."""
    mask = np.ones(trace.n_requests, bool) if counted is None else counted
    input_tokens = int(trace.input_length[mask].sum())
    block_bytes = options.engine_block_size * bytes_per_token
    rows = []
    for i, pool in enumerate(result.pools):
        failed = int(result.failed_request[i])
        row: dict[str, Any] = {"gpu_blocks": _pool_label(pool),
                               "gib": None if pool is None else pool * block_bytes / 2**30,
                               "feasible": failed < 0}
        if failed >= 0:
            row.update(hit_tokens=None, prefix_token_hit_rate=None, requests_with_hits=None, failed_request=failed)
        else:
            hits = result.hit_tokens[i][mask]
            row.update(hit_tokens=int(hits.sum()), prefix_token_hit_rate=int(hits.sum()) / input_tokens if input_tokens else 0.0,
                       requests_with_hits=int(np.count_nonzero(hits)), failed_request=None)
            load = getattr(result, "load", None)
            if load is not None:
                row["load"] = load_summary(load, i, mask, trace)
        rows.append(row)
    minimum = None
    if result.min_feasible_pool is not None:
        minimum = {"gpu_blocks": int(result.min_feasible_pool), "proved_minimal": bool(result.min_feasible_proved),
                   "gib": result.min_feasible_pool * block_bytes / 2**30}
    schedule = options.schedule_source if isinstance(options.schedule, Schedule) else options.schedule
    reuse = None
    if options.decode_reuse:  # per worker, as the model runs it (kv-aware: one joint run)
        kv_aware = options.router in JOINT_ROUTERS and options.workers not in ("one", "recorded")
        reuse_workers = None if kv_aware else assign_workers(trace, options, schedule_for(trace, options))
        reuse = reuse_report(trace, reuse_workers, options.engine_block_size)
    if trace.engine_cached_tokens is not None and (trace.engine_cached_tokens[mask] >= 0).all():
        for i, row in enumerate(rows):
            if row["feasible"]:
                row["vs_engine"] = _vs_engine(result.hit_tokens[i][mask], trace.engine_cached_tokens[mask], input_tokens)
    hybrid = hybrid_section(result, options, mask, input_tokens) if options.kv_groups and engine_model(result.engine).supports_hybrid_groups \
        else None
    if hybrid is not None:
        separate = engine_model(result.engine).separate_swa_pool
        full_b, swa_b = options.layer_kv_bytes
        for row in rows:
            n = 0 if row["gpu_blocks"] == "inf" else int(row["gpu_blocks"])
            row["gib"] = None if row["gpu_blocks"] == "inf" else (
                (n * 16 * full_b + int(n * 16 * options.swa_full_tokens_ratio) // 16 * 16 * swa_b) / 2**30 if separate
                else n * options.kv_block_bytes / 2**30)
    return {
        "model": result.engine,
        "hybrid": hybrid,
        "follows": engine_model(result.engine).follows + (
            "" if not hybrid else " + UnifiedRadixCache (FULL + MAMBA), a Mamba state pool assumed never to run out"
            if engine_model(result.engine).separate_swa_pool and "mamba" in {g.kind for g in options.kv_groups}
            else f" + UnifiedRadixCache (FULL + SWA), a sliding-window pool of "
            f"{options.swa_full_tokens_ratio:g} x the full pool's tokens" if engine_model(result.engine).separate_swa_pool
            else f" + HybridKVCacheCoordinator, one pool shared by {len(options.kv_groups)} KV cache groups"),
        "engine": {"name": engine_model(result.engine).engine, "version": engine_model(result.engine).version},
        "pool_unit": engine_model(result.engine).pool_unit,
        "engine_block_size_tokens": hybrid["block_size_tokens"] if hybrid else options.engine_block_size,
        "decode": options.decode,
        "schedule": {"kind": schedule, **vars(options.scheduler or SchedulerSettings())} if schedule == "scheduler" else
        {"kind": schedule, "prefill_tokens_per_s": options.prefill_tokens_per_s,
                     "decode_tokens_per_s": options.decode_tokens_per_s} if schedule == "model" else {"kind": schedule},
        "method": result.method,
        "requests": int(mask.sum()),
        "input_tokens": input_tokens,
        "pools": rows,
        "min_feasible_pool": minimum,
        "decode_reuse": reuse,
        "decode_reuse_bounds": decode_reuse_bounds(result, trace, options, mask),
        "cluster": model_cluster_section(result, trace, options, mask, block_bytes)
        if isinstance(result, ModelCluster) and result.cluster is not None else None,
    }


_LIMIT = {"sliding": "the sliding-window group: a hit needs the window's blocks before it cached, and with vLLM's "
                      "default retention only the window before the replay boundary (P - 1 rounded down to a block) "
                      "and before a junction is kept, so a newly shared prefix misses twice",
          "chunked": "the chunked-local group: a hit needs the current chunk's blocks from its start cached",
          "mamba": "the Mamba group: a hit needs a state checkpoint ending exactly at the hit, and with vLLM's default "
                   "retention only the state at the replay boundary and at a junction is kept, so a newly shared prefix "
                   "misses twice and a prefix shared only partly hits at the last kept state below it"}


_KEPT = {"full": "every full block of every prompt (and of the answer with decode), until evicted",
         "sliding": "with vLLM's default retention (0) only the window's blocks before each request's replay boundary and "
                    "its junction: at most two checkpoints per request; the rest is freed as the window moves",
         "chunked": "every full block, but blocks before the current chunk's start are freed while the request runs "
                    "(cached ones stay hittable until reused)",
         "mamba": "one state block per kept position: the replay boundary and the junction (at most two per request)"}


_KEPT_SGLANG = {"full": "every full page of every prompt in its radix tree, until evicted (LRU, leaves first)",
                "sliding": "in its own sliding-window pool, the live window at the end of each inserted prefix (the KV "
                           "outside the window is tombstoned at each checkpoint of a running request); a hit ends where "
                           "the window's tokens behind it are live",
                "mamba": "in its own Mamba state pool (assumed never to run out), one state per checkpoint of a request "
                         "(the last 64-token grid point or branching point of each prefill chunk, the last 256-token "
                         "point of its decode); the tree keeps a prompt's full KV only up to its last such state"}


def _checkpoint_blocks(spec: GroupSpec) -> int:
    """Blocks one group spends on one kept position: a sliding window's ``cdiv(W - 1, b)``, one
    Mamba state, one block of full or chunked attention (per block of prefix)."""
    return spec.need_blocks if spec.kind == "sliding" else 1


def hybrid_section(result: ServingResult, options: EngineOptions, mask: np.ndarray, input_tokens: int) -> dict[str, Any]:
    """The hybrid KV cache's answers: its groups and bytes per block, and per pool the hit against
    the longest single-group hit (the full-attention group's own), naming the group that limits it.
    O(pools x requests)."""
    groups = options.kv_groups
    kinds = [g.kind for g in groups]
    described = []
    own_pool = engine_model(result.engine).separate_swa_pool  # SGLang: the window lives in a pool of its own
    # a block of the shared pool (vLLM), or one 16-token page of SGLang's full-attention pool
    page_bytes = 16 * options.layer_kv_bytes[0] if own_pool and options.layer_kv_bytes[0] else options.kv_block_bytes
    for spec in dict.fromkeys(groups):
        n = groups.count(spec)
        per = None if own_pool and spec.kind in ("sliding", "mamba") else n * _checkpoint_blocks(spec)
        sglang_mamba = own_pool and "mamba" in kinds  # SGLang's 16-token pages, not vLLM's hybrid block
        described.append({"kind": spec.kind, "groups": n, "block_size_tokens": 16 if sglang_mamba else spec.block_size,
                          "window_tokens": spec.window or None, "chunk_tokens": spec.chunk or None,
                          "bytes_per_block": None if sglang_mamba else options.kv_block_bytes,
                          "kept": (_KEPT_SGLANG if own_pool else _KEPT)[spec.kind],
                          "blocks_per_checkpoint": per,
                          "bytes_per_checkpoint": None if per is None else per * page_bytes})
    others = [k for k in dict.fromkeys(kinds) if k != "full"]
    pools = []
    load = getattr(result, "load", None)  # under the scheduler (LoadResult, LoadCluster): its first admissions
    longest = result.group_hit_tokens if isinstance(result, HybridResult) else getattr(load, "group_hit_tokens", None)
    for i, pool in enumerate(result.pools):
        if result.failed_request[i] >= 0:
            continue
        hits = int(result.hit_tokens[i][mask].sum())
        row: dict[str, Any] = {"gpu_blocks": _pool_label(pool), "hit_tokens": hits,
                               "prefix_token_hit_rate": hits / input_tokens if input_tokens else 0.0}
        if longest is not None:
            full = int(longest[i][mask].sum())
            lost = int(((longest[i] > result.hit_tokens[i]) & mask).sum())
            row.update(full_attention_hit_tokens=full, tokens_lost_to_other_groups=full - hits, requests_cut=lost,
                       full_attention_prefix_token_hit_rate=full / input_tokens if input_tokens else 0.0)
        pools.append(row)
    lost_any = any(p.get("tokens_lost_to_other_groups", 0) > 0 for p in pools)
    note = (f"hits are limited by {'; and '.join(_LIMIT[k] for k in others)}" if lost_any else
            "no hit was cut by the " + ", ".join(others) + " group(s) at these pools: full attention alone finds the same"
            if longest is not None else "the hits include the " + ", ".join(others) + " group(s)' rules (the model "
            "does not separate what they cut)")
    return {"groups": described, "kv_cache_groups": len(groups),
            "bytes_per_block": None if own_pool and "mamba" in kinds else options.kv_block_bytes,
            "block_size_tokens": 16 if own_pool and "mamba" in kinds else max(g.block_size for g in groups),
            "max_num_batched_tokens": options.max_num_batched_tokens, "pools": pools, "limited_by": note,
            "pool": "a full-attention pool of the pages given (16 tokens) and a Mamba state pool assumed never to run "
                    "out" if own_pool and "mamba" in kinds else "a full-attention pool of the pages given and a "
                    f"sliding-window pool of {options.swa_full_tokens_ratio:g} x its tokens" if own_pool
            else "one pool of num_gpu_blocks shared by every group; a block holds one group's layers"}


def decode_reuse_bounds(result: ServingResult, trace: RequestTrace, options: EngineOptions,
                        mask: np.ndarray) -> dict[str, Any] | None:
    """Where the trace holds no hashes or ids of the generated tokens, which answers' KV a later
    prompt reused cannot be known from it: per pool, the hit rate with no decode reuse (the floor)
    and with every inferred continuation trusted (the ceiling of the inference: edited answers
    counted as reused), whatever ``--decode-reuse`` chose. None when the reuse is exact (output
    token ids), when nothing continues, or when the model, schedule or workers do not allow it
    (one worker, a serial or service-model schedule; the reason in ``not_given`` otherwise).
    Two more runs of the model at most. O(pools x pages).

    >>> t = RequestTrace.from_blocks([[1, 2], [1, 2, 3, 4]], block_size=16, output_length=[20, 5])
    >>> from stackdist.serving.results import ServingResult
    >>> r = ServingResult("vllm", (None,), np.array([[0, 32]]), np.array([-1]), None, "per-size")
    >>> b = decode_reuse_bounds(r, t, EngineOptions(models=("vllm",), schedule="serial"), np.ones(2, bool))
    >>> [(p["without_reuse_hit_tokens"], p["every_continuation_hit_tokens"]) for p in b["pools"]]
    [(32, 48)]
    """
    spec = engine_model(result.engine)
    if not spec.supports_decode_reuse or not options.decode or not (trace.output_length > 1).any():
        return None
    pages = engine_pages(trace, options.engine_block_size)
    if exact_answers(trace, pages):
        return None
    trusted = continuations(trace, pages, trust_edited_sessions=True)
    if not (trusted >= 0).any():
        return None
    why = "the trace holds no hashes or ids of the generated tokens: which answers' KV was reused cannot be known"
    if options.schedule == "scheduler" or options.workers != "one":
        return {"why": why, "pools": [], "not_given": "bounds are computed for one worker on a serial or service-model "
                                                        "schedule; this plan's answer is one of them"}
    if options.kv_groups and spec.supports_hybrid_groups:
        return {"why": why, "pools": [], "not_given": "decode reuse is not modelled with sliding-window, chunked-local "
                                                        "or Mamba groups; the answer assumes no answer is reused"}
    schedule = schedule_for(trace, options)
    run = spec.simulate
    without = result if not options.decode_reuse else run(pages, result.pools, schedule, True, options.engine_block_size)
    every = run(dataclasses.replace(pages, continued_by=trusted), result.pools, schedule, True, options.engine_block_size)
    total = int(trace.input_length[mask].sum())
    rows = []
    for i, pool in enumerate(result.pools):
        if without.failed_request[i] >= 0 or every.failed_request[i] >= 0:
            continue
        low, high = int(without.hit_tokens[i][mask].sum()), int(every.hit_tokens[i][mask].sum())
        rows.append({"gpu_blocks": _pool_label(pool), "without_reuse_hit_tokens": low, "every_continuation_hit_tokens": high,
                     "without_reuse_prefix_token_hit_rate": low / total if total else 0.0,
                     "every_continuation_prefix_token_hit_rate": high / total if total else 0.0})
    return {"why": why, "requests_continued_if_every_continuation_is_trusted": int((trusted >= 0).sum()), "pools": rows}


def load_summary(load: SchedulerResult, i: int, mask: np.ndarray, trace: RequestTrace) -> dict[str, Any]:
    """Pool ``i`` under the scheduler, over the counted requests: preemptions, queueing and time to
    first token (seconds; p50 / p90 / p99 and mean), the span from the first arrival to the last
    finish, and whether the queue keeps growing: the deployment does not keep up when the last
    tenth of the requests (in arrival order) queues longest of the ten tenths on average, over a
    second longer than the first tenth and over 1.5 times as long (a queue that grows and shrinks
    with the trace's load is long, not unbounded: its percentiles say how long). Over the whole trace: the GPU's busy fraction (steps running,
    over the span), the tokens served per second against what the arrivals ask
    (``served_fraction``: the arrivals' span over the span to the last finish; below 1 by the
    part of the arrival rate the deployment cannot serve), and the tokens computed again after
    preemptions.

    >>> from stackdist.serving.scheduler import simulate_scheduler
    >>> t = RequestTrace.from_blocks([[1], [1]], block_size=16, last_tokens=[8, 8])
    >>> load_summary(simulate_scheduler(t, [4], False), 0, np.ones(2, bool), t)["preemptions"]
    0
    """
    queue, ttft = load.queue_s[i][mask], load.first_token_s[i][mask]
    arrival = trace.timestamps_s - (trace.timestamps_s[0] if trace.n_requests else 0.0)

    def pct(x: np.ndarray) -> dict[str, float]:
        return {"p50": float(np.percentile(x, 50)), "p90": float(np.percentile(x, 90)),
                "p99": float(np.percentile(x, 99)), "mean": float(x.mean())}

    span = float((arrival + load.finish_s[i]).max()) if trace.n_requests else 0.0
    arrivals = float(arrival.max()) if trace.n_requests else 0.0
    outputs = np.maximum(trace.output_length, 1) if load.decode else np.ones(trace.n_requests, np.int64)
    first_work = int((trace.input_length - load.hit_tokens[i]).sum() + (outputs - 1).sum())
    busy = float(load.busy_s[i]) / max(load.workers, 1)  # per GPU
    order = np.argsort(arrival[mask], kind="stable")
    tenths = [float(x.mean()) for x in np.array_split(queue[order], 10) if x.size] or [0.0]
    early, late = tenths[0], tenths[-1]
    return {"preemptions": int(load.preemptions[i][mask].sum()),
            "requests_preempted": int(np.count_nonzero(load.preemptions[i][mask])),
            "queue_s": pct(queue), "ttft_s": pct(ttft),
            "span_s": span, "arrivals_span_s": arrivals, "busy_s": busy, "workers": load.workers,
            "gpu_busy_fraction": busy / span if span > 0 else None,
            "served_fraction": arrivals / span if span > 0 and arrivals > 0 else None,
            "prompt_tokens_per_s": float(trace.input_length.sum()) / span if span > 0 else None,
            "output_tokens_per_s": float(outputs.sum()) / span if span > 0 else None,
            "demand_prompt_tokens_per_s": float(trace.input_length.sum()) / arrivals if arrivals > 0 else None,
            "scheduled_tokens": int(load.scheduled_tokens[i]),
            "recomputed_tokens": int(load.scheduled_tokens[i]) - first_work,
            "queue_first_tenth_mean_s": early, "queue_last_tenth_mean_s": late, "queue_by_tenth_mean_s": tenths,
            "keeps_up": not (late >= max(tenths) and late > early + 1.0 and late > 1.5 * early)}


def per_request_columns(result: ServingResult | ClusterResult) -> list[tuple[str, np.ndarray]]:
    """``hit_tokens_<N>`` columns (``hit_tokens_inf`` for the infinite pool) of the feasible pools:
    the GPU prefix hits (as the engine reports them, for the models). On K workers with kv-aware
    routing each is preceded by ``worker_<N>`` (the worker at that pool); with a shared tier
    followed by ``shared_hit_tokens_<N>_<S>`` per nonzero shared size S. A :class:`ClusterResult`
    (the engine semantics on K workers) gives the same columns.

    >>> r = ServingResult("vllm", (4, None), np.array([[0, 16], [0, 32]]), np.array([-1, -1]), None, "per-size")
    >>> [name for name, _ in per_request_columns(r)]
    ['hit_tokens_4', 'hit_tokens_inf']
    """
    cluster = result if isinstance(result, ClusterResult) else getattr(result, "cluster", None)
    if cluster is None:
        assert isinstance(result, ServingResult)
        ok = [(i, _pool_label(pool)) for i, pool in enumerate(result.pools) if result.failed_request[i] < 0]
        plain = [(f"hit_tokens_{label}", result.hit_tokens[i]) for i, label in ok]
        return plain + _load_columns(result, ok)
    columns: list[tuple[str, np.ndarray]] = []
    held: list[tuple[str, np.ndarray]] = []
    for pool in dict.fromkeys(g for g, _ in cluster.pools):
        rows = [j for j, (g, _) in enumerate(cluster.pools) if g == pool]
        if not _feasible(cluster, rows[0]):
            continue
        if cluster.router in JOINT_ROUTERS:
            columns.append((f"worker_{_pool_label(pool)}", cluster.worker[rows[0]]))
        columns.append((f"hit_tokens_{_pool_label(pool)}", cluster.gpu_hit_tokens[rows[0]]))
        if cluster.available_hit_tokens is not None:  # the best worker's prefix hit at arrival: after the others
            held.append((f"available_hit_tokens_{_pool_label(pool)}", cluster.available_hit_tokens[rows[0]]))
        columns += [(f"shared_hit_tokens_{_pool_label(pool)}_{_pool_label(cluster.pools[j][1])}", cluster.shared_hit_tokens[j])
                    for j in rows if cluster.pools[j][1] != 0]
    columns += held
    if isinstance(result, ServingResult):  # under the scheduler on K workers
        columns += _load_columns(result, [(i, _pool_label(p)) for i, p in enumerate(result.pools)
                                          if result.failed_request[i] < 0])
    return columns


def _load_columns(result: ServingResult, ok: list[tuple[int, int | str]]) -> list[tuple[str, np.ndarray]]:
    """Under the scheduler, per feasible pool: preemptions, queue, first-token and finish times."""
    load = getattr(result, "load", None)
    if load is None:
        return []
    return [(f"{name}_{label}", np.round(getattr(load, name)[i], 6) if name != "preemptions" else getattr(load, name)[i])
            for name in ("preemptions", "queue_s", "first_token_s", "finish_s") for i, label in ok]

def per_request_workers(result: ServingResult | ClusterResult) -> np.ndarray | None:
    """The ``worker`` column of a cluster run: the index each request was routed to (the same at
    every pool), -1 for kv-aware (see ``worker_<N>``); None (the trace's own) otherwise."""
    cluster = result if isinstance(result, ClusterResult) else getattr(result, "cluster", None)
    if cluster is None or cluster.router == "recorded":
        return None
    if cluster.router in JOINT_ROUTERS:
        return np.full(cluster.worker.shape[1], -1, np.int64)
    feasible = [i for i in range(len(cluster.pools)) if _feasible(cluster, i)]
    return cluster.worker[feasible[0]] if feasible else None


def parse_pools(text: str, flag: str = "--gpu-blocks") -> tuple[int | None, ...]:
    """``"1000,2000,inf"`` as pool sizes (``inf`` is None); ValueError naming ``flag`` otherwise.

    >>> parse_pools("1000, inf")
    (1000, None)
    """
    pools: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() in ("inf", "infinite", "unlimited"):
            pools.append(None)
        elif part.isdigit() and 1 <= int(part) < 2**62:
            pools.append(int(part))
        else:
            raise ValueError(f"{flag} must be comma-separated pool sizes (positive integers, or inf); got {text!r}")
    if not pools:
        raise ValueError(f"{flag} must name at least one pool size; got {text!r}")
    return tuple(pools)


def _vs_engine(predicted: np.ndarray, engine: np.ndarray, input_tokens: int) -> dict[str, Any]:
    """Prediction against the engine's own reported hits, in total and per request.

    >>> _vs_engine(np.array([16, 0]), np.array([16, 8]), 40)["requests_exact"]
    1
    """
    diff = predicted - engine
    return {
        "engine_cached_tokens": int(engine.sum()),
        "predicted_cached_tokens": int(predicted.sum()),
        "error_tokens": int(diff.sum()),
        "error_percentage_points": 100.0 * int(diff.sum()) / input_tokens if input_tokens else 0.0,
        "requests_exact": int(np.count_nonzero(diff == 0)),
        "mean_abs_error_tokens_per_request": float(np.abs(diff).mean()) if diff.size else 0.0,
    }
