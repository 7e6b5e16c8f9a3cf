"""The typed shape of ``curve``'s and ``tiers``' JSON reports (:mod:`.reports` builds them) and of
``watch``'s JSON lines (:mod:`stackdist.methods.watch`); the JSON Schemas in ``schemas/`` are
generated from these, and ``tests/test_schemas.py`` validates real outputs against them, exact
and sampled.

A key present only in the exact report or only in the sampled one is optional (``total=False``
classes); ``sampled`` says which the report is.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["CurveReport", "CurveSample", "CurveSummary", "Spread", "TierGrid", "TiersReport", "Tool", "WatchAnswers",
           "WatchCoverage", "WatchRecord", "WatchWindowInfo"]


class Tool(TypedDict):
    name: str  # "stackdist"
    version: str  # the package version that wrote the JSON


class Spread(TypedDict):
    """One estimate over the sampling seeds (null when no seed reaches it)."""

    min: float | None
    max: float | None
    std: float | None
    seeds: int  # how many seeds gave a value


class _CurveSummaryBase(TypedDict):
    accesses: int  # counted accesses (the window, after the warm-up)
    total_size: int  # the counted accesses' sizes summed (size units)
    cold_misses: int | float  # first accesses of a key in the window (sampled: an estimate)
    ceiling_hits: int | float  # hits of an infinite cache (sampled: an estimate)
    ceiling_hit_rate: float  # ceiling_hits / accesses


class CurveSummary(_CurveSummaryBase, total=False):
    """Totals of the counted accesses."""

    window: list[int]  # [start, stop) of the counted accesses (exact)
    ceiling_hit_size: int  # sizes of the ceiling's hits (exact)
    max_object_size: int  # the largest size of any key (exact)
    distinct_sizes: int  # how many different sizes (exact)
    sampled: bool  # sampled summaries say so
    sample_rate: float  # the first seed's rate
    sample_size: int | None  # the fixed sample size asked for, or null
    seed: int  # the hash seed of this answer
    sampled_accesses: int  # accesses kept by the sample
    sampled_keys: int  # keys kept by the sample


class _CurveSampleBase(TypedDict):
    capacity: list[int]  # the cache sizes (size units; blocks for a request trace)
    hits: list[int | float]  # hits at each capacity
    hit_rate: list[float]  # hits / accesses at each capacity
    hit_size: list[int | float]  # sizes of the hits at each capacity
    size_hit_rate: list[float]  # hit_size / total_size


class CurveSample(_CurveSampleBase, total=False):
    """The curve at the report's capacities (sampled: with each hit rate's range over the seeds)."""

    hit_rate_min: list[float]  # sampled: the lowest seed's hit rate
    hit_rate_max: list[float]  # sampled: the highest seed's hit rate
    hit_rate_std: list[float]  # sampled: the standard deviation over the seeds


class _CurveReportBase(TypedDict):
    schema_version: int
    kind: str
    tool: Tool
    trace: str  # the trace file(s) read
    sampled: bool  # true: a SHARDS estimate with error bars
    summary: CurveSummary
    min_capacity_for_hit_rate: dict[str, int | None]  # per target hit rate: the smallest capacity, or null
    min_capacity_for_fraction_of_ceiling: dict[str, int | None]  # per target fraction of the ceiling's hits
    curve: CurveSample


class CurveReport(_CurveReportBase, total=False):
    """``stackdist curve``'s JSON: the exact (or sampled) LRU hit curve of the counted accesses."""

    window: str | None  # --window as given
    warmup: str | None  # --warmup as given
    unreachable: dict[str, dict[str, str]]  # per unreachable target: {reason}
    no_reuse: str  # present when no key is accessed twice (every access a cold miss)
    sample_rate: float  # sampled: the first seed's rate
    sample_size: int | None  # sampled: the fixed sample size, or null
    seeds: list[int]  # sampled: the hash seeds
    min_capacity_for_hit_rate_spread: dict[str, Spread]  # sampled: each answer over the seeds
    min_capacity_for_fraction_of_ceiling_spread: dict[str, Spread]  # sampled: each answer over the seeds
    ceiling_hit_rate_spread: Spread  # sampled: the ceiling over the seeds
    dask: dict[str, Any]  # distributed: where the replay ran


class _TierGridBase(TypedDict):
    gpu_capacity: list[int]  # the GPU tier sizes (rows)
    cpu_capacity: list[int]  # the CPU tier sizes (columns)
    gpu_hits: list[list[int | float]]  # hits in the GPU tier, per GPU x CPU size
    cpu_hits: list[list[int | float]]  # hits in the CPU tier (misses of the GPU tier)
    misses: list[list[int | float]]  # misses of both tiers


class TierGrid(_TierGridBase, total=False):
    """GPU + CPU hits for every (GPU, CPU) capacity pair."""

    accesses: int  # counted accesses (exact)
    exact: bool  # exclusive grid: true when computed exactly
    hit_rate_min: list[list[float]]  # sampled: the lowest seed's total hit rate per cell
    hit_rate_max: list[list[float]]  # sampled: the highest seed's total hit rate per cell


class _TiersReportBase(TypedDict):
    schema_version: int
    kind: str
    tool: Tool
    trace: str  # the trace file(s) read
    sampled: bool  # true: a SHARDS estimate with error bars
    inclusive: TierGrid  # the CPU tier holds a copy of the GPU tier's blocks


class TiersReport(_TiersReportBase, total=False):
    """``stackdist tiers``' JSON: two-tier hits for every CPU capacity at each GPU capacity."""

    window: str | None  # --window as given
    warmup: str | None  # --warmup as given
    summary: CurveSummary  # exact: the counted accesses' totals
    exclusive: TierGrid  # --exclusive: the CPU tier holds what the GPU tier evicts
    sample_rate: float  # sampled: the first seed's rate
    sample_size: int | None  # sampled: the fixed sample size, or null
    seeds: list[int]  # sampled: the hash seeds
    accesses: int  # sampled: counted accesses
    dask: dict[str, Any]  # distributed: where the replay ran


class WatchCoverage(TypedDict):
    """Request traces: the capacity (blocks) that covers each share of the requests with reuse."""

    requests: int
    requests_with_reuse: int
    p50: int | None  # blocks covering half the requests with reuse (null: none yet)
    p90: int | None
    p99: int | None


class _WatchAnswersBase(TypedDict):
    accesses: int  # block accesses in the period
    ceiling_hit_rate: float | None  # an infinite cache's hit rate (null: no access in the period)
    targets_of: str  # what the targets are fractions of ("ceiling")
    working_set: dict[str, int | None]  # per target: the smallest capacity (units), or null


class WatchAnswers(_WatchAnswersBase, total=False):
    """The answers over one period (the trailing window, or everything so far)."""

    working_set_tokens: dict[str, int | None]  # request traces: the working sets in tokens
    working_set_bytes: dict[str, int | None]  # the working sets in bytes (with a bytes-per-unit or a model)
    hit_rate: dict[str, float | None]  # per --capacities value: the hit rate (null: no access)
    coverage: WatchCoverage  # request traces
    tokens: int  # cumulative, request traces: prompt tokens read


class WatchWindowInfo(TypedDict):
    label: str  # the trailing window, as named (e.g. "10m", "interval")
    intervals: int  # intervals in the trailing window so far


class WatchRecord(TypedDict):
    """``stackdist watch``: one JSON line per interval (methods/watch.py ``snapshot``)."""

    schema_version: int
    kind: str
    tool: Tool
    time_s: float  # Unix time of the line
    interval: int  # the interval's index from 0
    final: bool  # the last line (end of input or Ctrl-C)
    sampled: bool
    sample_rate: float  # 1.0 when exact
    sample_size: int | None  # --sample-size, or null
    state_bytes: int  # the replay's memory
    window_info: WatchWindowInfo
    window: WatchAnswers  # the trailing window
    cumulative: WatchAnswers  # everything so far
