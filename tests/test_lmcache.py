"""LMCache lookup-hash logs: the reader, and per-access semantics equal to LMCache's own
simulator loop (prefix hits at lookup, then access hits / insert misses, LRU) at every capacity."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest

from stackdist.errors import TraceFormatError
from stackdist.planning import PrefixCurve
from stackdist.serving import replay_requests
from stackdist.traces import read_lmcache


def lmcache_simulate(events: list[dict], capacity_chunks: int) -> int:
    """LMCache's tools/cache_simulator loop, written again from its README: hit tokens."""
    cache: OrderedDict = OrderedDict()
    hit_tokens = 0
    for e in sorted(events, key=lambda e: e["timestamp"]):
        prefix = 0
        for h in e["chunk_hashes"]:
            if h not in cache:
                break
            prefix += 1
        hit_tokens += prefix * e["chunk_size"]
        for i, h in enumerate(e["chunk_hashes"]):
            if i < prefix:
                cache.move_to_end(h)
            else:
                cache[h] = True
                cache.move_to_end(h)
                if len(cache) > capacity_chunks:
                    cache.popitem(last=False)
    return hit_tokens


def _events(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    events = []
    for i in range(60):
        root = int(rng.integers(0, 3))
        n = int(rng.integers(0, 6))
        chain = [f"0x{root:x}" + "".join(f"{int(rng.integers(0, 2))}" for _ in range(j)) for j in range(1, n + 1)]
        events.append({"timestamp": float(rng.random() * 100), "request_id": f"r{i}", "model_name": "m",
                       "chunk_size": 4, "seq_len": 4 * n + int(rng.integers(0, 4)), "chunk_hashes": chain})
    return events


@pytest.mark.parametrize("seed", range(8))
def test_per_access_equals_lmcache_simulator(tmp_path, seed):
    events = _events(seed)
    path = tmp_path / "lookup_hashes_1.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    curve = PrefixCurve(replay_requests(read_lmcache(tmp_path), "per-access"))
    for c in range(1, 25):
        assert curve.prefix_token_hits_at(c) == lmcache_simulate(events, c)


def test_lmcache_reader_errors_name_file_and_line(tmp_path):
    path = tmp_path / "lookup_hashes_1.jsonl"
    path.write_text('{"chunk_size": 4, "seq_len": 4, "chunk_hashes": ["0x1", "0x2"]}\n')
    with pytest.raises(TraceFormatError, match=r"lookup_hashes_1.jsonl:1: chunk_hashes has 2 entries but seq_len 4"):
        read_lmcache(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceFormatError, match="no lookup_hashes"):
        read_lmcache(empty)
