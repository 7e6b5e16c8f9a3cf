"""Check OFFLOAD_NOTES.md's rules for vLLM's native CPU tier (lru and arc, serial) against the engine's CSVs.

    python3 validation/check_offload_rules.py          # every lru and arc CSV in tests/data/engines/offload/

Standard library only; not engine code and not the planner: a restatement of the rules read in
vLLM 0.33.0 (OFFLOAD_NOTES.md) for the serial schedule, used to see whether they explain every
request's `offload_hit_tokens_<N>`. The GPU hit is taken from the engine's own column
(`hit_tokens_<N>`, which the CPU tier does not change in serial runs); the CPU tier is modelled:

- lookup (before the request's own stores): from block `hit // 16`, the run of consecutive full
  prompt blocks the tier holds, up to floor(P / 16) blocks (the whole prompt, no last-token cap);
- store (the prefill step): the request offers all its floor(P / 16) full prompt blocks (after a
  CPU load only those past the loaded ones: OffloadPolicy.CHUNK_LEVEL); blocks
  the tier lacks need room: free slots first, then LRU eviction of blocks not among the offered
  ones; if there is not room for all of them, nothing is stored (all or nothing);
- finish: every offered block still held becomes most recent, the prompt's head most recent of
  all (last block first).

`model` is lru (`policies/lru.py`), `model_arc` arc (`policies/arc.py`); both with the engine's
step order (a finished request is finalized in the next request's first step, after that
request's lookup, load and stores). Exit status 1 if any request differs.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

E = common.ENGINE_BLOCK


def block_keys(r: common.Request, bh: int) -> list[tuple]:
    """Prefix-chained identity of each full 16-token prompt block (page s of hash block b)."""
    keys, prev = [], None
    for i in range(r.input_length // E):
        j, s = divmod(i * E, bh)
        prev = (prev, r.hash_ids[j], s // E)
        keys.append(prev)
    return keys


def model(trace, bh: int, cpu: int, gpu_hits: list[int]) -> list[int]:
    """Rank-based LRU as lru.py keeps it, with the engine's step order in a serial run."""
    rank: dict = {}  # key in tier -> (rank, -position): lowest evicted first
    counter = [0]

    def fresh() -> int:
        counter[0] += 1
        return counter[0]

    def access(keys, req):  # on_request_access: (request rank, -position), only raises
        if req["rank"] is None:
            req["rank"] = fresh()
        for k in keys:
            if k in rank:
                new = (req["rank"], -req["pos"][k])
                if rank[k] < new:
                    rank[k] = new
        req["seen"].update(keys)

    def store(req) -> bool:  # prepare_store over the offered full prompt blocks
        keys = req["offer"]
        new = [k for k in keys if k not in rank]
        access([k for k in keys if k not in req["seen"]], req)
        need = len(new) - (cpu - len(rank))
        if need > 0:
            prot = set(keys)
            cand = sorted((rk, k) for k, rk in rank.items() if k not in prot)
            if len(cand) < need:
                return False
            for _, k in cand[:need]:
                del rank[k]
        if req["rank"] is None:
            req["rank"] = fresh()
        for k in new:
            rank[k] = (req["rank"], -req["pos"][k])
        return True

    def finish(req):  # on_request_finished: fresh ranks, last block first
        for k in reversed(req["keys"]):
            if k in rank and k in req["seen"]:
                rank[k] = (fresh(), 0)

    out = []
    prev = None  # the finished request whose finalization rides on the next step
    for r, hit in zip(trace, gpu_hits):
        keys = block_keys(r, bh)
        req = {"keys": keys, "pos": {k: (i + 1) * E for i, k in enumerate(keys)}, "rank": None,
               "seen": set(), "stored": False, "offer": keys}
        run = 0
        for k in keys[hit // E:]:
            if k not in rank:
                break
            run += 1
        out.append(run * E)
        if run:  # step 1: prepare_load pins and records the loaded blocks; no store this step
            access(keys[hit // E: hit // E + run], req)
            # CHUNK_LEVEL (the default OffloadPolicy): after a load, stores start past the
            # loaded blocks; the GPU-hit and loaded blocks are not offered again.
            req["offer"] = keys[hit // E + run:]
        else:  # step 1 computes the prompt: its stores
            req["stored"] = store(req)
        if prev is not None:  # build_connector_meta: the finished request's last try, then finalization
            if not prev["stored"]:
                prev["stored"] = store(prev)
            finish(prev)
        if run:  # step 2 computes the rest of the prompt: its stores
            req["stored"] = store(req)
        # (decode steps retry a failed store; nothing else changes the tier in between)
        if not req["stored"] and r.output_length > 1:
            req["stored"] = store(req)
        prev = req
    return out


def model_arc(trace, bh: int, cpu: int, gpu_hits: list[int]) -> list[int]:
    """ARC as arc.py keeps it (T1/T2, ghosts B1/B2, adaptive target), same step order as lru."""
    t1: OrderedDict = OrderedDict()
    t2: OrderedDict = OrderedDict()
    b1: OrderedDict = OrderedDict()
    b2: OrderedDict = OrderedDict()
    target = [0.0]

    def held(k) -> bool:
        return k in t1 or k in t2

    def ghost_hit(k) -> None:
        if k in b1:
            target[0] = min(target[0] + max(1, len(b2) / len(b1)), cpu)
            b1.move_to_end(k)
        elif k in b2:
            target[0] = max(target[0] - max(1, len(b1) / len(b2)), 0)
            b2.move_to_end(k)

    def evict(n: int, prot: set):
        cands, vt1 = [], len(t1)
        it1 = iter([k for k in t1 if k not in prot])
        it2 = iter([k for k in t2 if k not in prot])
        for _ in range(n):
            c = None
            if vt1 >= int(target[0]):
                k = next(it1, None)
                if k is not None:
                    c, vt1 = (k, True), vt1 - 1
            if c is None:
                k = next(it2, None)
                if k is not None:
                    c = (k, False)
            if c is None:
                k = next(it1, None)
                if k is None:
                    return False
                c, vt1 = (k, True), vt1 - 1
            cands.append(c)
        for k, from_t1 in cands:
            if from_t1:
                del t1[k]
                b1[k] = None
            else:
                del t2[k]
                b2[k] = None
        for g in (b1, b2):
            while len(g) > cpu:
                g.popitem(last=False)
        return True

    def store(req) -> bool:
        keys = req["offer"]
        new = [k for k in keys if not held(k)]
        misses = [k for k in new if k not in req["missed"]]
        for k in reversed(misses):
            ghost_hit(k)
        req["missed"].update(misses)
        for k in keys:
            if held(k) and k not in req["inserted"]:
                req["reused"].add(k)
        req["seen"].update(keys)
        if not new:
            return True
        need = len(new) - (cpu - len(t1) - len(t2))
        if need > 0:
            if need > len(t1) + len(t2) or not evict(need, set(keys)):
                return False
        for k in new:
            t1[k] = True
            b1.pop(k, None)
            b2.pop(k, None)
        req["inserted"].update(new)
        return True

    def finish(req) -> None:
        only_ins = req["inserted"] - req["reused"]
        for k in reversed([k for k in req["keys"] if k in req["seen"]]):
            if k in only_ins:
                if k in t1:
                    t1.move_to_end(k)
                elif k in t2:
                    t2.move_to_end(k)
                continue
            if k in req["reused"] and k in t1:
                del t1[k]
                t2[k] = True
            elif k in req["reused"] and k in t2:
                t2.move_to_end(k)

    out = []
    prev = None
    for r, hit in zip(trace, gpu_hits):
        keys = block_keys(r, bh)
        req = {"keys": keys, "offer": keys, "seen": set(), "missed": set(), "inserted": set(),
               "reused": set(), "stored": False}
        run = 0
        for k in keys[hit // E:]:
            if not held(k):
                break
            run += 1
        out.append(run * E)
        if run:
            loaded = keys[hit // E: hit // E + run]
            req["seen"].update(loaded)
            req["reused"].update(loaded)
            req["offer"] = keys[hit // E + run:]
        else:
            req["stored"] = store(req)
        if prev is not None:
            if not prev["stored"]:
                prev["stored"] = store(prev)
            finish(prev)
        if run:
            req["stored"] = store(req)
        if not req["stored"] and r.output_length > 1:
            req["stored"] = store(req)
        prev = req
    return out


def main() -> int:
    with open(os.path.join(ROOT, "tests", "data", "engines", "offload", "manifest.json")) as fh:
        manifest = json.load(fh)
    bad = 0
    for run in manifest["runs"]:
        if run["policy"] not in ("lru", "arc"):
            continue
        fn = model if run["policy"] == "lru" else model_arc
        trace = common.read_trace(os.path.join(ROOT, "tests", "data", "engines", run["trace"]))
        with open(os.path.join(ROOT, "tests", "data", "engines", "offload", run["file"])) as fh:
            rows = list(csv.DictReader(fh))
        for pool in run["gpu_pools"]:
            hits = [int(x[f"hit_tokens_{pool}"]) for x in rows]
            got = [int(x[f"offload_hit_tokens_{pool}"]) for x in rows]
            want = fn(trace, run["hash_block_size"], run["cpu_blocks"], hits)
            diff = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
            bad += bool(diff)
            print(f"{run['file']} N={pool}: engine {sum(got)} model {sum(want)} "
                  f"differing requests {len(diff)} {diff[:8]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
