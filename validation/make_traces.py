"""Seeded generator of the small validation traces and their timed schedules (SPEC.md).

    python3 validation/make_traces.py --out tests/data/engines

writes, per trace, ``<name>.jsonl`` (Mooncake format) and ``<name>.schedule.csv`` (the service
model of SPEC.md, defaults 10000 prefill and 50 decode tokens/s), and ``traces.json`` (the
hash block size of each trace and how it was made). Generated traces are prefix-chained like
Mooncake's: a hash id always stands for the same whole prefix; a prompt that extends an
earlier one keeps the earlier prompt's full hash blocks and gets a new id for the block that
held the earlier partial tail (its content now goes on), like Mooncake's multi-turn chats.
Real slices are the first requests of the shared traces, copied line for line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

SHARED_TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "traces")


class Builder:
    """Prompts as (P, hash ids) with fresh ids from one counter, so ids form a trie."""

    def __init__(self, block: int, seed: int):
        self.block = block
        self.rng = random.Random(seed)
        self.next_id = 0
        self.reqs: list[dict] = []

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def prompt(self, p: int, base: tuple[int, list[int]] | None = None) -> tuple[int, list[int]]:
        """A prompt of p tokens extending ``base`` = (P0, ids0) (p >= P0): keeps base's full
        blocks, fresh ids for the rest (including the block base ended in, if partial)."""
        b = self.block
        keep: list[int] = []
        if base is not None:
            p0, ids0 = base
            assert p >= p0
            keep = ids0[: p0 // b]
        n = -(-p // b)
        return p, keep + self.fresh(n - len(keep))

    def head(self, base: tuple[int, list[int]], p: int) -> tuple[int, list[int]]:
        """A prompt of p tokens sharing base's first p // B_h full blocks (a common head)."""
        b = self.block
        p0, ids0 = base
        keep = ids0[: min(p // b, p0 // b)]
        n = -(-p // b)
        return p, keep + self.fresh(n - len(keep))

    def add(self, ts_ms: int, prompt: tuple[int, list[int]], o: int) -> None:
        p, ids = prompt
        assert len(ids) == -(-p // self.block) and o >= 1
        self.reqs.append({"timestamp": int(ts_ms), "input_length": int(p), "output_length": int(o),
                          "hash_ids": list(ids)})

    def sorted_reqs(self) -> list[dict]:
        return sorted(self.reqs, key=lambda d: d["timestamp"])  # stable: file order within a ms


def gen_edges(seed: int) -> Builder:
    """B_h 32: every small edge: P = 1, 15, 16, 17, 31, 32, 33, ...; identical prompts; a shared
    system prompt; a multi-turn chain; outputs crossing page boundaries; pools of one request."""
    g = Builder(32, seed)
    r = g.rng
    t = 0
    sys_p = g.prompt(96)  # 3 full blocks
    for p in [1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 64, 65]:
        g.add(t, g.prompt(p), r.choice([1, 2, 15, 16, 17]))
        t += 50
    # identical prompts, block-aligned and not, one page-aligned, back to back and spread out
    for p in [32, 48, 50, 64, 100]:
        pr = g.prompt(p)
        for _ in range(3):
            g.add(t, pr, r.choice([1, 3, 16, 17]))
            t += r.choice([0, 10, 400])
    # shared system prompt + short and long tails
    for tail in [1, 7, 16, 31, 32, 33, 90, 250, 5]:
        g.add(t, g.prompt(96 + tail, base=sys_p), r.choice([1, 5, 20, 40]))
        t += r.choice([0, 20, 200])
    # prefix of the system prompt only (hits at most P - 1, page aligned)
    g.add(t, g.head(sys_p, 64), 2)
    t += 30
    g.add(t, sys_p, 4)
    t += 30
    # a multi-turn chain: each turn = previous prompt + answer + new question
    cur = g.prompt(96 + 40, base=sys_p)
    for _turn in range(6):
        o = r.randint(5, 60)
        g.add(t, cur, o)
        t += r.choice([100, 700, 2000])
        cur = g.prompt(cur[0] + o + r.randint(1, 50), base=cur)
    # a long request then shorts that share its head
    long_p = g.prompt(700, base=sys_p)
    g.add(t, long_p, 30)
    t += 10
    for p in [100, 160, 161, 300, 699, 700]:
        g.add(t, g.head(long_p, p) if p < 700 else long_p, r.choice([1, 8, 33]))
        t += r.choice([0, 5, 500])
    return g


def gen_chat(seed: int, block: int, n: int, sessions: int, gap_ms: float) -> Builder:
    """Multi-turn sessions over a few shared system prompts; Poisson arrivals; file order by
    time. A session's next turn extends its previous prompt by the answer and a question."""
    g = Builder(block, seed)
    r = g.rng
    systems = [g.prompt(r.choice([block, 2 * block, 3 * block + 7, 5 * block])) for _ in range(3)]
    state = []
    for _ in range(sessions):
        s = r.choice(systems)
        state.append(g.prompt(s[0] + r.randint(1, 4 * block), base=s))
    t = 0.0
    for _ in range(n):
        t += r.expovariate(1.0 / gap_ms)
        i = r.randrange(sessions)
        cur = state[i]
        o = r.choice([1, 2, r.randint(3, 40), r.randint(40, 160)])
        g.add(int(t), cur, o)
        state[i] = g.prompt(cur[0] + o + r.randint(1, 3 * block), base=cur)
        if r.random() < 0.08:  # a retry: the identical prompt again
            g.add(int(t) + r.randint(0, 50), cur, r.randint(1, 20))
    return g


def gen_burst(seed: int, block: int, bursts: int, per_burst: int) -> Builder:
    """Heavy overlap: bursts of requests at one timestamp, sharing heads within and across
    bursts, long outputs so decodes overlap the next burst; identical prompts in a burst."""
    g = Builder(block, seed)
    r = g.rng
    common_head = g.prompt(4 * block + 5)
    t = 0
    for _b in range(bursts):
        head = g.prompt(common_head[0] + r.randint(1, 3 * block), base=common_head)
        dup = None
        for j in range(per_burst):
            kind = r.random()
            if dup is not None and kind < 0.2:
                pr = dup
            elif kind < 0.7:
                pr = g.prompt(head[0] + r.randint(1, 6 * block), base=head)
            elif kind < 0.85:
                pr = g.head(head, r.randint(1, head[0]))
            else:
                pr = g.prompt(r.randint(1, 3 * block))
            if dup is None and j == 1:
                dup = pr
            g.add(t, pr, r.choice([1, r.randint(2, 30), r.randint(60, 250)]))
        t += r.choice([300, 1000, 2500])
    return g


def gen_mixed(seed: int, block: int, n: int) -> Builder:
    """Long documents with many short questions on them, plus unrelated short requests; a pool
    just above the longest request forces eviction of whole documents."""
    g = Builder(block, seed)
    r = g.rng
    docs = [g.prompt(r.randint(20, 40) * block + r.randint(0, block - 1)) for _ in range(3)]
    t = 0
    for _ in range(n):
        kind = r.random()
        if kind < 0.55:
            d = r.choice(docs)
            pr = g.prompt(d[0] + r.randint(1, 2 * block), base=d)
        elif kind < 0.7:
            pr = r.choice(docs)
        else:
            pr = g.prompt(r.randint(1, 4 * block))
        g.add(t, pr, r.choice([1, r.randint(2, 24), r.randint(30, 90)]))
        t += r.choice([0, 0, 40, 150, 800])
    return g


def slice_real(name: str, n: int) -> list[dict]:
    out = []
    with open(os.path.join(SHARED_TRACES, name)) as fh:
        for line in fh:
            if len(out) == n:
                break
            out.append(json.loads(line))
    return out


def write_trace(out_dir: str, name: str, reqs: list[dict], block: int, how: str, meta: dict) -> None:
    path = os.path.join(out_dir, f"{name}.jsonl")
    with open(path, "w") as fh:
        fh.writelines(json.dumps({"timestamp": d["timestamp"], "input_length": d["input_length"],
                                 "output_length": d["output_length"], "hash_ids": d["hash_ids"]}) + "\n" for d in reqs)
    trace = common.read_trace(path)
    common.check_trace(trace, block)
    common.write_schedule(os.path.join(out_dir, f"{name}.schedule.csv"), common.service_model(trace))
    meta[name] = {"hash_block_size": block, "requests": len(trace), "how": how}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--real-requests", type=int, default=80)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    meta: dict = {}
    s = args.seed
    write_trace(args.out, "gen_edges_b32", gen_edges(s).sorted_reqs(), 32,
                f"gen_edges(seed={s}): small-P, identical-prompt, system-prompt, chain edges", meta)
    write_trace(args.out, "gen_chat_b64", gen_chat(s + 1, 64, 80, 14, 250.0).sorted_reqs(), 64,
                f"gen_chat(seed={s + 1}, block=64, n=80, sessions=14, gap_ms=250)", meta)
    write_trace(args.out, "gen_chat_b16", gen_chat(s + 2, 16, 60, 8, 120.0).sorted_reqs(), 16,
                f"gen_chat(seed={s + 2}, block=16, n=60, sessions=8, gap_ms=120)", meta)
    write_trace(args.out, "gen_burst_b32", gen_burst(s + 3, 32, 6, 9).sorted_reqs(), 32,
                f"gen_burst(seed={s + 3}, block=32, bursts=6, per_burst=9): heavy overlap", meta)
    write_trace(args.out, "gen_burst_b64", gen_burst(s + 4, 64, 5, 12).sorted_reqs(), 64,
                f"gen_burst(seed={s + 4}, block=64, bursts=5, per_burst=12): heavy overlap", meta)
    write_trace(args.out, "gen_mixed_b32", gen_mixed(s + 5, 32, 70).sorted_reqs(), 32,
                f"gen_mixed(seed={s + 5}, block=32, n=70): long documents and short requests", meta)
    n = args.real_requests
    write_trace(args.out, f"conversation_first{n}", slice_real("mooncake_conversation_trace.jsonl", n), 512,
                f"first {n} lines of ../shared/traces/mooncake_conversation_trace.jsonl", meta)
    write_trace(args.out, f"synthetic_first{n}", slice_real("mooncake_synthetic_trace.jsonl", n), 512,
                f"first {n} lines of ../shared/traces/mooncake_synthetic_trace.jsonl", meta)
    with open(os.path.join(args.out, "traces.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    for k, v in meta.items():
        print(f"{k}: {v['requests']} requests, B_h {v['hash_block_size']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
