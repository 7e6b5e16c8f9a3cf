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

import bisect
import copy
import heapq
import math
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .calibration import LatencyModel, kv_bytes_per_token
from .hierarchy import ORGANISATIONS, TieredCache
from .kernel import HAVE_NUMBA, CacheTrace, compiled_policy, dense_blocks, replay
from .links import Link, LinkModel
from .policies import Policy, make_policy
from .workloads import Workload

__all__ = ["MODES", "PREFETCHERS", "TIER_NAMES", "SessionPredictor", "SimConfig", "SimResult", "prefetch_candidates", "simulate"]

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


def prefetch_candidates(workload: Workload, config: SimConfig) -> tuple[np.ndarray, np.ndarray]:
    """The requests whose blocks each prefetch round tries: ``candidates[offsets[r]:offsets[r + 1]]``.

    ``oracle``: the next ``lookahead`` requests; ``causal``: the last request of each of the
    ``lookahead`` sessions :class:`SessionPredictor` predicts soonest after request r (it reads
    sessions and arrival times only, so the lists are computed once per workload and lookahead);
    ``none``: empty. Complexity: O(requests x lookahead) (causal: x sessions).
    """
    n, k = workload.n_requests, config.lookahead
    if config.prefetch == "oracle":
        counts = np.minimum(k, np.maximum(0, n - 1 - np.arange(n)))
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        starts = np.repeat(np.arange(n) + 1, counts)
        within = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], counts)
        return offsets, (starts + within).astype(np.int64)
    if config.prefetch == "none":
        return np.zeros(n + 1, np.int64), np.zeros(0, np.int64)
    key = (id(workload), k)
    hit = _CAUSAL.get(key)
    if hit is not None and hit[0]() is workload:
        return hit[1], hit[2]
    offsets, candidates = _causal_lists(workload.session.tolist(), workload.arrival_s.tolist(), k)
    _CAUSAL[key] = (weakref.ref(workload), offsets, candidates)
    weakref.finalize(workload, _CAUSAL.pop, key, None)
    return offsets, candidates


def _causal_lists(sessions: list[int], arrivals: list[float], k: int, alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """:class:`SessionPredictor`'s predictions after every request, as request indices.

    The sessions stay sorted by its key ``(predicted next arrival, -last arrival)``, ties in
    the order the sessions first appeared (``heapq.nsmallest`` is stable), so each request
    moves one entry: O(requests x (log sessions + k)) instead of a scan of every session.
    """
    order: list[tuple[float, float, int]] = []  # (next arrival, -last arrival, first-seen index)
    index: dict[int, int] = {}
    keys: list[tuple[float, float, int]] = []
    last_request: list[int] = []
    gaps: list[float | None] = []
    offsets = np.zeros(len(sessions) + 1, np.int64)
    lists: list[int] = []
    for r, (session, arrival) in enumerate(zip(sessions, arrivals)):
        i = index.get(session)
        if i is None:
            i = index[session] = len(keys)
            keys.append((math.inf, -arrival, i))
            last_request.append(r)
            gaps.append(None)
        else:
            del order[bisect.bisect_left(order, keys[i])]
            previous = -keys[i][1]
            gap = arrival - previous
            old = gaps[i]
            gaps[i] = gap = gap if old is None else alpha * gap + (1 - alpha) * old
            keys[i] = (arrival + gap, -arrival, i)
            last_request[i] = r
        bisect.insort(order, keys[i])
        lists += [last_request[entry[2]] for entry in order[:k]]
        offsets[r + 1] = len(lists)
    return offsets, np.array(lists, dtype=np.int64)


_CAUSAL: dict[tuple[int, int], tuple[Any, np.ndarray, np.ndarray]] = {}


def _lookup(cache: TieredCache, req: list[int], prefix: bool, totals: list[int]) -> tuple[list[int], int]:
    """One request's blocks through the Python cache; ``totals`` = hits per tier, misses, stale.

    Returns each block's tier before the access (-1 = miss) and the cached blocks it uses.
    """
    n, n_tiers, access = len(req), len(totals) - 2, cache.access
    if prefix:
        locate = cache.locate
        found = [locate(b) for b in req]
        usable = 0
        while usable < n and found[usable] >= 0:
            usable += 1
        for i in range(n - 1, -1, -1):
            access(req[i], i < usable)
        for i in range(usable):
            totals[found[i]] += 1
        totals[n_tiers + 1] += sum(1 for i in range(usable, n) if found[i] >= 0)
        totals[n_tiers] += n - usable
        return found, usable
    found = [access(b) for b in req]
    cached = 0
    for t in found:
        if t >= 0:
            totals[t] += 1
            cached += 1
    totals[n_tiers] += n - cached
    return found, cached


def _python_trace(workload: Workload, config: SimConfig, policy: Policy) -> tuple[CacheTrace, TieredCache]:
    """The reference: the requests through :class:`TieredCache` (and ``_check()`` every ``check_every``)."""
    cache = TieredCache(list(config.capacities), policy, config.organisation)
    blocks, offsets = workload.blocks.tolist(), workload.offsets.tolist()
    n, n_tiers = workload.n_requests, len(config.capacities)
    out = np.zeros((n, 2 + 4 * (n_tiers - 1)), np.int64)
    found_all = np.empty(len(blocks), dtype=np.int64) if config.record_tiers else None
    cand_offsets, candidates = (a.tolist() for a in prefetch_candidates(workload, config))
    ready: dict[int, int] = {}  # prefetched block -> the round that brought it up
    waits: list[int] = []
    wait_offsets = [0]
    totals = [0] * (n_tiers + 2)
    for r in range(n):
        req = blocks[offsets[r] : offsets[r + 1]]
        rounds = [q for q in (ready.pop(b, None) for b in req) if q is not None] if ready else []
        waits += sorted(set(rounds))
        wait_offsets.append(len(waits))
        before = [list(c) for c in cache.moves()]
        found, out[r, 0] = _lookup(cache, req, config.mode == "prefix", totals)
        if found_all is not None:
            found_all[offsets[r] : offsets[r + 1]] = found
        if config.check_every and r % config.check_every == 0:
            cache._check()
        rounds_of = [blocks[offsets[q] : offsets[q + 1]] for q in candidates[cand_offsets[r] : cand_offsets[r + 1]]]
        if config.prefetch != "none":
            moved = _promote(cache, rounds_of, config.capacities[0])
            ready.update((b, r) for b in moved)
            out[r, 1] = len(moved)
        out[r, 2:] = [now - was for counter, was_counter in zip(cache.moves(), before)
                      for now, was in zip(counter, was_counter)]
    links = n_tiers - 1
    parts = [out[:, 2 + row * links : 2 + (row + 1) * links] for row in range(4)]
    trace = CacheTrace(
        cached=out[:, 0], up=parts[0], down=parts[1], prefetch_up=parts[2], prefetch_down=parts[3], moved=out[:, 1],
        wait_offsets=np.array(wait_offsets, np.int64), waits=np.array(waits, np.int64), hits=totals[:n_tiers],
        misses=totals[n_tiers], stale=totals[n_tiers + 1], found=found_all,
    )
    return trace, cache


def _compiled_trace(workload: Workload, config: SimConfig, code: tuple[int, float]) -> CacheTrace:
    dense, n_blocks = dense_blocks(workload.blocks, workload)
    cand_offsets, candidates = prefetch_candidates(workload, config)
    return replay(dense, n_blocks, workload.offsets, tuple(config.capacities), code, config.organisation == "exclusive",
                  config.mode == "prefix", cand_offsets, candidates, record=config.record_tiers)


def _timing(workload: Workload, config: SimConfig, trace: CacheTrace, links: LinkModel) -> list[np.ndarray]:
    """The request-level time model over the cache's counts: TTFT, TPOT, stall, link wait, GPU wait.

    Per request: wait for the prefetch rounds holding its blocks, fetch its lower-tier blocks,
    prefill on the GPU (a FIFO server), write back, decode; then queue its prefetch round.
    """
    n, latency, gpu = workload.n_requests, config.latency, Link()
    ttft, tpot, stall, wait, gpu_wait = (np.zeros(n) for _ in range(5))
    up, down, pup, pdown = (a.tolist() for a in (trace.up, trace.down, trace.prefetch_up, trace.prefetch_down))
    cached, moved = trace.cached.tolist(), trace.moved.tolist()
    wait_offsets, waits = trace.wait_offsets.tolist(), trace.waits.tolist()
    arrivals, in_tokens = workload.arrival_s.tolist(), workload.input_tokens.tolist()
    out_tokens, lengths = workload.output_tokens.tolist(), np.diff(workload.offsets).tolist()
    done = [0.0] * n  # when each prefetch round lands
    block_tokens, cap0, tiered = workload.block_tokens, config.capacities[0], len(config.capacities) > 1
    for r in range(n):
        arrival = start = arrivals[r]
        for w in range(wait_offsets[r], wait_offsets[r + 1]):
            start = max(start, done[waits[w]])
        transfer_end = links.fetch(start, up[r])
        # At least one token is always prefilled (the engine recomputes the last one).
        cached_tokens = min(in_tokens[r] - 1, cached[r] * block_tokens)
        new_tokens = in_tokens[r] - cached_tokens
        prefill_s = latency.prefill_ms(new_tokens, cached_tokens) / 1e3
        first_token = gpu.send(transfer_end, prefill_s) if config.gpu_queue else transfer_end + prefill_s
        gpu_wait[r] = max(0.0, (first_token - transfer_end - prefill_s) * 1e3)
        ttft[r] = (first_token - arrival) * 1e3
        waited = (transfer_end - arrival) * 1e3 - links.fetch_ms(up[r])
        wait[r] = waited if waited > 1e-9 else 0.0  # float noise of the subtraction
        links.write_back(first_token, down[r])
        context = in_tokens[r] + out_tokens[r] / 2
        overflow = max(0, lengths[r] - cap0)
        step_stall = links.transfer_ms("h2d", overflow) if overflow and tiered else 0.0
        tpot[r] = latency.decode_ms(context) + step_stall
        stall[r] = step_stall
        if moved[r]:
            done[r] = links.fetch(first_token, pup[r])
            links.write_back(first_token, pdown[r])
    return [ttft, tpot, stall, wait, gpu_wait]


def simulate(workload: Workload, config: SimConfig, engine: str = "auto") -> SimResult:
    """Run ``workload`` through the tiers of ``config``; return counts and latencies.

    ``engine``: ``"compiled"`` (:mod:`kvlab.placement.kernel`: the built-in policies, numba),
    ``"python"`` (:class:`~kvlab.placement.hierarchy.TieredCache`, the reference; also any
    other :class:`~kvlab.placement.policies.Policy`, and ``check_every``) or ``"auto"`` (compiled
    when it applies). Both give identical results (tested).

    Complexity: O(total block accesses x policy cost), one pass.
    """
    if engine not in ("auto", "compiled", "python"):
        raise ValueError(f"engine must be auto, compiled or python; got {engine!r}.")
    # A fresh policy per run: an instance in the config is copied so its metadata never leaks.
    policy = make_policy(config.policy) if isinstance(config.policy, str) else copy.deepcopy(config.policy)
    code = compiled_policy(policy) if engine != "python" and not config.check_every and HAVE_NUMBA else None
    if engine == "compiled" and code is None:
        raise ValueError("the compiled engine needs numba, a built-in policy and check_every=0.")
    if code is not None:
        trace = _compiled_trace(workload, config, code)
    else:
        trace, cache = _python_trace(workload, config, policy)
        if config.check_every:
            cache._check()
    bytes_per_token = config.bytes_per_token or kv_bytes_per_token()
    links = LinkModel(config.latency, workload.block_tokens * bytes_per_token)
    ttft, tpot, stall, wait, gpu_wait = _timing(workload, config, trace, links)
    cfg = {
        "capacities": list(config.capacities), "policy": policy.describe(), "organisation": config.organisation,
        "mode": config.mode, "prefetch": config.prefetch, "lookahead": config.lookahead,
        "block_tokens": workload.block_tokens, "bytes_per_token": bytes_per_token, "gpu_queue": config.gpu_queue,
    }
    return SimResult(
        workload=workload.name, config=cfg, requests=workload.n_requests, block_accesses=workload.n_accesses,
        hits=trace.hits, misses=trace.misses, stale_hits=trace.stale,
        migration_bytes=_migration_bytes(trace, links.block_bytes), ttft_ms=ttft,
        tpot_ms=tpot, stall_ms=stall, link_wait_ms=wait, gpu_wait_ms=gpu_wait, tiers=trace.found,
    )


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


def _migration_bytes(trace: CacheTrace, block_bytes: int) -> dict[str, int]:
    """Bytes per link and direction, demand and prefetch kept apart."""
    out: dict[str, int] = {}
    totals = [a.sum(axis=0).tolist() for a in (trace.up, trace.down, trace.prefetch_up, trace.prefetch_down)]
    for link, name in enumerate(LINK_NAMES[: trace.up.shape[1]]):
        out[f"{name}_up_demand"] = int(totals[0][link]) * block_bytes
        out[f"{name}_down_demand"] = int(totals[1][link]) * block_bytes
        out[f"{name}_up_prefetch"] = int(totals[2][link]) * block_bytes
        out[f"{name}_down_prefetch"] = int(totals[3][link]) * block_bytes
    return out
