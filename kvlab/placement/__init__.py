"""Three-tier (GPU HBM / CPU DRAM / SSD) KV-cache placement simulator.

Modules, in the order data flows:

- :mod:`~kvlab.placement.workloads`: seeded generators (chat, agent, docqa) and Mooncake replay;
  a :class:`Workload` converts to and from :class:`stackdist.traces.RequestTrace`.
- :mod:`~kvlab.placement.policies`: recency, reuse frequency, predicted reuse, EWMA next touch.
- :mod:`~kvlab.placement.hierarchy`: the tiers, exclusive or inclusive, counting block moves.
- :mod:`~kvlab.placement.kernel`: the same tiers compiled (numba), one pass over the requests.
- :mod:`~kvlab.placement.calibration`: the latency model, calibrated from ``data/fixtures``.
- :mod:`~kvlab.placement.links`: the PCIe and NVMe links as contended FIFO servers.
- :mod:`~kvlab.placement.served`: the served model and GPU (KV bytes, HBM bound, the latency model scaled to them).
- :mod:`~kvlab.placement.simulator`: requests, transfers, prefetch, TTFT/TPOT.
- :mod:`~kvlab.placement.cost`: prices, sessions per GPU, composition sweep, SLO capacity.
- :mod:`~kvlab.placement.experiments`: the paper's grid (``python -m kvlab.placement``).

>>> from kvlab.placement import SimConfig, chat, simulate
>>> summary = simulate(chat(n_sessions=2, accesses_per_session=100), SimConfig(capacities=(32, 256, 2048))).to_dict()
>>> sorted(summary["hit_rates"])
['dram', 'hbm', 'ssd']
"""

from typing import TYPE_CHECKING

from stackdist.lazy import lazy_exports

if TYPE_CHECKING:  # the eager form, for type checkers
    from .calibration import LatencyModel, derive_from_fixtures, kv_bytes_per_token
    from .cost import (
        capacity_ratios,
        composition_sweep,
        cost_per_session_usd,
        max_sessions_meeting_slo,
        pareto_frontier,
        sessions_per_gpu,
        slo_capacity,
        tier_cost_usd,
    )
    from .hierarchy import TieredCache
    from .links import Link, LinkModel
    from .policies import (
        POLICIES,
        EWMANextTouch,
        Policy,
        PredictedReuse,
        Recency,
        ReuseFrequency,
        make_policy,
    )
    from .served import Served
    from .simulator import SimConfig, SimResult, simulate
    from .workloads import Workload, agent, chat, docqa, from_mooncake, write_mooncake

# PEP 562: ``python -m kvlab.placement`` imports this package before its ``__main__`` can install
# the Ctrl-C handler, so nothing heavy (numpy, numba) is imported here; each name loads its
# module on first use.
__getattr__, __dir__ = lazy_exports(__name__, {
    "calibration": ("LatencyModel", "derive_from_fixtures", "kv_bytes_per_token"),
    "cost": ("capacity_ratios", "composition_sweep", "cost_per_session_usd", "max_sessions_meeting_slo",
             "pareto_frontier", "sessions_per_gpu", "slo_capacity", "tier_cost_usd"),
    "hierarchy": ("TieredCache",),
    "links": ("Link", "LinkModel"),
    "policies": ("POLICIES", "EWMANextTouch", "Policy", "PredictedReuse", "Recency", "ReuseFrequency", "make_policy"),
    "served": ("Served",),
    "simulator": ("SimConfig", "SimResult", "simulate"),
    "workloads": ("Workload", "agent", "chat", "docqa", "from_mooncake", "write_mooncake"),
})

__all__ = [
    "POLICIES",
    "EWMANextTouch",
    "LatencyModel",
    "Link",
    "LinkModel",
    "Policy",
    "PredictedReuse",
    "Recency",
    "ReuseFrequency",
    "Served",
    "SimConfig",
    "SimResult",
    "TieredCache",
    "Workload",
    "agent",
    "capacity_ratios",
    "chat",
    "composition_sweep",
    "cost_per_session_usd",
    "derive_from_fixtures",
    "docqa",
    "from_mooncake",
    "kv_bytes_per_token",
    "make_policy",
    "max_sessions_meeting_slo",
    "pareto_frontier",
    "sessions_per_gpu",
    "simulate",
    "slo_capacity",
    "tier_cost_usd",
    "write_mooncake",
]
