"""Engine models in the plan: per-request hits at pool sizes in the engine's own count.

The curve semantics (``engine``, ``per-access``) answer every capacity from one replay; the
engine models (``vllm``, ``sglang``: :mod:`stackdist.serving.vllm`, :mod:`stackdist.serving.sglang`)
answer the pool sizes the user names (``--gpu-blocks``), as the engine counts them (vLLM's
``num_gpu_blocks``; SGLang's pages), under a schedule (serial, the service model, or a file)
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.serving.results import ServingResult
from stackdist.serving.schedule import Schedule
from stackdist.traces import RequestTrace

__all__ = ["ENGINE_MODELS", "EngineOptions", "default_pools", "run_engine_models", "engine_section",
           "per_request_columns", "parse_pools"]

ENGINE_MODELS = ("vllm", "sglang")


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


def _schedule(trace: RequestTrace, options: EngineOptions) -> Schedule | str:
    if options.schedule == "model":
        return Schedule.from_service_model(trace, options.prefill_tokens_per_s, options.decode_tokens_per_s)
    return options.schedule


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
    """Run each engine model of ``options`` once over all its pool sizes. Per size O(pages + events)."""
    from stackdist.serving.sglang import simulate_sglang
    from stackdist.serving.vllm import simulate_vllm

    pools = tuple(options.pools) or default_pools(trace, options.engine_block_size)
    schedule = _schedule(trace, options)
    out: dict[str, ServingResult] = {}
    for model in options.models:
        if progress is not None:
            progress(f"{model} model, {len(pools)} pool sizes")
        run = simulate_vllm if model == "vllm" else simulate_sglang
        out[model] = run(trace, pools, schedule, options.decode, options.engine_block_size)
    return out


def _pool_label(pool: int | None) -> int | str:
    return "inf" if pool is None else int(pool)


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
        rows.append(row)
    minimum = None
    if result.min_feasible_pool is not None:
        minimum = {"gpu_blocks": int(result.min_feasible_pool), "proved_minimal": bool(result.min_feasible_proved),
                   "gib": result.min_feasible_pool * block_bytes / 2**30}
    schedule = options.schedule_source if isinstance(options.schedule, Schedule) else options.schedule
    return {
        "model": result.engine,
        "pool_unit": "num_gpu_blocks (vLLM; block 0 is its null block)" if result.engine == "vllm" else "pages of the KV pool (SGLang)",
        "engine_block_size_tokens": options.engine_block_size,
        "decode": options.decode,
        "schedule": {"kind": schedule, "prefill_tokens_per_s": options.prefill_tokens_per_s,
                     "decode_tokens_per_s": options.decode_tokens_per_s} if schedule == "model" else {"kind": schedule},
        "method": result.method,
        "requests": int(mask.sum()),
        "input_tokens": input_tokens,
        "pools": rows,
        "min_feasible_pool": minimum,
    }


def per_request_columns(result: ServingResult) -> list[tuple[str, np.ndarray]]:
    """``hit_tokens_<N>`` columns (``hit_tokens_inf`` for the infinite pool) of the feasible pools.

    >>> r = ServingResult("vllm", (4, None), np.array([[0, 16], [0, 32]]), np.array([-1, -1]), None, "per-size")
    >>> [name for name, _ in per_request_columns(r)]
    ['hit_tokens_4', 'hit_tokens_inf']
    """
    return [(f"hit_tokens_{_pool_label(pool)}", result.hit_tokens[i])
            for i, pool in enumerate(result.pools) if result.failed_request[i] < 0]


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
