"""Decode reuse, exact from output token ids: the vLLM model against a direct simulation.

The reference is serving_reference.VllmReference (vLLM's block pool in plain Python) keyed by
the *content* of each block (the tuple of every token up to the block's end), with the real
answer tokens appended at every decode step, so a later prompt hits an answer block exactly when
it holds the same tokens there. Random seeded multi-turn token traces: the next prompt is the
previous prompt + its answer (sometimes edited: leading "thinking" tokens stripped, a token
changed) + new text; prompt lengths arbitrary; pools from tight to never evicting.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from serving_reference import B, VllmReference, ref_events

from stackdist.serving.decode_reuse import continuations, reuse_pages, reuse_report
from stackdist.serving.pages import engine_pages
from stackdist.serving.schedule import Schedule
from stackdist.serving.vllm import simulate_vllm
from stackdist.traces import read_dynamo, read_token_ids

DATA = Path(__file__).parent.parent / "data" / "engines" / "dynamo"


def _sessions(rng: random.Random, n_sessions: int, edit: float) -> list[tuple[list[int], list[int]]]:
    """(prompt, answer) per request, sessions interleaved round-robin (each turn after the last)."""
    system = [rng.randrange(1, 50) for _ in range(rng.randint(0, 40))]
    chains = []
    for _ in range(n_sessions):
        prompt = system + [rng.randrange(1, 50) for _ in range(rng.randint(1, 30))]
        turns = []
        for _ in range(rng.randint(1, 5)):
            answer = [rng.randrange(1, 50) for _ in range(rng.randint(1, 40))]
            turns.append((prompt, answer))
            kept = list(answer)
            if rng.random() < edit:  # thinking stripped, or one token rewritten
                kept = kept[rng.randint(1, len(kept)):] if rng.random() < 0.5 else kept[:-1] + [99]
            prompt = prompt + kept + [rng.randrange(1, 50) for _ in range(rng.randint(0, 20))]
        chains.append(turns)
    out = []
    for depth in range(max(len(c) for c in chains)):
        out.extend(c[depth] for c in chains if depth < len(c))
    return out


def _write(path: Path, requests: list[tuple[list[int], list[int]]]) -> None:
    with path.open("w") as fh:
        for i, (prompt, answer) in enumerate(requests):
            fh.write(json.dumps({"timestamp": float(i), "input_ids": prompt, "output_ids": answer}) + "\n")


def _reference(requests, pool, schedule: Schedule) -> tuple[list[int], int]:
    """vLLM's pool on content-keyed blocks; (hits, first failing request or -1)."""
    P = [len(p) for p, _ in requests]
    O = [len(a) for _, a in requests]
    if pool is None:
        pool = sum(-(-(p + o) // B) for p, o in zip(P, O)) + 2
    eng = VllmReference(pool)
    hits = [0] * len(P)
    keys: dict[int, list] = {}
    for _t, kind, r, k in ref_events(schedule.arrival_s, schedule.prefill_end_s, schedule.finish_s, O, True):
        seq = requests[r][0] + requests[r][1]
        if kind == 3:
            keys[r] = [tuple(seq[:(j + 1) * B]) for j in range(P[r] // B)]
            computed = eng.lookup(keys[r], P[r])
            hits[r] = B * len(computed)
            if not eng.allocate_slots(r, keys[r], P[r], P[r], computed):
                return [-1] * len(P), r
        elif kind == 1:
            n_tokens = P[r] + k
            while len(keys[r]) < n_tokens // B:
                keys[r].append(tuple(seq[:(len(keys[r]) + 1) * B]))
            if not eng.allocate_slots(r, keys[r], n_tokens, n_tokens):
                return [-1] * len(P), r
        elif kind == 0:
            eng.free_request(r)
    return hits, -1


def _closed_loop(requests) -> Schedule:
    """Each request after the previous one finished, with some overlap between sessions' turns."""
    n = len(requests)
    arrival = np.arange(n, dtype=np.float64) * 0.5
    return Schedule(arrival, arrival + 0.1, arrival + 0.1 + 0.01 * np.array([len(a) for _, a in requests]))


@pytest.mark.parametrize("seed", range(12))
def test_exact_reuse_equals_the_direct_simulation(seed, tmp_path):
    rng = random.Random(seed)
    requests = _sessions(rng, rng.randint(1, 4), edit=0.4)
    path = tmp_path / "t.jsonl"
    _write(path, requests)
    trace = read_token_ids(path, block_size=16, partial_last_block=True)
    pages = reuse_pages(trace, engine_pages(trace))
    top = sum(-(-(len(p) + len(a)) // B) for p, a in requests) + 2
    pools = sorted({max(2, top // d) for d in (1, 2, 3, 5, 8)}) + [None]
    for schedule in (Schedule.serial(len(requests)), _closed_loop(requests)):
        sched = schedule if not schedule.is_serial else Schedule(*(np.arange(len(requests), dtype=np.float64) + x for x in (0.0, 0.1, 0.9)))
        model = simulate_vllm(pages, pools, sched, decode=True, method="per-size", find_min_pool=False)
        for i, pool in enumerate(pools):
            hits, failed = _reference(requests, pool, sched)
            assert model.failed_request[i] == failed, (pool, failed)
            assert model.hit_tokens[i].tolist() == hits, pool


def test_the_answer_hits_only_up_to_an_edit():
    """Answer [a0..a39] reused with its first 20 tokens kept: the next turn hits through them."""
    prompt = list(range(1, 21))  # 20 tokens
    answer = list(range(100, 140))  # 40 tokens: the request writes 59, 3 full blocks
    edited = prompt + answer[:20] + [7] * 30
    verbatim = prompt + answer + [8] * 5
    for nxt, expect in ((edited, 32), (verbatim, 48)):  # blocks [0,16), [16,32) then [32,48) only if kept
        t = _trace([(prompt, answer), (nxt, [5])])
        hits = simulate_vllm(reuse_pages(t, engine_pages(t)), [None], "serial", decode=True).hit_tokens[0]
        assert hits.tolist() == [0, expect]


def _trace(requests):
    import tempfile

    path = Path(tempfile.mkdtemp()) / "t.jsonl"
    _write(path, requests)
    return read_token_ids(path, block_size=16, partial_last_block=True)


def test_report_says_exact_and_the_inference_would_overcount():
    prompt, answer = list(range(1, 21)), list(range(100, 140))
    t = _trace([(prompt, answer), (prompt + [9] * 45, [5])])  # long enough, but not the answer
    report = reuse_report(t, None)
    assert report["method"] == "exact (output token ids)" and report["requests_continued"] == 0
    assert report["known_failure_modes"] == []
    blind = reuse_report(type(t)(**{**vars(t), "answer_block_ids": None}), None)
    assert blind["method"].startswith("inferred") and blind["requests_continued"] == 1 and blind["known_failure_modes"]
    assert continuations(t, engine_pages(t)).tolist() == [-1, -1]


@pytest.mark.parametrize("name", ["agentic_tiny2", "agentic_tinythink2"])
def test_token_traces_equal_vllm_exactly(name):
    """The committed token-id twins of two Dynamo traces (vLLM served them): exact reuse from the
    output ids equals vLLM's cached_tokens on every request, edited answers included."""
    trace = read_token_ids(DATA / f"{name}.tokens.jsonl", block_size=16, partial_last_block=True)
    rows = [json.loads(line) for line in (DATA / f"{name}.tokens.jsonl").read_text().splitlines()]
    recorded = read_dynamo(DATA / f"{name}.jsonl")
    assert [len(r["input_ids"]) for r in rows] == recorded.input_length.tolist()
    workers = np.array([r["worker"] for r in rows])
    times = recorded.recorded_schedule_s
    predicted = np.zeros(len(rows), np.int64)
    for w in np.unique(workers):
        index = np.flatnonzero(workers == w)
        sub = trace.select(index)
        sched = Schedule(times[index, 0], times[index, 1], times[index, 2])
        predicted[index] = simulate_vllm(reuse_pages(sub, engine_pages(sub)), [None], sched, decode=True).hit_tokens[0]
    assert predicted.tolist() == [r["cached_tokens"] for r in rows]


def test_inference_sessions_when_they_mean_something():
    from stackdist.traces import RequestTrace

    blocks, outputs = [[1, 2], [1, 2, 3, 4]], [20, 5]
    same = RequestTrace.from_blocks(blocks, block_size=16, output_length=outputs)
    for sessions, expect in (([0, 0], [1, -1]), ([0, 1], [1, -1]), (None, [1, -1])):
        t = same if sessions is None else type(same)(**{**vars(same), "session_ids": np.array(sessions)})
        assert continuations(t, engine_pages(t)).tolist() == expect  # [0, 1]: unique ids say nothing
    three = RequestTrace.from_blocks(blocks + [[9]], block_size=16, output_length=outputs + [1])
    t = type(three)(**{**vars(three), "session_ids": np.array([0, 1, 1])})
    assert continuations(t, engine_pages(t)).tolist() == [-1, -1, -1]  # another session: missed


def test_report_counts_next_prompts_shorter_than_prompt_plus_answer():
    from stackdist.traces import RequestTrace

    # r0: 2 pages, 40-token answer; r1 extends r0 but by 16 tokens < 40: an edited answer (or no continuation)
    t = RequestTrace.from_blocks([[1, 2], [1, 2, 3], [7], [7, 8, 9, 10, 11]], block_size=16, output_length=[40, 1, 20, 1])
    report = reuse_report(t, None)
    assert report["requests_next_prompt_shorter_than_prompt_plus_answer"] == 1 and report["requests_continued"] == 1
    assert continuations(t, engine_pages(t)).tolist() == [-1, -1, 3, -1]


def test_a_session_that_shows_an_edited_answer_gets_no_inferred_reuse():
    from stackdist.traces import RequestTrace

    # session 0: r0 -> r1 verbatim-looking (long enough), r1 -> r2 shorter than r1 + answer (edited);
    # session 1: r3 -> r4 long enough
    blocks = [[1], [1, 2, 3, 4], [1, 2, 3, 4, 5], [7], [7, 8, 9]]
    t = RequestTrace.from_blocks(blocks, block_size=16, output_length=[30, 40, 1, 20, 1])
    t = type(t)(**{**vars(t), "session_ids": np.array([0, 0, 0, 1, 1])})
    pages = engine_pages(t)
    assert continuations(t, pages, trust_edited_sessions=True).tolist() == [1, -1, -1, 4, -1]
    assert continuations(t, pages).tolist() == [-1, -1, -1, 4, -1]
    report = reuse_report(t, None)
    assert report["requests_next_prompt_shorter_than_prompt_plus_answer"] == 1
    assert report["sessions_taken_as_editing_answers"] == 1 and report["requests_continued"] == 1
