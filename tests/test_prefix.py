"""Tests for stackdist.traces.blocks: chain_hashes, reblock, dense_ids."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stackdist.traces.blocks as prefix
from stackdist.errors import UsageError
from stackdist.traces import RequestTrace, read_mooncake
from stackdist.traces.blocks import ROOT_HASH, chain_hashes, dense_ids, reblock

TRACES = Path(__file__).parent.parent / "data" / "traces"
U64_MAX = 2**64 - 1


# --------------------------------------------------------------------------------------------
# chain_hashes
# --------------------------------------------------------------------------------------------


def reference_chain(tokens: list[int], block_size: int, partial: bool = False, parent: int = 0) -> list[int]:
    """The documented hash written out independently: blake2b-64 over parent || int64 tokens."""
    out = []
    n = len(tokens) // block_size + (1 if partial and len(tokens) % block_size else 0)
    for i in range(n):
        block = tokens[i * block_size : (i + 1) * block_size]
        data = parent.to_bytes(8, "little") + b"".join(t.to_bytes(8, "little", signed=True) for t in block)
        parent = int.from_bytes(hashlib.blake2b(data, digest_size=8, person=b"stackdist-chain").digest(), "little")
        out.append(parent)
    return out


def test_chain_hashes_match_the_documented_construction():
    tokens = [5, 0, 2**40, 7, 7, 1, 3]
    for block_size in (1, 2, 3, 7, 8):
        for partial in (False, True):
            got = chain_hashes(tokens, block_size, partial_last_block=partial)
            assert got.dtype == np.uint64
            assert [int(h) for h in got] == reference_chain(tokens, block_size, partial)
    assert chain_hashes([], 4).shape == (0,) and chain_hashes([1, 2, 3], 4).shape == (0,)
    assert chain_hashes([1, 2, 3], 4, partial_last_block=True).shape == (1,)
    assert ROOT_HASH == 0


def test_chain_hashes_are_the_same_in_another_process():
    code = "from stackdist.traces.blocks import chain_hashes; print([int(h) for h in chain_hashes(list(range(40)), 16, True)])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent, env={"PYTHONHASHSEED": "123"})
    assert json.loads(out.stdout) == [int(h) for h in chain_hashes(list(range(40)), 16, partial_last_block=True)]


def test_chain_hashes_continue_from_a_parent():
    a, b = list(range(8)), [9, 9, 9, 9, 1]
    whole = chain_hashes(a + b, 4, partial_last_block=True)
    head = chain_hashes(a, 4)
    tail = chain_hashes(b, 4, partial_last_block=True, parent=int(head[-1]))
    assert np.array_equal(whole, np.concatenate([head, tail]))


def test_chain_hashes_accept_numpy_input_and_reject_bad_arguments():
    tokens = np.array([1, 2, 3, 4], dtype=np.int32)
    assert np.array_equal(chain_hashes(tokens, 2), chain_hashes([1, 2, 3, 4], 2))
    for bad in (0, -1, 2.0, True):
        with pytest.raises(UsageError, match="block_size must be a positive integer"):
            chain_hashes([1, 2], bad)
    with pytest.raises(UsageError, match=r"parent must be a hash in 0..2\*\*64-1, got -1"):
        chain_hashes([1, 2], 1, parent=-1)
    with pytest.raises(UsageError, match="token_ids must be a 1-D sequence"):
        chain_hashes([[1, 2]], 1)


token_lists = st.lists(st.integers(0, 2), max_size=24)  # a tiny alphabet makes shared prefixes common


@settings(max_examples=150, deadline=None)  # with a 3-token alphabet most pairs share a prefix
@given(a=token_lists, b=token_lists, block_size=st.integers(1, 5), partial=st.booleans())
def test_shared_hashes_iff_shared_tokens(a, b, block_size, partial):
    """Block i hashes agree iff the sequences agree on every token up to the end of block i."""
    ha = chain_hashes(a, block_size, partial_last_block=partial)
    hb = chain_hashes(b, block_size, partial_last_block=partial)
    for i in range(min(len(ha), len(hb))):
        end = (i + 1) * block_size
        assert (ha[i] == hb[i]) == (a[:end] == b[:end])
    if not partial:  # the shared leading hashes are exactly the shared leading full blocks
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        shared = next((i for i, (x, y) in enumerate(zip(ha, hb)) if x != y), min(len(ha), len(hb)))
        assert shared == min(common // block_size, len(ha), len(hb))


@settings(max_examples=100, deadline=None)
@given(prefix_tokens=token_lists, change=st.integers(0, 23), block_size=st.integers(1, 5))
def test_a_change_alters_its_block_and_every_later_one(prefix_tokens, change, block_size):
    tokens = prefix_tokens + [0] * 24
    altered = list(tokens)
    altered[change] += 1
    ha, hb = chain_hashes(tokens, block_size), chain_hashes(altered, block_size)
    first_changed = change // block_size
    assert np.array_equal(ha[:first_changed], hb[:first_changed])
    assert np.all(ha[first_changed:] != hb[first_changed:])


# --------------------------------------------------------------------------------------------
# dense_ids
# --------------------------------------------------------------------------------------------


def test_dense_ids_preserve_equality_and_are_compact():
    for seed in range(20):  # one test item, 20 seeded cases
        rng = np.random.default_rng(seed)
        pools = [
            rng.integers(-5, 5, size=6),
            np.array([U64_MAX, 2**63, 0, 7, U64_MAX - 1, 1], dtype=np.uint64),
            np.array(["a", "b", "c", "", "ab", "ba"], dtype=object),
        ]
        ids = pools[seed % 3][rng.integers(0, 6, size=int(rng.integers(0, 40)))]
        dense, n = dense_ids(ids)
        assert dense.dtype == np.int64 and dense.shape == ids.shape
        values = ids.tolist()
        assert n == len(set(values))
        assert sorted(set(dense.tolist())) == list(range(n))
        for i in range(len(values)):
            for j in range(len(values)):
                assert (dense[i] == dense[j]) == (values[i] == values[j])


def test_dense_ids_hand_example_and_errors():
    dense, n = dense_ids([30, 10, 30, 20])
    assert dense.tolist() == [2, 0, 2, 1] and n == 3
    assert dense_ids(np.array(["b", "a", "b"], dtype=object))[0].tolist() == [1, 0, 1]
    assert dense_ids(np.array([True, False, True]))[0].tolist() == [1, 0, 1]
    with pytest.raises(UsageError, match="ids must be mutually comparable"):
        dense_ids(np.array([1, "a"], dtype=object))
    assert dense_ids(np.zeros(0, dtype=np.uint64))[1] == 0
    with pytest.raises(UsageError, match="ids must be 1-D"):
        dense_ids(np.zeros((2, 2)))


# --------------------------------------------------------------------------------------------
# reblock
# --------------------------------------------------------------------------------------------


def make_trace(requests: list[list[tuple[int, int]]], block_size: int, big: bool = False) -> RequestTrace:
    """A RequestTrace from per-request lists of (block id, tokens); input_length = token sum."""
    ids = [b for req in requests for b, _ in req]
    tokens = [t for req in requests for _, t in req]
    offsets = np.concatenate(([0], np.cumsum([len(req) for req in requests]))).astype(np.int64)
    inputs = [sum(t for _, t in req) for req in requests]
    n = len(requests)
    return RequestTrace(
        np.array(ids, dtype=np.uint64 if big else np.int64), offsets, np.array(tokens, dtype=np.int64),
        np.arange(n, dtype=float), np.array(inputs, dtype=np.int64), np.zeros(n, dtype=np.int64), block_size=block_size,
    )


def test_reblock_hand_example():
    # block size 4 -> pages of 2 (k = 2): request 0 = [10 (4 tokens), 11 (3)], request 1 = [10 (4), 12 (1)]
    trace = make_trace([[(10, 4), (11, 3)], [(10, 4), (12, 1)]], block_size=4)
    fine = reblock(trace, 2)
    assert fine.block_size == 2
    assert fine.block_ids.tolist() == [20, 21, 22, 23, 20, 21, 24]
    assert fine.block_tokens.tolist() == [2, 2, 2, 1, 2, 2, 1]
    assert fine.offsets.tolist() == [0, 4, 7]
    assert fine.input_length.tolist() == [7, 5] and fine.timestamps_s.tolist() == [0.0, 1.0]
    same = reblock(trace, 4)
    assert same.block_ids.tolist() == trace.block_ids.tolist() and same.block_tokens.tolist() == [4, 3, 4, 1]


def test_reblock_rejects_sizes_that_do_not_divide():
    trace = make_trace([[(1, 4)]], block_size=4)
    with pytest.raises(UsageError) as info:
        reblock(trace, 3)
    assert str(info.value) == "new_block_size must divide the trace's block_size 4, got 3"
    for bad in (0, -2, 2.0, True):
        with pytest.raises(UsageError, match="new_block_size must be a positive integer"):
            reblock(trace, bad)
    with pytest.raises(UsageError, match="must divide the trace's block_size 4, got 8"):
        reblock(trace, 8)


def random_prefix_trace(rng: np.random.Generator, block_size: int, big: bool) -> list[list[tuple[int, int]]]:
    """Requests drawn from a random trie of blocks: equal ids mean equal prefixes, as in Mooncake."""
    children: dict[tuple[int, int], int] = {}
    tokens_of: dict[int, int] = {}
    requests = []
    for _ in range(int(rng.integers(1, 9))):
        parent, blocks = -1, []
        for depth in range(int(rng.integers(1, 6))):
            last = depth == 4 or rng.random() < 0.3
            choice = int(rng.integers(0, 2))
            tokens = block_size if not last else int(rng.integers(1, block_size + 1))
            key = (parent, choice * 1000 + (tokens if last else 0))
            if key not in children:
                new = len(tokens_of)
                block_id = (U64_MAX - new) if big else new
                children[key] = block_id
                tokens_of[block_id] = tokens
            parent = children[key]
            blocks.append((parent, tokens_of[parent]))
            if last or tokens_of[parent] < block_size:
                break
        requests.append(blocks)
    return requests


def reference_pages(requests, k, page):
    """Plain-Python reblock: (coarse id, j) names and page tokens per request."""
    names, tokens = [], []
    for req in requests:
        n, t = [], []
        for block_id, block_tokens in req:
            for j in range(math.ceil(block_tokens / page)):
                n.append((block_id, j))
                t.append(min(page, block_tokens - j * page))
        names.append(n)
        tokens.append(t)
    return names, tokens


def leading_common(x, y) -> int:
    return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))


def test_reblock_matches_plain_reference_and_keeps_the_prefix_relation():
    for seed in range(40):  # one test item, 40 seeded cases
        rng = np.random.default_rng(seed)
        page = int(rng.choice([1, 2, 4]))
        block_size = page * int(rng.choice([1, 2, 4]))
        big = seed % 2 == 1
        requests = random_prefix_trace(rng, block_size, big)
        trace = make_trace(requests, block_size, big)
        fine = reblock(trace, page)
        fine._check()
        k = block_size // page
        names, tokens = reference_pages(requests, k, page)
        got = [[int(b) for b in fine.request_blocks(r)] for r in range(fine.n_requests)]
        assert [len(g) for g in got] == [len(n) for n in names]
        assert [fine.block_tokens[a:b].tolist() for a, b in zip(fine.offsets[:-1], fine.offsets[1:])] == tokens
        flat_got = [x for g in got for x in g]
        flat_names = [x for n in names for x in n]
        for i in range(len(flat_got)):  # equal page ids iff equal (coarse id, j)
            for j in range(len(flat_got)):
                assert (flat_got[i] == flat_got[j]) == (flat_names[i] == flat_names[j])
        if not big:  # the documented collision-free form
            assert flat_got == [b * k + j for b, j in flat_names]
            assert fine.block_ids.dtype == np.int64
        else:
            assert fine.block_ids.dtype == np.uint64
        for r in range(len(requests)):  # sharing c coarse blocks <=> sharing their pages
            for s in range(len(requests)):
                c = leading_common([b for b, _ in requests[r]], [b for b, _ in requests[s]])
                pages_in_c = sum(math.ceil(t / page) for _, t in requests[r][:c])
                assert leading_common(got[r], got[s]) == pages_in_c
        assert fine.input_length.tolist() == trace.input_length.tolist()


def test_reblock_falls_back_to_ranks_on_a_hash_collision(monkeypatch):
    monkeypatch.setattr(prefix, "_digest_u64", lambda data, person: 12345)  # every seed collides
    trace = make_trace([[(U64_MAX, 4), (U64_MAX - 1, 2)], [(U64_MAX - 5, 4)]], block_size=4, big=True)
    fine = reblock(trace, 2)
    # ranks of the sorted distinct ids: U64_MAX-5 -> 0, U64_MAX-1 -> 1, U64_MAX -> 2; id = rank * 2 + j
    assert fine.block_ids.tolist() == [4, 5, 2, 0, 1]


def test_reblock_negative_ids_use_the_hashed_form():
    trace = RequestTrace(np.array([-1, 5]), np.array([0, 1, 2]), np.array([2, 2]), np.zeros(2), np.array([2, 2]),
                         np.zeros(2), block_size=2)
    fine = reblock(trace, 1)
    assert fine.block_ids.dtype == np.uint64 and len(set(fine.block_ids.tolist())) == 4


def test_reblock_empty_trace():
    trace = make_trace([[]], block_size=4)
    fine = reblock(trace, 2)
    assert fine.n_blocks == 0 and fine.offsets.tolist() == [0, 0]


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


def test_reblock_real_trace_to_16_token_pages():
    path = TRACES / "mooncake_conversation_trace.jsonl"
    trace = read_mooncake(path)
    fine = reblock(trace, 16)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    expected_pages = sum(math.ceil(r["input_length"] / 16) for r in rows)  # 512 = 32 * 16
    assert fine.n_blocks == expected_pages
    assert fine.block_tokens.sum() == sum(r["input_length"] for r in rows)
    assert dense_ids(fine.block_ids)[1] == sum(
        math.ceil(t / 16) for t in dict(zip(trace.block_ids.tolist(), trace.block_tokens.tolist())).values()
    )
    # request 0's first page is page 0 of block 0; every request starts there
    assert np.all(fine.block_ids[fine.offsets[:-1]] == 0)
    assert np.array_equal(sorted_distinct(fine.block_ids // 32), sorted_distinct(trace.block_ids))


def test_reblock_on_two_threads_equals_one_pass(monkeypatch):
    # reblock writes a large trace's pages in two halves at once; with the threshold at one page
    # every trace takes that path, and must equal the one-pass kernel's pages exactly.
    from stackdist.engine import kernels
    from stackdist.traces import RequestTrace, blocks

    monkeypatch.setattr(blocks, "PARALLEL_PAGES", 1)
    for seed in range(6):  # one test item, 6 seeded cases
        rng = np.random.default_rng(seed)
        rows = [rng.integers(0, 50, int(rng.integers(0, 7))).tolist() for _ in range(int(rng.integers(1, 30)))]
        last = [int(rng.integers(1, 33)) for _ in rows]
        trace = RequestTrace.from_blocks(rows, block_size=32, last_tokens=last)
        got = blocks.reblock(trace, 8)
        pages = (trace.block_tokens + 7) // 8
        ids, tokens = np.empty(int(pages.sum()), np.int64), np.empty(int(pages.sum()), np.int64)
        kernels.split_runs(trace.block_ids.astype(np.int64), trace.block_tokens, 8, 4, ids, tokens)
        assert got.block_ids.tolist() == ids.tolist() and got.block_tokens.tolist() == tokens.tolist(), seed
