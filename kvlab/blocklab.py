"""The lab's passes at vLLM granularity: 16-token prefix-chained blocks, both prefix semantics.

The whole-document scenario (:mod:`kvlab.scenario`) stores a document or not; an engine such as
vLLM caches 16-token blocks and can serve part of a document (a *partial hit*). This module
replays the same passes block by block:

- ``docs`` documents of ``tokens`` random token ids (seeded, fixed per document); each request
  is its document plus a fresh ``question_tokens``-token question (seeded, different per
  request), cut into ``block_size``-token blocks and hashed with
  :func:`stackdist.traces.chain_hashes`. Only full blocks are hashed, as vLLM caches only full
  blocks: with 5011-token documents the last hashed block of a request mixes 3 document tokens
  with 13 question tokens, so it is unique per request, and a request's last partial block is
  never cached. A *document block* is a block of document tokens only (``tokens //
  block_size`` per request); the other blocks are fresh, so only document blocks can hit.
- GPU capacity ``gpu // block_size`` blocks (21520 // 16 = 1345), one cache over all passes.
- Both semantics of :mod:`stackdist.serving.semantics`, read off one replay each (per-request
  vectorised queries: :func:`stackdist.serving.request_hits`, :mod:`stackdist.serving.lab_bridge`):
  ``engine`` (vLLM, SGLang: look up the longest cached prefix as the request arrives, then
  commit its blocks tail first, so the head ends most recent) and ``per-access`` (LMCache's
  simulator, KVSET: an LRU over the block stream, head first, so the head is least recent).
- Every number is checked against direct simulation (:class:`kvlab.kvsim.EnginePrefixCache`
  and :class:`kvlab.kvsim.LRUCache` over the block stream); a mismatch raises
  :class:`kvlab.lab.LabMismatchError`.
- Each predicted prefix hit is valued in time to first token with the partial-prefix
  measurement ``data/fixtures/partial_prefix_h200.json`` (:mod:`kvlab.partial_prefix`).

``python -m kvlab block-lab`` prints a table (or JSON with ``--json -``).
"""

from __future__ import annotations

import sys

from stackdist.errors import install_interrupt_handler, started_as

if started_as("blocklab.py"):  # python -m kvlab.blocklab: Ctrl-C during the numpy imports is one line, exit 130
    install_interrupt_handler("blocklab.py", guarded=False)

import argparse
import errno
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stackdist.errors import UsageError
from stackdist.output import check_outputs, tool_header, write_atomic
from stackdist.serving import replay_requests, request_hits
from stackdist.serving.lab_bridge import cached_blocks, resident_at_arrival
from stackdist.traces import RequestTrace, chain_hashes
from stackdist.version import __version__

from .kvsim import EnginePrefixCache, LRUCache
from .lab import LabMismatchError
from .partial_prefix import (
    DEFAULT_FIXTURE,
    FixtureError,
    PartialPrefixTTFT,
    load_partial_prefix,
)
from .scenario import (
    DEFAULT_DOCS,
    DEFAULT_GPU,
    DEFAULT_PASSES,
    DEFAULT_TOKENS,
    PassResult,
    int_argument,
    parse_passes,
    pass_keys,
    passes_argument,
    require_int,
    run_scenario,
)

__all__ = [
    "DEFAULT_FIXTURE",
    "FixtureError",
    "LabRequests",
    "PartialPrefixTTFT",
    "build_requests",
    "direct_hits",
    "format_table",
    "load_partial_prefix",
    "main",
    "replay_hits",
    "run_block_lab",
    "verify_hits",
]

DEFAULT_BLOCK_SIZE = 16
DEFAULT_QUESTION_TOKENS = 32
DEFAULT_SEED = 0
#: Token ids are drawn from 0..VOCAB_SIZE-1: the fixture model's vocabulary
#: (``partial_prefix_h200.json`` -> ``architecture.vocab_size``). Only distinctness matters.
VOCAB_SIZE = 151936
#: Draws of one question before giving up on making it fresh (only tiny vocabularies need any).
MAX_QUESTION_DRAWS = 100
SEMANTICS = ("engine", "per-access")

EXAMPLES = """\
examples:
  python -m kvlab block-lab                          # the lab's defaults: GPU 21520 tokens, fwd,fwd,rev
  python -m kvlab block-lab --json -                 # the same as JSON on stdout
  python -m kvlab block-lab --json results/blocklab.json
  python -m kvlab block-lab --gpu 30000 --passes fwd,rev --seed 1
"""


# ----------------------------------------------------------------------------- the requests

@dataclass(frozen=True)
class LabRequests:
    """The lab's requests at block granularity, in the order they are served.

    ``trace`` holds every request's hashed blocks (all full); ``passes[r]`` and ``docs[r]``
    name request r's pass index (0-based) and document; ``doc_blocks`` is the number of
    document-only blocks per request and ``request_tokens`` its prompt length.
    """

    trace: RequestTrace
    passes: tuple[int, ...]
    docs: tuple[int, ...]
    doc_blocks: int
    request_tokens: int

    def blocks(self, request: int) -> list[int]:
        """Return request ``request``'s block ids as Python ints, head first."""
        lo, hi = int(self.trace.offsets[request]), int(self.trace.offsets[request + 1])
        return self.trace.block_ids[lo:hi].tolist()


def build_requests(
    docs: int = DEFAULT_DOCS,
    tokens: int = DEFAULT_TOKENS,
    question_tokens: int = DEFAULT_QUESTION_TOKENS,
    passes: str | Sequence[str] = DEFAULT_PASSES,
    block_size: int = DEFAULT_BLOCK_SIZE,
    seed: int = DEFAULT_SEED,
) -> LabRequests:
    """Draw the documents and questions (``numpy.random.default_rng(seed)``) and hash the requests.

    The documents are drawn first (``docs x tokens`` ids), then one question per request in
    serving order. A question whose blocks (the full blocks holding question tokens) repeat any
    block seen before is drawn again, so question blocks are always fresh (cold and unique);
    ValueError after :data:`MAX_QUESTION_DRAWS` draws.

    Complexity: O(requests x (tokens + question_tokens)) hashing.
    """
    order = parse_passes(passes)
    rng = np.random.default_rng(seed)
    documents = rng.integers(0, VOCAB_SIZE, size=(docs, tokens), dtype=np.int64)
    doc_blocks = tokens // block_size
    seen: set[int] = set()
    ids: list[np.ndarray] = []
    pass_of: list[int] = []
    doc_of: list[int] = []
    for pass_index, name in enumerate(order):
        for doc in pass_keys(name, docs):
            blocks = _fresh_request(documents[doc], question_tokens, block_size, doc_blocks, seen, rng)
            seen.update(blocks.tolist())
            ids.append(blocks)
            pass_of.append(pass_index)
            doc_of.append(doc)
    request_tokens = tokens + question_tokens
    per_request = request_tokens // block_size
    n = len(ids)
    trace = RequestTrace(
        np.concatenate(ids) if ids else np.zeros(0, np.uint64),
        np.arange(n + 1, dtype=np.int64) * per_request,
        np.full(n * per_request, block_size, np.int64),
        np.arange(n, dtype=np.float64),
        np.full(n, request_tokens, np.int64),
        np.zeros(n, np.int64),
        block_size=block_size,
        source="kvlab block-lab",
    )
    return LabRequests(trace, tuple(pass_of), tuple(doc_of), doc_blocks, request_tokens)


def _fresh_request(
    document: np.ndarray, question_tokens: int, block_size: int, doc_blocks: int, seen: set[int],
    rng: np.random.Generator,
) -> np.ndarray:
    """Hash document + a question whose blocks are new; redraw the question while they are not."""
    for _ in range(MAX_QUESTION_DRAWS):
        question = rng.integers(0, VOCAB_SIZE, size=question_tokens, dtype=np.int64)
        blocks = chain_hashes(np.concatenate([document, question]), block_size)
        question_blocks = blocks[doc_blocks:].tolist()
        if len(set(question_blocks)) == len(question_blocks) and seen.isdisjoint(question_blocks):
            return blocks
    raise ValueError(
        f"could not draw a fresh {question_tokens}-token question in {MAX_QUESTION_DRAWS} draws "
        f"from {VOCAB_SIZE} token ids; every question block must be new."
    )


# ----------------------------------------------------------------------------- the hits

#: Per-request fields of :func:`replay_hits` and :func:`direct_hits`.
HIT_FIELDS = ("prefix_blocks", "prefix_tokens", "cached_blocks", "resident_at_arrival")


def replay_hits(trace: RequestTrace, capacity_blocks: int) -> dict[str, dict[str, list[int]]]:
    """Per semantics and request: the hits at ``capacity_blocks``, read off the stackdist replay.

    - ``prefix_blocks``, ``prefix_tokens``: the request's contiguous hit prefix
      (:func:`stackdist.serving.request_hits`);
    - ``cached_blocks``: blocks that hit at any position (engine: the prefix, the only blocks an
      engine uses; per-access: every block still cached when it is accessed);
    - ``resident_at_arrival``: blocks cached when the request arrives (before any of its own
      blocks is touched), any position (:mod:`stackdist.serving.lab_bridge`).

    One replay per semantics, then vectorised passes over the blocks. Complexity:
    O(n log n) plus O(sum of squared request lengths) for the per-access arrival residency.
    """
    out: dict[str, dict[str, list[int]]] = {}
    for semantics in SEMANTICS:
        replay = replay_requests(trace, semantics)
        columns = (
            request_hits(replay, capacity_blocks),
            request_hits(replay, capacity_blocks, tokens=True),
            cached_blocks(replay, capacity_blocks),
            resident_at_arrival(replay, capacity_blocks),
        )
        out[semantics] = {name: column.tolist() for name, column in zip(HIT_FIELDS, columns)}
    return out


def direct_hits(trace: RequestTrace, capacity_blocks: int) -> dict[str, dict[str, list[int]]]:
    """The same fields as :func:`replay_hits`, by direct simulation of every request in order.

    engine: :class:`EnginePrefixCache` (look up, then commit tail first); per-access:
    :class:`LRUCache` over the block stream with unit sizes, head first.

    Complexity: O(blocks).
    """
    engine = EnginePrefixCache(capacity_blocks)
    lru = LRUCache(capacity_blocks)
    out: dict[str, dict[str, list[int]]] = {semantics: {name: [] for name in HIT_FIELDS} for semantics in SEMANTICS}
    for r in range(trace.n_requests):
        lo, hi = int(trace.offsets[r]), int(trace.offsets[r + 1])
        blocks = trace.block_ids[lo:hi].tolist()
        tokens = trace.block_tokens[lo:hi].tolist()
        resident = sum(block in engine for block in blocks)
        prefix = engine.access(blocks)
        _append(out["engine"], prefix, sum(tokens[:prefix]), prefix, resident)
        resident = sum(block in lru for block in blocks)
        flags = [lru.access(block, 1) for block in blocks]
        prefix = flags.index(False) if False in flags else len(flags)
        _append(out["per-access"], prefix, sum(tokens[:prefix]), sum(flags), resident)
    return out


def _append(fields: dict[str, list[int]], *values: int) -> None:
    """Append one request's values, in :data:`HIT_FIELDS` order."""
    for name, value in zip(HIT_FIELDS, values):
        fields[name].append(int(value))


def verify_hits(
    derived: dict[str, dict[str, list[int]]], direct: dict[str, dict[str, list[int]]], labels: Sequence[str]
) -> None:
    """Raise LabMismatchError naming the first request, semantics and field where the two differ."""
    for semantics in SEMANTICS:
        for name in HIT_FIELDS:
            ours, theirs = derived[semantics][name], direct[semantics][name]
            if len(ours) != len(theirs):
                raise LabMismatchError(
                    f"{semantics} {name}: the replay gives {len(ours)} requests but direct simulation {len(theirs)}"
                )
            for label, a, b in zip(labels, ours, theirs):
                if a != b:
                    raise LabMismatchError(
                        f"{label}, {semantics} {name}: the stackdist replay gives {a} "
                        f"but direct simulation gives {b}"
                    )


# ----------------------------------------------------------------------------- the lab

NOTES = (
    ("Blocks: only full blocks are hashed and cached (as in vLLM); a block holding any question "
    "token is fresh (unique per request), so only document blocks can hit."),
    ("engine: the hit is the longest prefix of blocks cached when the request arrives, then its "
    "blocks are committed tail first (the head ends most recent, so a squeezed document loses its tail)."),
    ("per-access: an LRU over the block stream, head first (the head is the least recent block of "
    "a request and is evicted first, so a squeezed document loses its head: no prefix)."),
    ("resident_at_arrival: blocks cached when the request arrives, any position; per-access "
    "cached_blocks: blocks still cached when they are accessed."),
    ("TTFT: linear interpolation in the fixture's rows[].P as a fraction of its doc_tokens, with "
    "the request's cached document fraction (hit tokens / document tokens); the fixture's times "
    "are not rescaled to this document length."),
    ("TTFT: P=0 and P>0 take different attention paths in that HF-transformers harness (README "
    "'Partial prefix hits'): a small cached prefix can cost MORE than a miss, and the "
    "interpolation between P=0 and the smallest P>0 joins the two paths (flagged)."),
    ("TTFT: wall times at the large-P end sit on that machine's host floor (README 'Partial "
    "prefix hits', Wall time); GPU work keeps falling there."),
)


def run_block_lab(
    gpu: int = DEFAULT_GPU,
    block_size: int = DEFAULT_BLOCK_SIZE,
    docs: int = DEFAULT_DOCS,
    tokens: int = DEFAULT_TOKENS,
    question_tokens: int = DEFAULT_QUESTION_TOKENS,
    passes: str | Sequence[str] = DEFAULT_PASSES,
    seed: int = DEFAULT_SEED,
    fixture: str | Path = DEFAULT_FIXTURE,
) -> dict[str, Any]:
    """Replay the lab's passes block by block under both semantics; return the verified report.

    Raises TypeError/ValueError for bad arguments, FixtureError for a bad fixture and
    LabMismatchError when the stackdist replay and direct simulation disagree.
    """
    for value, name, minimum in ((gpu, "gpu", 0), (block_size, "block_size", 1), (docs, "docs", 1),
                                 (tokens, "tokens", 1), (question_tokens, "question_tokens", 0), (seed, "seed", 0)):
        require_int(value, name, minimum)
    order = parse_passes(passes)
    model = load_partial_prefix(fixture)
    requests = build_requests(docs, tokens, question_tokens, order, block_size, seed)
    capacity = gpu // block_size
    labels = [f"pass {p + 1} ({order[p]}) doc {d}" for p, d in zip(requests.passes, requests.docs)]
    derived = replay_hits(requests.trace, capacity)
    verify_hits(derived, direct_hits(requests.trace, capacity), labels)
    whole = run_scenario(gpu=gpu, cpu=0, docs=docs, tokens=tokens, passes=order)["passes"]
    return {
        **tool_header("block-lab"),
        "config": {
            "gpu_tokens": gpu, "block_size": block_size, "capacity_blocks": capacity, "docs": docs,
            "tokens": tokens, "question_tokens": question_tokens, "passes": list(order), "seed": seed,
            "doc_blocks": requests.doc_blocks, "request_tokens": requests.request_tokens,
            "request_blocks": requests.request_tokens // block_size,
        },
        "verified_against": {"engine": "kvlab.kvsim.EnginePrefixCache", "per-access": "kvlab.kvsim.LRUCache (unit blocks)"},
        "ttft_model": model.describe(),
        "notes": list(NOTES),
        "passes": _pass_reports(requests, derived, model, order, whole, tokens),
    }


def _pass_reports(
    requests: LabRequests, hits: dict[str, dict[str, list[int]]], model: PartialPrefixTTFT,
    order: Sequence[str], whole: list[PassResult], tokens: int,
) -> list[dict[str, Any]]:
    """Group the per-request results by pass."""
    entries: list[list[dict[str, Any]]] = [[] for _ in order]
    for r, (p, doc) in enumerate(zip(requests.passes, requests.docs)):
        entry: dict[str, Any] = {
            "doc": doc,
            "doc_blocks": requests.doc_blocks,
            "whole_document_hit": doc in whole[p]["hit_docs"],
        }
        for semantics in SEMANTICS:
            fields: dict[str, Any] = {name: hits[semantics][name][r] for name in HIT_FIELDS}
            if semantics == "engine":
                del fields["cached_blocks"]  # equals prefix_blocks: an engine uses only the prefix
            fields["prefill_tokens"] = requests.request_tokens - fields["prefix_tokens"]
            fields["ttft"] = model.estimate(fields["prefix_tokens"] / tokens)
            entry[semantics] = fields
        entries[p].append(entry)
    return [{"pass": p + 1, "order": name, "requests": entries[p]} for p, name in enumerate(order)]


# ----------------------------------------------------------------------------- output

def format_table(result: dict[str, Any]) -> str:
    """Return the readable report: a header, one table per pass, and the notes."""
    c = result["config"]
    model = result["ttft_model"]
    lines = [
        (f"block-lab: GPU {c['gpu_tokens']} tokens = {c['capacity_blocks']} blocks of {c['block_size']} tokens; "
        f"{c['docs']} documents of {c['tokens']} tokens ({c['doc_blocks']} document blocks); "
        f"question {c['question_tokens']} tokens; request {c['request_tokens']} tokens = "
        f"{c['request_blocks']} hashed blocks; passes {','.join(c['passes'])}; seed {c['seed']}"),
        (f"verified against direct simulation: engine {result['verified_against']['engine']}, "
        f"per-access {result['verified_against']['per-access']}"),
        (f"TTFT (ms) interpolated from {model['source']} ({model['column']}: wall = "
        f"{model['fields']['wall_ms']}, gpu = {model['fields']['gpu_work_ms']}; "
        f"{model['doc_tokens']}-token document + {model['question_tokens']}-token question)"),
    ]
    header = (f"{'doc':>3} {'whole':>5} | {'prefix':>6} {'tokens':>6} {'arrive':>6} {'fill':>5} {'wall':>6} {'gpu':>6}  | "
              f"{'prefix':>6} {'cached':>6} {'arrive':>6} {'tokens':>6} {'fill':>5} {'wall':>6} {'gpu':>6}")
    for report in result["passes"]:
        lines += ["", f"pass {report['pass']} ({report['order']})",
                  f"{'':>3} {'doc':>5} | {'engine (vLLM, SGLang)':<48} | per-access (LRU over blocks; LMCache sim, KVSET)",
                  header]
        for entry in report["requests"]:
            lines.append(_table_row(entry))
    lines += ["", ("columns: whole = hit in the whole-document scenario (kvlab scenario); prefix = document blocks "
              "in the hit prefix (of doc_blocks); tokens = prefix tokens; arrive = blocks cached when the request "
              "arrives (any position); cached = per-access blocks still cached when accessed (any position); fill = "
              "tokens left to prefill (request tokens - prefix tokens); "
              "wall / gpu = estimated TTFT of the prefix hit (* = between P=0 and the smallest P>0: two attention "
              "paths)")]
    lines += [f"note: {note}" for note in result["notes"]]
    return "\n".join(lines) + "\n"


def _table_row(entry: dict[str, Any]) -> str:
    """One request's table line: the whole-document outcome, then each semantics' columns."""
    engine, access = entry["engine"], entry["per-access"]
    return (
        f"{entry['doc']:>3} {'hit' if entry['whole_document_hit'] else 'miss':>5} | "
        f"{engine['prefix_blocks']:>6} {engine['prefix_tokens']:>6} {engine['resident_at_arrival']:>6} "
        f"{engine['prefill_tokens']:>5} "
        f"{_ms(engine['ttft'], 'wall_ms')} {_ms(engine['ttft'], 'gpu_work_ms')} | "
        f"{access['prefix_blocks']:>6} {access['cached_blocks']:>6} {access['resident_at_arrival']:>6} "
        f"{access['prefix_tokens']:>6} {access['prefill_tokens']:>5} {_ms(access['ttft'], 'wall_ms')} {_ms(access['ttft'], 'gpu_work_ms')}"
    )


def _ms(ttft: dict[str, Any], key: str) -> str:
    """A TTFT cell to 0.1 ms, marked ``*`` where the interpolation joins two attention paths."""
    mark = "*" if ttft["mixes_attention_paths"] else " "
    return f"{ttft[key]:>5.1f}{mark}"


# ----------------------------------------------------------------------------- CLI

def _output_argument(text: str) -> str:
    """argparse ``type`` for --json: ``-`` or a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a file path or -, got an empty string")
    return text


MAX_DOCS = 100_000
MAX_TOKENS = 10_000_000
"""Bounds of --docs and --tokens (the lab holds every token id in memory)."""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Replay the lab's passes at block granularity (prefix-chained 16-token blocks) under the "
        "engine and per-access prefix semantics, verified against direct simulation, and value each prefix hit "
        "in TTFT with the partial-prefix fixture.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s (stackdist) {__version__}")
    parser.add_argument("--gpu", type=int_argument(0), default=DEFAULT_GPU,
                        help=f"GPU capacity in tokens, >= 0; blocks = GPU // block size (default {DEFAULT_GPU})")
    parser.add_argument("--block-size", type=int_argument(1), default=DEFAULT_BLOCK_SIZE,
                        help=f"tokens per block, >= 1 (default {DEFAULT_BLOCK_SIZE})")
    parser.add_argument("--docs", type=int_argument(1, MAX_DOCS), default=DEFAULT_DOCS,
                        help=f"number of documents, 1 to {MAX_DOCS:,} (default {DEFAULT_DOCS})")
    parser.add_argument("--tokens", type=int_argument(1, MAX_TOKENS), default=DEFAULT_TOKENS,
                        help=f"tokens per document, 1 to {MAX_TOKENS:,} (default {DEFAULT_TOKENS})")
    parser.add_argument("--question-tokens", type=int_argument(0, MAX_TOKENS), default=DEFAULT_QUESTION_TOKENS,
                        help=f"tokens of each request's fresh question, >= 0 (default {DEFAULT_QUESTION_TOKENS})")
    parser.add_argument("--passes", type=passes_argument, default=DEFAULT_PASSES,
                        help="comma-separated pass orders, each fwd or rev (default fwd,fwd,rev)")
    parser.add_argument("--seed", type=int_argument(0), default=DEFAULT_SEED,
                        help=f"seed of the token ids, >= 0 (default {DEFAULT_SEED})")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE, metavar="FILE",
                        help=f"partial-prefix TTFT fixture (default {DEFAULT_FIXTURE})")
    parser.add_argument("--json", type=_output_argument, metavar="OUT|-",
                        help="write the report as JSON to OUT (atomically; the table still goes to stdout), "
                        "or to stdout instead of the table with -")
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv``, run the lab, print the table or JSON; return 0, 1 (data error) or 2 (usage)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    name = parser.prog
    try:
        check_outputs([("--json", args.json)], [args.fixture])  # never over the fixture
        if args.docs * (args.tokens + args.question_tokens) > 50_000_000:
            raise UsageError(f"--docs x (--tokens + --question-tokens) must be at most 50,000,000 tokens; got "
                             f"{args.docs * (args.tokens + args.question_tokens):,}.")
    except UsageError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{name}: error: cannot write {args.json}: {error.strerror or error}", file=sys.stderr)
        return 1
    try:
        result = run_block_lab(args.gpu, args.block_size, args.docs, args.tokens, args.question_tokens,
                               args.passes, args.seed, args.fixture)
    except (FixtureError, LabMismatchError) as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 1
    except ValueError as error:  # e.g. no fresh question can be drawn for these sizes
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2) + "\n"
    if args.json == "-":
        return _to_stdout(name, text)
    if args.json is not None:
        try:
            write_atomic(args.json, text)
        except OSError as error:
            print(f"{name}: error: cannot write {args.json}: {error.strerror or error}", file=sys.stderr)
            return 1
        print(f"{name}: wrote {args.json}", file=sys.stderr)
    return _to_stdout(name, format_table(result))


def _to_stdout(name: str, text: str) -> int:
    """Write ``text`` to stdout; 0, or 1 with one line when stdout is closed or fails, 141 for a
    reader gone away (as every command, :mod:`stackdist.errors`)."""
    try:
        if sys.stdout is None:  # the process started with stdout closed
            raise OSError(errno.EBADF, "stdout is closed")
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return 141
    except OSError as error:
        print(f"{name}: error: cannot write to stdout: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and 130, never a traceback
        print("blocklab.py: interrupted", file=sys.stderr)
        sys.exit(130)
