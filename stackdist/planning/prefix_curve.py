"""PrefixCurve: exact prefix-cache hit metrics of a request trace over every capacity (blocks).

Metrics, as curves over capacity (blocks; tokens = blocks x block size; bytes from the model),
read from one replay of :mod:`stackdist.serving.semantics`:

- block hit rate: blocks that hit / blocks (per-access: any cached block; engine: the blocks in
  the hit prefix, the only ones an engine can use);
- reuse hit rate: the same over the blocks seen before (cold blocks excluded);
- prefix token hit rate: tokens in each request's contiguous hit prefix / input tokens (a partial
  tail block counts its real length), for both semantics;
- the ceiling: all of the above for an infinite cache;
- KVSET's request coverage: the capacity at which a request's reusable prefix is served.

>>> from stackdist.traces import RequestTrace
>>> from stackdist.serving.semantics import replay_requests
>>> t = RequestTrace(np.array([0, 1, 0, 1]), np.array([0, 2, 4]), np.array([4, 4, 4, 4]),
...                  np.array([0.0, 1.0]), np.array([8, 8]), np.array([0, 0]), block_size=4)
>>> c = PrefixCurve(replay_requests(t, "engine"))
>>> c.prefix_token_hits_at(1), c.prefix_token_hits_at(2), c.ceiling_token_hit_rate
(4, 8, 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stackdist.engine.histogram import Histogram, exact_count, exact_fraction
from stackdist.engine.kernels import COLD
from stackdist.serving.semantics import PrefixReplay, replay_requests  # noqa: F401  (replay_requests: the doctests)
from stackdist.traces import RequestTrace

__all__ = ["PrefixCurve", "coverage_needs", "need_quantiles"]


def _request_mask(trace: RequestTrace, requests: Any) -> np.ndarray:
    """The requests that count, as a boolean mask (all of them for None)."""
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
        self.n_requests = int(self.request_mask.sum())
        if self.n_requests == trace.n_requests:  # every request counts: no copies
            tokens, depths, effective = trace.block_tokens, replay.depths, replay.effective
        else:
            blocks = np.repeat(self.request_mask, trace.blocks_per_request())
            tokens, depths, effective = trace.block_tokens[blocks], replay.depths[blocks], replay.effective[blocks]
        self.n_blocks = int(depths.shape[0])
        self.cold_blocks = int(np.count_nonzero(depths == COLD))
        self.input_tokens = int(trace.input_length[self.request_mask].sum())
        self.block_tokens = int(tokens.sum())
        self._prefix = Histogram.build(effective, tokens, self.block_tokens)
        # Engine semantics: the blocks that hit are those of the hit prefix, so one histogram.
        per_access = replay.semantics == "per-access"
        self._per_block = Histogram.build(depths, tokens, self.block_tokens) if per_access else self._prefix
        self._coverage: dict[float, np.ndarray] = {}

    @property
    def semantics(self) -> str:
        """The semantics of the replay this curve reads. O(1).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.semantics
        'engine'
        """
        return self.replay.semantics

    @property
    def block_size(self) -> int:
        """Tokens per block of the replayed trace. O(1).

        >>> PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1]], block_size=4), "engine")).block_size
        4
        """
        return int(self.replay.trace.block_size)

    # ------------------------------------------------------------------ point queries
    def block_hits_at(self, capacity_blocks: Any) -> Any:
        """Blocks that hit (per-access: any cached block; engine: blocks in the hit prefix). O(log n) per capacity.

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.block_hits_at([0, 1, 2]).tolist()
        [0, 1, 2]
        """
        hits = self._per_block.at(np.asarray(capacity_blocks, dtype=np.int64))[0]
        return int(hits) if np.ndim(hits) == 0 else hits

    def prefix_token_hits_at(self, capacity_blocks: Any) -> Any:
        """Tokens in the requests' contiguous hit prefixes. O(log n) per capacity.

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.prefix_token_hits_at([1, 2]).tolist()
        [4, 8]
        """
        hits = self._prefix.at(np.asarray(capacity_blocks, dtype=np.int64))[1]
        return int(hits) if np.ndim(hits) == 0 else hits

    def breakpoints(self) -> np.ndarray:
        """Every capacity (blocks) at which a hit count changes, from 0: the block and prefix
        token curves are exact step functions between them (``*_at(breakpoints())`` draws them
        whole). O(distinct distances).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.breakpoints().tolist()
        [0, 1, 2]
        """
        return np.unique(np.concatenate([np.zeros(1, np.int64), self._prefix.values, self._per_block.values]))

    def block_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Block hits / blocks. O(log n) per capacity.

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.block_hit_rate_at(2)
        0.5
        """
        return self.block_hits_at(capacity_blocks) / max(self.n_blocks, 1)

    def reuse_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Block hits / blocks seen before (cold blocks excluded). O(log n) per capacity.

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.reuse_hit_rate_at(1)
        0.5
        """
        return self.block_hits_at(capacity_blocks) / max(self.n_blocks - self.cold_blocks, 1)

    def prefix_token_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Prefix hit tokens / input tokens. O(log n) per capacity.

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.prefix_token_hit_rate_at(1)
        0.25
        """
        return self.prefix_token_hits_at(capacity_blocks) / max(self.input_tokens, 1)

    # ------------------------------------------------------------------ ceilings
    @property
    def ceiling_block_hits(self) -> int:
        """Block hits of an infinite cache. O(1).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.ceiling_block_hits
        2
        """
        return int(self._per_block.cum_hits[-1]) if self._per_block.values.size else 0

    @property
    def ceiling_token_hits(self) -> int:
        """Prefix hit tokens of an infinite cache. O(1).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.ceiling_token_hits
        8
        """
        return int(self._prefix.cum_sizes[-1]) if self._prefix.values.size else 0

    @property
    def ceiling_token_hit_rate(self) -> float:
        """Prefix token hit rate of an infinite cache (the ceiling every target is a fraction of). O(1).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.ceiling_token_hit_rate
        0.5
        """
        return self.ceiling_token_hits / max(self.input_tokens, 1)

    @property
    def saturation_blocks(self) -> int:
        """The smallest capacity at which every curve reaches its ceiling. O(1).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.saturation_blocks
        2
        """
        last = [int(h.values[-1]) for h in (self._per_block, self._prefix) if h.values.size]
        return max(last, default=0)

    # ------------------------------------------------------------------ inverse queries
    def min_capacity_for(self, *, token_hit_rate: float | None = None, fraction_of_ceiling: float | None = None) -> int | None:
        """The smallest capacity (blocks) whose prefix token hit rate reaches an absolute target
        or a fraction of the ceiling (give one); None when unreachable. Exact. O(log n).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.min_capacity_for(fraction_of_ceiling=0.5), c.min_capacity_for(token_hit_rate=0.6)
        (1, None)
        """
        if (token_hit_rate is None) == (fraction_of_ceiling is None):
            raise ValueError("give exactly one of token_hit_rate or fraction_of_ceiling.")
        if token_hit_rate is not None:
            target = exact_count(token_hit_rate, self.input_tokens, "token_hit_rate")
        else:
            assert fraction_of_ceiling is not None
            target = exact_count(fraction_of_ceiling, self.ceiling_token_hits, "fraction_of_ceiling")
        if target <= 0:
            return 0
        return self._prefix.first_reaching(target, by_size=True)

    def coverage_needs(self, target: float = 1.0) -> np.ndarray:
        """Per counted request, the capacity at which its first ceil(H x target) reusable blocks
        hit (H: its prefix blocks that would hit in an infinite cache); 0 when that is none.
        Computed once per target (the array is read-only)."""
        if target not in self._coverage:
            needs = coverage_needs(self.replay, target)
            if self.n_requests != needs.shape[0]:
                needs = needs[self.request_mask]
            needs.flags.writeable = False
            self._coverage[target] = needs
        return self._coverage[target]

    def coverage_capacity(
        self, target: float = 1.0, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99, 0.999), reusable_only: bool = False
    ) -> dict[str, int]:
        """The smallest capacity that serves at least each quantile of the counted requests
        (a request is served when its coverage need is met); with ``reusable_only``, of the
        requests that have a reusable prefix at all. Exact order statistics. O(requests log requests).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.coverage_capacity(1.0, (0.5, 1.0))
        {'p50': 0, 'p100': 2}
        """
        needs = self.coverage_needs(target)
        return need_quantiles(needs[needs > 0] if reusable_only else needs, quantiles)

    def summary(self) -> dict[str, Any]:
        """Totals and ceilings as a JSON-ready dict. O(1).

        >>> c = PrefixCurve(replay_requests(RequestTrace.from_blocks([[0, 1], [0, 1]], block_size=4), "engine"))
        >>> c.summary()["cold_blocks"]
        2
        """
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
    frac = exact_fraction(target, "coverage target")
    trace = replay.trace
    lo, hi = trace.offsets[:-1], trace.offsets[1:]
    # H: effective depth is finite exactly on the leading run; summed per request in one pass
    # (reduceat over the non-empty requests: an empty one contributes no element in between).
    reusable = np.zeros(lo.shape[0], np.int64)
    nonempty = hi > lo
    if np.any(nonempty):
        finite = (replay.effective != COLD).view(np.int8)
        reusable[nonempty] = np.add.reduceat(finite, lo[nonempty], dtype=np.int64)
    k = (reusable * frac.numerator + frac.denominator - 1) // frac.denominator
    idx = np.where(k > 0, lo + k - 1, 0)
    return np.where(k > 0, replay.effective[idx] if replay.effective.size else 0, 0).astype(np.int64)


def need_quantiles(needs: np.ndarray, quantiles: Sequence[float]) -> dict[str, int]:
    """``{"p50": ..., ...}``: the exact order statistics of ``needs`` (the ``ceil(q n)``-th
    smallest; 0 for an empty set). Shared by the exact and the estimated coverage. O(n log n).

    >>> need_quantiles(np.array([5, 1, 3]), (0.5, 1.0))
    {'p50': 3, 'p100': 5}
    """
    ordered = np.sort(needs)
    out = {}
    for q in quantiles:
        k = exact_count(q, ordered.size, "quantile")
        out[f"p{float(q) * 100:g}"] = int(ordered[k - 1]) if k > 0 else 0
    return out
