"""Check LMCACHE_NOTES.md's rules for LMCache 0.5.6 behind vLLM (serial) against the engine's CSVs.

    python3 validation/check_lmcache_rules.py          # every LMCache CSV in tests/data/engines/offload/
    python3 validation/check_lmcache_rules.py --ablate # also: which rule details the numbers depend on

Standard library only; not engine code and not the planner: a restatement of the rules read in
LMCache 0.5.6 (LMCACHE_NOTES.md) for the serial schedule, with LMCache's defaults
(save_unfull_chunk False, cache_policy LRU, synchronous loads, no layerwise, no blending). The
GPU hit is taken from the engine's own column (``hit_tokens_<N>``); the CPU and disk tiers are
modelled. ``model`` is meant to be ported; ``simulate`` gives every observed column.

Per request (P prompt tokens, K-token chunks, n = floor(P / K) full chunks, chunk keys
prefix-chained; everything happens in the request's first step):

1. lookup (scheduler, get_num_new_matched_tokens -> LMCacheEngine.lookup, pin): the run of
   leading chunks held by the CPU tier (c), then, from chunk c on, the run held by the disk tier
   (d); L = (c + d) K. The found chunks are pinned and "touched": in each tier they move to the
   MRU end last chunk first, so chunk 0 ends most recent.
2. the connector reports L - G (G the GPU hit), minus 1 when L == P, and 0 if that is <= 0.
3. load (worker start_load_kv -> retrieve), only when that number is > 0: chunks floor(G/K) ..
   L/K - 1; if the lookup found chunks in one tier only, all come from it, else the CPU's
   leading run of them, then the disk's. CPU reads change no recency. Disk reads stage each chunk
   in a fresh CPU allocation (evicting the CPU's LRU unpinned chunk when the CPU memory is full),
   refresh the chunk's disk recency (in chunk order), and write it back into the CPU tier at the
   MRU end (promotion; skipped if the CPU already holds it). Then every pin is released.
4. store (worker wait_for_save -> LMCacheEngine.store): nothing if L > 0 and n*K == L; else
   chunks L/K .. n-1 (chunks already held are stored again: each one first takes a CPU
   allocation). For each chunk in order a CPU allocation, evicting the CPU's LRU chunk while
   the CPU memory is full; if nothing is evictable the store keeps the chunks allocated so far.
   Then every allocated chunk is put into the CPU tier at the MRU end unless it is there
   already (no recency refresh), and into the disk tier: a chunk already on disk moves to the
   disk's MRU end; a new one evicts the disk's LRU chunks until it fits and lands at the MRU
   end when its write completes (writes complete in order before the next request).
5. decode: nothing (save_decode_cache False); GPU-side only.

Exit status 1 if any request differs in any observed column.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

E = common.ENGINE_BLOCK
COLS = ["offload_hit_tokens", "lmcache_hit_tokens", "lookup_cpu_tokens", "lookup_disk_tokens",
        "loaded_cpu_tokens", "loaded_disk_tokens", "stored_chunks", "stored_disk_chunks"]


def chunk_keys(r: common.Request, bh: int, chunk: int) -> list[tuple]:
    """Prefix-chained identity of each full chunk: its 16-token pages (page s of hash block b)."""
    keys, prev = [], None
    pages = chunk // E
    for i in range(r.input_length // chunk):
        content = []
        for p in range(i * pages, (i + 1) * pages):
            j, s = divmod(p * E, bh)
            content.append((r.hash_ids[j], s // E))
        prev = (prev, tuple(content))
        keys.append(prev)
    return keys


class Stuck(Exception):
    pass


def simulate(trace, bh: int, chunk: int, cpu: int, disk: int, gpu_hits: list[int], variant: frozenset = frozenset()):
    """Every observed column per request, and per-tier write / eviction counts. ``variant``: rules
    deliberately changed (ABLATIONS), to see which details the engine's numbers depend on."""
    hot: OrderedDict = OrderedDict()  # CPU tier, LRU first
    dsk: OrderedDict = OrderedDict()  # disk tier, LRU first
    st = {"cpu_puts": 0, "disk_puts": 0, "cpu_evictions": 0, "disk_evictions": 0, "promotions": 0,
          "cpu_put_skipped_present": 0, "disk_put_refresh_present": 0}
    out = []
    for r, g in zip(trace, gpu_hits):
        keys = chunk_keys(r, bh, chunk)
        n = len(keys)
        row = dict.fromkeys(COLS, 0)
        # 1. lookup
        c = 0
        while c < n and keys[c] in hot:
            c += 1
        d = 0
        if disk and "either_tier_run" in variant:  # the run of chunks held by either tier
            while c + d < n and (keys[c + d] in dsk or keys[c + d] in hot):
                d += 1
        elif disk:
            while c + d < n and keys[c + d] in dsk:
                d += 1
        L = (c + d) * chunk
        pinned = set(keys[:c])
        order = (lambda ks: ks) if "touch_head_first" in variant else reversed
        for k in order(keys[:c]):
            hot.move_to_end(k)
        for k in order([k for k in keys[c:c + d] if k in dsk]):
            dsk.move_to_end(k)
        row.update(lmcache_hit_tokens=L, lookup_cpu_tokens=c * chunk, lookup_disk_tokens=d * chunk)
        # 2. the connector's number
        ext = L - g - (1 if L == r.input_length and "no_last_token_rule" not in variant else 0)
        row["offload_hit_tokens"] = max(ext, 0)
        inflight = 0  # CPU allocations not (yet) in the CPU tier

        def allocate(busy: set) -> bool:
            nonlocal inflight
            while len(hot) + inflight + 1 > cpu:
                victim = next((k for k in hot if k not in pinned and k not in busy), None)
                if victim is None:
                    return False
                del hot[victim]
                st["cpu_evictions"] += 1
            inflight += 1
            return True

        # 3. load
        if ext > 0:
            g0 = g // chunk
            want = keys[g0:L // chunk]
            if c == 0 or d == 0:
                mapping = [("disk" if c == 0 else "cpu", want)]
            else:
                cc = 0
                while cc < len(want) and want[cc] in hot:
                    cc += 1
                rest = want[cc:]
                dd = 0
                while dd < len(rest) and rest[dd] in dsk:
                    dd += 1
                mapping = [(t, ks) for t, ks in (("cpu", want[:cc]), ("disk", rest[:dd])) if ks]
            busy: set = set()
            for tier, ks in mapping:
                if tier == "cpu":
                    busy.update(ks)  # held by the reader until the retrieve ends
                    row["loaded_cpu_tokens"] += len(ks) * chunk
                    continue
                for k in ks:  # stage each chunk in a CPU allocation
                    if not allocate(busy):
                        raise Stuck(f"request {r.index}: disk read finds no evictable CPU chunk")
                for k in ks:
                    dsk.move_to_end(k)
                row["loaded_disk_tokens"] += len(ks) * chunk
                for k in ks:  # write-back into the CPU tier
                    inflight -= 1
                    if "no_promotion" in variant:
                        continue
                    if k in hot:
                        st["cpu_put_skipped_present"] += 1
                    else:
                        hot[k] = True
                        st["cpu_puts"] += 1
                        st["promotions"] += 1
        pinned = set()
        # 4. store
        skip = max(L, g - g % chunk) if "store_skips_gpu_hit" in variant else L
        if not (skip > 0 and n * chunk <= skip):
            todo = []
            for k in keys[skip // chunk:]:
                if "no_alloc_for_held" in variant and k in hot:
                    todo.append(k)
                    inflight += 1
                    continue
                if not allocate(set()):
                    break
                todo.append(k)
            if "store_head_last" in variant:
                todo = todo[::-1]
            for k in todo:
                inflight -= 1
                if k in hot:
                    if "cpu_restore_refreshes" in variant:
                        hot.move_to_end(k)
                    st["cpu_put_skipped_present"] += 1
                else:
                    hot[k] = True
                    st["cpu_puts"] += 1
                    row["stored_chunks"] += 1
            if disk:
                pending = []
                for k in todo:
                    if k in dsk:
                        dsk.move_to_end(k)
                        st["disk_put_refresh_present"] += 1
                        continue
                    if len(dsk) + len(pending) + 1 > disk and not dsk:
                        continue  # nothing written to evict (the rest is in flight): not admitted (disk.py:383-395)
                    while len(dsk) + len(pending) + 1 > disk:
                        victim = next(iter(dsk))
                        del dsk[victim]
                        st["disk_evictions"] += 1
                    pending.append(k)
                for k in pending:  # the writes land in order
                    dsk[k] = True
                    st["disk_puts"] += 1
                    row["stored_disk_chunks"] += 1
        assert inflight == 0
        out.append(row)
    st["cpu_chunks_at_end"] = len(hot)
    st["disk_chunks_at_end"] = len(dsk)
    return out, st


def model(trace, hash_block_size: int, chunk_tokens: int, cpu_chunks: int, disk_chunks: int,
          gpu_hits: list[int], decode: bool = True):
    """Per request (cpu_hit_tokens, disk_hit_tokens, offload_hit_tokens): the LMCache prefix hit
    split by the tier that holds each chunk (from token 0) and the connector's number beyond the
    GPU hit; plus per-tier written chunk counts. ``decode`` changes nothing on LMCache's side
    (generated tokens are never stored); it only changes the GPU hits, which are an input."""
    rows, st = simulate(trace, hash_block_size, chunk_tokens, cpu_chunks, disk_chunks, gpu_hits)
    per_req = [(x["lookup_cpu_tokens"], x["lookup_disk_tokens"], x["offload_hit_tokens"]) for x in rows]
    return per_req, {"cpu_written_chunks": st["cpu_puts"], "disk_written_chunks": st["disk_puts"],
                     "cpu_evictions": st["cpu_evictions"], "disk_evictions": st["disk_evictions"],
                     "promotions": st["promotions"]}


ABLATIONS = {
    "touch_head_first": "a lookup hit leaves the last chunk most recent (touch in chunk order)",
    "store_head_last": "a store puts its chunks last chunk first (chunk 0 most recent)",
    "no_alloc_for_held": "a store allocates (and evicts) only for chunks the CPU does not hold",
    "cpu_restore_refreshes": "re-storing a chunk the CPU holds refreshes its CPU recency",
    "no_promotion": "a disk hit is not written back into the CPU tier",
    "either_tier_run": "the lookup's run continues through chunks held by either tier",
    "store_skips_gpu_hit": "a store also skips the chunks the GPU hit covers",
    "no_last_token_rule": "no -1 on a full-prompt hit",
}


def ablate(manifest) -> None:
    """For each changed rule: in how many committed pool columns some request then differs."""
    runs = []
    for run in manifest["runs"]:
        if run["engine"]["name"] != "lmcache":
            continue
        trace = common.read_trace(os.path.join(ROOT, "tests", "data", "engines", run["trace"]))
        with open(os.path.join(ROOT, "tests", "data", "engines", "offload", run["file"])) as fh:
            rows = list(csv.DictReader(fh))
        for prun in run["runs"]:
            if prun["feasible"]:
                runs.append((run, trace, rows, prun["pool"]))
    for name, what in ABLATIONS.items():
        ncol = nreq = 0
        for run, trace, rows, pool in runs:
            hits = [int(x[f"hit_tokens_{pool}"]) for x in rows]
            try:
                want, _ = simulate(trace, run["hash_block_size"], run["chunk_tokens"], run["cpu_chunks"],
                                   run["disk_chunks"], hits, frozenset([name]))
            except Stuck:
                ncol += 1
                continue
            d = {i for col in COLS for i, x in enumerate(want) if x[col] != int(rows[i][f"{col}_{pool}"])}
            ncol += bool(d)
            nreq += len(d)
        print(f"ablation {name} ({what}): {ncol} of {len(runs)} pool columns differ, {nreq} requests")


def main() -> int:
    with open(os.path.join(ROOT, "tests", "data", "engines", "offload", "manifest.json")) as fh:
        manifest = json.load(fh)
    bad = 0
    checked = 0
    for run in manifest["runs"]:
        if run["engine"]["name"] != "lmcache":
            continue
        trace = common.read_trace(os.path.join(ROOT, "tests", "data", "engines", run["trace"]))
        with open(os.path.join(ROOT, "tests", "data", "engines", "offload", run["file"])) as fh:
            rows = list(csv.DictReader(fh))
        # The GPU hits do not depend on LMCache (loaded blocks become ordinary GPU blocks):
        # equal to drive_vllm.py's committed serial columns (no connector at all).
        dtag = "decode" if run["decode"] else "nodecode"
        ref_path = os.path.join(ROOT, "tests", "data", "engines", "results",
                                f"{run['trace'][:-len('.jsonl')]}.vllm.serial.{dtag}.csv")
        with open(ref_path) as fh:
            ref = list(csv.DictReader(fh))
        for prun in run["runs"]:
            if prun["feasible"]:
                col = f"hit_tokens_{prun['pool']}"
                nd = sum(1 for a, b in zip(ref, rows) if a[col] != b[col])
                if nd:
                    print(f"{run['file']}: {col} differs from {os.path.relpath(ref_path, ROOT)} on {nd} requests")
                    bad += 1
        for prun in run["runs"]:
            if not prun["feasible"]:
                continue
            pool = prun["pool"]
            hits = [int(x[f"hit_tokens_{pool}"]) for x in rows]
            try:
                want, st = simulate(trace, run["hash_block_size"], run["chunk_tokens"], run["cpu_chunks"],
                                    run["disk_chunks"], hits)
            except Stuck as e:
                print(f"{run['file']} N={pool}: model stuck ({e}), engine completed")
                bad += 1
                continue
            diffs = {}
            for col in COLS:
                got = [int(x[f"{col}_{pool}"]) for x in rows]
                d = [i for i, x in enumerate(want) if x[col] != got[i]]
                if d:
                    diffs[col] = d
            es = prun["stats"]
            stat_diff = {k: (es[k], st[k]) for k in ("cpu_puts", "disk_puts", "cpu_evictions", "disk_evictions",
                                                      "promotions", "cpu_chunks_at_end", "disk_chunks_at_end",
                                                      "cpu_put_skipped_present", "disk_put_refresh_present")
                         if es.get(k) != st[k]}
            checked += 1
            bad += bool(diffs or stat_diff)
            tot = sum(int(x[f"offload_hit_tokens_{pool}"]) for x in rows)
            print(f"{run['file']} N={pool}: offload {tot} model {sum(x['offload_hit_tokens'] for x in want)}; "
                  f"cpu/disk written {es['cpu_puts']}/{es['disk_puts']} evicted {es['cpu_evictions']}/"
                  f"{es['disk_evictions']} promoted {es['promotions']}"
                  + (f"  DIFF {{{', '.join(f'{k}: {len(v)} {v[:6]}' for k, v in diffs.items())}}}" if diffs else "")
                  + (f"  STATS (engine, model) {stat_diff}" if stat_diff else ""))
    print(f"{checked} pool columns checked, {bad} differing")
    if "--ablate" in sys.argv:
        ablate(manifest)
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
