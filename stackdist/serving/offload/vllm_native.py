"""vLLM 0.33.0's native CPU offloading (``--kv-offloading-backend native``), serial schedule, exactly.

The ``OffloadingConnector`` with its CPU manager (``CPUOffloadingManager``, policy ``lru`` or
``arc``), one 16-token block per chunk (its defaults), behind vLLM's GPU prefix cache (the
:mod:`stackdist.serving.vllm` model gives the GPU hits; in a serial run they do not depend on the
CPU tier: loaded blocks become ordinary GPU blocks). Read in vLLM's code and driven on a CPU
(``validation/drive_vllm_offload.py``, notes with file:line in ``validation/OFFLOAD_NOTES.md``;
``off/`` = ``distributed/kv_transfer/kv_connector/v1/offloading/``, ``manager.py`` =
``v1/kv_offload/cpu/manager.py``); the kernels below equal the engine on every request of the
committed runs (``tests/serving/test_offload_vllm_native.py``).

- **Keys**: a request's full prompt blocks, ``floor(P / 16)`` (vLLM's prefix-chained block
  hashes; here the dense page ids, equal iff the whole prefix is equal). Generated blocks are
  never stored (``offload_prompt_only``).
- **Lookup** (``get_num_new_matched_tokens``, ``off/scheduler.py:849-1050``): from block
  ``gpu_hit / 16``, the run of consecutive blocks the tier holds, up to the whole prompt (no
  last-token cap, ``off/scheduler.py:862``); reported as tokens beyond the GPU hit (the
  ``offload_hit_tokens``). When GPU + CPU cover the prompt, the scheduler recomputes the last
  token (``sched.py:3515``): the plan counts ``min(gpu + cpu, P - 1)`` as served.
- **Store** (``_build_store_jobs``, ``off/scheduler.py:1815-2100``; ``prepare_store``,
  ``manager.py:261-360``): in the step that computes them (write-through, not on GPU eviction),
  the request offers its full prompt blocks (after a CPU load only those past the loaded ones:
  ``OffloadPolicy.CHUNK_LEVEL``); blocks already held are not written again; the new ones need
  room all at once: free slots, then policy evictions of blocks outside the offered set; if
  that is not enough nothing is stored (all or nothing). A refused store is retried in later
  steps of the request (with nothing changed in between, a retry in its own decode steps fails
  again, so it is not replayed) and once more when the request is finalized.
- **Step order**: a request finished in step s is finalized in the next ``build_connector_meta``,
  i.e. the next request's first step, after that request's lookup, load and (no load) stores;
  with a load, the next request's stores come in its second step, after the finalization.
- **lru** (``policies/lru.py``): ranks ``(request rank, -position)`` at access and insertion
  (raised only), fresh ranks last block first at finalization; the lowest rank is evicted (kept
  here as one recency list sorted by rank, O(1) per change: see :func:`_lru_kernel`).
- **arc** (``policies/arc.py``): T1 / T2, ghosts B1 / B2 (each trimmed to C), an adaptive T1
  target moved by a store miss found in a ghost list (once per block and request), eviction from
  T1 while its size is at least the target, else T2 (doubly linked lists over block ids here).

Complexity: O(prompt blocks + blocks skipped while evicting) per configuration and GPU pool;
memory O(distinct blocks + requests).

>>> import numpy as np
>>> pages = EnginePages(np.array([0, 1, 0, 1, 2]), np.array([0, 2, 5]), np.array([32, 48]), np.zeros(2, int), 3)
>>> lru, arc = (TierConfig((("cpu", 8),), (("policy", p),)) for p in ("lru", "arc"))
>>> VLLM_NATIVE.simulate(pages, [None], np.array([[0, 0]]), [lru, arc], False).offload_hit_tokens.tolist()
[[[0, 32], [0, 32]]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from stackdist.engine.kernels import njit

from ..pages import EnginePages
from .base import OffloadModel, OffloadResult, TierConfig, register_offload_model
from .linked import append, link_after, unlink

__all__ = ["VLLM_NATIVE", "VllmNativeOffload"]

_POS = 1 << 31  # rank = counter << 32 | (_POS - position): (counter, -position) in one int64


@njit(cache=True, nogil=True)
def _regroup(q, key, off, f, rq, rank, nx, pv, sentinel):  # type: ignore[no-untyped-def]
    """Relink request q's rank group (every held block whose rank is ``(rq, -position)``) right
    after its sentinel, lowest rank (deepest position) first. O(f)."""
    cur = sentinel
    for j in range(f - 1, -1, -1):
        k = key[off + j]
        if rank[k] >= 0 and (rank[k] >> 32) == rq:
            if pv[k] != cur or nx[k] < 0:
                if nx[k] >= 0:
                    unlink(k, nx, pv)
                link_after(k, cur, nx, pv)
            cur = k


@njit(cache=True, nogil=True)
def _lru_store(q, key, off, P, B, C, offer_from, req_rank, seen, prot, rank, nx, pv, root, held, counter, call, stats):  # type: ignore[no-untyped-def]
    """prepare_store over request q's offered blocks (lru). Returns (ok, held, counter)."""
    qb = off[q]
    qf = P[q] // B
    qp = q & 1
    if req_rank[q] < 0:
        counter += 1
        req_rank[q] = counter
        link_after(root + 1 + q, pv[root], nx, pv)  # the group's sentinel at the most recent end
    new = 0
    held_offered = 0
    for j in range(offer_from[q], qf):
        k = key[qb + j]
        prot[k] = call
        if rank[k] < 0:
            new += 1
        else:
            held_offered += 1
            if seen[qp, k] != q:  # on_request_access for a block it had not touched yet: raised only
                nr = (req_rank[q] << 32) | (_POS - (j + 1))
                rank[k] = max(rank[k], nr)
        seen[qp, k] = q
    need = new - (C - held)
    ok = True
    if need > 0 and held - held_offered < need:
        ok = False
        stats[2] += 1
    elif need > 0:  # evict the least recent blocks outside the offered set (sentinels are not blocks)
        c = nx[root]
        ev = 0
        while ev < need:
            k = c
            c = nx[c]
            if k > root or prot[k] == call:
                continue
            unlink(k, nx, pv)
            rank[k] = -1
            held -= 1
            ev += 1
        stats[1] += need
    if ok:
        for j in range(offer_from[q], qf):
            k = key[qb + j]
            if rank[k] < 0:
                rank[k] = (req_rank[q] << 32) | (_POS - (j + 1))
                held += 1
        stats[0] += new
    _regroup(q, key, qb, qf, req_rank[q], rank, nx, pv, root + 1 + q)
    return ok, held, counter


@njit(cache=True, nogil=True)
def _lru_kernel(key, off, P, hits, n_keys, B, C, out_hit, stats):  # type: ignore[no-untyped-def]
    """The serial replay at tier size ``C`` blocks (lru); fills ``out_hit`` (tokens beyond the
    GPU hit ``hits``); ``stats`` += [blocks written, blocks evicted, refused stores].

    The ranks are kept as numbers (``rank``, compared as lru.py compares them) and, for
    eviction, as one recency list sorted by rank: a fresh rank is the largest yet (appended at
    the end); the ranks ``(rq, -position)`` of a request q lie between q's sentinel (appended
    when rq was drawn, above every rank then) and the next larger counter, ordered by position
    (:func:`_regroup` after every change), so the list's head is always the lowest rank."""
    n = len(P)
    root = n_keys  # the list's root; request q's sentinel is node n_keys + 1 + q
    nx = np.full(n_keys + n + 1, -1, np.int32)  # int32: ids < 2**31 (checked by the caller)
    pv = np.full(n_keys + n + 1, -1, np.int32)
    nx[root] = root
    pv[root] = root
    rank = np.full(n_keys, -1, np.int64)  # (counter, -position) of a held block; -1 = not held
    seen = np.full((2, n_keys), -1, np.int32)  # blocks the request touched (by parity: two live requests)
    prot = np.full(n_keys, -1, np.int32)  # the offered set of store call number `call`
    held = 0
    counter = 0
    call = 0
    req_rank = np.full(n, -1, np.int64)
    offer_from = np.zeros(n, np.int64)
    stored = np.zeros(n, np.bool_)
    prev = -1
    for r in range(n):
        f = P[r] // B
        base = off[r]
        h = hits[r] // B
        run = 0
        while h + run < f and rank[key[base + h + run]] >= 0:
            run += 1
        out_hit[r] = run * B
        if run > 0:  # prepare_load: the loaded blocks are accessed at the request's rank
            counter += 1
            req_rank[r] = counter
            link_after(root + 1 + r, pv[root], nx, pv)
            for j in range(h, h + run):
                k = key[base + j]
                seen[r & 1, k] = r
                nr = (counter << 32) | (_POS - (j + 1))
                rank[k] = max(rank[k], nr)
            _regroup(r, key, base, f, counter, rank, nx, pv, root + 1 + r)
            offer_from[r] = h + run  # CHUNK_LEVEL: the loaded blocks are not offered again
        else:  # step 1 computes the prompt: its stores
            call += 1
            ok, held, counter = _lru_store(r, key, off, P, B, C, offer_from, req_rank, seen, prot, rank, nx, pv, root,
                                           held, counter, call, stats)
            stored[r] = ok
        if prev >= 0:  # build_connector_meta: the finished request's last try, then its finalization
            if not stored[prev]:
                call += 1
                ok, held, counter = _lru_store(prev, key, off, P, B, C, offer_from, req_rank, seen, prot, rank, nx, pv,
                                               root, held, counter, call, stats)
                stored[prev] = ok
            pb = off[prev]
            for j in range(P[prev] // B - 1, -1, -1):  # fresh ranks, last block first: to the most recent end
                k = key[pb + j]
                if rank[k] >= 0 and seen[prev & 1, k] == prev:
                    counter += 1
                    rank[k] = counter << 32
                    unlink(k, nx, pv)
                    link_after(k, pv[root], nx, pv)
            if nx[root + 1 + prev] >= 0:
                unlink(root + 1 + prev, nx, pv)
        if run > 0:  # step 2 computes the rest of the prompt: its stores
            call += 1
            ok, held, counter = _lru_store(r, key, off, P, B, C, offer_from, req_rank, seen, prot, rank, nx, pv, root,
                                           held, counter, call, stats)
            stored[r] = ok
        prev = r


_T1, _T2, _B1, _B2 = 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _unlink(k, lst, nx, pv, size):  # type: ignore[no-untyped-def]
    size[lst[k]] -= 1
    unlink(k, nx, pv)
    lst[k] = 0


@njit(cache=True, nogil=True)
def _append(k, which, lst, nx, pv, size, n_keys):  # type: ignore[no-untyped-def]
    """Append ``k`` at the MRU end (tail) of list ``which`` (sentinel ``n_keys + which``)."""
    append(k, nx, pv, n_keys + which)
    lst[k] = which
    size[which] += 1


@njit(cache=True, nogil=True)
def _arc_store(q, key, off, P, B, C, offer_from, lst, nx, pv, size, n_keys, target, stamps, call, prot, cand, stats):  # type: ignore[no-untyped-def]
    """prepare_store over request q's offered blocks (arc). ``stamps[qp]`` rows: seen, missed,
    inserted, reused. Returns (ok, target)."""
    qb = off[q]
    qf = P[q] // B
    qp = q & 1
    seen, missed, inserted, reused = stamps[qp, 0], stamps[qp, 1], stamps[qp, 2], stamps[qp, 3]
    new = 0
    for j in range(qf - 1, offer_from[q] - 1, -1):  # ghost hits of the new misses, last block first
        k = key[qb + j]
        prot[k] = call
        if lst[k] == _T1 or lst[k] == _T2:
            continue
        new += 1
        if missed[k] == q:
            continue
        missed[k] = q
        if lst[k] == _B1:
            target = min(target + max(1.0, size[_B2] / size[_B1]), float(C))
            _unlink(k, lst, nx, pv, size)
            _append(k, _B1, lst, nx, pv, size, n_keys)
        elif lst[k] == _B2:
            target = max(target - max(1.0, size[_B1] / size[_B2]), 0.0)
            _unlink(k, lst, nx, pv, size)
            _append(k, _B2, lst, nx, pv, size, n_keys)
    for j in range(offer_from[q], qf):
        k = key[qb + j]
        if (lst[k] == _T1 or lst[k] == _T2) and inserted[k] != q:
            reused[k] = q
        seen[k] = q
    if new == 0:
        return True, target
    need = new - (C - size[_T1] - size[_T2])
    if need > 0:
        if need > size[_T1] + size[_T2]:
            stats[2] += 1
            return False, target
        c1 = nx[n_keys + _T1]  # cursors from the LRU ends, skipping the offered blocks
        c2 = nx[n_keys + _T2]
        vt1 = size[_T1]
        for i in range(need):
            while c1 < n_keys and prot[c1] == call:
                c1 = nx[c1]
            while c2 < n_keys and prot[c2] == call:
                c2 = nx[c2]
            c = -1
            if vt1 >= int(target) and c1 < n_keys:
                c = c1
                c1 = nx[c1]
                vt1 -= 1
            elif c2 < n_keys:
                c = c2
                c2 = nx[c2]
            elif c1 < n_keys:
                c = c1
                c1 = nx[c1]
                vt1 -= 1
            else:
                stats[2] += 1
                return False, target
            cand[i] = c
        for i in range(need):
            c = cand[i]
            ghost = _B1 if lst[c] == _T1 else _B2
            _unlink(c, lst, nx, pv, size)
            _append(c, ghost, lst, nx, pv, size, n_keys)
        for g in (_B1, _B2):
            while size[g] > C:
                _unlink(nx[n_keys + g], lst, nx, pv, size)
        stats[1] += need
    for j in range(offer_from[q], qf):
        k = key[qb + j]
        if lst[k] == _T1 or lst[k] == _T2:
            continue
        if lst[k] != 0:
            _unlink(k, lst, nx, pv, size)
        _append(k, _T1, lst, nx, pv, size, n_keys)
        inserted[k] = q
    stats[0] += new
    return True, target


@njit(cache=True, nogil=True)
def _arc_kernel(key, off, P, hits, n_keys, B, C, out_hit, stats):  # type: ignore[no-untyped-def]
    """The serial replay at tier size ``C`` blocks (arc); as :func:`_lru_kernel`."""
    lst = np.zeros(n_keys + 5, np.int8)
    nx = np.empty(n_keys + 5, np.int32)
    pv = np.empty(n_keys + 5, np.int32)
    for w in range(1, 5):
        nx[n_keys + w] = n_keys + w
        pv[n_keys + w] = n_keys + w
    size = np.zeros(5, np.int64)
    stamps = np.full((2, 4, n_keys), -1, np.int32)
    prot = np.full(n_keys, -1, np.int32)
    n = len(P)
    widest = 1
    for r in range(n):
        widest = max(widest, P[r] // B)
    cand = np.empty(widest, np.int64)
    offer_from = np.zeros(n, np.int64)
    stored = np.zeros(n, np.bool_)
    target = 0.0
    call = 0
    prev = -1
    for r in range(n):
        f = P[r] // B
        base = off[r]
        h = hits[r] // B
        run = 0
        while h + run < f and (lst[key[base + h + run]] == _T1 or lst[key[base + h + run]] == _T2):
            run += 1
        out_hit[r] = run * B
        if run > 0:
            for j in range(h, h + run):
                stamps[r & 1, 0, key[base + j]] = r
                stamps[r & 1, 3, key[base + j]] = r
            offer_from[r] = h + run
        else:
            call += 1
            ok, target = _arc_store(r, key, off, P, B, C, offer_from, lst, nx, pv, size, n_keys, target, stamps, call,
                                    prot, cand, stats)
            stored[r] = ok
        if prev >= 0:
            if not stored[prev]:
                call += 1
                ok, target = _arc_store(prev, key, off, P, B, C, offer_from, lst, nx, pv, size, n_keys, target, stamps,
                                        call, prot, cand, stats)
                stored[prev] = ok
            pp = prev & 1
            pb = off[prev]
            for j in range(P[prev] // B - 1, -1, -1):  # finalization, last block first
                k = key[pb + j]
                if stamps[pp, 0, k] != prev or not (lst[k] == _T1 or lst[k] == _T2):
                    continue
                if stamps[pp, 2, k] == prev and stamps[pp, 3, k] != prev:  # only inserted: MRU of its list
                    w = lst[k]
                    _unlink(k, lst, nx, pv, size)
                    _append(k, w, lst, nx, pv, size, n_keys)
                elif stamps[pp, 3, k] == prev:  # reused: MRU of T2
                    _unlink(k, lst, nx, pv, size)
                    _append(k, _T2, lst, nx, pv, size, n_keys)
        if run > 0:
            call += 1
            ok, target = _arc_store(r, key, off, P, B, C, offer_from, lst, nx, pv, size, n_keys, target, stamps, call,
                                    prot, cand, stats)
            stored[r] = ok
        prev = r


def _kernel_run(pages: EnginePages, hits: np.ndarray, cpu: int | None, policy: str) -> tuple[np.ndarray, np.ndarray]:
    """The tier's hits beyond ``hits`` and [written, evicted, refused] at ``cpu`` blocks (None:
    never evicts)."""
    out = np.zeros(pages.n_requests, np.int64)
    stats = np.zeros(3, np.int64)
    if cpu == 0:  # no connector: plain prefix caching
        return out, stats
    if pages.n_keys + pages.n_requests >= 2**31 - 8:
        raise ValueError(f"page ids and requests must fit in int32; got {pages.n_keys:,} ids and {pages.n_requests:,} requests")
    C = int(pages.full_pages.sum()) + 1 if cpu is None else int(cpu)
    kernel = _lru_kernel if policy == "lru" else _arc_kernel
    kernel(pages.key, pages.offsets, pages.input_tokens, np.asarray(hits, np.int64), max(pages.n_keys, 1),
           pages.page_tokens, C, out, stats)
    return out, stats


class VllmNativeOffload(OffloadModel):
    """vLLM's native CPU offloading as an offload model (module docstring)."""

    name = "vllm-native"
    follows = "vLLM 0.33.0 OffloadingConnector + CPUOffloadingManager (native CPU offloading, 1 block per chunk)"
    behind = "vllm"
    driven = True
    tiers = ("cpu",)
    tier_memory: ClassVar[Mapping[str, str]] = {"cpu": "dram"}
    unit = "blocks"
    options: ClassVar[Mapping[str, tuple[str, ...]]] = {"policy": ("lru", "arc")}
    defaults: ClassVar[Mapping[str, str]] = {"policy": "lru"}
    organisation = ("vLLM native CPU offloading: every full prompt block written through to CPU in the step that "
                    "computes it; the CPU hit continues the GPU prefix; {policy} eviction; a store without room "
                    "for all its new blocks stores none")

    def units_for_bytes(self, size_bytes: int, bytes_per_token: int, options: object, page_tokens: int) -> int:
        """``cpu_bytes // round_up(block bytes, page size)`` (``v1/kv_offload/cpu/spec.py:111-123``:
        a chunk is padded to ``mmap.PAGESIZE``, 4096 bytes here).

        >>> VLLM_NATIVE.units_for_bytes(2**30, 2**10, {}, 16)
        65536
        """
        block = page_tokens * bytes_per_token
        return size_bytes // (-(-block // 4096) * 4096)

    def simulate(self, pages: EnginePages, gpu_pools: Sequence[int | None], gpu_hits: np.ndarray,
                 configs: Sequence[TierConfig], decode: bool) -> OffloadResult:
        shape = (len(gpu_pools), len(configs), pages.n_requests)
        cpu = np.full(shape, -1, np.int64)
        written = np.full(shape[:2], -1, np.int64)
        evicted = np.full(shape[:2], -1, np.int64)
        failed = np.full(shape[:2], -1, np.int64)
        for i in range(len(gpu_pools)):
            if (gpu_hits[i] < 0).any():
                continue
            for j, config in enumerate(configs):
                cpu[i, j], stats = _kernel_run(pages, gpu_hits[i], config.size("cpu"), config.option("policy"))
                written[i, j], evicted[i, j], failed[i, j] = stats
        return OffloadResult(self.name, tuple(gpu_pools), tuple(configs), np.asarray(gpu_hits), {"cpu": cpu}, cpu,
                             {"cpu": written}, {"cpu": evicted}, failed, pages.page_tokens)


VLLM_NATIVE = register_offload_model(VllmNativeOffload())
"""The registered vLLM native CPU offloading model."""
