"""The compiled scans of plain CSV/TSV/TXT and JSONL access traces (``read_access_trace``).

The reference is the exact reader itself, run on the same file with the scans switched off:
the two must give the same keys (values and dtype), sizes and errors on every file, plain or
not, including files cut into many blocks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from stackdist.errors import TraceFormatError
from stackdist.traces import fast_delimited, fast_json, lines, read_access_trace


@pytest.fixture
def exact_reader(monkeypatch):
    """read_access_trace with the compiled scans off (every file read line by line)."""

    def read(path):
        with monkeypatch.context() as m:
            m.setattr(fast_delimited, "scan_delimited_file", lambda *a: None)
            m.setattr(fast_json, "scan_jsonl_file", lambda *a: None)
            return read_access_trace(path)

    return read


def _outcome(read, path):
    try:
        t = read(path)
    except TraceFormatError as exc:
        return ("error", str(exc))
    return (t.keys.dtype.str, t.keys.tolist(), None if t.sizes is None else t.sizes.tolist())


def _delimited_text(rng, delim, sized):
    keys = rng.integers(-(10**18), 10**18, 40) if rng.random() < 0.2 else rng.integers(-5, 60, 40)
    rows = []
    for k in keys:
        text = str(int(k))
        roll = rng.random()
        if roll < 0.1:
            text = "+" + text.lstrip("-")
        elif roll < 0.2 and 0 <= k < 10**16:
            text = "00" + text
        rows.append(f"{text}{delim}{int(rng.integers(1, 10**6))}" if sized else text)
    if rng.random() < 0.5:
        rows.insert(0, rng.choice(["key", "Key", "KEY"]) + (f"{delim}size" if sized else ""))
    for _ in range(int(rng.integers(0, 3))):
        rows.insert(int(rng.integers(1, len(rows))), "")
    newline = "\r\n" if rng.random() < 0.3 else "\n"
    text = newline.join(rows) + (newline if rng.random() < 0.7 else "")
    return ("\ufeff" if rng.random() < 0.2 else "") + text


@pytest.mark.parametrize("suffix,delim", [(".csv", ","), (".tsv", "\t"), (".txt", "\t"), (".txt", ",")])
def test_plain_delimited_files_read_as_the_exact_reader_reads_them(tmp_path, exact_reader, monkeypatch, suffix, delim):
    rng = np.random.default_rng(len(suffix) + ord(delim))
    path = tmp_path / f"t{suffix}"
    for case in range(30):
        path.write_bytes(_delimited_text(rng, delim, bool(case % 2)).encode())
        if case % 3 == 0:
            monkeypatch.setattr(lines, "BLOCK_BYTES", int(rng.integers(1, 40)))  # many blocks
        assert fast_delimited.scan_delimited_file(path, None if suffix == ".txt" else delim) is not None
        assert _outcome(read_access_trace, path) == _outcome(exact_reader, path)
        monkeypatch.setattr(lines, "BLOCK_BYTES", 1 << 25)


NOT_PLAIN = [
    "1\n# a comment\n2\n",            # a comment
    "1\n 2\n",                         # spaces
    "a\nb\na\n",                       # string keys
    "1\nx\n",                          # one string key: every key a string
    "1234567890123456789012\n5\n",     # too long for 64 bits: strings
    "9223372036854775807\n1\n",        # 19 digits: the exact reader's int64
    "18446744073709551615\n1\n",       # uint64
    "1,2\n3\n",                        # a missing size
    "1,2,3\n",                         # three columns
    "key,size\n1\n",                   # header with two columns, data with one
    "key\n1,2\n",                      # and the other way round
    "1,0\n",                           # size 0
    "1,+3\n",                          # a signed size
    "1,2\n3\t4\n",                     # a tab in a CSV
    "key,size,x\n1,2\n",               # a three-column header
    ",5\n",                            # an empty key
    "1\r2\n",                          # a lone CR
    "\n\nkey\n7\n",                    # blank lines before the header
    "key\n",                           # a header only
    "",                                # empty
    "\n\n",                            # blank
    "1\n\xff\n",                       # not UTF-8
    "-\n",                             # a bare sign
]


@pytest.mark.parametrize("text", NOT_PLAIN)
def test_any_other_delimited_file_gets_the_exact_readers_answer(tmp_path, exact_reader, text):
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else text.encode("latin-1"))
    assert _outcome(read_access_trace, path) == _outcome(exact_reader, path)


def _jsonl_text(rng, sized):
    keys = rng.integers(-(10**17), 10**17, 30) if rng.random() < 0.2 else rng.integers(-5, 60, 30)
    rows = []
    for k in keys:
        obj = {"key": int(k), "size": int(rng.integers(1, 10**6))} if sized else {"key": int(k)}
        if sized and rng.random() < 0.3:
            obj = {"size": obj["size"], "key": obj["key"]}
        text = json.dumps(obj, separators=(",", ":") if rng.random() < 0.3 else (", ", ": "))
        rows.append(text + ("\r" if rng.random() < 0.1 else ""))
    for _ in range(int(rng.integers(0, 3))):
        rows.insert(int(rng.integers(0, len(rows))), " ")
    return ("\ufeff" if rng.random() < 0.2 else "") + "\n".join(rows) + ("\n" if rng.random() < 0.7 else "")


def test_plain_jsonl_files_read_as_the_exact_reader_reads_them(tmp_path, exact_reader, monkeypatch):
    rng = np.random.default_rng(11)
    path = tmp_path / "t.jsonl"
    for case in range(40):
        path.write_bytes(_jsonl_text(rng, bool(case % 2)).encode())
        if case % 3 == 0:
            monkeypatch.setattr(lines, "BLOCK_BYTES", int(rng.integers(1, 60)))
        assert fast_json.scan_jsonl_file(path) is not None
        assert _outcome(read_access_trace, path) == _outcome(exact_reader, path)
        monkeypatch.setattr(lines, "BLOCK_BYTES", 1 << 25)


@pytest.mark.parametrize("text", [
    '{"key": 1}\n{"key": "a"}\n', '{"key": "a"}\n{"key": "b"}\n', '{"key": 1}\n{"key": 01}\n', '{"key": 1.5}\n',
    '{"key": 1}\n{"key": 2, "size": 3}\n', '{"key": 1, "size": 0}\n', '{"key": 1, "note": "x"}\n', '{"k\\u0065y": 4}\n',
    '{"key": 12345678901234567890}\n', '{"key": 1}\n[2]\n', '{"key": 1}\n{"size": 2}\n', '', '\n \n', '{"key": 1}x\n',
    '{"key": 1, "key": 2}\n',
])
def test_any_other_jsonl_file_gets_the_exact_readers_answer(tmp_path, exact_reader, text):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    assert _outcome(read_access_trace, path) == _outcome(exact_reader, path)


def test_a_change_of_columns_between_blocks_is_the_exact_readers_error(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    path.write_text("\n".join(["1,2"] * 50 + ["3"]) + "\n")
    monkeypatch.setattr(lines, "BLOCK_BYTES", 16)
    with pytest.raises(TraceFormatError, match=r"t.csv:51: has 1 column"):
        read_access_trace(path)
    path = tmp_path / "t.jsonl"
    path.write_text('{"key": 1}\n' * 20 + '{"key": 2, "size": 2}\n')
    with pytest.raises(TraceFormatError, match=r"t.jsonl:21: has 'size'"):
        read_access_trace(path)


def test_whole_line_blocks_cut_at_line_ends_and_lose_nothing():
    import io

    rng = np.random.default_rng(4)
    for _ in range(300):
        body = bytes(rng.choice(list(b"ab\n"), int(rng.integers(0, 60))).astype(np.uint8))
        data = (b"\xef\xbb\xbf" if rng.random() < 0.3 else b"") + body
        blocks = list(lines.whole_line_blocks(io.BytesIO(data), int(rng.integers(1, 12))))
        assert b"".join(blocks) == body
        assert all(b and b.endswith(b"\n") for b in blocks[:-1]) and all(blocks)


def test_a_scan_in_halves_is_the_scan_of_the_whole_block():
    rng = np.random.default_rng(8)
    # Over 1 MiB, so the block is cut in two; the rows are built once per column count (the
    # string building was most of this test's time), each case changes its own copy.
    keys, sizes = rng.integers(-9, 10**6, 200_000).tolist(), rng.integers(1, 9, 200_000).tolist()
    plain_rows, sized_rows = list(map(str, keys)), [f"{k},{z}" for k, z in zip(keys, sizes)]
    for case in range(8):
        rows = list(sized_rows if case % 2 else plain_rows)
        if case % 3 == 1:
            rows[int(rng.integers(0, len(rows)))] = "x"  # not plain: in one half or the other
        if case % 4 == 3:
            rows[int(rng.integers(len(rows) // 2, len(rows)))] = "5"  # a change of columns in the second half
        block = ("\n".join(rows) + "\n").encode()
        whole = fast_delimited.parse_int_lines(np.frombuffer(block, np.uint8), ord(","))
        halves = lines.scan_in_halves(fast_delimited.parse_int_lines, block, ord(","))
        assert halves[4] == whole[4]
        if whole[4]:
            assert halves[0].tolist() == whole[0].tolist() and halves[1].tolist() == whole[1].tolist()
            assert halves[2:4] == whole[2:4]
    block = ("1,2\n" * 200_000 + "3\n" * 300_000).encode()  # each half plain, with its own column count
    assert fast_delimited.parse_int_lines(np.frombuffer(block, np.uint8), ord(","))[4] is False
    assert lines.scan_in_halves(fast_delimited.parse_int_lines, block, ord(","))[4] is False
    text = "".join(f'{{"key": {k}}}\n' for k in rng.integers(0, 10**9, 80_000).tolist()).encode()
    whole, halves = fast_json.scan_access_jsonl(np.frombuffer(text, np.uint8)), lines.scan_in_halves(fast_json.scan_access_jsonl, text)
    assert halves[0].tolist() == whole[0].tolist() and halves[2:] == whole[2:]


@pytest.mark.parametrize("name,text,fmt", [
    ("t.csv", "1\n2\n1\n# a comment: not plain\n2\n3\n1\n", "csv"),
    ("t.csv", "1\n2\n1\n2\n", "csv"),
    ("t.jsonl", '{"key": 1}\n{"key": 2, "note": "x"}\n{"key": 1}\n', "jsonl"),
    ("m.jsonl", ('{"timestamp": 0, "input_length": 600, "hash_ids": [4, 5]}\n'
                 '{"timestamp": 1.5, "input_length": 600, "hash_ids": [4, 6]}\n'), "mooncake"),
])
def test_a_fifo_is_read_once_whole(tmp_path, name, text, fmt):
    # A FIFO (or /dev/stdin, or a <(...) substitution) cannot be read twice: a scan that gave up
    # halfway and handed it to the exact reader would answer from the rest of the stream.
    import os
    import threading

    from stackdist.traces import read_requests

    plain = tmp_path / name
    plain.write_text(text)
    fifo = tmp_path / ("fifo_" + name)
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    try:
        if fmt == "mooncake":
            got, want = read_requests(str(fifo), "mooncake"), read_requests(str(plain), "mooncake")
            assert got.block_ids.tolist() == want.block_ids.tolist() and got.timestamps_s.tolist() == want.timestamps_s.tolist()
        else:
            got, want = read_access_trace(fifo, fmt), read_access_trace(plain)
            assert got.keys.tolist() == want.keys.tolist()
    finally:
        writer.join(timeout=10)


def test_the_mooncake_scan_in_halves_is_the_scan_of_the_whole_buffer():
    rng = np.random.default_rng(9)
    rows = []
    for r in range(12_000):
        n = int(rng.integers(0, 9))
        rows.append(json.dumps({"timestamp": r * 7, "input_length": n * 16 - int(rng.integers(0, 16)) if n else 0,
                                "output_length": int(rng.integers(0, 50)), "hash_ids": rng.integers(0, 10**12, n).tolist()}))
    data = ("\n".join(rows) + "\n").encode()
    assert len(data) > 1 << 20
    whole, halves = fast_json.scan_mooncake(np.frombuffer(data, np.uint8), 16), fast_json.scan_mooncake_in_halves(data, 16)
    assert whole[6] and halves[6] and halves[5] == whole[5]
    for a, b in zip(halves[:5], whole[:5]):
        assert a.tolist() == b.tolist()
    rows[9_000] = rows[9_000].replace('"timestamp": ', '"timestamp": 0.5', 1)  # not plain, in the second half
    assert fast_json.scan_mooncake_in_halves(("\n".join(rows) + "\n").encode(), 16)[6] is False


@pytest.mark.parametrize("name", ["timestamp", "input_length", "output_length", "hash_ids"])
def test_the_mooncake_scan_refuses_a_field_one_letter_off(name):
    good = {"timestamp": 5, "input_length": 20, "output_length": 3, "hash_ids": [1, 2]}
    assert fast_json.scan_mooncake(np.frombuffer((json.dumps(good) + "\n").encode(), np.uint8), 16)[6]
    for q in range(1, len(name)):  # the first letter picks the field: every later one is checked
        bad = name[:q] + ("x" if name[q] != "x" else "y") + name[q + 1:]
        line = json.dumps({(bad if k == name else k): v for k, v in good.items()}) + "\n"
        assert fast_json.scan_mooncake(np.frombuffer(line.encode(), np.uint8), 16)[6] is False, bad
