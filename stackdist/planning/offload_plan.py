"""Offload tiers in the plan: per (GPU pool, tier sizes) the hits by tier and the write traffic,
and the tier size each target needs, under the named engine's organisation.

An offload specification (:mod:`stackdist.serving.offload.spec`) names a registered offload model
(vLLM native CPU offloading, LMCache's CPU and disk backends, SGLang's HiCache) and its tier sizes;
the model runs behind its GPU engine model's per-request hits (:mod:`.engine_plan`), on the
serial schedule. The plan reports

- **rows**: per feasible GPU pool and configuration, the prompt tokens served by the GPU and by
  each tier (over the counted requests), as rates of the counted prompt tokens; a tier's tokens
  are those not recomputed: when GPU + tiers cover the whole prompt the engine still computes the
  last token (vLLM, ``v1/core/sched/scheduler.py:3515``), so ``min(gpu + tiers, P - 1)`` counts,
  the deepest tier giving up the token; the connector's own number (which can include it) is in
  the per-request CSV. The **write traffic** of each tier: units written over the whole trace (warm-up
  included: the engine writes them), in bytes (units x unit tokens x KV bytes per token) and per
  second of the trace's span (which sizes an SSD's endurance).
- **sizing**: for each finite feasible GPU pool named (with the default pools, the smallest
  feasible one) and each target fraction t, the smallest
  tier size (in the model's units, tokens and GiB) whose hits reach t x the *ceiling*, the hits
  with that tier never evicting (at the same GPU pool; for the second tier of two, behind the
  first tier's smallest size). Found by bisection in log space to within ``precision``
  (relative), every simulation exact; the hits are not proved monotone in the tier size (an
  all-or-nothing store and arc's adaptation can break it), so the answer is a size that reaches
  the target whose lower neighbour at that precision does not.

>>> from stackdist.traces import RequestTrace
>>> from stackdist.planning.engine_plan import EngineOptions, run_engine_models
>>> from stackdist.serving.offload import parse_offload
>>> t = RequestTrace.from_blocks([[1, 2, 3], [4, 5], [1, 2, 3]], block_size=16, last_tokens=[16, 16, 16])
>>> opts = EngineOptions(models=("vllm",), pools=(5,), schedule="serial", decode=False)
>>> runs = run_offload(t, opts, run_engine_models(t, opts), (parse_offload("vllm-native:cpu=8blocks"),), 1024)
>>> runs[0].result.gpu_hit_tokens.tolist(), runs[0].result.offload_hit_tokens.tolist()
([[0, 0, 32]], [[[0, 0, 16]]])

(The third request's GPU hit stops before its last block, kept out by vLLM's last-token cap; the
CPU tier holds that block and the connector reports it: the engine then recomputes the last token.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stackdist.engine.keys import unique_sorted
from stackdist.serving.offload import (
    OffloadModel,
    OffloadResult,
    OffloadSpec,
    TierConfig,
    describe_sizes,
    offload_model,
)
from stackdist.serving.offload.spec import resolve_offload
from stackdist.serving.pages import EnginePages, engine_pages
from stackdist.serving.results import ServingResult
from stackdist.traces import RequestTrace

from .engine_plan import EngineOptions, assign_workers, schedule_for

__all__ = [
    "PRECISION",
    "OffloadRun",
    "PerWorker",
    "counted_hits",
    "distinct_units",
    "effective_tier_hits",
    "offload_columns",
    "offload_section",
    "run_offload",
    "select_pages",
    "size_search",
]

PRECISION = 0.02
"""The sizing bisection stops when the bracket is within this relative width (or one unit)."""


@dataclass
class OffloadRun:
    """One specification's run: the model, its configurations' result, and the sizing searches'
    evaluations (``(gpu pool index, tier, size) -> counted hit tokens``, every one exact)."""

    spec: OffloadSpec
    model: OffloadModel
    result: OffloadResult
    pages: EnginePages
    sizing: list[dict[str, Any]] = field(default_factory=list)
    points: dict[tuple[int, str, int | None], tuple[int, dict[str, int]]] = field(default_factory=dict)
    reasons: dict[tuple[int, str, int | None], str] = field(default_factory=dict)
    precision: float = PRECISION


def effective_tier_hits(P: np.ndarray, gpu: np.ndarray, tiers: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each tier's tokens not recomputed: the tiers in lookup order, the deepest tier that served
    giving up the last prompt token when GPU + tiers cover the whole prompt. O(requests x tiers).

    >>> [x.tolist() for x in effective_tier_hits(np.array([32, 32]), np.array([16, 0]), [np.array([16, 16]), np.array([0, 0])])]
    [[15, 16], [0, 0]]
    """
    excess = np.maximum(gpu + sum(tiers, np.zeros_like(gpu)) - np.maximum(P - 1, 0), 0)
    out = []
    for tier in reversed(tiers):
        take = np.minimum(excess, tier)
        out.append(tier - take)
        excess = excess - take
    return out[::-1]


def counted_hits(model: OffloadModel, result: OffloadResult, pages: EnginePages, i: int, j: int,
                  counted: np.ndarray) -> tuple[int, dict[str, int]]:
    if not result.config_feasible(i, j):
        return -1, {}
    gpu = result.gpu_hits(i, j)
    tiers = effective_tier_hits(pages.input_tokens, gpu, [result.tier_hit_tokens[t][i, j] for t in model.tiers])
    by_tier = {t: int(x[counted].sum()) for t, x in zip(model.tiers, tiers)}
    return int(gpu[counted].sum()) + sum(by_tier.values()), by_tier


def select_pages(pages: EnginePages, index: np.ndarray) -> EnginePages:
    """The requests ``index`` of ``pages`` (in that order), page ids unchanged. O(their pages).

    >>> from stackdist.traces import RequestTrace
    >>> p = select_pages(engine_pages(RequestTrace.from_blocks([[1], [2, 3], [4]], block_size=16)), np.array([1, 2]))
    >>> p.key.tolist(), p.offsets.tolist(), p.n_keys
    ([2, 3, 4], [0, 2, 3], 5)
    """
    lengths = np.diff(pages.offsets)[index]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    key = (np.concatenate([pages.key[pages.offsets[r]:pages.offsets[r + 1]] for r in index.tolist()])
           if index.size else pages.key[:0])
    return dataclasses.replace(pages, key=key, offsets=offsets, input_tokens=pages.input_tokens[index],
                               output_tokens=pages.output_tokens[index], continued_by=None)


class PerWorker:
    """An offload model on K workers behind a static router: each worker its own GPU pool and
    tiers (a replica's own CPU and disk), serving only its requests; :meth:`simulate` runs the
    model per worker and merges, so the plan's rows and sizing searches (a tier size is per
    worker) work unchanged. Everything else is the wrapped model's."""

    def __init__(self, model: OffloadModel, workers: np.ndarray, pages: EnginePages):
        self.model = model
        self.parts = [(idx, select_pages(pages, idx)) for idx in (np.flatnonzero(workers == w) for w in np.unique(workers))]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def simulate(self, pages: EnginePages, pools: Sequence[int | None], hits: np.ndarray, configs: Sequence[TierConfig],
                 decode: bool) -> OffloadResult:
        del pages  # the workers' own pages, split once
        runs = [(idx, self.model.simulate(sub, pools, hits[:, idx], configs, decode)) for idx, sub in self.parts]
        first = runs[0][1]
        n = hits.shape[1]

        def get(r: OffloadResult, name: str, tier: str | None) -> np.ndarray:
            value = getattr(r, name)
            return np.asarray(value if tier is None else value[tier])

        def per_request(name: str, tier: str | None = None) -> np.ndarray:
            out = np.full((*get(first, name, tier).shape[:-1], n), -1, np.int64)
            for idx, r in runs:
                out[..., idx] = get(r, name, tier)
            return out

        def total(name: str, tier: str | None = None) -> np.ndarray:
            arrays = [get(r, name, tier) for _, r in runs]
            return np.where(np.any([x < 0 for x in arrays], axis=0), -1, np.sum(arrays, axis=0))

        infeasible = {key: why for _, r in runs for key, why in r.infeasible.items()}
        return OffloadResult(first.model, first.gpu_pools, first.configs, per_request("gpu_hit_tokens"),
                             {t: per_request("tier_hit_tokens", t) for t in first.tier_hit_tokens},
                             per_request("offload_hit_tokens"),
                             {t: total("written", t) for t in first.written}, {t: total("evicted", t) for t in first.evicted},
                             total("failed_stores"), first.unit_tokens,
                             None if first.config_gpu_hit_tokens is None else per_request("config_gpu_hit_tokens"),
                             infeasible)


def run_offload(trace: RequestTrace, options: EngineOptions, results: dict[str, ServingResult], specs: Sequence[OffloadSpec],
                bytes_per_token: int, counted: np.ndarray | None = None, targets: Sequence[float] = (),
                precision: float = PRECISION, threads: int = 2, stage: Callable[[str], None] | None = None) -> list[OffloadRun]:
    """Every specification behind its GPU model's hits (``results[model.behind]``); with
    ``targets``, the sizing searches too (module docstring). Per configuration the model's cost."""
    mask = np.ones(trace.n_requests, bool) if counted is None else counted
    pages = engine_pages(trace, options.engine_block_size)
    runs = []
    workers = None
    if options.workers != "one":  # a static router: each worker its own pool and tiers
        workers = assign_workers(trace, options, schedule_for(trace, options))
    for spec in specs:
        model: Any = offload_model(spec.model)
        gpu = results[model.behind]
        if workers is not None:
            model = PerWorker(model, workers, pages)
        hits = np.where((gpu.failed_request >= 0)[:, None], -1, gpu.hit_tokens)
        configs = resolve_offload(spec, bytes_per_token, options.engine_block_size)
        if stage is not None:
            stage(f"{model.name} offload behind {model.behind}: {len(configs)} tier configuration(s) x "
                  f"{len(gpu.pools)} GPU pool(s)")
        result = _simulate(model, pages, gpu.pools, hits, configs, options.decode, threads)
        run = OffloadRun(spec, model, result, pages, precision=precision)
        finite = [i for i, pool in enumerate(gpu.pools) if pool is not None and result.feasible(i)]
        for i in finite if options.pools else finite[:1]:  # default pools: the smallest feasible one only
            if not targets:
                break
            pool = gpu.pools[i]
            if stage is not None:
                stage(f"{model.name}: sizing the tiers for {', '.join(f'{t:g}' for t in targets)} of the ceiling at "
                      f"GPU pool {pool}")
            run.sizing.append(_sizing(run, i, configs, mask, targets, precision, options.decode, threads))
        runs.append(run)
    return runs


def distinct_units(pages: EnginePages, unit_tokens: int) -> int:
    """Distinct full units (of ``unit_tokens``, a multiple of the page) over all prompts: a tier
    this big never evicts (a unit is named by its last page's prefix-chained id). O(pages)
    (:func:`~stackdist.engine.keys.unique_sorted`: ``np.unique`` took seconds on ~9 M page ids).

    >>> from stackdist.traces import RequestTrace
    >>> distinct_units(engine_pages(RequestTrace.from_blocks([[1, 2], [1, 3]], block_size=16)), 32)
    2
    """
    per = unit_tokens // pages.page_tokens
    full = pages.input_tokens // unit_tokens
    req = np.repeat(np.arange(pages.n_requests), full)
    starts = np.cumsum(full) - full
    u = np.arange(int(full.sum())) - starts[req]
    return int(unique_sorted(pages.key[pages.offsets[req] + (u + 1) * per - 1]).size)


def _simulate(model: OffloadModel, pages: EnginePages, pools: Sequence[int | None], hits: np.ndarray,
              configs: Sequence[TierConfig], decode: bool, threads: int) -> OffloadResult:
    """The model at every configuration, configurations spread over ``threads`` (the kernels
    release the GIL), merged in order."""
    if threads <= 1 or len(configs) <= 1:
        return model.simulate(pages, pools, hits, configs, decode)
    with ThreadPoolExecutor(max_workers=threads) as ex:
        parts = list(ex.map(lambda c: model.simulate(pages, pools, hits, [c], decode), configs))
    first = parts[0]
    cat = lambda arrays: np.concatenate(arrays, axis=1)
    return OffloadResult(first.model, first.gpu_pools, tuple(configs), first.gpu_hit_tokens,
                         {t: cat([p.tier_hit_tokens[t] for p in parts]) for t in first.tier_hit_tokens},
                         cat([p.offload_hit_tokens for p in parts]),
                         {t: cat([p.written[t] for p in parts]) for t in first.written},
                         {t: cat([p.evicted[t] for p in parts]) for t in first.evicted},
                         cat([p.failed_stores for p in parts]), first.unit_tokens,
                         None if first.config_gpu_hit_tokens is None else cat([p.config_gpu_hit_tokens for p in parts]),
                         {(i, j): why for j, p in enumerate(parts) for (i, _), why in p.infeasible.items()})


def _sizing(run: OffloadRun, i: int, configs: Sequence[TierConfig], counted: np.ndarray, targets: Sequence[float],
            precision: float, decode: bool, threads: int) -> dict[str, Any]:
    """The tier sizes each target needs at GPU pool ``i``: the first tier alone, then (two tiers)
    the second behind the first tier's first size of the specification."""
    model, result, pages = run.model, run.result, run.pages
    gpu_hits = result.gpu_hit_tokens[i:i + 1]
    options = configs[0].options
    upper = distinct_units(pages, model.chunk_tokens(dict(options), pages.page_tokens))  # never evicts
    out: dict[str, Any] = {"gpu_pool_index": i, "tiers": []}
    for depth, tier in enumerate(model.tiers[:2]):
        if depth == 1 and all(c.size(tier) == 0 for c in configs):
            break
        fixed = tuple((t, configs[0].size(t)) for t in model.tiers[:depth])
        label = "+".join(f"{t}{s}" for t, s in fixed) + f"|{tier}"
        for j, config in enumerate(configs):  # the ladder's points are known already
            rest = tuple((t, config.size(t)) for t in model.tiers if t != tier)
            if rest == (*fixed, *((t, 0) for t in model.tiers[depth + 1:])):
                run.points[(i, label, config.size(tier))] = counted_hits(model, result, pages, i, j, counted)

        def evaluate(size: int | None, fixed: tuple[tuple[str, int | None], ...] = fixed, tier: str = tier,
                     label: str = label) -> int:
            key = (i, label, size)
            if key not in run.points:
                sizes = (*fixed, (tier, size), *((t, 0) for t in model.tiers[len(fixed) + 1:]))
                one = model.simulate(pages, [result.gpu_pools[i]], gpu_hits, [TierConfig(sizes, options)], decode)
                if not one.config_feasible(0, 0):
                    run.reasons[key] = one.infeasible[(0, 0)]
                run.points[key] = counted_hits(model, one, pages, 0, 0, counted)
            return run.points[key][0]

        entry: dict[str, Any] = {"tier": tier, "behind": dict(fixed), "never_evicting_size": upper}
        if evaluate(None) < 0 or evaluate(0) < 0:  # the engine cannot serve the trace even so
            entry["infeasible"] = run.reasons.get((i, label, None)) or run.reasons.get((i, label, 0))
            out["tiers"].append(entry)
            continue
        seeds = {size: v[0] for (pi, lab, size), v in run.points.items() if pi == i and lab == label and size is not None}
        answers = size_search(evaluate, targets, upper, precision, threads, seeds)
        out["tiers"].append({**entry, "ceiling_hit_tokens": evaluate(None), "no_tier_hit_tokens": evaluate(0),
                             "answers": answers})
    return out


def size_search(evaluate: Callable[[int | None], int], targets: Sequence[float], upper: int, precision: float,
            threads: int, seeds: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """Every target's smallest size at once: each round evaluates, on ``threads`` threads, the
    log-space midpoint of every unresolved target's bracket (the brackets come from every point
    evaluated so far, so one point serves all targets; spare threads split the widest bracket
    once more). A bracket ``(lo, hi]`` is resolved when ``hi <= lo x (1 + precision)`` or
    ``hi = lo + 1``; ``hi`` is the answer. ``seeds`` are points known already (size -> hits);
    ``upper`` is a size that never evicts (its hits are the ceiling's).

    >>> hits = lambda c: 100 if c is None else min(c, 100)
    >>> [a["size"] for a in size_search(hits, [0.5, 0.9, 1.0], 1000, 0.0, 2)]
    [50, 90, 100]
    """
    known = {c: h for c, h in (seeds or {}).items() if c <= upper}
    with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
        ceiling, floor = ex.map(evaluate, [None, 0])
        known[0] = floor
        known[upper] = ceiling
        needs = [math.ceil(t * ceiling - 1e-9) for t in targets]
        steps = [0] * len(targets)

        def bracket(need: int) -> tuple[int, int]:
            hi = min((c for c, h in known.items() if h >= need), default=upper)
            lo = max((c for c, h in known.items() if c < hi and h < need), default=0)
            return lo, hi

        def open_(need: int) -> bool:
            lo, hi = bracket(need)
            return floor < need and hi - lo > 1 and hi > lo * (1 + precision)

        def mid(lo: int, hi: int, parts: int = 2, k: int = 1) -> int:
            m = int(max(lo, 1) * (hi / max(lo, 1)) ** (k / parts)) if lo > 0 else max(1, hi >> (4 * k))
            return min(max(m, lo + 1), hi - 1)

        while True:
            todo = [n for n, need in enumerate(needs) if open_(need)]
            if not todo:
                break
            points = list(dict.fromkeys(mid(*bracket(needs[n])) for n in todo))
            if len(points) < threads:  # spare threads: thirds of the widest bracket
                lo, hi = max((bracket(needs[n]) for n in todo), key=lambda b: b[1] / max(b[0], 1))
                points = list(dict.fromkeys([mid(lo, hi, 3, 1), mid(lo, hi, 3, 2), *points]))[:max(threads, len(points))]
            for c, h in zip(points, ex.map(evaluate, points), strict=True):
                known[c] = h
            for n in todo:
                steps[n] += 1
    out = []
    for t, need, step in zip(targets, needs, steps, strict=True):
        hi = 0 if floor >= need else bracket(need)[1]
        out.append({"fraction_of_ceiling": t, "size": hi, "hit_tokens": known[hi], "rounds": step})
    return out


def _pool_label(pool: int | None) -> int | str:
    return "inf" if pool is None else int(pool)


def _rate(x: int, total: int) -> float:
    return x / total if total else 0.0


def offload_section(run: OffloadRun, trace: RequestTrace, counted: np.ndarray, bytes_per_token: int,
                    page_tokens: int) -> dict[str, Any]:
    """The plan's ``offload`` entry of one specification (module docstring). O(pools x configs x requests)."""
    model, result, pages = run.model, run.result, run.pages
    total = int(trace.input_length[counted].sum())
    span = float(np.ptp(trace.timestamps_s)) if trace.n_requests > 1 else 0.0
    unit_tokens = model.chunk_tokens(dict(result.configs[0].options), page_tokens)
    unit_bytes = unit_tokens * bytes_per_token
    rows: list[dict[str, Any]] = []
    for i, pool in enumerate(result.gpu_pools):
        if not result.feasible(i):
            continue
        for j, config in enumerate(result.configs):
            if not result.config_feasible(i, j):
                rows.append({"gpu_blocks": _pool_label(pool), "config": config.label,
                             "sizes": describe_sizes(config, model, bytes_per_token, page_tokens), "feasible": False,
                             "infeasible": result.infeasible[(i, j)]})
                continue
            gpu = int(result.gpu_hits(i, j)[counted].sum())
            hits, by_tier = counted_hits(model, result, pages, i, j, counted)
            written = {t: int(result.written[t][i, j]) for t in model.tiers}
            rows.append({
                "gpu_blocks": _pool_label(pool),
                "config": config.label,
                "feasible": True,
                "sizes": describe_sizes(config, model, bytes_per_token, page_tokens),
                "hit_tokens": hits,
                "prefix_token_hit_rate": _rate(hits, total),
                "gpu_token_hit_rate": _rate(gpu, total),
                "tier_token_hit_rate": {t: _rate(v, total) for t, v in by_tier.items()},
                "tier_hit_tokens": by_tier,
                "connector_offload_hit_tokens": int(result.offload_hit_tokens[i, j][counted].sum()),
                "written": {t: {model.unit: n, "bytes": n * unit_bytes,
                                "bytes_per_s": n * unit_bytes / span if span > 0 else None} for t, n in written.items()},
                "evicted": {t: int(result.evicted[t][i, j]) for t in model.tiers},
                "refused_stores": int(result.failed_stores[i, j]),
            })
    sizing = []
    for s in run.sizing:
        pool = result.gpu_pools[s["gpu_pool_index"]]
        tiers = []
        for tier in s["tiers"]:
            if "infeasible" in tier:
                tiers.append({"tier": tier["tier"], "behind": {t: "inf" if v is None else v for t, v in tier["behind"].items()},
                              "infeasible": tier["infeasible"]})
                continue
            ceiling = tier["ceiling_hit_tokens"]
            answers = [{"fraction_of_ceiling": a["fraction_of_ceiling"],
                        model.unit: a["size"], "tokens": a["size"] * unit_tokens,
                        "gib": a["size"] * unit_bytes / 2**30,
                        "prefix_token_hit_rate": _rate(a["hit_tokens"], total),
                        "search_rounds": a["rounds"]} for a in tier["answers"]]
            tiers.append({"tier": tier["tier"], "behind": {t: "inf" if v is None else v for t, v in tier["behind"].items()},
                          "ceiling_prefix_token_hit_rate": _rate(ceiling, total),
                          "without_tier_prefix_token_hit_rate": _rate(tier["no_tier_hit_tokens"], total),
                          "never_evicting": {model.unit: tier["never_evicting_size"],
                                             "gib": tier["never_evicting_size"] * unit_bytes / 2**30},
                          "answers": answers})
        sizing.append({"gpu_blocks": _pool_label(pool), "tiers": tiers})
    curve = sorted(((key[0], key[1], size, value) for key, value in run.points.items() if (size := key[2]) is not None),
                   key=lambda x: (x[0], x[1], x[2]))
    options = dict(result.configs[0].options)
    return {
        "spec": run.spec.text,
        "model": model.name,
        "follows": model.follows,
        "behind": model.behind,
        "validation": ("driven: equal, request by request, to the engine's own code run on a CPU "
                       "(validation/, tests/data/engines/offload/)") if model.driven else
                      "followed, not driven: read in the engine's code (file:line in the model's docstring); "
                      "it needs a GPU to run, so no per-request check against the engine",
        "organisation": model.organisation.format(**options),
        "options": options,
        "schedule": "serial",
        "workers": len(model.parts) if isinstance(model, PerWorker) else 1,
        "unit": model.unit,
        "unit_tokens": unit_tokens,
        "unit_bytes": unit_bytes,
        "conversion": (f"a {model.unit[:-1]} = {unit_tokens} tokens x {bytes_per_token:,} KV bytes per token = "
                       f"{unit_bytes:,} bytes (the plan's model); sizes given in bytes or tokens were rounded down "
                       "to whole units as the engine allocates them"),
        "requests": int(counted.sum()),
        "input_tokens": total,
        "span_s": span,
        "rows": rows,
        "sizing": sizing,
        "sizing_method": (f"bisection in log space to within {run.precision:.0%} (or one {model.unit[:-1]}), every point an "
                          "exact simulation; the target is a fraction of the ceiling (the same GPU pool with the tier "
                          "never evicting); the hit rate is not proved monotone in the tier size"),
        "sizing_points": [{"gpu_blocks": _pool_label(result.gpu_pools[i]),
                           "tier": tier.split("|")[-1], "behind": tier.split("|")[0] or None, model.unit: size,
                           "gib": size * unit_bytes / 2**30,
                           "prefix_token_hit_rate": _rate(v[0], total) if v[0] >= 0 else None,
                           "tier_token_hit_rate": {t: _rate(x, total) for t, x in v[1].items()}}
                          for i, tier, size, v in curve],
    }


def offload_columns(run: OffloadRun, suffix: bool, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    """Per-request columns: per feasible GPU pool N and configuration, ``offload_hit_tokens_<N>``
    (the connector's number beyond the GPU hit) and, with several tiers, ``offload_<tier>_hit_tokens_<N>``;
    when the tier changes the GPU hits (``config_gpu_hit_tokens``), ``offload_gpu_hit_tokens_<N>``
    (the GPU hits with the tier, which the offload hits extend); ``_<label>`` is appended (``prefix`` + the configuration's label) when ``suffix``."""
    result = run.result
    columns = []
    for i, pool in enumerate(result.gpu_pools):
        if not result.feasible(i):
            continue
        name = "inf" if pool is None else str(pool)
        for j, config in enumerate(result.configs):
            if not result.config_feasible(i, j):
                continue
            tail = f"_{prefix}{config.label}" if suffix else ""
            if result.config_gpu_hit_tokens is not None:
                columns.append((f"offload_gpu_hit_tokens_{name}{tail}", result.config_gpu_hit_tokens[i, j]))
            columns.append((f"offload_hit_tokens_{name}{tail}", result.offload_hit_tokens[i, j]))
            if len(run.model.tiers) > 1:
                columns += [(f"offload_{t}_hit_tokens_{name}{tail}", result.tier_hit_tokens[t][i, j])
                            for t in run.model.tiers]
    return columns
