"""Agentic Dynamo-shaped traces served by vLLM 0.33.0's own KV-cache manager, several workers.

Run with the vLLM venv, e.g.

    /work/engines/venv-vllm/bin/python validation/drive_vllm_dynamo.py --config clean3 \
        --out tests/data/engines/dynamo/agentic_clean3.jsonl [--tokens-out T.jsonl]

What it does (see README.md, "Dynamo traces"):

- **Generator** (seeded, token level): sessions on a few shared system prompts; turn t+1's
  prompt is turn t's prompt + turn t's answer (as generated, or *edited*: the thinking tokens
  at the head of the answer stripped, as Qwen3's chat template does) + new user / tool text;
  some turns spawn 2-4 sub-agents at once (their own session ids, a shared sub-agent system
  prompt and task head, optionally *forked* from the parent's context), which overlap in time;
  the parent resumes when all of them are done. Prompt lengths are arbitrary (not multiples of
  16). Closed loop: a turn is sent when the previous one finished (plus a tool delay).
- **Workers**: 2-4, each with its own ``KVCacheManager`` (vLLM's code, sha256 block hasher as
  the engine core sets it up). Routing by session (root session hash) or kv-aware (the worker
  whose cache holds the longest prefix, as ``get_computed_blocks`` reports it; ties to the
  fewest requests queued or running, then the lowest id).
- **Scheduler steps** (the driver restates the policy of ``Scheduler.schedule`` in vLLM 0.33.0:
  running requests first, in order, each taking ``min(num_tokens - num_computed_tokens,
  budget)`` tokens, then waiting requests FCFS while budget remains: ``get_computed_blocks``,
  chunk ``min(num_tokens - hit, budget)``, ``allocate_slots`` (which caches the blocks it
  covers at once, as vLLM does at schedule time); after the step a request whose computed
  tokens reach its token count samples one token (``append_output_token_ids``, so vLLM hashes
  the generated blocks itself), and is freed (``KVCacheManager.free``) when it has generated
  its output length). Token budget per step ``--budget`` (chunked prefill), step time
  ``1 ms + 0.02 ms x prefill tokens + 0.25 ms x decode requests``.
- **Recorded**: per request vLLM's hit at its first scheduling (``num_cached_tokens``, the
  number Dynamo reports as ``cached_tokens``), the worker, and the times; written as
  ``dynamo.request.trace.v1`` ``request_end`` events in end order with 16-token prefix-chained
  ``input_sequence_hashes`` (blake2b of the previous hash and the block's token ids, 64 bits,
  the final partial block included) and ``prefill_time_ms = first token - first scheduled``,
  ``ttft_ms = first token - received``, ``total_time_ms = finish - received``.
  ``--tokens-out`` also writes the same requests as a token-id trace with output ids.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import random
import sys
import warnings
from collections import deque
from dataclasses import dataclass, field

warnings.filterwarnings("ignore")
E = 16
EPOCH_MS = 1_764_000_000_000.0
CONFIGS = {
    # name: workers, router, sessions, think (share of answers with thinking stripped before reuse),
    # fork (sub-agents start from the parent's context), budget, seed
    "clean3": dict(workers=3, router="session", sessions=6, think=0.0, fork=False, budget=2048, seed=11),
    "kv2": dict(workers=2, router="kv", sessions=6, think=0.0, fork=True, budget=1024, seed=12),
    "think2": dict(workers=2, router="session", sessions=6, think=0.5, fork=False, budget=2048, seed=13),
    "kv4": dict(workers=4, router="kv", sessions=5, think=0.3, fork=True, budget=4096, seed=14),
    "burst2": dict(workers=2, router="session", sessions=5, think=0.0, fork=False, budget=256, seed=16),
    "think100": dict(workers=2, router="session", sessions=5, think=1.0, fork=False, budget=2048, seed=33),
    "verbatim4": dict(workers=4, router="kv", sessions=6, think=0.0, fork=True, budget=512, seed=35),
    "tiny2": dict(workers=2, router="kv", sessions=3, think=0.0, fork=True, budget=512, seed=15, small=True),
    "tinythink2": dict(workers=2, router="session", sessions=3, think=0.5, fork=False, budget=512, seed=17, small=True),
}

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def write_manifest(summaries: str, out: str) -> None:
    """manifest.json from the driver's summary lines (runs without vLLM)."""
    base = os.path.dirname(out)
    files = {}
    with open(summaries) as fh:
        for line in fh:
            s = json.loads(line)
            name = f"agentic_{s['config']}.jsonl"
            with open(os.path.join(base, name), "rb") as data:
                s["sha256"] = hashlib.sha256(data.read()).hexdigest()
            s["setup"] = CONFIGS[s["config"]]
            s["unambiguous"] = s["answers_edited"] == 0
            files[name] = s
    tokens = {n: hashlib.sha256(open(os.path.join(base, n), "rb").read()).hexdigest()
              for n in sorted(os.listdir(base)) if n.endswith(".tokens.jsonl")}
    manifest = {"driver": "validation/drive_vllm_dynamo.py", "readme": "validation/README.md (Dynamo traces)",
                "engine": "vLLM 0.33.0 KVCacheManager, one per worker; block 16; pool never evicts",
                "scored_command": "stackdist plan TRACE --format dynamo --semantics vllm --gpu-blocks inf --workers recorded "
                                  "--decode-reuse --per-request OUT.csv",
                "unambiguous": "no answer was edited before its reuse: the planner must equal cached_tokens on every request",
                "traces": files, "token_traces": tokens}
    with open(out, "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")


if len(sys.argv) == 4 and sys.argv[1] == "--manifest":
    write_manifest(sys.argv[2], sys.argv[3])
    sys.exit(0)

import torch
import vllm
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request, RequestStatus

HASH_FN = get_hash_fn_by_name("sha256")
init_none_hash(HASH_FN)
BLOCK_HASHER = get_request_block_hasher(E, HASH_FN, 0)



def block_hashes(tokens: list[int]) -> list[int]:
    """16-token prefix-chained 64-bit hashes, the final partial block included."""
    out, prev = [], b""
    for i in range(0, len(tokens), E):
        h = hashlib.blake2b(prev + b"," .join(str(t).encode() for t in tokens[i:i + E]), digest_size=8)
        prev = h.digest()
        out.append(int.from_bytes(prev, "little"))
    return out


@dataclass
class Turn:
    """One request: its prompt and the answer the model 'generates'."""

    rid: str
    session: str
    prompt: list[int]
    answer: list[int]
    think: int  # leading answer tokens that are thinking (stripped when the answer is reused)
    received: float
    worker: int = -1
    req: Request | None = None
    first_sched: float = -1.0
    first_token: float = -1.0
    finish: float = -1.0
    cached: int = -1
    on_done: object = None
    chunks: int = 0  # scheduler steps its prefill took (more than 1: chunked)
    concurrent: int = 0  # requests running on its worker when it was first scheduled


@dataclass
class Worker:
    mgr: KVCacheManager
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    busy: bool = False


def make_manager(num_blocks: int, max_model_len: int) -> KVCacheManager:
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(
        ["model.layers.0.self_attn.attn"], FullAttentionSpec(block_size=E, num_kv_heads=1, head_size=64, dtype=torch.float16))])
    # as drive_vllm.py (Scheduler.__init__'s arguments for a plain decoder, prefix caching on)
    return KVCacheManager(kv_cache_config=cfg, max_model_len=max_model_len, max_in_flight_tokens=None, enable_caching=True,
                          use_eagle=False, num_hash_lookahead_tokens=0, num_prefill_lookahead=0, log_stats=False,
                          enable_kv_cache_events=False, dcp_world_size=1, pcp_world_size=1, scheduler_block_size=E,
                          hash_block_size=E, watermark=0.0)


class Sim:
    """The closed-loop agentic workload on K workers (module docstring)."""

    def __init__(self, cfg: dict, num_blocks: int = 200_000):
        self.cfg = cfg
        self.rng = random.Random(cfg["seed"])
        self.small = cfg.get("small", False)
        self.workers = [Worker(make_manager(num_blocks, 1 << 17)) for _ in range(cfg["workers"])]
        self.events: list = []
        self.seq = 0
        self.turns: list[Turn] = []
        self.done: list[Turn] = []
        sys_len = (150, 500) if self.small else (300, 1500)
        self.system = [self.toks(self.rng.randint(*sys_len)) for _ in range(3)]
        self.sub_system = self.toks(self.rng.randint(*sys_len))

    def toks(self, n: int) -> list[int]:
        return [self.rng.randrange(100, 150_000) for _ in range(n)]

    def push(self, t: float, kind: str, obj: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, obj))

    # ---- workload ------------------------------------------------------------------------
    def new_answer(self) -> tuple[list[int], int]:
        n = self.rng.randint(1, 60) if self.small else self.rng.choice([1, 2, self.rng.randint(3, 40), self.rng.randint(20, 400)])
        think = 0
        if self.cfg["think"] and self.rng.random() < self.cfg["think"]:
            think = self.rng.randint(8, 40 if self.small else 300)
        return self.toks(think + n), think

    def send(self, t: float, session: str, prompt: list[int], on_done: object) -> None:
        answer, think = self.new_answer()
        turn = Turn(f"{session}#{len(self.turns)}", session, prompt, answer, think, t, on_done=on_done)
        self.turns.append(turn)
        self.push(t, "arrive", turn)

    def reused(self, turn: Turn) -> list[int]:
        """The prompt of the next turn starts with this: the prompt and the answer (edited)."""
        return turn.prompt + turn.answer[turn.think:]

    def start_session(self, t: float, name: str, prompt: list[int], turns: int, parent: object = None) -> None:
        state = {"left": turns, "name": name, "parent": parent}

        def done(turn: Turn, now: float) -> None:
            state["left"] -= 1
            history = self.reused(turn)
            if state["left"] <= 0:
                if parent is not None:
                    parent(turn, now)
                return
            if state["parent"] is None and self.rng.random() < 0.35:  # spawn sub-agents
                self.spawn(now, name, history, lambda results, end: self.send(
                    end + self.rng.uniform(1, 80), name, history + results, done))
                return
            new = self.toks(self.rng.randint(5, 120) if self.small else self.rng.choice([self.rng.randint(5, 60), self.rng.randint(60, 900)]))
            self.send(now + self.rng.uniform(0, 1500), name, history + new, done)

        self.send(t, name, prompt, done)

    def spawn(self, now: float, parent: str, history: list[int], resume) -> None:
        k = self.rng.randint(2, 4)
        head = self.toks(self.rng.randint(20, 200))  # the task description all siblings share
        results: list[list[int]] = []
        at = now + self.rng.uniform(1, 50)

        def child_done(turn: Turn, end: float) -> None:
            results.append(self.toks(self.rng.randint(10, 150)))
            if len(results) == k:
                resume([t for r in results for t in r], end)

        for i in range(k):
            base = history if self.cfg["fork"] else self.sub_system
            prompt = base + head + self.toks(self.rng.randint(3, 90))
            # siblings sent in one burst: some a microsecond apart (one scheduler step), some a few ms
            self.start_session(at + (0.001 * i if i % 2 else self.rng.uniform(0, 20)), f"{parent}:sub{i}", prompt,
                               self.rng.randint(1, 3), child_done)

    def generate(self) -> None:
        for s in range(self.cfg["sessions"]):
            t = self.rng.uniform(0, 4000 if self.small else 8000)
            system = self.rng.choice(self.system)
            first = self.toks(self.rng.randint(10, 80) if self.small else self.rng.randint(20, 1500))
            self.start_session(t, f"s{s}:root", system + first, self.rng.randint(2, 4) if self.small else self.rng.randint(3, 6))

    # ---- engine --------------------------------------------------------------------------
    def route(self, turn: Turn) -> int:
        if self.cfg["router"] == "session":
            root = turn.session.split(":")[0]
            return int(hashlib.md5(root.encode()).hexdigest(), 16) % len(self.workers)
        best = []
        for w, worker in enumerate(self.workers):
            _blocks, hit, _ = worker.mgr.get_computed_blocks(turn.req)
            best.append((-hit, len(worker.waiting) + len(worker.running), w))
        return min(best)[2]

    def arrive(self, turn: Turn, now: float) -> None:
        turn.req = Request(request_id=turn.rid, prompt_token_ids=list(turn.prompt), sampling_params=SamplingParams(max_tokens=len(turn.answer)),
                           pooling_params=None, arrival_time=now, block_hasher=BLOCK_HASHER)
        turn.worker = self.route(turn)
        worker = self.workers[turn.worker]
        worker.waiting.append(turn)
        if not worker.busy:
            self.step(turn.worker, now)

    def step(self, w: int, now: float) -> None:
        worker = self.workers[w]
        budget = self.cfg["budget"]
        scheduled, prefill, decode = [], 0, 0
        for turn in worker.running:  # Scheduler.schedule: running requests first
            if budget <= 0:
                break
            req = turn.req
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            assert worker.mgr.allocate_slots(req, n, num_lookahead_tokens=0) is not None
            req.num_computed_tokens += n
            budget -= n
            scheduled.append(turn)
            if not req.num_output_tokens:
                turn.chunks += 1
            if req.num_output_tokens:
                decode += 1
            else:
                prefill += n
        while worker.waiting and budget > 0:  # then waiting requests, FCFS
            turn = worker.waiting.popleft()
            req = turn.req
            blocks, hit, _ = worker.mgr.get_computed_blocks(req)
            n = min(req.num_tokens - hit, budget)
            new = worker.mgr.allocate_slots(req, n, num_new_computed_tokens=hit, new_computed_blocks=blocks,
                                            num_lookahead_tokens=0, num_external_computed_tokens=0, delay_cache_blocks=False,
                                            num_encoder_tokens=0, full_sequence_must_fit=True, reserved_blocks=0,
                                            has_scheduled_reqs=bool(scheduled))
            assert new is not None, "pool too small"
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = hit + n
            turn.cached, turn.first_sched = hit, now
            turn.chunks, turn.concurrent = 1, len(worker.running)
            worker.running.append(turn)
            scheduled.append(turn)
            budget -= n
            prefill += n
        if not scheduled:
            worker.busy = False
            return
        worker.busy = True
        self.push(now + 1.0 + 0.02 * prefill + 0.25 * decode, "step_end", (w, scheduled))

    def step_end(self, w: int, scheduled: list[Turn], now: float) -> None:
        worker = self.workers[w]
        for turn in scheduled:
            req = turn.req
            if req.num_computed_tokens < req.num_tokens:
                continue  # a prefill chunk that does not finish the prompt samples nothing
            k = req.num_output_tokens
            req.append_output_token_ids(turn.answer[k])
            if k == 0:
                turn.first_token = now
            if k + 1 == len(turn.answer):
                req.status = RequestStatus.FINISHED_LENGTH_CAPPED
                worker.mgr.free(req)
                worker.running.remove(turn)
                turn.finish = now
                self.done.append(turn)
                turn.on_done(turn, now)
        self.step(w, now)

    def run(self) -> None:
        self.generate()
        while self.events:
            now, _, kind, obj = heapq.heappop(self.events)
            if kind == "arrive":
                self.arrive(obj, now)
            else:
                self.step_end(obj[0], obj[1], now)


def dynamo_line(t: Turn) -> dict:
    received = EPOCH_MS + t.received
    request = {
        "request_id": t.rid, "input_tokens": len(t.prompt), "output_tokens": len(t.answer), "cached_tokens": t.cached,
        "request_received_ms": round(received, 3), "prefill_time_ms": round(t.first_token - t.first_sched, 3),
        "ttft_ms": round(t.first_token - t.received, 3), "total_time_ms": round(t.finish - t.received, 3),
        "worker": {"prefill_worker_id": t.worker, "decode_worker_id": t.worker},
        "replay": {"trace_block_size": E, "input_length": len(t.prompt), "input_sequence_hashes": block_hashes(t.prompt)},
        # not part of Dynamo's schema (readers ignore it): the ground truth of the edit
        "validation": {"answer_thinking_tokens_stripped_before_reuse": t.think},
    }
    return {"timestamp": int(EPOCH_MS + t.finish), "event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                                                             "agent_context": {"session_id": t.session}, "request": request}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens-out")
    args = ap.parse_args(argv)
    sim = Sim(CONFIGS[args.config])
    sim.run()
    with open(args.out, "w") as fh:
        for t in sim.done:  # end order, as Dynamo writes them
            fh.write(json.dumps(dynamo_line(t), separators=(",", ":")) + "\n")
    if args.tokens_out:
        with open(args.tokens_out, "w") as fh:
            for t in sorted(sim.done, key=lambda t: t.received):
                fh.write(json.dumps({"timestamp": round(t.received / 1000, 6), "input_ids": t.prompt, "output_ids": t.answer,
                                     "cached_tokens": t.cached, "worker": t.worker}, separators=(",", ":")) + "\n")
    inputs = sum(len(t.prompt) for t in sim.done)
    cached = sum(t.cached for t in sim.done)
    print(json.dumps({"config": args.config, "vllm": vllm.__version__, "requests": len(sim.done), "input_tokens": inputs,
                      "cached_tokens": cached, "engine_hit_rate": cached / inputs if inputs else 0.0,
                      "bytes": os.path.getsize(args.out), "scheduled_beside_others": sum(t.concurrent > 0 for t in sim.done),
                      "chunked_prefills": sum(t.chunks > 1 for t in sim.done),
                      "answers_edited": sum(t.think > 0 for t in sim.done)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
