"""Shared helpers for the benchmark scripts: traces, timing, peak memory, tables, JSON.

Nothing here is part of the ``stackdist`` package; the scripts put the repository root on
``sys.path`` themselves, so they run from a plain checkout::

    python benchmarks/bench_engine.py --quick

Timing: every measured call runs ``repeats`` times with the garbage collector off (as
``timeit`` does) and ``time.perf_counter``; the median is the reported figure and every raw
time is kept for the JSON. Peak memory: a fresh subprocess loads the trace arrays, imports and
warms up, resets the kernel's peak-RSS mark (``/proc/self/clear_refs``), runs the method once
and reports ``VmHWM`` minus the ``VmRSS`` it had just before (see :class:`PeakRSS`).
"""

from __future__ import annotations

import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
CONVERSATION_TRACE = REPO_ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
PAGES_PER_BLOCK = 32  # 512-token Mooncake blocks -> 16-token pages
MIB = 1 << 20

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from stackdist.output import json_default


class BenchUsageError(Exception):
    """A wrong command-line argument; the scripts exit 2 with its message."""


class BenchDataError(Exception):
    """A data problem (unreadable or malformed trace); the scripts exit 1 with its message."""


def log(message: str) -> None:
    """Progress to stderr (stdout carries only the result tables)."""
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- traces
@dataclass
class Trace:
    """A benchmark trace: int64 keys, optional int64 per-access sizes, and how it was made."""

    name: str
    keys: np.ndarray
    sizes: np.ndarray | None
    description: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of accesses."""
        return int(self.keys.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the trace arrays (keys plus sizes when sized)."""
        return int(self.keys.nbytes + (0 if self.sizes is None else self.sizes.nbytes))

    def distinct(self) -> tuple[int, int]:
        """(distinct keys, their total size): the working set. O(n + max key id).

        A key's size is fixed, so any of its accesses gives it.
        """
        if self.n == 0:
            return 0, 0
        seen = np.zeros(int(self.keys.max()) + 1, bool)
        seen[self.keys] = True
        count = int(seen.sum())
        if self.sizes is None:
            return count, count
        size_of_key = np.zeros(seen.shape[0], np.int64)
        size_of_key[self.keys] = self.sizes
        return count, int(size_of_key.sum())

    def size_list(self) -> list[int]:
        """Per-access sizes as a Python list (all ones for a unit-size trace)."""
        return [1] * self.n if self.sizes is None else self.sizes.tolist()

    def summary(self) -> dict[str, Any]:
        """JSON-ready facts about the trace."""
        keys, total = self.distinct()
        return {
            "name": self.name,
            "accesses": self.n,
            "distinct_keys": keys,
            "working_set_size": total,
            "sized": self.sizes is not None,
            "max_size": 1 if self.sizes is None else int(self.sizes.max()),
            "trace_array_bytes": self.nbytes,
            "description": self.description,
            "params": self.params,
        }


def zipf_trace(n: int, *, n_keys: int = 100_000, alpha: float = 0.9, seed: int = 1, sized: bool = False) -> Trace:
    """A seeded Zipf(alpha) trace over keys ``0..n_keys-1``, unit or varied (fixed per key) sizes.

    Rank r (1-based) has probability proportional to ``r ** -alpha``; ranks are drawn by inverse
    CDF (``searchsorted`` of uniforms on the cumulative weights) and mapped to key ids through a
    seeded random permutation, so a key's id says nothing about its popularity. With ``sized``
    every key gets one size drawn once, uniform on 1..64 (KV blocks per object), independent of
    its popularity; an access carries its key's size. O(n log n_keys).

    >>> t = zipf_trace(1000, n_keys=50, seed=3, sized=True)
    >>> t.n, int(t.keys.max()) < 50, bool(np.all(t.sizes == zipf_trace(1000, n_keys=50, seed=3, sized=True).sizes))
    (1000, True, True)
    """
    if n < 0 or n_keys < 1:
        raise ValueError(f"n must be >= 0 and n_keys >= 1; got n={n}, n_keys={n_keys}.")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_keys + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), n_keys - 1)
    key_of_rank = rng.permutation(n_keys).astype(np.int64)
    keys = key_of_rank[ranks]
    sizes = None
    if sized:
        size_of_key = np.random.default_rng([seed, 1]).integers(1, 65, n_keys, dtype=np.int64)
        sizes = size_of_key[keys]
    kind = "sized" if sized else "unit"
    return Trace(
        name=f"zipf-{kind}-{short_count(n)}",
        keys=keys,
        sizes=sizes,
        description=(
            f"Zipf({alpha}) over {n_keys:,} keys, seed {seed}, "
            + ("per-key size uniform on 1..64 (fixed per key)" if sized else "unit sizes")
        ),
        params={"generator": "zipf", "n": n, "n_keys": n_keys, "alpha": alpha, "seed": seed,
                "sizes": "uniform 1..64 per key" if sized else "unit"},
    )


def cyclic_trace(n: int, *, n_keys: int = 100_000) -> Trace:
    """A cyclic scan ``0, 1, ..., n_keys-1, 0, 1, ...`` of ``n`` unit-size accesses (LRU's worst
    case: below ``n_keys`` every access misses, from ``n_keys`` on every repeat hits).

    >>> cyclic_trace(5, n_keys=2).keys.tolist()
    [0, 1, 0, 1, 0]
    """
    keys = np.arange(n, dtype=np.int64) % n_keys
    return Trace(
        name=f"cyclic-{short_count(n)}",
        keys=keys,
        sizes=None,
        description=f"cyclic scan over {n_keys:,} keys, unit sizes",
        params={"generator": "cyclic", "n": n, "n_keys": n_keys},
    )


def read_block_ids(path: Path = CONVERSATION_TRACE, limit: int | None = None) -> np.ndarray:
    """All ``hash_ids`` of a Mooncake JSONL trace, request after request, as int64.

    ``limit`` keeps only the first requests. A malformed line raises :class:`BenchDataError`
    naming the file and line.
    """
    blocks: list[int] = []
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise BenchDataError(f"{path}: cannot read the trace ({exc.strerror}).") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if limit is not None and number > limit:
                break
            if not line.strip():
                continue
            try:
                ids = json.loads(line)["hash_ids"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchDataError(f"{path}:{number}: expected a JSON object with a hash_ids list.") from None
            if not isinstance(ids, list) or not all(isinstance(b, int) and b >= 0 for b in ids):
                raise BenchDataError(f"{path}:{number}: hash_ids must be a list of non-negative integers.")
            blocks.extend(ids)
    return np.asarray(blocks, dtype=np.int64)


def conversation_blocks_trace(path: Path = CONVERSATION_TRACE, limit: int | None = None) -> Trace:
    """The Mooncake conversation trace at its native 512-token blocks, unit sizes."""
    blocks = read_block_ids(path, limit)
    return Trace(
        name="conversation-blocks" if limit is None else f"conversation-blocks-{limit}req",
        keys=blocks,
        sizes=None,
        description="Mooncake conversation trace, one access per 512-token block (hash_ids), unit sizes",
        params={"source": str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path),
                "requests": limit, "block_tokens": 512},
    )


def expand_pages(blocks: np.ndarray, pages_per_block: int = PAGES_PER_BLOCK) -> np.ndarray:
    """Split every block id ``b`` into ``pages_per_block`` page ids ``b*P + j`` (j = 0..P-1), in order.

    The simple expansion: exactly P pages per block, even for a request's final partial block
    (``stackdist.traces.reblock`` is the tail-aware version). O(n P).

    >>> expand_pages(np.array([0, 2]), 3).tolist()
    [0, 1, 2, 6, 7, 8]
    """
    offsets = np.arange(pages_per_block, dtype=np.int64)
    return (blocks.astype(np.int64)[:, None] * pages_per_block + offsets).ravel()


def conversation_pages_trace(path: Path = CONVERSATION_TRACE, limit: int | None = None) -> Trace:
    """The conversation trace expanded to 16-token pages (32 per 512-token block), unit sizes."""
    blocks = read_block_ids(path, limit)
    return Trace(
        name="conversation-pages16" if limit is None else f"conversation-pages16-{limit}req",
        keys=expand_pages(blocks),
        sizes=None,
        description=(
            "Mooncake conversation trace, each 512-token block split into 32 sub-pages with ids "
            "block*32+j (simple expansion, exactly 32 per block, partial tails not trimmed), unit sizes"
        ),
        params={"source": str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path),
                "requests": limit, "block_tokens": 512, "page_tokens": 16, "pages_per_block": PAGES_PER_BLOCK},
    )


def short_count(n: int) -> str:
    """A 1e5-style label for powers of ten, else the number.

    >>> short_count(100_000), short_count(1234)
    ('1e5', '1234')
    """
    if n > 0 and 10 ** round(np.log10(n)) == n:
        return f"1e{round(np.log10(n))}"
    return str(n)


def save_trace(trace: Trace, directory: Path) -> None:
    """Write the trace arrays as .npy files (for the memory-probe subprocesses)."""
    np.save(directory / "keys.npy", trace.keys)
    if trace.sizes is not None:
        np.save(directory / "sizes.npy", trace.sizes)


def load_trace_arrays(directory: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """The arrays written by :func:`save_trace`."""
    keys = np.load(directory / "keys.npy")
    sizes_path = directory / "sizes.npy"
    return keys, (np.load(sizes_path) if sizes_path.exists() else None)


# ----------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Raw wall-clock times (seconds) of the repeats of one measured call, its CPU times (this
    process, all threads: ``time.process_time``) and its last result."""

    times: list[float]
    result: Any = None
    cpu_times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return float(statistics.median(self.times))

    @property
    def cpu_median(self) -> float | None:
        return float(statistics.median(self.cpu_times)) if self.cpu_times else None


def time_call(fn: Callable[..., Any], repeats: int, setup: Callable[[], Any] | None = None) -> Timing:
    """Run ``fn`` ``repeats`` times with the GC off; keep every time and the last result.

    With ``setup``, each repeat first calls it (untimed) and passes its result to ``fn``.
    """
    times: list[float] = []
    cpu_times: list[float] = []
    result = None
    for _ in range(max(1, repeats)):
        prepared = setup() if setup is not None else None
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            start, cpu_start = time.perf_counter(), time.process_time()
            result = fn(prepared) if setup is not None else fn()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
        finally:
            if was_enabled:
                gc.enable()
        del prepared
    return Timing(times, result, cpu_times)


# ----------------------------------------------------------------------------- memory
def _proc_status_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakRSS:
    """Peak resident memory growth over a block of code, in bytes.

    On Linux the peak mark (VmHWM) is reset through ``/proc/self/clear_refs`` on entry, so the
    figure is ``VmHWM - VmRSS(at entry)``: the largest growth while the block ran, counting
    everything the process touched (numpy and numba allocations, Python objects, mmapped
    files). Where the reset is not allowed it falls back to ``ru_maxrss`` growth, which reads
    0 unless the block exceeds the earlier peak; ``method`` says which was used.
    """

    def __enter__(self) -> PeakRSS:
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.method = "VmHWM after clear_refs reset, minus VmRSS before"
            self._before = (_proc_status_kib("VmRSS") or 0) * 1024
        except OSError:
            self.method = "ru_maxrss growth (peak reset not permitted; a lower bound)"
            self._before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.peak_bytes = 0
        return self

    def __exit__(self, *exc: object) -> None:
        if self.method.startswith("VmHWM"):
            after = (_proc_status_kib("VmHWM") or 0) * 1024
        else:
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.peak_bytes = max(0, after - self._before)
        self.retained_bytes = max(0, (_proc_status_kib("VmRSS") or 0) * 1024 - self._before)


def run_stackdist(argv: Sequence[str], cwd: Path = REPO_ROOT) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB, from ``wait4``) of one whole ``python -m stackdist ARGV``
    process; SystemExit with its stderr when it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "stackdist", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"stackdist {' '.join(argv)} failed ({status}): {err}")
    return wall, int(usage.ru_maxrss)


def run_probe(script: Path, args: Sequence[str], timeout: float = 1800) -> dict[str, Any]:
    """Run ``script --probe ...`` in a fresh interpreter and return the JSON object it prints last."""
    command = [sys.executable, str(script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        return {"error": f"probe exited {done.returncode}: {done.stderr.strip()[-400:]}"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": "probe printed no result"}
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------- reporting
def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, load and library versions for the JSON header."""
    import numba

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__}
    try:
        import libcachesim

        versions["libcachesim"] = getattr(libcachesim, "__version__", "unknown")
    except ImportError:
        versions["libcachesim"] = None
    mem_kib = None
    try:
        with open("/proc/meminfo") as meminfo:
            mem_kib = int(meminfo.readline().split()[1])
    except OSError:
        pass
    return {
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_files": _git("status", "--porcelain", "--", "stackdist", "kvlab", "benchmarks"),
        "cpu_model": cpu,
        "logical_cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / (1 << 20), 1) if mem_kib else None,
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()),
        "versions": versions,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _git(*args: str) -> str | None:
    """Output of a git command in the repository (None where git or the repository is missing)."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A Markdown pipe table of ``rows`` with (key, heading) ``columns``; None prints as '-'.

    >>> print(format_table([{"a": 1, "b": None}], [("a", "A"), ("b", "B")]))
    | A | B |
    |---|---|
    | 1 | - |
    """
    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join("-" if r.get(k) is None else str(r[k]) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def fmt_seconds(seconds: float | None) -> str | None:
    """Seconds with 3 significant digits (None stays None)."""
    if seconds is None:
        return None
    return f"{seconds:.3g}" if seconds < 1000 else f"{seconds:,.0f}"


def fmt_ratio(ratio: float | None) -> str | None:
    """A slowdown factor like '12.3x' (None stays None)."""
    if ratio is None:
        return None
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.1f}x"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (temp file in the same directory, then os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1, default=json_default)
            out.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
