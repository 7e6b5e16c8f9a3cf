"""Obviously correct references for the tests: a list stack and replays of kvlab's simulators."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np

from kvlab.kvsim import LRUCache

DATA = Path(__file__).resolve().parent.parent / "data"
TRACES = DATA / "traces"
SHARED_TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"


def naive_distances(keys, sizes=None) -> list:
    """Stack distances from a plain Python list (most recent first); None when cold. O(n*k)."""
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    stack: list = []
    size_of: dict = {}
    out = []
    for key, size in zip(keys, sizes):
        if key in size_of:
            depth = stack.index(key)
            out.append(size + sum(size_of[k] for k in stack[:depth]))
            stack.pop(depth)
        else:
            out.append(None)
        size_of[key] = size
        stack.insert(0, key)
    return out


def lru_hits(keys, sizes, capacity, window=(0, None)) -> tuple[int, int]:
    """(hits, hit size) of kvlab's LRUCache at one capacity, counted inside the window."""
    start, stop = window
    stop = len(keys) if stop is None else stop
    cache = LRUCache(int(capacity))
    sizes = [1] * len(keys) if sizes is None else sizes
    hits = hit_size = 0
    for i, (key, size) in enumerate(zip(keys, sizes)):
        if cache.access(key, int(size)) and start <= i < stop:
            hits += 1
            hit_size += int(size)
    return hits, hit_size


def mooncake_block_stream(path: Path) -> np.ndarray:
    """All hash ids of a Mooncake trace in request order (head first); a fresh copy each call."""
    return _block_stream(Path(path)).copy()


@functools.cache
def _block_stream(path: Path) -> np.ndarray:
    """The block stream of :func:`mooncake_block_stream`, read once per process (read-only)."""
    ids: list[int] = []
    with open(path) as f:
        for line in f:
            if line.strip():
                ids.extend(json.loads(line)["hash_ids"])
    out = np.array(ids, dtype=np.int64)
    out.setflags(write=False)
    return out


def real_trace_capacities(n_keys: int) -> tuple[int, ...]:
    """The capacities at which the real traces are replayed through the references (test_curve,
    test_plan, test_cli): nothing, a few blocks, a few thousand, a third of the distinct blocks and
    all of them (every capacity, 0 and 1 included, is checked on the small random traces)."""
    return (0, 37, 2000, n_keys // 3, n_keys)


def unit_lru_flags(keys: list, capacity: int) -> np.ndarray:
    """Per-access hit flags of an LRU cache holding ``capacity`` unit-size blocks: an OrderedDict
    (oldest first); a hit moves the key to the end, a miss stores it and evicts the oldest beyond
    the capacity. kvlab's ``LRUCache`` with every size 1, without its per-access argument checks
    (about 5x faster; equal flags checked on the real traces by test_curve). O(n)."""
    from collections import OrderedDict

    cache: OrderedDict = OrderedDict()
    flags = np.zeros(len(keys), dtype=bool)
    for i, key in enumerate(keys):
        if key in cache:
            cache.move_to_end(key)
            flags[i] = True
        elif capacity > 0:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return flags


def lru_cache_flags(keys: list, capacity: int) -> np.ndarray:
    """Per-access hit flags of kvlab's ``LRUCache(capacity)``, every size 1. O(n)."""
    return np.fromiter(map(LRUCache(int(capacity)).access, keys, itertools.repeat(1)), dtype=bool, count=len(keys))


@functools.cache
def real_lru_flags(path: Path, capacity: int) -> np.ndarray:
    """Per-access hit flags of an LRU cache of ``capacity`` blocks (:func:`unit_lru_flags`) over a
    Mooncake trace's block stream.

    Unit sizes, the whole stream head first (so also the per-access prefix semantics of
    :func:`direct_requests` on that trace, request by request). Memoised per process: the curve,
    the planner and the CLI tests check against the same few replays of the real traces, each
    run once (about 0.12 s apiece on the 288,500-block conversation trace). Read-only.
    """
    flags = unit_lru_flags(_block_stream(Path(path)).tolist(), int(capacity))
    flags.setflags(write=False)
    return flags


def real_trace_paths() -> list[Path]:
    """The real traces: the shared originals when present, else the bundled copies."""
    base = SHARED_TRACES if (SHARED_TRACES / "mooncake_conversation_trace.jsonl").exists() else TRACES
    return [base / "mooncake_conversation_trace.jsonl", base / "mooncake_synthetic_trace.jsonl"]


def random_trace(rng: np.random.Generator, max_len: int = 80, max_keys: int = 12, size_kind: str = "varied"):
    """A small random trace: keys, per-access sizes (fixed per key)."""
    n = int(rng.integers(0, max_len + 1))
    k = int(rng.integers(1, max_keys + 1))
    keys = rng.integers(0, k, n)
    if size_kind == "unit":
        per_key = np.ones(k, np.int64)
    elif size_kind == "equal":
        per_key = np.full(k, int(rng.integers(1, 10)), np.int64)
    else:
        per_key = rng.integers(1, int(rng.choice([2, 4, 16, 64])) + 1, k)
    return keys, per_key[keys]


def direct_requests(requests: list[list], capacity: int, semantics: str) -> list[tuple[int, list[bool]]]:
    """The request-level reference: per request (hit prefix length, per-block hit flags).

    engine: an OrderedDict of blocks (oldest first); each request is looked up against the cache
    as it arrived, its hit is the longest contiguous prefix of cached blocks, then its blocks are
    committed tail first (each one made most recent, evicting the oldest beyond the capacity).
    per-access: kvlab's LRUCache over the block stream, head first; the prefix is the leading run
    of hits.
    """
    from collections import OrderedDict

    out = []
    if semantics == "per-access":
        cache = LRUCache(capacity)
        for blocks in requests:
            flags = [cache.access(b, 1) for b in blocks]
            prefix = next((i for i, f in enumerate(flags) if not f), len(flags))
            out.append((prefix, flags))
        return out
    cached: OrderedDict = OrderedDict()
    for blocks in requests:
        flags = [b in cached for b in blocks]
        prefix = next((i for i, f in enumerate(flags) if not f), len(flags))
        for b in reversed(blocks):
            if b in cached:
                cached.move_to_end(b)
            else:
                cached[b] = None
                if len(cached) > capacity:
                    cached.popitem(last=False)
        out.append((prefix, [i < prefix for i in range(len(blocks))]))
    return out


def random_requests(rng: np.random.Generator, n_requests: int = 30, max_blocks: int = 8, branching: int = 3):
    """Random prefix-chained requests: each block id names its whole prefix (a trie walk)."""
    children: dict = {}
    next_id = [0]

    def child(parent, choice):
        key = (parent, choice)
        if key not in children:
            children[key] = next_id[0]
            next_id[0] += 1
        return children[key]

    requests = []
    for _ in range(n_requests):
        node, blocks = None, []
        for _ in range(int(rng.integers(0, max_blocks + 1))):
            node = child(node, int(rng.integers(0, branching)))
            blocks.append(node)
        requests.append(blocks)
    return requests


def run_stackdist(capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the ``stackdist`` command, whether it returns or exits."""
    from stackdist.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def request_trace(requests: list[list], block_size: int = 4, last_tokens: list[int] | None = None):
    """A RequestTrace from lists of block ids: full blocks, or a shorter last block per request."""
    from stackdist.traces import RequestTrace

    return RequestTrace.from_blocks(requests, block_size=block_size, last_tokens=last_tokens)
