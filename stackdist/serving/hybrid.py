"""vLLM 0.33.0's hybrid KV cache (full attention beside sliding-window, chunked-local and Mamba
groups), call for call, in pure Python.

Everything below is read from vLLM 0.33.0 (``vllm/v1/core/``; file:line of that release):

- **Groups** (``kv_cache_planning.py:416`` ``_get_kv_cache_groups_uniform_page_size``): layers
  are bucketed by spec in layer order; ``group_size`` is the smallest bucket's layer count (the
  largest when it is below 1.5 x the smallest, :504); each bucket splits into ``cdiv(n,
  group_size)`` groups (the last padded), buckets in first-appearance order. Every group draws
  its blocks from **one** ``BlockPool`` of ``num_gpu_blocks`` (``kv_cache_coordinator.py:120``);
  a block holds one group's layers. :func:`kv_cache_groups` does this.
- **Lookup** (``kv_cache_coordinator.py:835`` ``HybridKVCacheCoordinator.find_longest_cache_hit``):
  groups with equal specs are looked up jointly (``get_cached_block`` needs the key cached in
  every group of the spec, ``block_pool.py:202``), full attention first (:758); each spec either
  accepts the candidate length or lowers it, repeated to a fixed point (one pass when the model is
  full attention plus one other spec, :866). Full attention: the cached run from the head
  (``single_type_kv_cache_manager.py:797``); sliding window: right to left, the first run of
  ``cdiv(W - 1, b)`` cached blocks (or the run from block 0 when shorter), :1002; chunked local:
  the blocks of the current chunk from its start (:1355); the cap is ``P - 1``
  (``kv_cache_manager.py:301``). The hit is the reconciled length; ``shared_prefix_boundary``
  (the *junction*) is the longest single-group hit when it exceeds it (``kv_cache_manager.py:323``).
- **Caching** (``single_type_kv_cache_manager.py:477`` ``cache_blocks`` after every
  ``allocate_slots``): full attention and chunked local hash every full block; a sliding-window
  group with ``prefix_cache_retention_interval = 0`` (the default) hashes only the
  ``cdiv(W - 1, b)`` blocks ending at each reachable boundary (:1067 ``reachable_block_mask``):
  the replay boundary ``floor((P - 1) / b) * b`` (``kv_cache_coordinator.py:65``) and the
  junction. Other blocks stay unhashed, so a newly shared prefix misses twice: the first repeat
  finds the full-attention hit but no window, pins the junction, and only the next one hits.
- **Freeing** (``single_type_kv_cache_manager.py:682`` ``remove_skipped_blocks``, called by
  ``allocate_slots`` before each allocation, ``kv_cache_manager.py:556``): blocks wholly before
  ``n - W + 1`` (sliding) or the chunk start (chunked) are freed while the request runs, i.e.
  between prefill chunks of ``max_num_batched_tokens`` and at decode steps: last first, hashed ones
  to the back of the free queue, unhashed ones to the front (``block_pool.py:816``). At finish
  each group frees its blocks in reverse, groups in order (``kv_cache_coordinator.py:397``).
- **Allocation** (``single_type_kv_cache_manager.py:176``): a first chunk needs
  ``cdiv(end, b) - max(skipped, hit blocks)`` new blocks per group plus its hit blocks with no
  holder; the allocation fails (``allocate_slots`` returns None) when the sum over groups exceeds
  the free blocks; hit blocks are touched group by group before any new block is popped
  (``kv_cache_coordinator.py:295``).

With one full-attention group this is the existing :mod:`.vllm` model exactly (tested).

- **Mamba** (``align`` mode, :class:`Mamba`): one state block per position, the rightmost cached
  state at or below the candidate hits; the running state moves to a new block at each block
  boundary; the scheduler ends serial prefill chunks on block boundaries, at the prompt's last
  cacheable position or at the junction (``sched/scheduler.py:546``), and a final chunk that crosses
  the prompt's checkpoint exports it into a block of its own. The block is vLLM's raised attention
  block (:func:`mamba_attention_block_size`, 576 for Qwen3-Next); hashes are per block.

Serial schedules prefill in chunks of ``max_num_batched_tokens`` as vLLM's scheduler does; timed
schedules allocate the whole prompt at arrival (SPEC.md). Checked: against a direct restatement of
the rules (``tests/serving/hybrid_reference.py``, full + sliding + chunked) on seeded random traces,
and against vLLM's own Scheduler and coordinator on every request of the committed runs
(``tests/data/engines/hybrid_model/``; docs/hybrid.md lists what is driven).

Not followed (not on vLLM's default path): EAGLE/MTP drops, a positive retention interval, KV
connectors, DCP/PCP, partial-block (fine-grained) hash hits, speculative Mamba blocks, Mamba
cache mode ``all``/``none``.

>>> import numpy as np
>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace(np.arange(8) % 4, np.array([0, 4, 8]), np.full(8, 16), np.zeros(2),
...     np.array([64, 64]), np.array([1, 1]), block_size=16)
>>> g = kv_cache_groups([GroupSpec("sliding", 16, window=32), GroupSpec("full", 16)])
>>> simulate_hybrid(t, g, [None]).hit_tokens.tolist()
[[0, 48]]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stackdist.traces import RequestTrace

from .pages import EnginePages, engine_pages
from .results import ServingResult, check_pools
from .schedule import Schedule, event_order

__all__ = ["KINDS", "GroupSpec", "HybridResult", "HybridRun", "groups_from_layers", "kv_cache_groups",
           "layers_per_group", "mamba_attention_block_size", "simulate_hybrid"]

KINDS = ("full", "sliding", "chunked", "mamba")
"""The group kinds (vLLM specs): FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec."""


@dataclass(frozen=True)
class GroupSpec:
    """One KV cache group's spec: its kind (:data:`KINDS`), block size in tokens, and the window
    (sliding) or chunk (chunked local) in tokens.

    >>> GroupSpec("sliding", 16, window=128).need_blocks
    8
    """

    kind: str
    block_size: int
    window: int = 0
    chunk: int = 0
    checkpoint_alignment: int = 0
    """Mamba ``align`` mode: the grid on which the prefill kernel exports mid-prefill states
    (``MambaSpec.prefill_checkpoint_alignment``, ``lcm(block, 64)`` for the FlashInfer GDN
    prefill); 0 when it exports none (``num_prefill_checkpoint_blocks = 0``)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"group kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if self.block_size < 1 or self.block_size % 16:
            raise ValueError(f"a group's block size must be a positive multiple of 16 tokens; got {self.block_size}")
        if self.kind == "sliding" and self.window < 1:
            raise ValueError(f"a sliding-window group needs a window >= 1 token; got {self.window}")
        if self.kind == "chunked" and self.chunk < 1:
            raise ValueError(f"a chunked-local group needs a chunk >= 1 token; got {self.chunk}")

    @property
    def need_blocks(self) -> int:
        """Sliding window: the contiguous cached blocks a hit needs, ``cdiv(W - 1, b)``
        (``SlidingWindowManager._contiguous_blocks_for_hit``, no EAGLE)."""
        return -(-(self.window - 1) // self.block_size)


def kv_cache_groups(layers: Sequence[GroupSpec]) -> tuple[GroupSpec, ...]:
    """vLLM's KV cache groups from the layers' specs in layer order
    (``_get_kv_cache_groups_uniform_page_size``). O(layers).

    >>> [g.kind for g in kv_cache_groups([GroupSpec("sliding", 16, window=8)] * 5 + [GroupSpec("full", 16)])]
    ['sliding', 'sliding', 'sliding', 'sliding', 'sliding', 'full']
    >>> len(kv_cache_groups([GroupSpec("sliding", 16, window=8)] * 12 + [GroupSpec("full", 16)] * 13))
    2
    """
    if not layers:
        raise ValueError("a model needs at least one layer")
    buckets: dict[GroupSpec, int] = {}
    for spec in layers:
        buckets[spec] = buckets.get(spec, 0) + 1
    low, high = min(buckets.values()), max(buckets.values())
    size = high if high < low * 1.5 else low
    return tuple(spec for spec, n in buckets.items() for _ in range(-(-n // size)))


def layers_per_group(kinds: Sequence[str]) -> int:
    """The layers one block of any group holds (vLLM's ``group_size``; padding fills the last
    group of a kind). O(layers).

    >>> layers_per_group(["sliding"] * 52 + ["full"] * 10), layers_per_group(["sliding"] * 12 + ["full"] * 13)
    (10, 13)
    """
    counts = [list(kinds).count(k) for k in dict.fromkeys(kinds)]
    low, high = min(counts), max(counts)
    return high if high < low * 1.5 else low


@dataclass(frozen=True)
class HybridResult(ServingResult):
    """:class:`.ServingResult` plus, per pool and request, the longest hit a single group
    found at the lookup (the full-attention group's own hit when the model has one beside one
    other kind): where it exceeds ``hit_tokens`` another group's missing window or state
    checkpoint cut the hit."""

    group_hit_tokens: np.ndarray | None = None


def groups_from_layers(kinds: Sequence[str], block_size: int, window: int | None = None,
                       chunk: int | None = None, mamba_checkpoints: int = 64) -> tuple[GroupSpec, ...]:
    """The groups of a model whose layers have ``kinds`` (in layer order), every group at
    ``block_size`` tokens (vLLM gives every group the one ``cache_config.block_size``).

    >>> [g.kind for g in groups_from_layers(["chunked"] * 3 + ["full"], 16, chunk=8192)]
    ['chunked', 'chunked', 'chunked', 'full']
    """
    from math import lcm

    grid = lcm(block_size, mamba_checkpoints) if mamba_checkpoints else 0

    def spec(kind: str) -> GroupSpec:
        return GroupSpec(kind, block_size, window=(window or 0) if kind == "sliding" else 0,
                         chunk=(chunk or 0) if kind == "chunked" else 0,
                         checkpoint_alignment=grid if kind == "mamba" else 0)
    return kv_cache_groups([spec(k) for k in kinds])


def mamba_attention_block_size(state_bytes: int, attention_bytes_per_token: int, block_size: int = 16,
                               checkpoint_alignment: int = 64) -> int:
    """The attention block vLLM 0.33.0 picks for a Mamba hybrid so that an attention page holds a
    Mamba state page (``platforms/interface.py:940`` ``Platform._align_hybrid_block_size``):
    ``a x cdiv(state, a x attention page of one token)`` with ``a = lcm(max(16, block_size),
    checkpoint alignment)`` (``mamba_cache_mode="align"``: the FlashInfer GDN prefill's
    checkpoint grid, 64, ``v1/attention/backends/gdn_attn.py``). Qwen3-Next-80B-A3B: a
    1,097,728-byte state and 2,048 attention bytes per token and layer give 576.

    >>> mamba_attention_block_size(1097728, 2048)
    576
    """
    from math import lcm

    a = lcm(max(16, block_size), checkpoint_alignment or 1)
    return max(block_size, a * -(-state_bytes // (a * attention_bytes_per_token)))


class _Pool:
    """``BlockPool``: blocks 0..N-1, block 0 the null block; the free queue, head first, kept as
    three parts: ``front`` (blocks prepended since, head first), the blocks never handed out yet
    (ids ``fresh``..N-1, in id order, as the queue starts) and ``back`` (blocks appended since):
    prepends only reach the front and appends only the back, so this is the queue exactly, and an
    unused large pool costs nothing; ``ref`` counts; ``key`` a block's hashes (its primary first; empty = uncached)
    and ``ntok`` the primary's tokens; ``cached`` maps a (group, page key) to its cached blocks in
    insertion order (vLLM keeps duplicates)."""

    def __init__(self, n: int) -> None:
        self.front: OrderedDict[int, None] = OrderedDict()
        self.back: OrderedDict[int, None] = OrderedDict()
        self.fresh = 1
        self.ref: dict[int, int] = {}
        self.key: dict[int, list[tuple[int, int]]] = {}
        self.ntok: dict[int, int] = {}
        self.cached: dict[tuple[int, int], dict[int, None]] = {}
        self.n = n
        self.step_keys: set[tuple[int, int]] | None = None  # scheduler hook: the keys cached in this step

    def get_cached(self, key: int, gids: Sequence[int]) -> list[int] | None:
        out = []
        for g in gids:
            blocks = self.cached.get((g, key))
            if not blocks:
                return None
            out.append(next(iter(blocks)))
        return out

    def num_free(self) -> int:
        return len(self.front) + self.n - self.fresh + len(self.back)

    def touch(self, blocks: Sequence[int]) -> None:
        for b in blocks:
            if b == 0:
                continue
            if self.ref[b] == 0:  # a hit block is cached, so it was handed out and freed: front or back
                if b in self.front:
                    del self.front[b]
                else:
                    del self.back[b]
            self.ref[b] += 1

    def evict(self, b: int) -> None:
        """``_maybe_evict_cached_block``: drop every hash of ``b``."""
        for k in self.key.get(b, ()):
            blocks = self.cached.get(k)
            if blocks is not None and b in blocks:
                del blocks[b]
                if not blocks:
                    del self.cached[k]
        self.key.pop(b, None)
        self.ntok.pop(b, None)

    def get_new(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            if self.front:
                b, _ = self.front.popitem(last=False)
            elif self.fresh < self.n:
                b, self.fresh = self.fresh, self.fresh + 1
            else:
                b, _ = self.back.popitem(last=False)
            self.evict(b)
            self.ref[b] = 1
            out.append(b)
        return out

    def cache(self, b: int, key: tuple[int, int], ntok: int) -> None:
        """``_insert_block_hash``."""
        if self.step_keys is not None:
            self.step_keys.add(key)
        have = self.key.setdefault(b, [])
        if have and have[0] == key or b in self.cached.get(key, ()):
            return
        if not have:
            self.ntok[b] = ntok
        have.append(key)
        self.cached.setdefault(key, {})[b] = None

    def free_blocks(self, ordered: Sequence[int]) -> None:
        """``free_blocks``: unhashed blocks to the front (in order), hashed ones to the back."""
        first: list[int] = []
        last: list[int] = []
        for b in ordered:
            if b == 0:
                continue
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (last if self.key.get(b) else first).append(b)
        for b in reversed(first):
            self.front[b] = None
            self.front.move_to_end(b, last=False)
        for b in last:
            self.back[b] = None


class _Request:
    """What the managers read of a request: its page keys at 16 tokens, prompt length, tokens
    so far, the junction; generated full blocks get keys nobody looks up."""

    def __init__(self, r: int, keys: list[int], prompt: int, unique_base: int) -> None:
        self.r, self.keys, self.prompt, self.tokens, self.junction = r, keys, prompt, prompt, 0
        self.unique_base = unique_base

    def block_key(self, j: int, b: int) -> int:
        """The hash of block j at block size b: its last 16-token page's id (prefix-chained);
        a block holding a generated token gets a key of its own (SPEC.md: the first output
        token is unique to its request)."""
        i = (j + 1) * (b // 16) - 1
        return self.keys[i] if i < self.prompt // 16 else self.unique_base + i


class _Manager:
    """``SingleTypeKVCacheManager`` for one group."""

    def __init__(self, spec: GroupSpec, gid: int, pool: _Pool) -> None:
        self.spec, self.gid, self.pool, self.b = spec, gid, pool, spec.block_size
        self.blocks: dict[int, list[int]] = {}
        self.n_cached: dict[int, int] = {}

    @staticmethod
    def find_hit(spec: GroupSpec, req: _Request, max_len: int, gids: list[int], pool: _Pool) -> tuple[list[list[int]], int]:
        raise NotImplementedError

    def skipped(self, n: int) -> int:
        return 0

    def mask(self, start: int, end: int, req: _Request) -> list[bool] | None:
        return None

    cap: int | None = None
    """``max_admission_blocks_per_request`` (recycling groups), set by :class:`HybridRun`."""

    def admission_cap(self, in_flight: int, max_model_len: int) -> int | None:
        return None

    def num_to_allocate(self, req: _Request, tokens: int, hit: list[int], computed: int, gate: bool = False) -> int:
        """``get_num_blocks_to_allocate`` (``gate``: the admission check, capped)."""
        need = -(-tokens // self.b)
        if gate and self.cap is not None:
            need = min(need, self.cap)
        have = len(self.blocks.get(req.r, ()))
        if req.r in self.n_cached:
            return max(need - have, 0)
        skip = self.skipped(computed) // self.b
        new = max(need - max(skip, len(hit) + have), 0)
        evictable = sum(1 for x in hit[max(0, skip - have):] if x != 0 and self.pool.ref[x] == 0)
        return new + evictable

    def add_hit(self, req: _Request, hit: list[int], computed: int) -> None:
        skip = max(self.skipped(computed) // self.b, 0)
        rest = hit[skip:]
        self.pool.touch(rest)
        self.blocks[req.r] = [0] * skip + list(rest)
        self.n_cached[req.r] = skip + len(rest)

    def allocate(self, req: _Request, tokens: int) -> None:
        blocks = self.blocks.setdefault(req.r, [])
        n = -(-tokens // self.b) - len(blocks)
        if n > 0:
            blocks.extend(self.pool.get_new(n))

    def cache(self, req: _Request, tokens: int) -> None:
        done = self.n_cached.get(req.r, 0)
        full = min(tokens, req.tokens // 16 * 16) // self.b
        if done >= full:
            return
        mask = self.mask(done, full, req)
        blocks = self.blocks[req.r]
        for j in range(done, full):
            if blocks[j] == 0 or (mask is not None and not mask[j - done]):
                continue
            self.pool.cache(blocks[j], (self.gid, req.block_key(j, self.b)), (j + 1) * self.b)
        self.n_cached[req.r] = full

    def remove_skipped(self, req: _Request, computed: int) -> None:
        n = self.skipped(computed)
        if n <= 0:
            return
        blocks = self.blocks.setdefault(req.r, [])
        last = min(n // self.b, len(blocks))
        freed = []
        for i in range(last - 1, -1, -1):
            if blocks[i] == 0:
                break
            freed.append(blocks[i])
            blocks[i] = 0
        if freed:
            self.pool.free_blocks(freed)

    def free(self, req: _Request) -> None:
        blocks = self.blocks.pop(req.r, [])
        self.n_cached.pop(req.r, None)
        head = 0
        while head < len(blocks) and blocks[head] == 0:
            head += 1
        self.pool.free_blocks(blocks[head:][::-1])


def _cached_run(spec: GroupSpec, req: _Request, start: int, max_len: int, gids: list[int],
                pool: _Pool) -> tuple[list[list[int]], int]:
    """The run of cached blocks from block ``start`` on (the blocks before it are null, block id
    0), below ``max_len`` tokens; per group its block ids, and the tokens hit. O(blocks)."""
    b = spec.block_size
    out = [[0] * start for _ in gids]
    for j in range(start, max_len // b):
        got = pool.get_cached(req.block_key(j, b), gids)
        if got is None:
            break
        for o, x in zip(out, got):
            o.append(x)
    return out, len(out[0]) * b


class FullAttention(_Manager):
    """``FullAttentionManager``: the cached run of full blocks from the head."""

    @staticmethod
    def find_hit(spec: GroupSpec, req: _Request, max_len: int, gids: list[int], pool: _Pool) -> tuple[list[list[int]], int]:
        return _cached_run(spec, req, 0, max_len, gids, pool)


class SlidingWindow(_Manager):
    """``SlidingWindowManager``: right to left, the first ``cdiv(W - 1, b)`` cached blocks in a
    row (nulls before them), else the cached run from block 0; hashes only the reachable tails."""

    @staticmethod
    def find_hit(spec: GroupSpec, req: _Request, max_len: int, gids: list[int], pool: _Pool) -> tuple[list[list[int]], int]:
        b, need = spec.block_size, spec.need_blocks
        n = max_len // b
        out = [[0] * n for _ in gids]
        run = 0
        for i in range(n - 1, -1, -1):
            got = pool.get_cached(req.block_key(i, b), gids)
            if got is None:
                run = 0
                continue
            for o, x in zip(out, got):
                o[i] = x
            run += 1
            if run >= need:
                for o in out:
                    del o[i + run:]
                return out, len(out[0]) * b
        for o in out:
            del o[run:]
        return out, run * b

    def skipped(self, n: int) -> int:
        return max(0, n - self.spec.window + 1)

    def admission_cap(self, in_flight: int, max_model_len: int) -> int | None:
        """``SlidingWindowSpec.max_admission_blocks_per_request``."""
        return -(-min(self.spec.window - 1 + in_flight, max_model_len) // self.b) + 1

    def mask(self, start: int, end: int, req: _Request) -> list[bool] | None:
        """``reachable_block_mask`` with retention 0: the ``need`` blocks ending at the replay
        boundary and at the junction (alignment = the scheduler block = b here)."""
        b, need = self.b, self.spec.need_blocks
        m = [False] * (end - start)
        bounds = [req.prompt - 1] + ([req.junction] if req.junction else [])
        for t in bounds:
            e = t // b
            for j in range(max(start, e - need), min(end, e)):
                m[j - start] = True
        return m


class ChunkedLocal(_Manager):
    """``ChunkedLocalAttentionManager``: nulls before the current chunk, then the cached run."""

    @staticmethod
    def find_hit(spec: GroupSpec, req: _Request, max_len: int, gids: list[int], pool: _Pool) -> tuple[list[list[int]], int]:
        start = max_len // spec.chunk * spec.chunk // spec.block_size if max_len > 0 else 0
        return _cached_run(spec, req, start, max_len, gids, pool)

    def skipped(self, n: int) -> int:
        return n // self.spec.chunk * self.spec.chunk

    def admission_cap(self, in_flight: int, max_model_len: int) -> int | None:
        """``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``."""
        return -(-min(self.spec.chunk + in_flight, max_model_len) // self.b)


def _checkpoint_position(tokens: int, b: int) -> int:
    """``get_mamba_prefill_checkpoint_position`` (``kv_cache_interface.py:1169``, no EAGLE, no
    lookahead): the last b-aligned position strictly below ``tokens``."""
    return max((tokens - 1) // b * b, 0)


def _checkpoint_valid(start: int, end: int, position: int, b: int, grid: int) -> bool:
    """``is_mamba_prefill_checkpoint_valid`` (``kv_cache_interface.py:1189``; hash block = b)."""
    if not grid:
        return False
    return (start % b == 0 and -(-end // b) - 2 > (start - 1) // b and start + b <= position
            and start < position < end and (position - start) % grid == 0)


class Mamba(_Manager):
    """``MambaManager`` in ``align`` mode (``single_type_kv_cache_manager.py:1428``): one state
    block per position; a hit is the rightmost cached state at or below the candidate
    (:1470); with retention 0 only the state at the replay boundary and at the junction are
    hashed (:1520); the running state moves to a new block at each block boundary and the one
    before is freed a step later (:1629); a final chunk that crosses the prompt's checkpoint
    exports it into a block of its own (:1659, :1797, :2028)."""

    def __init__(self, spec: GroupSpec, gid: int, pool: _Pool) -> None:
        super().__init__(spec, gid, pool)
        self.retired: dict[int, int] = {}
        self.last_state: dict[int, int] = {}
        self.allocated: set[int] = set()
        self.checkpoints: dict[int, tuple[int, int]] = {}

    @staticmethod
    def find_hit(spec: GroupSpec, req: _Request, max_len: int, gids: list[int], pool: _Pool) -> tuple[list[list[int]], int]:
        b = spec.block_size
        for i in range(max_len // b - 1, -1, -1):
            got = pool.get_cached(req.block_key(i, b), gids)
            if got is not None:
                return [[0] * i + [x] for x in got], (i + 1) * b
        return [[] for _ in gids], 0

    def skipped(self, n: int) -> int:
        return n - 1

    def mask(self, start: int, end: int, req: _Request) -> list[bool] | None:
        b = self.b
        m = [False] * (end - start)
        for t in [req.prompt - 1] + ([req.junction] if req.junction else []):
            j = t // b - 1
            if start <= j < end:
                m[j - start] = True
        return m

    def _needs_checkpoint(self, req: _Request, start: int, end: int, position: int) -> bool:
        idx = -(-end // self.b) - 2
        blocks = self.blocks.get(req.r, [])
        prefill_end = max(req.prompt, req.tokens - 1)
        return (self.spec.checkpoint_alignment > 0 and end >= prefill_end
                and _checkpoint_valid(start, end, position, self.b, self.spec.checkpoint_alignment)
                and idx >= 0 and (idx >= len(blocks) or blocks[idx] == 0))

    def num_to_allocate(self, req: _Request, tokens: int, hit: list[int], computed: int, gate: bool = False) -> int:
        b = self.b
        new = -(-tokens // b) - len(hit) - len(self.blocks.get(req.r, ()))
        position = _checkpoint_position(tokens, b)
        if not self._needs_checkpoint(req, computed, tokens, position):
            position = 0
        if not gate:
            if position > 0:
                self.checkpoints[req.r] = (position, -(-tokens // b) - 2)
            else:
                self.checkpoints.pop(req.r, None)
        if new > 0:
            new = min(new, 1 + int(position > 0))
        return new + sum(1 for x in hit if x != 0 and self.pool.ref[x] == 0)

    def allocate(self, req: _Request, tokens: int) -> None:
        b, r = self.b, req.r
        blocks = self.blocks.setdefault(r, [])
        need = -(-tokens // b)
        ck = int(r in self.checkpoints)
        if need <= len(blocks) and not ck:
            self.allocated.add(r)
            return
        prev = len(blocks)
        if r in self.allocated or prev > 0:
            self.last_state[r] = prev - 1
        blocks.extend([0] * (need - 1 - ck - prev))
        blocks.extend(self.pool.get_new(max(need - len(blocks), 0)))
        self.allocated.add(r)

    def remove_skipped(self, req: _Request, computed: int) -> None:
        r = req.r
        blocks = self.blocks.setdefault(r, [])
        if computed - 1 > 0:
            first = self.retired.get(r, 0)
            last = min((computed - 1) // self.b, len(blocks))
            if first < last:
                freed = []
                for i in range(last - 1, first - 1, -1):
                    if blocks[i] != 0:
                        freed.append(blocks[i])
                        blocks[i] = 0
                if freed:
                    self.pool.free_blocks(freed)
                self.retired[r] = last
        state = self.last_state.get(r)
        if state is not None and state < -(-computed // self.b) - 1 and blocks[state] != 0:
            self.pool.free_blocks([blocks[state]])
            blocks[state] = 0

    def cache(self, req: _Request, tokens: int) -> None:
        super().cache(req, tokens)
        b, pool = self.b, self.pool
        blocks = self.blocks[req.r]
        ck = self.checkpoints.get(req.r)
        if ck is not None:
            position, idx = ck
            blk = blocks[idx]
            prompt_checkpoint = position == _checkpoint_position(req.prompt, b)
            retained = position % b == 0 and (self.mask(position // b - 1, position // b, req) or [True])[0]
            if not prompt_checkpoint and not retained and position != req.junction:
                pool.evict(blk)
                return
            if pool.key.get(blk) and pool.ntok[blk] == position:
                return
            pool.evict(blk)  # cache_partial_block(replace_existing_hashes=True)
            pool.cache(blk, (self.gid, req.block_key(position // b - 1, b)), position)
            return
        if tokens <= 0 or tokens % b or tokens != _checkpoint_position(req.prompt, b):
            return
        j = -(-tokens // b) - 1
        if j >= len(blocks) or blocks[j] == 0:
            return
        src = blocks[j]
        have = pool.key.get(src)
        if have and pool.ntok[src] == tokens:
            return
        key = (self.gid, req.block_key(j, b))
        if have and have[0] != key and src not in pool.cached.get(key, ()) and pool.ntok[src] < tokens:
            pool.evict(src)
        pool.cache(src, key, tokens)

    def free(self, req: _Request) -> None:
        for d in (self.retired, self.last_state, self.checkpoints):
            d.pop(req.r, None)
        self.allocated.discard(req.r)
        super().free(req)


MANAGERS: dict[str, type[_Manager]] = {"full": FullAttention, "sliding": SlidingWindow, "chunked": ChunkedLocal,
                                       "mamba": Mamba}
"""The manager of each group kind (vLLM's ``spec_manager_map``)."""


class HybridRun:
    """``KVCacheManager`` + ``HybridKVCacheCoordinator`` over one pool of ``num_gpu_blocks``.

    ``arrive(r, chunk)`` looks request r up and allocates its prompt in chunks of ``chunk``
    tokens (one chunk: the whole prompt); ``decode(r, k)`` is decode step k; ``finish(r)`` frees.
    Each returns False when an allocation fails. ``hits[r]`` is the lookup's hit, ``full_hits[r]``
    the full-attention group's own hit (the junction's source), both in tokens."""

    def __init__(self, groups: Sequence[GroupSpec], num_gpu_blocks: int, pages: EnginePages,
                 max_num_batched_tokens: int = 8192, max_model_len: int = 1 << 40) -> None:
        self.pool = _Pool(num_gpu_blocks)
        self.managers = [MANAGERS[g.kind](g, i, self.pool) for i, g in enumerate(groups)]
        for m in self.managers:  # one batch in flight (max_concurrent_batches = 1, synchronous scheduling)
            m.cap = m.admission_cap(max_num_batched_tokens, max_model_len)
        spec_groups: dict[GroupSpec, list[int]] = {}
        for i, g in enumerate(groups):
            spec_groups.setdefault(g, []).append(i)
        self.spec_groups = sorted(spec_groups.items(), key=lambda sg: sg[0].kind != "full")
        self.simple = len(self.spec_groups) == 2 and self.spec_groups[0][0].kind == "full"
        self.pages = pages
        self.chunk = max_num_batched_tokens
        self.mamba = next((g for g in groups if g.kind == "mamba"), None)
        self.sched_block = int(np.lcm.reduce([g.block_size for g in groups]))
        self.round_cache = len(groups) > 1  # HybridKVCacheCoordinator._align_cacheable
        self.requests: dict[int, _Request] = {}
        self.pending: tuple[int, list[list[int]], int] = (-1, [], 0)  # lookup() -> admit()
        n = pages.n_requests
        self.hits = np.zeros(n, np.int64)
        self.full_hits = np.zeros(n, np.int64)

    def _lookup(self, req: _Request) -> tuple[list[list[int]], int, int]:
        """``find_longest_cache_hit``: per-group hit blocks, the hit, the longest single hit."""
        n = len(self.managers)
        hit_len = req.tokens - 1  # kv_cache_manager.py:301 (num_tokens - 1: a resumed request's output too)
        longest = 0
        blocks: list[list[int] | None] = [None] * n
        lens = [0] * n
        while True:
            cur = hit_len
            for spec, gids in self.spec_groups:
                if spec.kind == "full" and blocks[gids[0]] is not None:
                    cur = min(cur, lens[gids[0]])
                    continue
                got, new = MANAGERS[spec.kind].find_hit(spec, req, cur, gids, self.pool)
                cur = new
                for g, bl in zip(gids, got):
                    blocks[g], lens[g] = bl, new
                longest = max(longest, cur)
            if cur >= hit_len:
                break
            hit_len = cur
            if self.simple:
                break
        for spec, gids in self.spec_groups:
            if spec.kind == "full":
                for g in gids:
                    trimmed = blocks[g]
                    if trimmed is not None:
                        del trimmed[-(-hit_len // spec.block_size):]
        return [x if x is not None else [] for x in blocks], hit_len, longest

    def _allocate(self, req: _Request, new_tokens: int, computed: int, hit: list[list[int]] | None,
                  processed: int | None = None) -> bool:
        """``allocate_slots``: free skipped blocks (on ``processed`` tokens when some are in flight,
        ``kv_cache_manager.py:564``), count, touch the hit, allocate, cache."""
        for m in self.managers:
            m.remove_skipped(req, computed if processed is None else processed)
        tokens = computed + new_tokens
        empty: list[int] = []
        need = sum(m.num_to_allocate(req, tokens, hit[i] if hit else empty, computed) for i, m in enumerate(self.managers))
        if need > self.pool.num_free():
            return False
        if hit is not None:
            for i, m in enumerate(self.managers):
                m.add_hit(req, hit[i], computed)
        for m in self.managers:
            m.allocate(req, tokens)
        cacheable = min(tokens, req.tokens)
        if self.round_cache:
            cacheable = cacheable // self.sched_block * self.sched_block
        for m in self.managers:
            m.cache(req, cacheable)
        return True

    def _mamba_split(self, req: _Request, start: int, n: int) -> int:
        """``Scheduler._mamba_block_aligned_split`` (``sched/scheduler.py:546``): a prefill chunk
        ends on a block boundary, at the last cacheable position, or at the junction."""
        b, grid = self.sched_block, self.mamba.checkpoint_alignment if self.mamba else 0
        prefill_end = max(req.prompt, req.tokens - 1)
        if start >= prefill_end:
            return n
        last = _checkpoint_position(req.tokens, b)
        end = start + n
        internal = bool(grid) and end >= prefill_end and _checkpoint_valid(
            start, end, _checkpoint_position(prefill_end, b), b, grid)
        if internal:
            last = 0
        if end < prefill_end:
            aligned = end // b * b
            if aligned > start or b <= self.chunk:
                end = aligned
        j = req.junction
        stops = ((start // b + 1) * b if start % b and not internal else 0, last,
                 start + (j - start) // b * b if start < j < end else 0)
        end = min([x for x in stops if start < x < end], default=end)
        return max(end - start, 0)

    def arrive(self, r: int, chunk: int) -> bool:
        p = self.pages
        keys = p.key[p.offsets[r]:p.offsets[r + 1]].tolist()
        req = _Request(r, keys, int(p.input_tokens[r]), p.n_keys + r * (1 << 24))
        self.requests[r] = req
        blocks, hit, longest = self._lookup(req)
        self.hits[r] = hit
        self.full_hits[r] = longest
        req.junction = longest if longest > hit else 0
        # the admission gate (scheduler_reserve_full_isl, default True): the whole prompt, the
        # recycling groups capped; no watermark (nothing else is running when it is admitted serially)
        gate = sum(m.num_to_allocate(req, req.prompt, blocks[i], hit, gate=True) for i, m in enumerate(self.managers))
        if gate > self.pool.num_free():
            return False
        done = hit
        first = True
        while first or done < req.prompt:
            n = min(chunk, req.prompt - done)
            if self.mamba is not None and chunk == self.chunk:  # the scheduler's split (serial, chunked prefill)
                n = self._mamba_split(req, done, n)
                if n == 0:
                    return False
            if not self._allocate(req, n, done, blocks if first else None):
                return False
            done += n
            first = False
        return True

    # --- hooks for the scheduler model (hybrid_scheduler.py): one schedule()'s calls, the rules above ---

    def lookup(self, r: int, generated: int = 0) -> int:
        """``get_computed_blocks`` for request r with ``generated`` output tokens (a resumed request
        replays them): sets its junction and keeps the hit blocks for :meth:`admit`; the hit in
        tokens. O(pages x groups)."""
        p = self.pages
        keys = p.key[p.offsets[r]:p.offsets[r + 1]].tolist()
        req = _Request(r, keys, int(p.input_tokens[r]), p.n_keys + r * (1 << 24))
        req.tokens = req.prompt + generated
        self.requests[r] = req
        blocks, hit, longest = self._lookup(req)
        self.hits[r], self.full_hits[r] = hit, longest
        req.junction = longest if longest > hit else 0
        self.pending = (r, blocks, hit)
        return hit

    def admit(self, r: int, n: int) -> bool:
        """The waiting loop's ``allocate_slots(full_sequence_must_fit=True)`` after :meth:`lookup`:
        the whole sequence must fit (recycling groups capped), then the first ``n`` tokens past
        the hit are allocated; False (nothing changed) when either does not fit. A Mamba hit on a
        state cached in this step (``pool.step_keys``) does not fit (``cached_blocks_this_step``,
        ``single_type_kv_cache_manager.py:1704-1713``). O(blocks x groups)."""
        req = self.requests[r]
        rr, blocks, hit = self.pending
        assert rr == r, "admit() follows lookup() of the same request"
        if hit and self.pool.step_keys is not None:
            for i, m in enumerate(self.managers):
                if m.spec.kind == "mamba" and blocks[i] and \
                        (i, req.block_key(len(blocks[i]) - 1, m.b)) in self.pool.step_keys:
                    return False
        gate = sum(m.num_to_allocate(req, req.tokens, blocks[i], hit, gate=True) for i, m in enumerate(self.managers))
        if gate > self.pool.num_free():
            return False
        return self._allocate(req, n, hit, blocks)

    def extend(self, r: int, computed: int, n: int, processed: int | None = None) -> bool:
        """The running loop's ``allocate_slots``: ``n`` more tokens after ``computed``; False when
        they do not fit (the skipped blocks, below ``processed`` tokens when some are in flight, are
        freed all the same). O(blocks x groups)."""
        return self._allocate(self.requests[r], n, computed, None, processed)

    def cache(self, r: int, tokens: int) -> None:
        """``KVCacheManager.cache_blocks(request, tokens)`` outside an allocation (async scheduling's
        output processing, ``sched/scheduler.py:2402-2415``). O(blocks x groups)."""
        req = self.requests[r]
        cacheable = min(tokens, req.tokens)
        if self.round_cache:
            cacheable = cacheable // self.sched_block * self.sched_block
        for m in self.managers:
            m.cache(req, cacheable)

    def split(self, r: int, start: int, n: int) -> int:
        """``_mamba_block_aligned_split`` of a chunk of ``n`` tokens from ``start`` (n itself
        without a Mamba group). O(1)."""
        return n if self.mamba is None else self._mamba_split(self.requests[r], start, n)

    def decode(self, r: int, k: int) -> bool:
        req = self.requests[r]
        req.tokens = req.prompt + k
        return self._allocate(req, 1, req.prompt + k - 1, None)

    def finish(self, r: int) -> None:
        req = self.requests.pop(r)
        for m in self.managers:
            m.free(req)


def simulate_hybrid(
    trace: RequestTrace | EnginePages,
    groups: Sequence[GroupSpec],
    pool_blocks: Sequence[int | None],
    schedule: Schedule | str = "serial",
    decode: bool = False,
    chunk_tokens: int = 8192,
    max_model_len: int = 1 << 40,
) -> ServingResult:
    """vLLM's per-request hits with a hybrid KV cache at each ``num_gpu_blocks`` (None: a pool
    that never evicts). Serial schedules prefill in chunks of ``chunk_tokens``
    (``max_num_batched_tokens``, split as the scheduler splits a Mamba hybrid's); timed ones
    allocate the whole prompt at arrival (SPEC.md: no chunked prefill).
    Complexity: O(pages x groups + decode steps x groups) per pool, pure Python.

    >>> import numpy as np
    >>> from stackdist.traces import RequestTrace
    >>> t = RequestTrace(np.arange(4), np.array([0, 2, 4]), np.full(4, 16), np.zeros(2),
    ...     np.array([32, 32]), np.array([1, 1]), block_size=16)
    >>> simulate_hybrid(t, [GroupSpec("full", 16)], [2, None]).failed_request.tolist()
    [0, -1]
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1; got {chunk_tokens}")
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, 16)
    pools = check_pools(pool_blocks, 1)
    if isinstance(schedule, str):
        if schedule != "serial":
            if not isinstance(trace, RequestTrace):
                raise ValueError("a timed schedule from a name needs the RequestTrace")
            schedule = Schedule.from_service_model(trace)
        else:
            schedule = Schedule.serial(pages.n_requests)
    P, O = pages.input_tokens, pages.output_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)
    never_evicts = len(groups) * int((-(-written // 16)).sum()) + 2
    events = event_order(schedule, O, decode)
    chunk = chunk_tokens if schedule.is_serial else 1 << 62
    hits = np.zeros((len(pools), pages.n_requests), np.int64)
    longest = np.zeros((len(pools), pages.n_requests), np.int64)
    failed = np.full(len(pools), -1, np.int64)
    for i, pool in enumerate(pools):
        run = HybridRun(groups, never_evicts if pool is None else int(pool), pages, chunk_tokens, max_model_len)
        for kind, r, k in zip(events.kind.tolist(), events.request.tolist(), events.k.tolist()):
            ok = True
            if kind == 3:
                ok = run.arrive(r, chunk)
            elif kind == 1:
                ok = run.decode(r, k)
            elif kind == 0:
                run.finish(r)
            if not ok:
                failed[i] = r
                break
        hits[i] = -1 if failed[i] >= 0 else run.hits
        longest[i] = -1 if failed[i] >= 0 else np.maximum(run.full_hits, run.hits)
    return HybridResult("vllm", pools, hits, failed, None, "per-size", group_hit_tokens=longest)
