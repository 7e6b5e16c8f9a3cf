"""LMCache 0.5.6's CPU and local-disk tiers behind vLLM 0.33.0's GPU prefix cache, serial schedule.

LMCache's vLLM connector (``LMCacheConnectorV1``) with ``local_cpu`` (``LocalCPUBackend``) and
optionally ``local_disk`` (``LocalDiskBackend``), LMCache's defaults otherwise
(``save_unfull_chunk`` false, ``cache_policy`` LRU, synchronous loads, ``save_decode_cache``
false), behind vLLM's prefix cache (the :mod:`stackdist.serving.vllm` model gives the GPU hits;
LMCache's loads go into ordinary GPU blocks, so in a serial run the GPU hits do not depend on it).
Read in LMCache's code and driven on a CPU (``validation/drive_lmcache.py``: LMCache's real
scheduler- and worker-side connector, ``LMCacheEngine``, ``StorageManager`` and both backends
behind vLLM's real ``Scheduler``; notes with file:line in ``validation/LMCACHE_NOTES.md``,
``adapter.py`` = ``lmcache/integration/vllm/vllm_v1_adapter.py``, ``sm.py`` =
``lmcache/v1/storage_backend/storage_manager.py``, ``cpu.py`` / ``disk.py`` its local backends).
The kernel equals the engine on every request of the committed runs
(``tests/serving/test_offload_lmcache.py``). Per request, everything happens in its first step:

- **Chunks**: K-token chunks (``chunk_size``, default 256), full ones only: ``floor(P / K)`` per
  prompt, for lookup and store alike (``token_database.py:347-356``); keys prefix-chained (here
  the dense id of the chunk's last page). A tier holds whole chunks: its bytes over the chunk's
  bytes, padded to 4,096 (``cpu.py:885-923``, ``memory_management.py:1338``).
- **Lookup** (``LMCacheEngine.lookup`` via the lookup client, once per request, over the whole
  prompt): the CPU tier's run of leading chunks ``c``, then the disk's run ``d`` from chunk c on
  (never back to the CPU; ``sm.py:972-1010``); ``L = (c + d) K``. Found chunks are pinned and
  touched: moved to each tier's MRU end last chunk first (``sm.py:1042-1045``).
- **The connector's number** (``adapter.py:1451-1455, 1527-1528``): ``L - G`` (G the GPU hit),
  minus 1 when ``L = P`` (the last token is recomputed), 0 when that is not positive; split here
  by tier: the tokens of it in the CPU's run, then the disk's.
- **Load** (``start_load_kv`` -> ``retrieve``), when that number is positive: chunks
  ``floor(G / K)`` to ``L / K - 1``; from the CPU's leading run of them, then the disk's. A CPU
  read changes no recency; a disk read stages each chunk in a new CPU allocation (evicting the
  CPU's least recent chunk that is not pinned nor being read), refreshes the chunk's disk
  recency, and writes it back into the CPU tier at the MRU end (promotion; not if held).
- **Store** (``wait_for_save`` -> ``store``): none if ``L > 0`` and every full chunk was found;
  else chunks ``L / K`` to the last full one, each first taking a CPU allocation (evicting the
  CPU's least recent chunk while the tier is full; a chunk the CPU already holds takes one too);
  if nothing is evictable the store keeps the chunks allocated so far. Each allocated chunk is put
  into the CPU tier at the MRU end unless held (no refresh), and written through to the disk: a
  chunk on disk moves to the disk's MRU end, a new one evicts the disk's least recent written
  chunk until it fits and lands at the MRU end; when no written chunk is left to evict (the
  store's own writes still in flight fill the disk) it is not admitted (``disk.py:383-395``).
- **Decode**: nothing on LMCache's side (``save_decode_cache`` false); it changes the GPU hits only.

Complexity: O(prompt chunks + chunks skipped while evicting) per configuration and GPU pool;
memory O(distinct pages).

>>> import numpy as np
>>> pages = EnginePages(np.array([0, 1, 0, 1, 2]), np.array([0, 2, 5]), np.array([32, 48]), np.zeros(2, int), 3)
>>> config = TierConfig((("cpu", 4), ("disk", 0)), (("chunk", "16"),))  # 16-token chunks, 4 on CPU
>>> LMCACHE.simulate(pages, [None], np.array([[0, 0]]), [config], False).offload_hit_tokens.tolist()
[[[0, 32]]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from stackdist.engine.kernels import njit

from ..pages import EnginePages
from .base import (
    OffloadInfeasible,
    OffloadModel,
    OffloadResult,
    TierConfig,
    register_offload_model,
)
from .linked import append, unlink

__all__ = ["LMCACHE", "LMCacheOffload"]


@njit(cache=True, nogil=True)
def _allocate(r, hnx, hpv, root, pin, busy, state, C, stats):  # type: ignore[no-untyped-def]
    """One CPU allocation: evict the CPU's least recent chunks (while ``state[3]``, r's load:
    not pinned by r's lookup nor being read by r) while the memory is full. ``state`` = [held, in flight,
    disk held, pins active]. False when nothing is evictable."""
    while state[0] + state[1] + 1 > C:
        v = hnx[root]
        while v != root and state[3] and (pin[v] == r or busy[v] == r):
            v = hnx[v]
        if v == root:
            return False
        unlink(v, hnx, hpv)
        state[0] -= 1
        stats[2] += 1
    state[1] += 1
    return True


@njit(cache=True, nogil=True)
def _lmcache_kernel(key, off, P, hits, n_keys, per, K, C, D, out_cpu, out_disk, out_ext, stats):  # type: ignore[no-untyped-def]
    """The serial replay at CPU ``C`` and disk ``D`` chunks (K tokens, ``per`` pages each).
    Fills the per-request CPU and disk tokens beyond the GPU hit and the connector's number;
    ``stats`` += [cpu written, disk written, cpu evicted, disk evicted, stores cut short].
    Returns -1, or the request whose disk read found no CPU memory to stage in."""
    root = n_keys
    hnx = np.full(n_keys + 1, -1, np.int32)  # CPU tier: LRU first after the root; nx = -1: not held
    hpv = np.full(n_keys + 1, -1, np.int32)
    dnx = np.full(n_keys + 1, -1, np.int32)  # disk tier
    dpv = np.full(n_keys + 1, -1, np.int32)
    hnx[root] = root
    hpv[root] = root
    dnx[root] = root
    dpv[root] = root
    pin = np.full(n_keys, -1, np.int32)
    busy = np.full(n_keys, -1, np.int32)
    state = np.zeros(4, np.int64)  # cpu held, cpu allocations in flight, disk held, pins active
    widest = 1
    for r in range(len(P)):
        widest = max(widest, P[r] // K)
    todo = np.empty(widest, np.int64)
    for r in range(len(P)):
        n = P[r] // K
        base = off[r]
        c = 0
        while c < n and hnx[key[base + (c + 1) * per - 1]] >= 0:
            c += 1
        d = 0
        if D > 0:
            while c + d < n and dnx[key[base + (c + d + 1) * per - 1]] >= 0:
                d += 1
        L = (c + d) * K
        for i in range(c - 1, -1, -1):  # pin and touch, last chunk first: chunk 0 ends most recent
            k = key[base + (i + 1) * per - 1]
            pin[k] = r
            unlink(k, hnx, hpv)
            append(k, hnx, hpv, root)
        for i in range(c + d - 1, c - 1, -1):
            k = key[base + (i + 1) * per - 1]
            unlink(k, dnx, dpv)
            append(k, dnx, dpv, root)
        g = hits[r]
        ext = L - g - (1 if L == P[r] else 0)
        ext = max(ext, 0)
        out_ext[r] = ext
        cpu_part = min(c * K, g + ext) - g
        cpu_part = max(cpu_part, 0)
        out_cpu[r] = cpu_part
        out_disk[r] = ext - cpu_part
        state[3] = 1
        if ext > 0:  # load chunks g // K .. L / K - 1
            lo = g // K
            hi = L // K
            if c == 0 or d == 0:
                cc = 0 if c == 0 else hi - lo
            else:
                cc = 0
                while lo + cc < hi and hnx[key[base + (lo + cc + 1) * per - 1]] >= 0:
                    cc += 1
            for i in range(lo, lo + cc):  # CPU reads: held by the reader until the retrieve ends
                busy[key[base + (i + 1) * per - 1]] = r
            dd = 0
            if c == 0 or d == 0:
                dd = hi - lo - cc
            else:
                while lo + cc + dd < hi and dnx[key[base + (lo + cc + dd + 1) * per - 1]] >= 0:
                    dd += 1
            for i in range(lo + cc, lo + cc + dd):  # stage each disk chunk in a CPU allocation
                if not _allocate(r, hnx, hpv, root, pin, busy, state, C, stats):
                    return r
            for i in range(lo + cc, lo + cc + dd):
                k = key[base + (i + 1) * per - 1]
                unlink(k, dnx, dpv)
                append(k, dnx, dpv, root)
            for i in range(lo + cc, lo + cc + dd):  # promotion: written back into the CPU tier
                k = key[base + (i + 1) * per - 1]
                state[1] -= 1
                if hnx[k] < 0:
                    append(k, hnx, hpv, root)
                    state[0] += 1
                    stats[0] += 1
        state[3] = 0  # every pin released
        if not (L > 0 and n * K <= L):  # store chunks L / K ..
            m = 0
            for i in range(L // K, n):
                if not _allocate(r, hnx, hpv, root, pin, busy, state, C, stats):
                    stats[4] += 1
                    break
                todo[m] = key[base + (i + 1) * per - 1]
                m += 1
            for j in range(m):
                k = todo[j]
                state[1] -= 1
                if hnx[k] < 0:
                    append(k, hnx, hpv, root)
                    state[0] += 1
                    stats[0] += 1
            if D > 0:
                pending = 0
                for j in range(m):
                    k = todo[j]
                    if dnx[k] >= 0:
                        unlink(k, dnx, dpv)
                        append(k, dnx, dpv, root)
                        continue
                    if state[2] + pending + 1 > D and state[2] == 0:
                        continue  # nothing written is evictable (the rest is in flight): not admitted
                    while state[2] + pending + 1 > D:
                        v = dnx[root]
                        unlink(v, dnx, dpv)
                        state[2] -= 1
                        stats[3] += 1
                    todo[pending], todo[j] = todo[j], todo[pending]  # the writes land in order
                    pending += 1
                for j in range(pending):
                    append(todo[j], dnx, dpv, root)
                    state[2] += 1
                    stats[1] += 1
    return -1


def _run(pages: EnginePages, hits: np.ndarray, K: int, cpu: int | None, disk: int | None) -> tuple[np.ndarray, ...]:
    n = pages.n_requests
    out_cpu, out_disk, out_ext = (np.zeros(n, np.int64) for _ in range(3))
    stats = np.zeros(5, np.int64)
    if cpu == 0 and not disk:
        return out_cpu, out_disk, out_ext, stats
    if pages.n_keys >= 2**31 - 2:
        raise ValueError(f"page ids must fit in int32; got {pages.n_keys:,}")
    never = int((pages.input_tokens // K).sum()) + 1
    C = never if cpu is None else int(cpu)
    D = never if disk is None else int(disk)
    stuck = _lmcache_kernel(pages.key, pages.offsets, pages.input_tokens, np.asarray(hits, np.int64),
                            max(pages.n_keys, 1), K // pages.page_tokens, K, C, D, out_cpu, out_disk, out_ext, stats)
    if stuck >= 0:
        raise OffloadInfeasible(f"request {stuck} reads chunks from disk but the CPU tier of {C} chunks has no room "
                                "to stage them (every chunk pinned by its lookup): LMCache's retrieve would wait for "
                                "CPU memory forever (busy loop, local_cpu_backend.py:649-700)")
    return out_cpu, out_disk, out_ext, stats


class LMCacheOffload(OffloadModel):
    """LMCache's CPU and disk tiers behind vLLM as an offload model (module docstring)."""

    name = "lmcache"
    follows = "LMCache 0.5.6 LMCacheConnectorV1 + LocalCPUBackend / LocalDiskBackend behind vLLM 0.33.0"
    behind = "vllm"
    driven = True
    tiers = ("cpu", "disk")
    tier_memory: ClassVar[Mapping[str, str]] = {"cpu": "dram", "disk": "ssd"}
    unit = "chunks"
    options: ClassVar[Mapping[str, tuple[str, ...]]] = {"chunk": ()}
    defaults: ClassVar[Mapping[str, str]] = {"chunk": "256"}
    organisation = ("LMCache: full {chunk}-token chunks; a prefix from token 0, CPU first then disk; every new "
                    "chunk written to the CPU and through to the disk when the request's prefill runs; LRU in each "
                    "tier; a disk hit promoted into the CPU")

    def chunk_tokens(self, options: Mapping[str, str], page_tokens: int) -> int:
        chunk = int(options.get("chunk", self.defaults["chunk"]))
        if chunk % page_tokens:
            raise ValueError(f"lmcache: chunk must be a multiple of the engine's {page_tokens}-token page; got {chunk}")
        return chunk

    def units_for_bytes(self, size_bytes: int, bytes_per_token: int, options: Mapping[str, str], page_tokens: int) -> int:
        """Whole chunks of ``chunk x bytes per token`` bytes, padded to 4,096 (LMCache's allocator
        alignment, ``memory_management.py:1338``).

        >>> LMCACHE.units_for_bytes(2**30, 2**10, {"chunk": "256"}, 16)
        4096
        """
        chunk = self.chunk_tokens(options, page_tokens) * bytes_per_token
        return size_bytes // (-(-chunk // 4096) * 4096)

    def simulate(self, pages: EnginePages, gpu_pools: Sequence[int | None], gpu_hits: np.ndarray,
                 configs: Sequence[TierConfig], decode: bool) -> OffloadResult:
        shape = (len(gpu_pools), len(configs), pages.n_requests)
        cpu, disk, ext = (np.full(shape, -1, np.int64) for _ in range(3))
        stats = np.full((len(gpu_pools), len(configs), 5), -1, np.int64)
        infeasible = {}
        for j, config in enumerate(configs):
            K = self.chunk_tokens(dict(config.options), pages.page_tokens)
            for i in range(len(gpu_pools)):
                if (gpu_hits[i] < 0).any():
                    continue
                try:
                    cpu[i, j], disk[i, j], ext[i, j], stats[i, j] = _run(pages, gpu_hits[i], K, config.size("cpu"),
                                                                         config.size("disk"))
                except OffloadInfeasible as exc:
                    infeasible[(i, j)] = str(exc)
        return OffloadResult(self.name, tuple(gpu_pools), tuple(configs), np.asarray(gpu_hits), {"cpu": cpu, "disk": disk},
                             ext, {"cpu": stats[..., 0], "disk": stats[..., 1]}, {"cpu": stats[..., 2], "disk": stats[..., 3]},
                             stats[..., 4], pages.page_tokens, infeasible=infeasible)


LMCACHE = register_offload_model(LMCacheOffload())
"""The registered LMCache model."""
