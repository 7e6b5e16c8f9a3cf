"""SHARDS sampling of a request trace's blocks (a sub-trace to plan, capacities then scaled by 1/R).

Why sampling single blocks is valid for prefix-chained traces, under both semantics of
:mod:`stackdist.serving.semantics`. In a chained trace block ``b_j`` always follows its parent
``b_{j-1}`` in the same request (equal ids mean equal whole prefixes).

*Claim.* Within a request, depths never decrease along the chain, so a block's effective depth
(the running maximum the prefix hit needs) is its own depth.

*Proof, per-access.* Let ``b_{j-1}, b_j`` be consecutive in a request at positions ``i - 1, i``.
``b_j``'s previous access, at ``p``, was preceded by ``b_{j-1}`` at ``p - 1``, so ``b_{j-1}``'s
previous access is at ``p - 1`` or later. The distinct keys since then, plus ``b_{j-1}``, are
among the distinct keys in ``(p, i)`` plus ``b_j``, which with ``b_j`` is ``b_j``'s distance set
(``b_{j-1}`` itself is at ``i - 1``, inside it). So ``depth(b_{j-1}) <= depth(b_j)``; a cold
``b_{j-1}`` forces a cold ``b_j``. *Engine.* A request holding ``b_j`` holds ``b_{j-1}`` and commits
it right after ``b_j`` (tail first), so from their first commit on ``b_{j-1}`` lies above ``b_j`` in
the stack; a request holding only ``b_{j-1}`` moves it further up. So at every arrival
``depth(b_{j-1}) < depth(b_j)``.

Hence every prefix metric is a sum over blocks of a per-block function of the block's own
depth (its tokens if its depth is at most ``C``), which is what spatial sampling estimates: the
sampled stream's stack is the full stack with the unsampled blocks deleted (:mod:`stackdist.engine.
sampling`), under engine semantics too, since that stack is ordered by last commit. A block's
sampled depth ``d`` stands for ``d / R``. Within the sampled requests the running maximum over the
sampled blocks is again the own depth (a monotone sequence stays monotone when thinned), so the
ordinary plan of the sub-trace, with capacities divided by ``R``, is the estimate.

The correction (SHARDS_adj, Waldspurger et al., FAST'15), applied by the planner's sampled path
(:mod:`stackdist.planning.sampled_curve`, which also makes the known prefix exact): the sampled blocks' tokens should be ``R`` times
the trace's block tokens ``B``; the difference ``B - B_sampled / R`` (a hot prefix block, shared
by most requests, that was or was not sampled) is added as hits at the smallest sampled depth.
Valid for the same reason as above: the prefix token hits at ``C`` are the per-block sum
``sum(tokens(b) [depth(b) <= C])``, a size-weighted LRU curve of the block stream, and
SHARDS_adj is the paper's correction of exactly that estimate (weights are the tokens); the
denominator, the trace's input tokens, is known exactly.

Not valid, so refused or flagged: the engines' own models (vllm, sglang: pool sizes and eviction
do not thin), and traces whose ids are not chained (the check below reports ``"chained"``);
coverage quantiles (a request's deepest block over a thinned request) are biased low.

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2, 3], [1, 2, 4]], block_size=4)
>>> sub, rate = sample_request_trace(t, rate=1.0)
>>> sub.n_blocks, rate, is_chained(t)
(6, 1.0, True)
"""

from __future__ import annotations

import copy

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.engine.keys import dense_keys
from stackdist.engine.scale.sampling import HashFilter, key_hashes, rate_of_threshold

from .requests import RequestTrace

__all__ = ["is_chained", "sample_request_trace"]


def sample_request_trace(trace: RequestTrace, rate: float | None = None, max_keys: int | None = None,
                         seed: int = 0) -> tuple[RequestTrace, float]:
    """The sub-trace of the sampled blocks (every request kept, with its sampled blocks in order)
    and the sampling rate. ``max_keys``: the rate at which at most that many distinct blocks
    are kept (what fixed-size SHARDS ends at). A request's prompt tokens are its sampled blocks'
    tokens, plus its uncovered tail when its last block is sampled. O(blocks).

    >>> t = RequestTrace.from_blocks([[1, 2, 3], [1, 2, 4]], block_size=4)
    >>> sub, rate = sample_request_trace(t, max_keys=2, seed=1)
    >>> len(set(sub.block_ids.tolist())) <= 2, 0 < rate < 1
    (True, True)
    """
    hashes = key_hashes(trace.block_ids, seed)
    limit = HashFilter.of(trace.block_ids, rate, max_keys, seed, hashes).limit
    keep, offsets, sampled_tokens, covered, last_kept = _kept_per_request(hashes, np.uint64(limit), trace.offsets,
                                                                          trace.block_tokens)
    has = np.diff(trace.offsets) > 0
    inputs = sampled_tokens + np.where(last_kept | ~has, trace.input_length - covered, 0)
    sub = copy.copy(trace)
    sub.block_ids, sub.offsets, sub.block_tokens, sub.input_length = trace.block_ids[keep], offsets, \
        trace.block_tokens[keep], inputs.astype(np.int64)
    sub._check()
    return sub, float(rate_of_threshold(limit))


@njit(cache=True, nogil=True)
def _kept_per_request(hashes, limit, offsets, block_tokens):
    """One pass over the blocks: which are kept (hash <= limit), the kept blocks' offsets per
    request, each request's kept tokens and all its blocks' tokens, and whether its last block
    is kept. O(blocks)."""
    n_requests = offsets.shape[0] - 1
    keep = np.empty(hashes.shape[0], np.bool_)
    kept_offsets = np.zeros(n_requests + 1, np.int64)
    kept_tokens = np.zeros(n_requests, np.int64)
    covered = np.zeros(n_requests, np.int64)
    last_kept = np.zeros(n_requests, np.bool_)
    k = 0
    for r in range(n_requests):
        for i in range(offsets[r], offsets[r + 1]):
            kept = hashes[i] <= limit
            keep[i] = kept
            covered[r] += block_tokens[i]
            if kept:
                k += 1
                kept_tokens[r] += block_tokens[i]
        last_kept[r] = offsets[r + 1] > offsets[r] and keep[offsets[r + 1] - 1]
        kept_offsets[r + 1] = k
    return keep, kept_offsets, kept_tokens, covered, last_kept


def is_chained(trace: RequestTrace) -> bool:
    """True when every block id always has the same parent (the block before it in its request,
    or none at a request's head): the condition of the module's claim. O(blocks) expected.

    >>> is_chained(RequestTrace.from_blocks([[1, 2], [3, 2]]))
    False
    """
    if trace.n_blocks == 0:
        return True
    dense = dense_keys(trace.block_ids)
    head = np.zeros(trace.n_blocks, np.bool_)
    head[trace.offsets[:-1][np.diff(trace.offsets) > 0]] = True
    return bool(_parents_agree(dense.ids, head, dense.n_keys))


@njit(cache=True, nogil=True)
def _parents_agree(ids, head, n_keys):
    """True when each dense id has one parent (the id before it, or -1 at a request's head). O(n)."""
    parent = np.full(n_keys, -2, np.int64)
    for i in range(ids.shape[0]):
        p = -1 if head[i] else ids[i - 1]
        d = ids[i]
        if parent[d] == -2:
            parent[d] = p
        elif parent[d] != p:
            return False
    return True
