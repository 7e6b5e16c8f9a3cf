"""Benchmark beyond one machine: exact vs SHARDS-sampled vs exact-on-Dask, through the real CLI.

For each size (default 3e7 and 1e8 block accesses) a synthetic request-log-like block stream
is generated in chunks (seeded): sessions whose turns re-read their whole history behind one of
a few hundred shared system prompts chosen by Zipf(1.1), so the stream has shared prefixes, a
hot head and a long cold tail (about one new block in five accesses). It is saved as ``.npy`` and
each run is a separate ``stackdist curve`` process (wall time and peak resident memory from
``wait4``):

- ``exact``: one process, 40 evenly spread capacities;
- ``rate 0.01``, ``rate 0.001`` (3 seeds each, the error bar), ``size 32768``: the mean absolute
  hit-rate error over those 40 capacities against ``exact``;
- ``dask local:2``: two worker processes on this machine; hits must equal ``exact`` at every
  capacity (the merge's share of the accesses is reported).

Also the sampling error on the shared traces (``data/traces``, re-blocked to 16-token pages) at
rates 0.1, 0.01 and 0.001, in process. Prints a table and writes ``results/bench_scale.json``.

Usage::

    python benchmarks/bench_scale.py                      # 3e7 and 1e8 (about 10 minutes here)
    python benchmarks/bench_scale.py --sizes 1e6 --quick  # smoke test
    BENCH_SCALE_TMP=/tmp/huge python benchmarks/bench_scale.py --huge 1e9 --turns 40 --no-plain  # the 10^9 run
    BENCH_SCALE_TMP=/tmp/huge python benchmarks/bench_scale.py --huge 1e9 --turns 40 --cli-dask-only  # + stackdist curve --dask
    BENCH_SCALE_TMP=/tmp/huge python benchmarks/bench_scale.py --huge 5e8 --turns 40 --quick \
        --huge-part "5e8, with the plain exact replay"                       # the plain replay where it fits

``--huge`` writes 8 bytes an access to ``BENCH_SCALE_TMP`` (8 GB at 10^9; deleted afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stackdist.engine import HitCurve
from stackdist.engine.scale.sampling import sampled_curves
from stackdist.output import write_json
from stackdist.traces import read_mooncake, reblock

RESULTS = Path(__file__).resolve().parent / "results" / "bench_scale.json"


def request_log(n_accesses: int, seed: int = 0, prompts: int = 300, chunk: int = 1 << 22, lengths: list[int] | None = None
                ) -> np.ndarray:
    """A block stream like a prefix-cache request log, generated chunk by chunk (int64 ids).

    Each request is a shared system prompt (8-40 blocks; prompt p chosen by Zipf(1.1)) followed
    by its session's history and 2-30 new blocks; a session ends after 1-12 turns; about 3000
    sessions are open at a time, picked at random. Prompt blocks are ``p * 64 + j``; session
    blocks are ``2**20 + session * 512 + j``, so ids are prefix-chained. ``lengths``, when
    given, receives each request's block count (the last one cut at ``n_accesses``).
    """
    rng = np.random.default_rng(seed)
    prompt_len = rng.integers(8, 41, prompts)
    out: list[np.ndarray] = []
    total = 0
    open_sessions: list[list[int]] = []  # [session id, prompt, history length, turns left]
    next_session = 0
    while total < n_accesses:
        parts: list[np.ndarray] = []
        got = 0
        while got < chunk and total + got < n_accesses:
            if len(open_sessions) < 3000 or rng.random() < 0.05:
                p = int(min(rng.zipf(1.1), prompts) - 1)
                open_sessions.append([next_session, p, 0, int(rng.integers(1, 13))])
                next_session += 1
            i = int(rng.integers(0, len(open_sessions)))
            s = open_sessions[i]
            new = int(rng.integers(2, 31))
            hist = min(s[2] + new, 500)
            req = np.concatenate([s[1] * 64 + np.arange(prompt_len[s[1]]), (1 << 20) + s[0] * 512 + np.arange(hist)])
            parts.append(req)
            if lengths is not None:
                lengths.append(min(req.size, n_accesses - total - got))
            got += req.size
            s[2], s[3] = hist, s[3] - 1
            if s[3] <= 0:
                open_sessions[i] = open_sessions[-1]
                open_sessions.pop()
        piece = np.concatenate(parts)
        out.append(piece[: n_accesses - total])
        total += out[-1].size
    return np.concatenate(out).astype(np.int64)


def request_chunks(n_accesses: int, seed: int = 0, prompts: int = 300, window: int = 3000, turns: float = 6.5,
                   requests_per_step: int = 1 << 16, max_history: int = 500):
    """The same kind of request log as :func:`request_log`, vectorized for 10^9 accesses: yields
    int64 block-id arrays (whole requests, the last cut at ``n_accesses``). Request ``r`` picks a
    shared prompt by Zipf(1.1) (``p * 64 + j``, 8-40 blocks) and a session uniformly among
    ``window`` open ones (the window slides by one session every ``turns`` requests, so a session
    gets about ``turns`` turns); its history grows by 2-30 blocks a turn up to ``max_history``
    (``2**20 + session * stride + j``, ``stride`` 512 or the next power of two above
    ``max_history``). The defaults give about one new block in five accesses; more turns than
    ``max_history / 16`` let histories reach their cap and be re-read whole, so fewer blocks are
    new (``turns=40``: about 4 %). O(accesses); state O(window)."""
    stride = max(512, 1 << (int(max_history) - 1).bit_length())
    rng = np.random.default_rng(seed)
    prompt_len = rng.integers(8, 41, prompts)
    history = np.zeros(window + requests_per_step, np.int64)  # by session - base, carried over
    base, r0, total = 0, 0, 0
    while total < n_accesses:
        k = requests_per_step
        r = r0 + np.arange(k)
        first = (r / turns).astype(np.int64)  # the oldest open session of each request
        session = first + rng.integers(0, window, k)
        p = np.minimum(rng.zipf(1.1, k), prompts) - 1
        new = rng.integers(2, 31, k)
        slot = session - base
        order = np.lexsort((r, slot))
        grown = np.zeros(k, np.int64)
        s_sorted, n_sorted = slot[order], new[order]
        start = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
        cum = np.cumsum(n_sorted)
        group_start = np.maximum.accumulate(np.where(start, np.arange(k), 0))
        grown[order] = cum - np.r_[0, cum][group_start]
        hist = np.minimum(history[slot] + grown, max_history)
        last = np.zeros(k, bool)
        last[order[np.r_[s_sorted[1:] != s_sorted[:-1], True]]] = True
        history[slot[last]] = hist[last]
        plen = prompt_len[p]
        lengths = plen + hist
        offsets = np.r_[0, np.cumsum(lengths)]
        j = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        in_prompt = j < np.repeat(plen, lengths)
        ids = np.where(in_prompt, np.repeat(p * 64, lengths) + j,
                       (1 << 20) + np.repeat(session * stride, lengths) + j - np.repeat(plen, lengths))
        ids = ids[: n_accesses - total]
        total += ids.size
        yield ids.astype(np.int64)
        r0 += k
        shift = int((r0) / turns) - base  # sessions that closed: slide the carried history
        if shift > 0:
            history = np.r_[history[shift:], np.zeros(shift, np.int64)]
            base += shift


def zipf_scan_trace(n_accesses: int, path: Path, seed: int = 7, alpha: float = 0.9, keys_per_access: float = 0.05,
                    scan_share: float = 0.2) -> dict[str, Any]:
    """Write a Zipf key trace with scans of ``n_accesses`` int64 keys to the ``.npy`` file ``path``
    (through a memory map, in segments: memory O(segment)), deterministic in its arguments.

    The stream is a run of segments drawn from ``np.random.default_rng(seed)``. A *Zipf segment*
    has a geometric length (mean 50,000 accesses) of keys ``floor(x)`` where ``x`` is the inverse
    CDF of a power law of exponent ``alpha`` on ``[1, U]``, ``U = keys_per_access * n_accesses``
    (``x = ((U**(1 - alpha) - 1) u + 1) ** (1 / (1 - alpha))``, ``u`` uniform; key 1 the hottest).
    A *scan segment* (a segment is one with probability chosen so that about ``scan_share`` of the
    accesses are in scans) reads ``L`` consecutive keys once each, ``L`` uniform in 10^4..10^5,
    starting at a uniform offset of a scan region of ``2 * U`` keys above ``2**40`` (disjoint from
    the Zipf keys; scans re-read the region now and then, a loop larger than most caches). Returns
    the generator's parameters and the seconds it took. O(n)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    universe = max(2, int(keys_per_access * n_accesses))
    zipf_mean, scan_mean = 50_000, 55_000
    scan_p = (scan_share / scan_mean) / ((1 - scan_share) / zipf_mean + scan_share / scan_mean)  # segments that are scans
    top = float(universe) ** (1 - alpha) - 1
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(n_accesses,))
    pos = 0
    while pos < n_accesses:
        if rng.random() < scan_p:
            length = int(rng.integers(10_000, 100_001))
            start = (1 << 40) + int(rng.integers(0, 2 * universe))
            seg = np.arange(start, start + length, dtype=np.int64)
        else:
            length = int(rng.geometric(1 / zipf_mean))
            u = rng.random(length)
            seg = np.floor((top * u + 1) ** (1 / (1 - alpha))).astype(np.int64)
            np.minimum(seg, universe, out=seg)
        take = min(length, n_accesses - pos)
        out[pos : pos + take] = seg[:take]
        pos += take
    out.flush()
    del out
    return {"seed": seed, "alpha": alpha, "keys": universe, "scan_share": scan_share, "zipf_segment_mean": zipf_mean,
            "scan_length": [10_000, 100_000], "generate_s": time.perf_counter() - t0}


def _tree_rss(proc: Any) -> int:
    """Resident bytes of a process and its children (Dask workers included), 0 when gone."""
    try:
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
    except Exception:  # noqa: BLE001 - a process that just ended
        return 0


def run_cli(argv: list[str], command: list[str] | None = None, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``stackdist curve`` process (or ``command`` + ``argv``): its JSON, wall seconds and
    peak resident memory (MiB) of it and its children, sampled every 50 ms (``ru_maxrss`` would
    report the forking parent's), the lowest and highest 1-minute load average meanwhile, and CPU seconds (user + system, the process and the children
    it waited for: the Dask workers)."""
    import psutil

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    import resource

    env = dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    head = [sys.executable, "-m", "stackdist", "curve"] if command is None else command
    proc = subprocess.Popen([*head, *argv, "-o", out], env=env, stderr=subprocess.PIPE)
    watched, peak = psutil.Process(proc.pid), 0
    loads = [os.getloadavg()[0]]
    ended: list[float] = []
    finished = threading.Event()

    def wait() -> None:  # the end time exactly, not to the next 50 ms poll
        proc.wait()
        ended.append(time.perf_counter())
        finished.set()

    threading.Thread(target=wait, daemon=True).start()
    while not finished.wait(0.05):
        peak = max(peak, _tree_rss(watched))
        loads.append(os.getloadavg()[0])
    wall = ended[0] - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"stackdist curve {' '.join(argv)} failed: {err}")
    report = json.loads(Path(out).read_text())
    os.unlink(out)
    return {"report": report, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak / 2**20,
            "load_average": [min(loads), max(loads)]}


def write_formats(n: int, folder: Path) -> dict[str, list[str]]:
    """The synthetic trace of ``n`` accesses in every input form the acceptance check may get:
    ``.npy``, ``.npy`` with the ids replaced by a 64-bit hash (as real block hashes are),
    CSV (``key`` per line), JSONL (``{"key": K}`` per line), sized JSONL (``{"key": K, "size":
    K % 7 + 1}``) and Mooncake JSONL (one request per line, 512-token blocks). Returns each
    form's ``curve`` arguments."""
    from stackdist.engine.scale.sampling import key_hashes

    lengths: list[int] = []
    keys = request_log(n, seed=n % 1000, lengths=lengths)
    forms = {"npy": folder / "t.npy", "npy hashed ids": folder / "h.npy", "csv": folder / "t.csv",
             "jsonl": folder / "t.jsonl", "jsonl sized": folder / "s.jsonl", "mooncake": folder / "m.jsonl"}
    np.save(forms["npy"], keys)
    np.save(forms["npy hashed ids"], key_hashes(keys, 12345).view(np.int64))
    step = 1 << 22
    with open(forms["csv"], "w") as f, open(forms["jsonl"], "w") as g, open(forms["jsonl sized"], "w") as h:
        for lo in range(0, keys.size, step):
            part = keys[lo : lo + step].tolist()
            f.write("\n".join(map(str, part)) + "\n")
            g.write("".join(f'{{"key": {k}}}\n' for k in part))
            h.write("".join(f'{{"key": {k}, "size": {k % 7 + 1}}}\n' for k in part))
    offsets = np.r_[0, np.cumsum(lengths)]
    listed = keys.tolist()
    with open(forms["mooncake"], "w") as f:
        for r in range(len(lengths)):
            ids = listed[offsets[r] : offsets[r + 1]]
            f.write(f'{{"timestamp": {r * 10}, "input_length": {len(ids) * 512}, "output_length": 1, '
                    f'"hash_ids": [{", ".join(map(str, ids))}]}}\n')
    return {name: [str(path)] + (["--format", "mooncake"] if name == "mooncake" else []) for name, path in forms.items()}


def process_floor(folder: Path, rounds: int = 5) -> dict[str, Any]:
    """What any ``stackdist curve`` process costs before its trace: the median wall and CPU
    seconds of exact and ``--sample-rate 0.5`` runs on a 3-access trace (Python, numpy, numba and
    its first cache load, the report). A sampled run can be at most (exact run) / (its floor) faster."""
    tiny = folder / "tiny.csv"
    tiny.write_text("1\n2\n1\n")
    out: dict[str, Any] = {}
    for name, extra in (("exact", []), ("sampled", ["--sample-rate", "0.5"])):
        runs = [run_cli([str(tiny), *extra]) for _ in range(rounds)]
        out[f"{name}_wall_s"] = float(np.median([r["wall_s"] for r in runs]))
        out[f"{name}_cpu_s"] = float(np.median([r["cpu_s"] for r in runs]))
    return out


def median_run(argv: list[str], extra_env: dict[str, str] | None = None, rounds: int = 3) -> dict[str, Any]:
    """The run of median wall time among ``rounds`` :func:`run_cli` runs of ``argv``."""
    runs = sorted((run_cli(argv, extra_env=extra_env) for _ in range(rounds)), key=lambda r: r["wall_s"])
    return runs[len(runs) // 2]


def acceptance(n: int, dask: bool = True) -> dict[str, Any]:
    """The held-out check on every input form: exact vs ``--sample-rate 0.01`` (3 seeds, the
    default; whole processes, run side by side, median of 3; mean absolute hit-rate error over
    40 capacities) and ``--dask local:2`` (equal hits at all 40)."""
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        forms = write_formats(n, Path(tmp))
        rows["write_s"] = time.perf_counter() - t0
        rows["floor"] = process_floor(Path(tmp))
        print(f"  a process's floor (3-access trace): exact {rows['floor']['exact_wall_s']:.2f} s, sampled "
              f"{rows['floor']['sampled_wall_s']:.2f} s (median of 5)", flush=True)
        for name, argv in forms.items():
            exact = median_run([*argv, "--points", "40"])
            caps = ",".join(map(str, exact["report"]["curve"]["capacity"]))
            sampled = median_run([*argv, "--capacities", caps, "--sample-rate", "0.01"])
            truth = np.array(exact["report"]["curve"]["hit_rate"])
            est = np.array(sampled["report"]["curve"]["hit_rate"])
            row = {"bytes": os.path.getsize(argv[0]), "exact_wall_s": exact["wall_s"], "exact_cpu_s": exact["cpu_s"],
                   "speedup_bound": exact["wall_s"] / rows["floor"]["sampled_wall_s"],
                   "sampled_wall_s": sampled["wall_s"], "sampled_cpu_s": sampled["cpu_s"],
                   "speedup": exact["wall_s"] / sampled["wall_s"], "cpu_speedup": exact["cpu_s"] / sampled["cpu_s"],
                   "mae": float(np.abs(est - truth).mean()), "max_abs_error": float(np.abs(est - truth).max())}
            if dask:
                got = run_cli([*argv, "--capacities", caps, "--dask", "local:2"])
                row.update(dask_wall_s=got["wall_s"], dask_cpu_s=got["cpu_s"],
                           dask_equal_hits=got["report"]["curve"]["hits"] == exact["report"]["curve"]["hits"])
            rows[name] = row
            print(f"  {name:15s} exact {row['exact_wall_s']:6.2f} s ({row['exact_cpu_s']:5.2f} cpu)  sampled "
                  f"{row['sampled_wall_s']:5.2f} s ({row['sampled_cpu_s']:4.2f} cpu)  {row['speedup']:5.1f}x wall "
                  f"{row['cpu_speedup']:5.1f}x cpu (at most {row['speedup_bound']:.1f}x)  MAE {row['mae']:.4f}"
                  + (f"  dask {row['dask_wall_s']:.1f} s equal {row['dask_equal_hits']}" if dask else ""), flush=True)
    return rows


SAMPLED_PATHS: dict[str, dict[str, str] | None] = {"sampled": None}
"""The sampled runs of :func:`sampled_vs_exact`, by name, and their extra environment. (Until issue
21 the C sampler was the default path and ``{"STACKDIST_NATIVE": "0"}`` named the compiled one as
``sampled_compiled``: the "before" entry of the results holds both.)"""


def sampled_vs_exact(n: int, forms: tuple[str, ...] = ("npy",), rounds: int = 3, rate: str = "0.01") -> dict[str, Any]:
    """Whole ``stackdist curve`` processes on a :func:`zipf_scan_trace` of ``n`` accesses (``.npy``,
    and ``.csv`` when asked, one key a line): the exact curve (40 capacities) and each of
    :data:`SAMPLED_PATHS` at ``--sample-rate rate`` (3 seeds, the default) at those capacities,
    interleaved (exact, sampled, ..., exact, sampled, ...) ``rounds`` times. Per run: wall and
    CPU seconds, peak memory, the load average; per path: the median wall, its ratio to the exact
    median, the mean absolute hit-rate error against the exact curve over the 40 capacities, and
    whether every run gave the same curve."""
    out: dict[str, Any] = {"accesses": n, "rate": float(rate), "rounds": rounds, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_SCALE_TMP")) as tmp:
        paths = {"npy": Path(tmp) / "zipf.npy", "csv": Path(tmp) / "zipf.csv"}
        out["generator"] = zipf_scan_trace(n, paths["npy"])
        if "csv" in forms:
            keys = np.load(paths["npy"], mmap_mode="r")
            with open(paths["csv"], "w") as f:
                for lo in range(0, n, 1 << 22):
                    f.write("\n".join(map(str, keys[lo : lo + (1 << 22)].tolist())) + "\n")
            del keys
        print(f"  {n:,} accesses generated in {out['generator']['generate_s']:.0f} s; load {open('/proc/loadavg').read().strip()}",
              flush=True)
        for form in forms:
            argv = [str(paths[form])]
            runs: dict[str, list[dict[str, Any]]] = {"exact": [], **{name: [] for name in SAMPLED_PATHS}}
            caps = ""
            for _ in range(rounds):
                runs["exact"].append(run_cli([*argv, "--points", "40"]))
                caps = caps or ",".join(map(str, runs["exact"][0]["report"]["curve"]["capacity"]))
                for name, env in SAMPLED_PATHS.items():
                    runs[name].append(run_cli([*argv, "--capacities", caps, "--sample-rate", rate], extra_env=env))
            truth = np.array(runs["exact"][0]["report"]["curve"]["hit_rate"])
            row: dict[str, Any] = {"bytes": os.path.getsize(argv[0]),
                                   "ceiling_hit_rate": runs["exact"][0]["report"]["summary"]["ceiling_hit_rate"]}
            for name, got in runs.items():
                walls = [r["wall_s"] for r in got]
                est = np.array(got[0]["report"]["curve"]["hit_rate"])
                row[name] = {"wall_s": walls, "median_wall_s": float(np.median(walls)),
                             "median_cpu_s": float(np.median([r["cpu_s"] for r in got])),
                             "peak_rss_mib": max(r["peak_rss_mib"] for r in got),
                             "load_average": [min(r["load_average"][0] for r in got), max(r["load_average"][1] for r in got)],
                             "same_curve_every_run": all(r["report"]["curve"] == got[0]["report"]["curve"] for r in got)}
                if name != "exact":
                    row[name].update(speedup=row["exact"]["median_wall_s"] / row[name]["median_wall_s"],
                                     mae=float(np.abs(est - truth).mean()), max_abs_error=float(np.abs(est - truth).max()),
                                     same_curve_as_sampled=got[0]["report"]["curve"] == runs["sampled"][0]["report"]["curve"])
            out[form] = row
            print(f"  {form}: exact {row['exact']['median_wall_s']:.2f} s"
                  + "".join(f"; {name} {row[name]['median_wall_s']:.2f} s ({row[name]['speedup']:.1f}x, MAE {row[name]['mae']:.5f})"
                            for name in SAMPLED_PATHS)
                  + f"  (median of {rounds}; load {row['exact']['load_average'][0]:.1f}-{row['exact']['load_average'][1]:.1f})",
                  flush=True)
    return out


def dask_histogram_run(files: list[str], capacities: list[int], workers: int = 2) -> dict[str, Any]:
    """Exact hits at ``capacities`` on a local cluster of ``workers`` processes: each worker
    reads its files and replays them alone (:func:`~stackdist.engine.scale.distributed.chunk_histogram`),
    the client merges (:func:`~stackdist.engine.scale.distributed.merge_histograms`). Also the
    wall seconds of the workers' part and of the merge (and its CPU seconds), the workers' CPU seconds in their tasks
    and the largest worker's peak resident memory."""
    import distributed

    from stackdist.engine.scale.distributed import chunk_histogram, merge_histograms

    def read_and_replay(path: str) -> Any:
        import resource

        t0 = time.process_time()
        part = chunk_histogram(np.load(path))
        return part, time.process_time() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        t0 = time.perf_counter()
        done = client.gather(client.map(read_and_replay, files, pure=False))
        workers_s = time.perf_counter() - t0
    parts = [d[0] for d in done]
    t0, c0 = time.perf_counter(), time.process_time()
    values, counts, cold = merge_histograms(parts)
    merge_s, merge_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    cum = np.cumsum(counts)
    idx = np.searchsorted(values, np.asarray(capacities, np.int64), side="right") - 1
    hits = np.where(idx < 0, 0, cum[np.maximum(idx, 0)])
    merged = int(sum(p[0].keys.shape[0] for p in parts))
    n = int(cum[-1] if cum.size else 0) + cold
    return {"curve": {"capacity": list(capacities), "hits": hits.tolist()}, "accesses": n, "merge_accesses": merged,
            "merge_share": merged / max(n, 1), "chunks": len(parts), "workers_s": workers_s, "merge_s": merge_s, "merge_cpu_s": merge_cpu_s,
            "worker_task_cpu_s": sum(d[1] for d in done), "worker_peak_rss_mib": max(d[2] for d in done)}


def huge(n: int, folder: Path, stream_exact: bool = True, plain_exact: bool = True,
         generator: dict[str, Any] | None = None, known: dict[str, Any] | None = None, only: str = "dask") -> dict[str, Any]:
    """The issue's large run on ``n`` accesses of :func:`request_chunks` (``generator``: its
    keyword parameters), saved as ``.npy`` files of 2**24 accesses read back as one trace (a
    glob): exact in one process (the plain replay, memory O(trace), and the streamed rate-1
    hashed stack, memory O(distinct keys)), sampled at 0.01 and 0.001 (3 seeds, streamed), exact
    on a two-worker local Dask cluster (workers read the files; histograms merged). The truth
    the others are compared with is the plain replay, or the streamed one without it; each row
    records the load average beside its times (the machine is shared). With ``known`` (an earlier
    entry of the same stream: its capacities and exact hits) only ``stackdist curve --dask
    local:2`` runs, and is checked against those hits."""
    generator = {"seed": 11, **(generator or {})}
    t0 = time.perf_counter()
    files: list[str] = []
    buf: list[np.ndarray] = []
    held = 0
    file_size = 1 << 24

    def flush(upto: int) -> None:
        nonlocal buf, held
        whole = np.concatenate(buf)
        while whole.size >= upto and whole.size:
            files.append(str(folder / f"part-{len(files):05d}.npy"))
            np.save(files[-1], whole[:file_size])
            whole = whole[file_size:]
        buf, held = [whole], whole.size

    for ids in request_chunks(n, **generator):
        buf.append(ids)
        held += ids.size
        if held >= file_size:
            flush(file_size)
    if held:
        flush(1)
    rows: dict[str, Any] = {"accesses": n, "generator": generator, "files": len(files),
                            "generate_s": time.perf_counter() - t0}
    glob_arg = str(folder / "part-*.npy")
    print(f"  generated {n:,} accesses in {len(files)} files, {rows['generate_s']:.0f} s", flush=True)

    def keep(label: str, got: dict[str, Any], truth: np.ndarray | None) -> None:
        row = {"wall_s": got["wall_s"], "cpu_s": got["cpu_s"], "peak_rss_mib": got["peak_rss_mib"],
               "load_average": got["load_average"]}
        rep = got["report"]
        if truth is not None:
            est = np.array(rep["curve"]["hits"], np.float64)
            row["mae"] = float(np.abs(est - truth).mean() / n)
            row["max_abs_error"] = float(np.abs(est - truth).max() / n)
            row["equal_hits"] = bool(np.array_equal(np.round(est), truth))
            if "hit_rate_min" in rep["curve"]:
                row["mean_error_bar_width"] = float((np.array(rep["curve"]["hit_rate_max"]) - np.array(rep["curve"]["hit_rate_min"])).mean())
        for key in ("merge_share", "accesses", "merge_accesses", "merge_s", "merge_cpu_s", "workers_s", "chunks", "worker_task_cpu_s",
                    "worker_peak_rss_mib"):
            if key in rep:
                row[key] = rep[key]
        rows[label] = row
        print(f"  {label:28s} {row['wall_s']:7.1f} s wall {row['cpu_s']:7.1f} s cpu {row['peak_rss_mib']:8.0f} MiB  load "
              f"{row['load_average'][0]:.1f}-{row['load_average'][1]:.1f}  "
              + (f"MAE {row['mae']:.5f} equal {row['equal_hits']}" if "mae" in row else ""), flush=True)

    if known is not None:  # one part again, against the truth of an earlier run of this stream
        truth = np.array(known["exact_hits"], np.float64)
        known_caps = ",".join(map(str, known["capacities"]))
        if only == "dask":  # the product's own --dask path
            keep("dask local:2 (stackdist curve)", run_cli([glob_arg, "--capacities", known_caps, "--dask", "local:2"]), truth)
        for rate in ("0.01", "0.001") if only == "sampled" else ():
            keep(f"rate {rate} (3 seeds)", run_cli([glob_arg, "--capacities", known_caps, "--sample-rate", rate]), truth)
        return rows
    if plain_exact:
        exact = run_cli([glob_arg, "--points", "40"])
        label = "exact, one process"
    else:
        exact = run_cli([glob_arg, "--points", "40", "--sample-rate", "1", "--sample-seeds", "1"])
        label = "exact, streamed (rate 1)"
    caps = exact["report"]["curve"]["capacity"]
    truth = np.array(exact["report"]["curve"]["hits"], np.float64)
    rows["ceiling_hit_rate"] = exact["report"]["summary"]["ceiling_hit_rate"]
    rows["distinct_keys"] = round(n * (1 - rows["ceiling_hit_rate"]))  # each distinct key misses once, cold
    rows["truth"] = label
    rows["capacities"], rows["exact_hits"] = list(caps), [int(h) for h in truth]
    keep(label, exact, None)
    cap_arg = ",".join(map(str, caps))
    for label, flags in (("rate 0.01 (3 seeds)", ["--sample-rate", "0.01"]), ("rate 0.001 (3 seeds)", ["--sample-rate", "0.001"])):
        keep(label, run_cli([glob_arg, "--capacities", cap_arg, *flags]), truth)
    keep("dask local:2 (histograms)", run_cli([json.dumps(files), cap_arg],
                                              [sys.executable, str(Path(__file__).resolve()), "--dask-files"]), truth)
    if stream_exact and plain_exact:
        keep("exact, streamed (rate 1)", run_cli([glob_arg, "--capacities", cap_arg, "--sample-rate", "1", "--sample-seeds", "1"]), truth)
    return rows


def bench_size(n: int, quick: bool) -> dict[str, Any]:
    """Exact, sampled and Dask runs on one synthetic trace of ``n`` accesses."""
    t0 = time.perf_counter()
    keys = request_log(n, seed=n % 1000)
    gen_s = time.perf_counter() - t0
    path = Path(tempfile.gettempdir()) / f"bench_scale_{n}.npy"
    np.save(path, keys)
    n_keys = int(np.unique(keys).size) if n <= 3 * 10**7 else None
    del keys
    exact = run_cli([str(path), "--points", "40"])
    caps = exact["report"]["curve"]["capacity"]
    exact_rate = np.array(exact["report"]["curve"]["hit_rate"])
    rows: dict[str, Any] = {"accesses": n, "distinct_keys": n_keys, "generate_s": gen_s,
                            "exact": {"wall_s": exact["wall_s"], "cpu_s": exact["cpu_s"], "peak_rss_mib": exact["peak_rss_mib"],
                                      "ceiling_hit_rate": exact["report"]["summary"]["ceiling_hit_rate"]}}
    cap_arg = ",".join(map(str, caps))
    for label, flags in (("rate 0.01", ["--sample-rate", "0.01"]), ("rate 0.01 1 seed", ["--sample-rate", "0.01", "--sample-seeds", "1"]),
                         ("rate 0.001", ["--sample-rate", "0.001"]), ("size 32768", ["--sample-size", "32768"])):
        got = run_cli([str(path), "--capacities", cap_arg, *flags])
        rate = np.array(got["report"]["curve"]["hit_rate"])
        lo, hi = np.array(got["report"]["curve"]["hit_rate_min"]), np.array(got["report"]["curve"]["hit_rate_max"])
        rows[label] = {"wall_s": got["wall_s"], "cpu_s": got["cpu_s"], "peak_rss_mib": got["peak_rss_mib"],
                       "speedup": exact["wall_s"] / got["wall_s"], "cpu_speedup": exact["cpu_s"] / got["cpu_s"],
                       "mae": float(np.abs(rate - exact_rate).mean()),
                       "max_abs_error": float(np.abs(rate - exact_rate).max()),
                       "mean_error_bar_width": float((hi - lo).mean()),
                       "final_rate": got["report"]["sample_rate"]}
    if not quick:
        got = run_cli([str(path), "--capacities", cap_arg, "--dask", "local:2"])
        rows["dask local:2"] = {"wall_s": got["wall_s"], "cpu_s": got["cpu_s"], "peak_rss_mib": got["peak_rss_mib"],
                                "speedup": exact["wall_s"] / got["wall_s"], "cpu_speedup": exact["cpu_s"] / got["cpu_s"],
                                "equal_hits": got["report"]["curve"]["hits"] == exact["report"]["curve"]["hits"],
                                "merge_share": got["report"]["dask"]["merge_share"]}
    path.unlink()
    return rows


def shared_trace_errors(rates: tuple[float, ...] = (0.1, 0.01, 0.001)) -> list[dict[str, Any]]:
    """Sampling error on the shared Mooncake traces, re-blocked to 16-token pages (block stream)."""
    rows = []
    for path in sorted((ROOT / "data" / "traces").glob("mooncake_*.jsonl")):
        ids = reblock(read_mooncake(path), 16).block_ids
        exact = HitCurve.from_trace(ids)
        caps = exact.default_capacities(40)
        for rate in rates:
            t0 = time.perf_counter()
            curves = sampled_curves(ids, rate=rate, seeds=(0, 1, 2))
            elapsed = (time.perf_counter() - t0) / 3
            errors = [float(np.abs(c.hit_rate_at(caps) - exact.hit_rate_at(caps)).mean()) for c in curves]
            rows.append({"trace": path.name, "accesses": int(ids.size), "rate": rate, "mae_seed0": errors[0],
                         "mae_max_over_seeds": max(errors), "seconds_per_sample": elapsed})
    return rows


def shared_prefix_errors(rates: tuple[float, ...] = (0.1, 0.01, 0.001)) -> list[dict[str, Any]]:
    """Plan-level error on the shared traces: the prefix token hit rate of each semantics at 40
    capacities, from the block sample (traces/sampled.py) against the exact replay: with
    SHARDS_adj (what ``plan --sample-*`` reports, cli/scale_plan.py's shards_adjusted) and, beside
    it, the plain ratio estimator (the sub-trace's own plan)."""
    from stackdist.engine.scale.sampling import weighted_estimate
    from stackdist.planning.prefix_curve import PrefixCurve
    from stackdist.serving.semantics import replay_requests
    from stackdist.traces.sampled import is_chained, sample_request_trace

    rows = []
    for path in sorted((ROOT / "data" / "traces").glob("mooncake_*.jsonl")):
        trace = reblock(read_mooncake(path), 16)
        for semantics in ("engine", "per-access"):
            exact = PrefixCurve(replay_requests(trace, semantics))
            caps = np.unique(np.geomspace(1, max(exact.saturation_blocks, 2), 40).astype(np.int64))
            truth = np.asarray(exact.prefix_token_hit_rate_at(caps))
            for rate in rates:
                errors, adjusted = [], []
                for seed in (0, 1, 2):
                    sub, r = sample_request_trace(trace, rate=rate, seed=seed)
                    replay = replay_requests(sub, semantics)
                    got = np.asarray(PrefixCurve(replay).prefix_token_hit_rate_at(np.round(caps * r).astype(np.int64)))
                    errors.append(float(np.abs(got - truth).mean()))
                    est = weighted_estimate(replay.effective, sub.block_tokens, r, trace.n_blocks, float(trace.block_tokens.sum()))
                    adj = np.asarray(est.hit_size_at(caps)) / trace.input_length.sum()
                    adjusted.append(float(np.abs(adj - truth).mean()))
                rows.append({"trace": path.name, "semantics": semantics, "chained": is_chained(trace), "rate": rate,
                             "mae_seed0": adjusted[0], "mae_max_over_seeds": max(adjusted),
                             "ratio_estimator_mae_seed0": errors[0], "ratio_estimator_mae_max_over_seeds": max(errors)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3e7,1e8", help="comma-separated access counts (default 3e7,1e8)")
    parser.add_argument("--quick", action="store_true", help="no Dask run")
    parser.add_argument("--output", "-o", default=str(RESULTS))
    parser.add_argument("--huge", type=lambda t: int(float(t)), metavar="N",
                        help="only the large run (exact, sampled, Dask) on N accesses in files, added to --output "
                        "(--quick: without the streamed rate-1 exact run)")
    parser.add_argument("--turns", type=float, default=6.5,
                        help="--huge generator: requests per session, about (default 6.5: one new block in five "
                        "accesses; 40: about 4 %%)")
    parser.add_argument("--window", type=int, default=3000, help="--huge generator: open sessions (default 3000)")
    parser.add_argument("--prompts", type=int, default=300, help="--huge generator: shared system prompts (default 300)")
    parser.add_argument("--max-history", type=int, default=500, help="--huge generator: history cap in blocks (default 500)")
    parser.add_argument("--no-plain", action="store_true",
                        help="--huge: no plain exact replay (memory about 24 bytes an access); the streamed rate-1 "
                        "replay is the truth")
    parser.add_argument("--huge-part", metavar="NAME",
                        help="--huge: keep this run as NAME inside the existing \"huge\" entry instead of replacing it")
    parser.add_argument("--cli-dask-only", action="store_true",
                        help="--huge: regenerate the stream of the existing \"huge\" entry and run only `stackdist curve "
                        "--dask local:2` on it, checked against that entry's exact hits")
    parser.add_argument("--sampled-only", action="store_true",
                        help="--huge: regenerate the stream of the existing \"huge\" entry and run only the sampled curves "
                        ", checked against that entry's exact hits")
    parser.add_argument("--dask-files", nargs=2, metavar=("FILES_JSON", "CAPS"), help=argparse.SUPPRESS)
    parser.add_argument("--acceptance", type=lambda t: int(float(t)), metavar="N",
                        help="only the held-out check (exact vs --sample-rate 0.01 vs --dask local:2) on every input form "
                        "of an N-access trace, added to --output")
    parser.add_argument("--versus", metavar="N[,N...]",
                        help="only sampled (--sample-rate 0.01) vs exact on a Zipf key trace with scans of N accesses "
                        "(whole processes, median of --rounds, interleaved), kept under --label in \"sampled_vs_exact\"")
    parser.add_argument("--forms", default="npy", help="--versus: input forms, npy and/or csv (default npy)")
    parser.add_argument("--rounds", type=int, default=3, help="--versus: runs of each (default 3)")
    parser.add_argument("--label", default="now", help="--versus: the name of this measurement in the results")
    parser.add_argument("--shared-prefix-only", action="store_true",
                        help="only the plan-level (prefix token hit rate) errors on the shared traces, added to --output")
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if args.dask_files:
        files, caps = json.loads(args.dask_files[0]), [int(c) for c in args.dask_files[1].split(",")]
        write_json(args.output, dask_histogram_run(files, caps))
        return 0
    if args.huge:
        print(f"{args.huge:,} accesses, exact / sampled / Dask:")
        old = json.loads(Path(args.output).read_text()) if Path(args.output).exists() else {}
        known = old.get("huge") if args.cli_dask_only or args.sampled_only else None
        gen = {"turns": args.turns, "window": args.window, "prompts": args.prompts, "max_history": args.max_history}
        if known is not None and (known.get("accesses") != args.huge or known.get("generator") != {"seed": 11, **gen}):
            print("--cli-dask-only: the existing \"huge\" entry is of another stream", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_SCALE_TMP")) as tmp:
            got = huge(args.huge, Path(tmp), not args.quick, not args.no_plain, gen, known,
                       "sampled" if args.sampled_only else "dask")
        if known is not None:
            got = {**known, **{k: v for k, v in got.items() if k.startswith(("dask", "rate"))}}
        elif args.huge_part:  # a side run kept inside the main one's entry
            got = {**old.get("huge", {}), args.huge_part: got}
        write_json(args.output, {**old, "huge": got})
        return 0
    if args.acceptance:
        print(f"held-out check on {args.acceptance:,} accesses, every input form:")
        old = json.loads(Path(args.output).read_text()) if Path(args.output).exists() else {}
        write_json(args.output, {**old, "acceptance": {"accesses": args.acceptance, **acceptance(args.acceptance, not args.quick)}})
        return 0
    if args.versus:
        print("sampled vs exact, Zipf keys with scans:")
        got = {}
        for size in args.versus.split(","):
            n = int(float(size))
            got[str(n)] = sampled_vs_exact(n, tuple(args.forms.split(",")), args.rounds)
            old = json.loads(Path(args.output).read_text()) if Path(args.output).exists() else {}
            table = old.get("sampled_vs_exact", {})
            write_json(args.output, {**old, "sampled_vs_exact": {**table, args.label: {**table.get(args.label, {}), **got}}})
        return 0
    if args.shared_prefix_only:
        rows = shared_prefix_errors()
        for row in rows:
            print(f"{row['trace']:36s} {row['semantics']:10s} rate {row['rate']:<6g} prefix-token MAE {row['mae_seed0']:.4f} "
                  f"(max over 3 seeds {row['mae_max_over_seeds']:.4f}); ratio estimator {row['ratio_estimator_mae_seed0']:.4f} "
                  f"({row['ratio_estimator_mae_max_over_seeds']:.4f})")
        old = json.loads(Path(args.output).read_text()) if Path(args.output).exists() else {}
        write_json(args.output, {**old, "shared_traces_prefix": rows})
        return 0
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "sizes": [], "shared_traces": shared_trace_errors()}
    for row in result["shared_traces"]:
        print(f"{row['trace']:40s} rate {row['rate']:<6g} MAE {row['mae_seed0']:.4f} (max over 3 seeds {row['mae_max_over_seeds']:.4f})")
    for n in sizes:
        rows = bench_size(n, args.quick)
        result["sizes"].append(rows)
        print(f"\n{n:,} accesses ({rows['distinct_keys'] or '?'} distinct), generated in {rows['generate_s']:.1f} s")
        print(f"{'run':16s} {'wall s':>8s} {'cpu s':>7s} {'peak MiB':>9s} {'speedup':>8s} {'cpu x':>6s}  error / equality")
        e = rows["exact"]
        print(f"{'exact':16s} {e['wall_s']:8.1f} {e['cpu_s']:7.1f} {e['peak_rss_mib']:9.0f} {1:8.1f} {1:6.1f}  ceiling {e['ceiling_hit_rate']:.4f}")
        for label in ("rate 0.01", "rate 0.01 1 seed", "rate 0.001", "size 32768", "dask local:2"):
            if label in rows:
                r = rows[label]
                tail = (f"MAE {r['mae']:.4f} (max {r['max_abs_error']:.4f}, bar {r['mean_error_bar_width']:.4f})"
                        if "mae" in r else f"equal hits: {r['equal_hits']}, merge share {r['merge_share']:.2f}")
                print(f"{label:16s} {r['wall_s']:8.1f} {r['cpu_s']:7.1f} {r['peak_rss_mib']:9.0f} {r['speedup']:8.1f} "
                      f"{r['cpu_speedup']:6.1f}  {tail}")
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
