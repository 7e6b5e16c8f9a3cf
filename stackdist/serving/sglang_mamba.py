"""SGLang 0.5.23's Mamba hybrid (full attention + Mamba / gated-delta-net layers, Qwen3-Next)
prefix cache, serial schedule, at full pools where SGLang evicts nothing and a MambaPool that
never runs out: exactly; other pools are refused.

SGLang serves a model with linear-attention layers from one radix tree with a FULL and a MAMBA
component (``mem_cache/registry.py:149-167``; ``mem_cache/unified_radix_cache.py``,
``mem_cache/unified_cache/components/mamba.py``), full KV in pages of 16 tokens and Mamba states in
a ``MambaPool`` of its own slots. With the radix cache on and a page > 1 the strategy is
``extra_buffer`` (``components/mamba.py:72-79``): each running request tracks states in two
ping-pong slots. Grids: ``mamba_cache_chunk_size = max(64, page) = 64`` (FLA chunk 64, no
``mamba_chunk_size`` in Qwen3-Next's config, ``arg_groups/overrides.py:1897-1925``), checkpoint grid
``lcm(64, 16) = 64`` (``runtime_context.py:1958-1971``), decode track grid
``lcm(64, mamba_track_interval 256) = 256`` (1974-1979). The rules, page by page (a page id stands
for its whole prefix, SPEC.md; the tree is a set of page ids and a subset holding a state at
their end):

- **Match** (``components/mamba.py:163-194``; ``Req._compute_max_prefix_len``): the key is the
  prompt limited to ``P - 1`` tokens, page aligned; the walk follows the full KV (``f`` pages); the
  hit is the deepest page end on it that holds a Mamba state (a node split leaves the state on the
  deeper half, 341-349). When ``g = floor64(16 f)`` exceeds the hit, ``g`` is the *branching point*.
- **Tracking in an extend** (``managers/schedule_batch.py:3137-3238``, no DCP): a chunk
  ``[s, e)`` of ``e - s >= 64`` tokens tracks the state at ``s + floor64(e - s)``, or at the
  branching point ``b`` when ``s < b < e`` and ``(b - s) % 64 == 0``; a shorter chunk tracks none.
- **Checkpoint** of a running request (chunk stash, prefill end; ``unified_radix_cache.py:1164-1240``,
  ``components/mamba.py:604-727``): the insert key stops at the state tracked since the last
  checkpoint (``effective_cache_len = min(len, mamba_last_track_seqlen)``): the full KV of
  ``[0, T)`` joins the tree and a state at ``T``; with no state tracked, *nothing* is inserted.
- **Decode** (``schedule_batch.py:3802-3830``, ``batch_result_processor.py:1389-1427, 1524-1577``):
  at a sequence length ``P + k`` (``k = 1 .. O - 1``) that is a multiple of 256 the state is tracked.
- **Finish** (``release_kv_cache``, ``components/mamba.py:582-603``): the last decode-tracked state
  ``D`` (if any since the prefill-end checkpoint) is inserted with the KV of ``[0, D)`` (the
  generated pages in it are never matched); with none, nothing.
- **Chunks**: ``chunked_prefill_size`` = 8192 tokens (``schedule_policy.py:1646-1670``), as
  :mod:`.sglang_hybrid`.

So SGLang keeps a prompt's KV only up to its last 64-token checkpoint (or a branching point, or a
decode checkpoint): an identical prompt sent again hits ``floor64(P)`` only if that is ``<= P - 1``
(a 1,153-token prompt re-sent hits 1,152; a 1,024-token one hits 0, its state at 1,024 lies past the
``P - 1`` key), and a prompt shorter than 64 tokens beyond its hit caches nothing.

**Pools.** Exact only where SGLang never evicts: at each arrival the free full pages (pool minus
the tree's pages) must cover ``cdiv(P + O, 16) + 3``; otherwise :class:`NotModelled`. The MambaPool
size is not an input of the planner: the model assumes it never runs out (SGLang's
``max_mamba_cache_size``; with few slots SGLang evicts states and hits fall, see
``tests/data/engines/sglang_mamba/`` runs ``slots4/8/16``). ``validation/drive_sglang_mamba.py``
drives SGLang's own objects; ``tests/serving/test_sglang_mamba.py`` checks this model against every
committed run with an ample MambaPool at every full pool it answers.

A 1,153-token prompt, the same prompt again, then one sharing its first 1,024 tokens: the first
keeps KV and a state at 1,152; the second hits it; the third's full match is 1,024 but the
deepest state on it is none, so it hits 0 (and tracks its branching point 1,024):

>>> import numpy as np
>>> from stackdist.serving.pages import EnginePages
>>> k = list(range(73))
>>> pg = EnginePages(np.array(k + k + k[:64] + [99]), np.array([0, 73, 146, 211]),
...     np.array([1153, 1153, 1030]), np.ones(3, np.int64), 100)
>>> sglang_mamba_hits(pg, None, decode=False)
[0, 1152, 0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stackdist.traces import RequestTrace

from .hybrid import GroupSpec
from .pages import EnginePages, engine_pages
from .results import ServingResult, check_pools
from .schedule import Schedule
from .sglang_hybrid import CHUNK_TOKENS, NotModelled
from .vllm import resolve_schedule

__all__ = ["CHECKPOINT_GRID", "TRACK_GRID", "sglang_mamba_hits", "simulate_mamba_groups"]

_B = 16
CHECKPOINT_GRID = 64
"""``lcm(mamba_cache_chunk_size, page)`` for page 16 (tokens)."""
TRACK_GRID = 256
"""``lcm(CHECKPOINT_GRID, mamba_track_interval)`` (tokens)."""
_MARGIN_PAGES = 3


def _tracked(s: int, e: int, branch: int | None) -> int | None:
    """The state an extend of ``[s, e)`` tracks (``schedule_batch.py:3166-3232``, no DCP), or None."""
    if e - s < CHECKPOINT_GRID:
        return None
    if branch is not None and s < branch < e and (branch - s) % CHECKPOINT_GRID == 0:
        return branch
    return s + (e - s) // CHECKPOINT_GRID * CHECKPOINT_GRID


def _insert(full: set[int], states: set[int], ids: np.ndarray, prompt: int, gen: int, t: int) -> int:
    """Insert the KV of ``[0, t)`` and a state at ``t`` (pages from ``prompt // 16`` on are
    generated: ids ``gen - j``); the number of pages new to the tree."""
    k = t // _B
    new = 0
    for j in range(k):
        pid = int(ids[j]) if j < prompt // _B else gen - j
        if pid not in full:
            full.add(pid)
            new += 1
    states.add(int(ids[k - 1]) if k - 1 < prompt // _B else gen - (k - 1))
    return new


def _replay(pages: EnginePages, decode: bool, chunk_tokens: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Hits (tokens) of the tree that never evicts, and per request at its arrival (pages the tree
    holds, pages the request may need)."""
    full: set[int] = set()
    states: set[int] = set()
    held = 0  # tree pages, generated ones included
    hits: list[int] = []
    room: list[tuple[int, int]] = []
    for r in range(pages.n_requests):
        P = int(pages.input_tokens[r])
        O = max(int(pages.output_tokens[r]), 1) if decode else 1
        ids = pages.key[pages.offsets[r]:pages.offsets[r + 1]]
        room.append((held, -(-(P + O) // _B) + _MARGIN_PAGES))
        cap = (P - 1) // _B
        f, h = 0, 0
        while f < cap and int(ids[f]) in full:
            f += 1
            if int(ids[f - 1]) in states:
                h = f
        hit = h * _B
        hits.append(hit)
        g = (f * _B) // CHECKPOINT_GRID * CHECKPOINT_GRID
        branch = g if g > hit else None
        gen = -1 - (r << 40)  # generated pages: ids never matched
        fill, first = hit, True
        while (-(-(P - fill) // _B) * _B if first else P - fill) > chunk_tokens:
            t = _tracked(fill, fill + chunk_tokens, branch)
            fill += chunk_tokens
            if t is not None:  # the stash checkpoints the chunk
                held += _insert(full, states, ids, P, gen, min(t, fill))
            first = False
        t = _tracked(fill, P, branch)
        if t is not None:  # prefill end: fill ids are P + 1 tokens
            held += _insert(full, states, ids, P, gen, t)
        last = (P + O - 1) // TRACK_GRID * TRACK_GRID  # decode steps k = 1 .. O - 1 track at P + k
        if last > P:  # release_kv_cache inserts the last one
            held += _insert(full, states, ids, P, gen, last)
    return hits, room


def _room_for(room: list[tuple[int, int]], pool_pages: int) -> int:
    """The first request whose arrival finds too few free full pages, or -1."""
    return next((r for r, (held, own) in enumerate(room) if pool_pages - held < own), -1)


def sglang_mamba_hits(pages: EnginePages, pool_pages: int | None, decode: bool,
                      chunk_tokens: int = CHUNK_TOKENS) -> list[int]:
    """Per-request hit tokens of SGLang's FULL + MAMBA tree, serial, full pool ``pool_pages``
    pages of 16 tokens (None: infinite), a MambaPool that never runs out; :class:`NotModelled`
    at a pool where SGLang may evict (module docstring). Complexity: O(pages) set operations.
    """
    if chunk_tokens < _B or chunk_tokens % _B:
        raise ValueError(f"the sglang mamba model needs a chunk of a positive multiple of 16 tokens; got {chunk_tokens}")
    hits, room = _replay(pages, decode, chunk_tokens)
    r = -1 if pool_pages is None else _room_for(room, pool_pages)
    if r >= 0 and pool_pages is not None:
        held, own = room[r]
        ample = max(h + o for h, o in room)
        raise NotModelled(r, pool_pages, f"free full pages {pool_pages - held}, the request may need {own}: SGLang may "
                          f"evict, which the sglang mamba model does not follow; it answers pools of >= {ample} pages here")
    return hits


def simulate_mamba_groups(trace: RequestTrace | EnginePages, groups: Sequence[GroupSpec], pools: Sequence[int | None],
                          schedule: Schedule | str = "serial", decode: bool = False,
                          chunk_tokens: int = CHUNK_TOKENS) -> ServingResult:
    """The engine-model entry for full-attention + Mamba groups (:meth:`.SglangModel.simulate_hybrid`):
    SGLang's own 16-token pages and 64-token checkpoint grid (the groups' vLLM block sizes are not
    SGLang's and are not used), a serial schedule; ValueError for other group kinds or schedules,
    :class:`NotModelled` at a pool where SGLang would evict. Complexity: per pool as
    :func:`sglang_mamba_hits`.
    """
    kinds = {g.kind for g in groups}
    if kinds - {"full", "mamba"} or "mamba" not in kinds:
        raise ValueError(f"the sglang mamba model runs full-attention and Mamba layers only; got {', '.join(sorted(kinds))}")
    if isinstance(schedule, str) and schedule != "serial":
        raise ValueError(f"the sglang mamba model runs a serial schedule only; got {schedule!r}")
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, _B)
    if pages.page_tokens != _B:
        raise ValueError(f"the sglang mamba model runs 16-token pages; got {pages.page_tokens}")
    if not resolve_schedule(schedule, trace, pages).is_serial:
        raise ValueError("the sglang mamba model runs a serial schedule only")
    pools = check_pools(pools, 1)
    hits = np.array([sglang_mamba_hits(pages, n, decode, chunk_tokens) for n in pools],
                    dtype=np.int64).reshape(len(pools), pages.n_requests)
    return ServingResult("sglang", pools, hits, np.full(len(pools), -1, np.int64), None, "per-size")
