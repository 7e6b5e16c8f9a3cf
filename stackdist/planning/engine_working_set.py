"""The engine models' working sets: per target, the smallest pool reaching that fraction of the
model's own ceiling (its hit rate with an infinite pool), in the engine's unit and GiB.

Two ways, and the plan says which (``working_set.method`` and ``exact``):

- **one replay** (exact): when the model has one hit curve for every pool
  (:meth:`~stackdist.serving.engine_model.EngineModel.hit_pools`: vLLM on a serial schedule, one
  worker, when its one-replay claim holds), each page that ever hits has the smallest pool from
  which it hits, so the hit tokens at pool N are ``page_tokens`` x the counted pages whose pool is
  <= N (feasible pools only). The answer is the smallest feasible pool reaching the target,
  exactly; the curve's points are exact too.
- **bisection** (the other cases: SGLang, timed schedules, K workers behind a static router,
  decode reuse, a trace breaking vLLM's claim): each probe is one exact simulation of the
  model at one pool size (the run's own pools are probes already). Per target the bracket is
  ``(lo, hi]``: hi the smallest probed pool reaching the target (at first a pool that never
  evicts: every page the trace writes, whose hits are the infinite pool's), lo the largest probed
  pool below hi that does not (or is infeasible); the midpoints of all open brackets are probed
  together each round (the geometric midpoint) until ``hi = lo + 1`` or ``hi <= lo x 1.01``
  (:data:`PRECISION`: about 10 rounds on the bundled conversation trace instead of 23). The answer
  is hi: the smallest *probed* pool reaching the target, whose lower bracket end ``lo`` (the pool
  one smaller, or within 1 % below) was probed and does not. Hits are not proved monotone in the
  pool (SGLang's are not, :mod:`stackdist.serving.sglang`), so a smaller unprobed pool may reach
  it too; the search is stated beside the answer.

With hybrid KV cache groups the search is :func:`.hybrid_working_set.hybrid_search` (targets as
fractions of the full-attention group's ceiling, the full-attention group's own working set beside).

Under the engine's scheduler (schedule ``scheduler``) and the kv-aware router there is no search (each probe would be a
whole run under load, or the K pools jointly): the section says so and the pools rows stand.

>>> from stackdist.traces import RequestTrace
>>> from stackdist.planning.engine_plan import EngineOptions, run_engine_models
>>> t = RequestTrace.from_blocks([[1, 2], [3], [1, 2], [3]], block_size=16, last_tokens=[8, 8, 8, 8])
>>> opts = EngineOptions(models=("vllm",), pools=(None,), schedule="serial", decode=False)
>>> r = run_engine_models(t, opts)["vllm"]
>>> ws = engine_working_set(r, t, opts, np.ones(4, bool), 1024, [0.5, 1.0])
>>> ws["method"], [(row["gpu_blocks"], row["hit_tokens"]) for row in ws["rows"]]
('one-replay', [(3, 16), (3, 16)])
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

PRECISION = 0.01
"""The bisection stops when the bracket ``(lo, hi]`` is within this relative width (or one pool)."""

import numpy as np

from stackdist.serving.engine_model import engine_model
from stackdist.serving.hybrid import GroupSpec
from stackdist.serving.pages import engine_pages
from stackdist.serving.results import ServingResult
from stackdist.traces import RequestTrace

from .engine_plan import (
    JOINT_ROUTERS,
    EngineOptions,
    assign_workers,
    per_worker_run,
    schedule_for,
)
from .hybrid_working_set import hybrid_search

__all__ = ["CURVE_POINTS", "engine_working_set"]

CURVE_POINTS = 400
"""At most this many points of an exact (one-replay) curve go in the plan (log-spaced breakpoints)."""


def engine_working_set(result: ServingResult, trace: RequestTrace, options: EngineOptions, counted: np.ndarray,
                       bytes_per_token: int, targets: Sequence[float], progress: Any = None) -> dict[str, Any]:
    """The ``working_set`` part of an engine model's plan section (module docstring): the
    ceiling, one row per target (the pool, its GiB and hits, and the pool one smaller), the
    method and search, and the points known exactly (the curve, or every probed pool)."""
    spec = engine_model(result.engine)
    B = options.engine_block_size
    block_bytes = B * bytes_per_token
    input_tokens = int(trace.input_length[counted].sum())
    if options.schedule == "scheduler":
        return {"skipped": "not searched under the engine's scheduler: each probe would be a whole run of the "
                           "scheduler under load; the pools rows are the answers at the sizes given"}
    if options.kv_groups and spec.supports_hybrid_groups and spec.separate_swa_pool:
        return {"skipped": f"not searched for {spec.engine} with sliding-window or Mamba layers: its model answers only pools "
                           "where the engine evicts nothing from its tree (smaller pools are refused), so no bisection "
                           "over pools; the pools rows are the answers at the sizes given"}
    if options.kv_groups and spec.supports_hybrid_groups:  # planning/hybrid_working_set.py
        given = {pool: int(result.hit_tokens[i][counted].sum()) if result.failed_request[i] < 0 else -1
                 for i, pool in enumerate(result.pools)}
        schedule = schedule_for(trace, options)
        if options.workers == "one":
            pages = engine_pages(trace, 16)  # the hybrid models' 16-token pages, made once

            def simulate(groups: tuple[GroupSpec, ...], pools: list[int | None]) -> ServingResult:
                return spec.simulate_hybrid(pages, pools, schedule, options.decode, groups,
                                            options.max_num_batched_tokens, options.swa_full_tokens_ratio)
        else:  # each worker's hybrid cache on its own requests, every worker at the probed pool
            assigned = assign_workers(trace, options, schedule)

            def simulate(groups: tuple[GroupSpec, ...], pools: list[int | None]) -> ServingResult:
                return per_worker_run(result.engine, trace, dataclasses.replace(options, kv_groups=groups), schedule,
                                      tuple(pools), assigned)
        return hybrid_search(trace, options.kv_groups, simulate, options.decode, counted, options.kv_block_bytes,
                             targets, given, progress, spec.min_pool)
    if options.router in JOINT_ROUTERS and options.workers not in ("one", "recorded"):
        return {"skipped": f"not searched with the {options.router} router (each probe would be a joint run of the K pools); "
                           "the pools rows are the answers at the sizes given"}

    def rate(hits: int) -> float:
        return hits / input_tokens if input_tokens else 0.0

    def point(pool: int, hits: int) -> dict[str, Any]:
        return {"gpu_blocks": int(pool), "gib": pool * block_bytes / 2**30, "hit_tokens": int(hits),
                "prefix_token_hit_rate": rate(hits)}

    schedule = schedule_for(trace, options)
    curve = None
    if schedule.is_serial and options.workers == "one" and not options.decode_reuse:
        curve = spec.hit_pools(engine_pages(trace, B), options.decode)
    if curve is not None:
        req, pools, low = curve
        need_pools = np.sort(pools[counted[req]])

        def hits_at(pool: int) -> int:  # feasible pools only (pool >= low)
            return B * int(np.searchsorted(need_pools, pool, side="right"))

        ceiling = B * int(need_pools.size)
        steps = np.unique(np.r_[low, need_pools[need_pools > low]]).astype(np.int64)
        if steps.size > CURVE_POINTS:
            grid = np.geomspace(float(steps[0]), float(steps[-1]), CURVE_POINTS)
            steps = steps[np.unique(np.r_[0, np.searchsorted(steps, grid, side="right") - 1, steps.size - 1])]
        rows = []
        for t in targets:
            need = math.ceil(t * ceiling - 1e-9)
            k = -(-need // B)
            n = max(low, int(need_pools[k - 1])) if k else low
            rows.append({"fraction_of_ceiling": t, "hit_tokens_needed": need, **point(n, hits_at(n)),
                         "one_smaller": None if n <= spec.min_pool else
                         {"gpu_blocks": n - 1, "feasible": n - 1 >= low,
                          "hit_tokens": hits_at(n - 1) if n - 1 >= low else None}})
        return {"method": "one-replay", "exact": True, "probes": 0,
                "search": ("none: one replay gives the hits at every pool (each page hits from its own smallest "
                           "pool on, so hits never fall as the pool grows); each answer is the smallest feasible pool "
                           "reaching the target, exactly"),
                "ceiling_hit_tokens": ceiling, "ceiling_prefix_token_hit_rate": rate(ceiling),
                "min_feasible_pool": int(low), "rows": rows,
                "points": [point(int(p), hits_at(int(p))) for p in steps]}

    workers = np.zeros(trace.n_requests, np.int64) if options.workers == "one" else assign_workers(trace, options, schedule)
    known: dict[int, int] = {}  # pool -> counted hit tokens (-1: infeasible)
    for i, pool in enumerate(result.pools):
        if pool is not None:
            known[int(pool)] = int(result.hit_tokens[i][counted].sum()) if result.failed_request[i] < 0 else -1
    probes = 0

    def probe(sizes: list[int | None]) -> list[int]:
        nonlocal probes
        probes += len(sizes)
        r = per_worker_run(result.engine, trace, options, schedule, tuple(sizes), workers)
        return [int(r.hit_tokens[i][counted].sum()) if r.failed_request[i] < 0 else -1 for i in range(len(sizes))]

    infinite = [i for i, p in enumerate(result.pools) if p is None and result.failed_request[i] < 0]
    ceiling = int(result.hit_tokens[infinite[0]][counted].sum()) if infinite else probe([None])[0]
    if ceiling < 0:
        return {"skipped": "the model cannot run the trace even with an infinite pool"}
    written = trace.input_length + (np.maximum(trace.output_length, 1) - 1 if options.decode else 0)
    upper = max(spec.pool_for_pages(int((-(-written // B)).sum()) + 1), max(known, default=0))  # never evicts
    inferred = upper not in known  # its hits are the ceiling's (it never evicts): a bracket end, not a simulated point
    known.setdefault(upper, ceiling)
    floor = spec.min_pool - 1  # no smaller pool exists
    needs = [math.ceil(t * ceiling - 1e-9) for t in targets]

    def bracket(need: int) -> tuple[int, int]:
        hi = min((p for p, h in known.items() if h >= need), default=upper)
        lo = max((p for p, h in known.items() if p < hi and h < need), default=floor)
        return lo, hi

    def middle(lo: int, hi: int) -> int:
        mid = round(math.sqrt(lo * hi)) if lo >= 1 else (lo + hi) // 2
        return min(max(mid, lo + 1), hi - 1)

    rounds = 0
    while True:
        todo = sorted({middle(lo, hi) for lo, hi in map(bracket, needs) if hi - lo > 1 and hi > lo * (1 + PRECISION)})
        if not todo:
            break
        if progress is not None:
            progress(f"{result.engine} model: working sets, round {rounds + 1}, pools {', '.join(map(str, todo))}")
        for pool, hits in zip(todo, probe(list(todo)), strict=True):
            known[pool] = hits
        rounds += 1
    rows = []
    for t, need in zip(targets, needs, strict=True):
        lo, hi = bracket(need)
        rows.append({"fraction_of_ceiling": t, "hit_tokens_needed": need, **point(hi, known[hi]),
                     "one_smaller": None if lo <= floor else
                     {"gpu_blocks": lo, "feasible": known[lo] >= 0, "hit_tokens": known[lo] if known[lo] >= 0 else None}})
    return {"method": "bisection", "exact": False, "probes": probes, "rounds": rounds,
            "search": (f"bisection over pool sizes {spec.min_pool}..{upper:,} ({upper:,} never evicts"
                       + ("" if options.workers == "one" else "; each worker's pool") + "), every probe an "
                       f"exact simulation ({probes} pools beyond the run's own, in {rounds} rounds, geometric midpoints "
                       f"to within {PRECISION:.0%} or one pool); each answer is the smallest probed pool reaching the "
                       "target, the bracket's lower end (one pool smaller, or within 1 %) probed and not reaching it; hits "
                       "are not proved monotone in the pool, so a smaller unprobed pool may reach it too"),
            "ceiling_hit_tokens": ceiling, "ceiling_prefix_token_hit_rate": rate(ceiling),
            "min_feasible_pool": result.min_feasible_pool, "rows": rows,
            "points": [point(p, h) for p, h in sorted(known.items()) if h >= 0 and not (inferred and p == upper)]}
