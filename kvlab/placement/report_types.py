"""The typed shape of ``python -m kvlab.placement``'s JSON outputs (``simulate``, ``calibration``,
``experiments``' ``results.json``); the schemas in ``schemas/`` are generated from these
(:mod:`.schemas`), and ``tests/test_schemas.py`` validates real outputs against them.

``results.json``'s ``claims`` section stays loosely typed (a dict per claim, as ``claims.md``
renders it).
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["CalibrationField", "CalibrationReport", "CompositionSweep", "ExperimentsReport", "PlacementConfig",
           "ServedModel", "SimResultSummary", "SimulateReport", "SimulateServedModel", "SloCapacity", "SloRow",
           "SweepPoint", "TTFTms", "WorkloadSummary"]


class Tool(TypedDict):
    name: str  # "stackdist"
    version: str  # the package version that wrote the JSON


class PlacementConfig(TypedDict):
    """The simulation's settings (kvlab/placement/simulator.py ``SimConfig``)."""

    capacities: list[int]  # HBM, DRAM, SSD capacities in blocks
    policy: str  # the eviction policy, described
    organisation: str  # exclusive or inclusive tiers
    mode: str  # prefix or block
    prefetch: str  # none, causal or oracle
    lookahead: int  # requests the prefetcher looks ahead
    block_tokens: int  # tokens per block
    bytes_per_token: int  # KV bytes per token of the measured model
    gpu_queue: bool  # requests queue for the GPU


class TTFTms(TypedDict):
    p50: float
    p99: float
    mean: float


class WorkloadSummary(TypedDict):
    name: str
    requests: int
    block_accesses: int
    distinct_blocks: int
    block_tokens: int  # tokens per block
    sessions: int
    params: dict[str, Any]  # the generator's parameters (a Mooncake trace: its path and block sizes)


class ServedModel(TypedDict):
    """The model and GPU the simulation serves (kvlab/placement/served.py ``Served.describe``)."""

    model: str
    hf_repo: str | None
    model_given: bool  # false: the measured default model
    gpu: str
    gpu_given: bool
    kv_bytes_per_token: int
    hbm_gib: float  # the GPU's HBM
    hbm_gbps: float
    host_link_gbps: float
    latency_basis: str  # measured, or extrapolated from the measured model
    latency_measured_for: str
    latency_factors: dict[str, float] | None  # extrapolated: each latency field's scale (weight-read floors in ms)


class SimulateServedModel(ServedModel):
    hbm_tier_max_blocks: int  # the most HBM blocks the GPU's KV pool holds


class SimResultSummary(TypedDict):
    """One simulation's counts and latencies (kvlab/placement/simulator.py ``SimResult.to_dict``)."""

    workload: str
    config: PlacementConfig
    requests: int
    block_accesses: int
    hits: dict[str, int]  # per tier (hbm, dram, ssd): block accesses served there
    hit_rates: dict[str, float]  # per tier: hits / block accesses
    misses: int  # block accesses served by none (recomputed)
    miss_rate: float
    stale_hits: int  # prefix mode: hits behind a missed block (not usable)
    migration_bytes: dict[str, int]  # per link and direction, demand and prefetch
    migration_bytes_total: int
    ttft_ms: TTFTms  # time to first token
    tpot_ms_mean: float  # time per output token
    stall_share: float  # share of decode time stalled on loads
    link_wait_ms_mean: float  # mean wait for a busy link per request
    gpu_wait_ms_mean: float  # mean wait for the GPU per request


class SimulateReport(SimResultSummary):
    """``python -m kvlab.placement simulate``: one simulation's counts and latencies."""

    schema_version: int
    kind: str
    tool: Tool
    workload_summary: WorkloadSummary
    served: SimulateServedModel
    latency_model: dict[str, float]  # the LatencyModel's fields (ms, GB/s)


class SweepPoint(TypedDict):
    capacities: list[int]  # HBM, DRAM, SSD blocks
    cost_usd: float  # the tiers' purchase price
    ttft_p50_ms: float
    ttft_mean_ms: float
    ttft_p99_ms: float
    hit_rates: dict[str, float]  # per tier
    migration_bytes_total: int


class CompositionSweep(TypedDict):
    """The chat workload's fixed block budget split over the three tiers."""

    workload: str
    budget_blocks: int
    steps: int  # grid steps per tier
    points: list[SweepPoint]
    budget_fraction_of_distinct_blocks: float
    frontier: list[SweepPoint]  # the points no other beats on both cost and TTFT p99
    frontier_mean: list[SweepPoint]  # the same on mean TTFT


class SloRow(TypedDict):
    ssd_multiple: int  # SSD blocks as a multiple of HBM's
    dram_multiple: float  # DRAM blocks as a multiple of HBM's
    min_hbm_blocks: int | None  # the smallest HBM meeting the SLO (null: none on the grid)


class SloCapacity(TypedDict):
    workload: str
    slo_ttft_p99_ms: float
    hbm_grid: list[int]  # the HBM sizes tried (blocks)
    rows: list[SloRow]


class ExperimentsReport(TypedDict):
    """``python -m kvlab.placement experiments``' results.json: the grid, the claims and the sweeps."""

    schema_version: int
    kind: str
    tool: Tool
    description: str
    quick: bool  # --quick: tiny workloads
    seed: int
    gpu_sessions: float  # HBM capacity in mean session footprints
    prices_usd_per_gb_assumed: dict[str, float]  # per tier
    latency_model: dict[str, float]  # the LatencyModel's fields
    served: ServedModel
    kv_bytes_per_token: int
    workloads: list[WorkloadSummary]
    grid: dict[str, list[SimResultSummary]]  # per workload: one run per policy x organisation x prefetcher
    claims: dict[str, Any]  # the paper's claims against ours (loosely typed: see claims.md beside it)
    composition_sweep: CompositionSweep
    slo_capacity: SloCapacity
    elapsed_s: float | None  # wall time of the run


class CalibrationField(TypedDict):
    field: str  # a LatencyModel field
    default: float  # the value in the code
    derived: float  # the value recomputed from the fixtures


class CalibrationReport(TypedDict):
    """``python -m kvlab.placement calibration``: the latency defaults next to the values derived from the fixtures."""

    schema_version: int
    kind: str
    tool: Tool
    fields: list[CalibrationField]
