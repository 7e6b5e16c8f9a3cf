"""Budgets: answers at the memory sizes the user names (``--capacity 880GiB,2TiB,40000blocks``).

A budget is bytes of KV cache (B, KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in
powers of 1024), tokens or blocks of the trace. It becomes:

- for the curve semantics (``engine``, ``per-access``) a capacity in the trace's blocks:
  ``floor((bytes - sliding reserve) / (block tokens x KV bytes per token))``;
- for the engine models a pool in the engine's own count, from the budget's whole pages of
  ``--engine-block-size`` tokens (``floor(bytes / (16 x KV bytes per token))``) by each registered
  model's :meth:`~stackdist.serving.engine_model.EngineModel.pool_for_pages`: vLLM's ``num_gpu_blocks``
  = pages + 1 (its null block, ``vllm/v1/core/block_pool.py:191``), SGLang's pages = pages; each
  under the model's ``budget_key``.

**Sliding-window (hybrid) models.** KV bytes per token here are the full-attention layers'
(:attr:`~.geometry.ModelGeometry.kv_bytes_per_token`): a cached block costs that per token. A
sliding layer holds at most its window per request, so the sliding part is a per-request bound,
charged once (one running request: ``sliding bytes per token x min(longest request, window)``) as
the *sliding reserve*. That is optimistic when many requests run at once or when a hit also
needs the sliding layers' last window of the cached prefix (vLLM keeps those blocks in the same
pool); the **conservative** capacity counts every layer as full attention
(``bytes / (block tokens x all layers' bytes per token)``). Both are reported; the truth lies
between. The engine models simulate the full-attention blocks only.

**Cost.** With ``--gpu`` the plan knows a deployment (replicas x GPUs per replica) and prices it
(:func:`~.prices.deployment_cost`: US$ per hour and per million input tokens): the whole
deployment (``hardware.cost``), the rows of the HBM of 1 and of N replicas (``cost``, and per
semantics and engine model the US$ per million uncached input tokens at that row's hit rate),
and each target of ``requirements`` three ways: N replicas alone, or one replica plus the
missing GiB as DRAM, or as SSD. The ``--capacity`` rows name bytes, not hardware: no US$. A
replica whose weights leave no room for the KV cache gets no US$ anywhere. The price inputs,
their sources and the input tokens per hour are the section's ``cost``.

>>> [(b.unit, b.amount) for b in parse_budgets("880GiB, 2TB,40000blocks,2Mtokens")]
[('bytes', 944892805120), ('bytes', 2000000000000), ('blocks', 40000), ('tokens', 2000000)]
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stackdist.errors import UsageError
from stackdist.serving.engine_model import ENGINE_MODELS, engine_model
from stackdist.serving.results import ServingResult
from stackdist.serving.semantics import PrefixReplay
from stackdist.traces import RequestTrace

from .engine_plan import load_summary
from .geometry import ModelGeometry, ModelSpec
from .hardware import (
    GIB,
    CalibratedTTFT,
    HardwareOptions,
    RooflineTTFT,
    require_holds,
    ttft_summary,
)
from .prefix_curve import PrefixCurve
from .prices import DeploymentPrices, deployment_cost, input_tokens_per_hour
from .schema import unreachable_reason

__all__ = [
    "BUDGET_UNITS",
    "Budget",
    "BudgetOptions",
    "budget_capacity",
    "budget_report",
    "parse_budgets",
    "per_request_hits",
    "pricing",
]

_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
_COUNTS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
BUDGET_UNITS = ("bytes: B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); "
                "tokens: tokens, Ktokens, Mtokens, Gtokens; blocks of the trace: blocks, Kblocks, Mblocks; "
                "engine pages (of the engine's block size): pages, Kpages, Mpages")


@dataclass(frozen=True)
class Budget:
    """One size the user asked about: ``unit`` is bytes, tokens or blocks (of the trace);
    ``replicas`` > 1: the HBM of that many replicas taken as one cache; ``gpus`` > 0: the size is
    the KV pool of that many GPUs (a deployment, priced), 0: a size with no hardware."""

    label: str
    unit: str
    amount: int
    replicas: int = 1
    gpus: int = 0
    engine_pools: tuple[tuple[str, int], ...] = ()  # (budget key, pool): the engine's own pool, when known


def hybrid_pools(geometry: ModelGeometry, options: BudgetOptions, shared_pool: int | None,
                 split_pool_tokens: Any) -> dict[str, int]:
    """Each engine model's own pool (by its budget key) for a model with KV cache groups, where
    the model simulates them (``options``: :attr:`BudgetOptions.hybrid_block_bytes` for a model
    whose groups share one pool, :attr:`BudgetOptions.swa_full_tokens_ratio` for one that keeps a
    sliding-window pool of its own): ``shared_pool`` for the first kind (e.g. vLLM's
    ``num_gpu_blocks``), ``split_pool_tokens(ratio)`` full-pool tokens for the second. Empty for
    a full-attention model. O(models).

    >>> from stackdist.planning.geometry import model_spec
    >>> hybrid_pools(model_spec("gpt-oss-120b").geometry, BudgetOptions(hybrid_block_bytes=1), 20, lambda r: 1600)
    {'vllm_gpu_blocks': 20}
    """
    out: dict[str, int] = {}
    if not geometry.has_kv_groups:
        return out
    for m in ENGINE_MODELS.values():
        if not m.supports_hybrid_groups:
            continue
        if m.separate_swa_pool and options.swa_full_tokens_ratio is not None and geometry.is_hybrid:
            out[m.budget_key] = int(m.pool_for_tokens(int(split_pool_tokens(options.swa_full_tokens_ratio)), 16))
        elif not m.separate_swa_pool and options.hybrid_block_bytes and shared_pool is not None:
            out[m.budget_key] = int(shared_pool)
    return out


def hbm_budgets(pool: dict[str, Any], geometry: ModelGeometry, options: BudgetOptions) -> list[Budget]:
    """The budgets of a ``--gpu`` deployment: the HBM of one replica, and of all its replicas as one cache.

    Their size is the full-attention tokens the replica's KV holds (``kv_tokens``). For a model
    with KV cache groups the engine models that simulate them run at their own pools
    (:func:`hybrid_pools`): vLLM's whole ``num_gpu_blocks`` (every group spends it), SGLang's full
    pool beside its sliding-window pool of ``ratio`` x its tokens (``pool_configurator.py``: the
    replica's KV bytes split so; a token's bytes per layer on one GPU are the replica's vLLM block
    bytes over its layers and tokens); N replicas as one cache: N x the pages. O(models).
    """
    n, tp = pool["replicas"], pool["gpus_per_replica"]
    layer_token = pool["bytes_per_block_per_gpu"] / (pool["layers_per_group"] * pool["block_size_tokens"])
    available = max(0.0, pool["available_kv_gib_per_gpu"] * GIB)

    def split_tokens(ratio: float) -> float:
        return available // (16 * layer_token * (geometry.num_full_layers + ratio * geometry.num_sliding_layers)) * 16

    own = hybrid_pools(geometry, options, int(pool["num_gpu_blocks"]), split_tokens)

    def pooled(k: int) -> tuple[tuple[str, int], ...]:
        models = {m.budget_key: m for m in ENGINE_MODELS.values()}
        return tuple((key, int(models[key].pool_for_pages(k * models[key].pages_in_pool(p)))) for key, p in own.items())

    out = [Budget("HBM of 1 replica", "tokens", max(pool["kv_tokens"], 1), gpus=tp, engine_pools=pooled(1))]
    if n > 1:
        out.append(Budget(f"HBM of {n} replicas", "tokens", max(pool["kv_tokens_all_replicas"], 1), n, gpus=tp * n,
                          engine_pools=pooled(n)))
    return out


def parse_budgets(text: str, flag: str = "--capacity", page_tokens: int = 16) -> tuple[Budget, ...]:
    """Comma-separated sizes with units; UsageError naming ``flag`` and the allowed units. Engine
    pages are ``page_tokens`` tokens each (a budget in tokens, labelled as written). O(sizes).

    >>> [(b.label, b.unit, b.amount) for b in parse_budgets("64pages,2Kpages", page_tokens=16)]
    [('64pages', 'tokens', 1024), ('2Kpages', 'tokens', 32000)]
    """
    out = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]+)", part)
        budget = None
        if match:
            value, unit = float(match.group(1)), match.group(2).lower()
            if unit in _BYTES:
                budget = Budget(part, "bytes", math.floor(value * _BYTES[unit]))
            for word in ("tokens", "blocks", "pages"):
                if unit.endswith(word) and unit[: -len(word)] in _COUNTS:
                    amount = value * _COUNTS[unit[: -len(word)]]
                    budget = None if amount != int(amount) else (
                        Budget(part, "tokens", int(amount) * page_tokens) if word == "pages" else Budget(part, word, int(amount)))
        if budget is None or not 0 < budget.amount < 2**62:
            raise UsageError(f"{flag} must be comma-separated positive sizes with a unit ({BUDGET_UNITS}), "
                             f"e.g. 880GiB,2TiB,40000blocks,2Mtokens; got {part!r}")
        out.append(budget)
    return tuple(out)


@dataclass(frozen=True)
class BudgetOptions:
    """What the budget answers need: the sizes, the model, the hardware and a TTFT model (each optional)."""

    budgets: Sequence[Budget] = ()
    spec: ModelSpec | None = None
    hardware: HardwareOptions | None = None
    ttft: RooflineTTFT | CalibratedTTFT | None = None
    engine_block_size: int = 16
    notes: list[str] = field(default_factory=list)
    prices: DeploymentPrices | None = None  # with hardware: what a GPU-hour, DRAM and SSD cost
    hybrid_block_bytes: int = 0
    """A hybrid model run by vLLM's hybrid cache: the bytes of one block (a byte budget is
    ``bytes // this`` of vLLM's ``num_gpu_blocks``, every group in it); 0 otherwise."""
    swa_full_tokens_ratio: float | None = None
    """A sliding-window model run by SGLang's hybrid cache: its SWA pool's tokens per full-pool
    token (a byte budget splits between the two pools); None otherwise."""


def budget_capacity(budget: Budget, block_size: int, geometry: ModelGeometry, longest_request_tokens: int,
                    engine_block_size: int = 16, hybrid_block_bytes: int = 0,
                    swa_full_tokens_ratio: float | None = None) -> dict[str, Any]:
    """A budget in every unit: trace blocks (optimistic and conservative), tokens, engine pools.

    A byte budget of a hybrid model: vLLM's hybrid cache gets ``bytes // hybrid_block_bytes``
    blocks (every group draws on them), SGLang's full pool the pages whose tokens, with
    ``swa_full_tokens_ratio`` x as many in its sliding-window pool, fit the bytes.

    >>> from stackdist.planning.geometry import model_spec
    >>> c = budget_capacity(Budget("1GiB", "bytes", 2**30), 512, model_spec("qwen3-8b").geometry, 4096)
    >>> c["blocks"], c["vllm_gpu_blocks"], c["sglang_pages"]
    (14, 456, 455)
    """
    full = geometry.kv_bytes_per_token
    if budget.unit == "bytes":
        reserve = geometry.sliding_bytes_per_token * min(longest_request_tokens, geometry.sliding_window or 0)
        tokens = max(0, budget.amount - reserve) // full
        conservative = budget.amount // (block_size * geometry.all_layers_bytes_per_token)
        pools = {m.budget_key: int(m.pool_for_bytes(budget.amount, full, engine_block_size)) for m in ENGINE_MODELS.values()}
        pools.update(hybrid_pools(geometry, BudgetOptions(hybrid_block_bytes=hybrid_block_bytes,
                                                         swa_full_tokens_ratio=swa_full_tokens_ratio),
                                  budget.amount // hybrid_block_bytes if hybrid_block_bytes else None,
                                  lambda ratio: budget.amount // (16 * (full + ratio * geometry.sliding_bytes_per_token)) * 16))
    else:
        reserve = 0
        tokens = budget.amount if budget.unit == "tokens" else budget.amount * block_size
        conservative = tokens // block_size
        pools = {m.budget_key: int(m.pool_for_tokens(tokens, engine_block_size)) for m in ENGINE_MODELS.values()}
    pools.update(budget.engine_pools)
    blocks = tokens // block_size
    return {"budget": budget.label, "unit": budget.unit, "amount": budget.amount, "blocks": int(blocks),
            "tokens": int(blocks * block_size), "pool_tokens": int(tokens), "gib": blocks * block_size * full / GIB,
            "sliding_reserve_bytes": int(reserve), "conservative_blocks": int(conservative), **pools}


def per_request_hits(replay: PrefixReplay, capacity_blocks: int) -> np.ndarray:
    """Prefix hit tokens of every request at a capacity: the blocks whose effective depth is at
    most the capacity (the same rule as :class:`~.prefix_curve.PrefixCurve`). O(blocks)."""
    trace = replay.trace
    owner = np.repeat(np.arange(trace.n_requests), trace.blocks_per_request())
    hit = replay.effective <= capacity_blocks
    return np.bincount(owner, weights=np.where(hit, trace.block_tokens, 0), minlength=trace.n_requests).astype(np.int64)


def _ttft(options: BudgetOptions, trace: RequestTrace, counted: np.ndarray, hits: np.ndarray,
          lower: np.ndarray | None = None) -> dict[str, Any] | None:
    if options.ttft is None:
        return None
    loaded = np.zeros(int(counted.sum())) if lower is None else lower[counted]
    return ttft_summary(options.ttft.estimate_s(trace.input_length[counted], hits[counted], loaded))


def _semantics_row(replay: PrefixReplay, counted: np.ndarray, cap: dict[str, Any], options: BudgetOptions,
                   hbm_blocks: int | None) -> dict[str, Any]:
    curve = PrefixCurve(replay, counted)
    blocks = cap["blocks"]
    hits = per_request_hits(replay, blocks)
    lower = None
    if hbm_blocks is not None and blocks > hbm_blocks:
        lower = hits - per_request_hits(replay, hbm_blocks)
    row: dict[str, Any] = {
        "capacity_blocks": blocks, "prefix_token_hit_rate": float(curve.prefix_token_hit_rate_at(blocks)),
        "hit_tokens": int(curve.prefix_token_hits_at(blocks)), "block_hit_rate": float(curve.block_hit_rate_at(blocks)),
        "hit_tokens_from_lower_tier": int(lower[counted].sum()) if lower is not None else 0,
        "ttft": _ttft(options, replay.trace, counted, hits, lower),
    }
    if cap["conservative_blocks"] != blocks:
        c = cap["conservative_blocks"]
        row["conservative"] = {"capacity_blocks": c, "prefix_token_hit_rate": float(curve.prefix_token_hit_rate_at(c)),
                               "hit_tokens": int(curve.prefix_token_hits_at(c))}
    return row


def _engine_row(result: ServingResult, cap: dict[str, Any], counted: np.ndarray, trace: RequestTrace,
                options: BudgetOptions, replicas: int = 1) -> dict[str, Any] | None:
    pool = cap[engine_model(result.engine).budget_key]
    if pool not in result.pools:
        return None
    i = list(result.pools).index(pool)
    row: dict[str, Any] = {"pool": int(pool), "feasible": bool(result.failed_request[i] < 0)}
    if row["feasible"]:
        hits = result.hit_tokens[i]
        inputs = int(trace.input_length[counted].sum())
        row.update(hit_tokens=int(hits[counted].sum()),
                   prefix_token_hit_rate=int(hits[counted].sum()) / inputs if inputs else 0.0,
                   ttft=_ttft(options, trace, counted, hits))
        load = getattr(result, "load", None)
        if load is not None and replicas > 1:  # one pool of N replicas' HBM is no deployment to load
            row["ttft"] = None
            row["ttft_not_given"] = (f"the {replicas} replicas' HBM as one pool is an idealized cache, not a "
                                     f"deployment: under load each replica has its own pool and scheduler (the "
                                     f"1-replica row, with the scheduler on {replicas} workers)")
        elif load is not None:  # under the engine's scheduler: its first-token times, queueing included
            summary = load_summary(load, i, counted, trace)
            row["ttft"] = {**ttft_summary(load.first_token_s[i][counted]), "p90_ms": summary["ttft_s"]["p90"] * 1e3,
                           "under_load": True, "keeps_up": summary["keeps_up"]}
    return row


def _requirements(curve: PrefixCurve, pool: dict[str, Any], block_size: int, geometry: ModelGeometry,
                  targets: Sequence[float], cost: Any = None) -> list[dict[str, Any]]:
    """Per target: replicas needed (all replicas' HBM as one cache) and what one replica lacks;
    with ``cost(gpus, cpu_gib, disk_gib, hit_rate)``, what each way costs."""
    rows: list[dict[str, Any]] = []
    per_replica = pool["kv_tokens"]  # > 0: budget_report refuses a replica that holds no prompt (require_holds)
    for t in targets:
        for kind in ("fraction_of_ceiling", "token_hit_rate"):
            blocks = curve.min_capacity_for(**{kind: t})
            if blocks is None:
                rows.append({"target": t, "kind": kind, "reachable": False,
                             "unreachable": {"reason": unreachable_reason(curve, kind, t)}})
                continue
            tokens = blocks * block_size
            row: dict[str, Any] = {"target": t, "kind": kind, "reachable": True, "tokens": int(tokens),
                                   "gib": tokens * geometry.kv_bytes_per_token / GIB,
                                   "prefix_token_hit_rate": float(curve.prefix_token_hit_rate_at(blocks)),
                                   "replicas": math.ceil(tokens / per_replica),
                                   "behind_one_replica_gib": max(0, tokens - per_replica) * geometry.kv_bytes_per_token / GIB}
            if cost is not None:
                tp, behind, rate = pool["gpus_per_replica"], row["behind_one_replica_gib"], row["prefix_token_hit_rate"]
                row["cost"] = {"replicas": cost(row["replicas"] * tp, 0.0, 0.0, rate),
                               "one_replica_plus_dram": cost(tp, behind, 0.0, rate),
                               "one_replica_plus_ssd": cost(tp, 0.0, behind, rate)}
            rows.append(row)
    return rows


def budget_report(trace: RequestTrace, replays: dict[str, PrefixReplay], counted: np.ndarray, geometry: ModelGeometry,
                  options: BudgetOptions, engine_results: dict[str, ServingResult] | None = None,
                  targets: Sequence[float] = (0.9,)) -> dict[str, Any]:
    """The plan's ``budgets`` section: hardware pool, then per budget every semantics' answer."""
    budgets = list(options.budgets)
    out: dict[str, Any] = {"model": options.spec.describe() if options.spec else None, "hardware": None,
                           "ttft_model": options.ttft.describe() if options.ttft else None,
                           "sliding_window_accounting": _sliding_note(geometry), "notes": list(options.notes)}
    hbm_blocks = None
    longest = int(trace.input_length.max(initial=0) + trace.output_length.max(initial=0))
    cost: Any = None
    longest_prompt = int(trace.input_length.max(initial=0))
    if options.hardware is not None and options.spec is not None:  # a replica that cannot run the trace: refused
        pool = require_holds(options.spec, options.hardware, longest_prompt, "the trace's longest prompt")
        out["hardware"] = pool
        hbm_blocks = pool["kv_tokens_all_replicas"] // trace.block_size
        tp = pool["gpus_per_replica"]
        budgets[:0] = hbm_budgets(pool, geometry, options)
        if options.prices is not None and pool["fits"]:  # weights that do not fit: no deployment, no US$
            cost, out["cost"] = pricing(trace, counted, options.prices)
            pool["cost"] = cost(tp * pool["replicas"], 0.0, 0.0, None)
        if replays:
            name = "engine" if "engine" in replays else next(iter(replays))
            out["requirements"] = {"semantics": name, "assumes": "all replicas' HBM as one cache (prefix-aware routing)",
                                   "targets": _requirements(PrefixCurve(replays[name], counted), pool,
                                                            trace.block_size, geometry, targets, cost)}
    rows = []
    for budget in budgets:
        cap = budget_capacity(budget, trace.block_size, geometry, longest, options.engine_block_size,
                              options.hybrid_block_bytes, options.swa_full_tokens_ratio)
        row: dict[str, Any] = {**cap, "semantics": {}, "engine_models": {}}
        priced = cost is not None and budget.gpus > 0
        if priced:
            row["cost"] = cost(budget.gpus, 0.0, 0.0, None)
        short = None
        if cap["pool_tokens"] < longest_prompt:  # no engine runs that pool: no hit rate or TTFT computed from it
            short = (f"a pool of {cap['pool_tokens']:,} tokens cannot hold the trace's longest prompt "
                     f"({longest_prompt:,} tokens): an engine with it could not run the trace")
        for name, replay in replays.items():
            row["semantics"][name] = ({"capacity_blocks": cap["blocks"], "not_given": short} if short
                                      else _semantics_row(replay, counted, cap, options, hbm_blocks))
            if priced and not short:
                _uncached(row["semantics"][name], cost(budget.gpus, 0.0, 0.0, row["semantics"][name]["prefix_token_hit_rate"]))
        for name, result in (engine_results or {}).items():
            engine_row = _engine_row(result, cap, counted, trace, options, budget.replicas)
            if engine_row is None and short:  # a pool too small to run (with_budget_pools runs none): say why
                engine_row = {"pool": int(cap[engine_model(name).budget_key]), "feasible": False, "not_run": short}
            if engine_row is not None:
                if priced and engine_row["feasible"]:
                    _uncached(engine_row, cost(budget.gpus, 0.0, 0.0, engine_row["prefix_token_hit_rate"]))
                row["engine_models"][name] = engine_row
        rows.append(row)
    out["rows"] = rows
    out["engine_ttft_under_load"] = any(getattr(r, "load", None) is not None for r in (engine_results or {}).values())
    if geometry.is_hybrid and any(not engine_model(name).supports_hybrid_groups for name in engine_results or {}):
        out["notes"].append("the engine models simulate the full-attention blocks only; vLLM also spends blocks of the "
                            "same pool on the sliding-window groups (up to one window per running request per group)")
    return out


def pricing(trace: RequestTrace, counted: np.ndarray, prices: DeploymentPrices) -> tuple[Any, dict[str, Any]]:
    """The pricing function of this trace (``(gpus, cpu_gib, disk_gib, hit_rate) -> cost``) and
    the section's ``cost``: the price inputs, their sources and the input tokens per hour."""
    inputs = int(trace.input_length[counted].sum())
    times = trace.timestamps_s[counted]
    span = float(np.ptp(times)) if times.size else 0.0
    rate, why = input_tokens_per_hour(inputs, span)

    def cost(gpus: int, cpu_gib: float, disk_gib: float, hit_rate: float | None) -> dict[str, Any]:
        return deployment_cost(gpus, prices, cpu_gib, disk_gib, rate, why, hit_rate)

    section = {**prices.describe(), "input_tokens": inputs, "span_s": span,
               "input_tokens_per_hour_basis": ("the counted requests' input tokens over their time span (first to last "
                                               "arrival), per hour; the per-token prices assume the priced GPUs serve "
                                               "that rate (whether their compute keeps up is the scheduler's question)")}
    if rate is None:
        section["input_tokens_per_hour_not_given"] = why
    else:
        section["input_tokens_per_hour"] = rate
    return cost, section


def _uncached(row: dict[str, Any], cost: dict[str, Any]) -> None:
    """A row's US$ per million uncached input tokens (or why not) from its priced ``cost``."""
    for key in ("usd_per_million_uncached_input_tokens", "usd_per_million_uncached_input_tokens_not_given"):
        if key in cost:
            row[key] = cost[key]


def _sliding_note(geometry: ModelGeometry) -> str:
    kinds = geometry.layer_kinds
    if not geometry.is_hybrid and geometry.has_kv_groups:
        other = []
        if "chunked" in kinds:
            other.append(f"{kinds.count('chunked')} chunked-local layers hold at most the current "
                         f"{geometry.attention_chunk_size:,}-token chunk")
        if "mamba" in kinds:
            other.append(f"{kinds.count('mamba')} linear-attention (Mamba) layers hold one {geometry.mamba_state_bytes:,}-byte "
                         "state per running request and per kept checkpoint")
        return (f"{'; '.join(other)}: capacities use the {geometry.num_full_layers} full-attention layers' "
                f"{geometry.kv_bytes_per_token} B/token after reserving one running request's blocks of the other groups; "
                "the vLLM rows run the hybrid cache at vLLM's own num_gpu_blocks, every group in the pool")
    if not geometry.is_hybrid:
        return "all layers full attention: a request's KV bytes are KV bytes per token x its tokens"
    return (f"{geometry.num_sliding_layers} of {geometry.num_layers} layers hold at most {geometry.sliding_window} "
            f"tokens: capacities use the {geometry.num_full_layers} full-attention layers' "
            f"{geometry.kv_bytes_per_token} B/token after reserving one request's sliding window "
            f"({geometry.sliding_bytes_per_token} B/token x min(longest request, window)); 'conservative' counts "
            f"every layer as full ({geometry.all_layers_bytes_per_token} B/token); the truth lies between")
