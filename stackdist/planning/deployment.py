"""The deployment answer: what the deployment the user names delivers, and the cheapest one that
reaches each target, every point an exact simulation of the engine model (and its offload tier).

A **deployment** is ``R`` replicas of ``TP`` GPUs (``--gpu``, ``--gpus-per-replica``, ``--gpus``),
each with vLLM's KV pool for the model (:func:`~.hardware.replica_pool`: ``num_gpu_blocks``), the
engine model (``vllm`` unless ``--semantics`` names another), a static router over the replicas
(``--router``; one replica: none), and optionally an offload tier per replica (``--offload``: its
first size; each replica has its own, :class:`~.offload_plan.PerWorker`). It **delivers** a prefix
hit rate by tier (GPU, then the tiers, the last prompt token recomputed as the engine does) and
costs US$ per hour (:func:`~.prices.deployment_cost`: GPUs x their hourly price, CPU as DRAM and
disk as SSD amortised) and US$ per million input tokens at the trace's arrival rate.

**The cheapest deployment per target.** Each ``--targets`` value is read twice, as the plan's
working sets read it: as a fraction of the ceiling (the engine model's hit rate with one pool that
never evicts: everything the trace could reuse, on one replica) and as an absolute prefix token hit
rate (above the ceiling: unreachable, said so). For
each replica count ``R = 1 .. max_replicas`` the GPU-only deployment is simulated; when it falls
short and an offload model is given, the tier size per replica that reaches the target is found
by the offload plan's bisection (log space, within 2 % or one unit, every point exact; sizes are
per replica). With a second tier (LMCache's local disk behind its CPU tier) that CPU size and its
halvings (up to six) each get the smallest disk size that reaches the target, found by the same
bisection, while each step saves at least 0.1 % of the price: replicas x CPU x disk, every point exact (the search is stated,
not an optimum: hits are not proved monotone in either size). Each candidate is priced; the cheapest that reaches the target is the answer, with
the candidates kept in the JSON. A target that no candidate reaches says so (more replicas split
the reuse across pools: a static router's ceiling is below one pool's). The search is exhaustive
over ``R`` and a bisection over the tier size (the hit rate is not proved monotone in it).

**Routers.** The hits come from the engine model behind the router the user names, simulated
jointly with the replicas' pools where the router reads them (kv-aware, llm-d, least-loaded); each
replica's tiers then run on the requests that router sent it (serial: tiers change neither the
GPU hits nor a router that scores GPU hits). The scheduler runs one engine per replica, so under
load a router that reads the replicas' state is stood in by the session router (said so).

**Load.** A deployment must also keep up with the arrivals. With a step time (the scheduler's:
given, fitted or the GPU and model's roofline, :mod:`.step_time`) the engine's own scheduler runs
the replicas behind the router (:mod:`stackdist.serving.scheduler`, one scheduler per replica,
GPU pools only) for ``R = 1, 2, ...`` until one keeps up (:func:`~.engine_plan.load_summary`);
the search considers only that many replicas or more, and the deployment the user names reports
its TTFT under load. Tiers are not in the scheduler model (their loads would only add time), so
the load floor is a lower bound on the replicas.

**TTFT targets** (a percentile at most so many seconds, e.g. p99 within 2 s): the fewest
replicas from the load floor up whose scheduler run meets it (GPU pools behind the router), priced.

Not modelled here: shared tiers across replicas (``--shared-blocks``: the routing section answers
them), tiers in the TTFT targets and the load floor (the scheduler model has GPU pools only),
joint routers under load.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.errors import DeploymentError
from stackdist.serving.engine_model import engine_model
from stackdist.serving.offload import OffloadSpec, TierConfig, offload_model
from stackdist.serving.offload.spec import resolve_offload
from stackdist.serving.pages import engine_pages
from stackdist.serving.scheduler import SchedulerSettings
from stackdist.traces import RequestTrace

from .engine_plan import (
    EngineOptions,
    load_summary,
    routing_balance,
    run_engine_models,
    scheduler_run,
)
from .offload_plan import (
    PRECISION,
    PerWorker,
    counted_hits,
    distinct_units,
    size_search,
)

__all__ = ["DeploymentSpec", "deployment_report", "replayable"]


def replayable(trace: RequestTrace, page_tokens: int) -> str:
    """Why the engine models cannot replay ``trace`` at ``page_tokens``-token pages (e.g. an
    LMCache lookup log hashes full chunks only, so its blocks do not cover the prompts), or ""
    when they can. O(pages).

    >>> replayable(RequestTrace.from_blocks([[1, 2]], block_size=16), 16)
    ''
    """
    try:
        engine_pages(trace, page_tokens)
    except ValueError as exc:
        return f"the engine models cannot replay this trace ({exc}), so no deployment is simulated"
    return ""

@dataclass(frozen=True)
class DeploymentSpec:
    """The deployment the user names: replicas of ``gpus_per_replica`` GPUs with ``pool`` blocks
    (the engine's unit) each, the engine model, the router, an offload specification (its first
    size is the deployment's tier), and the search bound."""

    engine: str
    replicas: int
    gpus_per_replica: int
    pool: int
    router: str = "round-robin"
    offload: OffloadSpec | None = None
    max_replicas: int = 16
    scheduler: SchedulerSettings | None = None  # the step time: load decides the fewest replicas
    note: str = ""  # e.g. why the router differs from the one asked for
    ttft_targets: tuple[tuple[str, float], ...] = ()  # (percentile "p50" / "p90" / "p99", seconds)
    load_router: str | None = None  # the static router of the scheduler runs (None: ``router``)

    @property
    def scheduler_router(self) -> str:
        """The router of the load runs: each replica runs its own scheduler, so a router that reads
        the replicas' state (kv-aware, least-loaded, llm-d) is stood in by a static one there."""
        return self.load_router or self.router


def _engine_hits(trace: RequestTrace, options: EngineOptions, spec: DeploymentSpec, replicas: int,
                 pool: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per request GPU hits of ``replicas`` replicas of ``pool`` behind the router (serial), and
    the replica each request went to (the router's choice in that run: a router that reads the
    pools is simulated jointly with them)."""
    opts = dataclasses.replace(options, models=(spec.engine,), pools=(pool,), schedule="serial", offload=(),
                               scheduler=None, workers="one" if replicas == 1 else replicas, router=spec.router,
                               shared_blocks=(0,), decode_reuse=False)
    result = run_engine_models(trace, dataclasses.replace(opts, compare_routers=False))[spec.engine]
    if result.failed_request[0] >= 0:  # the engine could not run the trace on this deployment: exit 1, why
        raise DeploymentError(f"a replica's pool of {pool:,} {spec.engine} blocks cannot hold request "
                              f"{int(result.failed_request[0])} (its prompt and output) on {replicas} replica(s)")
    cluster = getattr(result, "cluster", None)
    workers = np.asarray(cluster.worker[0]) if cluster is not None else np.zeros(trace.n_requests, np.int64)
    return np.asarray(result.hit_tokens[0]), workers


GIVEN = -1
"""A tier size meaning "as the specification gives it" (sizes are otherwise >= 0, or None)."""


class _Tiers:
    """The offload model behind ``replicas`` replicas (each its own tiers; ``workers`` the replica
    of every request): the counted hits (GPU + tiers) at a first-tier size per replica and,
    for a model with a second tier (LMCache's disk), a second-tier size; unsized tiers at the
    specification's first configuration. Serial, so the tiers do not change the GPU hits (the
    engine allocates a block for every prompt page past its GPU hit, loaded or computed) nor the
    router's choices (it scores GPU hits), and each replica's tiers run on its requests alone."""

    def __init__(self, trace: RequestTrace, options: EngineOptions, spec: DeploymentSpec, replicas: int,
                 gpu_hits: np.ndarray, workers: np.ndarray, bytes_per_token: int, counted: np.ndarray):
        assert spec.offload is not None
        self.model = offload_model(spec.offload.model)
        self.pages = engine_pages(trace, options.engine_block_size)
        self.configs = resolve_offload(spec.offload, bytes_per_token, options.engine_block_size)
        self.runner: Any = PerWorker(self.model, workers, self.pages) if replicas > 1 else self.model
        self.gpu_hits, self.pool, self.counted, self.decode = gpu_hits[None, :], spec.pool, counted, options.decode
        self.first = self.model.tiers[0]
        self.second = self.model.tiers[1] if len(self.model.tiers) > 1 else None
        options_ = dict(self.configs[0].options)
        self.unit_tokens = self.model.chunk_tokens(options_, self.pages.page_tokens)
        self.unit_bytes = self.unit_tokens * bytes_per_token
        self.never_evicts = distinct_units(self.pages, self.unit_tokens)
        self.cache: dict[tuple[int | None, int | None], tuple[int, dict[str, int]]] = {}

    def given_second(self) -> int | None:
        """The second tier's size in the specification (0 when it names none)."""
        return self.configs[0].size(self.second) if self.second is not None else None

    def sizes(self, first: int | None, second: int | None = GIVEN) -> tuple[tuple[str, int | None], ...]:
        """Every tier's size per replica (``None``: never evicts; ``GIVEN``: the specification's)."""
        rest = tuple((t, self.configs[0].size(t)) for t in self.model.tiers[1:])
        if self.second is not None and second != GIVEN:
            rest = ((self.second, second), *rest[1:])
        return ((self.first, first), *rest)

    def hits(self, first: int | None, second: int | None = GIVEN) -> tuple[int, dict[str, int]]:
        """Counted hits and hits by tier at these sizes per replica (as :meth:`sizes`)."""
        if self.second is not None and second == GIVEN:
            second = self.given_second()
        if (first, second) not in self.cache:
            config = TierConfig(self.sizes(first, second), self.configs[0].options)
            one = self.runner.simulate(self.pages, [self.pool], self.gpu_hits, [config], self.decode)
            self.cache[first, second] = counted_hits(self.model, one, self.pages, 0, 0, self.counted)
        return self.cache[first, second]

    def gib(self, units: int | None) -> float:
        return (units or 0) * self.unit_bytes / 2**30


def _load(trace: RequestTrace, options: EngineOptions, spec: DeploymentSpec, replicas: int) -> dict[str, Any]:
    """``replicas`` replicas of the pool under the engine's scheduler: TTFT, keeping up, served share."""
    opts = dataclasses.replace(options, models=(spec.engine,), pools=(spec.pool,), schedule="scheduler",
                               scheduler=spec.scheduler, workers="one" if replicas == 1 else replicas,
                               router=spec.scheduler_router)
    result: Any = scheduler_run(spec.engine, trace, opts, (spec.pool,), None)
    if result.load is None or result.failed_request[0] >= 0:
        return {"keeps_up": False, "infeasible": True}
    summary = load_summary(result.load, 0, np.ones(trace.n_requests, bool), trace)
    return {"keeps_up": summary["keeps_up"], "ttft_s": summary["ttft_s"], "served_fraction": summary["served_fraction"],
            "preemptions": summary["preemptions"]}


def _ttft_targets(trace: RequestTrace, options: EngineOptions, spec: DeploymentSpec, runs: list[dict[str, Any]],
                  floor: int | None, cost: Callable[..., dict[str, Any]],
                  stage: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Per TTFT target (a percentile at most so many seconds, under the engine's scheduler): the
    fewest replicas (GPU pools behind the router, from the load floor up) that meet it, priced;
    the scheduler runs are shared with the load floor's. Unmet up to ``max_replicas``: said so."""
    if not spec.ttft_targets:
        return []
    if spec.scheduler is None or floor is None:
        why = ("no step time (give one, or a GPU and model)" if spec.scheduler is None else
               f"no deployment of up to {spec.max_replicas} replicas keeps up with the arrivals")
        return [{"percentile": p, "seconds": s, "cheapest": None, "unreachable": why} for p, s in spec.ttft_targets]
    by = {row["replicas"]: row for row in runs}
    out = []
    for pct, seconds in spec.ttft_targets:
        best = None
        for replicas in range(floor, spec.max_replicas + 1):
            if replicas not in by:
                if stage is not None:
                    stage(f"deployment: TTFT {pct} <= {seconds:g} s, {replicas} replica(s) under load")
                by[replicas] = {"replicas": replicas, **_load(trace, options, spec, replicas)}
            row = by[replicas]
            if row.get("ttft_s") and row["keeps_up"] and row["ttft_s"][pct] <= seconds:
                best = {"replicas": replicas, "gpus": replicas * spec.gpus_per_replica, "ttft_s": row["ttft_s"],
                        "cost": cost(replicas * spec.gpus_per_replica, 0.0, 0.0, None)}
                break
        out.append({"percentile": pct, "seconds": seconds, "cheapest": best,
                    **({} if best else {"unreachable": f"no deployment of {floor} to {spec.max_replicas} replicas "
                                                       f"behind {spec.scheduler_router} has TTFT {pct} at most {seconds:g} s"})})
    return out


def _priced(cost: Callable[..., dict[str, Any]], spec: DeploymentSpec, replicas: int, tiers: _Tiers | None,
            first: int | None, hit_rate: float, second: int | None = GIVEN) -> dict[str, Any]:
    memory = {"dram": 0.0, "ssd": 0.0}
    sizes: dict[str, Any] = {}
    if tiers is not None:
        for tier, size in tiers.sizes(first, second):
            sizes[tier] = {tiers.model.unit: size, "gib_per_replica": tiers.gib(size)}
            memory[tiers.model.tier_memory.get(tier, "dram")] += tiers.gib(size) * replicas  # priced as the model says
    return {"replicas": replicas, "gpus": replicas * spec.gpus_per_replica, "tiers_per_replica": sizes,
            "prefix_token_hit_rate": hit_rate,
            "cost": cost(replicas * spec.gpus_per_replica, memory["dram"], memory["ssd"], hit_rate)}


HALVINGS = 6
"""How far the two-tier search shrinks the first tier: to 1/64 of the size it needs alone."""
MIN_SAVING = 0.001
"""The two-tier search stops halving once a step saves less than this share of the price (0.1 %:
about a cent an hour on three GPUs)."""


def _tier_candidates(t: _Tiers, need: int, replicas: int, cost: Callable[..., dict[str, Any]], spec: DeploymentSpec,
                     rate: Callable[[int], float]) -> list[dict[str, Any]]:
    """The priced tier sizes per replica that reach ``need`` counted hits at this replica count:
    the first tier alone (the second as given), found by bisection; then, for a model with a
    second tier (LMCache's disk behind its CPU), that first tier and its halvings (up to
    ``HALVINGS``), each with the second tier's smallest size that reaches the target found by
    bisection, while the price falls by at least ``MIN_SAVING`` of it and the second tier can still
    make up the difference
    (every point an exact simulation; the hits are not proved monotone in either size, hence a
    stated search, not an optimum).
    O((HALVINGS + 1) x log(units) offload runs)."""
    out: list[dict[str, Any]] = []

    def search(evaluate: Callable[[int | None], int]) -> int:
        top = evaluate(None)
        return int(size_search(evaluate, [need / top] if top else [1.0], t.never_evicts, PRECISION, 2)[0]["size"])

    first: int | None = None
    if t.hits(None)[0] >= need:
        first = search(lambda size: t.hits(size)[0])
        out.append(_priced(cost, spec, replicas, t, first, rate(t.hits(first)[0])))
    if t.second is None:
        return out
    top = first if first is not None else t.never_evicts
    for cpu in [top] * (first is not None) + [top >> h for h in range(1, HALVINGS + 1)]:
        if cpu < 1 or t.hits(cpu, None)[0] < need:
            break  # even a second tier that never evicts does not make up for a smaller first tier

        def evaluate(size: int | None, cpu: int = cpu) -> int:
            return t.hits(cpu, size)[0]

        disk = search(evaluate)
        if cpu == first and disk == (t.given_second() or 0):
            continue  # the first tier alone's candidate again
        row = _priced(cost, spec, replicas, t, cpu, rate(evaluate(disk)), disk)
        best = min((c["cost"]["usd_per_hour"] for c in out), default=math.inf)
        if row["cost"]["usd_per_hour"] > best:
            break
        out.append(row)
        if row["cost"]["usd_per_hour"] > best * (1 - MIN_SAVING):
            break  # smaller first tiers save less than MIN_SAVING of the price: not worth more runs
    return out


def deployment_report(trace: RequestTrace, options: EngineOptions, spec: DeploymentSpec, counted: np.ndarray,
                      bytes_per_token: int, cost: Callable[..., dict[str, Any]], targets: Sequence[float],
                      stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The plan's ``deployment`` section (module docstring). O(max_replicas x (engine run + tier
    bisection))."""
    total = int(trace.input_length[counted].sum())
    rate = (lambda tokens: tokens / total if total else 0.0)
    model = engine_model(spec.engine)
    if stage is not None:
        stage(f"deployment: {spec.replicas} replica(s) of {spec.pool:,} {spec.engine} blocks, router {spec.router}")
    ceiling = int(_engine_hits(trace, options, spec, 1, None)[0][counted].sum())
    found: dict[int, tuple[int, _Tiers | None]] = {}
    balance: dict[int, str] = {}  # replicas -> the router's imbalance warning (a router that collapses)

    def at(replicas: int) -> tuple[int, _Tiers | None]:
        if replicas not in found:
            gpu, workers = _engine_hits(trace, options, spec, replicas, spec.pool)
            tiers = (_Tiers(trace, options, spec, replicas, gpu, workers, bytes_per_token, counted)
                     if spec.offload is not None else None)
            found[replicas] = int(gpu[counted].sum()), tiers
            balance[replicas] = routing_balance(workers, replicas, spec.router, serial=True)[1] if replicas > 1 else ""
        return found[replicas]

    load_rows: list[dict[str, Any]] = []
    floor: int | None = 1
    if spec.scheduler is not None and model.supports_scheduler:
        floor = None
        for replicas in range(1, spec.max_replicas + 1):
            if stage is not None:
                stage(f"deployment: {replicas} replica(s) under load (the engine's scheduler)")
            load = _load(trace, options, spec, replicas)
            load_rows.append({"replicas": replicas, **load})
            if load["keeps_up"]:
                floor = replicas
                break
    ttft_answers = _ttft_targets(trace, options, spec, load_rows, floor, cost, stage)
    under_load = _load(trace, options, spec, spec.replicas) if spec.scheduler is not None and model.supports_scheduler \
        else None
    gpu_hits, tiers = at(spec.replicas)
    delivers: dict[str, Any] = {"gpu_token_hit_rate": rate(gpu_hits)}
    first = None
    if tiers is not None:
        first = tiers.configs[0].size(tiers.first)
        hits, by_tier = tiers.hits(first)
        delivers["tier_token_hit_rate"] = {t: rate(v) for t, v in by_tier.items()}
        delivers["prefix_token_hit_rate"] = rate(hits)
    else:
        delivers["prefix_token_hit_rate"] = rate(gpu_hits)
    delivers.update(_priced(cost, spec, spec.replicas, tiers, first, delivers["prefix_token_hit_rate"]))
    if under_load is not None:
        delivers["under_load"] = under_load
    answers: list[dict[str, Any]] = []
    for kind, target in [(k, t) for k in ("fraction_of_ceiling", "token_hit_rate") for t in targets]:
        need = math.ceil(target * (ceiling if kind == "fraction_of_ceiling" else total) - 1e-9)
        if need > ceiling:
            answers.append({"target": target, "kind": kind, "needs_prefix_token_hit_rate": rate(need), "cheapest": None,
                            "candidates": [], "unreachable": f"above the ceiling ({rate(ceiling):.2%}): no cache reaches it"})
            continue
        candidates = []
        most = (0, 0)  # the most any replica count reaches (hits, replicas), for an unreachable target
        for replicas in range(floor or spec.max_replicas + 1, spec.max_replicas + 1):
            if stage is not None:
                stage(f"deployment: {target:g} of the ceiling, {replicas} replica(s)")
            gpu_only, tiers_r = at(replicas)
            most = max(most, (gpu_only if tiers_r is None else tiers_r.hits(None, None)[0], replicas))
            found_here = []
            if gpu_only >= need:
                found_here.append(_priced(cost, spec, replicas, tiers_r, 0 if tiers_r else None, rate(gpu_only),
                                          0 if tiers_r is not None and tiers_r.second is not None else GIVEN))
            elif tiers_r is not None:
                found_here = _tier_candidates(tiers_r, need, replicas, cost, spec, rate)
            candidates += [{**c, "routing_warning": balance[replicas]} if balance[replicas] else c for c in found_here]
            if gpu_only >= need:
                break  # more replicas only cost more
        best = min(candidates, key=lambda c: c["cost"]["usd_per_hour"]) if candidates else None
        answers.append({"target": target, "kind": kind, "needs_prefix_token_hit_rate": rate(need),
                        "cheapest": best, "candidates": candidates,
                        **({} if best else {"unreachable": (
                            f"no deployment of up to {spec.max_replicas} replicas keeps up with the arrivals"
                            if floor is None else
                            f"no deployment of {floor} to {spec.max_replicas} replicas behind {spec.router}"
                            + (" with any tier size" if spec.offload else " without an offload tier")
                            + f" reaches it (at most {rate(most[0]):.2%}, {most[1]} replicas"
                            + (" with tiers that never evict" if spec.offload else "")
                            + "): a static router splits the reuse across the replicas' pools")})})
    return {
        "engine": spec.engine, "router": spec.router if spec.replicas > 1 else None,
        "follows": model.follows + (f" + HybridKVCacheCoordinator, {len(options.kv_groups)} KV cache groups in one pool"
                                    if options.kv_groups and model.supports_hybrid_groups else ""),
        "replicas": spec.replicas, "gpus_per_replica": spec.gpus_per_replica, "pool_per_replica": spec.pool,
        "offload": spec.offload.text if spec.offload else None,
        "notes": [n for n in (spec.note, balance.get(spec.replicas, "")) if n],
        "offload_model": spec.offload.model if spec.offload else None,
        "ceiling_prefix_token_hit_rate": rate(ceiling),
        "delivers": delivers, "targets": answers, "ttft_targets": ttft_answers,
        "load": {"fewest_replicas_keeping_up": floor, "runs": load_rows,
                 "step_time": (spec.scheduler.step_time_detail if spec.scheduler else None),
                 **({} if spec.scheduler is not None and model.supports_scheduler else {
                     "not_given": "no step time or no scheduler model for this engine: replicas from hit rates only"})},
        "search": (f"replicas 1 to {spec.max_replicas} behind {spec.router}, each with vLLM's pool for the model; "
                   + ("per replica count the first tier's size per replica by bisection in log space to within "
                      f"{PRECISION:.0%} (or one unit)" if spec.offload else "")
                   + ((f", then that size and its halvings (up to {HALVINGS}), each with the second tier's smallest size by the same "
                       f"bisection, while each step saves at least {MIN_SAVING:.1%} of the price; " if spec.offload and len(offload_model(spec.offload.model).tiers) > 1
                       else "; ") if spec.offload else "")
                   + (f"the load runs (scheduler) behind {spec.scheduler_router}; " if spec.scheduler_router != spec.router
                      else "")
                   + "every point an exact simulation (serial schedule); the cheapest in US$ per hour that reaches the "
                     "target is the answer"),
        "bound": "the pooled exclusive LRU (all replicas' HBM and the tier as one cache) is the budgets section's "
                 "'needs' rows: an optimistic bound, not a deployment",
    }
