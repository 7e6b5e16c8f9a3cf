"""SGLang 0.5.23's HiCache (device radix cache + host memory pool) behind its GPU radix cache,
serial schedule: **followed, not driven**.

HiCache needs CUDA streams and transfer kernels, so it cannot run on this machine: the rules
below were read in the installed package (``sglang/srt/``; ``urc.py`` =
``mem_cache/unified_radix_cache.py``, ``core.py`` = ``mem_cache/unified_cache/unified_tree_core.py``,
``full.py`` = ``mem_cache/unified_cache/components/full.py``, ``policy.py`` =
``managers/schedule_policy.py``), notes in ``validation/HICACHE_NOTES.md``. The device side is
the exact :mod:`stackdist.serving.sglang` kernel's rules (same logical clock, same whole-leaf
LRU eviction, same allocator asks), re-simulated here because which device pages are evicted
decides what the host holds (write_back) and HiCache changes the tree (host-backed nodes stay).

- **Host pool**: ``host`` pages of the engine page size (``--hicache-size`` / ``--hicache-ratio``,
  default 2 x the device pool, ``mem_cache/pool_host/base.py:220-229``). A node's host copy
  holds all its pages.
- **Tree**: a node is on the device, on the host, or both (``core.py:163-172``); device nodes
  are closed upwards (only device leaves are evicted, ``core.py:2348-2364``).
- **Lookup** (``core.py:905-984``; ``full.py:110-145``): the key is ``(P - 1) // 16`` pages; the walk
  continues through host-only nodes; the device hit is the device part, the host hit the
  host-only continuation (``host_hit_length``).
- **Load-back** (``policy.py:1466-1560``; ``urc.py:3586-3624, 1820-1937``): a host hit of at least
  ``load_back_threshold`` = 10 tokens (``urc.py:576, 1879``) is loaded: its path is locked, the
  device evicts ``kv_tokens - free`` if short, and fails (nothing loaded, the tokens are
  recomputed) if still short; loaded pages become device pages of those nodes (the host copy
  stays), and the request's prefix is device + loaded.
- **Writes** (``urc.py:558-560``; ``core.py:1104-1123, 1368-1381, 1430-1447, 2622-2644``;
  ``urc.py:1681-1763``): every insert (``checkpoint``) counts one hit on each device node it walks
  or creates past what the request inserted before (``cache_inserted_len``); a node not on the
  host whose count reaches the threshold (1 for ``write_through``, 2 for
  ``write_through_selective``) is written with its unwritten ancestors, ancestors first,
  stopping at the first that finds no room. ``write_back`` counts nothing and writes a node when
  the device evicts it. A write needing more pages than are free first evicts host leaves;
  if that is still not enough it is refused (the evicted host pages stay evicted).
- **Device eviction** (``urc.py:952-1057``; ``core.py:1788-1823, 2077-2123``): whole device
  leaves (no child on the device, unlocked) by LRU; a leaf with a host copy is demoted (device
  pages freed, the node stays, host only); without one it is deleted (write-through) or first
  written back (write_back; if the host has no room the leaf and its host-only subtree are dropped,
  ``core.py:1825-1876``).
- **Host eviction** (``core.py:1931-1959, 2046-2075``; ``full.py:250-280``): host-only, childless,
  unlocked nodes by LRU (``last_access_time``), a parent left a host leaf joins; write_back
  first releases host copies of nodes also on the device, in registration order, sparing
  evictable device leaves in a first pass (``core.py:1975-2044``).
- **Insert onto a host-only node** (``core.py:1282-1330, 1564-1590``): the node takes the request's
  fresh pages back onto the device (they are not freed as duplicates).

Every write and load is taken as finished before the next event (the scheduler's idle loop
acknowledges them: ``urc.py:3472, 3530``), so write and load locks are not modelled; nor is
the admission budget (``policy.py:1478-1508``), as for the GPU model.

Complexity: per configuration O(events + nodes walked x log(nodes)) in pure Python (a request's
decode pages at once when no step can evict, else page by page); memory O(nodes) (page keys are
read through a zero-copy view).

>>> import numpy as np
>>> key = [0, 1, 2, 3, 0, 1, 2, 3]; off = [0, 4, 8]
>>> pages = EnginePages(np.array(key), np.array(off), np.array([64, 64]), np.array([1, 1]), 4, 16)
>>> hicache_run(pages, 4, 8, "write_through", False)[:2]
([0, 48], [0, 0])
>>> hicache_run(pages, 5, 0, "write_through", False)[0]
[0, 48]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from heapq import heappop, heappush
from typing import ClassVar

import numpy as np

from ..pages import EnginePages
from .base import OffloadModel, OffloadResult, TierConfig, register_offload_model

__all__ = ["HICACHE", "HiCacheOffload", "hicache_run"]

LOAD_BACK_THRESHOLD = 10
"""Host hits shorter than this many tokens are not loaded (``urc.py:576``)."""
_THRESHOLD = {"write_through": 1, "write_through_selective": 2}


class _Node:
    __slots__ = ("alive", "dev", "first", "gen", "hits", "host", "id", "length", "lock", "nchild", "ndev", "parent",
                 "src", "time")

    def __init__(self, nid: int, parent: _Node | None, src: int, length: int, first: int, gen: int, time: int) -> None:
        self.id = nid
        self.parent = parent
        self.src = src  # offset of its first page in the key list (-1: generated pages)
        self.length = length
        self.first = first
        self.gen = gen  # the request's generated-page key, or -1
        self.nchild = 0  # children (device or host)
        self.ndev = 0  # children on the device
        self.lock = 0
        self.time = time
        self.dev = True
        self.host = False
        self.alive = True
        self.hits = 0


class _Sim:
    """One serial run: the device tree of :mod:`stackdist.serving.sglang` plus HiCache's host pool."""

    def __init__(self, pages: EnginePages, num_pages: int, host_pages: int, write: str) -> None:
        # a zero-copy view (indexing it gives ints): a list of the ~9 M keys would cost a third of a run
        self.key: memoryview = np.ascontiguousarray(pages.key, dtype=np.int64).data
        self.B = pages.page_tokens
        self.n_keys = max(pages.n_keys, 1)
        self.free = num_pages
        self.host_free = host_pages
        self.write_back = write == "write_back"
        self.threshold = _THRESHOLD.get(write, 0)
        self.clock = 0
        self.root = _Node(0, None, -1, 0, -1, -1, 0)
        self.root.lock = 1
        self.nodes = [self.root]
        self.first_node: dict[int, _Node] = {}
        self.dev_heap: list[tuple[int, int]] = []
        self.host_heap: list[tuple[int, int]] = []
        self.duplicates: dict[int, _Node] = {}  # write_back: nodes on both tiers, registration order
        self.written = self.evicted = self.refused = 0

    # -- leaf sets (lazy heaps: an entry is valid while its node is such a leaf with that time) --
    def _dleaf(self, n: _Node) -> bool:
        return n.alive and n.dev and n.lock == 0 and n.ndev == 0 and n is not self.root

    def _hleaf(self, n: _Node) -> bool:
        return n.alive and not n.dev and n.host and n.nchild == 0 and n.lock == 0

    def _push(self, n: _Node) -> None:  # _dleaf / _hleaf, tested once each (the hottest call)
        if n.lock or not n.alive:
            return
        if n.dev:
            if n.ndev == 0 and n is not self.root:
                heappush(self.dev_heap, (n.time, n.id))
        elif n.host and n.nchild == 0:
            heappush(self.host_heap, (n.time, n.id))

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _register(self, n: _Node) -> None:
        if self.write_back and n.dev and n.host:
            self.duplicates.setdefault(n.id, n)

    # -- tree --
    def _common(self, c: _Node, base: int, i: int, L: int, plen: int) -> int:
        if c.gen >= 0:
            return min(c.length, L - i)
        hi = min(c.length, L - i, plen - i)
        key, src, at = self.key, c.src, base + i
        if key[src + hi - 1] == key[at + hi - 1]:  # page ids are prefix-chained: a match is a prefix
            return hi
        lo = 1  # the first page matched (it is the child's key)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if key[src + mid - 1] == key[at + mid - 1]:
                lo = mid
            else:
                hi = mid
        return lo

    def _split(self, c: _Node, m: int) -> _Node:
        nn = _Node(len(self.nodes), c.parent, c.src, m, c.first, c.gen, self._tick())
        self.nodes.append(nn)
        nn.nchild, nn.ndev = 1, int(c.dev)
        nn.lock, nn.dev, nn.host, nn.hits = c.lock, c.dev, c.host, c.hits
        self.first_node[nn.first] = nn
        c.parent = nn
        c.src += m
        c.length -= m
        c.first = self.key[c.src]
        self.first_node[c.first] = c
        self._register(nn)
        return nn

    def _lock(self, n: _Node, delta: int) -> None:
        while n is not self.root:
            n.lock += delta
            if n.lock == 0:
                self._push(n)
            n = n.parent  # type: ignore[assignment]

    def _match(self, base: int, L: int, plen: int, gkey: int) -> tuple[int, _Node, int, _Node]:
        """match_prefix over ``L`` pages: (device pages, last device node, pages, last node)."""
        t = self._tick()
        node, i, dev_i, dev_node = self.root, 0, 0, self.root
        while i < L:
            c = self.first_node.get(self.key[base + i] if i < plen else gkey)
            if c is None:
                break
            c.time = t
            self._push(c)
            m = self._common(c, base, i, L, plen)
            i += m
            node = self._split(c, m) if m < c.length else c
            if node.dev:
                dev_i, dev_node = i, node
            if node is not c:  # the match ended inside c
                break
        return dev_i, dev_node, i, node

    # -- host --
    def _delete(self, n: _Node) -> None:
        n.alive = False
        if self.first_node.get(n.first) is n:
            del self.first_node[n.first]
        p = n.parent
        assert p is not None
        p.nchild -= 1
        if n.dev:
            p.ndev -= 1
        self.duplicates.pop(n.id, None)
        self._push(p)

    def _evict_host(self, need: int) -> int:
        freed = 0
        if self.write_back:  # release host copies of nodes also on the device first
            for spare in (True, False):
                for nid, n in list(self.duplicates.items()):
                    if freed >= need:
                        break
                    if not (n.alive and n.dev and n.host):
                        self.duplicates.pop(nid, None)
                        continue
                    if spare and self._dleaf(n):
                        continue
                    n.host = False
                    self.host_free += n.length
                    self.evicted += n.length
                    freed += n.length
                    self.duplicates.pop(nid, None)
        while freed < need and self.host_heap:
            t, nid = heappop(self.host_heap)
            n = self.nodes[nid]
            if not (self._hleaf(n) and n.time == t):
                continue
            self.host_free += n.length
            self.evicted += n.length
            freed += n.length
            self._delete(n)
        return freed

    def _write(self, n: _Node) -> bool:
        """Back ``n`` up to the host (its pages all at once); False when refused."""
        if n.host:
            return True
        if self.host_free < n.length:
            self._evict_host(n.length - self.host_free)
            if self.host_free < n.length:  # what it evicted stays evicted
                self.refused += 1
                return False
        self.host_free -= n.length
        self.written += n.length
        n.host = True
        self._register(n)
        return True

    def _write_through(self, n: _Node) -> None:
        chain = [n]
        a = n.parent
        while a is not None and a is not self.root and not a.host:
            chain.append(a)
            a = a.parent
        for x in reversed(chain):
            if not self._write(x):
                return

    def _count_hit(self, n: _Node) -> None:
        if self.write_back or not n.dev:
            return
        n.hits += 1
        if not n.host and n.hits >= self.threshold > 0:
            self._write_through(n)

    # -- device --
    def _demote(self, n: _Node) -> None:
        n.dev = False
        self.free += n.length
        p = n.parent
        assert p is not None
        p.ndev -= 1
        self._push(p)
        self._push(n)

    def _drop_subtree(self, n: _Node) -> bool:
        below = [c for c in self.nodes[n.id + 1:] if c.alive and self._under(c, n)] if n.nchild else []
        if any(c.lock for c in below):
            return False
        for c in sorted(below, key=self._depth, reverse=True):
            if c.host:
                self.host_free += c.length
                self.evicted += c.length
            self._delete(c)
        self.free += n.length
        self._delete(n)
        return True

    def _under(self, c: _Node, n: _Node) -> bool:
        p = c.parent
        while p is not None:
            if p is n:
                return True
            p = p.parent
        return False

    @staticmethod
    def _depth(c: _Node) -> int:
        d, p = 0, c.parent
        while p is not None:
            d, p = d + 1, p.parent
        return d

    def _evict(self, tokens: int) -> None:
        done = 0
        while done < tokens and self.dev_heap:
            t, nid = heappop(self.dev_heap)
            n = self.nodes[nid]
            if not (self._dleaf(n) and n.time == t):
                continue
            if n.host:
                self._demote(n)
            elif self.write_back:
                if self._write(n):
                    self._demote(n)
                elif not self._drop_subtree(n):
                    continue
            else:
                assert n.nchild == 0, "an unwritten device leaf with children"
                self.free += n.length
                self._delete(n)
            done += n.length * self.B

    def _evict_to_free(self, tokens: int) -> None:
        if tokens - self.free * self.B > 0:
            self._evict(tokens - self.free * self.B)

    # -- insert (checkpoint) --
    def _insert(self, base: int, L: int, plen: int, gkey: int, inserted: int) -> tuple[int, int]:
        """_insert_helper over ``L`` pages; returns (pages already in the tree, of them host-only
        nodes the request's pages were given to)."""
        t = self._tick()
        node, i, adopted = self.root, 0, 0
        while i < L:
            c = self.first_node.get(self.key[base + i] if i < plen else gkey)
            if c is None:
                break
            c.time = t
            self._push(c)
            m = self._common(c, base, i, L, plen)
            i += m
            node = self._split(c, m) if m < c.length else c
            if not node.dev:  # _unevict_node_on_insert
                node.dev = True
                adopted += node.length
                node.parent.ndev += 1  # type: ignore[union-attr]
                self._register(node)
                self._push(node)
            if i > inserted:
                self._count_hit(node)
        if i < L:
            nn = _Node(len(self.nodes), node, base + i if i < plen else -1, L - i,
                       self.key[base + i] if i < plen else gkey, -1 if i < plen else gkey, self._tick())
            self.nodes.append(nn)
            self.first_node[nn.first] = nn
            node.nchild += 1
            node.ndev += 1
            self._push(nn)
            if L > inserted:
                self._count_hit(nn)
        return i, adopted

    def _checkpoint(self, r: int, base: int, L: int, plen: int, lock: list[_Node], protected: list[int],
                    inserted: list[int]) -> None:
        gkey = self.n_keys + r
        pre = adopted = 0
        if L > 0:
            pre, adopted = self._insert(base, L, plen, gkey, inserted[r])
            inserted[r] = max(inserted[r], L)
        else:
            self._tick()
        if pre > protected[r]:
            self.free += pre - protected[r] - adopted
        if 0 < plen < L:
            self._insert(base, plen, plen, gkey, plen)
        node = self._match(base, L, plen, gkey)[3] if L > 0 else self.root
        protected[r] = L
        self._lock(lock[r], -1)
        self._lock(node, 1)
        lock[r] = node

    def run(self, offsets: np.ndarray, P: np.ndarray, O: np.ndarray, decode: bool) -> tuple[list[int], list[int], int]:
        """Every request in order; returns (device hits, host hits, first failing request or -1)."""
        B = self.B
        n = len(P)
        dev_hits, host_hits = [0] * n, [0] * n
        lock: list[_Node] = [self.root] * n
        protected, inserted = [0] * n, [0] * n
        for r in range(n):
            p, base = int(P[r]), int(offsets[r])
            plen, gkey = p // B, self.n_keys + r
            # arrival: match, load back, lock, allocate
            cap = (p - 1) // B
            dm, dnode, m, best = self._match(base, cap, plen, gkey) if cap > 0 else (0, self.root, 0, self.root)
            loaded = 0
            if m > dm and (m - dm) * B >= LOAD_BACK_THRESHOLD:
                self._lock(best, 1)
                if self.free < m - dm:
                    self._evict((m - dm - self.free) * B)
                if self.free >= m - dm:
                    self.free -= m - dm
                    x = best
                    while not x.dev:
                        x.dev = True
                        x.parent.ndev += 1  # type: ignore[union-attr]
                        x = x.parent  # type: ignore[assignment]
                    loaded = m - dm
                    dnode = best
                    x = best
                    while x is not self.root:
                        self._register(x)
                        x = x.parent  # type: ignore[assignment]
                else:
                    self._lock(best, -1)
                    self._lock(dnode, 1)
            else:
                self._lock(dnode, 1)
            dev_hits[r], host_hits[r] = dm * B, loaded * B
            lock[r] = dnode
            protected[r] = dm + loaded
            self._evict_to_free(p - B * (dm + loaded) + B)
            need = (p + B - 1) // B - dm - loaded
            if need > self.free:
                return dev_hits, host_hits, r
            self.free -= need
            self._checkpoint(r, base, plen, plen, lock, protected, inserted)  # prefill end
            seq = p
            steps = max(int(O[r]), 1) - 1 if decode else 0
            if steps:  # decode: every step evicts to one free page; a page when the token starts one
                self._evict_to_free(B)
                first = seq + 1 + (-seq) % B  # the first step whose token starts a page
                last = p + steps
                k = len(range(first, last + 1, B))  # pages the steps start
                if self.free > k:  # never short of a page: no step evicts
                    self.free -= k
                else:
                    for s in range(first, last + 1, B):
                        if s != first:
                            self._evict_to_free(B)
                        if self.free < 1:
                            return dev_hits, host_hits, r
                        self.free -= 1
                        if s < last:
                            self._evict_to_free(B)
                seq = last
            self._checkpoint(r, base, seq // B, plen, lock, protected, inserted)  # finish
            if seq % B:
                self.free += 1
            self._lock(lock[r], -1)
        return dev_hits, host_hits, -1


def hicache_run(pages: EnginePages, num_pages: int | None, host_pages: int | None, write: str,
                decode: bool) -> tuple[list[int], list[int], int, tuple[int, int, int]]:
    """One serial run with ``num_pages`` device pages and ``host_pages`` host pages (None: never
    evicts). Returns (device hits, host hits, first failing request or -1, (pages written to the
    host, evicted from it, refused writes))."""
    P, O = pages.input_tokens, pages.output_tokens
    B = pages.page_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)
    total = int(((written + B - 1) // B).sum()) + 1
    sim = _Sim(pages, total if num_pages is None else int(num_pages), total if host_pages is None else int(host_pages),
               write)
    dev, host, failed = sim.run(pages.offsets, P, O, decode)
    return dev, host, failed, (sim.written, sim.evicted, sim.refused)


class HiCacheOffload(OffloadModel):
    """SGLang's HiCache host tier as an offload model (module docstring)."""

    name = "hicache"
    follows = ("SGLang 0.5.23 HiCache: UnifiedRadixCache with its HybridCacheController and host pool, "
               "the hierarchical cache as read in the Python UnifiedTreeCore")
    behind = "sglang"
    driven = False
    tiers = ("host",)
    tier_memory: ClassVar[Mapping[str, str]] = {"host": "dram"}
    unit = "pages"
    options: ClassVar[Mapping[str, tuple[str, ...]]] = {"write": ("write_through", "write_through_selective",
                                                                  "write_back")}
    defaults: ClassVar[Mapping[str, str]] = {"write": "write_through"}
    organisation = ("SGLang HiCache: a host memory pool behind the device radix cache, written {write}; "
                    "a device-evicted node with a host copy stays in the tree and is loaded back when a "
                    "prompt continues into it; host-only leaves evicted by LRU")

    def simulate(self, pages: EnginePages, gpu_pools: Sequence[int | None], gpu_hits: np.ndarray,
                 configs: Sequence[TierConfig], decode: bool) -> OffloadResult:
        shape = (len(gpu_pools), len(configs), pages.n_requests)
        host = np.full(shape, -1, np.int64)
        device = np.full(shape, -1, np.int64)
        written = np.full(shape[:2], -1, np.int64)
        evicted = np.full(shape[:2], -1, np.int64)
        failed = np.full(shape[:2], -1, np.int64)
        for i, pool in enumerate(gpu_pools):
            if (np.asarray(gpu_hits[i]) < 0).any():
                continue
            for j, config in enumerate(configs):
                dev, hh, fail, stats = hicache_run(pages, pool, config.size("host"), config.option("write"), decode)
                if fail >= 0:  # not seen: the peak pages of a serial request are the plain model's
                    continue
                device[i, j], host[i, j] = dev, hh
                written[i, j], evicted[i, j], failed[i, j] = stats
        return OffloadResult(self.name, tuple(gpu_pools), tuple(configs), np.asarray(gpu_hits), {"host": host}, host,
                             {"host": written}, {"host": evicted}, failed, pages.page_tokens, device)


HICACHE = register_offload_model(HiCacheOffload())
"""The registered SGLang HiCache model."""
