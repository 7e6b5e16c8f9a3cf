"""The capacity planner: prefix-cache hit curves of request traces, working sets, coverage, bytes.

Two semantics, one replay each, every capacity at once (capacities in blocks):

``per-access`` (KVSET, LMCache's simulator): every block access updates the LRU stack at once,
head first, so it equals ``LRUCache`` over the block stream; a block hits at capacity C iff its
stack distance is at most C, so the head of a request is the least recent of its blocks and is
evicted first.

``engine`` (vLLM's free-block queue, SGLang's radix tree): a request is looked up against the
cache as it was when it arrived, its hit is the longest contiguous prefix of cached blocks, and
then its blocks are committed tail first, so its head ends most recent and the tail is evicted
first. A block is cached at arrival iff its depth in the arrival-time stack is at most C; it is
in the hit prefix iff every block before it is cached too, i.e. iff the running maximum of the
depths up to it (its *effective depth*) is at most C. So one replay that reads each request's
depths before committing it gives the hit prefix at every capacity. (Tested against a direct
``OrderedDict`` simulator with exactly these rules.)

Metrics, as curves over capacity (blocks; tokens = blocks x block size; bytes from the model):

- block hit rate: blocks that hit / blocks (per-access: any cached block; engine: the blocks in
  the hit prefix, the only ones an engine can use);
- reuse hit rate: the same over the blocks seen before (cold blocks excluded);
- prefix token hit rate: tokens in each request's contiguous hit prefix / input tokens (a partial
  tail block counts its real length), for both semantics;
- the ceiling: all of the above for an infinite cache.

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace(np.array([0, 1, 0, 1]), np.array([0, 2, 4]), np.array([4, 4, 4, 4]),
...                  np.array([0.0, 1.0]), np.array([8, 8]), np.array([0, 0]), block_size=4)
>>> c = PrefixCurve(replay_requests(t, "engine"))
>>> c.prefix_token_hits_at(1), c.prefix_token_hits_at(2), c.ceiling_token_hit_rate
(4, 8, 0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np

from . import _kernels
from .curve import _Histogram
from .distances import COLD, _engine_replay, _replay, dense_keys
from .geometry import ModelGeometry
from .traces import RequestTrace

__all__ = [
    "SEMANTICS",
    "PrefixReplay",
    "PrefixCurve",
    "replay_requests",
    "coverage_needs",
    "tier_plan",
    "DEFAULT_PRICES_PER_GB",
]

SEMANTICS = ("engine", "per-access")
DEFAULT_PRICES_PER_GB = {"hbm": 187.50, "dram": 3.50, "ssd": 0.08}  # assumptions, US$ per GB (1e9 B)


def _exact_fraction(value: float, name: str) -> Fraction:
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be between 0 and 1; got {value}.")
    return Fraction(repr(float(value)))


@dataclass
class PrefixReplay:
    """One replay of a request trace: per-block depths (in blocks) and effective depths.

    ``depths[i]``: block i's LRU stack distance (per-access) or its depth in the stack as its
    request found it (engine); :data:`~stackdist.COLD` if never seen before. ``effective[i]``:
    the running maximum of ``depths`` within the request, the smallest capacity at which block i
    is part of the request's contiguous hit prefix.
    """

    trace: RequestTrace
    semantics: str
    depths: np.ndarray
    effective: np.ndarray


def replay_requests(
    trace: RequestTrace, semantics: str = "engine", progress: Callable[[int, int], None] | None = None
) -> PrefixReplay:
    """Replay a request trace once under ``semantics`` ("engine" or "per-access").

    O(n log k) for n block accesses over k distinct blocks (unit block sizes).
    """
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {', '.join(SEMANTICS)}; got {semantics!r}.")
    dense = dense_keys(trace.block_ids)
    if semantics == "per-access":
        depths = _replay(dense, None, progress)
    else:
        depths = _engine_replay(dense, None, trace.offsets, progress)
    effective = _kernels.segment_running_max(depths, trace.offsets)
    return PrefixReplay(trace, semantics, depths, effective)


def _request_mask(trace: RequestTrace, requests: Any) -> np.ndarray:
    if requests is None:
        return np.ones(trace.n_requests, bool)
    mask = np.zeros(trace.n_requests, bool)
    mask[requests] = True
    return mask


class PrefixCurve:
    """Exact hit metrics over every capacity (in blocks) for a subset of a replay's requests.

    ``requests``: a slice, index array or boolean mask of the requests whose hits count (the
    replay always covers the whole trace, so earlier requests warm the cache).
    """

    def __init__(self, replay: PrefixReplay, requests: Any = None) -> None:
        trace = replay.trace
        self.replay = replay
        self.request_mask = _request_mask(trace, requests)
        blocks = np.repeat(self.request_mask, trace.blocks_per_request())
        tokens = trace.block_tokens[blocks]
        depths, effective = replay.depths[blocks], replay.effective[blocks]
        self.n_requests = int(self.request_mask.sum())
        self.n_blocks = int(blocks.sum())
        self.cold_blocks = int(np.count_nonzero(depths == COLD))
        self.input_tokens = int(trace.input_length[self.request_mask].sum())
        self.block_tokens = int(tokens.sum())
        self._per_block = _Histogram.build(depths if replay.semantics == "per-access" else effective, tokens)
        self._prefix = _Histogram.build(effective, tokens)

    @property
    def semantics(self) -> str:
        return self.replay.semantics

    # ------------------------------------------------------------------ point queries
    def block_hits_at(self, capacity_blocks: Any) -> Any:
        """Blocks that hit (per-access: any cached block; engine: blocks in the hit prefix)."""
        hits = self._per_block.at(np.asarray(capacity_blocks, dtype=np.int64))[0]
        return int(hits) if np.ndim(hits) == 0 else hits

    def prefix_token_hits_at(self, capacity_blocks: Any) -> Any:
        """Tokens in the requests' contiguous hit prefixes."""
        hits = self._prefix.at(np.asarray(capacity_blocks, dtype=np.int64))[1]
        return int(hits) if np.ndim(hits) == 0 else hits

    def block_hit_rate_at(self, capacity_blocks: Any) -> Any:
        return self.block_hits_at(capacity_blocks) / max(self.n_blocks, 1)

    def reuse_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Block hits / blocks seen before (cold blocks excluded)."""
        return self.block_hits_at(capacity_blocks) / max(self.n_blocks - self.cold_blocks, 1)

    def prefix_token_hit_rate_at(self, capacity_blocks: Any) -> Any:
        return self.prefix_token_hits_at(capacity_blocks) / max(self.input_tokens, 1)

    # ------------------------------------------------------------------ ceilings
    @property
    def ceiling_block_hits(self) -> int:
        return int(self._per_block.cum_hits[-1]) if self._per_block.values.size else 0

    @property
    def ceiling_token_hits(self) -> int:
        return int(self._prefix.cum_sizes[-1]) if self._prefix.values.size else 0

    @property
    def ceiling_token_hit_rate(self) -> float:
        return self.ceiling_token_hits / max(self.input_tokens, 1)

    @property
    def saturation_blocks(self) -> int:
        """The smallest capacity at which every curve reaches its ceiling."""
        last = [int(h.values[-1]) for h in (self._per_block, self._prefix) if h.values.size]
        return max(last, default=0)

    # ------------------------------------------------------------------ inverse queries
    def min_capacity_for(self, *, token_hit_rate: float | None = None, fraction_of_ceiling: float | None = None) -> int | None:
        """The smallest capacity (blocks) whose prefix token hit rate reaches an absolute target
        or a fraction of the ceiling (give one); None when unreachable. Exact."""
        if (token_hit_rate is None) == (fraction_of_ceiling is None):
            raise ValueError("give exactly one of token_hit_rate or fraction_of_ceiling.")
        if token_hit_rate is not None:
            target = math.ceil(_exact_fraction(token_hit_rate, "token_hit_rate") * self.input_tokens)
        else:
            assert fraction_of_ceiling is not None
            target = math.ceil(_exact_fraction(fraction_of_ceiling, "fraction_of_ceiling") * self.ceiling_token_hits)
        if target <= 0:
            return 0
        return self._prefix.first_reaching(target, by_size=True)

    def coverage_needs(self, target: float = 1.0) -> np.ndarray:
        """Per counted request, the capacity at which its first ceil(H x target) reusable blocks
        hit (H: its prefix blocks that would hit in an infinite cache); 0 when that is none."""
        return coverage_needs(self.replay, target)[self.request_mask]

    def coverage_capacity(
        self, target: float = 1.0, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99, 0.999), reusable_only: bool = False
    ) -> dict[str, int]:
        """The smallest capacity that serves at least each quantile of the counted requests
        (a request is served when its coverage need is met); with ``reusable_only``, of the
        requests that have a reusable prefix at all. Exact order statistics."""
        needs = self.coverage_needs(target)
        if reusable_only:
            needs = needs[needs > 0]
        needs = np.sort(needs)
        out = {}
        for q in quantiles:
            k = math.ceil(_exact_fraction(q, "quantile") * needs.size)
            out[f"p{float(q) * 100:g}"] = int(needs[k - 1]) if k > 0 else 0
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.n_requests,
            "blocks": self.n_blocks,
            "cold_blocks": self.cold_blocks,
            "input_tokens": self.input_tokens,
            "ceiling_block_hit_rate": self.ceiling_block_hits / max(self.n_blocks, 1),
            "ceiling_reuse_hit_rate": self.ceiling_block_hits / max(self.n_blocks - self.cold_blocks, 1),
            "ceiling_token_hit_rate": self.ceiling_token_hit_rate,
            "saturation_blocks": self.saturation_blocks,
        }


def coverage_needs(replay: PrefixReplay, target: float = 1.0) -> np.ndarray:
    """KVSET's request-level coverage need of every request (capacity in blocks). O(n)."""
    frac = _exact_fraction(target, "coverage target")
    trace = replay.trace
    lo, hi = trace.offsets[:-1], trace.offsets[1:]
    finite = np.r_[0, np.cumsum(replay.effective != COLD)]
    reusable = finite[hi] - finite[lo]  # H: effective depth is finite exactly on the leading run
    k = (reusable * frac.numerator + frac.denominator - 1) // frac.denominator
    idx = np.where(k > 0, lo + k - 1, 0)
    return np.where(k > 0, replay.effective[idx] if replay.effective.size else 0, 0).astype(np.int64)


def tier_plan(
    curve: PrefixCurve,
    geometry: ModelGeometry,
    tier_targets: Sequence[float] = (0.5, 0.9, 0.99),
    prices_per_gb: dict[str, float] | None = None,
    basis: str = "tokens",
    coverage_target: float = 1.0,
) -> dict[str, Any]:
    """HBM / DRAM / SSD sizes as exclusive bands of one LRU stack.

    Tier k's cumulative capacity is the smallest capacity that reaches ``tier_targets[k]``:
    a fraction of the ceiling's prefix token hits (``basis="tokens"``), or a fraction of the
    requests with a reusable prefix whose coverage need (at ``coverage_target``) is met
    (``basis="coverage"``). Its
    own size is the band between that and the tier above. Costs use ``prices_per_gb`` (US$
    per 1e9 bytes; the defaults are labelled assumptions). Exact (order statistics of the curve).
    """
    if basis not in ("tokens", "coverage"):
        raise ValueError(f"basis must be 'tokens' or 'coverage'; got {basis!r}.")
    prices = dict(DEFAULT_PRICES_PER_GB, **(prices_per_gb or {}))
    names = ["hbm", "dram", "ssd"][: len(tier_targets)]
    if list(tier_targets) != sorted(tier_targets):
        raise ValueError(f"tier targets must be non-decreasing (HBM, DRAM, SSD); got {list(tier_targets)}.")
    if basis == "tokens":
        cumulative_of = [curve.min_capacity_for(fraction_of_ceiling=t) or 0 for t in tier_targets]
    else:
        served = curve.coverage_capacity(coverage_target, tier_targets, reusable_only=True)
        cumulative_of = list(served.values())
    bytes_per_block = curve.replay.trace.block_size * geometry.kv_bytes_per_token
    tiers, previous, total_cost = [], 0, 0.0
    for name, t, cumulative in zip(names, tier_targets, cumulative_of):
        size = max(cumulative - previous, 0)
        cost = size * bytes_per_block / 1e9 * prices[name]
        total_cost += cost
        tiers.append({
            "tier": name,
            "target": t,
            "cumulative_blocks": cumulative,
            "blocks": size,
            "gib": size * bytes_per_block / 2**30,
            "cost_usd": cost,
            "token_hit_rate_at_cumulative": float(curve.prefix_token_hit_rate_at(cumulative)),
        })
        previous = max(previous, cumulative)
    return {"basis": basis, "tiers": tiers, "total_cost_usd": total_cost,
            "prices_per_gb_usd": {n: prices[n] for n in names}, "prices_are_assumptions": prices_per_gb is None}
