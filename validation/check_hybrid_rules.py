"""Stdlib restatement of HYBRID_NOTES.md's hit rules, compared with tests/data/engines/hybrid/.

    python3 validation/check_hybrid_rules.py [--only MODEL] [--ablate RULE ...]

For every committed run (manifest.json), recompute each request's hit from the rules of
HYBRID_NOTES.md section 2 (serial, retention interval 0) and compare with vLLM's:

- the ``inf`` column with ``model_hits``: deliberately plain (sets of cached prefixes per group
  kind, no blocks), the rules below;
- every finite pool with ``simulate``: a block-level restatement of sections 2.3-2.5 (one pool,
  the free queue, per-group allocation and freeing order, admission caps, Mamba align state and
  checkpoint blocks and the scheduler's Mamba chunk split), also compared on the number of prefill
  chunks per request, and on which pools are infeasible.

Exit 1 if anything differs. ``--ablate`` changes one rule to show that the comparison can fail.

Rules (per request, prompt P, lookup cap L = P - 1, block b, alignment a, window W, chunk C):
  H_f   = longest run of cached full-attention blocks from block 0, at most floor(L / b) blocks;
  hit   = sliding: right-to-left first run of need = cdiv(W - 1, b) cached blocks ending at or
          below H_f, else the cached run from block 0; chunked: s = floor(H_f / C) C plus the
          cached run from block s / b; Mamba: the largest (i + 1) b <= H_f with block i cached;
  J     = H_f if H_f > hit else 0 (the shared-prefix junction);
  cache = full and chunked: every full prompt block; sliding: the need blocks ending at
          floor(x / a) a for x in {L, J}; Mamba: the block ending there.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common

OUT = os.path.join(os.path.dirname(HERE), "tests", "data", "engines", "hybrid")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Prefixes:
    """Block j of a token list -> an id equal for equal prefixes of (j + 1) * b tokens."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}

    def blocks(self, tokens: list[int], b: int) -> list[int]:
        out, parent = [], -1
        for j in range(len(tokens) // b):
            key = (b, parent, tuple(tokens[j * b:(j + 1) * b]))
            parent = self.ids.setdefault(key, len(self.ids))
            out.append(parent)
        return out


def layout_kind(layout: dict) -> tuple[str, int, int, int]:
    """(other kind, block, alignment, window or chunk) from the manifest's layout."""
    kinds = {g["kind"] for g in layout["groups"]}
    b = layout["groups"][0]["block_size"]
    a = layout["scheduler_block_size"]
    if "SlidingWindowSpec" in kinds:
        return "sliding", b, a, next(g["window"] for g in layout["groups"] if g["window"])
    if "ChunkedLocalAttentionSpec" in kinds:
        return "chunked", b, a, next(g["chunk"] for g in layout["groups"] if g["chunk"])
    if "MambaSpec" in kinds:
        return "mamba", b, a, 0
    raise ValueError(f"no hybrid kind in {kinds}")


def model_hits(trace, hash_block_size: int, kind: str, b: int, a: int, w: int) -> list[int]:
    pre = Prefixes()
    full: set[int] = set()
    other: set[int] = set()
    hits = []
    for r in trace:
        toks = common.prompt_tokens(r, hash_block_size)
        blk = pre.blocks(toks, b)
        p = len(toks)
        cap = (p - 1) // b
        n_f = 0
        while n_f < cap and blk[n_f] in full:
            n_f += 1
        h_f = n_f * b
        if kind == "sliding":
            need = cdiv(w - 1, b)
            hit, run = 0, 0
            for i in range(n_f - 1, -1, -1):
                if blk[i] in other:
                    run += 1
                    if run >= need:
                        hit = (i + need) * b
                        break
                else:
                    run = 0
            else:
                hit = run * b  # the run that reaches block 0
        elif kind == "chunked":
            s = h_f // w * w
            j = s // b
            while j < n_f and blk[j] in other:
                j += 1
            hit = max(j * b, s)
        else:
            hit = 0
            for i in range(n_f - 1, -1, -1):
                if blk[i] in other:
                    hit = (i + 1) * b
                    break
        junction = h_f if h_f > hit else 0
        hits.append(hit)
        full.update(blk)
        if kind == "chunked":
            other.update(blk)
        else:
            for x in (p - 1, junction):
                if x <= 0:
                    continue
                end = (x // a * a) // b
                if kind == "sliding":
                    other.update(blk[max(0, end - cdiv(w - 1, b)):end])
                elif end >= 1:
                    other.add(blk[end - 1])
    return hits


# ----------------------------------------------------------------------------- finite pools
# A block-level restatement of HYBRID_NOTES.md 2.3-2.4 for full + sliding / chunked models (not
# Mamba): one pool of N blocks (block 0 the null block), a free queue (front = reused first),
# blocks keyed (group, prefix id) when cached; serial requests, chunked prefill, decode steps.

NULL = 0
ABLATE: set[str] = set()  # --ablate: named rule changes, to show the comparison can fail


class Pool:
    def __init__(self, n: int) -> None:
        self.ref = [0] * n
        self.key: list = [None] * n
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, n))  # front = reused first
        self.map: dict[tuple, dict[int, None]] = {}

    def free_count(self) -> int:
        return len(self.queue)

    def get(self, key) -> int | None:
        d = self.map.get(key)
        return next(iter(d)) if d else None

    def pop_n(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            bid, _ = self.queue.popitem(last=False)
            k = self.key[bid]
            if k is not None:
                d = self.map[k]
                del d[bid]
                if not d:
                    del self.map[k]
                self.key[bid] = None
            self.ref[bid] = 1
            out.append(bid)
        return out

    def touch(self, bids) -> None:
        for bid in bids:
            if bid == NULL:
                continue
            if self.ref[bid] == 0:
                del self.queue[bid]
            self.ref[bid] += 1

    def free(self, bids) -> None:
        front, back = [], []
        for bid in bids:
            if bid == NULL:
                continue
            self.ref[bid] -= 1
            if self.ref[bid] == 0:
                (front if self.key[bid] is None and "free-to-back" not in ABLATE else back).append(bid)
        for bid in reversed(front):
            self.queue[bid] = None
            self.queue.move_to_end(bid, last=False)
        for bid in back:
            self.queue[bid] = None

    def cache(self, bid: int, key) -> None:
        self.key[bid] = key
        self.map.setdefault(key, {})[bid] = None


class Infeasible(Exception):
    pass


def _ckpt_pos(num_tokens: int, b: int) -> int:
    """get_mamba_prefill_checkpoint_position without EAGLE (kv_cache_interface.py:1169-1184)."""
    return max((num_tokens - 1) // b * b, 0)


def _ckpt_valid(start: int, end: int, pos: int, b: int) -> bool:
    """is_mamba_prefill_checkpoint_valid with hash block = Mamba block = alignment = b."""
    return (start % b == 0 and cdiv(end, b) - 2 > (start - 1) // b and start + b <= pos
            and start < pos < end and (pos - start) % b == 0)


def _mamba_split(start: int, n: int, p: int, b: int, junction: int, budget: int, exports: bool) -> int:
    """Scheduler._mamba_block_aligned_split (sched/scheduler.py:546-657), serial, no EAGLE;
    ``exports``: the GDN prefill can export a checkpoint inside a chunk (FlashInfer)."""
    if start >= p:
        return n
    end = start + n
    ckpt = _ckpt_pos(p, b)
    internal = exports and end >= p and _ckpt_valid(start, end, ckpt, b)
    last_cache = 0 if internal else ckpt
    if end < p:
        aligned = end // b * b
        if aligned > start or b <= budget:
            end = aligned
    stops = (
        (start // b + 1) * b if start % b and not internal else 0,
        last_cache,
        (start + (junction - start) // b * b) if start < junction < end else 0,
    )
    end = min((x for x in stops if start < x < end), default=end)
    return max(end - start, 0)


def simulate(trace, hash_block_size: int, layout: dict, n_blocks: int, decode: bool,
             budget: int = 8192) -> list[int]:
    """Hits per request at num_gpu_blocks = n_blocks (serial, chunked prefill, decode steps)."""
    groups = [(g["kind"], g["block_size"]) for g in layout["groups"]]
    kind, b, a, w = layout_kind(layout)
    is_full = [gk == "FullAttentionSpec" for gk, _ in groups]
    full_ids = [i for i, f in enumerate(is_full) if f]
    other_ids = [i for i, f in enumerate(is_full) if not f]
    need = cdiv(w - 1, b) if kind == "sliding" else 0
    exports = layout["derivation"].get("prefill_checkpoint_alignment") is not None
    cap = (cdiv(w - 1 + budget, b) + 1 if kind == "sliding" else cdiv(w + budget, b)) if kind != "mamba" else 0
    pool = Pool(n_blocks)
    pre = Prefixes()
    hits = []
    chunks = []

    def cached_all(pid, gids):
        got = [pool.get((g, pid)) for g in gids]
        return None if any(x is None for x in got) else got

    def skipped(g: int, tokens_done: int) -> int:
        """Tokens outside the group's window (get_num_skipped_tokens)."""
        if is_full[g]:
            return 0
        if kind == "sliding":
            return max(0, tokens_done - w + 1)
        if kind == "chunked":
            return tokens_done // w * w
        return tokens_done - 1

    for r in trace:
        o = r.output_length if decode else 1
        toks = common.prompt_tokens(r, hash_block_size) + [common.output_token(r, k) for k in range(1, o)]
        p = r.input_length
        keys = pre.blocks(toks, b)
        n_f = 0
        while n_f < (p - 1) // b and cached_all(keys[n_f], full_ids):
            n_f += 1
        h_f = n_f * b
        if kind == "sliding":
            run, found = 0, None
            for i in range(n_f - 1, -1, -1):
                if cached_all(keys[i], other_ids):
                    run += 1
                    if run >= need:
                        found = i
                        break
                else:
                    run = 0
            lo, hi_ = (found, found + need) if found is not None else (0, run)
            hit = hi_ * b
            other_hb = [[NULL] * lo + [cached_all(keys[j], other_ids)[k] for j in range(lo, hi_)]
                        for k in range(len(other_ids))]
        elif kind == "chunked":
            s0 = h_f // w * w
            j = s0 // b
            while j < n_f and cached_all(keys[j], other_ids):
                j += 1
            hit = j * b
            other_hb = [[NULL] * (s0 // b) + [cached_all(keys[x], other_ids)[k] for x in range(s0 // b, j)]
                        for k in range(len(other_ids))]
        else:
            hit, other_hb = 0, [[] for _ in other_ids]
            for i in range(n_f - 1, -1, -1):
                got = cached_all(keys[i], other_ids)
                if got:
                    hit = (i + 1) * b
                    other_hb = [[NULL] * i + [got[k]] for k in range(len(other_ids))]
                    break
        junction = h_f if h_f > hit and "no-junction" not in ABLATE else 0
        hits.append(hit)
        chunks.append(0)
        hit_blocks = {g: [cached_all(keys[j], [g])[0] for j in range(hit // b)] for g in full_ids}
        hit_blocks.update({g: other_hb[k] for k, g in enumerate(other_ids)})
        # retention 0: checkpoints at P - 1 and the junction (sliding: need-block tails; Mamba: one block)
        keep: set[int] = set()
        for x in (p - 1, junction):
            if x > 0:
                end_b = (x // a * a) // b
                if kind == "sliding":
                    keep.update(range(max(0, end_b - need + ("window-w" in ABLATE)), end_b))
                elif kind == "mamba" and end_b >= 1:
                    keep.add(end_b - 1)
        st = {g: {"blocks": [], "cached": 0, "alloc": False, "last": None, "retired": 0, "ckpt": None}
              for g in range(len(groups))}

        def mamba_need(g: int, q_start: int, q_end: int, new_computed: list, record: bool,
                       st=st, p=p) -> int:
            m = st[g]
            blocks = m["blocks"]
            num_new = cdiv(q_end, b) - len(new_computed) - len(blocks)
            pos = _ckpt_pos(q_end, b)
            idx = cdiv(q_end, b) - 2
            ck = (exports and q_end >= p and _ckpt_valid(q_start, q_end, pos, b) and idx >= 0
                  and (idx >= len(blocks) or blocks[idx] == NULL))
            if record:
                m["ckpt"] = (pos, idx) if ck else None
            if num_new > 0:
                num_new = min(num_new, 1 + int(ck))
            return num_new + sum(1 for x in new_computed if x != NULL and pool.ref[x] == 0)

        def attn_need(g: int, slots: int, done: int, new_computed: list, first: bool, capped: bool,
                      st=st) -> int:
            req = cdiv(slots, b)
            if capped and not is_full[g]:
                req = min(req, cap)
            if not first:
                return max(req - len(st[g]["blocks"]), 0)
            sk = skipped(g, done) // b
            return max(req - max(sk, len(new_computed)), 0) + sum(
                1 for x in new_computed[max(0, sk):] if x != NULL and pool.ref[x] == 0)

        # admission: the whole prompt must fit (full_sequence_must_fit, apply_admission_cap)
        total = 0
        for g in range(len(groups)):
            if kind == "mamba" and not is_full[g]:
                total += mamba_need(g, hit, p, hit_blocks[g], False)
            else:
                total += attn_need(g, p, hit, hit_blocks[g], True, True)
        if total > pool.free_count():
            raise Infeasible(r.index)
        computed, first, num_tokens = hit, True, p
        while True:
            n = min(num_tokens - computed, budget)
            if kind == "mamba":
                n = _mamba_split(computed, n, p, b, junction, budget, exports)
            # remove_skipped_blocks(processed = computed), group by group
            if not first:
                for g in other_ids:
                    m = st[g]
                    blocks = m["blocks"]
                    if kind != "mamba":
                        last = min(skipped(g, computed) // b, len(blocks))
                        freed = []
                        for i in range(last - 1, -1, -1):
                            if blocks[i] == NULL:
                                break
                            freed.append(blocks[i])
                            blocks[i] = NULL
                        pool.free(freed)
                        continue
                    if computed - 1 > 0:
                        last = min((computed - 1) // b, len(blocks))
                        lo = max(0, m["retired"])
                        if lo < last:
                            freed = []
                            for i in range(last - 1, lo - 1, -1):
                                if blocks[i] != NULL:
                                    freed.append(blocks[i])
                                    blocks[i] = NULL
                            pool.free(freed)
                            m["retired"] = last
                    ls = m["last"]
                    if ls is not None and ls < cdiv(computed, b) - 1 and blocks[ls] != NULL:
                        pool.free([blocks[ls]])
                        blocks[ls] = NULL
            slots = computed + n
            if num_tokens == p:
                chunks[-1] += 1
            need_now = 0
            for g in range(len(groups)):
                nc = hit_blocks[g] if first else []
                if kind == "mamba" and not is_full[g]:
                    need_now += mamba_need(g, computed, slots, nc, True)
                else:
                    need_now += attn_need(g, slots, computed, nc, first, False)
            if need_now > pool.free_count():
                raise Infeasible(r.index)
            if first:
                for g in range(len(groups)):
                    hb = hit_blocks[g]
                    sk = skipped(g, hit) // b if hit else 0
                    sk = max(sk, 0)
                    pool.touch(hb[sk:])
                    st[g]["blocks"] = [NULL] * sk + hb[sk:]
                    st[g]["cached"] = len(st[g]["blocks"])
            for g in range(len(groups)):
                m = st[g]
                blocks = m["blocks"]
                req = cdiv(slots, b)
                if kind == "mamba" and not is_full[g]:
                    ck = m["ckpt"] is not None
                    if req <= len(blocks) and not ck:
                        m["alloc"] = True
                        continue
                    prev = len(blocks)
                    if m["alloc"] or prev > 0:
                        m["last"] = prev - 1
                    if prev < req - 1:
                        blocks.extend([NULL] * max(0, req - 1 - int(ck) - prev))
                    k = max(req - len(blocks), 0)
                    blocks.extend(pool.pop_n(k))
                    m["alloc"] = True
                elif req > len(blocks):
                    blocks.extend(pool.pop_n(req - len(blocks)))
            n_cache = min(slots, num_tokens)
            for g in range(len(groups)):
                m = st[g]
                blocks = m["blocks"]
                dense = is_full[g] or kind == "chunked"
                full_blocks = n_cache // b
                for i in range(m["cached"], full_blocks):
                    if blocks[i] != NULL and (dense or i in keep):
                        pool.cache(blocks[i], (g, keys[i]))
                m["cached"] = max(m["cached"], full_blocks)
                if kind == "mamba" and not is_full[g]:
                    # _cache_partial_tail_block: the checkpoint block, or the running state block
                    # of a chunk ending exactly on the prompt checkpoint
                    target = None
                    if m["ckpt"] is not None:
                        pos, idx = m["ckpt"]
                        target = (idx, pos // b - 1)
                    elif n_cache % b == 0 and n_cache == _ckpt_pos(p, b) and n_cache > 0:
                        target = (n_cache // b - 1, n_cache // b - 1)
                    if target is not None and target[0] < len(blocks) and blocks[target[0]] != NULL:
                        bid = blocks[target[0]]
                        if pool.key[bid] != (g, keys[target[1]]):
                            if pool.key[bid] is not None:
                                d = pool.map[pool.key[bid]]
                                del d[bid]
                                if not d:
                                    del pool.map[pool.key[bid]]
                            pool.cache(bid, (g, keys[target[1]]))
            computed = slots
            first = False
            if computed >= num_tokens:
                num_tokens += 1  # a token is sampled
                if num_tokens - p >= o:
                    break
        for g in range(len(groups)):
            blocks = st[g]["blocks"]
            i = 0
            while i < len(blocks) and blocks[i] == NULL:
                i += 1
            pool.free(list(reversed(blocks[i:])))
    return hits, chunks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ablate", action="append", default=[], choices=["free-to-back", "no-junction", "window-w"],
                    help="change one rule (unhashed blocks to the back of the free queue; no shared-prefix "
                         "junction checkpoint; a sliding tail one block shorter) to show the check can fail")
    ap.add_argument("--only", help="model name (manifest) to check")
    args = ap.parse_args(argv)
    ABLATE.update(args.ablate)
    with open(os.path.join(OUT, "manifest.json")) as fh:
        man = json.load(fh)
    bad_total = 0
    for run in man["runs"]:
        if args.only and run["model"] != args.only:
            continue
        trace = common.read_trace(os.path.join(OUT, run["trace"] + ".jsonl"))
        hbs = man["traces"][run["trace"]]["hash_block_size"]
        kind, b, a, w = layout_kind(man["models"][run["model"]]["layout"])
        want = model_hits(trace, hbs, kind, b, a, w) if not ABLATE else simulate(trace, hbs, man["models"][run["model"]]["layout"], 10**7, run["decode"])[0]
        with open(os.path.join(OUT, run["file"])) as fh:
            rows = list(csv.DictReader(fh))
        got = [int(x["hit_tokens_inf"]) for x in rows]
        bad = [(i, got[i], want[i]) for i in range(len(got)) if got[i] != want[i]]
        bad_total += len(bad)
        msg = f"{run['file']}: inf {len(got) - len(bad)}/{len(got)} equal"
        if True:
            layout = man["models"][run["model"]]["layout"]
            for pool in run["pools"]:
                if pool == "inf":
                    continue
                col = f"hit_tokens_{pool}"
                try:
                    sim, sim_chunks = simulate(trace, hbs, layout, int(pool), run["decode"])
                except Infeasible as e:
                    infeasible = [x["pool"] for x in run["infeasible"]]
                    ok = pool in infeasible and not (col in rows[0])
                    bad_total += not ok
                    msg += f"; {pool}: infeasible at request {e.args[0]} ({'as vLLM' if ok else 'vLLM differs'})"
                    continue
                if col not in rows[0]:
                    bad_total += 1
                    msg += f"; {pool}: feasible here, infeasible in vLLM"
                    continue
                g = [int(x[col]) for x in rows]
                d = [(i, g[i], sim[i]) for i in range(len(g)) if g[i] != sim[i]]
                gc = [int(x[col.replace("hit_tokens", "prefill_chunks")]) for x in rows]
                d += [(i, "chunks", gc[i], sim_chunks[i]) for i in range(len(gc)) if gc[i] != sim_chunks[i]]
                bad_total += len(d)
                msg += f"; {pool}: {len(g) - len(d)}/{len(g)}" + (f" {d[:4]}" if d else "")
        bis = run.get("bisection") or {}
        if run["decode"] and bis.get("failure_below"):
            m = bis["smallest_feasible"]
            try:
                simulate(trace, hbs, man["models"][run["model"]]["layout"], m - 1, True)
                msg += f"; {m - 1}: feasible here, infeasible in vLLM"
                bad_total += 1
            except Infeasible as e:
                same = e.args[0] == bis["failure_below"]["request"]
                bad_total += not same
                msg += f"; {m - 1}: infeasible at request {e.args[0]} ({'as vLLM' if same else 'vLLM: ' + str(bis['failure_below']['request'])})"
        print(msg + (f"; inf differences (request, vllm, rules) {bad[:6]}" if bad else ""), flush=True)
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
