"""Request-level discrete-event simulation of KV placement across tiers.

Per request (in arrival order):

1. Lookup. ``mode="prefix"`` (default, what serving engines do): every block is located in the
   tiers as the request finds them; the usable hit is the longest run of cached blocks from the
   head; blocks after the first uncached block are recomputed even if cached. Then the
   request's blocks are committed tail first, so the head ends most recent (vLLM's order).
   ``mode="block"``: every block is an independent access, head first (the exact-agreement
   mode: with LRU it reproduces the stack-distance bands and ``kvlab.kvsim`` exactly).
2. Transfers (:class:`~kvlab.placement.links.LinkModel`). Blocks found in the SSD cross NVMe
   then PCIe; blocks in DRAM cross PCIe. Each link (``h2d``, ``d2h``, ``nvme`` shared by reads
   and writes) is a FIFO server: a transfer starts when the link is free, so earlier
   prefetches delay demand (a contended link). Write-backs and demotions are queued on
   ``d2h``/``nvme`` when the prefill ends.
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
from .links import Link, LinkModel
from .policies import Policy, make_policy
from .workloads import Workload

__all__ = ["MODES", "PREFETCHERS", "TIER_NAMES", "SessionPredictor", "SimConfig", "SimResult", "simulate"]

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


class _Run:
    """One simulation's state: the cache, the links, the GPU, the counters and the per-request outputs."""

    def __init__(self, workload: Workload, config: SimConfig) -> None:
        self.workload, self.config = workload, config
        # A fresh policy per run: an instance in the config is copied so its metadata never leaks.
        self.policy = make_policy(config.policy) if isinstance(config.policy, str) else copy.deepcopy(config.policy)
        self.cache = TieredCache(list(config.capacities), self.policy, config.organisation)
        self.n_tiers = len(config.capacities)
        self.bytes_per_token = config.bytes_per_token or kv_bytes_per_token()
        self.links = LinkModel(config.latency, workload.block_tokens * self.bytes_per_token)
        self.gpu = Link()
        self.blocks: list[int] = workload.blocks.tolist()
        self.offsets: list[int] = workload.offsets.tolist()
        self.arrivals: list[float] = workload.arrival_s.tolist()
        self.in_tokens: list[int] = workload.input_tokens.tolist()
        self.out_tokens: list[int] = workload.output_tokens.tolist()
        self.sessions: list[int] = workload.session.tolist()
        n = workload.n_requests
        self.ttft, self.tpot, self.stall, self.wait, self.gpu_wait = (np.zeros(n) for _ in range(5))
        self.hits = [0] * self.n_tiers
        self.misses = self.stale = 0
        self.tiers = np.empty(len(self.blocks), dtype=np.int64) if config.record_tiers else None
        self.ready: dict[int, float] = {}  # prefetched block -> time (s) its prefetch lands
        self.predictor = SessionPredictor() if config.prefetch == "causal" else None

    def request(self, r: int) -> None:
        """Serve request ``r``: lookup, fetches and prefill (TTFT), write-backs, decode, prefetch."""
        lo, hi = self.offsets[r], self.offsets[r + 1]
        req = self.blocks[lo:hi]
        cache, links = self.cache, self.links
        up0, down0 = list(cache.up), list(cache.down)
        found, cached_blocks = self.lookup(req)
        if self.tiers is not None:
            self.tiers[lo:hi] = found
        if self.config.check_every and r % self.config.check_every == 0:
            cache._check()
        up = [cache.up[k] - up0[k] for k in range(self.n_tiers - 1)]
        down = [cache.down[k] - down0[k] for k in range(self.n_tiers - 1)]
        first_token = self.first_token(r, req, cached_blocks, up)
        links.write_back(first_token, down)
        context = self.in_tokens[r] + self.out_tokens[r] / 2
        overflow = max(0, len(req) - self.config.capacities[0])
        step_stall = links.transfer_ms("h2d", overflow) if overflow and self.n_tiers > 1 else 0.0
        self.tpot[r] = self.config.latency.decode_ms(context) + step_stall
        self.stall[r] = step_stall
        if self.config.prefetch != "none":
            self.prefetch(r, req, first_token)

    def lookup(self, req: list[int]) -> tuple[list[int], int]:
        """Run one request's blocks through the cache (``mode``); count hits, misses and stale hits.

        Returns each block's tier before the access (-1 = miss) and the number of cached blocks
        the request uses (prefix mode: its hit prefix).
        """
        cache, hits, n = self.cache, self.hits, len(req)
        access = cache.access
        if self.config.mode == "prefix":
            locate = cache.locate
            found = [locate(b) for b in req]
            usable = 0
            while usable < n and found[usable] >= 0:
                usable += 1
            for i in range(n - 1, -1, -1):
                access(req[i], i < usable)
            for i in range(usable):
                hits[found[i]] += 1
            self.stale += sum(1 for i in range(usable, n) if found[i] >= 0)
            self.misses += n - usable
            return found, usable
        found = [access(b) for b in req]
        cached_blocks = 0
        for t in found:
            if t >= 0:
                hits[t] += 1
                cached_blocks += 1
        self.misses += n - cached_blocks
        return found, cached_blocks

    def first_token(self, r: int, req: list[int], cached_blocks: int, up: list[int]) -> float:
        """Queue request ``r``'s fetches (after any prefetch of its blocks lands) and its prefill;
        record its TTFT, link wait and GPU wait; return the first token's time (s)."""
        arrival = self.arrivals[r]
        start = arrival
        if self.ready:
            for b in req:
                landed = self.ready.pop(b, None)
                if landed is not None and landed > start:
                    start = landed
        transfer_end = self.links.fetch(start, up)
        # At least one token is always prefilled (the engine recomputes the last one).
        cached_tokens = min(self.in_tokens[r] - 1, cached_blocks * self.workload.block_tokens)
        new_tokens = self.in_tokens[r] - cached_tokens
        prefill_s = self.config.latency.prefill_ms(new_tokens, cached_tokens) / 1e3
        first_token = self.gpu.send(transfer_end, prefill_s) if self.config.gpu_queue else transfer_end + prefill_s
        self.gpu_wait[r] = max(0.0, (first_token - transfer_end - prefill_s) * 1e3)
        self.ttft[r] = (first_token - arrival) * 1e3
        waited = (transfer_end - arrival) * 1e3 - self.links.fetch_ms(up)
        self.wait[r] = waited if waited > 1e-9 else 0.0  # float noise of the subtraction
        return first_token

    def prefetch(self, r: int, req: list[int], t: float) -> None:
        """Promote the blocks predicted for the next requests (held below the top tier, at most the
        top tier's capacity); queue their transfers from time ``t`` (s) and note when they land."""
        config, cache = self.config, self.cache
        if self.predictor is not None:
            self.predictor.observe(self.sessions[r], self.arrivals[r], req)
            candidates = self.predictor.predict(config.lookahead)
        else:
            last = min(self.workload.n_requests, r + 1 + config.lookahead)
            candidates = [self.blocks[self.offsets[q] : self.offsets[q + 1]] for q in range(r + 1, last)]
        up0, down0 = list(cache.prefetch_up), list(cache.prefetch_down)
        moved = _promote(cache, candidates, config.capacities[0])
        if not moved:
            return
        up = [cache.prefetch_up[k] - up0[k] for k in range(len(up0))]
        down = [cache.prefetch_down[k] - down0[k] for k in range(len(down0))]
        done = self.links.fetch(t, up)
        self.links.write_back(t, down)
        for b in moved:
            self.ready[b] = done

    def result(self) -> SimResult:
        """The counts and latencies gathered so far."""
        config, workload = self.config, self.workload
        cfg = {
            "capacities": list(config.capacities),
            "policy": self.policy.describe(),
            "organisation": config.organisation,
            "mode": config.mode,
            "prefetch": config.prefetch,
            "lookahead": config.lookahead,
            "block_tokens": workload.block_tokens,
            "bytes_per_token": self.bytes_per_token,
            "gpu_queue": config.gpu_queue,
        }
        return SimResult(
            workload=workload.name, config=cfg, requests=workload.n_requests, block_accesses=len(self.blocks),
            hits=self.hits, misses=self.misses, stale_hits=self.stale,
            migration_bytes=_migration_bytes(self.cache, self.links.block_bytes), ttft_ms=self.ttft,
            tpot_ms=self.tpot, stall_ms=self.stall, link_wait_ms=self.wait, gpu_wait_ms=self.gpu_wait,
            tiers=self.tiers,
        )


def simulate(workload: Workload, config: SimConfig) -> SimResult:
    """Run ``workload`` through the tiers of ``config``; return counts and latencies.

    Complexity: O(total block accesses x policy cost), one pass.
    """
    run = _Run(workload, config)
    for r in range(workload.n_requests):
        run.request(r)
    if config.check_every:
        run.cache._check()
    return run.result()


def _promote(cache: TieredCache, candidates: list[list[int]], budget: int) -> list[int]:
    """Prefetch the distinct candidate blocks held below the top tier, at most ``budget``; return them."""
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
    return moved


def _migration_bytes(cache: TieredCache, block_bytes: int) -> dict[str, int]:
    """Bytes per link and direction, demand and prefetch kept apart."""
    out: dict[str, int] = {}
    for link, name in enumerate(LINK_NAMES[: len(cache.up)]):
        out[f"{name}_up_demand"] = cache.up[link] * block_bytes
        out[f"{name}_down_demand"] = cache.down[link] * block_bytes
        out[f"{name}_up_prefetch"] = cache.prefetch_up[link] * block_bytes
        out[f"{name}_down_prefetch"] = cache.prefetch_down[link] * block_bytes
    return out
