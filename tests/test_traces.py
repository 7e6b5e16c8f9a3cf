"""Tests for stackdist.traces: access-trace and request-trace readers, RequestTrace."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from stackdist.errors import TraceFormatError, UsageError
from stackdist.traces import (
    AccessTrace,
    RequestTrace,
    read_access_trace,
    read_mooncake,
    read_qwen,
    read_requests,
    read_token_ids,
)
from stackdist.traces.blocks import chain_hashes
from stackdist.traces.formats import ACCESSES, REQUESTS, format_names

DATA = Path(__file__).parent / "data"
TRACES = Path(__file__).parent.parent / "data" / "traces"
U64_MAX = 2**64 - 1


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(TraceFormatError) as info:
        call(*args, **kwargs)
    return str(info.value)


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


def test_trace_format_error_fields_and_pickle():
    err = TraceFormatError("a/b.jsonl", 7, "bad thing")
    assert (err.path, err.line, err.message) == ("a/b.jsonl", 7, "bad thing")
    assert str(err) == "a/b.jsonl:7: bad thing"
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.line == 7
    assert isinstance(err, ValueError) and issubclass(UsageError, ValueError)


# --------------------------------------------------------------------------------------------
# access traces
# --------------------------------------------------------------------------------------------


def test_csv_with_header_comments_blank_lines_and_sizes():
    trace = read_access_trace(DATA / "access_header.csv")
    assert trace.keys.dtype == object
    assert trace.keys.tolist() == ["a", "b", "a", "c"]
    assert trace.sizes is not None and trace.sizes.dtype == np.int64
    assert trace.sizes.tolist() == [3, 10, 3, 1]
    assert trace.source == str(DATA / "access_header.csv") and len(trace) == 4


def test_txt_sniffs_tab_and_integer_keys():
    trace = read_access_trace(DATA / "access_tabs.txt")
    assert trace.keys.dtype == np.int64 and trace.keys.tolist() == [5, 7, 5]
    assert trace.sizes.tolist() == [2, 1, 2]


def test_huge_unsigned_keys_are_exact():
    trace = read_access_trace(DATA / "access_huge.txt")
    assert trace.keys.dtype == np.uint64
    assert [int(k) for k in trace.keys] == [U64_MAX, 2**63, 0, U64_MAX]
    assert trace.sizes is None


def test_jsonl_string_keys():
    trace = read_access_trace(DATA / "access_strings.jsonl")
    assert trace.keys.tolist() == ["alpha", "beta", "alpha"] and trace.sizes.tolist() == [4, 1, 4]


def test_jsonl_integer_keys_huge_and_without_sizes(tmp_path):
    path = write(tmp_path, "k.ndjson", '{"key": 18446744073709551615}\n{"key": 9223372036854775808}\n{"key": 3}\n')
    trace = read_access_trace(path)
    assert trace.keys.dtype == np.uint64 and [int(k) for k in trace.keys] == [U64_MAX, 2**63, 3]
    assert trace.sizes is None


def test_integer_keys_too_wide_for_one_dtype_become_strings(tmp_path):
    path = write(tmp_path, "k.csv", "-1\n18446744073709551615\n")
    assert read_access_trace(path).keys.tolist() == ["-1", "18446744073709551615"]
    path = write(tmp_path, "k.jsonl", '{"key": -1}\n{"key": 18446744073709551615}\n')
    assert read_access_trace(path).keys.tolist() == ["-1", "18446744073709551615"]


def test_integer_literals_compare_as_numbers_but_mixed_keys_are_strings(tmp_path):
    assert read_access_trace(write(tmp_path, "a.csv", "007\n7\n-3\n+4\n")).keys.tolist() == [7, 7, -3, 4]
    assert read_access_trace(write(tmp_path, "b.csv", "007\nx\n")).keys.tolist() == ["007", "x"]
    long_key = "9" * 5000  # beyond int()'s default digit limit
    assert read_access_trace(write(tmp_path, "d.csv", f"{long_key}\n1\n")).keys.tolist() == [long_key, "1"]
    padded = read_access_trace(write(tmp_path, "e.csv", "0000000000000000000000000042\n42\n"))
    assert padded.keys.tolist() == [42, 42]
    # Python's int() accepts "1_000"; a key reader must not.
    assert read_access_trace(write(tmp_path, "c.csv", "1_000\n5\n")).keys.tolist() == ["1_000", "5"]


def test_format_argument_overrides_extension_and_empty_file(tmp_path):
    path = write(tmp_path, "trace.dat", "1\t4\n2\t5\n")
    assert read_access_trace(path, format="tsv").sizes.tolist() == [4, 5]
    empty = read_access_trace(write(tmp_path, "e.csv", "# nothing\n\n"))
    assert empty.keys.dtype == np.int64 and len(empty) == 0 and empty.sizes is None
    header_only = read_access_trace(write(tmp_path, "h.csv", "KEY,size\n"))
    assert len(header_only) == 0 and header_only.sizes is not None


@pytest.mark.parametrize(
    "name, text, line, message",
    [
        ("t.csv", "a,1\nb\n", 2, "has 1 column(s) but line 1 has 2; the size column must be present on every line or on none"),
        ("t.csv", "key,size\nb\n", 2, "has 1 column(s) but line 1 has 2; the size column must be present on every line or on none"),
        ("t.csv", "a\n\n# c\nb,2\n", 4, "has 2 column(s) but line 1 has 1; the size column must be present on every line or on none"),
        ("t.csv", "a,0\n", 1, "size must be a positive integer, got '0'"),
        ("t.csv", "a,1\nb,1.5\n", 2, "size must be a positive integer, got '1.5'"),
        ("t.csv", "a,-1\n", 1, "size must be a positive integer, got '-1'"),
        ("t.csv", "a,9223372036854775808\n", 1, "size must be a positive integer, got '9223372036854775808'"),
        ("t.csv", "a," + "9" * 5000 + "\n", 1, "size must be a positive integer, got '" + "9" * 36 + "..."),
        ("t.csv", "a,1,2\n", 1, "expected 1 or 2 columns (key[,size]), got 3"),
        ("t.csv", "a,1\n,3\n", 2, "missing key (the first column is empty)"),
        ("t.tsv", "a\t\n", 1, "size must be a positive integer, got ''"),
        ("t.jsonl", '{"key": 1}\n{"key": 2\n', 2, "not valid JSON: Expecting ',' delimiter (column 10)"),
        ("t.jsonl", "[1, 2]\n", 1, "expected a JSON object, got [1, 2]"),
        ("t.jsonl", '{"size": 2}\n', 1, "missing field 'key'"),
        ("t.jsonl", '{"key": 1.5}\n', 1, "'key' must be an integer or a string, got 1.5"),
        ("t.jsonl", '{"key": true}\n', 1, "'key' must be an integer or a string, got true"),
        ("t.jsonl", '{"key": 1, "size": 2.0}\n', 1, "'size' must be a positive integer, got 2.0"),
        ("t.jsonl", '{"key": 1, "size": 0}\n', 1, "'size' must be a positive integer, got 0"),
        ("t.jsonl", '{"key": 1, "size": true}\n', 1, "'size' must be a positive integer, got true"),
        ("t.jsonl", '{"key": 1}\n\n{"key": "x"}\n', 3, "key is a string but line 1's key is an integer; keys must be all integers or all strings"),
        ("t.jsonl", '{"key": 1, "size": 1}\n{"key": 2}\n', 2, "lacks 'size' but line 1 has it; the size field must be present on every line or on none"),
        ("t.jsonl", '{"key": 1}\n{"key": 2, "size": 1}\n', 2, "has 'size' but line 1 lacks it; the size field must be present on every line or on none"),
    ],
)
def test_access_trace_malformed_lines_name_file_and_line(tmp_path, name, text, line, message):
    path = write(tmp_path, name, text)
    assert error_of(read_access_trace, path) == f"{path}:{line}: {message}"


def test_access_trace_invalid_utf8_names_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,1\n\xff\xfe,2\n")
    assert error_of(read_access_trace, path) == f"{path}:2: not valid UTF-8 text"


def test_missing_file_and_bad_format(tmp_path):
    missing = tmp_path / "nope.csv"
    assert error_of(read_access_trace, missing) == f"{missing}: no such file"
    assert error_of(read_access_trace, tmp_path / "nope.npy") == f"{tmp_path / 'nope.npy'}: no such file"
    with pytest.raises(UsageError, match=rf"unknown format 'parquet'; one of {', '.join(format_names(ACCESSES))}$"):
        read_access_trace(missing, format="parquet")
    with pytest.raises(UsageError, match=r"cannot tell the format .* from its extension '.bin'"):
        read_access_trace(tmp_path / "x.bin")


def test_npy_one_two_dimensional_and_structured(tmp_path):
    np.save(tmp_path / "a.npy", np.array([3, 1, 3], dtype=np.int32))
    trace = read_access_trace(tmp_path / "a.npy")
    assert trace.keys.dtype == np.int64 and trace.keys.tolist() == [3, 1, 3] and trace.sizes is None

    np.save(tmp_path / "b.npy", np.array([[3, 5], [1, 2]], dtype=np.int64))
    trace = read_access_trace(tmp_path / "b.npy")
    assert trace.keys.tolist() == [3, 1] and trace.sizes.tolist() == [5, 2]

    rows = np.array([(U64_MAX, 4), (2, 1)], dtype=[("key", "<u8"), ("size", "<u4")])
    np.save(tmp_path / "c.npy", rows)
    trace = read_access_trace(tmp_path / "c.npy")
    assert trace.keys.dtype == np.uint64 and [int(k) for k in trace.keys] == [U64_MAX, 2]
    assert trace.sizes.dtype == np.int64 and trace.sizes.tolist() == [4, 1]

    np.save(tmp_path / "d.npy", np.array([5, 6], dtype=np.uint64))
    assert read_access_trace(tmp_path / "d.npy").keys.dtype == np.int64

    np.save(tmp_path / "e.npy", np.array(["x", "y"]))
    assert read_access_trace(tmp_path / "e.npy").keys.tolist() == ["x", "y"]


@pytest.mark.parametrize(
    "array, message",
    [
        (np.array([1.0, 2.0]), "keys must be integers or strings, got dtype float64"),
        (np.zeros((2, 3), dtype=np.int64), "expected a 1-D integer array of keys, an (n, 2) integer array of key,size rows, or a structured array with fields 'key' and 'size'; got shape (2, 3) dtype int64"),
        (np.array([[1, 2], [3, 0]]), "sizes must be positive integers; row 1 (0-based) has 0"),
        (np.array([[1, 2], [3, 2**63]], dtype=np.uint64), "sizes must be positive integers; row 1 (0-based) has 9223372036854775808"),
        (np.array([[1, 2.5]]), "keys must be integers or strings, got dtype float64"),
        (np.array([(1, 2.5)], dtype=[("key", "<i8"), ("size", "<f8")]), "sizes must be integers, got dtype float64"),
    ],
)
def test_npy_rejects_bad_arrays(tmp_path, array, message):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    assert error_of(read_access_trace, path) == f"{path}: {message}"


def test_npy_refuses_pickles_and_garbage(tmp_path):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([1, "a", None], dtype=object), allow_pickle=True)
    assert error_of(read_access_trace, path).startswith(f"{path}: cannot load the .npy array:")
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an npy file at all")
    assert error_of(read_access_trace, junk).startswith(f"{junk}: ")


def test_access_trace_check_catches_bad_arrays():
    with pytest.raises(ValueError, match="sizes must all be >= 1"):
        AccessTrace(np.array([1, 2]), np.array([1, 0]), "x")._check()
    with pytest.raises(ValueError, match="one entry per key"):
        AccessTrace(np.array([1, 2]), np.array([1]), "x")._check()


# --------------------------------------------------------------------------------------------
# Mooncake
# --------------------------------------------------------------------------------------------


def test_mooncake_small_file_hand_checked():
    trace = read_mooncake(DATA / "mooncake_small.jsonl")
    assert trace.block_ids.dtype == np.uint64
    assert [int(b) for b in trace.block_ids] == [0, 1, 0, 1, 2, U64_MAX, 2**63, 5]
    assert trace.offsets.tolist() == [0, 2, 5, 6, 8]
    # 1024 = 2 full; 1100 = 2 full + 76; 1 = one 1-token block; 513 = 512 + 1
    assert trace.block_tokens.tolist() == [512, 512, 512, 512, 76, 1, 512, 1]
    assert trace.timestamps_s.tolist() == [0.0, 1.5, 3.0, 3.0]
    assert trace.input_length.tolist() == [1024, 1100, 1, 513]
    assert trace.output_length.tolist() == [10, 3, 0, 0]  # absent output_length reads as 0
    assert (trace.block_size, trace.skipped, trace.session_ids) == (512, 0, None)
    assert trace.n_requests == 4 and trace.n_blocks == 8
    assert [int(b) for b in trace.request_blocks(1)] == [0, 1, 2]
    assert [int(b) for b in trace.request_blocks(-1)] == [2**63, 5]


def test_mooncake_small_ids_give_int64_and_block_size_parameter(tmp_path):
    path = write(tmp_path, "m.jsonl", '{"timestamp": 5, "input_length": 9, "output_length": 1, "hash_ids": [4, 9, 9223372036854775807]}\n')
    trace = read_mooncake(path, block_size=4)
    assert trace.block_ids.dtype == np.int64
    assert trace.block_ids.tolist() == [4, 9, 2**63 - 1]
    assert trace.block_tokens.tolist() == [4, 4, 1] and trace.timestamps_s.tolist() == [0.005]


def test_mooncake_empty_prompt_and_empty_file(tmp_path):
    trace = read_mooncake(write(tmp_path, "z.jsonl", '{"timestamp": 0, "input_length": 0, "hash_ids": []}\n'))
    assert trace.n_requests == 1 and trace.n_blocks == 0 and trace.offsets.tolist() == [0, 0]
    empty = read_mooncake(write(tmp_path, "e.jsonl", "\n\n"))
    assert empty.n_requests == 0 and empty.offsets.tolist() == [0]


GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}'


@pytest.mark.parametrize(
    "bad, message",
    [
        ("not json", "not valid JSON: Expecting value (column 1)"),
        ("[1]", "expected a JSON object, got [1]"),
        ('"text"', 'expected a JSON object, got "text"'),
        ('{"input_length": 1, "hash_ids": [1]}', "missing field 'timestamp'"),
        ('{"timestamp": 0, "hash_ids": [1]}', "missing field 'input_length'"),
        ('{"timestamp": 0, "input_length": 1}', "missing field 'hash_ids'"),
        ('{"timestamp": "x", "input_length": 1, "hash_ids": [1]}', "'timestamp' must be a non-negative number, got \"x\""),
        ('{"timestamp": -1, "input_length": 1, "hash_ids": [1]}', "'timestamp' must be a non-negative number, got -1"),
        ('{"timestamp": NaN, "input_length": 1, "hash_ids": [1]}', "'timestamp' must be a non-negative number, got NaN"),
        ('{"timestamp": true, "input_length": 1, "hash_ids": [1]}', "'timestamp' must be a non-negative number, got true"),
        ('{"timestamp": 1' + '0' * 400 + ', "input_length": 1, "hash_ids": [1]}', "'timestamp' must be a non-negative number, got 1" + "0" * 36 + "..."),
        ('{"timestamp": 0, "input_length": 12.0, "hash_ids": [1]}', "'input_length' must be a non-negative integer, got 12.0"),
        ('{"timestamp": 0, "input_length": true, "hash_ids": [1]}', "'input_length' must be a non-negative integer, got true"),
        ('{"timestamp": 0, "input_length": -5, "hash_ids": []}', "'input_length' must be a non-negative integer, got -5"),
        ('{"timestamp": 0, "input_length": 1, "output_length": -1, "hash_ids": [1]}', "'output_length' must be a non-negative integer, got -1"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 2.5, "hash_ids": [1]}', "'output_length' must be a non-negative integer, got 2.5"),
        ('{"timestamp": 0, "input_length": 1, "hash_ids": "abc"}', "'hash_ids' must be a list of non-negative integers, got \"abc\""),
        ('{"timestamp": 0, "input_length": 1000, "hash_ids": [1]}', "hash_ids has 1 entries but input_length 1000 needs ceil(1000/512) = 2 blocks; --block-size 1024 fits this line"),
        ('{"timestamp": 0, "input_length": 512, "hash_ids": [1, 2]}', "hash_ids has 2 entries but input_length 512 needs ceil(512/512) = 1 blocks; --block-size 256 fits this line"),
        ('{"timestamp": 0, "input_length": 600, "hash_ids": [1, 1.0]}', "hash_ids[1] must be an integer in 0..2**64-1, got 1.0"),
        ('{"timestamp": 0, "input_length": 10, "hash_ids": [true]}', "hash_ids[0] must be an integer in 0..2**64-1, got true"),
        ('{"timestamp": 0, "input_length": 10, "hash_ids": ["7"]}', "hash_ids[0] must be an integer in 0..2**64-1, got \"7\""),
        ('{"timestamp": 0, "input_length": 600, "hash_ids": [3, -1]}', "hash_ids[1] must be an integer in 0..2**64-1, got -1"),
        ('{"timestamp": 0, "input_length": 10, "hash_ids": [18446744073709551616]}', "hash_ids[0] must be an integer in 0..2**64-1, got 18446744073709551616"),
    ],
)
def test_mooncake_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = write(tmp_path, "m.jsonl", f"{GOOD}\n\n{bad}\n{GOOD}\n")
    assert error_of(read_mooncake, path) == f"{path}:3: {message}"
    trace = read_mooncake(path, skip_bad=True)
    assert trace.n_requests == 2 and trace.skipped == 1


def test_mooncake_bad_fixture_first_error_and_skip_counts():
    path = DATA / "mooncake_bad.jsonl"
    message = error_of(read_mooncake, path)
    assert message.startswith(f"{path}:2: not valid JSON:")
    trace = read_mooncake(path, skip_bad=True)
    # lines 2 (truncated), 4 (a list), 6 (2 ids for 1025 tokens), 7 (negative id) are skipped
    assert trace.skipped == 4 and trace.n_requests == 3
    assert trace.timestamps_s.tolist() == [0.0, 0.02, 0.05]
    assert trace.block_ids.tolist() == [0, 1, 0, 7]


def test_mooncake_bad_block_size_is_usage_error():
    for bad in (0, -512, 1.5, True, "512"):
        with pytest.raises(UsageError, match="block_size must be a positive integer"):
            read_mooncake(DATA / "mooncake_small.jsonl", block_size=bad)


def test_invalid_utf8_line_is_reported(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(GOOD.encode() + b"\n{\"timestamp\": \xff}\n")
    assert error_of(read_mooncake, path).startswith(f"{path}:2: not valid JSON:")


# --------------------------------------------------------------------------------------------
# the real Mooncake traces (data/traces/README.md)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, requests, distinct, accesses",
    [("conversation", 12_031, 182_790, 288_500), ("synthetic", 3_993, 43_924, 121_877)],
)
def test_real_mooncake_traces_match_readme_totals(name, requests, distinct, accesses):
    path = TRACES / f"mooncake_{name}_trace.jsonl"
    trace = read_mooncake(path)
    assert trace.n_requests == requests
    assert trace.n_blocks == accesses
    assert np.unique(trace.block_ids).shape[0] == distinct
    assert trace.block_ids.dtype == np.int64 and trace.skipped == 0
    # independent re-read with plain json: ceil rule, ids, token totals
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 512) for r in rows)
    assert trace.block_ids.tolist() == [h for r in rows for h in r["hash_ids"]]
    assert trace.input_length.tolist() == [r["input_length"] for r in rows]
    assert trace.output_length.tolist() == [r["output_length"] for r in rows]
    assert np.array_equal(trace.timestamps_s, np.array([r["timestamp"] for r in rows]) / 1000.0)
    per_request = np.add.reduceat(trace.block_tokens, trace.offsets[:-1])
    assert per_request.tolist() == trace.input_length.tolist()
    if name == "conversation":  # README: every request starts with block 0 (the shared system prompt)
        assert np.all(trace.block_ids[trace.offsets[:-1]] == 0)


# --------------------------------------------------------------------------------------------
# Qwen-Bailian
# --------------------------------------------------------------------------------------------


def test_qwen_small_file_hand_checked():
    trace = read_qwen(DATA / "qwen_small.jsonl")
    assert trace.block_size == 16
    assert trace.block_ids.tolist() == [1, 2, 3, 1, 1, 2, 4, 5, 6, 1, 2, 7, 8, 9, 10]
    assert trace.offsets.tolist() == [0, 3, 4, 9, 12, 14, 15]
    # 40 = 16+16+8; 16; 70 = 4*16+6; 33 = 16+16+1; 17 = 16+1; 1
    assert trace.block_tokens.tolist() == [16, 16, 8, 16, 16, 16, 16, 16, 6, 16, 16, 1, 16, 1, 1]
    assert trace.timestamps_s.tolist() == [0.5, 1.25, 61.114, 90.0, 95.0, 96.0]
    assert trace.output_length.tolist() == [12, 5, 132, 7, 1, 1]
    assert trace.request_ids.tolist() == [159, 160, 161, 162, 170, 171]
    # conversations: 161 and 162 continue 159; 170's parent 55 is not in the file; 171 has no parent field
    assert trace.session_ids.tolist() == [159, 160, 159, 159, 55, 171]


def test_qwen_sessions_follow_parents_listed_later_and_survive_cycles(tmp_path):
    lines = [
        {"chat_id": 5, "parent_chat_id": 4, "timestamp": 1.0, "input_length": 1, "output_length": 1, "hash_ids": [1]},
        {"chat_id": 4, "parent_chat_id": None, "timestamp": 0.0, "input_length": 1, "output_length": 1, "hash_ids": [1]},
        {"chat_id": 8, "parent_chat_id": 9, "timestamp": 2.0, "input_length": 1, "output_length": 1, "hash_ids": [2]},
        {"chat_id": 9, "parent_chat_id": 8, "timestamp": 3.0, "input_length": 1, "output_length": 1, "hash_ids": [3]},
    ]
    path = write(tmp_path, "q.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    trace = read_qwen(path)
    assert trace.session_ids.tolist()[:2] == [4, 4]
    assert trace.session_ids[2] == trace.session_ids[3]  # a cycle still ends in one conversation


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"timestamp": 0.5, "input_length": 1, "hash_ids": [1]}', "missing field 'chat_id'"),
        ('{"chat_id": "a", "timestamp": 0.5, "input_length": 1, "hash_ids": [1]}', "'chat_id' must be an integer, got \"a\""),
        ('{"chat_id": 1, "parent_chat_id": 1.5, "timestamp": 0.5, "input_length": 1, "hash_ids": [1]}', "'parent_chat_id' must be an integer (-1 for a first turn), got 1.5"),
        ('{"chat_id": 1, "timestamp": 0.5, "input_length": 17, "hash_ids": [1]}', "hash_ids has 1 entries but input_length 17 needs ceil(17/16) = 2 blocks; --block-size 32 fits this line"),
    ],
)
def test_qwen_malformed_lines(tmp_path, bad, message):
    good = '{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 16, "output_length": 1, "hash_ids": [0]}'
    path = write(tmp_path, "q.jsonl", f"{good}\n{bad}\n")
    assert error_of(read_qwen, path) == f"{path}:2: {message}"
    skipped = read_qwen(path, skip_bad=True)
    assert skipped.skipped == 1 and skipped.request_ids.tolist() == [0] and skipped.session_ids.tolist() == [0]


# --------------------------------------------------------------------------------------------
# token-id files
# --------------------------------------------------------------------------------------------


def test_token_ids_full_blocks_only():
    trace = read_token_ids(DATA / "tokens_small.jsonl", block_size=4)
    assert trace.block_ids.dtype == np.uint64
    assert trace.offsets.tolist() == [0, 1, 3, 4, 4]
    assert trace.block_tokens.tolist() == [4, 4, 4, 4]
    assert trace.input_length.tolist() == [6, 9, 4, 0]
    assert trace.output_length.tolist() == [0, 3, 0, 0]
    assert trace.timestamps_s.tolist() == [0.0, 0.0, 0.0, 0.0]
    ids = trace.block_ids
    assert ids[0] == ids[1]  # [1,2,3,4] heads both
    assert ids[3] != ids[0]  # [1,2,3,5]
    assert ids[2] != ids[0] and ids[2] != ids[3]
    assert np.array_equal(ids[1:3], chain_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4))


def test_token_ids_with_partial_last_block():
    trace = read_token_ids(DATA / "tokens_small.jsonl", block_size=4, partial_last_block=True)
    assert trace.offsets.tolist() == [0, 2, 5, 6, 6]
    assert trace.block_tokens.tolist() == [4, 2, 4, 4, 1, 4]
    ids = trace.block_ids
    assert ids[0] == ids[2] and ids[1] != ids[3]  # [5,6] tail differs from the full [5,6,7,8]
    per_request = [int(trace.block_tokens[a:b].sum()) for a, b in zip(trace.offsets[:-1], trace.offsets[1:])]
    assert per_request == trace.input_length.tolist()


def test_token_ids_timestamps(tmp_path):
    path = write(tmp_path, "t.jsonl", '{"input_ids": [1, 2], "timestamp": 0.5}\n{"token_ids": [3], "timestamp": 2}\n')
    assert read_token_ids(path, block_size=1).timestamps_s.tolist() == [0.5, 2.0]


@pytest.mark.parametrize(
    "bad, message",
    [
        ("[1, -2]", "token id 1 must be a non-negative integer, got -2"),
        ("[1, 2.5]", "token id 1 must be a non-negative integer, got 2.5"),
        ('["a"]', "token id 0 must be a non-negative integer, got \"a\""),
        ("[9223372036854775808]", "token id 0 must be a non-negative integer, got 9223372036854775808"),
        ('{"ids": [1]}', "missing field 'input_ids' (or 'token_ids')"),
        ('{"input_ids": "1 2"}', "'input_ids' must be a list of token ids, got \"1 2\""),
        ("7", "expected a JSON list of token ids or an object, got 7"),
        ('{"input_ids": [1], "timestamp": 1.0}', "has 'timestamp' but line 1 lacks it; timestamps must be on every line or on none"),
        ('{"input_ids": [1], "output_length": -1}', "'output_length' must be a non-negative integer, got -1"),
        ("[1, 2", "not valid JSON: Expecting ',' delimiter (column 6)"),
    ],
)
def test_token_ids_malformed_lines(tmp_path, bad, message):
    path = write(tmp_path, "t.jsonl", f"[1, 2, 3]\n{bad}\n")
    assert error_of(read_token_ids, path, block_size=2) == f"{path}:2: {message}"
    skipped = read_token_ids(path, block_size=2, skip_bad=True)
    assert skipped.skipped == 1 and skipped.n_requests == 1


# --------------------------------------------------------------------------------------------
# read_requests
# --------------------------------------------------------------------------------------------


def test_read_requests_dispatch_and_default_block_sizes():
    assert read_requests(DATA / "mooncake_small.jsonl").block_size == 512
    assert read_requests(DATA / "qwen_small.jsonl", format="qwen").block_size == 16
    tokens = read_requests(DATA / "tokens_small.jsonl", format="tokens", block_size=4, partial_last_block=True)
    assert tokens.block_size == 4 and tokens.n_blocks == 6
    assert read_requests(DATA / "tokens_small.jsonl", format="tokens").block_size == 16
    assert read_requests(DATA / "mooncake_bad.jsonl", skip_bad=True).skipped == 4


def test_read_requests_rejects_unknown_format_and_block_size():
    with pytest.raises(UsageError) as info:
        read_requests(DATA / "mooncake_small.jsonl", format="sharegpt")
    assert str(info.value) == f"unknown format 'sharegpt'; one of {', '.join(format_names(REQUESTS))}"
    with pytest.raises(UsageError, match=r"block_size must be a positive integer \(tokens per KV block\), got 0"):
        read_requests(DATA / "mooncake_small.jsonl", block_size=0)


def test_request_readers_report_missing_file(tmp_path):
    for reader in (read_mooncake, read_qwen, read_token_ids):
        assert error_of(reader, tmp_path / "gone.jsonl") == f"{tmp_path / 'gone.jsonl'}: no such file"
    assert error_of(read_mooncake, tmp_path) == f"{tmp_path}: is a directory, not a trace file"


# --------------------------------------------------------------------------------------------
# RequestTrace: select and _check
# --------------------------------------------------------------------------------------------


def random_trace(rng: np.random.Generator, n_requests: int, block_size: int = 4, big_ids: bool = False) -> RequestTrace:
    """A random valid RequestTrace: random block counts, partial tails, ids from a small pool."""
    lengths = rng.integers(0, 5, size=n_requests)
    inputs = np.array([0 if n == 0 else (n - 1) * block_size + int(rng.integers(1, block_size + 1)) for n in lengths])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    pool = np.array([U64_MAX - i for i in range(6)], dtype=np.uint64) if big_ids else np.arange(6, dtype=np.int64)
    ids = pool[rng.integers(0, 6, size=int(offsets[-1]))]
    tokens = np.full(int(offsets[-1]), block_size)
    for r, n in enumerate(lengths):
        if n:
            tokens[offsets[r + 1] - 1] = inputs[r] - (n - 1) * block_size
    return RequestTrace(
        ids, offsets, tokens, np.sort(rng.random(n_requests)), inputs, rng.integers(0, 9, n_requests),
        block_size=block_size, source="random", session_ids=rng.integers(0, 3, n_requests), skipped=2,
    )


def reference_select(trace: RequestTrace, index: list[int]) -> list[tuple]:
    """Per-request tuples of the chosen requests, by plain Python indexing."""
    out = []
    for r in index:
        a, b = int(trace.offsets[r]), int(trace.offsets[r + 1])
        out.append((
            [int(x) for x in trace.block_ids[a:b]], trace.block_tokens[a:b].tolist(), float(trace.timestamps_s[r]),
            int(trace.input_length[r]), int(trace.output_length[r]), int(trace.session_ids[r]),
        ))
    return out


def as_tuples(trace: RequestTrace) -> list[tuple]:
    return reference_select(trace, list(range(trace.n_requests)))


@pytest.mark.parametrize("seed", range(30))
def test_select_matches_plain_indexing(seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, int(rng.integers(0, 12)), big_ids=seed % 2 == 1)
    n = trace.n_requests
    mask = rng.random(n) < 0.5
    order = rng.integers(0, n, size=int(rng.integers(0, 6))) if n else np.zeros(0, dtype=np.int64)
    start, stop = sorted(rng.integers(0, n + 1, size=2).tolist())
    cases = [
        (slice(start, stop), list(range(n))[start:stop]),
        (slice(None, None, -2), list(range(n))[::-2]),
        (mask, np.flatnonzero(mask).tolist()),
        (order, order.tolist()),
        (list(mask), np.flatnonzero(mask).tolist()),
    ]
    for which, index in cases:
        sub = trace.select(which)
        assert as_tuples(sub) == reference_select(trace, index)
        assert sub.block_ids.dtype == trace.block_ids.dtype and sub.skipped == 2 and sub.block_size == 4
        sub._check()


def test_select_negative_indices_and_bad_arguments():
    trace = read_mooncake(DATA / "mooncake_small.jsonl")
    assert trace.select([-1]).input_length.tolist() == [513]
    with pytest.raises(UsageError, match="a boolean request mask must have length n_requests = 4"):
        trace.select(np.array([True, False]))
    with pytest.raises(UsageError, match=r"request indices must lie in -4..3"):
        trace.select([4])
    with pytest.raises(UsageError, match="select\\(\\) takes a slice"):
        trace.select(np.array([0.5]))
    with pytest.raises(IndexError, match="request index 4 is out of range for 4 requests"):
        trace.request_blocks(4)


def valid_fields() -> dict:
    return {
        "block_ids": np.array([0, 1, 0]), "offsets": np.array([0, 2, 3]), "block_tokens": np.array([4, 3, 2]),
        "timestamps_s": np.array([0.0, 1.0]), "input_length": np.array([7, 2]), "output_length": np.array([0, 0]), "block_size": 4,
    }


@pytest.mark.parametrize(
    "change, message",
    [
        ({"offsets": np.array([1, 2, 3])}, "offsets must be a 1-D array starting at 0"),
        ({"offsets": np.array([0, 2, 2])}, "offsets must end at n_blocks = 3, not 2"),
        ({"offsets": np.array([0, 3, 2, 3]), "timestamps_s": np.zeros(3), "input_length": np.array([12, 0, 2]), "output_length": np.zeros(3)}, "offsets must be non-decreasing"),
        ({"block_tokens": np.array([4, 3])}, "block_tokens must have one entry per block"),
        ({"block_tokens": np.array([4, 0, 2])}, r"block_tokens must lie in 1..block_size \(4\)"),
        ({"block_tokens": np.array([4, 5, 2])}, r"block_tokens must lie in 1..block_size \(4\)"),
        ({"block_tokens": np.array([3, 4, 2])}, "every block except a request's last must hold block_size tokens"),
        ({"input_length": np.array([6, 2])}, "a request's blocks hold more tokens than its input_length"),
        ({"timestamps_s": np.array([0.0])}, r"timestamps_s must have one entry per request \(2\)"),
        ({"timestamps_s": np.array([0.0, np.inf])}, "timestamps_s must be finite"),
        ({"output_length": np.array([0, -1])}, "input_length and output_length must be non-negative"),
        ({"session_ids": np.array([1, 2, 3])}, r"session_ids must have one entry per request \(2\)"),
        ({"block_size": 0}, "block_size must be a positive integer, got 0"),
        ({"block_ids": np.array([0.0, 1.0, 0.0])}, "block ids must be integers, got dtype float64"),
        ({"block_ids": [0, True, 0]}, "block ids must be integers"),
    ],
)
def test_request_trace_check_rejects_broken_invariants(change, message):
    RequestTrace(**valid_fields())  # the unchanged fields are valid
    with pytest.raises(ValueError, match=message):
        RequestTrace(**{**valid_fields(), **change})


def test_request_trace_accepts_python_lists_with_huge_ids():
    fields = {**valid_fields(), "block_ids": [U64_MAX, 2**63, U64_MAX]}
    trace = RequestTrace(**fields)
    assert trace.block_ids.dtype == np.uint64 and [int(b) for b in trace.block_ids] == [U64_MAX, 2**63, U64_MAX]
    with pytest.raises(ValueError, match="block ids must all fit in int64, or all in uint64"):
        RequestTrace(**{**valid_fields(), "block_ids": [-1, 2**63, 0]})


def _mooncake_by_json(path):
    """The obviously correct Mooncake reader: json.loads per non-blank line."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    ids = [h for r in rows for h in r["hash_ids"]]
    counts = [len(r["hash_ids"]) for r in rows]
    return (ids, np.r_[0, np.cumsum(counts)].tolist(), [r["timestamp"] / 1000 for r in rows],
            [r["input_length"] for r in rows], [r.get("output_length", 0) for r in rows])


@pytest.mark.parametrize("name", ["conversation", "synthetic", "mixed", "fraction", "empty"])
def test_read_mooncake_compiled_scan_equals_json_per_line(tmp_path, name):
    # read_mooncake takes the compiled scan when every line has its plain shape, else the exact
    # reader; both must give what json.loads gives, line for line: the real traces (scan), a file
    # with extra spaces, a CRLF line, a BOM and blank lines (still the scan), the same with one
    # fractional timestamp (the exact reader), an empty file.
    real = Path(__file__).resolve().parent.parent / "data" / "traces" / f"mooncake_{name}_trace.jsonl"
    path = real
    if name in ("mixed", "fraction"):
        lines = (Path(__file__).resolve().parent.parent / "data" / "traces" / "mooncake_conversation_trace.jsonl"
                 ).read_text().splitlines()[:300]
        lines[150] = lines[150].replace('"timestamp"', ' "timestamp" ')
        lines[200] += "\r"
        if name == "fraction":
            lines[250] = lines[250].replace(lines[250].split(",")[0], '{"timestamp": 1234.5', 1)
        path = tmp_path / "m.jsonl"
        path.write_bytes(("\ufeff" + "\n".join(lines) + "\n\n").encode())
    elif name == "empty":
        path = tmp_path / "e.jsonl"
        path.write_text("")
    t = read_mooncake(path)
    ids, offsets, times, inputs, outputs = _mooncake_by_json(path)
    assert t.block_ids.tolist() == ids and t.offsets.tolist() == offsets
    assert t.timestamps_s.tolist() == pytest.approx(times, abs=0)
    assert t.input_length.tolist() == inputs and t.output_length.tolist() == outputs
    assert t.block_tokens.sum() == sum(inputs) and t.skipped == 0
