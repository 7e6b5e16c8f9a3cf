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
    blocks: int  # in the trace's blocks
    tokens: int  # blocks x tokens per block
    gib: float  # KV bytes of the model, in GiB


class Unreachable(TypedDict):
    reason: str


class WorkingSetRow(TypedDict):
    target: float  # the target (a prefix token hit rate, or a fraction of the ceiling)
    token_hit_rate: Capacity | None  # smallest cache for the target as a hit rate
    fraction_of_ceiling: Capacity | None  # ... as a fraction of the ceiling
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
    target: float  # the request coverage target Y
    n_requests: int  # counted requests
    n_requests_with_reuse: int  # counted requests that reuse a block
    all_requests: dict[str, Capacity]  # covering Y of all requests
    requests_with_reuse: dict[str, Capacity]  # the capacity covering Y of the requests with reuse


class TierRow(TypedDict):
    tier: str  # hbm, dram or ssd
    target: float  # the tier's target (fraction of the ceiling, or of requests)
    cumulative_blocks: int  # this tier and the ones above it
    blocks: int  # this tier alone
    gib: float  # this tier alone
    cost_usd: float  # this tier's purchase price
    token_hit_rate_at_cumulative: float  # the prefix token hit rate at cumulative_blocks


class TierPlan(TypedDict):
    basis: str  # what the targets are fractions of
    tiers: list[TierRow]  # HBM, then DRAM, then SSD
    total_cost_usd: float  # the tiers' purchase prices summed
    prices_per_gb_usd: dict[str, float]  # the prices used
    prices_are_assumptions: bool  # true unless --prices gave them


class CurveTable(TypedDict):
    capacity_blocks: list[int]  # the sampled capacities
    capacity_gib: list[float]  # the same in GiB
    block_hit_rate: list[float]  # block hits / blocks at each capacity
    reuse_hit_rate: list[float]  # block hits / reused blocks at each capacity
    prefix_token_hit_rate: list[float]  # prefix token hits / input tokens at each capacity


class WindowRow(TypedDict):
    start_s: float  # from the first request
    end_s: float  # from the first request
    requests: int  # counted requests in the window
    window: dict[str, Any]  # the window's own ceiling and working sets
    cumulative: dict[str, Any]  # from the start to the window's end


class SemanticsPlan(TypedDict, total=False):
    summary: PlanCurveSummary  # totals and ceilings
    working_set: list[WorkingSetRow]  # per target: the smallest cache
    coverage: Coverage  # the capacity covering the coverage target of the requests
    tier_plan: TierPlan  # HBM / DRAM / SSD sizes and prices for --tier-targets (of the ceiling's tokens)
    tier_plan_by_coverage: TierPlan  # the same with the targets as request coverage
    curve: CurveTable  # the hit curve at sampled capacities
    time_windows: list[WindowRow]  # --every: per time window


class Comparison(TypedDict):
    working_sets: list[dict[str, Any]]  # per target: engine and per-access working sets side by side
    max_prefix_token_hit_rate_gap: dict[str, Any]  # the largest gap between the two semantics' curves
    per_access_block_hit_rate_at_engine_ws: list[dict[str, Any]]  # per-access rate at engine's


class TraceInfo(TypedDict, total=False):
    source: str  # the trace file(s)
    requests: int  # requests in the trace
    blocks: int  # prompt blocks in all
    distinct_blocks: int  # distinct block hashes
    block_size_tokens: int  # tokens per block (after --reblock)
    input_tokens: int  # prompt tokens in all
    span_s: float  # first to last request
    skipped_lines: int  # malformed lines skipped (--skip-bad)
    format: str  # the trace format
    reblocked_to: int | None  # --reblock, or None


class ModelInfo(TypedDict, total=False):
    name: str  # the model the bytes are for
    kv_bytes_per_token: int  # full-attention layers, at the KV dtype
    bytes_per_block: int  # kv_bytes_per_token x tokens per block
    sliding_window_tokens: int | None  # the sliding-window layers' window, or None
    sliding_bytes_per_token: int  # the sliding-window layers' KV bytes per token
    all_layers_bytes_per_token: int  # every layer counted as full attention (the conservative rows)


class Percentiles(TypedDict):
    p50: float  # median
    p90: float  # 90th percentile
    p99: float  # 99th percentile
    mean: float  # mean


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
    gpu_blocks: int | str  # the pool in the engine model's unit ("inf": no eviction)
    gib: float | None  # the pool's KV bytes
    feasible: bool  # false: a request cannot be allocated (the engine would queue or preempt)
    hit_tokens: int | None  # prefix hit tokens as the engine reports them (counted requests)
    prefix_token_hit_rate: float | None  # hit_tokens / input tokens
    requests_with_hits: int | None  # counted requests with a hit
    failed_request: int | None  # the first request that cannot allocate, or None
    vs_engine: dict[str, Any]  # recorded traces: against the engine's own reported hits
    load: LoadSummary  # --schedule scheduler: the pool under load


class EngineModelPlan(TypedDict):
    model: str  # the engine model's name
    follows: str  # the engine and version whose code the model follows (serving/engine_model.py)
    pool_unit: str  # what a pool size counts
    engine_block_size_tokens: int  # the engine's KV page size
    decode: bool  # generated tokens are cached
    schedule: EngineSchedule  # when requests run
    method: str  # how the model was run
    requests: int  # counted requests
    input_tokens: int  # counted prompt tokens
    pools: list[PoolRow]  # one row per pool size
    min_feasible_pool: MinFeasiblePool | None  # when some pool is infeasible: the smallest feasible one, else None
    decode_reuse: dict[str, Any] | None  # --decode-reuse: what reusing decoded KV adds, else None
    decode_reuse_bounds: dict[str, Any] | None  # bounds on what decode reuse could add, else None
    cluster: ClusterPlan | None  # K workers / a shared tier (planning/engine_plan.py), else None
    engine: dict[str, str]  # {"name": "vLLM", "version": "0.33.0"}: the engine the model follows
    working_set: dict[str, Any]  # the smallest pool per target fraction of the ceiling (planning/engine_working_set.py)
    hybrid: dict[str, Any] | None  # the model's KV cache groups and what limits the hit (planning/engine_plan.py), else None


class TTFTSummary(TypedDict):
    p50_ms: float  # median time to first token
    p99_ms: float  # 99th percentile
    mean_ms: float  # mean


class TTFTUnderLoad(TTFTSummary, total=False):
    """An engine model's first-token times under its own scheduler (queueing included)."""

    p90_ms: float  # 90th percentile
    under_load: bool  # true: the engine's scheduler with queueing
    keeps_up: bool  # the queue does not grow through the trace


class DeploymentCost(TypedDict, total=False):
    """A priced deployment (planning/prices.py ``deployment_cost``): US$ per hour of its GPUs and the
    DRAM / SSD GiB behind them, and per million input tokens; a figure that cannot be given is
    absent and its reason is under the same key + ``_not_given``."""

    gpus: int  # GPUs priced
    cpu_gib: float  # DRAM behind them, all replicas
    disk_gib: float  # SSD behind them, all replicas
    usd_per_hour: float  # GPUs + DRAM + SSD
    gpu_usd_per_hour: float  # GPUs x their hourly price
    cpu_usd_per_hour: float  # DRAM amortised
    disk_usd_per_hour: float  # SSD amortised
    usd_per_million_input_tokens: float  # usd_per_hour / million input tokens per hour
    usd_per_million_input_tokens_not_given: str  # why it is not given
    usd_per_million_uncached_input_tokens: float  # per million tokens that miss the cache
    usd_per_million_uncached_input_tokens_not_given: str  # why it is not given


class CostInputs(TypedDict, total=False):
    """The budgets section's price inputs and their sources (``DeploymentPrices.describe``) and
    the trace's input tokens per hour (counted requests over their time span)."""

    gpu: str  # the GPU priced
    usd_per_gpu_hour: float  # its price
    gpu_price_source: str  # where the price comes from
    usd_per_gb: dict[str, float]  # dram, ssd: purchase US$ per GB (1e9 bytes)
    usd_per_gb_source: dict[str, str]  # per tier: where the price comes from
    usd_per_gb_hour: dict[str, float]  # amortised
    amortisation: str  # how purchase prices become hourly
    input_tokens: int  # counted prompt tokens
    span_s: float  # their time span
    input_tokens_per_hour_basis: str  # how the rate is counted
    input_tokens_per_hour: float  # the trace's arrival rate
    input_tokens_per_hour_not_given: str  # why it is not given


class BudgetSemanticsRow(TypedDict, total=False):
    capacity_blocks: int  # the budget in blocks
    not_given: str  # instead of the numbers, when the budget cannot hold the trace's longest prompt
    prefix_token_hit_rate: float  # at this budget
    hit_tokens: int  # prefix hit tokens
    block_hit_rate: float  # block hits / blocks
    hit_tokens_from_lower_tier: int  # hits a lower tier would serve
    ttft: TTFTSummary | None  # TTFT at this budget
    conservative: dict[str, Any]  # the conservative row's answer
    usd_per_million_uncached_input_tokens: float  # rows of a priced deployment (the HBM of 1 / N replicas)
    usd_per_million_uncached_input_tokens_not_given: str


class BudgetEngineRow(TypedDict, total=False):
    pool: int  # the engine model's pool at this budget
    feasible: bool  # false: a request cannot be allocated
    hit_tokens: int  # prefix hit tokens
    prefix_token_hit_rate: float  # at this pool
    ttft: TTFTSummary | TTFTUnderLoad | None  # TTFT at this pool
    ttft_not_given: str  # why not
    usd_per_million_uncached_input_tokens: float
    usd_per_million_uncached_input_tokens_not_given: str
    not_run: str  # the pool cannot hold the trace's longest prompt: not simulated


class BudgetRow(TypedDict, total=False):
    budget: str  # the budget as given
    unit: str  # its unit
    amount: int  # its number
    blocks: int  # in the trace's blocks
    tokens: int  # KV tokens it holds
    pool_tokens: int  # the budget's tokens before rounding down to the trace's blocks
    gib: float  # its KV bytes
    sliding_reserve_bytes: int  # reserved for sliding layers
    conservative_blocks: int  # every layer counted as full attention
    # then the budget's pool for every registered engine model, under its ``budget_key``
    # (serving/engine_model.py): the two bundled models' keys are
    vllm_gpu_blocks: int  # vLLM's num_gpu_blocks at this budget
    sglang_pages: int  # SGLang's pages at this budget
    semantics: dict[str, BudgetSemanticsRow]  # per semantics: the answer at this budget
    engine_models: dict[str, BudgetEngineRow]  # per engine model: the answer
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
    sliding_reserve_blocks: int  # one running request's blocks of the window, chunk and Mamba groups
    kv_cache_groups: dict[str, int]  # vLLM's groups per layer kind (full, sliding, chunked, mamba)
    block_size_tokens: int  # vLLM's block (raised per GPU for a Mamba hybrid)
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
    model: dict[str, Any] | None  # the model's shapes and weights (geometry.py)
    hardware: ReplicaPool | None  # the replica's KV pool (--gpu)
    ttft_model: dict[str, Any] | None  # how TTFT is estimated (roofline or calibration)
    engine_ttft_under_load: bool  # TTFT from the engine's scheduler
    sliding_window_accounting: str  # how sliding layers are counted
    notes: list[str]  # what is assumed or not given
    requirements: dict[str, Any]  # per target with a deployment: cost {replicas, one_replica_plus_dram, _ssd}
    rows: list[BudgetRow]  # one row per budget
    cost: CostInputs  # the price inputs


class ClusterWorkerRow(TypedDict):
    worker: int  # the worker's index
    requests: int  # requests routed to it
    input_tokens: int  # their prompt tokens
    hit_tokens: int  # GPU + shared tier prefix hits
    gpu_hit_tokens: int  # hits in its own GPU cache
    shared_hit_tokens: int  # hits in the shared tier
    prefix_token_hit_rate: float  # hit_tokens / input_tokens


class ClusterPoolRegret(TypedDict, total=False):
    """Engine models on K workers: what the fleet held at each arrival (the best worker's prefix)
    against what the router's worker gave."""

    available_hit_tokens: int  # the best worker's prefix at each arrival, summed
    available_token_hit_rate: float  # available_hit_tokens / input tokens
    routing_regret_percentage_points: float  # available minus achieved hit rate
    requests_routed_below_available: int  # requests whose worker held less than the best


class ClusterPoolRow(ClusterPoolRegret):
    gpu_blocks: int | str  # each worker's GPU pool ("inf": no eviction)
    shared_blocks: int | str  # the shared tier (0: none)
    gpu_gib_per_worker: float | None  # each worker's GPU pool in GiB
    shared_gib: float | None  # the shared tier in GiB
    hit_tokens: int  # all workers' prefix hits
    gpu_hit_tokens: int  # hits in the workers' GPU caches
    shared_hit_tokens: int  # hits in the shared tier
    prefix_token_hit_rate: float  # hit_tokens / input tokens
    gpu_token_hit_rate: float  # gpu_hit_tokens / input tokens
    shared_token_hit_rate: float  # shared_hit_tokens / input tokens
    requests_with_hits: int  # counted requests with a hit
    per_worker: list[ClusterWorkerRow]  # one row per worker
    busiest_worker_share: float  # the busiest worker's share of the prompt tokens
    warnings: list[str]  # e.g. a worker that got no request


class RoutingWorthRow(TypedDict):
    gpu_blocks: int | str  # each worker's pool
    shared_blocks: int | str  # the shared tier
    one_cache_blocks: int | str  # one cache of K x gpu_blocks
    one_cache_prefix_token_hit_rate: float | None  # None: an infeasible pool (engine models)
    routers: dict[str, float | None]  # per router: its prefix token hit rate (None: infeasible)
    best_router: str | None  # the router with the highest hit rate
    best_minus_one_cache_percentage_points: float | None  # best router minus one cache
    busiest_worker_share: dict[str, float]  # per router: the busiest worker's share of prompt tokens
    routing_regret_percentage_points: dict[str, float | None]  # routers whose run probed every worker
    warnings: list[str]  # what to read with care


class ClusterPlan(TypedDict):
    semantics: str  # the semantics or engine model on the workers
    workers: int  # K
    router: str  # how requests are spread
    worker_labels: list[Any]  # each worker's label (recorded: the trace's)
    order: str  # the order requests are replayed in
    pool_unit: str  # what a pool size counts
    shared_tier: str  # the shared tier's rules, in words
    kv_aware: str  # the kv-aware router, in words (else "")
    sglang_cache_aware: str  # SGLang's cache-aware router in words when it is the router, else ""
    router_rule: str  # a product's router (sglang-cache-aware, production-stack-prefixaware) in words when it routes, else ""
    llm_d: str  # llm-d's scheduler in words when it is the router (engine models), else ""
    requests: int  # counted requests
    input_tokens: int  # counted prompt tokens
    pools: list[ClusterPoolRow]  # one row per GPU pool x shared tier size
    routing_worth: list[RoutingWorthRow] | None  # every router at K workers against one cache of K x the pool
    notes: list[str]  # what is and is not modelled


class DeploymentRun(TypedDict, total=False):
    """Replicas of the deployment's pool under the engine's scheduler (planning/deployment.py)."""

    replicas: int  # (the load floor's runs)
    keeps_up: bool  # the queue does not grow through the trace
    infeasible: bool  # a request cannot be allocated at this pool (no other key then)
    ttft_s: Percentiles  # time to first token, seconds
    served_fraction: float | None  # arrivals span / finish span
    preemptions: int


class _PricedDeploymentBase(TypedDict):
    replicas: int
    gpus: int
    tiers_per_replica: dict[str, dict[str, int | float]]  # per tier: size (model's unit), gib_per_replica
    prefix_token_hit_rate: float
    cost: DeploymentCost


class PricedDeployment(_PricedDeploymentBase, total=False):
    routing_warning: str  # the router piles the requests onto one replica at this count


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
    answers: list[dict[str, int | float]]  # per target: size (model's unit), tokens, gib, rate


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
    tool: dict[str, str]  # the writer: name and version
    trace: TraceInfo  # the trace read
    model: ModelInfo  # the model whose KV bytes are counted
    counted: Counted  # what is counted (window, warm-up)
    prices_per_gb_usd: dict[str, float]  # the tier plan's prices
    semantics: dict[str, SemanticsPlan]  # per curve semantics (engine, per-access)
    comparison: Comparison  # engine against per-access
    engine_models: dict[str, EngineModelPlan]  # per engine model (vllm, sglang)
    offload: list[OffloadPlan]  # per --offload specification
    budgets: Budgets  # the answers at the sizes named (--capacity, --gpu)
    deployment: DeploymentPlan | DeploymentNotAnswered  # --gpu: the deployment, priced, and the cheapest per target
    optimal_bound: dict[str, Any]  # --optimal: Belady's bound at the working sets
    cluster: ClusterPlan  # the engine semantics on K workers / a shared tier
    sampled: bool  # true: a SHARDS estimate
    sampling: SamplingInfo  # how the sampled plan was estimated
    dask: dict[str, Any]  # --dask: what ran where
    deployment_file: str | None  # the --deployment file read, or null
    resolved_deployment: dict[str, dict[str, Any]]  # file, then flags
