"""The typed shape of ``python -m kvlab.placement``'s JSON outputs (``simulate``, ``calibration``);
the schemas in ``schemas/`` are generated from these (:mod:`.schemas`), and
``tests/test_schemas.py`` validates real outputs against them.

``experiments``' ``results.json`` is not typed here (its grid, claims and sweeps are loose dicts):
it has no schema yet.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["CalibrationField", "CalibrationReport", "PlacementConfig", "SimulateReport", "TTFTms", "WorkloadSummary"]


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


class SimulateReport(TypedDict):
    """``python -m kvlab.placement simulate``: one simulation's counts and latencies."""

    schema_version: int
    kind: str
    tool: Tool
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
    workload_summary: WorkloadSummary


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
