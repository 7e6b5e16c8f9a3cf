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
        print(f"{run['file']}: {len(got) - len(bad)}/{len(got)} requests equal at inf"
              + (f"; first differences (request, vllm, rules) {bad[:6]}" if bad else ""))
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
