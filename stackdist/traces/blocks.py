"""Prefix-chained block hashing, re-blocking to finer pages, and dense id remapping.

A prefix cache (vLLM, SGLang, Mooncake) identifies a KV block by a hash of the block's tokens
*and its parent block's hash*, so equal block ids mean equal whole prefixes. This module makes
such ids from token ids (:func:`chain_hashes`), splits coarse blocks into finer pages while
keeping the prefix relation (:func:`reblock`), and maps any ids to ``0..n-1`` for the engine
(:func:`dense_ids`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from stackdist.engine import kernels
from stackdist.errors import UsageError

from .lines import helper_thread
from .requests import RequestTrace

ROOT_HASH = 0
"""The parent hash of a sequence's first block."""

_CHAIN_PERSON = b"stackdist-chain"  # blake2b personalisation: separates our hashes from others
_PAGE_PERSON = b"stackdist-page"
_INT64_MAX = 2**63 - 1


def _digest_u64(data: bytes, person: bytes) -> int:
    """blake2b-64 of ``data`` as an unsigned little-endian integer."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "little")


def chain_hashes(
    token_ids: Sequence[int] | np.ndarray,
    block_size: int,
    partial_last_block: bool = False,
    parent: int = ROOT_HASH,
) -> np.ndarray:
    """Prefix-chained block hashes of a token sequence, as uint64 (vLLM-style).

    ``h[i] = blake2b-64(parent_i as 8 little-endian bytes || block_i tokens as little-endian
    int64)`` with ``parent_0 = parent`` (default :data:`ROOT_HASH` = 0) and ``parent_i =
    h[i-1]``; blake2b is personalised with ``b"stackdist-chain"`` and the 8-byte digest is read
    little-endian. This is deterministic across processes and machines (unlike Python's salted
    ``hash()``), and a block's hash depends on every preceding token: two sequences share their
    first ``k`` hashes iff they share their first ``k * block_size`` tokens (up to a 2**-64
    chance of collision per pair). Only full blocks are hashed unless ``partial_last_block``,
    which adds the trailing partial block (its length is part of the hashed bytes).

    Complexity: O(len(token_ids)).

    >>> a = chain_hashes([1, 2, 3, 4, 5], 2)
    >>> b = chain_hashes([1, 2, 3, 9, 5], 2)
    >>> len(a), bool(a[0] == b[0]), bool(a[1] == b[1])
    (2, True, False)
    >>> len(chain_hashes([1, 2, 3, 4, 5], 2, partial_last_block=True))
    3
    """
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise UsageError(f"block_size must be a positive integer, got {block_size!r}")
    if not 0 <= int(parent) < 2**64:
        raise UsageError(f"parent must be a hash in 0..2**64-1, got {parent!r}")
    tokens = np.ascontiguousarray(token_ids, dtype="<i8")
    if tokens.ndim != 1:
        raise UsageError("token_ids must be a 1-D sequence of integers")
    n_tokens = int(tokens.shape[0])
    n_blocks = n_tokens // block_size + (1 if partial_last_block and n_tokens % block_size else 0)
    data = tokens.tobytes()
    stride = 8 * int(block_size)
    out = np.empty(n_blocks, dtype=np.uint64)
    h = int(parent)
    for i in range(n_blocks):
        h = _digest_u64(h.to_bytes(8, "little") + data[i * stride : (i + 1) * stride], _CHAIN_PERSON)
        out[i] = h
    return out


def dense_ids(ids: np.ndarray | Sequence[Any]) -> tuple[np.ndarray, int]:
    """Map arbitrary ids to their rank ``0..n_distinct-1`` among the distinct ids (re-blocking's
    collision-free fallback ids; the engine's own mapping is :func:`stackdist.engine.dense_keys`).

    Equal ids get equal dense ids and different ids different ones; dense ids follow the
    sorted order of the distinct ids. Works for integer arrays (any width, incl. uint64) and
    for string (object) arrays. Complexity: O(n log n); numeric ids use one argsort (about 4x
    faster than ``np.unique(..., return_inverse=True)`` on 9 M ids; ``np.unique`` without
    ``return_inverse`` is slower still on numpy 2.4 for such ids).

    >>> dense, n = dense_ids(np.array([2**64 - 1, 7, 2**64 - 1], dtype=np.uint64))
    >>> dense.tolist(), n
    ([1, 0, 1], 2)
    """
    array = np.asarray(ids)
    if array.ndim != 1:
        raise UsageError(f"ids must be 1-D, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    if array.dtype.kind in "iub":
        order = np.argsort(array, kind="stable")
        ordered = array[order]
        starts_new = np.empty(ordered.shape[0], dtype=bool)
        starts_new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=starts_new[1:])
        rank = np.cumsum(starts_new, dtype=np.int64) - 1
        dense = np.empty(array.shape[0], dtype=np.int64)
        dense[order] = rank
        return dense, int(rank[-1]) + 1
    try:
        distinct, inverse = np.unique(array, return_inverse=True)
    except TypeError:
        raise UsageError("ids must be mutually comparable: all integers or all strings") from None
    return inverse.reshape(-1).astype(np.int64, copy=False), int(distinct.shape[0])


PARALLEL_PAGES = 1 << 22
"""From this many pages, :func:`reblock` writes the two halves of the coarse blocks on two threads."""


def reblock(trace: RequestTrace, new_block_size: int) -> RequestTrace:
    """Split every block of ``trace`` into pages of ``new_block_size`` tokens, keeping the chain.

    Coarse block ``b`` holding ``t`` tokens becomes ``ceil(t / new_block_size)`` pages; page
    ``j`` holds ``new_block_size`` tokens except the last page of a partial block, which holds
    the remainder, so page tokens sum to block tokens. ``new_block_size`` must divide
    ``trace.block_size`` (``k = block_size // new_block_size`` pages per full block).

    Page ids are derived from (coarse id, j) only, so equal coarse ids give equal page ids and
    different coarse ids give different page ids: two requests share their first ``k`` coarse
    blocks iff they share the corresponding pages. Page ``j`` of block id ``b`` gets

    - ``b * k + j`` (int64) when every id is non-negative and ``max_id * k + k - 1`` fits in
      int64 -- collision-free by construction (the Mooncake and Qwen traces' dense ids);
    - otherwise (e.g. uint64 token hashes) ``s(b) XOR (j * 0x9E3779B97F4A7C15 mod 2**64)``
      (uint64), with ``s(b)`` the blake2b-64 of ``b``'s 8 little-endian bytes (personalised
      ``b"stackdist-page"``), computed once per distinct coarse id. Injectivity over the
      trace's distinct (b, j) pairs is then verified; on a collision (chance about
      n**2 / 2**65) the ids fall back to ``rank(b) * k + j`` over the trace's sorted distinct
      ids, which is collision-free but depends on the trace's id set.

    Like Mooncake's own ids, a partial tail block keeps an identity of its own: its pages
    derive from its coarse id, so they never match pages of a different coarse block even when
    the underlying tokens agree. Sharing finer than the coarse blocks cannot be recovered, so
    fine-grained hit rates from a re-blocked trace are conservative for partial tails.

    Complexity: O(pages) vectorised (plus O(distinct ids) hashes on the fallback path).

    >>> t = reblock(RequestTrace.from_blocks([[3, 4]], block_size=32, last_tokens=[20]), 16)
    >>> t.block_ids.tolist(), t.block_tokens.tolist()
    ([6, 7, 8, 9], [16, 16, 16, 4])
    """
    if isinstance(new_block_size, bool) or not isinstance(new_block_size, (int, np.integer)) or new_block_size < 1:
        raise UsageError(f"new_block_size must be a positive integer, got {new_block_size!r}")
    new_block_size = int(new_block_size)
    if trace.block_size % new_block_size:
        raise UsageError(
            f"new_block_size must divide the trace's block_size {trace.block_size}, got {new_block_size}"
        )
    k = trace.block_size // new_block_size
    tokens = trace.block_tokens
    pages = (tokens + (new_block_size - 1)) // new_block_size
    page_end = np.cumsum(pages)
    n_pages = int(page_end[-1]) if page_end.size else 0
    page_offsets = np.concatenate(([0], page_end))[trace.offsets]
    ids = trace.block_ids
    if ids.size and int(ids.min()) >= 0 and int(ids.max()) * k + (k - 1) <= _INT64_MAX:
        # The common case (dense non-negative ids): one compiled pass writes ids and tokens.
        new_ids = np.empty(n_pages, np.int64)
        page_tokens = np.empty(n_pages, np.int64)
        coarse_ids = ids.astype(np.int64, copy=False)
        mid = trace.n_blocks // 2 if n_pages >= PARALLEL_PAGES else 0  # a large trace: two halves at once (nogil)
        at = int(page_end[mid - 1]) if mid else 0
        second = helper_thread().submit(kernels.split_runs, coarse_ids[mid:], tokens[mid:], new_block_size, k,
                                        new_ids[at:], page_tokens[at:]) if mid else None
        kernels.split_runs(coarse_ids[:mid] if mid else coarse_ids, tokens[:mid] if mid else tokens, new_block_size, k,
                           new_ids[:at] if mid else new_ids, page_tokens[:at] if mid else page_tokens)
        if second is not None:
            second.result()
    else:
        coarse = np.repeat(np.arange(trace.n_blocks, dtype=np.int64), pages)
        j = np.arange(n_pages, dtype=np.int64) - np.repeat(page_end - pages, pages)
        page_tokens = np.full(n_pages, new_block_size, dtype=np.int64)
        page_tokens[page_end - 1] = tokens - new_block_size * (pages - 1)
        new_ids = _page_ids(ids, coarse, j, k)
    # Valid by construction (each coarse block's pages hold its tokens, only its last page
    # partial; the offsets move with them): the trace's O(n) invariant check is not run again.
    pages_trace = copy.copy(trace)
    pages_trace.block_ids, pages_trace.offsets, pages_trace.block_tokens, pages_trace.block_size = \
        new_ids, page_offsets, page_tokens, new_block_size
    kv = getattr(trace, "kv_bytes_per_block", None)
    if kv is not None:  # the log's bytes per block, split over the pages
        if kv % k:
            raise UsageError(f"new_block_size {new_block_size}: the trace's {kv:,} KV bytes per block do not split into "
                             f"{k} equal pages")
        pages_trace.kv_bytes_per_block = kv // k
    return pages_trace


def _page_ids(block_ids: np.ndarray, coarse: np.ndarray, j: np.ndarray, k: int) -> np.ndarray:
    """Ids of pages (coarse[p], j[p]) derived from block_ids; see :func:`reblock`."""
    if block_ids.size == 0:
        return np.zeros(0, dtype=block_ids.dtype)
    lo, hi = int(block_ids.min()), int(block_ids.max())
    if lo >= 0 and hi * k + (k - 1) <= _INT64_MAX:
        return block_ids.astype(np.int64)[coarse] * k + j
    rank, n_distinct = dense_ids(block_ids)
    distinct = np.empty(n_distinct, dtype=block_ids.dtype)
    distinct[rank] = block_ids
    seeds = np.array(
        [_digest_u64(b.to_bytes(8, "little", signed=b < 0), _PAGE_PERSON) for b in distinct.tolist()],
        dtype=np.uint64,
    )
    mix = j.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    page_rank = rank[coarse]
    hashed = seeds[page_rank] ^ mix
    pair_key = page_rank * k + j  # collision-free name of the pair (rank < n_blocks, small)
    if dense_ids(pair_key)[1] == dense_ids(hashed)[1]:
        return hashed
    return pair_key
