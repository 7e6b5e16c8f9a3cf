"""The plan's typed result: what ``stackdist plan`` computes once and every renderer reads.

``SCHEMA_VERSION`` names this shape; it changes whenever a field is renamed or removed (adding
a field keeps it). Capacities are given in blocks, tokens and GiB (2**30 bytes) together.
"""

from __future__ import annotations

from typing import Any, TypedDict

from stackdist.version import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "BudgetEngineRow",
    "BudgetRow",
    "BudgetSemanticsRow",
    "Budgets",
    "Capacity",
    "ClusterPlan",
    "ClusterPoolRegret",
    "ClusterPoolRow",
    "ClusterWorkerRow",
    "Comparison",
    "CostInputs",
    "Counted",
    "Coverage",
    "CurveTable",
    "DeploymentCost",
    "DeploymentDelivers",
    "DeploymentLoad",
    "DeploymentNotAnswered",
    "DeploymentPlan",
    "DeploymentRun",
    "DeploymentTTFTTarget",
    "DeploymentTarget",
    "EngineModelPlan",
    "EngineSchedule",
    "LoadSummary",
    "MinFeasiblePool",
    "ModelInfo",
    "OffloadPlan",
    "OffloadRow",
    "OffloadSizing",
    "OffloadSizingTier",
    "Percentiles",
    "Plan",
    "PlanCurveSummary",
    "PoolRow",
    "PricedDeployment",
    "ReplicaPool",
    "RoutingWorthRow",
    "SamplingInfo",
    "SemanticsPlan",
    "TTFTCheapest",
    "TTFTSummary",
    "TTFTUnderLoad",
    "TierPlan",
    "TierRow",
    "TraceInfo",
    "Unreachable",
    "WindowRow",
    "WorkingSetRow",
    "unreachable_reason",
]


class Capacity(TypedDict):
    blocks: int
    tokens: int
    gib: float


class Unreachable(TypedDict):
    reason: str


class WorkingSetRow(TypedDict):
    target: float
    token_hit_rate: Capacity | None
    fraction_of_ceiling: Capacity | None
    unreachable: dict[str, Unreachable]  # why, for each of the two that is None (absent: reached)


def unreachable_reason(curve: Any, kind: str, target: float) -> str:
    """Why no capacity reaches ``target`` (``kind`` token_hit_rate or fraction_of_ceiling) on
    ``curve`` (a :class:`~.prefix_curve.PrefixCurve`). O(1).

    >>> class C: ceiling_token_hit_rate, ceiling_token_hits = 0.5, 10
    >>> unreachable_reason(C(), "token_hit_rate", 0.9)[:60]
    'no capacity reaches a prefix token hit rate of 90.00%: the c'
    """
    ceiling = float(curve.ceiling_token_hit_rate)
    if kind == "fraction_of_ceiling" and not curve.ceiling_token_hits:
        return ("no block is reused in the counted requests: the ceiling (an infinite cache) is 0 hit tokens, "
                f"so no capacity reaches {target:.2%} of it")
    if kind == "token_hit_rate" and target > ceiling:
        return (f"no capacity reaches a prefix token hit rate of {target:.2%}: the ceiling (an infinite cache) is "
                f"{ceiling:.2%}, because the first use of every block misses")
    return f"no capacity reaches {target:.2%} ({kind.replace('_', ' ')}) on this trace"


class Counted(TypedDict):
    """What the plan counts (the warm-up and the window fill the cache, uncounted)."""

    requests: int  # counted requests
    warmup_requests: int  # the first requests of the window excluded from the counts
    warmup_seconds: float  # the first seconds of the window excluded from the counts
    window_requests: list[int] | None  # [first, stop) of the counted requests (--window), or null: all


class PlanCurveSummary(TypedDict):
    """A semantics' totals and ceilings over the counted requests (planning/prefix_curve.py)."""

    requests: int
    blocks: int  # prompt blocks of the counted requests
    cold_blocks: int  # first uses (misses at every capacity)
    input_tokens: int
    ceiling_block_hit_rate: float  # an infinite cache's block hits / blocks
    ceiling_reuse_hit_rate: float  # an infinite cache's block hits / reused blocks
    ceiling_token_hit_rate: float  # an infinite cache's prefix token hits / input tokens
    saturation_blocks: int  # the smallest capacity that reaches the ceiling


class EngineSchedule(TypedDict, total=False):
    """When the engine model's requests run (``kind``) and, under the scheduler, its settings."""

    kind: str  # serial, model, scheduler, recorded, or the schedule CSV's path
    prefill_tokens_per_s: float  # kind model: prefill speed
    decode_tokens_per_s: float  # kind model: decode speed per request
    max_num_seqs: int  # kind scheduler: vLLM's max_num_seqs
    max_num_batched_tokens: int  # kind scheduler: the token budget per step
    step_fixed_s: float  # kind scheduler: a step lasts step_fixed_s + tokens x step_per_token_s
    step_per_token_s: float
    step_time_source: str  # given, calibration, h200-fixture, roofline or assumed
    step_time_detail: str
    async_scheduling: bool


class MinFeasiblePool(TypedDict):
    gpu_blocks: int  # the smallest pool (engine units) that holds the requests running at once
    proved_minimal: bool  # one unit less was simulated and fails
    gib: float


class Coverage(TypedDict):
    target: float
    n_requests: int
    n_requests_with_reuse: int
    all_requests: dict[str, Capacity]
    requests_with_reuse: dict[str, Capacity]


class TierRow(TypedDict):
    tier: str
    target: float
    cumulative_blocks: int
    blocks: int
    gib: float
    cost_usd: float
    token_hit_rate_at_cumulative: float


class TierPlan(TypedDict):
    basis: str
    tiers: list[TierRow]
    total_cost_usd: float
    prices_per_gb_usd: dict[str, float]
    prices_are_assumptions: bool


class CurveTable(TypedDict):
    capacity_blocks: list[int]
    capacity_gib: list[float]
    block_hit_rate: list[float]
    reuse_hit_rate: list[float]
    prefix_token_hit_rate: list[float]


class WindowRow(TypedDict):
    start_s: float
    end_s: float
    requests: int
    window: dict[str, Any]
    cumulative: dict[str, Any]


class SemanticsPlan(TypedDict, total=False):
    summary: PlanCurveSummary
    working_set: list[WorkingSetRow]
    coverage: Coverage
    tier_plan: TierPlan
    tier_plan_by_coverage: TierPlan
    curve: CurveTable
    time_windows: list[WindowRow]


class Comparison(TypedDict):
    working_sets: list[dict[str, Any]]
    max_prefix_token_hit_rate_gap: dict[str, Any]
    per_access_block_hit_rate_at_engine_ws: list[dict[str, Any]]


class TraceInfo(TypedDict, total=False):
    source: str
    requests: int
    blocks: int
    distinct_blocks: int
    block_size_tokens: int
    input_tokens: int
    span_s: float
    skipped_lines: int
    format: str
    reblocked_to: int | None


class ModelInfo(TypedDict, total=False):
    name: str
    kv_bytes_per_token: int
    bytes_per_block: int
    sliding_window_tokens: int | None
    sliding_bytes_per_token: int
    all_layers_bytes_per_token: int


class Percentiles(TypedDict):
    p50: float
    p90: float
    p99: float
    mean: float


class LoadSummary(TypedDict):
    """A pool under the engine's scheduler, over the counted requests (planning/engine_plan.py
    ``load_summary``); a rate that cannot be given (an empty span) is null."""

    preemptions: int  # times a running request was preempted
    requests_preempted: int  # requests preempted at least once
    queue_s: Percentiles  # time from arrival to first scheduled (seconds)
    ttft_s: Percentiles  # time from arrival to the first output token (seconds)
    span_s: float  # first arrival to last finish
    arrivals_span_s: float  # first to last arrival
    busy_s: float  # time a GPU was stepping, per GPU
    workers: int
    gpu_busy_fraction: float | None  # busy_s / span_s
    served_fraction: float | None  # arrivals_span_s / span_s (1: keeps pace with the arrivals)
    prompt_tokens_per_s: float | None  # prompt tokens served per second over the span
    output_tokens_per_s: float | None
    demand_prompt_tokens_per_s: float | None  # prompt tokens per second the arrivals ask for
    scheduled_tokens: int  # tokens the scheduler ran (recomputation included)
    recomputed_tokens: int  # scheduled beyond the first computation (preemptions)
    queue_first_tenth_mean_s: float  # mean queueing of the first tenth of the arrivals
    queue_last_tenth_mean_s: float  # mean queueing of the last tenth
    queue_by_tenth_mean_s: list[float]  # mean queueing per tenth of the arrivals
    keeps_up: bool  # false when the queue grows through the trace


class PoolRow(TypedDict, total=False):
    gpu_blocks: int | str
    gib: float | None
    feasible: bool
    hit_tokens: int | None
    prefix_token_hit_rate: float | None
    requests_with_hits: int | None
    failed_request: int | None
    vs_engine: dict[str, Any]
    load: LoadSummary  # --schedule scheduler: the pool under load


class EngineModelPlan(TypedDict):
    model: str
    follows: str  # the engine and version whose code the model follows (serving/engine_model.py)
    pool_unit: str
    engine_block_size_tokens: int
    decode: bool
    schedule: EngineSchedule
    method: str
    requests: int
    input_tokens: int
    pools: list[PoolRow]
    min_feasible_pool: MinFeasiblePool | None  # when some pool is infeasible: the smallest feasible one, else None
    decode_reuse: dict[str, Any] | None  # --decode-reuse: what reusing decoded KV adds, else None
    decode_reuse_bounds: dict[str, Any] | None  # bounds on what decode reuse could add, else None
    cluster: ClusterPlan | None  # K workers / a shared tier (planning/engine_plan.py), else None
    engine: dict[str, str]  # {"name": "vLLM", "version": "0.33.0"}: the engine the model follows
    working_set: dict[str, Any]  # the smallest pool per target fraction of the ceiling (planning/engine_working_set.py)


class TTFTSummary(TypedDict):
    p50_ms: float
    p99_ms: float
    mean_ms: float


class TTFTUnderLoad(TTFTSummary, total=False):
    """An engine model's first-token times under its own scheduler (queueing included)."""

    p90_ms: float
    under_load: bool
    keeps_up: bool


class DeploymentCost(TypedDict, total=False):
    """A priced deployment (planning/prices.py ``deployment_cost``): US$ per hour of its GPUs and the
    DRAM / SSD GiB behind them, and per million input tokens; a figure that cannot be given is
    absent and its reason is under the same key + ``_not_given``."""

    gpus: int
    cpu_gib: float
    disk_gib: float
    usd_per_hour: float
    gpu_usd_per_hour: float
    cpu_usd_per_hour: float
    disk_usd_per_hour: float
    usd_per_million_input_tokens: float
    usd_per_million_input_tokens_not_given: str
    usd_per_million_uncached_input_tokens: float
    usd_per_million_uncached_input_tokens_not_given: str


class CostInputs(TypedDict, total=False):
    """The budgets section's price inputs and their sources (``DeploymentPrices.describe``) and
    the trace's input tokens per hour (counted requests over their time span)."""

    gpu: str
    usd_per_gpu_hour: float
    gpu_price_source: str
    usd_per_gb: dict[str, float]  # dram, ssd: purchase US$ per GB (1e9 bytes)
    usd_per_gb_source: dict[str, str]
    usd_per_gb_hour: dict[str, float]  # amortised
    amortisation: str
    input_tokens: int
    span_s: float
    input_tokens_per_hour_basis: str
    input_tokens_per_hour: float
    input_tokens_per_hour_not_given: str


class BudgetSemanticsRow(TypedDict, total=False):
    capacity_blocks: int
    not_given: str  # instead of the numbers, when the budget cannot hold the trace's longest prompt
    prefix_token_hit_rate: float
    hit_tokens: int
    block_hit_rate: float
    hit_tokens_from_lower_tier: int
    ttft: TTFTSummary | None
    conservative: dict[str, Any]
    usd_per_million_uncached_input_tokens: float  # rows of a priced deployment (the HBM of 1 / N replicas)
    usd_per_million_uncached_input_tokens_not_given: str


class BudgetEngineRow(TypedDict, total=False):
    pool: int
    feasible: bool
    hit_tokens: int
    prefix_token_hit_rate: float
    ttft: TTFTSummary | TTFTUnderLoad | None
    ttft_not_given: str
    usd_per_million_uncached_input_tokens: float
    usd_per_million_uncached_input_tokens_not_given: str
    not_run: str  # the pool cannot hold the trace's longest prompt: not simulated


class BudgetRow(TypedDict, total=False):
    budget: str
    unit: str
    amount: int
    blocks: int
    tokens: int
    pool_tokens: int  # the budget's tokens before rounding down to the trace's blocks
    gib: float
    sliding_reserve_bytes: int
    conservative_blocks: int
    # then the budget's pool for every registered engine model, under its ``budget_key``
    # (serving/engine_model.py): the two bundled models' keys are
    vllm_gpu_blocks: int
    sglang_pages: int
    semantics: dict[str, BudgetSemanticsRow]
    engine_models: dict[str, BudgetEngineRow]
    cost: DeploymentCost  # the HBM of 1 / N replicas with --gpu (a --capacity size names no hardware: absent)


class ReplicaPool(TypedDict, total=False):
    gpu: str
    gpus_per_replica: int
    replicas: int
    hbm_gib_per_gpu: float
    gpu_memory_utilization: float
    requested_gib_per_gpu: float  # HBM x gpu_memory_utilization
    weights_gib_per_gpu: float
    weights_source: str
    activation_gib_per_gpu: float
    non_torch_gib_per_gpu: float
    cudagraph_gib_per_gpu: float
    available_kv_gib_per_gpu: float
    layers_per_group: int  # layers sharing one KV block table (vLLM's KV cache groups)
    full_attention_groups: int
    sliding_window_groups: int
    sliding_reserve_blocks: int
    block_size_tokens: int
    assumptions: list[str]
    sources: dict[str, str]  # where each GPU figure comes from
    fits: bool
    bytes_per_block_per_gpu: int
    num_gpu_blocks: int
    kv_tokens: int
    kv_gib: float
    kv_tokens_all_replicas: int
    kv_gib_all_replicas: float
    cost: DeploymentCost  # every replica's GPUs (absent when the weights do not fit)


class Budgets(TypedDict, total=False):
    model: dict[str, Any] | None
    hardware: ReplicaPool | None
    ttft_model: dict[str, Any] | None
    engine_ttft_under_load: bool
    sliding_window_accounting: str
    notes: list[str]
    requirements: dict[str, Any]  # per target with a deployment: cost {replicas, one_replica_plus_dram, _ssd}
    rows: list[BudgetRow]
    cost: CostInputs


class ClusterWorkerRow(TypedDict):
    worker: int
    requests: int
    input_tokens: int
    hit_tokens: int
    gpu_hit_tokens: int
    shared_hit_tokens: int
    prefix_token_hit_rate: float


class ClusterPoolRegret(TypedDict, total=False):
    """Engine models on K workers: what the fleet held at each arrival (the best worker's prefix)
    against what the router's worker gave."""

    available_hit_tokens: int
    available_token_hit_rate: float
    routing_regret_percentage_points: float
    requests_routed_below_available: int


class ClusterPoolRow(ClusterPoolRegret):
    gpu_blocks: int | str
    shared_blocks: int | str
    gpu_gib_per_worker: float | None
    shared_gib: float | None
    hit_tokens: int
    gpu_hit_tokens: int
    shared_hit_tokens: int
    prefix_token_hit_rate: float
    gpu_token_hit_rate: float
    shared_token_hit_rate: float
    requests_with_hits: int
    per_worker: list[ClusterWorkerRow]
    busiest_worker_share: float
    warnings: list[str]


class RoutingWorthRow(TypedDict):
    gpu_blocks: int | str
    shared_blocks: int | str
    one_cache_blocks: int | str
    one_cache_prefix_token_hit_rate: float | None  # None: an infeasible pool (engine models)
    routers: dict[str, float | None]
    best_router: str | None
    best_minus_one_cache_percentage_points: float | None
    busiest_worker_share: dict[str, float]
    routing_regret_percentage_points: dict[str, float | None]  # routers whose run probed every worker
    warnings: list[str]


class ClusterPlan(TypedDict):
    semantics: str
    workers: int
    router: str
    worker_labels: list[Any]
    order: str
    pool_unit: str
    shared_tier: str
    kv_aware: str
    sglang_cache_aware: str  # SGLang's cache-aware router in words when it is the router, else ""
    router_rule: str  # a product's router (sglang-cache-aware, production-stack-prefixaware) in words when it routes, else ""
    llm_d: str  # llm-d's scheduler in words when it is the router (engine models), else ""
    requests: int
    input_tokens: int
    pools: list[ClusterPoolRow]
    routing_worth: list[RoutingWorthRow] | None
    notes: list[str]


class DeploymentRun(TypedDict, total=False):
    """Replicas of the deployment's pool under the engine's scheduler (planning/deployment.py)."""

    replicas: int  # (the load floor's runs)
    keeps_up: bool  # the queue does not grow through the trace
    infeasible: bool  # a request cannot be allocated at this pool (no other key then)
    ttft_s: Percentiles  # time to first token, seconds
    served_fraction: float | None  # arrivals span / finish span
    preemptions: int


class PricedDeployment(TypedDict):
    replicas: int
    gpus: int
    tiers_per_replica: dict[str, dict[str, int | float]]  # per tier: its size in the offload model's unit and gib_per_replica
    prefix_token_hit_rate: float
    cost: DeploymentCost


class DeploymentDelivers(PricedDeployment, total=False):
    """What the named deployment delivers: hits by tier, priced, and (with a step time) under load."""

    gpu_token_hit_rate: float
    tier_token_hit_rate: dict[str, float]  # per offload tier
    under_load: DeploymentRun


class DeploymentTarget(TypedDict, total=False):
    """The cheapest deployment reaching one target (every candidate priced)."""

    target: float
    kind: str  # fraction_of_ceiling or token_hit_rate
    needs_prefix_token_hit_rate: float
    cheapest: PricedDeployment | None
    candidates: list[PricedDeployment]
    unreachable: str  # why no candidate reaches it (absent: reached)


class TTFTCheapest(TypedDict):
    replicas: int
    gpus: int
    ttft_s: Percentiles
    cost: DeploymentCost


class DeploymentTTFTTarget(TypedDict, total=False):
    percentile: str  # p50, p90 or p99
    seconds: float  # the target
    cheapest: TTFTCheapest | None
    unreachable: str


class DeploymentLoad(TypedDict, total=False):
    fewest_replicas_keeping_up: int | None  # the load floor (null: none up to max_replicas)
    runs: list[DeploymentRun]
    step_time: str | None  # where the scheduler's step time comes from
    not_given: str  # no step time or no scheduler model: replicas from hit rates only


class DeploymentPlan(TypedDict):
    """``--gpu``: the deployment the flags name, what it delivers, and the cheapest per target (docs/deployment.md)."""

    engine: str  # the engine model
    follows: str
    router: str | None  # null with one replica
    replicas: int
    gpus_per_replica: int
    pool_per_replica: int  # in the engine model's pool unit
    offload: str | None  # the --offload specification behind each replica
    notes: list[str]
    offload_model: str | None
    ceiling_prefix_token_hit_rate: float  # one pool that never evicts
    delivers: DeploymentDelivers
    targets: list[DeploymentTarget]
    ttft_targets: list[DeploymentTTFTTarget]
    load: DeploymentLoad
    search: str  # how the candidates were searched
    bound: str


class DeploymentNotAnswered(TypedDict):
    """The deployment section of a trace the engine models cannot replay."""

    not_answered: str  # why


class OffloadRow(TypedDict, total=False):
    """One GPU pool x tier configuration of an offload model (planning/offload_plan.py)."""

    gpu_blocks: int | str  # the GPU pool ("inf": no eviction)
    config: str  # the tier sizes, as a label
    feasible: bool
    infeasible: str  # why the engine cannot serve the trace at this configuration
    sizes: dict[str, dict[str, int | float]]  # per tier: its size in the model's unit, tokens and gib
    hit_tokens: int  # GPU + tier prefix hits
    prefix_token_hit_rate: float
    gpu_token_hit_rate: float
    tier_token_hit_rate: dict[str, float]
    tier_hit_tokens: dict[str, int]
    connector_offload_hit_tokens: int  # what the connector reports loadable beyond the GPU hit
    written: dict[str, dict[str, int | float | None]]  # per tier: units written (model's unit), bytes, bytes_per_s
    evicted: dict[str, int]  # per tier: units evicted
    refused_stores: int


class OffloadSizingTier(TypedDict, total=False):
    tier: str
    behind: dict[str, int | str]  # the tiers in front of it and their sizes
    infeasible: str
    ceiling_prefix_token_hit_rate: float  # this tier never evicting
    without_tier_prefix_token_hit_rate: float
    never_evicting: dict[str, int | float]  # the size that never evicts, in the model's unit and gib
    answers: list[dict[str, int | float]]  # per target: fraction_of_ceiling, the size in the model's unit, tokens, gib, prefix_token_hit_rate, search_rounds


class OffloadSizing(TypedDict):
    gpu_blocks: int | str
    tiers: list[OffloadSizingTier]


class OffloadPlan(TypedDict):
    """One ``--offload`` specification: the tiers behind an engine model's GPU cache, as that engine implements them."""

    spec: str  # the --offload text
    model: str
    follows: str  # the engine and version whose code the model follows
    behind: str  # the engine model it sits behind
    validation: str
    organisation: str
    options: dict[str, str]
    schedule: str
    workers: int
    unit: str  # the model's unit (chunks, blocks ...)
    unit_tokens: int
    unit_bytes: int
    conversion: str
    requests: int
    input_tokens: int
    span_s: float
    rows: list[OffloadRow]
    sizing: list[OffloadSizing]
    sizing_method: str
    sizing_points: list[dict[str, Any]]  # each evaluated tier size: gpu_blocks, tier, behind, size, gib, hit rates


class SamplingInfo(TypedDict):
    """How a sampled plan was estimated: its rates and seeds, what is exact, the error bar of
    every estimated number (``spread``: the plan's ``semantics`` and ``comparison`` trees with
    each number as min / max / std over the seeds) and what was left out, with why."""

    method: str
    sample_rate: float
    sample_rates: list[float]
    sample_size: int | None
    seeds: list[int]
    chained: bool
    sampled_keys: list[int]
    sampled_blocks: list[int]
    estimator: str
    exact: list[str]
    resolution_blocks: int
    spread: dict[str, Any]
    omitted: dict[str, str]


class Plan(TypedDict, total=False):
    schema_version: int
    tool: dict[str, str]
    trace: TraceInfo
    model: ModelInfo
    counted: Counted
    prices_per_gb_usd: dict[str, float]
    semantics: dict[str, SemanticsPlan]
    comparison: Comparison
    engine_models: dict[str, EngineModelPlan]
    offload: list[OffloadPlan]
    budgets: Budgets
    deployment: DeploymentPlan | DeploymentNotAnswered
    optimal_bound: dict[str, Any]
    cluster: ClusterPlan
    sampled: bool
    sampling: SamplingInfo
    dask: dict[str, Any]
    deployment_file: str | None  # the --deployment file read, or null
    resolved_deployment: dict[str, dict[str, Any]]  # the deployment as resolved (file, then flags), as the file holds it
