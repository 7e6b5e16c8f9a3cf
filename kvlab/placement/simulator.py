"""Request-level discrete-event simulation of KV placement across tiers.

Per request (in arrival order):

1. Lookup. ``mode="prefix"`` (default, what serving engines do): every block is located in the
   tiers as the request finds them; the usable hit is the longest run of cached blocks from the
   head; blocks after the first uncached block are recomputed even if cached. Then the
   request's blocks are committed tail first, so the head ends most recent (vLLM's order).
   ``mode="block"``: every block is an independent access, head first (the exact-agreement
   mode: with LRU it reproduces the stack-distance bands and ``kvlab.kvsim`` exactly).
2. Transfers. Blocks found in the SSD cross NVMe then PCIe; blocks in DRAM cross PCIe. Each
   link (``h2d``, ``d2h``, ``nvme`` shared by reads and writes) is a FIFO server: a transfer
   starts when the link is free, so earlier prefetches delay demand (a contended link).
   Write-backs and demotions are queued on ``d2h``/``nvme`` when the prefill ends.
3. TTFT = link wait + transfer time + GPU wait + prefill of the uncached tokens (calibrated
   model). The GPU is one FIFO server for prefills (``gpu_queue=True``); decode is assumed to be
   batched alongside and does not hold it.
   TPOT = decode compute + stall, where the stall re-streams, every step, the request's blocks
   that do not fit the GPU tier (zero when the GPU tier holds the context).
4. Prefetch (optional), issued when the prefill ends: the predictor names blocks for the next
   ``lookahead`` requests; those held in a lower tier are brought to the top tier (at most the
   top tier's capacity per round), occupying the links; a request that uses a prefetched block
   waits for that prefetch to land. ``oracle`` knows the next requests; ``causal`` predicts
   from the sessions' past (see :class:`SessionPredictor`).

``now`` in the policies is the block-access clock.

>>> from kvlab.placement.workloads import chat
>>> result = simulate(chat(n_sessions=2, accesses_per_session=200), SimConfig(capacities=(64, 512, 4096)))
>>> result.hits[0] + result.hits[1] + result.hits[2] + result.misses == result.block_accesses
True
"""

from __future__ import annotations

import copy
import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .calibration import LatencyModel, kv_bytes_per_token
from .hierarchy import ORGANISATIONS, TieredCache
from .policies import Policy, make_policy
from .workloads import Workload

__all__ = ["SimConfig", "SimResult", "simulate", "SessionPredictor", "PREFETCHERS", "MODES", "TIER_NAMES"]

MODES = ("prefix", "block")
PREFETCHERS = ("none", "causal", "oracle")
TIER_NAMES = ("hbm", "dram", "ssd")
LINK_NAMES = ("pcie", "nvme")


@dataclass(frozen=True)
class SimConfig:
    """One simulation's settings. Capacities are in blocks, tier 0 first (HBM, DRAM, SSD)."""

    capacities: tuple[int, ...] = (1024, 8192, 65536)
    policy: str | Policy = "lru"
    organisation: str = "exclusive"
    mode: str = "prefix"
    prefetch: str = "none"
    lookahead: int = 2
    latency: LatencyModel = field(default_factory=LatencyModel)
    bytes_per_token: int | None = None
    check_every: int = 0
    record_tiers: bool = False
    gpu_queue: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}.")
        if self.prefetch not in PREFETCHERS:
            raise ValueError(f"prefetch must be one of {', '.join(PREFETCHERS)}; got {self.prefetch!r}.")
        if self.organisation not in ORGANISATIONS:
            raise ValueError(f"organisation must be one of {', '.join(ORGANISATIONS)}; got {self.organisation!r}.")
        if isinstance(self.lookahead, bool) or not isinstance(self.lookahead, int) or self.lookahead < 1:
            raise ValueError(f"lookahead must be a positive int, got {self.lookahead!r}.")
        if len(self.capacities) > 3 or len(self.capacities) < 1:
            raise ValueError(f"capacities must name 1 to 3 tiers (HBM, DRAM, SSD), got {len(self.capacities)}.")


@dataclass
class SimResult:
    """Counts and latencies of one simulation (``to_dict`` for JSON)."""

    workload: str
    config: dict[str, Any]
    requests: int
    block_accesses: int
    hits: list[int]
    misses: int
    stale_hits: int
    migration_bytes: dict[str, int]
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    stall_ms: np.ndarray
    link_wait_ms: np.ndarray
    gpu_wait_ms: np.ndarray
    tiers: np.ndarray | None = None

    @property
    def hit_rates(self) -> list[float]:
        n = max(1, self.block_accesses)
        return [h / n for h in self.hits]

    def to_dict(self) -> dict[str, Any]:
        """Summary numbers (no per-request arrays)."""
        ttft = self.ttft_ms if self.requests else np.zeros(1)
        total_tpot = float(self.tpot_ms.sum())
        names = [TIER_NAMES[k] for k in range(len(self.hits))]
        return {
            "workload": self.workload,
            "config": self.config,
            "requests": self.requests,
            "block_accesses": self.block_accesses,
            "hits": dict(zip(names, self.hits)),
            "hit_rates": dict(zip(names, self.hit_rates)),
            "misses": self.misses,
            "miss_rate": self.misses / max(1, self.block_accesses),
            "stale_hits": self.stale_hits,
            "migration_bytes": dict(self.migration_bytes),
            "migration_bytes_total": int(sum(self.migration_bytes.values())),
            "ttft_ms": {
                "p50": float(np.percentile(ttft, 50)),
                "p99": float(np.percentile(ttft, 99)),
                "mean": float(ttft.mean()),
            },
            "tpot_ms_mean": float(self.tpot_ms.mean()) if self.requests else 0.0,
            "stall_share": float(self.stall_ms.sum() / total_tpot) if total_tpot > 0 else 0.0,
            "link_wait_ms_mean": float(self.link_wait_ms.mean()) if self.requests else 0.0,
            "gpu_wait_ms_mean": float(self.gpu_wait_ms.mean()) if self.requests else 0.0,
        }


class SessionPredictor:
    """Causal next-request predictor from the sessions seen so far.

    Remembers, per session, the blocks of its last request, its last arrival time and an EWMA
    (alpha 0.5) of its inter-arrival gaps. Predicts that the next requests come from the
    sessions with the earliest predicted next arrival and reuse those sessions' last prompts.
    """

    def __init__(self, alpha: float = 0.5) -> None:
        self.alpha = alpha
        self.last_blocks: dict[int, list[int]] = {}
        self.last_arrival: dict[int, float] = {}
        self.gap: dict[int, float] = {}

    def observe(self, session: int, arrival: float, blocks: list[int]) -> None:
        previous = self.last_arrival.get(session)
        if previous is not None:
            gap = arrival - previous
            old = self.gap.get(session)
            self.gap[session] = gap if old is None else self.alpha * gap + (1 - self.alpha) * old
        self.last_arrival[session] = arrival
        self.last_blocks[session] = blocks

    def predict(self, k: int) -> list[list[int]]:
        """Block lists of the ``k`` sessions predicted to arrive soonest (unknown gap: last)."""
        def next_arrival(session: int) -> float:
            gap = self.gap.get(session)
            return math.inf if gap is None else self.last_arrival[session] + gap

        soonest = heapq.nsmallest(k, self.last_blocks, key=lambda s: (next_arrival(s), -self.last_arrival[s]))
        return [self.last_blocks[s] for s in soonest]


class _Link:
    """A FIFO server: ``send`` returns the finish time of a transfer queued at ``t``."""

    __slots__ = ("free_at",)

    def __init__(self) -> None:
        self.free_at = 0.0

    def send(self, t: float, duration_s: float) -> float:
        start = t if t > self.free_at else self.free_at
        self.free_at = start + duration_s
        return self.free_at


def simulate(workload: Workload, config: SimConfig) -> SimResult:
    """Run ``workload`` through the tiers of ``config``; return counts and latencies.

    Complexity: O(total block accesses x policy cost), one pass.
    """
    # A fresh policy per run: an instance in the config is copied so its metadata never leaks.
    policy = make_policy(config.policy) if isinstance(config.policy, str) else copy.deepcopy(config.policy)
    cache = TieredCache(list(config.capacities), policy, config.organisation)
    n_tiers = len(config.capacities)
    bytes_per_token = config.bytes_per_token or kv_bytes_per_token()
    block_bytes = workload.block_tokens * bytes_per_token
    lat = config.latency
    h2d, d2h, nvme, gpu = _Link(), _Link(), _Link(), _Link()
    blocks = workload.blocks.tolist()
    offsets = workload.offsets.tolist()
    arrivals = workload.arrival_s.tolist()
    in_tokens = workload.input_tokens.tolist()
    out_tokens = workload.output_tokens.tolist()
    sessions = workload.session.tolist()
    n_requests = workload.n_requests
    ttft = np.zeros(n_requests)
    tpot = np.zeros(n_requests)
    stall = np.zeros(n_requests)
    wait = np.zeros(n_requests)
    gpu_wait = np.zeros(n_requests)
    hits = [0] * n_tiers
    misses = stale = 0
    tiers_out = np.empty(len(blocks), dtype=np.int64) if config.record_tiers else None
    ready: dict[int, float] = {}
    predictor = SessionPredictor() if config.prefetch == "causal" else None
    gpu_cap = config.capacities[0]
    prefix = config.mode == "prefix"
    access, locate = cache.access, cache.locate
    for r in range(n_requests):
        lo, hi = offsets[r], offsets[r + 1]
        req = blocks[lo:hi]
        n = hi - lo
        up0 = list(cache.up)
        down0 = list(cache.down)
        if prefix:
            found = [locate(b) for b in req]
            usable = 0
            while usable < n and found[usable] >= 0:
                usable += 1
            for i in range(n - 1, -1, -1):
                access(req[i], i < usable)
            for i in range(usable):
                hits[found[i]] += 1
            stale += sum(1 for i in range(usable, n) if found[i] >= 0)
            misses += n - usable
            cached_blocks = usable
        else:
            found = [access(b) for b in req]
            cached_blocks = 0
            for t in found:
                if t >= 0:
                    hits[t] += 1
                    cached_blocks += 1
            misses += n - cached_blocks
        if tiers_out is not None:
            tiers_out[lo:hi] = found
        if config.check_every and r % config.check_every == 0:
            cache._check()
        # ----- transfers and TTFT
        arrival = arrivals[r]
        start = arrival
        if ready:
            for b in req:
                landed = ready.pop(b, None)
                if landed is not None and landed > start:
                    start = landed
        up = [cache.up[k] - up0[k] for k in range(n_tiers - 1)]
        down = [cache.down[k] - down0[k] for k in range(n_tiers - 1)]
        t = start
        if n_tiers > 2 and up[1]:
            t = nvme.send(t, lat.transfer_ms("nvme_read", up[1] * block_bytes) / 1e3)
        if n_tiers > 1 and up[0]:
            t = h2d.send(t, lat.transfer_ms("h2d", up[0] * block_bytes) / 1e3)
        transfer_end = t
        # At least one token is always prefilled (the engine recomputes the last one).
        cached_tokens = min(in_tokens[r] - 1, cached_blocks * workload.block_tokens)
        new_tokens = in_tokens[r] - cached_tokens
        prefill_s = lat.prefill_ms(new_tokens, cached_tokens) / 1e3
        first_token = gpu.send(transfer_end, prefill_s) if config.gpu_queue else transfer_end + prefill_s
        gpu_wait[r] = max(0.0, (first_token - transfer_end - prefill_s) * 1e3)
        ttft[r] = (first_token - arrival) * 1e3
        waited = (transfer_end - arrival) * 1e3 - _pure_transfer_ms(lat, up, block_bytes)
        wait[r] = waited if waited > 1e-9 else 0.0  # float noise of the subtraction
        if n_tiers > 1 and down[0]:
            d2h.send(first_token, lat.transfer_ms("d2h", down[0] * block_bytes) / 1e3)
        if n_tiers > 2 and down[1]:
            nvme.send(first_token, lat.transfer_ms("nvme_write", down[1] * block_bytes) / 1e3)
        # ----- decode
        context = in_tokens[r] + out_tokens[r] / 2
        overflow = max(0, n - gpu_cap)
        step_stall = lat.transfer_ms("h2d", overflow * block_bytes) if overflow and n_tiers > 1 else 0.0
        tpot[r] = lat.decode_ms(context) + step_stall
        stall[r] = step_stall
        # ----- prefetch for the next requests
        if config.prefetch != "none":
            if predictor is not None:
                predictor.observe(sessions[r], arrival, req)
                candidates = predictor.predict(config.lookahead)
            else:
                candidates = [blocks[offsets[q] : offsets[q + 1]] for q in range(r + 1, min(n_requests, r + 1 + config.lookahead))]
            _prefetch(cache, candidates, gpu_cap, first_token, block_bytes, lat, h2d, d2h, nvme, ready)
    if config.check_every:
        cache._check()
    migration = _migration_bytes(cache, block_bytes)
    cfg = {
        "capacities": list(config.capacities),
        "policy": policy.describe(),
        "organisation": config.organisation,
        "mode": config.mode,
        "prefetch": config.prefetch,
        "lookahead": config.lookahead,
        "block_tokens": workload.block_tokens,
        "bytes_per_token": bytes_per_token,
        "gpu_queue": config.gpu_queue,
    }
    return SimResult(
        workload=workload.name, config=cfg, requests=n_requests, block_accesses=len(blocks), hits=hits,
        misses=misses, stale_hits=stale, migration_bytes=migration, ttft_ms=ttft, tpot_ms=tpot, stall_ms=stall,
        link_wait_ms=wait, gpu_wait_ms=gpu_wait, tiers=tiers_out,
    )


def _pure_transfer_ms(lat: LatencyModel, up: list[int], block_bytes: int) -> float:
    total = 0.0
    if len(up) > 1 and up[1]:
        total += lat.transfer_ms("nvme_read", up[1] * block_bytes)
    if up and up[0]:
        total += lat.transfer_ms("h2d", up[0] * block_bytes)
    return total


def _prefetch(
    cache: TieredCache, candidates: list[list[int]], budget: int, t: float, block_bytes: int,
    lat: LatencyModel, h2d: _Link, d2h: _Link, nvme: _Link, ready: dict[int, float],
) -> None:
    """Promote predicted blocks held below the top tier; queue their transfers from time ``t``."""
    up0, down0 = list(cache.prefetch_up), list(cache.prefetch_down)
    moved: list[int] = []
    seen: set[int] = set()
    for request in candidates:
        for b in request:
            if len(moved) >= budget:
                break
            if b in seen:
                continue
            seen.add(b)
            if cache.prefetch(b) > 0:
                moved.append(b)
    if not moved:
        return
    up = [cache.prefetch_up[k] - up0[k] for k in range(len(up0))]
    down = [cache.prefetch_down[k] - down0[k] for k in range(len(down0))]
    done = t
    if len(up) > 1 and up[1]:
        done = nvme.send(done, lat.transfer_ms("nvme_read", up[1] * block_bytes) / 1e3)
    if up and up[0]:
        done = h2d.send(done, lat.transfer_ms("h2d", up[0] * block_bytes) / 1e3)
    if down and down[0]:
        d2h.send(t, lat.transfer_ms("d2h", down[0] * block_bytes) / 1e3)
    if len(down) > 1 and down[1]:
        nvme.send(t, lat.transfer_ms("nvme_write", down[1] * block_bytes) / 1e3)
    for b in moved:
        ready[b] = done


def _migration_bytes(cache: TieredCache, block_bytes: int) -> dict[str, int]:
    """Bytes per link and direction, demand and prefetch kept apart."""
    out: dict[str, int] = {}
    for link, name in enumerate(LINK_NAMES[: len(cache.up)]):
        out[f"{name}_up_demand"] = cache.up[link] * block_bytes
        out[f"{name}_down_demand"] = cache.down[link] * block_bytes
        out[f"{name}_up_prefetch"] = cache.prefetch_up[link] * block_bytes
        out[f"{name}_down_prefetch"] = cache.prefetch_down[link] * block_bytes
    return out
