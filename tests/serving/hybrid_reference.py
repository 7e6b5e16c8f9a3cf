"""A direct restatement of vLLM 0.33.0's hybrid prefix-cache rules (full attention, sliding
window, chunked local; docs/hybrid.md), serial schedule only, written independently of
``stackdist.serving.hybrid`` (plain lists, no managers) for the tests to compare against.

Rules restated (per request, in order):

1. lookup: the full-attention groups' hit is the longest run of cached full blocks from the head,
   at most ``(P - 1) // b`` blocks; each other spec lowers it: sliding window, scanning right to
   left below the candidate, the first run of ``cdiv(W - 1, b)`` cached blocks (or the run from
   block 0 when shorter); chunked local, the cached run from the candidate's chunk start; repeat
   until no spec lowers it. The junction is the longest single-spec hit when above the hit.
2. admission: the blocks the whole prompt needs (recycling groups capped at their admission
   bound) must be free, counting hit blocks that sit in the free queue.
3. prefill in chunks of C tokens; before each chunk free the blocks wholly outside the window /
   before the chunk (last first); then the chunk's blocks must be free; touch the hit (first
   chunk), pop new blocks from the queue head (evicting their hashes), hash the full blocks:
   every one for full and chunked groups, only the ``cdiv(W - 1, b)`` blocks ending at the replay
   boundary ``(P - 1) // b * b`` and at the junction for sliding groups.
4. decode step k: free outside the window, then a new block when token P + k starts one; full
   blocks of generated tokens get hashes nobody looks up (sliding groups: none).
5. finish: each group frees its blocks last first; unhashed ones to the queue's front, hashed
   ones to its back.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def reference_hits(requests, groups, num_gpu_blocks, chunk, decode=False, max_model_len=1 << 40):
    """``requests``: (page keys at 16 tokens, P, O) per request; ``groups``: (kind, b, window,
    chunk) per group. Returns (hits, failed request or -1)."""
    free = list(range(1, num_gpu_blocks))  # head first
    ref = [0] * num_gpu_blocks
    hashed: dict[int, tuple] = {}  # block -> its key
    table: dict[tuple, list[int]] = {}  # key -> cached blocks, oldest first
    hits = []

    def key_of(keys, P, r, g, j, b):
        last = (j + 1) * (b // 16) - 1
        return (g, keys[last]) if last < P // 16 else (g, "gen", r, last)

    def give_back(blocks):  # free_blocks
        front, back = [], []
        for x in blocks:
            if x == 0:
                continue
            ref[x] -= 1
            if ref[x] == 0:
                (back if x in hashed else front).append(x)
        free[:0] = front
        free.extend(back)

    def pop(n):
        out = []
        for _ in range(n):
            x = free.pop(0)
            if x in hashed:
                k = hashed.pop(x)
                table[k].remove(x)
                if not table[k]:
                    del table[k]
            ref[x] = 1
            out.append(x)
        return out

    def cached(g_ids, k):
        got = []
        for g in g_ids:
            lst = table.get((g, k))
            if not lst:
                return None
            got.append(lst[0])
        return got

    def skipped(kind, w, c, n):
        if kind == "sliding":
            return max(0, n - w + 1)
        if kind == "chunked":
            return n // c * c
        return 0

    specs: dict[tuple, list[int]] = {}
    for g, spec in enumerate(groups):
        specs.setdefault(spec, []).append(g)
    order = sorted(specs, key=lambda s: s[0] != "full")
    for r, (keys, P, O) in enumerate(requests):
        # 1. lookup
        cand = P - 1
        found: dict[int, list[int]] = {}
        longest = 0
        full_done = False
        while True:
            start_cand = cand
            for spec in order:
                kind, b, w, c = spec
                ids = specs[spec]
                if kind == "full":
                    if full_done:
                        cand = min(cand, len(found[ids[0]]) * b)
                        continue
                    run = []
                    while len(run) < cand // b:
                        got = cached(ids, keys[(len(run) + 1) * (b // 16) - 1])
                        if got is None:
                            break
                        run.append(got)
                    for i, g in enumerate(ids):
                        found[g] = [x[i] for x in run]
                    cand = len(run) * b
                    full_done = True
                elif kind == "sliding":
                    need = cdiv(w - 1, b)
                    n = cand // b
                    got_at = {}
                    length = None
                    streak = 0
                    for i in range(n - 1, -1, -1):
                        got = cached(ids, keys[(i + 1) * (b // 16) - 1])
                        if got is None:
                            streak = 0
                            continue
                        got_at[i] = got
                        streak += 1
                        if streak >= need:
                            length = i + streak
                            break
                    if length is None:
                        length = streak  # the run from block 0
                    for k, g in enumerate(ids):
                        found[g] = [got_at[i][k] if i in got_at and i >= length - min(need, length) else 0
                                    for i in range(length)]
                    cand = length * b
                else:  # chunked
                    n = cand // b
                    first = cand // c * c // b if cand > 0 else 0
                    lst = [[0] * first for _ in ids]
                    for i in range(first, n):
                        got = cached(ids, keys[(i + 1) * (b // 16) - 1])
                        if got is None:
                            break
                        for k in range(len(ids)):
                            lst[k].append(got[k])
                    for k, g in enumerate(ids):
                        found[g] = lst[k]
                    cand = len(lst[0]) * b
                longest = max(longest, cand)
            if cand >= start_cand:
                break
            if len(order) == 2 and order[0][0] == "full":
                break
        hit = cand
        for spec in order:
            if spec[0] == "full":
                for g in specs[spec]:
                    found[g] = found[g][:cdiv(hit, spec[1])]
        junction = longest if longest > hit else 0
        hits.append(hit)

        blocks = {g: [] for g in range(len(groups))}
        hashed_upto = {g: 0 for g in range(len(groups))}

        def count(tokens, computed, with_hit, gate, blocks=blocks, found=found):
            total = 0
            for g, (kind, b, w, c) in enumerate(groups):
                need = cdiv(tokens, b)
                if gate and kind in ("sliding", "chunked"):
                    span = w - 1 + chunk if kind == "sliding" else c + chunk
                    need = min(need, cdiv(min(span, max_model_len), b) + (kind == "sliding"))
                h = found[g] if with_hit else []
                sk = skipped(kind, w, c, computed) // b
                total += max(need - max(sk, len(h) + len(blocks[g])), 0)
                total += sum(1 for x in h[max(0, sk - len(blocks[g])):] if x != 0 and ref[x] == 0)
            return total

        def release(computed, blocks=blocks):
            for g, (kind, b, w, c) in enumerate(groups):
                n = min(skipped(kind, w, c, computed) // b, len(blocks[g]))
                out = []
                for i in range(n - 1, -1, -1):
                    if blocks[g][i] == 0:
                        break
                    out.append(blocks[g][i])
                    blocks[g][i] = 0
                if out:
                    give_back(out)

        def write(tokens, known, blocks=blocks, hashed_upto=hashed_upto, keys=keys, P=P, r=r, junction=junction):
            cacheable = min(tokens, known) // 16 * 16
            for g, (kind, b, w, c) in enumerate(groups):
                while len(blocks[g]) < cdiv(tokens, b):
                    blocks[g].extend(pop(1))
                full_blocks = cacheable // b
                if len(groups) > 1:
                    full_blocks = cacheable // max(s[1] for s in groups) * max(s[1] for s in groups) // b
                for j in range(hashed_upto[g], full_blocks):
                    x = blocks[g][j]
                    if x == 0:
                        continue
                    if kind == "sliding":
                        need = cdiv(w - 1, b)
                        ends = [(P - 1) // b] + ([junction // b] if junction else [])
                        if not any(e - need <= j < e for e in ends):
                            continue
                    k = key_of(keys, P, r, g, j, b)
                    hashed[x] = k
                    table.setdefault(k, []).append(x)
                hashed_upto[g] = max(hashed_upto[g], full_blocks)

        # 2. admission gate, 3. chunks
        if count(P, hit, True, True) > len(free):
            return hits[:-1] + [-1], r
        done = hit
        first = True
        while first or done < P:
            n = min(chunk, P - done)
            release(done)
            if count(done + n, done, first, False) > len(free):
                return hits[:-1] + [-1], r
            if first:
                for g, (kind, b, w, c) in enumerate(groups):
                    sk = skipped(kind, w, c, hit) // b
                    rest = found[g][sk:]
                    for x in rest:
                        if x != 0:
                            if ref[x] == 0:
                                free.remove(x)
                            ref[x] += 1
                    blocks[g] = [0] * sk + list(rest)
                    hashed_upto[g] = len(blocks[g])
            write(done + n, P)
            done += n
            first = False
        # 4. decode
        if decode:
            for k in range(1, max(O, 1)):
                release(P + k - 1)
                if count(P + k, P + k - 1, False, False) > len(free):
                    return hits[:-1] + [-1], r
                write(P + k, P + k)
        # 5. finish
        for g in range(len(groups)):
            lst = blocks[g]
            i = 0
            while i < len(lst) and lst[i] == 0:
                i += 1
            give_back(lst[i:][::-1])
    return hits, -1
