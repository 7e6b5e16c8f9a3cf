"""Seeded random prefix-chained request traces for the engine-model tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import stackdist


def random_trace(seed: int, n_requests: int = 30, pages_per_block: int | None = None, aligned: float = 0.5) -> stackdist.RequestTrace:
    """A trace (``aligned``: how often a prompt is 16-aligned) with shared heads, branches, exact repeats, 16-aligned and partial prompts.

    Each request either repeats an earlier prompt (possibly truncated to a 16-aligned length),
    or extends a prefix of an earlier request with new blocks, or starts fresh.
    """
    rng = np.random.default_rng(seed)
    k = int(pages_per_block or rng.integers(1, 4))
    bs = 16 * k
    prompts: list[tuple[list[int], int]] = []  # (block ids, input tokens)
    next_id = 0
    for _ in range(n_requests):
        u = rng.random()
        if prompts and u < 0.25:
            ids, p = prompts[int(rng.integers(len(prompts)))]
            if rng.random() < aligned:
                p = max(16, (p // 16) * 16)  # a 16-aligned resend
            elif p % 16 == 0 and p > 1:
                p -= int(rng.integers(1, min(p, 16)))  # a resend one partial page shorter
            n_blocks = -(-p // bs)
            ids = ids[:n_blocks]
        else:
            if prompts and u < 0.8:
                base, bp = prompts[int(rng.integers(len(prompts)))]
                keep = int(rng.integers(0, (bp // bs) + 1))
                ids = list(base[:keep])
            else:
                ids = []
            extra = int(rng.integers(1, 5))
            ids = ids + list(range(next_id, next_id + extra))
            next_id += extra
            tail = int(rng.integers(1, bs + 1))
            if rng.random() < 0.3 * aligned:
                tail = bs
            p = (len(ids) - 1) * bs + tail
        prompts.append((ids, p))
    block_ids, offsets, tokens, inp = [], [0], [], []
    for ids, p in prompts:
        block_ids.extend(ids)
        offsets.append(len(block_ids))
        t = [bs] * len(ids)
        t[-1] = p - (len(ids) - 1) * bs
        tokens.extend(t)
        inp.append(p)
    out = rng.integers(1, 40, size=n_requests)
    out[rng.random(n_requests) < 0.1] = 1
    gaps = rng.exponential(0.3, size=n_requests)
    gaps[0] = 0
    ts = np.cumsum(gaps)
    return stackdist.RequestTrace(
        np.array(block_ids, np.int64), np.array(offsets, np.int64), np.array(tokens, np.int64),
        ts, np.array(inp, np.int64), out.astype(np.int64), block_size=bs,
    )


def write_mooncake(path, trace: stackdist.RequestTrace) -> None:
    """``trace`` as Mooncake JSONL (one request per line, timestamps = positions), for the
    validation restatements, which read that format."""
    import json

    lines = []
    for r in range(trace.n_requests):
        ids = trace.block_ids[trace.offsets[r]:trace.offsets[r + 1]].tolist()
        lines.append(json.dumps({"timestamp": r, "input_length": int(trace.input_length[r]),
                                 "output_length": int(trace.output_length[r]), "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")


def router_trace_file(tmp_path: Path) -> Path:
    """A six-request Mooncake trace (32-token blocks of 64-token prompts, 100 ms apart; prompts
    repeat and share first blocks) for the routers' plan CLI tests."""
    lines = [{"timestamp": i * 100, "input_length": 64, "output_length": 4, "hash_ids": ids}
             for i, ids in enumerate([[1, 2], [1, 2], [3, 4], [1, 5], [3, 4], [6, 7]])]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
