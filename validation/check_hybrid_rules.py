"""Stdlib restatement of HYBRID_NOTES.md's hit rules, compared with tests/data/engines/hybrid/.

    python3 validation/check_hybrid_rules.py [--verbose]

For every committed run (manifest.json) and its ``inf`` column (no eviction), recompute each
request's hit from the rules of HYBRID_NOTES.md section 2 (serial, retention interval 0) and
compare with vLLM's. The model here is deliberately plain (sets of cached prefixes per group kind),
not a port of vLLM's classes. Finite pools (eviction) are not modelled here.

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
import common  # noqa: E402

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
            hit = j * b if j * b >= s else s
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
                (front if self.key[bid] is None else back).append(bid)
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


def simulate(trace, hash_block_size: int, layout: dict, n_blocks: int, decode: bool,
             budget: int = 8192) -> list[int]:
    """Hits per request of a full + sliding / chunked model at num_gpu_blocks = n_blocks."""
    groups = [(g["kind"], g["block_size"], g["window"] or g["chunk"] or 0) for g in layout["groups"]]
    kind, b, a, w = layout_kind(layout)
    if kind == "mamba":
        raise ValueError("finite pools are not modelled for Mamba here")
    full_ids = [i for i, g in enumerate(groups) if g[0] == "FullAttentionSpec"]
    other_ids = [i for i, g in enumerate(groups) if g[0] != "FullAttentionSpec"]
    need = cdiv(w - 1, b) if kind == "sliding" else 0
    max_in_flight = budget
    cap = cdiv(w - 1 + max_in_flight, b) + 1 if kind == "sliding" else cdiv(w + max_in_flight, b)
    pool = Pool(n_blocks)
    pre = Prefixes()
    hits = []

    def cached_all(pid, gids):
        got = [pool.get((g, pid)) for g in gids]
        return None if any(x is None for x in got) else got

    def skipped(tokens_done: int) -> int:
        if kind == "sliding":
            return max(0, tokens_done - w + 1)
        return tokens_done // w * w

    for r in trace:
        o = r.output_length if decode else 1
        toks = common.prompt_tokens(r, hash_block_size) + [common.output_token(r, k) for k in range(1, o)]
        p = r.input_length
        keys = pre.blocks(toks, b)
        cap_blocks = (p - 1) // b
        # lookup
        n_f = 0
        while n_f < cap_blocks and cached_all(keys[n_f], full_ids):
            n_f += 1
        h_f = n_f * b
        other_hit_blocks: list = []
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
            if found is not None:
                hit = (found + need) * b
                other_hit_blocks = [[NULL] * found + [cached_all(keys[j], other_ids)[k] for j in range(found, found + need)]
                                    for k in range(len(other_ids))]
            else:
                hit = run * b
                other_hit_blocks = [[cached_all(keys[j], other_ids)[k] for j in range(run)] for k in range(len(other_ids))]
        else:
            s = h_f // w * w
            j = s // b
            while j < n_f and cached_all(keys[j], other_ids):
                j += 1
            hit = j * b
            other_hit_blocks = [[NULL] * (s // b) + [cached_all(keys[x], other_ids)[k] for x in range(s // b, j)]
                                for k in range(len(other_ids))]
        junction = h_f if h_f > hit else 0
        hits.append(hit)
        hit_blocks = {}
        for k, g in enumerate(full_ids):
            hit_blocks[g] = [cached_all(keys[j], [g])[0] for j in range(hit // b)]
        for k, g in enumerate(other_ids):
            hit_blocks[g] = other_hit_blocks[k]
        # checkpoint mask of the other groups (retention 0)
        keep: set[int] = set()
        for x in (p - 1, junction):
            if x > 0 and kind == "sliding":
                end = (x // a * a) // b
                keep.update(range(max(0, end - need), end))
        # admission: the whole prompt must fit (allocate_slots full_sequence_must_fit)
        total_need = 0
        for g, (gk, gb, _) in enumerate(groups):
            req = cdiv(p, b)
            if gk != "FullAttentionSpec":
                req = min(req, cap)
            sk = (skipped(hit) if gk != "FullAttentionSpec" else 0) // b
            hb = hit_blocks[g]
            total_need += max(req - max(sk, len(hb)), 0)
            total_need += sum(1 for x in hb[sk:] if x != NULL and pool.ref[x] == 0)
        if total_need > pool.free_count():
            raise Infeasible(r.index)
        req_blocks: dict[int, list[int]] = {}
        num_cached: dict[int, int] = {}
        computed = 0
        first = True
        num_tokens = p
        while True:
            n = min(num_tokens - (computed + (hit if first else 0)), budget)
            total = computed + (hit if first else 0)
            # remove_skipped_blocks on the processed tokens
            if not first:
                for g, (gk, gb, _) in enumerate(groups):
                    if gk == "FullAttentionSpec":
                        continue
                    blocks = req_blocks[g]
                    last = min(skipped(total) // b, len(blocks))
                    freed = []
                    for i in range(last - 1, -1, -1):
                        if blocks[i] == NULL:
                            break
                        freed.append(blocks[i])
                        blocks[i] = NULL
                    pool.free(freed)
            slots = total + n
            if first:
                need_now = 0
                for g, (gk, gb, _) in enumerate(groups):
                    sk = (skipped(hit) if gk != "FullAttentionSpec" else 0) // b
                    hb = hit_blocks[g]
                    need_now += max(cdiv(slots, b) - max(sk, len(hb)), 0)
                    need_now += sum(1 for x in hb[sk:] if x != NULL and pool.ref[x] == 0)
            else:
                need_now = sum(max(cdiv(slots, b) - len(req_blocks[g]), 0) for g in range(len(groups)))
            if need_now > pool.free_count():
                raise Infeasible(r.index)
            if first:
                for g, (gk, gb, _) in enumerate(groups):
                    sk = (skipped(hit) if gk != "FullAttentionSpec" else 0) // b
                    hb = hit_blocks[g]
                    pool.touch(hb[sk:])
                    req_blocks[g] = [NULL] * sk + hb[sk:]
                    num_cached[g] = len(req_blocks[g])
            for g in range(len(groups)):
                k = cdiv(slots, b) - len(req_blocks[g])
                if k > 0:
                    req_blocks[g].extend(pool.pop_n(k))
            n_cache = min(slots, num_tokens)
            for g, (gk, gb, _) in enumerate(groups):
                full_blocks = n_cache // b
                for i in range(num_cached[g], full_blocks):
                    bid = req_blocks[g][i]
                    if bid == NULL or (gk != "FullAttentionSpec" and gk != "ChunkedLocalAttentionSpec" and i not in keep):
                        continue
                    pool.cache(bid, (g, keys[i]))
                num_cached[g] = max(num_cached[g], full_blocks)
            computed = slots
            first = False
            if computed >= num_tokens:
                num_tokens += 1  # a token is sampled
                if num_tokens - p >= o:
                    break
        for g in range(len(groups)):
            blocks = req_blocks[g]
            i = 0
            while i < len(blocks) and blocks[i] == NULL:
                i += 1
            pool.free(list(reversed(blocks[i:])))
    return hits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    with open(os.path.join(OUT, "manifest.json")) as fh:
        man = json.load(fh)
    bad_total = 0
    for run in man["runs"]:
        trace = common.read_trace(os.path.join(OUT, run["trace"] + ".jsonl"))
        hbs = man["traces"][run["trace"]]["hash_block_size"]
        kind, b, a, w = layout_kind(man["models"][run["model"]]["layout"])
        want = model_hits(trace, hbs, kind, b, a, w)
        with open(os.path.join(OUT, run["file"])) as fh:
            rows = list(csv.DictReader(fh))
        got = [int(x["hit_tokens_inf"]) for x in rows]
        bad = [(i, got[i], want[i]) for i in range(len(got)) if got[i] != want[i]]
        bad_total += len(bad)
        msg = f"{run['file']}: inf {len(got) - len(bad)}/{len(got)} equal"
        if kind != "mamba":
            layout = man["models"][run["model"]]["layout"]
            for pool in run["pools"]:
                if pool == "inf":
                    continue
                col = f"hit_tokens_{pool}"
                try:
                    sim = simulate(trace, hbs, layout, int(pool), run["decode"])
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
                bad_total += len(d)
                msg += f"; {pool}: {len(g) - len(d)}/{len(g)}" + (f" {d[:4]}" if d else "")
        print(msg + (f"; inf differences (request, vllm, rules) {bad[:6]}" if bad else ""), flush=True)
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
