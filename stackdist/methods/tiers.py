"""Two-tier (GPU + CPU) hits of a key trace for every CPU capacity, by a method.

:func:`tiers_of` is the one call. Exact: one replay, then one replay of the GPU-miss stream per GPU
capacity (:func:`~stackdist.engine.tiers.inclusive_tiers`); distributed: the same replays in time
chunks on a cluster (:func:`~stackdist.engine.scale.distributed.distributed_inclusive_tiers`),
hit for hit the same grid; sampled: each seed's sampled sub-trace replayed exactly at the
capacities times R and its hits divided by R (SHARDS_adj: the sample's missing weight counts as
GPU hits at every GPU capacity of at least one unit), the first seed the answer and the seeds'
lowest and highest hit rates its error bar. One :class:`TiersResult` whichever the method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.errors import UsageError, require_data
from stackdist.output import stage

from .curve import (
    TraceInput,
    access_range,
    cluster_client,
    distributed_curve,
    exact_curve,
    require_sample,
)
from .method import EXACT, Distributed, Method, Sampled

__all__ = ["TiersResult", "tiers_of"]


@dataclass(frozen=True)
class TiersResult:
    """The tier grids of an input by a method, in the trace's size unit.

    ``inclusive`` (and ``exclusive`` when asked) map ``gpu_capacity``, ``cpu_capacity``,
    ``gpu_hits``, ``cpu_hits``, ``misses`` (and, sampled, ``hit_rate_min`` / ``hit_rate_max``
    over the seeds) to arrays or lists; ``summary`` is the curve's (exact) or None (sampled: ``accesses``
    counts the counted accesses); ``rate`` the final sampling rate (1.0 when exact)."""

    method: Method
    inclusive: dict[str, Any]
    exclusive: dict[str, Any] | None
    summary: dict[str, Any] | None
    accesses: int
    rate: float = 1.0
    distributed: dict[str, Any] | None = None

    @property
    def sampled(self) -> bool:
        """True when the grids are SHARDS estimates. O(1)."""
        return isinstance(self.method, Sampled)


def tiers_of(source: TraceInput, gpu_capacities: Sequence[int], method: Method = EXACT,
          cpu_capacities: Sequence[int] | None = None, cpu_points: int = 50, exclusive: bool = False) -> TiersResult:
    """The inclusive (and exclusive) tier grids of ``source`` at each GPU capacity, for
    ``cpu_capacities`` (default ``cpu_points`` spread over the curve). Complexity: one replay
    plus one per GPU capacity, O(n log n) each (on the sample when sampled)."""
    from stackdist.engine.tiers import exclusive_grid, inclusive_grid, inclusive_tiers

    gpus = [int(g) for g in gpu_capacities]
    if isinstance(method, Sampled):
        return _sampled_tiers(source, method, gpus, cpu_capacities, cpu_points, exclusive)
    info = None
    if isinstance(method, Distributed):
        from stackdist.engine.scale.distributed import (
            dask_map,
            distributed_inclusive_tiers,
        )

        with cluster_client(method) as client:
            got, info = distributed_curve(source, client, method.client)
            grid_tiers = distributed_inclusive_tiers(got, gpus, dask_map(client), max(2, int(info["workers"])))
    else:
        got = exact_curve(source)
        stage(source.command, f"replaying the GPU-miss stream of {len(gpus)} GPU capacit{'y' if len(gpus) == 1 else 'ies'}")
        grid_tiers = inclusive_tiers(gpu_capacities=gpus, curve=got)
    cpu = np.array(cpu_capacities, np.int64) if cpu_capacities is not None else got.default_capacities(cpu_points)
    return TiersResult(method, inclusive_grid(grid_tiers, cpu), exclusive_grid(got, gpus, cpu) if exclusive else None,
                       got.summary(), int(got.n_accesses), 1.0, info)


def _sampled_tiers(source: TraceInput, method: Sampled, gpus: list[int], cpu_capacities: Sequence[int] | None,
                   cpu_points: int, exclusive: bool) -> TiersResult:
    """Each seed's sampled sub-trace replayed exactly at the scaled capacities; hits / R plus the
    SHARDS_adj weight at the GPU tier. O(n x seeds) hashing plus the samples' replays."""
    from stackdist.engine import HitCurve
    from stackdist.engine.scale.sampling import sample_keys
    from stackdist.engine.tiers import exclusive_grid, inclusive_grid, inclusive_tiers
    from stackdist.traces.stream_input import read_keys

    if method.cluster is not None:
        raise UsageError(f"tiers: a distributed replay is exact; it takes no {source.labels[2]}/{source.labels[3]}.")
    shown = source.spec if isinstance(source.spec, str) else str(list(source.spec))
    keys, sizes = read_keys(source.spec, source.format)
    require_data(int(keys.shape[0]), shown, "the trace has no accesses")
    start, stop = access_range(source, keys.shape[0])
    counted = np.zeros(keys.shape[0], bool)
    counted[start:stop] = True
    cpu_caps = None if cpu_capacities is None else np.array(cpu_capacities, np.int64)
    grids: list[dict[str, Any]] = []
    rate = 1.0
    for seed in method.seed_list():
        mask, rate = sample_keys(keys, method.rate, method.size, seed)
        require_sample([int(mask[start:stop].sum())], stop - start, method, shown, seeds=[seed], labels=source.labels[2:4])
        sub_counted = np.flatnonzero(counted[mask])
        window = (int(sub_counted[0]), int(sub_counted[-1]) + 1) if sub_counted.size else (0, 0)
        sub = HitCurve.from_trace(keys[mask], None if sizes is None else sizes[mask], window)
        if cpu_caps is None:
            cpu_caps = (sub.default_capacities(cpu_points) / rate).round().astype(np.int64)
        scaled_gpus = [round(g * rate) for g in gpus]
        scaled_cpu = np.round(cpu_caps * rate).astype(np.int64)
        grid = {"inclusive": inclusive_grid(inclusive_tiers(gpu_capacities=scaled_gpus, curve=sub), scaled_cpu)}
        if exclusive:
            grid["exclusive"] = exclusive_grid(sub, scaled_gpus, scaled_cpu)
        delta = (stop - start) - sub_counted.size / rate  # SHARDS_adj: the missing weight hits the top bucket
        top = (np.array(scaled_gpus) >= 1)[:, None]
        grids.append({kind: {"gpu_hits": np.clip(g["gpu_hits"] / rate + np.where(top, delta, 0.0), 0, stop - start),
                             "cpu_hits": g["cpu_hits"] / rate} for kind, g in grid.items()})
    assert cpu_caps is not None
    n = stop - start
    out: dict[str, dict[str, Any]] = {}
    for kind in grids[0]:
        gpu = np.array([g[kind]["gpu_hits"] for g in grids])
        cpu = np.array([g[kind]["cpu_hits"] for g in grids])
        out[kind] = {"gpu_capacity": gpus, "cpu_capacity": cpu_caps.tolist(), "gpu_hits": gpu[0].tolist(),
                     "cpu_hits": cpu[0].tolist(), "misses": (n - gpu[0] - cpu[0]).tolist(),
                     "hit_rate_min": ((gpu + cpu).min(0) / max(n, 1)).tolist(),
                     "hit_rate_max": ((gpu + cpu).max(0) / max(n, 1)).tolist()}
    return TiersResult(method, out["inclusive"], out.get("exclusive"), None, n, rate)

