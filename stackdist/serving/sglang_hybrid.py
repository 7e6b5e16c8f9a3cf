"""SGLang 0.5.23's hybrid (full attention + sliding window) prefix cache, serial schedule, at pools
where SGLang evicts nothing: exactly; other pools are refused.

SGLang serves a model with sliding-window (SWA) layers from one radix tree with a FULL and an SWA
component (``mem_cache/registry.py:149-190``; ``mem_cache/unified_radix_cache.py``,
``mem_cache/unified_cache/components/swa.py``) over two pools: the full KV pool of ``N`` pages
of 16 tokens and the SWA pool of ``floor(16 N * ratio / 16) * 16`` tokens
(``model_executor/pool_configurator.py:876-879``, ratio ``--swa-full-tokens-ratio``, default 0.8,
``arg_groups/fields/schedule.py:150-160``). A tree node holds full KV and either live SWA KV or a
*tombstone* (its SWA KV freed). The rules this model follows, page by page (a page id stands for
its whole prefix, SPEC.md, so the tree is a set of page ids with a live-SWA subset):

- **Match** (``unified_tree_core.py:905-984``): the key is the prompt limited to ``P - 1`` tokens
  (``Req._compute_max_prefix_len``) and page aligned; the walk follows the full KV as far as it
  goes (``f`` pages); the hit is the deepest node end where every component's validator passes.
  The SWA validator (``components/swa.py:357-377``) starts with an infinite live length, resets
  it to 0 at a tombstone node (and fails there), adds a live node's length, and passes when that
  length is ``>= W``. A node is all live or all tombstone and the walk splits the node it ends in
  (so ``f`` is a node end), hence the deepest valid node end is the deepest end of a live run
  (or ``f`` inside one) whose run since the last tombstone is ``>= W`` tokens or that has no
  tombstone before it: the node boundaries inside a live run never matter.
- **Freeing out-of-window SWA at every checkpoint of a running request**
  (``unified_radix_cache.py:1213-1223``, ``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS``
  default True, ``environ.py:728``; ``mem_cache/common.py:75-138``): before the insert of a chunk
  (``stash_chunked_request``, ``managers/scheduler.py:3772-3776``) or of the prompt at prefill end,
  with ``pre = len(key) - 1``: unless ``pre - W < evicted + 1``, ``evicted = max(evicted,
  cache_protected_len)`` and then ``evicted = floor16(max(evicted, pre - ceil16(max(W, 16))))``:
  the request's SWA below ``evicted`` is freed, the tree gets tombstones there.
- **Insert** (``unified_tree_core.py:1282-1421``, ``components/swa.py:471-591``): the pages
  ``[cache_protected_len, floor16(len(key)))`` join the tree; those at or above ``evicted`` get
  live SWA (a tombstone node there is recovered from the request's KV), those below keep what
  the tree had (a new one is a tombstone). Then ``cache_protected_len = floor16(len(key))``.
- **Branching point** (``components/swa.py:379-421``, ``999-1028``, ``1051-1071``): when the
  full match ``f`` is longer than the SWA-valid hit, the first checkpoint's key stops at ``16 f``;
  after that insert the request's out-of-window SWA is freed again at its fill length
  (``extend_end - 1``).
- **Decode** (``managers/schedule_batch.py:4047-4121``; ``mem_cache/allocation.py:633``): before
  the allocation of output token ``k + 1`` (``k >= 2``), when ``P + k - 1 - W >= evicted + 128``
  (``SGLANG_SWA_EVICTION_INTERVAL``, ``environ.py:730``) the same freeing runs at ``pre = P + k - 1``.
- **Finish** (``mem_cache/common.py:400-444``): ``checkpoint(up_to = P + O - 1)`` without a
  freeing first (the request is finished), inserting the generated pages (never matched later).
- **Chunks**: ``chunked_prefill_size`` = 8192 tokens (``schedule_policy.py:1646-1670``); chunk
  ends are where the freeing above runs.

**Pools.** The model is exact only where SGLang never evicts from the tree: at each request's
arrival it checks that both pools' free pages (pool minus the pages the tree holds, every
generated page counted as live SWA) cover ``cdiv(P + O, 16) - h + 3`` pages (``h`` the hit in
pages: the matched pages are the tree's, locked, already counted as held); otherwise it raises
:class:`NotModelled` naming the request. Why that room means no eviction (nothing else frees or
takes pages in a serial run; by induction every earlier request found room, so the tree is the
infinite pool's and ``h`` is its hit): SGLang evicts only on a shortfall,
``SWATokenToKVPoolAllocator.evict_to_free_tokens`` (``mem_cache/allocator/swa.py:210-220``, via
``evict_from_tree_cache``, ``mem_cache/common.py:283-288``) asks the tree for
``max(0, demand - available)`` tokens of each pool; the demands are an extend's tokens plus a page
(``alloc_paged_token_slots_extend``, ``mem_cache/allocation.py:175-201``) and one page per decode
step (``alloc_paged_token_slots_decode``, ``allocation.py:572-585``); the request allocates at most
``cdiv(P + O, 16) - h`` pages in either pool (re-computed pages beyond ``h`` included; SWA frees and
the insert's duplicate frees only lower it), so a free count of that plus 3 pages covers every
demand. Admission (``PrefillAdder.add_one_req``, ``managers/schedule_policy.py:1395-1440``: the
extend plus ``O`` plus a page, ``< available + evictable``; SWA reservation
``estimate_swa_kv_tokens`` ``<=`` the extend plus ``O`` plus a page, ``prefill_budget.py:27-56,
171-300``) and the chunk size (``available_chunk_tokens``, the chunk limit unless the pool is
shorter than it) then behave as at the infinite pool. Below that the tree's eviction decides,
which this model does not follow (``validation/HYBRID_NOTES.md`` section 5 lists SGLang's rules
with file:line): Full-pool shortfall, LRU over evictable leaves by ``last_access_time`` with a
leaf's SWA cascading (``unified_radix_cache.py:697-779, 952-1058``,
``unified_cache/components/full.py:209-244``); SWA-pool shortfall, the SWA component's own LRU
list from its tail, tombstoning internal nodes' SWA and deleting leaves whole
(``components/swa.py:742-841``). ``validation/drive_sglang_hybrid.py`` drives SGLang's own
objects; ``tests/serving/test_sglang_hybrid.py`` checks this model against every committed run at
every pool it answers, and that it refuses every committed pool where SGLang's hits differ from
the infinite pool's.

A 320-token prompt, then prompts sharing its first 160, 304 and 288 tokens, W = 40: the first
keeps live SWA on [256, 320) only, so 160 misses (full attention would hit it); 304 has 48 live
tokens behind it; the 161-token request re-computed [96, 160) live, so 288 (32 live tokens behind
it) falls back to 160. SGLang driven on this trace answers the same:

>>> import numpy as np
>>> from stackdist.serving.pages import EnginePages
>>> pg = EnginePages(np.array(list(range(20)) + list(range(11)) + list(range(20)) + list(range(19))),
...     np.array([0, 20, 31, 51, 70]), np.array([320, 161, 305, 300]), np.ones(4, np.int64), 20)
>>> sglang_hybrid_hits(pg, 40, None, decode=False)
[0, 0, 304, 160]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stackdist.traces import RequestTrace

from .hybrid import GroupSpec
from .pages import EnginePages, engine_pages
from .results import ServingResult, check_pools
from .schedule import Schedule
from .vllm import resolve_schedule

__all__ = ["SWA_EVICTION_INTERVAL", "NotModelled", "sglang_hybrid_hits", "simulate_hybrid_groups", "swa_pool_pages"]

_B = 16
SWA_EVICTION_INTERVAL = 128
"""``SGLANG_SWA_EVICTION_INTERVAL`` (decode steps between SWA frees), tokens."""
CHUNK_TOKENS = 8192
_MARGIN_PAGES = 3


class NotModelled(ValueError):
    """A pool where SGLang would evict from its tree, which this model does not follow."""

    def __init__(self, request: int, pool: int, detail: str):
        super().__init__(f"request {request} at a pool of {pool} pages: {detail}")
        self.request, self.pool = request, pool


def swa_pool_pages(pool_pages: int, ratio: float) -> int:
    """SGLang's SWA pool (pages of 16 tokens) beside a full pool of ``pool_pages`` pages:
    ``align(int(full_tokens * ratio))`` (``pool_configurator.py:878-879``). O(1).

    >>> swa_pool_pages(100, 0.8)
    80
    """
    return int(pool_pages * _B * ratio) // _B


def _ceil16(x: int) -> int:
    return -(-x // _B) * _B


class _Req:
    """One running request against the tree: its SWA eviction cursor (``evicted``), the length
    the tree holds for it (``protected``) and the SWA branching point, in tokens."""

    __slots__ = ("branching", "evicted", "full", "gen", "ids", "live", "prompt", "protected", "window")

    def __init__(self, ids: np.ndarray, prompt: int, gen: int, hit: int, branching: int | None, window: int,
                 full: set[int], live: set[int]):
        self.ids, self.prompt, self.gen, self.window = ids, prompt, gen, window
        self.full, self.live = full, live
        self.evicted = 0
        self.protected = hit
        self.branching = branching

    def free_out_of_window(self, pre_len: int) -> None:
        """``free_swa_out_of_window_slots`` with prefix sharing (``common.py:75-138``)."""
        if pre_len - self.window < self.evicted + 1:
            return
        self.evicted = max(self.evicted, self.protected)
        self.evicted = max(self.evicted, max(self.evicted, pre_len - _ceil16(max(self.window, _B))) // _B * _B)

    def checkpoint(self, up_to: int, fill: int, finished: bool) -> None:
        """``checkpoint_into_tree`` (``unified_radix_cache.py:1164-1336``) of ``up_to`` tokens,
        ``fill`` the request's fill length (``extend_end``)."""
        b = self.branching
        branch = b if b is not None and self.protected < b <= up_to else None
        eff = up_to if branch is None else min(up_to, branch)
        if not finished:
            self.free_out_of_window(eff - 1)
        if eff <= 0:
            return
        k = eff // _B
        for j in range(self.protected // _B, k):
            pid = int(self.ids[j]) if j < self.prompt // _B else self.gen - j
            self.full.add(pid)
            if j * _B >= self.evicted:
                self.live.add(pid)
        self.protected = max(self.protected, k * _B)
        if branch is not None and k * _B >= branch:
            self.branching = None
            if not finished:
                self.free_out_of_window(fill - 1)


def _match(ids: np.ndarray, cap: int, full: set, live: set, window: int) -> tuple[int, int]:
    """(SWA-valid hit pages, full-match pages) of a key of ``cap`` pages."""
    f = 0
    while f < cap and int(ids[f]) in full:
        f += 1
    best, run, tomb = 0, 0, False
    for j in range(f):
        alive = int(ids[j]) in live
        if alive:
            run += 1
        else:
            tomb, run = True, 0
        end = j + 1 == f or (int(ids[j + 1]) in live) != alive
        if end and alive and (not tomb or run * _B >= window):
            best = j + 1
    return best, f


def _replay(pages: EnginePages, window: int, decode: bool, chunk_tokens: int,
            end: list[int] | None = None) -> tuple[list[int], list[tuple[int, int, int]]]:
    """Hits (tokens) of the tree that never evicts, and per request at its arrival (pages the tree
    holds, of them with live SWA, pages the request may need); ``end`` (if given) receives the
    pages the tree holds after the last request, and of them with live SWA."""
    full: set[int] = set()
    live: set[int] = set()
    hits: list[int] = []
    room: list[tuple[int, int, int]] = []
    for r in range(pages.n_requests):
        P = int(pages.input_tokens[r])
        O = max(int(pages.output_tokens[r]), 1) if decode else 1
        ids = pages.key[pages.offsets[r]:pages.offsets[r + 1]]
        h, f = _match(ids, (P - 1) // _B, full, live, window)
        # the request holds its matched h pages (locked in the tree, counted in `held`) and
        # allocates at most the rest of its cdiv(P + O, 16) pages, both pools
        room.append((len(full), len(live), -(-(P + O) // _B) - h + _MARGIN_PAGES))
        hits.append(h * _B)
        # generated pages get ids below every other request's (never matched)
        q = _Req(ids, P, -1 - (r << 40), h * _B, f * _B if f > h else None, window, full, live)
        # chunked prefill (schedule_policy.py:1646-1670 first, 1140-1222 continuation): a chunk of
        # chunk_tokens while the rest (page-rounded at admission, raw after) exceeds it; stash between
        fill = h * _B
        first = True
        while (_ceil16(P - fill) if first else P - fill) > chunk_tokens:
            fill += chunk_tokens
            q.checkpoint(fill, fill, False)
            first = False
        q.checkpoint(P, P, False)  # prefill end
        for k in range(2, O):  # decode step k allocates output token k + 1
            if P + k - 1 - window >= q.evicted + SWA_EVICTION_INTERVAL:
                q.free_out_of_window(P + k - 1)
        q.checkpoint(P + O - 1, P, True)  # release_kv_cache
    if end is not None:
        end[:] = [len(full), len(live)]
    return hits, room


def _room_for(room: list[tuple[int, int, int]], pool_pages: int, ratio: float) -> int:
    """The first request whose arrival finds too little room at ``pool_pages`` pages, or -1."""
    swa = swa_pool_pages(pool_pages, ratio)
    return next((r for r, (held, live, own) in enumerate(room) if pool_pages - held < own or swa - live < own), -1)


def _smallest_ample(room: list[tuple[int, int, int]], ratio: float) -> int:
    """The smallest full pool (pages) at which every arrival finds room (the check is monotone in
    the pool: bisection). O(requests x log pool)."""
    lo = max((held + own for held, _live, own in room), default=1) - 1  # lo fails (or is 0)
    hi = max(lo + 1, 1)
    while _room_for(room, hi, ratio) >= 0:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _room_for(room, mid, ratio) >= 0:
            lo = mid
        else:
            hi = mid
    return hi


def sglang_hybrid_hits(pages: EnginePages, window: int, pool_pages: int | None, decode: bool,
                       ratio: float = 0.8, chunk_tokens: int = CHUNK_TOKENS) -> list[int]:
    """Per-request hit tokens of SGLang's FULL + SWA tree, serial, sliding window ``window``
    tokens, full pool ``pool_pages`` pages (None: infinite); :class:`NotModelled` at a pool
    where SGLang may evict (see the module docstring). At every pool it answers the hits are
    those of the infinite pool. Complexity: O(pages + output tokens) set operations.
    """
    if window < 1:
        raise ValueError(f"the sliding window must be >= 1 token; got {window}")
    hits, room = _replay(pages, window, decode, chunk_tokens)
    r = -1 if pool_pages is None else _room_for(room, pool_pages, ratio)
    if r >= 0 and pool_pages is not None:
        held, live, own = room[r]
        raise NotModelled(r, pool_pages, f"free full pages {pool_pages - held}, free SWA pages "
                          f"{swa_pool_pages(pool_pages, ratio) - live}, the request may need {own}: SGLang may evict, "
                          f"which the sglang hybrid model does not follow; it answers pools of >= "
                          f"{_smallest_ample(room, ratio)} pages here")
    return hits


def simulate_hybrid_groups(trace: RequestTrace | EnginePages, groups: Sequence[GroupSpec], pools: Sequence[int | None],
                           schedule: Schedule | str = "serial", decode: bool = False,
                           chunk_tokens: int = CHUNK_TOKENS, ratio: float = 0.8) -> ServingResult:
    """The engine-model entry (:meth:`.SglangModel.simulate_hybrid`): full-attention and
    sliding-window groups of 16-token pages (one window), a serial schedule; ValueError naming
    what SGLang's hybrid cache is not modelled for (chunked-local or Mamba groups, other pages,
    several windows, other schedules) and :class:`NotModelled` at a pool where SGLang would evict.
    Complexity: per pool as :func:`sglang_hybrid_hits`.
    """
    kinds = sorted({g.kind for g in groups})
    if set(kinds) - {"full", "sliding"}:
        raise ValueError(f"the sglang model runs full-attention and sliding-window layers only; this model has "
                         f"{', '.join(k for k in kinds if k not in ('full', 'sliding'))} layers (not modelled for SGLang)")
    windows = sorted({g.window for g in groups if g.kind == "sliding"})
    if len(windows) > 1:
        raise ValueError(f"the sglang model needs one sliding window; got {windows} tokens")
    if any(g.block_size != _B for g in groups):
        raise ValueError(f"the sglang hybrid model runs 16-token pages; got {groups[0].block_size}-token blocks")
    if not 0 < ratio <= 64:
        raise ValueError(f"the SWA to full pool token ratio must be in (0, 64]; got {ratio}")
    if chunk_tokens < _B or chunk_tokens % _B:
        raise ValueError(f"the sglang hybrid model needs a chunk of a positive multiple of 16 tokens; got {chunk_tokens}")
    if isinstance(schedule, str) and schedule != "serial":
        raise ValueError(f"the sglang hybrid model runs a serial schedule only; got {schedule!r}")
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, _B)
    if not resolve_schedule(schedule, trace, pages).is_serial:
        raise ValueError("the sglang hybrid model runs a serial schedule only")
    pools = check_pools(pools, 1)
    window = windows[0] if windows else 1 << 62
    hits = np.array([sglang_hybrid_hits(pages, window, n, decode, ratio, chunk_tokens) for n in pools],
                    dtype=np.int64).reshape(len(pools), pages.n_requests)  # one replay each: O(pages) per pool
    return ServingResult("sglang", pools, hits, np.full(len(pools), -1, np.int64), None, "per-size")
