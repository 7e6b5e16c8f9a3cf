"""The compiled scheduler: :func:`stackdist.serving.scheduler.run_sync` (vLLM 0.33.0's sync v1
``Scheduler`` over one full-attention group) and ``run_async`` (its ``AsyncScheduler`` with a
batch queue of 2) on flat arrays, equal to them on every request (``tests/serving/
test_scheduler.py`` checks both against vLLM's own runs and each other on seeded random traces).
The rules, with vLLM's file:line, are in :mod:`stackdist.serving.scheduler`; this module only
changes the data structures.

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
  (``cdiv(P + max_tokens + 1, B)`` blocks; at most ``max_tokens`` slots past the prompt are ever
  scheduled); waiting is a ring buffer (preempted requests go to its head), running an array
  compacted after each step (finishing keeps the others' order). Scalars shared by the helpers
  live in ``st``: free blocks, the ring's head and length, the running count.

Per step the cost is O(running + blocks allocated or freed + the head's lookup), as in the
reference; a pool run is O(steps x running + tokens / B).
"""

from __future__ import annotations

import numpy as np

from stackdist.engine.kernels import njit

__all__ = ["scheduler_run"]

FREE, HEAD, WAITING, RUNNING = 0, 1, 2, 3  # st[...]


@njit(cache=True, nogil=True)
def _unlink(nxt, prv, b):  # type: ignore[no-untyped-def]
    nxt[prv[b]] = nxt[b]
    prv[nxt[b]] = prv[b]


@njit(cache=True, nogil=True)
def _key(q, j, keys, key_off, n_prompt_keys, gen_base):  # type: ignore[no-untyped-def]
    if j < n_prompt_keys[q]:
        return keys[key_off[q] + j]
    return gen_base[q] + j - n_prompt_keys[q]


@njit(cache=True, nogil=True)
def _cache(q, tokens, num_tokens, K, table, blocks_off, cached, bkey, knext, kprev, key_head, key_tail, B):  # type: ignore[no-untyped-def]
    """``cache_blocks(request, tokens)``: the full blocks of the first ``tokens`` tokens, capped at
    the tokens known, enter the prefix cache (appended to their key's list). ``K``: the key arrays."""
    keys, key_off, n_prompt_keys, gen_base = K
    base = blocks_off[q]
    upto = min(tokens, num_tokens) // B
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


@njit(cache=True, nogil=True)
def _allocate(q, nn, comp, nc, num_tokens, K, table, blocks_off, cap, nblk, cached, in_cached, computed, ref, bkey,  # type: ignore[no-untyped-def]
              knext, kprev, key_head, key_tail, nxt, prv, st, B):
    """``KVCacheManager.allocate_slots`` once the caller checked the blocks fit: touch the hit
    blocks, take new ones from the free queue's head (evicting their hashes), cache the full
    blocks of the scheduled chunk. False if the request's table would overflow (a defect guard)."""
    base = blocks_off[q]
    local = computed[q] + nc * B
    if (local + nn + B - 1) // B > cap[q]:
        return False
    for k in range(nc):
        b = comp[k]
        if ref[b] == 0:
            _unlink(nxt, prv, b)
            st[FREE] -= 1
        ref[b] += 1
        table[base + nblk[q]] = b
        nblk[q] += 1
    for _ in range((local + nn + B - 1) // B - nblk[q]):
        b = nxt[0]
        _unlink(nxt, prv, b)
        st[FREE] -= 1
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
    _cache(q, local + nn, num_tokens, K, table, blocks_off, cached, bkey, knext, kprev, key_head, key_tail, B)
    in_cached[q] = True
    return True


@njit(cache=True, nogil=True)
def _release(q, table, blocks_off, nblk, cached, in_cached, ref, bkey, nxt, prv, st):  # type: ignore[no-untyped-def]
    """Free a request's blocks: uncached ones to the free queue's head (the table's last one ends
    at the head), cached ones to its tail in reverse table order."""
    base = blocks_off[q]
    m = nblk[q]
    for k in range(m):
        b = table[base + k]
        ref[b] -= 1
        if ref[b] == 0 and bkey[b] < 0:
            h = nxt[0]
            nxt[b], prv[b] = h, 0
            prv[h] = b
            nxt[0] = b
            st[FREE] += 1
    for k in range(m - 1, -1, -1):
        b = table[base + k]
        if ref[b] == 0 and bkey[b] >= 0:
            t = prv[0]
            prv[b], nxt[b] = t, 0
            nxt[t] = b
            prv[0] = b
            st[FREE] += 1
    nblk[q] = 0
    cached[q] = 0
    in_cached[q] = False


@njit(cache=True, nogil=True)
def _schedule(is_async, start, K, input_tokens, max_tokens, max_num_seqs, max_num_batched_tokens, table, blocks_off,  # type: ignore[no-untyped-def]
              cap, nblk, cached, in_cached, computed, generated, placeholders, in_flight, stale, first_hit,
              first_sched, preemptions, ref, bkey, knext, kprev, key_head, key_tail, nxt, prv, st, ring, running,
              comp, sched, sched_n, samp, B):
    """One ``schedule()`` (``run_sync``'s step, or ``_schedule_async``): fills ``sched``/``sched_n``
    (and, async, ``samp``: samples a token in this batch) and returns (entries, error)."""
    rcap = ring.shape[0]
    budget = max_num_batched_tokens
    ns = 0
    preempted = False
    i = 0
    while i < st[RUNNING] and budget > 0:
        q = running[i]
        num_tokens = input_tokens[q] + generated[q]
        if is_async and placeholders[q] > 0 and computed[q] + 2 - placeholders[q] >= input_tokens[q] + max_tokens[q]:
            i += 1  # its last token is in flight
            continue
        nn = min(num_tokens + placeholders[q] - computed[q], budget)
        if nn == 0:
            i += 1
            continue
        ok = False
        while True:  # allocate(q, nn, no computed blocks, whole=False): q is in the cache already
            if max((computed[q] + nn + B - 1) // B - nblk[q], 0) <= st[FREE]:
                ok = True
                break
            v = running[st[RUNNING] - 1]
            st[RUNNING] -= 1
            _release(v, table, blocks_off, nblk, cached, in_cached, ref, bkey, nxt, prv, st)
            computed[v] = 0
            stale[v] = in_flight[v]
            placeholders[v] = 0
            preemptions[v] += 1
            st[HEAD] = (st[HEAD] - 1) % rcap
            ring[st[HEAD]] = v
            st[WAITING] += 1
            preempted = True
            if v == q:
                break
        if not ok:
            break
        if not _allocate(q, nn, comp, 0, num_tokens, K, table, blocks_off, cap, nblk, cached, in_cached, computed,
                         ref, bkey, knext, kprev, key_head, key_tail, nxt, prv, st, B):
            return ns, 2
        sched[ns] = q
        sched_n[ns] = nn
        ns += 1
        budget -= nn
        i += 1
    if not preempted:
        keys, key_off, n_prompt_keys, gen_base = K
        while st[WAITING] > 0 and budget > 0 and st[RUNNING] < max_num_seqs:
            q = ring[st[HEAD]]
            if stale[q] > 0:
                return ns, 3  # unreachable with a batch queue of 2 (scheduler.py's assertion)
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
            fresh = 0  # whole=True: the whole current sequence, then the chunk (nblk is 0: not in the cache)
            for k in range(nc):
                if ref[comp[k]] == 0:
                    fresh += 1
            if max((num_tokens + B - 1) // B - nc - nblk[q], 0) + fresh > st[FREE]:
                break
            if max((hit + nn + B - 1) // B - nc - nblk[q], 0) + fresh > st[FREE]:
                break
            if not _allocate(q, nn, comp, nc, num_tokens, K, table, blocks_off, cap, nblk, cached, in_cached,
                             computed, ref, bkey, knext, kprev, key_head, key_tail, nxt, prv, st, B):
                return ns, 2
            st[HEAD] = (st[HEAD] + 1) % rcap
            st[WAITING] -= 1
            running[st[RUNNING]] = q
            st[RUNNING] += 1
            computed[q] = hit
            if first_hit[q] < 0:
                first_hit[q] = hit
                first_sched[q] = start
            sched[ns] = q
            sched_n[ns] = nn
            ns += 1
            budget -= nn
    if is_async:  # _update_after_schedule: computed and in-flight grow; a full request samples
        for k in range(ns):
            q = sched[k]
            computed[q] += sched_n[k]
            in_flight[q] += sched_n[k]
            samp[k] = computed[q] >= input_tokens[q] + generated[q] + placeholders[q]
            if samp[k]:
                placeholders[q] += 1
    return ns, 0


@njit(cache=True, nogil=True)
def _compact(running, gone, st):  # type: ignore[no-untyped-def]
    m = 0
    for k in range(st[RUNNING]):
        if not gone[running[k]]:
            running[m] = running[k]
            m += 1
    st[RUNNING] = m


@njit(cache=True, nogil=True)
def scheduler_run(keys, key_off, input_tokens, max_tokens, arrival, n_keys, n_blocks, page,  # type: ignore[no-untyped-def]
                  max_num_seqs, max_num_batched_tokens, step_fixed_s, step_per_token_s, is_async):
    """One pool: (error, first_hit, preemptions, first_sched, first_token, finish, busy_s,
    scheduled_tokens), times absolute; ``busy_s`` is the GPU time of all steps, ``scheduled_tokens``
    every token computed (recomputation after preemption included). ``error`` is 0, or (defect
    guards) 1 when nothing could be scheduled, 2 when a block table overflowed, 3 when a request
    with stale output was at the head of the queue."""
    n = input_tokens.shape[0]
    B = page
    n_prompt_keys = input_tokens // B
    cap = (input_tokens + max_tokens + 1 + B - 1) // B
    gen_base = np.empty(n, np.int64)
    blocks_off = np.empty(n, np.int64)
    g, o = n_keys, 0
    for i in range(n):
        gen_base[i] = g
        g += cap[i] - n_prompt_keys[i]
        blocks_off[i] = o
        o += cap[i]
    K = (keys, key_off, n_prompt_keys, gen_base)
    table = np.empty(o, np.int32)
    nblk = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    computed = np.zeros(n, np.int64)
    cached = np.zeros(n, np.int64)
    in_cached = np.zeros(n, np.bool_)
    placeholders = np.zeros(n, np.int64)
    in_flight = np.zeros(n, np.int64)
    stale = np.zeros(n, np.int64)
    first_hit = np.full(n, -1, np.int64)
    preemptions = np.zeros(n, np.int64)
    first_sched = np.full(n, np.nan)
    first_tok = np.full(n, np.nan)
    finish = np.full(n, np.nan)

    nxt = np.empty(n_blocks, np.int32)
    prv = np.empty(n_blocks, np.int32)
    for b in range(n_blocks):
        nxt[b] = (b + 1) % n_blocks
        prv[b] = (b - 1) % n_blocks
    ref = np.zeros(n_blocks, np.int32)
    bkey = np.full(n_blocks, -1, np.int64)
    knext = np.full(n_blocks, -1, np.int32)
    kprev = np.full(n_blocks, -1, np.int32)
    key_head = np.full(g, -1, np.int32)
    key_tail = np.full(g, -1, np.int32)

    order = np.argsort(arrival, kind="mergesort")
    ring = np.empty(n + 1, np.int64)
    rcap = n + 1
    running = np.empty(n, np.int64)
    st = np.zeros(4, np.int64)
    st[FREE] = n_blocks - 1
    comp = np.empty(int(cap.max()) if n else 1, np.int32)
    gone = np.zeros(n, np.bool_)
    # batches: one (sync) or a FIFO of up to 2 in flight (async), each its entries and end time
    sched = np.empty((3, n), np.int64)
    sched_n = np.empty((3, n), np.int64)
    samp = np.zeros((3, n), np.bool_)
    nsched = np.zeros(3, np.int64)
    ends = np.zeros(3)
    bhead, bcount = 0, 0
    busy, tokens = 0.0, 0

    clock, gpu, nx, done, empty = 0.0, 0.0, 0, 0, 0
    while done < n:
        while nx < n and arrival[order[nx]] <= clock:
            ring[(st[HEAD] + st[WAITING]) % rcap] = order[nx]
            st[WAITING] += 1
            nx += 1
        if not is_async:
            if st[WAITING] == 0 and st[RUNNING] == 0:
                clock = arrival[order[nx]]
                continue
            ns, err = _schedule(False, clock, K, input_tokens, max_tokens, max_num_seqs, max_num_batched_tokens, table,
                                blocks_off, cap, nblk, cached, in_cached, computed, generated, placeholders, in_flight,
                                stale, first_hit, first_sched, preemptions, ref, bkey, knext, kprev, key_head, key_tail,
                                nxt, prv, st, ring, running, comp, sched[0], sched_n[0], samp[0], B)
            total = 0
            for k in range(ns):
                total += sched_n[0, k]
            if err or total == 0:
                return max(err, 1), first_hit, preemptions, first_sched, first_tok, finish, busy, tokens
            end = clock + step_fixed_s + total * step_per_token_s
            busy += end - clock
            tokens += total
            for k in range(ns):
                computed[sched[0, k]] += sched_n[0, k]
            any_gone = False
            for k in range(ns):
                q = sched[0, k]
                if computed[q] < input_tokens[q] + generated[q]:
                    continue
                generated[q] += 1
                if generated[q] == 1:
                    first_tok[q] = end
                if generated[q] >= max_tokens[q]:
                    finish[q] = end
                    gone[q] = True
                    any_gone = True
                    _release(q, table, blocks_off, nblk, cached, in_cached, ref, bkey, nxt, prv, st)
                    done += 1
            if any_gone:
                _compact(running, gone, st)
            clock = end
            continue
        # async: EngineCore.step_with_batch_queue with a batch queue of 2 (scheduler.run_async)
        if st[RUNNING] > 0 or st[WAITING] > 0:
            start = max(clock, gpu)
            slot = (bhead + bcount) % 3
            ns, err = _schedule(True, start, K, input_tokens, max_tokens, max_num_seqs, max_num_batched_tokens, table,
                                blocks_off, cap, nblk, cached, in_cached, computed, generated, placeholders, in_flight,
                                stale, first_hit, first_sched, preemptions, ref, bkey, knext, kprev, key_head, key_tail,
                                nxt, prv, st, ring, running, comp, sched[slot], sched_n[slot], samp[slot], B)
            if err:
                return err, first_hit, preemptions, first_sched, first_tok, finish, busy, tokens
            total = 0
            for k in range(ns):
                total += sched_n[slot, k]
            gpu = start + (step_fixed_s + total * step_per_token_s if total else 0.0)
            busy += gpu - start
            tokens += total
            nsched[slot] = ns
            ends[slot] = gpu
            bcount += 1
            empty = 0 if total else empty + 1
            if empty > 10_000:
                return 1, first_hit, preemptions, first_sched, first_tok, finish, busy, tokens
            if bcount < 2 and (total > 0 or st[RUNNING] > 0 or st[WAITING] > 0):
                continue
        elif bcount == 0:
            clock = max(clock, arrival[order[nx]])
            continue
        slot = bhead  # the oldest batch's output: update_from_output
        bhead = (bhead + 1) % 3
        bcount -= 1
        end = ends[slot]
        clock = max(clock, end)
        any_gone = False
        for k in range(nsched[slot]):
            q = sched[slot, k]
            in_flight[q] -= sched_n[slot, k]
            was_stale = stale[q] > 0
            if was_stale:
                stale[q] -= sched_n[slot, k]
            if not samp[slot, k]:
                continue
            generated[q] += 1
            if generated[q] == 1:
                first_tok[q] = end
            if not was_stale:
                placeholders[q] -= 1
                _cache(q, computed[q] - in_flight[q], input_tokens[q] + generated[q], K, table, blocks_off, cached,
                       bkey, knext, kprev, key_head, key_tail, B)
            if generated[q] >= max_tokens[q]:
                finish[q] = end
                if was_stale:  # finished in the waiting queue by its in-flight output: leaves it
                    w = st[WAITING]
                    pos = 0
                    while ring[(st[HEAD] + pos) % rcap] != q:
                        pos += 1
                    for m in range(pos, w - 1):
                        ring[(st[HEAD] + m) % rcap] = ring[(st[HEAD] + m + 1) % rcap]
                    st[WAITING] -= 1
                else:
                    gone[q] = True
                    any_gone = True
                _release(q, table, blocks_off, nblk, cached, in_cached, ref, bkey, nxt, prv, st)
                done += 1
        if any_gone:
            _compact(running, gone, st)
        if nsched[slot] == 0 and bcount == 0 and nx < n and st[RUNNING] == 0:
            clock = max(clock, arrival[order[nx]])
    return 0, first_hit, preemptions, first_sched, first_tok, finish, busy, tokens
