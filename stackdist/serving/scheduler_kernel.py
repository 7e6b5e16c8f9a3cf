"""The compiled scheduler: :func:`stackdist.serving.scheduler._run` (vLLM 0.33.0's sync v1
``Scheduler`` over one full-attention group) on flat arrays, equal to it on every request
(``tests/serving/test_scheduler.py`` checks both against vLLM's own runs and each other on seeded
random traces).

The state, and why each operation is O(1) amortised:

- **Free queue** (vLLM's ``FreeKVCacheBlockQueue``): a doubly linked list over block ids with
  block 0 (vLLM's null block, never free) as its sentinel: ``nxt[0]`` is the head (the next block
  handed out, evicting its hash), ``prv[0]`` the tail. Touching a cached block unlinks it;
  freeing prepends uncached blocks and appends cached ones (``block_pool.py:706-729``, ``:816``).
- **Prefix cache** (``BlockHashToBlockMap``): for each key an intrusive list of the blocks holding
  it, in insertion order (``key_head``/``key_tail`` per key, ``knext``/``kprev`` per block); a
  lookup takes the list's first block, as ``get_one_block`` does. Keys are the trace's dense page
  ids; a block holding generated tokens gets a key of its own (request ``i``'s ``j``-th block past
  its full prompt blocks: ``gen_base[i] + j``), so only its own re-admission can hit it.
- **Requests**: each owns a slice of one block-table array sized for its longest sequence
  (``cdiv(P + max_tokens, B)`` blocks: ``max_tokens - 1`` generated tokens are ever written);
  waiting is a ring buffer (preempted requests go to its head), running an array compacted after
  each step (finishing keeps the others' order).

Per step the cost is O(running + blocks allocated or freed + the head's lookup), as in the
reference; a pool run is O(steps x running + tokens / B).
"""

from __future__ import annotations

import numpy as np

from stackdist.engine.kernels import njit

__all__ = ["scheduler_run"]


@njit(cache=True, nogil=True)
def _unlink(nxt, prv, b):  # type: ignore[no-untyped-def]
    nxt[prv[b]] = nxt[b]
    prv[nxt[b]] = prv[b]


@njit(cache=True, nogil=True)
def _push_head(nxt, prv, b):  # type: ignore[no-untyped-def]
    h = nxt[0]
    nxt[b], prv[b] = h, 0
    prv[h] = b
    nxt[0] = b


@njit(cache=True, nogil=True)
def _push_tail(nxt, prv, b):  # type: ignore[no-untyped-def]
    t = prv[0]
    prv[b], nxt[b] = t, 0
    nxt[t] = b
    prv[0] = b


@njit(cache=True, nogil=True)
def _key(q, j, keys, key_off, n_prompt_keys, gen_base):  # type: ignore[no-untyped-def]
    if j < n_prompt_keys[q]:
        return keys[key_off[q] + j]
    return gen_base[q] + j - n_prompt_keys[q]


@njit(cache=True, nogil=True)
def scheduler_run(keys, key_off, input_tokens, max_tokens, arrival, n_keys, n_blocks, page,  # type: ignore[no-untyped-def]
                  max_num_seqs, max_num_batched_tokens, step_fixed_s, step_per_token_s):
    """One pool: (error, first_hit, preemptions, first_sched, first_token, finish), times absolute.
    ``error`` is 0, or 1 when a step scheduled nothing (a request that cannot fit: the caller
    checks sizes first, so this is a defect guard)."""
    n = input_tokens.shape[0]
    B = page
    n_prompt_keys = input_tokens // B
    cap = (input_tokens + max_tokens + B - 1) // B
    gen_base = np.empty(n, np.int64)
    blocks_off = np.empty(n, np.int64)
    g, o = n_keys, 0
    for i in range(n):
        gen_base[i] = g
        g += cap[i] - n_prompt_keys[i]
        blocks_off[i] = o
        o += cap[i]
    n_all_keys = g
    table = np.empty(o, np.int32)
    nblk = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    computed = np.zeros(n, np.int64)
    cached = np.zeros(n, np.int64)
    in_cached = np.zeros(n, np.bool_)
    first_hit = np.full(n, -1, np.int64)
    preemptions = np.zeros(n, np.int64)
    first_sched = np.full(n, np.nan)
    first_tok = np.full(n, np.nan)
    finish = np.full(n, np.nan)

    nxt = np.empty(n_blocks, np.int32)
    prv = np.empty(n_blocks, np.int32)
    for b in range(n_blocks):
        nxt[b] = b + 1 if b + 1 < n_blocks else 0
        prv[b] = b - 1 if b > 0 else n_blocks - 1
    if n_blocks == 1:
        nxt[0] = prv[0] = 0
    nfree = n_blocks - 1
    ref = np.zeros(n_blocks, np.int32)
    bkey = np.full(n_blocks, -1, np.int64)
    knext = np.full(n_blocks, -1, np.int32)
    kprev = np.full(n_blocks, -1, np.int32)
    key_head = np.full(n_all_keys, -1, np.int32)
    key_tail = np.full(n_all_keys, -1, np.int32)

    order = np.argsort(arrival, kind="mergesort")
    ring = np.empty(n + 1, np.int64)
    wh, wc, rcap = 0, 0, n + 1
    running = np.empty(n, np.int64)
    nrun = 0
    sched = np.empty(n, np.int64)
    sched_n = np.empty(n, np.int64)
    comp = np.empty(int(cap.max()) if n else 1, np.int32)
    gone = np.zeros(n, np.bool_)

    clock, nx, done = 0.0, 0, 0
    while done < n:
        while nx < n and arrival[order[nx]] <= clock:
            ring[(wh + wc) % rcap] = order[nx]
            wc += 1
            nx += 1
        if wc == 0 and nrun == 0:
            clock = arrival[order[nx]]
            continue
        budget = max_num_batched_tokens
        ns = 0
        preempted = False
        i = 0
        while i < nrun and budget > 0:
            q = running[i]
            num_tokens = input_tokens[q] + generated[q]
            nn = min(num_tokens - computed[q], budget)
            if nn == 0:
                i += 1
                continue
            ok = False
            while True:
                # allocate(q, nn, no computed blocks, whole=False); q is in the cache already
                local = computed[q]
                need = max((local + nn + B - 1) // B - nblk[q], 0)
                if need <= nfree:
                    ok = True
                    break
                v = running[nrun - 1]
                nrun -= 1
                nfree = _release(v, table, blocks_off, nblk, ref, bkey, nxt, prv, nfree)
                cached[v] = 0
                in_cached[v] = False
                computed[v] = 0
                preemptions[v] += 1
                wh = (wh - 1) % rcap
                ring[wh] = v
                wc += 1
                preempted = True
                if v == q:
                    break
            if not ok:
                break
            nfree = _allocate(q, nn, comp, 0, num_tokens, keys, key_off, n_prompt_keys, gen_base, table, blocks_off,
                              nblk, cached, in_cached, computed, ref, bkey, knext, kprev, key_head, key_tail, nxt, prv,
                              nfree, B)
            sched[ns] = q
            sched_n[ns] = nn
            ns += 1
            budget -= nn
            i += 1
        if not preempted:
            while wc > 0 and budget > 0 and nrun < max_num_seqs:
                q = ring[wh]
                num_tokens = input_tokens[q] + generated[q]
                nc = 0
                for j in range((num_tokens - 1) // B):  # lookup
                    b = key_head[_key(q, j, keys, key_off, n_prompt_keys, gen_base)]
                    if b < 0:
                        break
                    comp[nc] = b
                    nc += 1
                hit = nc * B
                nn = min(num_tokens - hit, budget)
                # whole=True: the whole current sequence, then the chunk (not yet in the cache: nblk is 0)
                fresh = 0
                for k in range(nc):
                    if ref[comp[k]] == 0:
                        fresh += 1
                if max((num_tokens + B - 1) // B - nc - nblk[q], 0) + fresh > nfree:
                    break
                if max((hit + nn + B - 1) // B - nc - nblk[q], 0) + fresh > nfree:
                    break
                nfree = _allocate(q, nn, comp, nc, num_tokens, keys, key_off, n_prompt_keys, gen_base, table,
                                  blocks_off, nblk, cached, in_cached, computed, ref, bkey, knext, kprev, key_head,
                                  key_tail, nxt, prv, nfree, B)
                wh = (wh + 1) % rcap
                wc -= 1
                running[nrun] = q
                nrun += 1
                computed[q] = hit
                if first_hit[q] < 0:
                    first_hit[q] = hit
                    first_sched[q] = clock
                sched[ns] = q
                sched_n[ns] = nn
                ns += 1
                budget -= nn
        total = 0
        for k in range(ns):
            total += sched_n[k]
        if total == 0:
            return 1, first_hit, preemptions, first_sched, first_tok, finish
        end = clock + step_fixed_s + total * step_per_token_s
        for k in range(ns):
            computed[sched[k]] += sched_n[k]
        any_gone = False
        for k in range(ns):
            q = sched[k]
            if computed[q] < input_tokens[q] + generated[q]:
                continue
            generated[q] += 1
            if generated[q] == 1:
                first_tok[q] = end
            if generated[q] >= max_tokens[q]:
                finish[q] = end
                gone[q] = True
                any_gone = True
                nfree = _release(q, table, blocks_off, nblk, ref, bkey, nxt, prv, nfree)
                cached[q] = 0
                in_cached[q] = False
                done += 1
        if any_gone:
            m = 0
            for k in range(nrun):
                if not gone[running[k]]:
                    running[m] = running[k]
                    m += 1
            nrun = m
        clock = end
    return 0, first_hit, preemptions, first_sched, first_tok, finish


@njit(cache=True, nogil=True)
def _allocate(q, nn, comp, nc, num_tokens, keys, key_off, n_prompt_keys, gen_base, table, blocks_off,  # type: ignore[no-untyped-def]
              nblk, cached, in_cached, computed, ref, bkey, knext, kprev, key_head, key_tail, nxt, prv, nfree, B):
    """``KVCacheManager.allocate_slots`` once the caller checked the blocks fit: touch the hit
    blocks, take new ones from the free queue's head (evicting their hashes), cache the full
    blocks of the scheduled chunk. Returns the free count."""
    base = blocks_off[q]
    local = computed[q] + nc * B
    for k in range(nc):
        b = comp[k]
        if ref[b] == 0:
            _unlink(nxt, prv, b)
            nfree -= 1
        ref[b] += 1
        table[base + nblk[q]] = b
        nblk[q] += 1
    for _ in range((local + nn + B - 1) // B - nblk[q]):
        b = nxt[0]
        _unlink(nxt, prv, b)
        nfree -= 1
        h = bkey[b]
        if h >= 0:  # evicted from the prefix cache
            if kprev[b] >= 0:
                knext[kprev[b]] = knext[b]
            else:
                key_head[h] = knext[b]
            if knext[b] >= 0:
                kprev[knext[b]] = kprev[b]
            else:
                key_tail[h] = kprev[b]
            bkey[b] = -1
        ref[b] = 1
        table[base + nblk[q]] = b
        nblk[q] += 1
    upto = min(local + nn, num_tokens) // B  # cache_blocks
    for j in range(cached[q], upto):
        b = table[base + j]
        if bkey[b] < 0:
            h = _key(q, j, keys, key_off, n_prompt_keys, gen_base)
            bkey[b] = h
            t = key_tail[h]
            kprev[b], knext[b] = t, -1
            if t >= 0:
                knext[t] = b
            else:
                key_head[h] = b
            key_tail[h] = b
    cached[q] = max(cached[q], upto)
    in_cached[q] = True
    return nfree


@njit(cache=True, nogil=True)
def _release(q, table, blocks_off, nblk, ref, bkey, nxt, prv, nfree):  # type: ignore[no-untyped-def]
    """Free a request's blocks: uncached ones to the free queue's head (the table's last one ends
    at the head), cached ones to its tail in reverse table order. Returns the free count."""
    base = blocks_off[q]
    m = nblk[q]
    for k in range(m):
        b = table[base + k]
        ref[b] -= 1
        if ref[b] == 0 and bkey[b] < 0:
            _push_head(nxt, prv, b)
            nfree += 1
    for k in range(m - 1, -1, -1):
        b = table[base + k]
        if ref[b] == 0 and bkey[b] >= 0:
            _push_tail(nxt, prv, b)
            nfree += 1
    nblk[q] = 0
    return nfree
