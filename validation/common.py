"""Shared, engine-independent part of the validation drivers (standard library only).

Imported by ``drive_vllm.py`` and ``drive_sglang.py`` (each under its own engine venv) and by
``make_traces.py`` / ``run_all.py`` (any Python 3.10+). It implements the parts of
``SPEC.md`` that are not engine logic: reading a Mooncake trace, the deterministic token ids,
the timed schedule (service model and CSV), the event order, and the per-request CSV.
Nothing here decides a cache hit: the drivers hand every event to the engine's own objects.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

ENGINE_BLOCK = 16  # E: the engine block (page) size, tokens
PREFILL_TOKENS_PER_S = 10000.0
DECODE_TOKENS_PER_S = 50.0

# Event kinds, in the order SPEC.md processes events that share a time.
FINISH, DECODE, PREFILL_END, ARRIVAL = 0, 1, 2, 3
KIND_NAMES = {FINISH: "finish", DECODE: "decode", PREFILL_END: "prefill_end", ARRIVAL: "arrival"}

# Token ids. Prompt token of page s of hash block id b at position p (0..15) in the page:
#   PROMPT_BASE + ((b * MAX_PAGES_PER_BLOCK) + s) * 16 + p        (injective in (b, s, p))
# Generated token k (1-based) of request r:  GEN_BASE + r * MAX_OUTPUT + k  (never a prompt
# token, never shared between requests, so no block holding a generated token is ever hit).
PROMPT_BASE = 1
MAX_PAGES_PER_BLOCK = 64  # hash block sizes up to 1024 tokens
GEN_BASE = 1 << 52
MAX_OUTPUT = 1 << 20


@dataclass(frozen=True)
class Request:
    index: int  # position in the file (the `id` column for Mooncake traces)
    timestamp: int  # ms
    input_length: int  # P
    output_length: int  # O
    hash_ids: tuple[int, ...]


def read_trace(path: str) -> list[Request]:
    out: list[Request] = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            out.append(
                Request(
                    index=len(out),
                    timestamp=int(d["timestamp"]),
                    input_length=int(d["input_length"]),
                    output_length=int(d["output_length"]),
                    hash_ids=tuple(int(x) for x in d["hash_ids"]),
                )
            )
    return out


def check_trace(trace: Sequence[Request], hash_block_size: int) -> None:
    """The format rules SPEC.md relies on: ceil(P / B_h) ids, O >= 1, B_h a multiple of 16."""
    if hash_block_size % ENGINE_BLOCK or hash_block_size // ENGINE_BLOCK > MAX_PAGES_PER_BLOCK:
        raise ValueError(f"hash block size {hash_block_size} must be a multiple of 16, at most 1024")
    for r in trace:
        if r.input_length < 1 or r.output_length < 1:
            raise ValueError(f"request {r.index}: input and output lengths must be >= 1")
        if len(r.hash_ids) != -(-r.input_length // hash_block_size):
            raise ValueError(f"request {r.index}: {len(r.hash_ids)} ids for {r.input_length} tokens")
        if r.output_length >= MAX_OUTPUT:
            raise ValueError(f"request {r.index}: output too long for the token scheme")


def prompt_tokens(r: Request, hash_block_size: int) -> list[int]:
    """The prompt's token ids: page s of hash block id b -> tokens derived from (b, s, position)."""
    toks: list[int] = []
    for j, b in enumerate(r.hash_ids):
        n = min(hash_block_size, r.input_length - j * hash_block_size)
        for t in range(n):
            s, p = divmod(t, ENGINE_BLOCK)
            toks.append(PROMPT_BASE + (b * MAX_PAGES_PER_BLOCK + s) * ENGINE_BLOCK + p)
    assert len(toks) == r.input_length
    return toks


def output_token(r: Request, k: int) -> int:
    """Generated token k (k = 1 .. O) of request r."""
    return GEN_BASE + r.index * MAX_OUTPUT + k


# ----------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Times:
    arrival_s: float
    prefill_end_s: float
    finish_s: float


def service_model(
    trace: Sequence[Request],
    prefill_tokens_per_s: float = PREFILL_TOKENS_PER_S,
    decode_tokens_per_s: float = DECODE_TOKENS_PER_S,
) -> list[Times]:
    """SPEC.md's service model, in float64, in exactly this order of operations."""
    t0 = trace[0].timestamp if trace else 0
    out = []
    for r in trace:
        arrival = (r.timestamp - t0) / 1000
        prefill_end = arrival + r.input_length / prefill_tokens_per_s
        finish = prefill_end + r.output_length / decode_tokens_per_s
        out.append(Times(arrival, prefill_end, finish))
    return out


def write_schedule(path: str, times: Sequence[Times]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["request", "arrival_s", "prefill_end_s", "finish_s"])
        for i, t in enumerate(times):
            w.writerow([i, repr(t.arrival_s), repr(t.prefill_end_s), repr(t.finish_s)])


def read_schedule(path: str, n: int) -> list[Times]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if len(rows) != n:
        raise ValueError(f"{path}: {len(rows)} rows for {n} requests")
    out = []
    for i, row in enumerate(rows):
        if int(row["request"]) != i:
            raise ValueError(f"{path}: row {i} is request {row['request']}")
        t = Times(float(row["arrival_s"]), float(row["prefill_end_s"]), float(row["finish_s"]))
        if not (t.arrival_s <= t.prefill_end_s <= t.finish_s):
            raise ValueError(f"{path}: request {i} times out of order")
        out.append(t)
    return out


def events(
    trace: Sequence[Request], schedule: str, decode: bool, times: Sequence[Times] | None
) -> list[tuple[float, int, int, int]]:
    """The event list (time, kind, request, k) in processing order.

    serial: per request, arrival, prefill_end, decode k = 1..O-1 (with decode), finish; the
    time field is then just the position. timed: SPEC.md's events sorted by the key itself.
    Without decode every request is treated as generating exactly one token (no decode steps).
    """
    ev: list[tuple[float, int, int, int]] = []
    if schedule == "serial":
        for r in trace:
            o = r.output_length if decode else 1
            ev.append((float(len(ev)), ARRIVAL, r.index, 0))
            ev.append((float(len(ev)), PREFILL_END, r.index, 0))
            for k in range(1, o):
                ev.append((float(len(ev)), DECODE, r.index, k))
            ev.append((float(len(ev)), FINISH, r.index, 0))
        return ev
    if schedule != "timed" or times is None:
        raise ValueError("timed schedule needs times")
    for r, t in zip(trace, times):
        o = r.output_length if decode else 1
        ev.append((t.arrival_s, ARRIVAL, r.index, 0))
        ev.append((t.prefill_end_s, PREFILL_END, r.index, 0))
        for k in range(1, o):
            ev.append((t.prefill_end_s + (t.finish_s - t.prefill_end_s) * k / o, DECODE, r.index, k))
        ev.append((t.finish_s, FINISH, r.index, 0))
    ev.sort()
    return ev


# ----------------------------------------------------------------------------- running


class Infeasible(Exception):
    """The engine could not allocate at an event even after evicting all it could."""

    def __init__(self, request: int, event: str, k: int = 0, detail: str = ""):
        super().__init__(f"request {request} {event} {k}: {detail}")
        self.request, self.event, self.k, self.detail = request, event, k, detail


@dataclass
class RunResult:
    pool: str  # "inf" or the integer as text
    feasible: bool
    hits: list[int] | None = None
    failure: dict | None = None
    seconds: float = 0.0
    stats: dict | None = None


def drive(engine, trace: Sequence[Request], ev: Iterable[tuple[float, int, int, int]], decode: bool) -> list[int]:
    """Feed the events to an engine adapter; returns the hit tokens per request (file order).

    The adapter has arrive(r) -> hit tokens, prefill_end(r), decode(r, k), finish(r); any of
    them may raise Infeasible.
    """
    hits = [-1] * len(trace)
    for _t, kind, i, k in ev:
        r = trace[i]
        if kind == ARRIVAL:
            hits[i] = engine.arrive(r)
        elif kind == PREFILL_END:
            engine.prefill_end(r)
        elif kind == DECODE:
            engine.decode(r, k)
        else:
            engine.finish(r)
    return hits


def run_pools(
    make_engine: Callable[[str], object],
    trace: Sequence[Request],
    ev: list[tuple[float, int, int, int]],
    decode: bool,
    pools: Sequence[str],
    log=sys.stderr,
) -> list[RunResult]:
    out = []
    for pool in pools:
        t = time.perf_counter()
        engine = make_engine(pool)
        try:
            hits = drive(engine, trace, ev, decode)
            res = RunResult(pool, True, hits=hits)
        except Infeasible as e:
            res = RunResult(pool, False, failure={"request": e.request, "event": e.event, "k": e.k, "detail": e.detail})
        res.seconds = round(time.perf_counter() - t, 3)
        stats = getattr(engine, "stats", None)
        res.stats = stats() if callable(stats) else None
        print(
            f"  pool {pool}: {'ok' if res.feasible else 'INFEASIBLE ' + json.dumps(res.failure)}"
            f" ({res.seconds}s)" + (f" hits={sum(res.hits)}" if res.hits else ""),
            file=log,
            flush=True,
        )
        out.append(res)
    return out


def bisect_smallest_feasible(
    make_engine: Callable[[str], object],
    trace: Sequence[Request],
    ev: list[tuple[float, int, int, int]],
    decode: bool,
    lo: int,
    hi: int,
    log=sys.stderr,
) -> dict:
    """Smallest feasible pool in (lo, hi] by bisection, hi known feasible, lo known infeasible
    (or the minimum). Returns the pool and the failure at pool - 1."""

    def feasible(n: int):
        try:
            drive(make_engine(str(n)), trace, ev, decode)
            return True, None
        except Infeasible as e:
            return False, {"request": e.request, "event": e.event, "k": e.k, "detail": e.detail}

    ok, _ = feasible(hi)
    if not ok:
        raise ValueError(f"upper bound {hi} is not feasible")
    fail_lo = None
    if lo >= 1:
        ok, fail_lo = feasible(lo)
        if ok:
            return {"smallest_feasible": lo, "failure_below": None, "checked_from": lo}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, f = feasible(mid)
        print(f"    bisect {mid}: {'ok' if ok else 'infeasible'}", file=log, flush=True)
        if ok:
            hi = mid
        else:
            lo, fail_lo = mid, f
    return {"smallest_feasible": hi, "failure_below": fail_lo}


def pages_without_reuse(trace: Sequence[Request], decode: bool) -> int:
    """Blocks needed if nothing were ever shared or freed: an upper bound for the 'inf' pool."""
    tot = 0
    for r in trace:
        o = r.output_length if decode else 1
        tot += -(-(r.input_length + o) // ENGINE_BLOCK) + 1
    return tot


def write_results(path: str, trace: Sequence[Request], times: Sequence[Times], results: Sequence[RunResult]) -> None:
    feas = [res for res in results if res.feasible]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(
            ["request", "id", "arrival_s", "worker", "input_tokens", "output_tokens"]
            + [f"hit_tokens_{res.pool}" for res in feas]
        )
        for r, t in zip(trace, times):
            w.writerow(
                [r.index, r.index, repr(t.arrival_s), 0, r.input_length, r.output_length]
                + [res.hits[r.index] for res in feas]
            )


def parse_pools(text: str) -> list[str]:
    pools = []
    for p in text.split(","):
        p = p.strip()
        if not p:
            continue
        if p != "inf":
            if int(p) < 1:
                raise ValueError(f"bad pool size {p}")
            p = str(int(p))
        pools.append(p)
    return pools


def common_args(ap) -> None:
    ap.add_argument("--trace", required=True, help="Mooncake JSONL trace")
    ap.add_argument("--hash-block-size", type=int, required=True, help="B_h of the trace's hash ids")
    ap.add_argument("--schedule", choices=["serial", "timed"], required=True)
    ap.add_argument("--schedule-csv", help="timed schedule (request,arrival_s,prefill_end_s,finish_s)")
    ap.add_argument("--no-decode", action="store_true", help="each request generates one token")
    ap.add_argument("--pools", help="comma-separated pool sizes in the engine's own count, or inf")
    ap.add_argument("--out", help="per-request CSV (SPEC.md)")
    ap.add_argument("--summary", help="JSON summary of the runs (feasibility, failures, timings)")
    ap.add_argument("--bisect", nargs=2, type=int, metavar=("LO", "HI"),
                    help="find the smallest feasible pool in (LO, HI] instead of --pools")


def main_common(args, make_engine_factory, engine_info: dict) -> int:
    trace = read_trace(args.trace)
    check_trace(trace, args.hash_block_size)
    if args.schedule_csv:
        times = read_schedule(args.schedule_csv, len(trace))
    else:
        times = service_model(trace)
    decode = not args.no_decode
    ev = events(trace, args.schedule, decode, times)
    make_engine = make_engine_factory(trace, args.hash_block_size, decode)
    summary: dict = {
        "engine": engine_info,
        "trace": args.trace,
        "hash_block_size": args.hash_block_size,
        "schedule": args.schedule,
        "decode": decode,
    }
    if args.bisect:
        lo, hi = args.bisect
        summary["bisect"] = bisect_smallest_feasible(make_engine, trace, ev, decode, lo, hi)
        print(json.dumps(summary["bisect"]), file=sys.stderr)
    else:
        pools = parse_pools(args.pools)
        results = run_pools(make_engine, trace, ev, decode, pools)
        if args.out:
            write_results(args.out, trace, times, results)
        summary["runs"] = [
            {"pool": r.pool, "feasible": r.feasible, "failure": r.failure, "seconds": r.seconds, "stats": r.stats,
             "total_hit_tokens": sum(r.hits) if r.hits else None}
            for r in results
        ]
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump(summary, fh, indent=1)
            fh.write("\n")
    return 0


def inf_pool_size(trace: Sequence[Request], decode: bool) -> int:
    return pages_without_reuse(trace, decode) + 2


def is_inf(pool: str) -> bool:
    return pool == "inf"

