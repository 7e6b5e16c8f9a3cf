"""The SHARDS estimate of a plan's prefix curves and request coverage, from one pass over the
whole request trace and a replay of its block sample: :func:`sampled_curves` returns one
:class:`SampledPrefixCurve` per seed and semantics, answering every question a
:class:`~.prefix_curve.PrefixCurve` answers (so the plan is built from it by the same code).

**What is exact.** One pass over the full trace with a direct-indexed table (no stack, no
replay) finds for every block whether it was seen before (cold or not), its previous access
and its parent; so the counts (requests, blocks, input tokens, distinct blocks, cold blocks),
the ceilings (an infinite cache hits every non-cold block of the leading run) and which
requests have reuse at all are exact, not estimated. The pass also checks that the ids are
*prefix-chained* (every id always has the same parent, :func:`stackdist.traces.sampled.is_chained`);
the estimates below need it, and a trace that is not chained is refused (exit 1).

**Why a block's depth can be estimated.** In a chained trace depths never decrease along a
request (proof in :mod:`stackdist.traces.sampled`), so a block's effective depth is its own
depth, its request's hit prefix at capacity ``C`` is the blocks of depth at most ``C``, and the
prefix token hits at ``C`` are ``sum(tokens(b) [depth(b) <= C])`` over the counted blocks; a
request's coverage need (:func:`~.prefix_curve.coverage_needs`) is the depth of its ``k``-th
block, ``k = ceil(H x target)``, ``H`` its non-cold blocks (cold blocks form a suffix).

Let block ``x = b_j`` (position ``j`` of request ``r``, at trace position ``i``) have been seen
before, last at position ``p`` (per-access) or last committed at commit index ``c_p`` (engine:
each request commits its blocks tail first, so request ``r'`` at ``[lo', hi')`` gives position
``t`` commit index ``lo' + hi' - 1 - t``). Its depth is ``|D|``, the distinct keys accessed in
``[p, i)`` (per-access) or last committed in ``[c_p, lo)`` (engine). *Claim:* ``D`` contains
the ``j + 1`` keys ``K = {b_0, ..., b_j}``. *Proof.* ``x`` itself is at ``p`` (or ``c_p``).
Per-access: ``b_0 .. b_{j-1}`` are accessed at ``lo .. i - 1`` and ``p < lo`` (chained ids do
not repeat in a request). Engine: in the request that last committed ``x``, its parent was
committed right after it (tail first), and so on up to ``b_0``; later commits only raise them;
all before ``lo``. So ``|D| = (j + 1) + |O|`` with ``O = D \\ K``.

*Estimator.* A key is sampled iff its seeded hash is at or under the threshold, with probability
``R`` independently of the trace, so ``|S ∩ O|`` (``S`` the sampled keys) has mean ``R |O|`` and
``depth^ = (j + 1) + |S ∩ O| / R`` is unbiased. ``|S ∩ D|`` is read from the sampled stream
alone: the sampled keys whose last access (commit) so far falls in the interval, one Fenwick
query over the sampled accesses' positions (commit order); ``|S ∩ K|`` is the number of sampled
blocks among ``b_0 .. b_j``. For a sampled ``x`` this is the SHARDS depth with the known part
made exact; for coverage ``x`` is the request's ``k``-th block, sampled or not (its ``p`` comes
from the exact pass). At ``R = 1`` every estimate is the exact depth (tested).

*The curves.* The prefix token hits at ``C`` are estimated by the sampled non-cold blocks of
depth estimate at most ``C``, each weighing ``tokens / R`` (and ``1 / R`` block), plus the
SHARDS_adj correction (Waldspurger et al., FAST'15) against the *exact* ceiling: the
difference between the exact non-cold tokens (blocks) and the sample's weight is added at the
smallest estimated depth, so the curve ends exactly at the exact ceiling. Estimates are
clipped to ``[0, ceiling]``. Coverage quantiles are order statistics of the per-request
estimates over the exact set of requests with reuse.

Resolution: a depth estimate moves in steps of ``1 / R`` blocks beyond the known part, so
capacities under about ``1 / R`` blocks carry that error; the error bar over the seeds shows it.

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2, 3], [1, 2, 4], [1, 5], [1, 2, 3]], block_size=4)
>>> engine = sampled_curves(t, np.ones(4, bool), 1.0, [0], 1.0)[0][0]["engine"]
>>> engine.coverage_needs(1.0).tolist(), engine.ceiling_token_hits
([0, 2, 1, 5], 24)
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.engine.histogram import exact_count, exact_fraction
from stackdist.engine.kernels import COLD, njit
from stackdist.engine.keys import dense_keys
from stackdist.engine.scale.hashed_stack import multi_filter
from stackdist.engine.scale.sampling import HashFilter
from stackdist.engine.scale.thresholds import (
    rate_of_threshold,
    seed_mix,
)
from stackdist.errors import TraceFormatError
from stackdist.traces import RequestTrace

from .prefix_curve import PrefixCurve, need_quantiles

__all__ = ["NotChainedError", "SampledPrefixCurve", "TraceCounts", "sampled_curves"]

SEMANTICS = ("engine", "per-access")


class NotChainedError(TraceFormatError):
    """The block ids are not prefix-chained: a sampled plan cannot be estimated (exit 1)."""


@dataclass(frozen=True)
class TraceCounts:
    """What the exact pass counts over the whole trace (and its counted requests)."""

    distinct_blocks: int
    sampled_keys: list[int]  # distinct sampled blocks, per seed
    sampled_blocks: list[int]  # sampled block accesses of the counted requests, per seed


class SampledPrefixCurve:
    """One seed's estimate of one semantics' :class:`~.prefix_curve.PrefixCurve` (the same
    questions, the same units). Totals and ceilings are exact; capacities are estimates."""

    def __init__(self, semantics: str, block_size: int, rate: float, values: np.ndarray, cum_tokens: np.ndarray,
                 cum_blocks: np.ndarray, exact: dict[str, int], needs: np.ndarray, reused: np.ndarray,
                 coverage_target: float) -> None:
        self.semantics, self.block_size, self.rate = semantics, block_size, rate
        self._values, self._tokens, self._blocks = values, cum_tokens, cum_blocks
        self.n_requests, self.n_blocks = exact["requests"], exact["blocks"]
        self.cold_blocks, self.input_tokens = exact["cold_blocks"], exact["input_tokens"]
        self.ceiling_token_hits, self.ceiling_block_hits = exact["ceiling_tokens"], exact["ceiling_blocks"]
        self._needs, self._reused, self._target = needs, reused, coverage_target
        self._needs.flags.writeable = False

    def _at(self, cum: np.ndarray, capacity_blocks: Any) -> Any:
        caps = np.asarray(capacity_blocks, np.int64)
        i = np.searchsorted(self._values, caps, side="right") - 1
        got = np.where(i >= 0, cum[np.maximum(i, 0)] if cum.size else 0.0, 0.0)
        return float(got) if np.ndim(got) == 0 else got

    def block_hits_at(self, capacity_blocks: Any) -> Any:
        """Estimated block hits (blocks in the hit prefix; chained: the same for both semantics). O(log n)."""
        return self._at(self._blocks, capacity_blocks)

    def prefix_token_hits_at(self, capacity_blocks: Any) -> Any:
        """Estimated tokens in the requests' hit prefixes. O(log n) per capacity."""
        return self._at(self._tokens, capacity_blocks)

    def block_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Estimated block hits / blocks (exact). O(log n) per capacity."""
        return self.block_hits_at(capacity_blocks) / max(self.n_blocks, 1)

    def reuse_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Estimated block hits / blocks seen before (exact). O(log n) per capacity."""
        return self.block_hits_at(capacity_blocks) / max(self.n_blocks - self.cold_blocks, 1)

    def prefix_token_hit_rate_at(self, capacity_blocks: Any) -> Any:
        """Estimated prefix hit tokens / input tokens (exact). O(log n) per capacity."""
        return self.prefix_token_hits_at(capacity_blocks) / max(self.input_tokens, 1)

    @property
    def ceiling_token_hit_rate(self) -> float:
        """The exact ceiling (an infinite cache). O(1)."""
        return self.ceiling_token_hits / max(self.input_tokens, 1)

    @property
    def saturation_blocks(self) -> int:
        """The estimated smallest capacity reaching the ceiling (the largest depth estimate). O(1)."""
        return int(self._values[-1]) if self._values.size else 0

    def min_capacity_for(self, *, token_hit_rate: float | None = None, fraction_of_ceiling: float | None = None) -> int | None:
        """The smallest capacity whose estimated prefix token hits reach the target (an exact
        count of tokens, as :meth:`PrefixCurve.min_capacity_for`); None when the exact ceiling
        is below it. O(log n)."""
        if (token_hit_rate is None) == (fraction_of_ceiling is None):
            raise ValueError("give exactly one of token_hit_rate or fraction_of_ceiling.")
        if token_hit_rate is not None:
            need = exact_count(token_hit_rate, self.input_tokens, "token_hit_rate")
        else:
            need = exact_count(float(fraction_of_ceiling), self.ceiling_token_hits, "fraction_of_ceiling")  # type: ignore[arg-type]
        if need <= 0:
            return 0
        if need > self.ceiling_token_hits:
            return None
        i = int(np.searchsorted(self._tokens, need - 1e-9 * max(need, 1), side="left"))
        return int(self._values[min(i, self._values.size - 1)]) if self._values.size else None

    def coverage_needs(self, target: float = 1.0) -> np.ndarray:
        """Per counted request, the estimated coverage need (0 without reuse, which is exact). O(1)."""
        if target != self._target:
            raise ValueError(f"this estimate is of coverage target {self._target}; got {target}.")
        return self._needs

    def coverage_capacity(self, target: float = 1.0, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99, 0.999),
                          reusable_only: bool = False) -> dict[str, int]:
        """Quantiles of the estimated needs over the counted requests (with ``reusable_only``,
        over the requests with reuse: an exact set). O(requests log requests)."""
        needs = self.coverage_needs(target)
        return need_quantiles(needs[self._reused] if reusable_only else needs, quantiles)

    def summary(self) -> dict[str, Any]:
        """Totals and ceilings (exact) and the saturation (estimated), as :meth:`PrefixCurve.summary`
        (the same fields, read from this curve's attributes of the same names). O(1)."""
        return PrefixCurve.summary(self)  # type: ignore[arg-type]


def _limit(trace: RequestTrace, rate: float | None, size: int | None, seed: int) -> int:
    """The inclusive hash threshold of a seed: the one sampling filter's (:class:`HashFilter`)."""
    return HashFilter.of(trace.block_ids, rate, size, seed).limit


def sampled_curves(trace: RequestTrace, counted: np.ndarray, rate: float | None, seeds: Sequence[int],
                   coverage_target: float, size: int | None = None
                   ) -> tuple[list[dict[str, SampledPrefixCurve]], list[float], TraceCounts]:
    """Per seed, the estimated curve of each semantics (``engine``, ``per-access``), the seeds'
    rates and the exact counts. ``counted``: the requests whose hits count. Raises
    :class:`NotChainedError` when the ids are not prefix-chained. O(blocks) for the exact pass
    and the hashing, O(S log S) per seed for its S sampled blocks."""
    limits = [_limit(trace, rate, size, s) for s in seeds]
    salts = np.array([seed_mix(s) for s in seeds], np.uint64)
    values = trace.block_ids.astype(np.int64, copy=False).view(np.uint64) if trace.block_ids.dtype.kind == "i" \
        else trace.block_ids.astype(np.uint64, copy=False)
    cuts = np.array(limits, np.uint64)
    half = values.shape[0] // 2
    with ThreadPoolExecutor(2) as pool:  # the compiled passes release the GIL: halves (then seeds) on two threads
        first = pool.submit(multi_filter, values[:half], salts, cuts)
        idx_b, bits_b = multi_filter(values[half:], salts, cuts)
        idx_a, bits_a = first.result()
    idx, bits = np.concatenate([idx_a, idx_b + half]), np.concatenate([bits_a, bits_b])
    dense = dense_keys(trace.block_ids)
    frac = exact_fraction(coverage_target, "coverage target")
    chained, distinct, prev, reusable, reused_tokens, k, q_prev = _exact_pass(
        dense.ids, dense.n_keys, trace.offsets, trace.block_tokens, idx, frac.numerator, frac.denominator)
    if not chained:
        raise NotChainedError(trace.source, None, "the block ids are not prefix-chained (a block id with two parents), "
                              "so a block sample cannot estimate the prefix metrics; drop sampling "
                              "for the exact plan")
    blocks_per = np.diff(trace.offsets)
    n_counted = int(blocks_per[counted].sum())
    cold_counted = n_counted - int(reusable[counted].sum())
    exact = {"requests": int(counted.sum()), "blocks": n_counted, "cold_blocks": cold_counted,
             "input_tokens": int(trace.input_length[counted].sum()), "ceiling_tokens": int(reused_tokens[counted].sum()),
             "ceiling_blocks": int(reusable[counted].sum())}
    rates = [float(rate_of_threshold(limit)) for limit in limits]
    mine = [(bits >> j) & 1 == 1 for j in range(len(limits))]
    samples = [(idx[m], prev[m]) for m in mine]
    starts = [np.searchsorted(pos, trace.offsets, side="left") for pos, _ in samples]
    in_counted = [counted[np.searchsorted(trace.offsets, pos, side="right") - 1] for pos, _ in samples]
    jobs = [(j, semantics) for j in range(len(limits)) for semantics in SEMANTICS]
    reused_counted = (reusable > 0)[counted]

    def job(item: tuple[int, str]) -> SampledPrefixCurve:  # one seed and semantics, curve included (both threads)
        j, semantics = item
        pos, prv = samples[j]
        depth, need = _sampled_depths(pos, prv, trace.offsets, starts[j], q_prev, k, semantics == "engine", rates[j])
        finite = (depth != COLD) & in_counted[j]
        return _curve(semantics, trace.block_size, rates[j], depth[finite], trace.block_tokens[pos[finite]], exact,
                      need[counted], reused_counted, coverage_target)

    with ThreadPoolExecutor(2) as pool:
        curves = list(pool.map(job, jobs))
    out: list[dict[str, SampledPrefixCurve]] = [{} for _ in limits]
    for (j, semantics), curve in zip(jobs, curves, strict=True):
        out[j][semantics] = curve
    kept_keys = [int(np.count_nonzero(prv < 0)) for _, prv in samples]
    kept_blocks = [int(c.sum()) for c in in_counted]
    return out, rates, TraceCounts(int(distinct), kept_keys, kept_blocks)


def _curve(semantics: str, block_size: int, rate: float, depth: np.ndarray, tokens: np.ndarray, exact: dict[str, int],
           needs: np.ndarray, reused: np.ndarray, target: float) -> SampledPrefixCurve:
    """Cumulative estimated hits over the sorted depth estimates, with SHARDS_adj to the exact ceilings."""
    order = np.argsort(depth, kind="stable")
    ordered = depth[order]
    start = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if ordered.size else np.zeros(0, np.int64)
    values = ordered[start]  # np.unique(ordered, return_index=True) without sorting it again
    cum_t = np.cumsum(tokens[order].astype(np.float64) / rate)
    cum_b = np.arange(1, depth.size + 1, dtype=np.float64) / rate
    last = np.append(start[1:], depth.size) - 1
    cum_t, cum_b = (cum_t[last], cum_b[last]) if depth.size else (cum_t, cum_b)
    if values.size:  # SHARDS_adj: the missing (or extra) weight hits at the smallest depth
        cum_t = np.clip(cum_t + (exact["ceiling_tokens"] - cum_t[-1]), 0, exact["ceiling_tokens"])
        cum_b = np.clip(cum_b + (exact["ceiling_blocks"] - cum_b[-1]), 0, exact["ceiling_blocks"])
    return SampledPrefixCurve(semantics, block_size, rate, values.astype(np.int64), cum_t, cum_b, exact,
                              needs.astype(np.int64), reused, target)


@njit(cache=True, nogil=True)
def _exact_pass(ids, n_keys, offsets, block_tokens, sampled, num, den):
    """One pass over the trace: whether the ids are chained (every key one parent, no key twice
    in a request, the seen blocks a leading run), the distinct blocks, each sampled access's
    previous position (-1: cold), each request's non-cold blocks ``H`` (and their tokens) and ``k = ceil(H x
    num / den)``, and the previous position of its ``k``-th block (-1 when ``k`` is 0). O(blocks)."""
    n_req = offsets.shape[0] - 1
    state = np.full((n_keys, 2), -2, np.int64)  # [last position, parent] per key
    prev = np.empty(sampled.shape[0], np.int64)
    reusable = np.zeros(n_req, np.int64)
    reused_tokens = np.zeros(n_req, np.int64)
    ks = np.zeros(n_req, np.int64)
    q_prev = np.full(n_req, -1, np.int64)
    distinct = 0
    chained = True
    s = 0
    for r in range(n_req):
        lo, hi = offsets[r], offsets[r + 1]
        h = 0
        for i in range(lo, hi):  # the request against the state before it
            key = ids[i]
            parent = ids[i - 1] if i > lo else -1
            if state[key, 0] == -2:
                continue
            if state[key, 1] != parent or h != i - lo:
                chained = False
            h += 1
            reused_tokens[r] += block_tokens[i]
        k = (h * num + den - 1) // den
        reusable[r], ks[r] = h, k
        if k > 0:
            q_prev[r] = state[ids[lo + k - 1], 0]
        for i in range(lo, hi):
            key = ids[i]
            last = state[key, 0]
            if last == -2:
                distinct += 1
                state[key, 1] = ids[i - 1] if i > lo else -1
            elif last >= lo:
                chained = False  # twice in one request
            if s < sampled.shape[0] and sampled[s] == i:
                prev[s] = last if last >= 0 else -1
                s += 1
            state[key, 0] = i
    return chained, distinct, prev, reusable, reused_tokens, ks, q_prev


@njit(cache=True, nogil=True)
def _sampled_depths(pos, prv, offsets, ev_start, q_prev, ks, engine, rate):
    """Depth estimates of one seed's sampled accesses (COLD when cold) and every request's
    coverage-need estimate, per the module's estimator: a Fenwick tree over the sampled
    accesses (in position order, or commit order for the engine) marks each sampled key's
    last access. O(S log S + requests log S)."""
    n_req = offsets.shape[0] - 1
    n = pos.shape[0]
    tree = np.zeros(n + 1, np.int64)
    depth = np.empty(n, np.int64)
    need = np.zeros(n_req, np.int64)
    for r in range(n_req):
        lo = offsets[r]
        ea, eb = ev_start[r], ev_start[r + 1]
        k = ks[r]
        q = lo + k - 1
        if engine:
            for e in range(ea, eb):
                p = prv[e]
                if p < 0:
                    depth[e] = COLD
                    continue
                a = _commit_rank(pos, offsets, ev_start, p)
                count = _fen_prefix(tree, ea) - _fen_prefix(tree, a)
                depth[e] = _estimate(pos[e] - lo + 1, count - (e - ea + 1), rate)
            if k > 0:
                a = _commit_rank(pos, offsets, ev_start, q_prev[r])
                count = _fen_prefix(tree, ea) - _fen_prefix(tree, a)
                m = np.searchsorted(pos[ea:eb], q, side="right")
                need[r] = _estimate(k, count - m, rate)
            for e in range(ea, eb):
                if prv[e] >= 0:
                    _fen_add(tree, _commit_rank(pos, offsets, ev_start, prv[e]), -1)
                _fen_add(tree, ea + eb - 1 - e, 1)
        else:
            done = k <= 0
            for e in range(ea, eb + 1):
                if not done and (e == eb or pos[e] >= q):
                    a = np.searchsorted(pos, q_prev[r], side="left")
                    count = _fen_prefix(tree, e) - _fen_prefix(tree, a)
                    m = e - ea + (1 if e < eb and pos[e] == q else 0)
                    need[r] = _estimate(k, count - m, rate)
                    done = True
                if e == eb:
                    break
                p = prv[e]
                if p < 0:
                    depth[e] = COLD
                else:
                    a = np.searchsorted(pos, p, side="left")
                    count = _fen_prefix(tree, e) - _fen_prefix(tree, a)
                    depth[e] = _estimate(pos[e] - lo + 1, count - (e - ea + 1), rate)
                    _fen_add(tree, a, -1)
                _fen_add(tree, e, 1)
    return depth, need


@njit(cache=True, nogil=True)
def _estimate(known, sampled_others, rate):
    """``known + sampled_others / rate`` rounded up to a whole block."""
    return known + np.int64(np.ceil(sampled_others / rate - 1e-9))


@njit(cache=True, nogil=True)
def _commit_rank(pos, offsets, ev_start, p):
    """How many sampled accesses are committed before the access at position ``p`` (engine
    order: requests in order, each tail first)."""
    r = np.searchsorted(offsets, p, side="right") - 1
    after = np.searchsorted(pos, p, side="right")  # the first sampled access past p
    return ev_start[r] + (ev_start[r + 1] - after)


@njit(cache=True, nogil=True)
def _fen_add(tree, i, v):
    i += 1
    while i < tree.shape[0]:
        tree[i] += v
        i += i & (-i)


@njit(cache=True, nogil=True)
def _fen_prefix(tree, i):
    """Sum of the first ``i`` entries."""
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & (-i)
    return s
