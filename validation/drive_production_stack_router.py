"""Drive the vLLM Production Stack router's own prefix trie (``HashTrie``) through seeded workloads.

    python validation/drive_production_stack_router.py --hashtrie PATH/src/vllm_router/prefix/hashtrie.py \
        [--out tests/data/engines/routers/production_stack_prefixaware.json]

Needs ``xxhash==3.5.0`` (the trie's hash, the version production-stack pins; 4.x refuses str) and a copy of
production-stack's ``src/vllm_router/prefix/hashtrie.py`` (github.com/vllm-project/production-stack,
read at commit a6c01db0); its one import of the package, ``vllm_router.log.init_logger``, is stood
in by the standard ``logging.getLogger``. Standard library otherwise: stackdist is not imported.

Each workload is a list of requests, each a list of 32-token blocks (a block id and, for the last
block, its tokens). A block is 128 characters of text derived from its id (a shorter last block:
4 characters a token), so the trie's 128-character chunks are the blocks, as the planner's model
(``stackdist/serving/production_stack_router.py``) reads a trace. Every request goes through what
``PrefixAwareRouter.route_request`` does with a completion prompt (routing_logic.py:500-522 at
a6c01db0, default ``prefix_min_match_length`` 0): ``longest_prefix_match(prompt, available)`` on the
product's trie, one of the matched endpoints, ``insert(prompt, endpoint)``. The product picks with
``random.choice`` over a set; here the endpoints are sorted (``http://w00`` .. in worker order) and
the pick is ``matched[floor(u x len)]`` with ``u`` the request's draw from ``random.Random(seed)``,
recorded, so the planner's model can be given the same draws. Recorded per request: the draw, the
matched workers, the match length in characters and the chosen worker.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import random
import sys
import types
from pathlib import Path

BLOCK_TOKENS = 32
CHARS_PER_TOKEN = 4
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "engines" / "routers" / "production_stack_prefixaware.json"


def load_hashtrie(path: str) -> types.ModuleType:
    """The product's ``hashtrie.py`` as a module, its logger import stood in."""
    package = types.ModuleType("vllm_router")
    log = types.ModuleType("vllm_router.log")
    log.init_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules.setdefault("vllm_router", package)
    sys.modules.setdefault("vllm_router.log", log)
    spec = importlib.util.spec_from_file_location("vllm_router_prefix_hashtrie", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block_text(block: int, tokens: int) -> str:
    """128 characters for a full block, 4 a token for a shorter one; distinct blocks differ."""
    return (f"<{block:06d}>" * 16)[: tokens * CHARS_PER_TOKEN]


def workload(rng: random.Random, n: int) -> list[tuple[list[int], int]]:
    """``n`` requests as (block ids, tokens of the last block): shared heads (a system prompt),
    conversations extending earlier prompts, exact resends, resends with another short last block,
    fresh prompts and a few empty ones."""
    out: list[tuple[list[int], int]] = []
    next_id = 1
    for _ in range(n):
        u = rng.random()
        if u < 0.03:
            out.append(([], 0))
            continue
        if out and u < 0.2:
            ids, last = rng.choice(out)
            if ids and rng.random() < 0.5:
                last = rng.randint(1, BLOCK_TOKENS)  # the same blocks, another end
            out.append((list(ids), last if ids else 0))
            continue
        if out and u < 0.75:
            base, last = rng.choice(out)
            full = base if last == BLOCK_TOKENS else base[:-1]
            ids = full[: rng.randint(0, len(full))]
        else:
            ids = [0] if rng.random() < 0.6 else []  # the system prompt
        extra = rng.randint(1, 4)
        ids = ids + list(range(next_id, next_id + extra))
        next_id += extra
        out.append((ids, BLOCK_TOKENS if rng.random() < 0.4 else rng.randint(1, BLOCK_TOKENS)))
    return out


async def route(hashtrie: types.ModuleType, requests: list[tuple[list[int], int]], workers: int,
                rng: random.Random) -> list[dict]:
    """Every request through the product's trie, as ``PrefixAwareRouter.route_request``."""
    trie = hashtrie.HashTrie()
    endpoints = [f"http://w{w:02d}" for w in range(workers)]
    records = []
    for ids, last in requests:
        prompt = "".join(block_text(b, BLOCK_TOKENS if i < len(ids) - 1 else last) for i, b in enumerate(ids))
        length, matched = await trie.longest_prefix_match(prompt, set(endpoints))
        tied = sorted(matched)
        u = rng.random()
        chosen = tied[min(int(u * len(tied)), len(tied) - 1)]
        await trie.insert(prompt, chosen)
        records.append({"draw": u, "matched": [endpoints.index(e) for e in tied], "match_chars": length,
                        "worker": endpoints.index(chosen)})
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hashtrie", required=True, help="production-stack's src/vllm_router/prefix/hashtrie.py")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--workloads", type=int, default=12)
    args = ap.parse_args()
    hashtrie = load_hashtrie(args.hashtrie)
    cases = []
    for seed in range(args.workloads):
        rng = random.Random(seed)
        requests = workload(rng, rng.randint(20, 80))
        workers = rng.randint(1, 5)
        records = asyncio.run(route(hashtrie, requests, workers, rng))
        cases.append({"seed": seed, "workers": workers, "block_tokens": BLOCK_TOKENS,
                      "requests": [{"blocks": ids, "last_tokens": last} for ids, last in requests],
                      "routed": records})
    report = {"product": "vLLM Production Stack router, prefixaware (HashTrie chunk_size 128)",
              "source": "github.com/vllm-project/production-stack a6c01db0 src/vllm_router/prefix/hashtrie.py",
              "driver": "validation/drive_production_stack_router.py", "chars_per_token": CHARS_PER_TOKEN,
              "cases": cases}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, separators=(",", ":")) + "\n")
    tmp.replace(out)
    n = sum(len(c["requests"]) for c in cases)
    print(f"{len(cases)} workloads, {n} requests -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
