"""The compiled form of :mod:`.hybrid` (vLLM 0.33.0's hybrid KV cache): the same calls, the same
order, numba instead of dicts.

:mod:`.hybrid` is the reference and states the rules with vLLM 0.33.0's file:line (``vllm/v1/core/``):
the pool and free queue (``block_pool.py:202`` ``get_cached_block``, ``:816`` ``free_blocks``), the
lookup (``kv_cache_coordinator.py:835`` ``find_longest_cache_hit``; the managers' ``find_hit`` at
``single_type_kv_cache_manager.py:797`` full, ``:1002`` sliding, ``:1355`` chunked, ``:1470`` Mamba),
the allocation (``:176``, ``kv_cache_coordinator.py:295``), caching (``:477``, ``:1067``
``reachable_block_mask``), freeing (``:682`` ``remove_skipped_blocks``, ``kv_cache_coordinator.py:397``),
Mamba's align mode (``:1428``-``:2028``) and the scheduler's Mamba split (``sched/scheduler.py:546``).
This module follows it function for function (each njit function below names the method of
:mod:`.hybrid` it restates), so a fix there is ported here line by line, and
``tests/serving/test_hybrid_kernel.py`` checks the two equal per request (hits, longest single
group hit, failed request) on seeded random traces of every group kind, tiny pools, decode and
prefill chunks; ``tests/test_hybrid_end_to_end.py`` checks both against vLLM on every committed run.

State (one pool of ``N`` blocks; arrays of ``M = min(N, the never-evicting pool + 1)`` rows:
a request takes at most one new block per position and group, so no id at or above the
never-evicting pool (:func:`never_evicting_pool`) is ever handed out, and a larger pool costs no more):

- ``L`` (int32, ``M + 4`` rows of next/prev): two intrusive doubly linked lists, the free queue's
  ``front`` (sentinels M, M + 1) and ``back`` (M + 2, M + 3); the blocks never handed out are the
  ids ``fresh``..N - 1 between them (:class:`.hybrid._Pool`'s three parts).
- ``R`` ref counts; ``NK`` how many hashes a block has (0 = uncached), ``NT`` its primary's tokens;
  ``SC[b * K + s]`` its s-th hash as ``key * G + group`` (K slots a block, one at first: every
  hash of a block names a page at the block's own position (keys are prefix-chained page ids), so
  :meth:`.hybrid._Pool.cache` never adds a second, and ``Mamba.cache`` adds one only for a block
  whose primary ends beyond it, which that makes impossible; a run that needs more all the same
  stops and is rerun with 2K). About 33 bytes a block beside the per-key and per-request tables.
- ``KS[group * n_keys + key]``: first and last entry (``b * K + s``) of the key's cached blocks in
  insertion order, linked through ``SL`` (vLLM keeps duplicates; a lookup takes the first). Keys
  of generated blocks (``n_keys + r * 2**24 + page``, :meth:`.hybrid._Request.block_key`) are
  never looked up and are kept in the block's slots only.
- Per (group, request) ``q = g * n_requests + r``: the block table ``T[TO[q]:TO[q] + NB[q]]``,
  ``HNC``/``NC`` (``n_cached`` present / value), and Mamba's ``retired``, ``last_state`` (-2 =
  none), ``allocated``, checkpoint ``(CKP, CKI)`` (CKP 0 = none).

Complexity: O(blocks touched + events x groups) per pool, the same walk as :mod:`.hybrid`.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.traces import RequestTrace

from .hybrid import KINDS, GroupSpec, HybridResult
from .pages import EnginePages, engine_pages
from .results import check_pools, run_pools
from .schedule import Schedule, event_order

__all__ = ["HybridRunner", "hybrid_pool_run", "never_evicting_pool", "simulate_hybrid_fast"]

FULL, SLIDING, CHUNKED, MAMBA = range(4)
_CODE = {k: i for i, k in enumerate(KINDS)}
# scalars S: fresh, free count, N, M, K, error (1: a block needs more than K hashes; 2: a table or
# the pool ran out: a bug), n_keys, G, n_requests
_FRESH, _NFREE, _N, _M, _K, _ERR, _NKEYS, _G, _NREQ = range(9)
# group parameters GP[g]: kind, block, window, chunk, checkpoint alignment, need blocks, admission cap (-1 none)
_KIND, _B, _W, _C, _AL, _NEED, _CAP = range(7)


@njit(cache=True, nogil=True)
def _cdiv(a, b):  # type: ignore[no-untyped-def]
    return -(-a // b)


@njit(cache=True, nogil=True)
def _unlink(L, b):  # type: ignore[no-untyped-def]
    p = L[b, 1]
    q = L[b, 0]
    L[p, 0] = q
    L[q, 1] = p


@njit(cache=True, nogil=True)
def _evict(b, NK, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    """``_Pool.evict``: drop every hash of ``b``."""
    K = S[_K]
    G = S[_G]
    nkeys = S[_NKEYS]
    for s in range(NK[b]):
        e = b * K + s
        code = SC[e]
        key = code // G
        if key < nkeys:
            idx = (code % G) * nkeys + key
            p = SL[e, 1]
            n = SL[e, 0]
            if p >= 0:
                SL[p, 0] = n
            else:
                KS[idx, 0] = n
            if n >= 0:
                SL[n, 1] = p
            else:
                KS[idx, 1] = p
    NK[b] = 0


@njit(cache=True, nogil=True)
def _has(b, code, NK, SC, K):  # type: ignore[no-untyped-def]
    for s in range(NK[b]):
        if SC[b * K + s] == code:
            return True
    return False


@njit(cache=True, nogil=True)
def _cache(b, g, key, ntok, NK, NT, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    """``_Pool.cache`` (``_insert_block_hash``)."""
    K = S[_K]
    G = S[_G]
    code = key * G + g
    if _has(b, code, NK, SC, K):
        return
    if NK[b] == 0:
        NT[b] = ntok
    if NK[b] == K:
        S[_ERR] = 1
        return
    e = b * K + NK[b]
    SC[e] = code
    nkeys = S[_NKEYS]
    if key < nkeys:
        idx = g * nkeys + key
        t = KS[idx, 1]
        SL[e, 1] = t
        SL[e, 0] = -1
        if t >= 0:
            SL[t, 0] = e
        else:
            KS[idx, 0] = e
        KS[idx, 1] = e
    NK[b] += 1


@njit(cache=True, nogil=True)
def _get_new(L, R, NK, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    """``_Pool.get_new`` for one block: the front's head, else a fresh id, else the back's head."""
    M = S[_M]
    b = L[M, 0]
    if b != M + 1:
        _unlink(L, b)
    elif S[_FRESH] < S[_N]:
        b = S[_FRESH]
        if b >= M:
            S[_ERR] = 2
            return 0
        S[_FRESH] += 1
    else:
        b = L[M + 2, 0]
        if b == M + 3:
            S[_ERR] = 2
            return 0
        _unlink(L, b)
    _evict(b, NK, SC, SL, KS, S)
    R[b] = 1
    S[_NFREE] -= 1
    return b


@njit(cache=True, nogil=True)
def _touch(b, L, R, S):  # type: ignore[no-untyped-def]
    """``_Pool.touch`` for one block."""
    if b == 0:
        return
    if R[b] == 0:
        _unlink(L, b)
        S[_NFREE] -= 1
    R[b] += 1


@njit(cache=True, nogil=True)
def _free_blocks(buf, n, tmp, L, R, NK, S):  # type: ignore[no-untyped-def]
    """``_Pool.free_blocks(buf[:n])``: unhashed blocks to the front in order, hashed to the back."""
    M = S[_M]
    nf = 0
    for i in range(n):
        b = buf[i]
        if b == 0:
            continue
        R[b] -= 1
        if R[b] == 0:
            S[_NFREE] += 1
            if NK[b] > 0:
                t = L[M + 3, 1]
                L[t, 0] = b
                L[b, 1] = t
                L[b, 0] = M + 3
                L[M + 3, 1] = b
            else:
                tmp[nf] = b
                nf += 1
    for i in range(nf - 1, -1, -1):
        b = tmp[i]
        q = L[M, 0]
        L[M, 0] = b
        L[b, 1] = M
        L[b, 0] = q
        L[q, 1] = b


@njit(cache=True, nogil=True)
def _block_key(r, j, b, key, off, P, S):  # type: ignore[no-untyped-def]
    """``_Request.block_key``."""
    i = (j + 1) * (b // 16) - 1
    if i < P[r] // 16:
        return key[off[r] + i]
    return S[_NKEYS] + r * (1 << 24) + i


@njit(cache=True, nogil=True)
def _first(g, k, KS, S):  # type: ignore[no-untyped-def]
    """The first cached block of (g, k), or -1."""
    nkeys = S[_NKEYS]
    if k >= nkeys:
        return -1
    e = KS[g * nkeys + k, 0]
    return -1 if e < 0 else e // S[_K]


@njit(cache=True, nogil=True)
def _all_cached(k, gids, g0, g1, KS, S):  # type: ignore[no-untyped-def]
    """``_Pool.get_cached`` succeeds (every group of the spec has ``k`` cached)."""
    for i in range(g0, g1):
        if _first(gids[i], k, KS, S) < 0:
            return False
    return True


@njit(cache=True, nogil=True)
def _put_hit(j, k, gids, g0, g1, HB, KS, S):  # type: ignore[no-untyped-def]
    for i in range(g0, g1):
        HB[gids[i], j] = _first(gids[i], k, KS, S)


@njit(cache=True, nogil=True)
def _find_hit(kind, g0, g1, gids, GP, r, max_len, HB, HN, key, off, P, KS, S):  # type: ignore[no-untyped-def]
    """The managers' ``find_hit`` (and ``_cached_run``) for one spec's groups ``gids[g0:g1]``:
    fills ``HB[g, :HN[g]]``; returns the tokens hit."""
    g = gids[g0]
    b = GP[g, _B]
    n = max_len // b
    if kind == FULL or kind == CHUNKED:
        start = 0
        if kind == CHUNKED and max_len > 0:
            start = max_len // GP[g, _C] * GP[g, _C] // b
        for i in range(g0, g1):
            for j in range(start):
                HB[gids[i], j] = 0
        j = start
        while j < n:
            k = _block_key(r, j, b, key, off, P, S)
            if not _all_cached(k, gids, g0, g1, KS, S):
                break
            _put_hit(j, k, gids, g0, g1, HB, KS, S)
            j += 1
        ln = max(j, start)
        for i in range(g0, g1):
            HN[gids[i]] = ln
        return ln * b
    if kind == SLIDING:
        need = GP[g, _NEED]
        for i in range(g0, g1):
            for j in range(max(n, 0)):
                HB[gids[i], j] = 0
        run = 0
        for j in range(n - 1, -1, -1):
            k = _block_key(r, j, b, key, off, P, S)
            if not _all_cached(k, gids, g0, g1, KS, S):
                run = 0
                continue
            _put_hit(j, k, gids, g0, g1, HB, KS, S)
            run += 1
            if run >= need:
                for i in range(g0, g1):
                    HN[gids[i]] = j + run
                return (j + run) * b
        for i in range(g0, g1):
            HN[gids[i]] = run
        return run * b
    # Mamba: the rightmost cached state at or below the candidate
    for j in range(n - 1, -1, -1):
        k = _block_key(r, j, b, key, off, P, S)
        if _all_cached(k, gids, g0, g1, KS, S):
            for i in range(g0, g1):
                for jj in range(j):
                    HB[gids[i], jj] = 0
            _put_hit(j, k, gids, g0, g1, HB, KS, S)
            for i in range(g0, g1):
                HN[gids[i]] = j + 1
            return (j + 1) * b
    for i in range(g0, g1):
        HN[gids[i]] = 0
    return 0


@njit(cache=True, nogil=True)
def _lookup(r, GP, spec_off, gids, simple, HB, HN, HL, key, off, P, TOK, KS, S):  # type: ignore[no-untyped-def]
    """``HybridRun._lookup``: fills the per-group hit blocks; returns (hit, longest single hit)."""
    G = S[_G]
    hit_len = TOK[r] - 1  # kv_cache_manager.py:301 (num_tokens - 1)
    longest = 0
    for g in range(G):
        HN[g] = -1
        HL[g] = 0
    n_specs = len(spec_off) - 1
    while True:
        cur = hit_len
        for s in range(n_specs):
            g0, g1 = spec_off[s], spec_off[s + 1]
            first = gids[g0]
            kind = GP[first, _KIND]
            if kind == FULL and HN[first] >= 0:
                cur = min(cur, HL[first])
                continue
            new = _find_hit(kind, g0, g1, gids, GP, r, cur, HB, HN, key, off, P, KS, S)
            cur = new
            for i in range(g0, g1):
                HL[gids[i]] = new
            longest = max(longest, cur)
        if cur >= hit_len:
            break
        hit_len = cur
        if simple:
            break
    for g in range(G):
        if GP[g, _KIND] == FULL and HN[g] >= 0:
            HN[g] = min(HN[g], max(_cdiv(hit_len, GP[g, _B]), 0))
        HN[g] = max(HN[g], 0)
    return hit_len, longest


@njit(cache=True, nogil=True)
def _skipped(kind, GP, g, n):  # type: ignore[no-untyped-def]
    """The managers' ``skipped``."""
    if kind == SLIDING:
        return max(0, n - GP[g, _W] + 1)
    if kind == CHUNKED:
        return n // GP[g, _C] * GP[g, _C]
    if kind == MAMBA:
        return n - 1
    return 0


@njit(cache=True, nogil=True)
def _masked(kind, GP, g, j, r, P, JUN):  # type: ignore[no-untyped-def]
    """``mask`` at block j (True: cache it): sliding, the ``need`` blocks ending at the replay
    boundary and at the junction; Mamba, the block ending there; else every block."""
    if kind != SLIDING and kind != MAMBA:
        return True
    b = GP[g, _B]
    for which in range(2):
        t = P[r] - 1 if which == 0 else JUN[r]
        if which == 1 and t == 0:
            break
        if kind == SLIDING:
            e = t // b
            if e - GP[g, _NEED] <= j < e:
                return True
        elif j == t // b - 1:
            return True
    return False


@njit(cache=True, nogil=True)
def _ck_position(tokens, b):  # type: ignore[no-untyped-def]
    """``_checkpoint_position``."""
    return max((tokens - 1) // b * b, 0)


@njit(cache=True, nogil=True)
def _ck_valid(start, end, position, b, grid):  # type: ignore[no-untyped-def]
    """``_checkpoint_valid``."""
    if grid == 0:
        return False
    return (start % b == 0 and _cdiv(end, b) - 2 > (start - 1) // b and start + b <= position
            and start < position < end and (position - start) % grid == 0)


@njit(cache=True, nogil=True)
def _num_to_allocate(g, q, r, tokens, HB, hlen, computed, gate, GP, T, TO, NB, HNC, CKP, CKI, R, P, TOK):  # type: ignore[no-untyped-def]
    """``num_to_allocate`` (``gate``: the admission check); ``HB[g, :hlen]`` the hit."""
    kind = GP[g, _KIND]
    b = GP[g, _B]
    if kind == MAMBA:
        new = _cdiv(tokens, b) - hlen - NB[q]
        position = _ck_position(tokens, b)
        idx = _cdiv(tokens, b) - 2
        prefill_end = max(P[r], TOK[r] - 1)
        needs = (GP[g, _AL] > 0 and tokens >= prefill_end and _ck_valid(computed, tokens, position, b, GP[g, _AL])
                 and idx >= 0 and (idx >= NB[q] or T[TO[q] + idx] == 0))
        if not needs:
            position = 0
        if not gate:
            CKP[q] = position
            CKI[q] = _cdiv(tokens, b) - 2 if position > 0 else 0
        if new > 0:
            new = min(new, 1 + (1 if position > 0 else 0))
        for i in range(hlen):
            x = HB[g, i]
            if x != 0 and R[x] == 0:
                new += 1
        return new
    need = _cdiv(tokens, b)
    if gate and GP[g, _CAP] >= 0:
        need = min(need, GP[g, _CAP])
    have = NB[q]
    if HNC[q]:
        return max(need - have, 0)
    skip = _skipped(kind, GP, g, computed) // b
    new = max(need - max(skip, hlen + have), 0)
    for i in range(max(0, skip - have), hlen):
        x = HB[g, i]
        if x != 0 and R[x] == 0:
            new += 1
    return new


@njit(cache=True, nogil=True)
def _add_hit(g, q, HB, hlen, computed, GP, T, TO, NB, HNC, NC, L, R, S):  # type: ignore[no-untyped-def]
    """``_Manager.add_hit``."""
    skip = max(_skipped(GP[g, _KIND], GP, g, computed) // GP[g, _B], 0)
    base = TO[q]
    for j in range(skip):
        T[base + j] = 0
    n = skip
    for i in range(skip, hlen):
        x = HB[g, i]
        _touch(x, L, R, S)
        T[base + n] = x
        n += 1
    NB[q] = n
    NC[q] = n
    HNC[q] = 1


@njit(cache=True, nogil=True)
def _append_new(q, count, T, TO, TCAP, NB, L, R, NK, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    for _ in range(count):
        if NB[q] >= TCAP[q]:
            S[_ERR] = 2
            return
        T[TO[q] + NB[q]] = _get_new(L, R, NK, SC, SL, KS, S)
        NB[q] += 1


@njit(cache=True, nogil=True)
def _allocate_group(g, q, tokens, GP, T, TO, TCAP, NB, ALC, LST, CKP, L, R, NK, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    """``allocate`` (``_Manager`` and ``Mamba``)."""
    b = GP[g, _B]
    need = _cdiv(tokens, b)
    if GP[g, _KIND] != MAMBA:
        n = need - NB[q]
        if n > 0:
            _append_new(q, n, T, TO, TCAP, NB, L, R, NK, SC, SL, KS, S)
        return
    ck = 1 if CKP[q] > 0 else 0
    if need <= NB[q] and ck == 0:
        ALC[q] = 1
        return
    prev = NB[q]
    if ALC[q] or prev > 0:
        LST[q] = prev - 1
    while NB[q] < need - 1 - ck:
        if NB[q] >= TCAP[q]:
            S[_ERR] = 2
            return
        T[TO[q] + NB[q]] = 0
        NB[q] += 1
    _append_new(q, max(need - NB[q], 0), T, TO, TCAP, NB, L, R, NK, SC, SL, KS, S)
    ALC[q] = 1


@njit(cache=True, nogil=True)
def _remove_skipped(g, q, computed, GP, T, TO, NB, RET, LST, buf, tmp, L, R, NK, S):  # type: ignore[no-untyped-def]
    """``remove_skipped`` (``_Manager`` and ``Mamba``)."""
    kind = GP[g, _KIND]
    b = GP[g, _B]
    base = TO[q]
    if kind != MAMBA:
        n = _skipped(kind, GP, g, computed)
        if n <= 0:
            return
        last = min(n // b, NB[q])
        nf = 0
        for i in range(last - 1, -1, -1):
            if T[base + i] == 0:
                break
            buf[nf] = T[base + i]
            nf += 1
            T[base + i] = 0
        if nf:
            _free_blocks(buf, nf, tmp, L, R, NK, S)
        return
    if computed - 1 > 0:
        first = RET[q]
        last = min((computed - 1) // b, NB[q])
        if first < last:
            nf = 0
            for i in range(last - 1, first - 1, -1):
                if T[base + i] != 0:
                    buf[nf] = T[base + i]
                    nf += 1
                    T[base + i] = 0
            if nf:
                _free_blocks(buf, nf, tmp, L, R, NK, S)
            RET[q] = last
    state = LST[q]
    if state != -2 and state < _cdiv(computed, b) - 1:
        i = state if state >= 0 else NB[q] + state  # a Python list index
        if T[base + i] != 0:
            buf[0] = T[base + i]
            _free_blocks(buf, 1, tmp, L, R, NK, S)
            T[base + i] = 0


@njit(cache=True, nogil=True)
def _cache_group(g, q, r, tokens, GP, T, TO, NB, HNC, NC, CKP, CKI, key, off, P, TOK, JUN, NK, NT, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    """``cache`` (``_Manager`` and ``Mamba``)."""
    kind = GP[g, _KIND]
    b = GP[g, _B]
    base = TO[q]
    done = NC[q] if HNC[q] else 0
    full = min(tokens, TOK[r] // 16 * 16) // b
    if done < full:
        for j in range(done, full):
            x = T[base + j]
            if x == 0 or not _masked(kind, GP, g, j, r, P, JUN):
                continue
            _cache(x, g, _block_key(r, j, b, key, off, P, S), (j + 1) * b, NK, NT, SC, SL, KS, S)
        NC[q] = full
        HNC[q] = 1
    if kind != MAMBA:
        return
    if CKP[q] > 0:
        position = CKP[q]
        blk = T[base + CKI[q]]
        prompt_checkpoint = position == _ck_position(P[r], b)
        retained = position % b == 0 and _masked(kind, GP, g, position // b - 1, r, P, JUN)
        if not prompt_checkpoint and not retained and position != JUN[r]:
            _evict(blk, NK, SC, SL, KS, S)
            return
        if NK[blk] > 0 and NT[blk] == position:
            return
        _evict(blk, NK, SC, SL, KS, S)
        _cache(blk, g, _block_key(r, position // b - 1, b, key, off, P, S), position, NK, NT, SC, SL, KS, S)
        return
    if tokens <= 0 or tokens % b or tokens != _ck_position(P[r], b):
        return
    j = _cdiv(tokens, b) - 1
    if j >= NB[q] or T[base + j] == 0:
        return
    src = T[base + j]
    if NK[src] > 0 and NT[src] == tokens:
        return
    k = _block_key(r, j, b, key, off, P, S)
    code = k * S[_G] + g
    if NK[src] > 0 and SC[src * S[_K]] != code and not _has(src, code, NK, SC, S[_K]) and NT[src] < tokens:
        _evict(src, NK, SC, SL, KS, S)
    _cache(src, g, k, tokens, NK, NT, SC, SL, KS, S)


@njit(cache=True, nogil=True)
def _free_group(g, q, GP, T, TO, NB, HNC, NC, RET, LST, ALC, CKP, buf, tmp, L, R, NK, S):  # type: ignore[no-untyped-def]
    """``free`` (``_Manager`` and ``Mamba``): the blocks from the first non-null, last first."""
    RET[q] = 0
    LST[q] = -2
    ALC[q] = 0
    CKP[q] = 0
    base = TO[q]
    head = 0
    while head < NB[q] and T[base + head] == 0:
        head += 1
    nf = 0
    for i in range(NB[q] - 1, head - 1, -1):
        buf[nf] = T[base + i]
        nf += 1
    _free_blocks(buf, nf, tmp, L, R, NK, S)
    NB[q] = 0
    NC[q] = 0
    HNC[q] = 0


@njit(cache=True, nogil=True)
def _mamba_split(r, start, n, sb, grid, chunk, P, TOK, JUN):  # type: ignore[no-untyped-def]
    """``HybridRun._mamba_split``."""
    prefill_end = max(P[r], TOK[r] - 1)
    if start >= prefill_end:
        return n
    last = _ck_position(TOK[r], sb)
    end = start + n
    internal = grid != 0 and end >= prefill_end and _ck_valid(start, end, _ck_position(prefill_end, sb), sb, grid)
    if internal:
        last = 0
    if end < prefill_end:
        aligned = end // sb * sb
        if aligned > start or sb <= chunk:
            end = aligned
    j = JUN[r]
    s0 = (start // sb + 1) * sb if start % sb and not internal else 0
    s2 = start + (j - start) // sb * sb if start < j < end else 0
    best = end
    for x in (s0, last, s2):
        if start < x < end and x < best:
            best = x
    return max(best - start, 0)


@njit(cache=True, nogil=True)
def _hybrid_kernel(key, off, P, ev_kind, ev_req, ev_k, GP, spec_off, gids, simple, sb, grid, chunk, split,
                   self_chunk, TO, TCAP, N, M, K, n_keys, widest, hits, longest):  # type: ignore[no-untyped-def]
    """Replay the events on one pool of ``N`` blocks (``HybridRun`` + ``simulate_hybrid``'s loop);
    fills ``hits`` and ``longest``; returns (failing request or -1, error code)."""
    G = GP.shape[0]
    n_req = len(P)
    S = np.zeros(9, np.int64)
    S[_FRESH] = 1
    S[_NFREE] = N - 1
    S[_N] = N
    S[_M] = M
    S[_K] = K
    S[_NKEYS] = n_keys
    S[_G] = G
    S[_NREQ] = n_req
    L = np.empty((M + 4, 2), np.int32)
    L[M, 0] = M + 1
    L[M + 1, 1] = M
    L[M + 2, 0] = M + 3
    L[M + 3, 1] = M + 2
    R = np.zeros(M, np.int32)
    NK = np.zeros(M, np.int8)
    NT = np.zeros(M, np.int32)
    SC = np.zeros(M * K, np.int64)
    SL = np.empty((M * K, 2), np.int32)
    KS = np.full((G * n_keys, 2), -1, np.int32)
    T = np.zeros(TO[-1], np.int32)
    NB = np.zeros(G * n_req, np.int64)
    HNC = np.zeros(G * n_req, np.int8)
    NC = np.zeros(G * n_req, np.int64)
    RET = np.zeros(G * n_req, np.int64)
    LST = np.full(G * n_req, -2, np.int64)
    ALC = np.zeros(G * n_req, np.int8)
    CKP = np.zeros(G * n_req, np.int64)
    CKI = np.zeros(G * n_req, np.int64)
    TOK = P.copy()
    JUN = np.zeros(n_req, np.int64)
    HB = np.zeros((G, widest), np.int32)
    HN = np.zeros(G, np.int64)
    HL = np.zeros(G, np.int64)
    big = 1
    for x in TCAP:
        big = max(big, x)
    buf = np.empty(big + 1, np.int32)
    tmp = np.empty(big + 1, np.int32)
    for e in range(len(ev_kind)):
        r = ev_req[e]
        kind = ev_kind[e]
        ok = True
        if kind == 3:  # arrive
            TOK[r] = P[r]
            JUN[r] = 0
            hit, lng = _lookup(r, GP, spec_off, gids, simple, HB, HN, HL, key, off, P, TOK, KS, S)
            hits[r] = hit
            longest[r] = lng
            JUN[r] = lng if lng > hit else 0
            gate = 0
            for g in range(G):
                gate += _num_to_allocate(g, g * n_req + r, r, P[r], HB, HN[g], hit, True, GP, T, TO, NB, HNC, CKP,
                                         CKI, R, P, TOK)
            if gate > S[_NFREE]:
                ok = False
            done = hit
            first = True
            while ok and (first or done < P[r]):
                n = min(chunk, P[r] - done)
                if split and chunk == self_chunk:
                    n = _mamba_split(r, done, n, sb, grid, self_chunk, P, TOK, JUN)
                    if n == 0:
                        ok = False
                        break
                ok = _allocate(r, n, done, first, GP, HB, HN, T, TO, TCAP, NB, HNC, NC, RET, LST, ALC, CKP, CKI,
                               buf, tmp, key, off, P, TOK, JUN, sb, L, R, NK, NT, SC, SL, KS, S)
                done += n
                first = False
        elif kind == 1:  # decode step k
            TOK[r] = P[r] + ev_k[e]
            ok = _allocate(r, 1, P[r] + ev_k[e] - 1, False, GP, HB, HN, T, TO, TCAP, NB, HNC, NC, RET, LST, ALC,
                           CKP, CKI, buf, tmp, key, off, P, TOK, JUN, sb, L, R, NK, NT, SC, SL, KS, S)
        elif kind == 0:  # finish
            for g in range(G):
                _free_group(g, g * n_req + r, GP, T, TO, NB, HNC, NC, RET, LST, ALC, CKP, buf, tmp, L, R, NK, S)
        if S[_ERR]:
            return r, S[_ERR]
        if not ok:
            return r, 0
    return -1, 0


@njit(cache=True, nogil=True)
def _allocate(r, new_tokens, computed, use_hit, GP, HB, HN, T, TO, TCAP, NB, HNC, NC, RET, LST, ALC, CKP, CKI, buf, tmp,
              key, off, P, TOK, JUN, sb, L, R, NK, NT, SC, SL, KS, S):  # type: ignore[no-untyped-def]
    """``HybridRun._allocate``: free skipped blocks, count, touch the hit, allocate, cache."""
    G = GP.shape[0]
    n_req = S[_NREQ]
    for g in range(G):
        _remove_skipped(g, g * n_req + r, computed, GP, T, TO, NB, RET, LST, buf, tmp, L, R, NK, S)
    tokens = computed + new_tokens
    need = 0
    for g in range(G):
        need += _num_to_allocate(g, g * n_req + r, r, tokens, HB, HN[g] if use_hit else 0, computed, False, GP, T, TO,
                                 NB, HNC, CKP, CKI, R, P, TOK)
    if need > S[_NFREE]:
        return False
    if use_hit:
        for g in range(G):
            _add_hit(g, g * n_req + r, HB, HN[g], computed, GP, T, TO, NB, HNC, NC, L, R, S)
    for g in range(G):
        _allocate_group(g, g * n_req + r, tokens, GP, T, TO, TCAP, NB, ALC, LST, CKP, L, R, NK, SC, SL, KS, S)
    cacheable = min(tokens, TOK[r])
    if G > 1:
        cacheable = cacheable // sb * sb
    for g in range(G):
        _cache_group(g, g * n_req + r, r, cacheable, GP, T, TO, NB, HNC, NC, CKP, CKI, key, off, P, TOK, JUN, NK, NT,
                     SC, SL, KS, S)
    return True


def never_evicting_pool(pages: EnginePages, groups: Sequence[GroupSpec], decode: bool) -> int:
    """The pool :func:`.hybrid.simulate_hybrid` runs for ``None``: more blocks than the trace ever
    holds (every group's blocks of every request, + 2), so nothing is evicted and no allocation
    fails. O(requests).

    >>> import numpy as np
    >>> t = RequestTrace(np.arange(2), np.array([0, 1, 2]), np.full(2, 16), np.zeros(2),
    ...     np.array([16, 16]), np.array([1, 1]), block_size=16)
    >>> never_evicting_pool(engine_pages(t, 16), [GroupSpec("full", 16)] * 2, False)
    6
    """
    P, O = pages.input_tokens, pages.output_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)
    return len(groups) * int((-(-written // 16)).sum()) + 2


class HybridRunner:
    """One trace, model and schedule prepared for the kernel: :meth:`run` at any pool (the inputs
    are shared by every pool; each run holds only its own pool's state).

    >>> import numpy as np
    >>> t = RequestTrace(np.arange(4), np.array([0, 2, 4]), np.full(4, 16), np.zeros(2),
    ...     np.array([32, 32]), np.array([1, 1]), block_size=16)
    >>> runner = HybridRunner(engine_pages(t, 16), [GroupSpec("full", 16)], Schedule.serial(2), False, 8192, 1 << 40)
    >>> runner.run(2)[2], runner.never
    (0, 6)
    """

    def __init__(self, pages: EnginePages, groups: Sequence[GroupSpec], schedule: Schedule, decode: bool,
                 chunk_tokens: int, max_model_len: int) -> None:
        G = len(groups)
        n = pages.n_requests
        P = pages.input_tokens.astype(np.int64)
        written = P + (np.maximum(pages.output_tokens, 1) - 1 if decode else 0)
        if written.size and int(written.max()) >= 2**31 - 1:
            raise ValueError(f"a request's tokens must fit in int32; got {int(written.max())}")
        gp = np.zeros((G, 7), np.int64)
        for g, spec in enumerate(groups):
            cap = -1
            if spec.kind == "sliding":  # SlidingWindowSpec.max_admission_blocks_per_request
                cap = -(-min(spec.window - 1 + chunk_tokens, max_model_len) // spec.block_size) + 1
            elif spec.kind == "chunked":
                cap = -(-min(spec.chunk + chunk_tokens, max_model_len) // spec.block_size)
            gp[g] = (_CODE[spec.kind], spec.block_size, spec.window, spec.chunk, spec.checkpoint_alignment,
                     spec.need_blocks, cap)
        spec_groups: dict[GroupSpec, list[int]] = {}
        for g, spec in enumerate(groups):
            spec_groups.setdefault(spec, []).append(g)
        ordered = sorted(spec_groups.items(), key=lambda sg: sg[0].kind != "full")
        self.gids = np.array([g for _, gs in ordered for g in gs], np.int64)
        self.spec_off = np.concatenate(([0], np.cumsum([len(gs) for _, gs in ordered]))).astype(np.int64)
        self.simple = len(ordered) == 2 and ordered[0][0].kind == "full"
        mamba = next((s for s in groups if s.kind == "mamba"), None)
        self.split = mamba is not None
        self.grid = mamba.checkpoint_alignment if mamba is not None else 0
        self.sb = lcm(*[s.block_size for s in groups])
        self.gp = gp
        caps = np.stack([-(-written // spec.block_size) for spec in groups]) if G else np.zeros((0, n), np.int64)
        self.tcap = caps.reshape(-1).astype(np.int64)
        self.to = np.concatenate(([0], np.cumsum(self.tcap))).astype(np.int64)
        self.widest = int((-(-P // 16)).max(initial=0)) + 1
        events = event_order(schedule, pages.output_tokens, decode)
        self.kind, self.req, self.k = events.kind.astype(np.int64), events.request, events.k
        self.never = never_evicting_pool(pages, groups, decode)
        self.chunk = chunk_tokens if schedule.is_serial else 1 << 62
        self.chunk_tokens = chunk_tokens
        self.pages = pages

    def run(self, pool: int | None, slots: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
        """(hits, longest single-group hits, failing request or -1) at one pool (None: never evicts);
        ``slots`` hashes a block at first (doubled while a block needs more)."""
        p = self.pages
        N = self.never if pool is None else int(pool)
        M = min(N, self.never + 1)
        K = slots
        while True:
            if M * K >= 2**31 - 8 or K > 64:
                raise ValueError(f"the hybrid kernel's pool must fit in int32 block ids; got {M:,} blocks "
                                 f"x {K} hashes each")
            hits = np.zeros(p.n_requests, np.int64)
            longest = np.zeros(p.n_requests, np.int64)
            failed, err = _hybrid_kernel(p.key, p.offsets, p.input_tokens.astype(np.int64), self.kind, self.req, self.k,
                                         self.gp, self.spec_off, self.gids, self.simple, self.sb, self.grid, self.chunk,
                                         self.split, self.chunk_tokens, self.to, self.tcap, N, M, K,
                                         max(p.n_keys, 1), self.widest, hits, longest)
            if err == 1:  # a block took more than K hashes: again with room for more
                K *= 2
                continue
            if err:
                raise RuntimeError(f"hybrid kernel: internal error {err} at request {failed} (a table or the pool ran "
                                   "out: a bug, please report)")
            if failed >= 0:
                hits[:] = -1
                longest[:] = -1
            else:
                longest = np.maximum(longest, hits)
            return hits, longest, int(failed)


def _resolve(trace: RequestTrace | EnginePages, schedule: Schedule | str) -> tuple[EnginePages, Schedule]:
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, 16)
    if isinstance(schedule, str):
        if schedule != "serial":
            if not isinstance(trace, RequestTrace):
                raise ValueError("a timed schedule from a name needs the RequestTrace")
            schedule = Schedule.from_service_model(trace)
        else:
            schedule = Schedule.serial(pages.n_requests)
    return pages, schedule


def hybrid_pool_run(trace: RequestTrace | EnginePages, groups: Sequence[GroupSpec], pool: int | None,
                    schedule: Schedule | str = "serial", decode: bool = False, chunk_tokens: int = 8192,
                    max_model_len: int = 1 << 40) -> tuple[np.ndarray, np.ndarray, int]:
    """One exact hybrid run at ``pool`` blocks: (hit tokens per request, the longest single-group
    hit per request, the failing request or -1; both arrays -1 when it fails).
    Complexity: O(pages x groups + decode steps x groups), compiled.

    >>> import numpy as np
    >>> t = RequestTrace(np.arange(8) % 4, np.array([0, 4, 8]), np.full(8, 16), np.zeros(2),
    ...     np.array([64, 64]), np.array([1, 1]), block_size=16)
    >>> from stackdist.serving.hybrid import kv_cache_groups
    >>> g = kv_cache_groups([GroupSpec("sliding", 16, window=32), GroupSpec("full", 16)])
    >>> hybrid_pool_run(t, g, None)[0].tolist()
    [0, 48]
    """
    pages, sched = _resolve(trace, schedule)
    return HybridRunner(pages, groups, sched, decode, chunk_tokens, max_model_len).run(pool)


def simulate_hybrid_fast(
    trace: RequestTrace | EnginePages,
    groups: Sequence[GroupSpec],
    pool_blocks: Sequence[int | None],
    schedule: Schedule | str = "serial",
    decode: bool = False,
    chunk_tokens: int = 8192,
    max_model_len: int = 1 << 40,
    threads: int = 1,
) -> HybridResult:
    """:func:`.hybrid.simulate_hybrid`, compiled: the same arguments and the same result, per
    request (tested). ``threads`` pools run at once (each holds its own pool's state).
    Complexity: O(pages x groups + decode steps x groups) per pool.

    >>> import numpy as np
    >>> t = RequestTrace(np.arange(4), np.array([0, 2, 4]), np.full(4, 16), np.zeros(2),
    ...     np.array([32, 32]), np.array([1, 1]), block_size=16)
    >>> simulate_hybrid_fast(t, [GroupSpec("full", 16)], [2, None]).failed_request.tolist()
    [0, -1]
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1; got {chunk_tokens}")
    if not groups:
        raise ValueError("a model needs at least one KV cache group")
    pages, sched = _resolve(trace, schedule)
    pools = check_pools(pool_blocks, 1)
    prep = HybridRunner(pages, groups, sched, decode, chunk_tokens, max_model_len)
    def one(pool: int | None) -> tuple[np.ndarray, int]:
        hits, longest, failed = prep.run(pool)
        return np.stack([hits, longest]), failed

    runs = run_pools(one, pools, threads, "vllm hybrid model:")
    hits = np.stack([h[0] for h, _ in runs])
    longest = np.stack([h[1] for h, _ in runs])
    failed = np.array([f for _, f in runs], np.int64)
    return HybridResult("vllm", pools, hits, failed, None, "per-size", group_hit_tokens=longest)
