"""Compile the numba kernels once, before the test workers run tests (``conftest.pytest_configure``).

From a fresh checkout numba compiles every kernel (each signature) on its first call and writes
it to its on-disk cache (``cache=True``). Under pytest-xdist each worker would compile the
kernels it needs on its own, so a kernel both workers call was compiled twice. Here two
processes (one per core) share the :data:`TASKS` below: small runs that reach every kernel
signature the suite uses, on tiny inputs. Each process takes the first task not yet claimed
whose prerequisites are done (a claim is a file created with ``O_EXCL`` in a shared folder), so
the two stay busy until the end and no signature is compiled in both: a task that needs the
kernels of another (the plan's reader before the engine models, the vLLM model before the routed
one) waits for it (``after``). The workers then load every kernel from the cache. Nothing is
skipped: the compile time is still in the test run, once. A signature the tasks do not reach is
compiled by the worker that needs it (correct, only slower).

Compile times on a cold cache (``NUMBA_CACHE_DIR`` empty; seconds of CPU of every task in one
process, from numba's ``numba:compile`` events, top-level compiles with their callees; measured
side by side with the tree before the compile-time work (e0033a4) on the shared machine, whose
speed drifts: the same run gave 45-59 s at other times): 59 in all (was 75), 144 compiles (was
165); the placement simulator 10 (12.6), the unit and general replays and arrival depths 8 (11),
the sized replay 8 (12: replay_sized for uint8, int32 and int64 slot sizes, compact and
build_levels once per slot-size and pyramid dtype), routed engines 6 (7), SHARDS 5.5 (5.4),
SGLang 4 (7), vLLM 3.3 (3.6), the Mooncake scan 3 (6), the JSONL scan 1.8 (2.8), cluster 1.3,
Belady 1.3. Each kernel now has one signature per dtype combination (no Literal duplicates).

Run by hand: ``python tests/warm_kernels.py`` (every task, in one process) or
``python tests/warm_kernels.py TASK ...``; ``--share FOLDER`` is the two-process mode.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
MOONCAKE = str(DATA / "mooncake_small.jsonl")


def _stackdist(*argv: str) -> None:
    from stackdist.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    if code:
        raise RuntimeError(f"stackdist {' '.join(argv[:3])} exited {code}")


def _write(out: str, name: str, lines: list[str]) -> str:
    path = os.path.join(out, name)
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def _keys(out: str) -> str:
    return _write(out, "keys.csv", [f"{i % 7},{1 + i % 7 % 3}" for i in range(50)])


def _unit(out: str) -> str:
    return _write(out, "unit.csv", [str(i % 5) for i in range(50)])


def mooncake(out: str) -> None:
    """The Mooncake reader's compiled scan, the unit replay with its counting table."""
    _stackdist("curve", MOONCAKE, "--format", "mooncake", "-o", os.path.join(out, "f.json"))


def plan(out: str) -> None:
    """The plan's engine and per-access depths and histograms."""
    _stackdist("plan", MOONCAKE, "--json", os.path.join(out, "g.json"))


def unit_curve(out: str) -> None:
    """The delimited reader's scan, the unit replay."""
    _stackdist("curve", _unit(out), "-o", os.path.join(out, "a.json"))


def sized_curve(out: str) -> None:
    """A sized curve (uint8 slot sizes, int32 pyramid), two-tier hits."""
    keys = _keys(out)
    _stackdist("curve", keys, "-o", os.path.join(out, "b.json"))
    _stackdist("tiers", keys, "--gpu", "4", "-o", os.path.join(out, "c.json"))
    _stackdist("tiers", keys, "--gpu", "4", "--exclusive", "-o", os.path.join(out, "d.json"))


def _sized(scale: int, pyramid32: bool) -> None:
    """The sized replay for the slot-size dtype of ``scale``: through the hit curve (a bound on
    the live total: int32 pyramid while it fits) or the plain distances (int64 pyramid)."""
    import numpy as np

    from stackdist.engine import hit_curve, stack_distances

    keys = np.arange(300) % 40
    sizes = (keys + 1) * scale
    if pyramid32:
        hit_curve(keys, sizes)
    else:
        stack_distances(keys, sizes)


def sized_dtypes(out: str) -> None:
    """A sized replay with int32 slot sizes (int32 pyramid)."""
    _sized(10**6, True)


def sized_wide(out: str) -> None:
    """A sized replay with int64 slot sizes and an int64 pyramid (sizes near 2**40)."""
    _sized(2**40, False)


def key_stream(out: str) -> None:
    """The streaming key map (KeyValueStream's compiled hash table: ids assigned, the table grown)."""
    import numpy as np

    from stackdist.engine.stream import KeyValueStream

    keys = (np.arange(6000) % 2500).astype(np.uint64)
    for values in (keys, keys * np.uint64(2**40 + 7)):
        stream = KeyValueStream()
        stream.feed(values[:50])
        stream.feed(values)
        stream.curve()


def sized_depths(out: str) -> None:
    """Arrival depths of a sized request trace, the sorting histogram path."""
    import numpy as np

    from stackdist.engine import engine_depths, histogram

    engine_depths([0, 1, 0, 1, 2], [0, 2, 5], [1, 2, 1, 2, 3])
    limit = histogram.COUNTING_LIMIT
    histogram.COUNTING_LIMIT = -1
    try:
        keys = np.arange(300) % 40
        from stackdist.engine import hit_curve

        hit_curve(keys, keys + 1)
        hit_curve(keys)
    finally:
        histogram.COUNTING_LIMIT = limit
    histogram.Histogram.build(np.array([1, 2, 3, 1], np.int64), None)


def reblocked(out: str) -> None:
    """Re-blocking into finer pages, the vLLM one-replay shortcut (its stack depths)."""
    import numpy as np

    from stackdist.serving.pages import engine_pages
    from stackdist.serving.vllm import vllm_one_replay
    from stackdist.traces import RequestTrace, reblock

    reblock(RequestTrace.from_blocks([[3, 4]], block_size=32, last_tokens=[20]), 16)
    t = RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 8, 16, 8]), np.zeros(2),
                     np.array([24, 24]), np.array([1, 1]), block_size=16)
    vllm_one_replay(engine_pages(t), [3, None])


def stream(out: str) -> None:
    """The streaming replay (sized state, int64 throughout), fed unit then sized batches."""
    import numpy as np

    from stackdist.engine import StackDistanceStream

    keys = np.arange(40) % 9
    sized = StackDistanceStream()
    sized.feed(keys)
    sized.feed(keys + 100, keys + 1)
    StackDistanceStream().feed(keys)


def sampled_plan(out: str) -> None:
    """The plan of a SHARDS sample of the requests."""
    _stackdist("plan", MOONCAKE, "--sample-rate", "0.5", "--json", os.path.join(out, "r.json"))


def jsonl(out: str) -> None:
    """The JSONL access reader's compiled scan."""
    path = _write(out, "keys.jsonl", [f'{{"key": {i % 7}, "size": {1 + i % 7 % 3}}}' for i in range(50)])
    _stackdist("curve", path, "-o", os.path.join(out, "l.json"))


def sampling(out: str) -> None:
    """SHARDS: fixed rate and fixed size, per access and per request."""
    import numpy as np

    from stackdist.engine.scale.sampling import ShardsSampler

    unit = _unit(out)
    _stackdist("curve", unit, "--sample-rate", "0.5", "-o", os.path.join(out, "e.json"))
    _stackdist("tiers", _keys(out), "--gpu", "1", "--sample-rate", "0.5", "-o", os.path.join(out, "m.json"))
    ids = np.arange(60, dtype=np.int64) % 13
    offsets = np.arange(0, 61, 6, dtype=np.int64)
    for sampler in (ShardsSampler(rate=1.0), ShardsSampler(rate=0.5), ShardsSampler(max_keys=4)):
        sampler.feed_requests(ids, offsets)
        sampler.feed(ids)


def vllm(out: str) -> None:
    """The vLLM pool model (and its one-replay shortcut)."""
    _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--json", os.path.join(out, "h.json"))
    _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--reblock", "16", "--json", os.path.join(out, "n.json"))


def scheduler(out: str) -> None:
    """vLLM's scheduler under load (the compiled sync and async kernel: one signature)."""
    _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--schedule", "scheduler", "--async-scheduling",
               "--json", os.path.join(out, "s.json"))


def hybrid(out: str) -> None:
    """vLLM's hybrid KV cache, compiled (stackdist/serving/hybrid_kernel.py: one signature)."""
    _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--model-config",
               str(DATA / "engines" / "hybrid" / "configs" / "gpt-oss-20b.json"), "--gpu-blocks", "100000",
               "--schedule", "serial", "--no-decode", "--json", os.path.join(out, "y.json"))


def offload(out: str) -> None:
    """The offload tiers behind vLLM: vLLM's native CPU tier (lru and arc), LMCache's CPU and disk."""
    for spec in ("vllm-native:cpu=64blocks", "vllm-native:cpu=64blocks,policy=arc", "lmcache:cpu=8chunks,disk=16chunks"):
        _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--gpu-blocks", "2000", "--offload", spec,
                   "--json", os.path.join(out, "u.json"))


def sglang(out: str) -> None:
    """The SGLang radix-tree model."""
    _stackdist("plan", MOONCAKE, "--semantics", "sglang", "--json", os.path.join(out, "o.json"))


def routed(out: str) -> None:
    """Both engine models on two workers behind the kv-aware router, a shared tier."""
    _stackdist("plan", MOONCAKE, "--semantics", "vllm,sglang", "--workers", "2", "--router", "kv-aware",
               "--json", os.path.join(out, "i.json"))
    _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--workers", "2", "--shared-blocks", "4",
               "--json", os.path.join(out, "p.json"))


def decode_reuse(out: str) -> None:
    """vLLM with decode reuse."""
    _stackdist("plan", MOONCAKE, "--semantics", "vllm", "--decode-reuse", "--json", os.path.join(out, "k.json"))


def cluster(out: str) -> None:
    """The idealized prefix LRU on workers with a shared tier (the cluster kernel)."""
    _stackdist("plan", MOONCAKE, "--semantics", "engine", "--workers", "2", "--shared-blocks", "4,inf",
               "--json", os.path.join(out, "q.json"))


def optimal(out: str) -> None:
    """Belady's optimal hits."""
    _stackdist("plan", MOONCAKE, "--optimal", "--json", os.path.join(out, "j.json"))


def placement(out: str) -> None:
    """The placement simulator's replay (the longest compile: one kernel tree)."""
    from kvlab.placement.__main__ import main as run

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.suppress(SystemExit):
        run(["simulate"])


# (name, run, prerequisites), longest first where free: a task starts once its prerequisites are
# done, so the kernels they share are compiled once (the later task loads them from the cache).
TASKS: list[tuple[str, Callable[[str], None], tuple[str, ...]]] = [
    ("placement", placement, ()),
    ("mooncake", mooncake, ()),
    ("unit_curve", unit_curve, ()),
    ("sized_curve", sized_curve, ("unit_curve",)),
    ("plan", plan, ("mooncake",)),
    ("sglang", sglang, ("plan",)),
    ("vllm", vllm, ("plan",)),
    ("sized_wide", sized_wide, ("sized_curve",)),
    ("sized_dtypes", sized_dtypes, ("sized_curve",)),
    ("routed", routed, ("vllm", "sglang")),
    ("sampling", sampling, ("sized_curve", "plan")),
    ("cluster", cluster, ("plan",)),
    ("optimal", optimal, ("plan",)),
    ("decode_reuse", decode_reuse, ("vllm",)),
    ("jsonl", jsonl, ("sized_curve",)),
    ("sized_depths", sized_depths, ("sized_curve", "plan")),
    ("reblocked", reblocked, ("vllm",)),
    ("stream", stream, ("sized_curve",)),
    ("key_stream", key_stream, ("unit_curve",)),
    ("sampled_plan", sampled_plan, ("plan", "sampling")),
    ("scheduler", scheduler, ("vllm",)),
    ("offload", offload, ("vllm",)),
    ("hybrid", hybrid, ("plan",)),
]


FAILED: list[str] = []


def _run(name: str, task: Callable[[str], None], out: str) -> None:
    try:
        task(out)
    except Exception as error:  # noqa: BLE001 - a failed warm-up only costs time in the tests
        print(f"warm_kernels: {name} failed: {error!r}", file=sys.stderr)
        FAILED.append(name)


def share(folder: str, out: str, wait_limit: float = 300.0) -> None:
    """Take tasks from :data:`TASKS` until all are claimed (by this process or another one
    sharing ``folder``): the first unclaimed task whose prerequisites are done."""
    def done(name: str) -> bool:
        return os.path.exists(os.path.join(folder, name + ".done"))

    mine: set[str] = set()
    start = time.monotonic()
    while True:
        free = [(n, t, a) for n, t, a in TASKS if n not in mine and not os.path.exists(os.path.join(folder, n + ".claim"))]
        if not free:
            return
        ready = [(n, t) for n, t, after in free if all(done(a) for a in after)]
        if not ready:
            if time.monotonic() - start > wait_limit:  # another process died: run the rest anyway
                ready = [(n, t) for n, t, _ in free]
            else:
                time.sleep(0.02)
                continue
        for name, task in ready:
            try:
                os.close(os.open(os.path.join(folder, name + ".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                mine.add(name)  # taken by the other process meanwhile
                continue
            mine.add(name)
            _run(name, task, out)
            Path(folder, name + ".done").touch()
            break


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory() as scratch:
        if args[:1] == ["--share"]:
            try:
                share(args[1], scratch)
            finally:  # the workers wait for one exit file per process (conftest.py)
                Path(args[1], f"exit-{os.getpid()}").touch()
        else:
            names = args or [name for name, _, _ in TASKS]
            for name, task, _ in TASKS:
                if name in names:
                    _run(name, task, scratch)
    sys.exit(1 if FAILED else 0)  # a failed task: the warm-up is not recorded as complete (conftest.py)
