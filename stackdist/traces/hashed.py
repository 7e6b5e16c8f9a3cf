"""Readers of hash-id request traces: Mooncake (FAST'25) and Alibaba Qwen-Bailian."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError

from .lines import (
    INT64_MAX,
    UINT64_MAX,
    LineError,
    count_field,
    data_lines,
    field,
    int_array,
    is_int,
    is_regular_file,
    json_object,
    read_bytes,
    shown,
    time_field,
)
from .requests import RequestTrace, assemble, check_block_size

__all__ = ["read_mooncake", "read_qwen"]


def fitting_block_size(input_length: int, n_ids: int) -> str:
    """A hint naming the block size that fits ``n_ids`` ids to ``input_length`` tokens (the
    usual powers of two first), or "" when none does.

    >>> fitting_block_size(4736, 296)
    '; --block-size 16 fits this line'
    """
    if n_ids <= 0 or input_length <= 0:
        return ""
    lo, hi = -(-input_length // n_ids), (input_length - 1) // (n_ids - 1) if n_ids > 1 else input_length * 2
    usual = [b for b in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if lo <= b <= hi]
    fit = usual[0] if usual else (lo if lo <= hi else None)
    return f"; --block-size {fit} fits this line" if fit else ""


def _hash_ids(obj: dict[str, Any], input_length: int, block_size: int) -> tuple[list[int], int]:
    """Validate ``hash_ids`` against input_length; return (ids, largest id or -1)."""
    ids = field(obj, "hash_ids")
    if type(ids) is not list:
        raise LineError(f"'hash_ids' must be a list of non-negative integers, got {shown(ids)}")
    expected = -(-input_length // block_size)
    if len(ids) != expected:
        raise LineError(
            f"hash_ids has {len(ids)} entries but input_length {input_length} needs "
            f"ceil({input_length}/{block_size}) = {expected} blocks{fitting_block_size(input_length, len(ids))}"
        )
    if not ids:
        return ids, -1
    if not all(type(h) is int for h in ids) or min(ids) < 0 or max(ids) > UINT64_MAX:
        position, bad = next(
            (i, h) for i, h in enumerate(ids) if type(h) is not int or not 0 <= h <= UINT64_MAX
        )
        raise LineError(f"hash_ids[{position}] must be an integer in 0..2**64-1, got {shown(bad)}")
    return ids, max(ids)


def _read_hash_id_trace(
    path: str | os.PathLike[str],
    block_size: int,
    skip_bad: bool,
    parse_extra: Callable[[dict[str, Any]], Any],
    timestamp_divisor: float,
) -> tuple[RequestTrace, list[Any]]:
    """Shared loop of the Mooncake and Qwen readers; ``parse_extra`` reads format-specific fields."""
    block_size = check_block_size(block_size)
    flat: list[int] = []
    n_blocks: list[int] = []
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    extras: list[Any] = []
    largest = -1
    skipped = 0
    for lineno, raw in data_lines(path):
        try:
            obj = json_object(raw)
            timestamp = time_field(obj, "timestamp") / timestamp_divisor
            input_length = count_field(obj, "input_length")
            output_length = count_field(obj, "output_length", default=0)
            ids, line_max = _hash_ids(obj, input_length, block_size)
            extra = parse_extra(obj)
        except LineError as exc:
            if not skip_bad:
                raise TraceFormatError(path, lineno, str(exc)) from None
            skipped += 1
            continue
        flat.extend(ids)
        n_blocks.append(len(ids))
        times.append(timestamp)
        inputs.append(input_length)
        outputs.append(output_length)
        extras.append(extra)
        largest = max(largest, line_max)
    block_ids = int_array(flat, largest > INT64_MAX)
    trace = assemble(path, block_ids, n_blocks, times, inputs, outputs, block_size, skipped)
    return trace, extras


def read_mooncake(path: str | os.PathLike[str], block_size: int = 512, skip_bad: bool = False) -> RequestTrace:
    """Read a Mooncake (FAST'25) trace: ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``.

    Each ``hash_ids`` entry is a prefix-chained block id (an integer in 0..2**64-1, parsed
    exactly; uint64 dtype if any exceeds int64). ``len(hash_ids)`` must equal
    ``ceil(input_length / block_size)``: the final partial block is covered and gets
    ``input_length - block_size * (n - 1)`` tokens. Timestamps are converted from ms to s.
    ``output_length`` may be absent (0). Complexity: O(file size).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.jsonl")
    >>> _ = open(path, "w").write('{"timestamp": 1500, "input_length": 600, "output_length": 9, "hash_ids": [4, 5]}\\n')
    >>> t = read_mooncake(path)
    >>> t.block_ids.tolist(), t.block_tokens.tolist(), t.timestamps_s.tolist()
    ([4, 5], [512, 88], [1.5])
    """
    scanned = _scan_mooncake_file(path, check_block_size(block_size))
    if scanned is not None:
        return scanned
    trace, _ = _read_hash_id_trace(path, block_size, skip_bad, lambda obj: None, 1000.0)
    return trace


def _scan_mooncake_file(path: str | os.PathLike[str], block_size: int) -> RequestTrace | None:
    """The whole file through the compiled scan (:func:`.fast_json.scan_mooncake`), or None when
    any line is not of its plain shape (then the exact reader runs: same trace, same errors).
    O(file size), 5-8x faster than parsing each line as JSON."""
    from .fast_json import scan_mooncake_in_halves

    if not is_regular_file(path):
        return None  # read once, by the exact reader
    ids, n_blocks, ts, inputs, outputs, _, ok = scan_mooncake_in_halves(read_bytes(path), block_size)
    if not ok or len(n_blocks) == 0:  # an empty trace: the exact reader's own handling
        return None
    return assemble(os.fspath(path), ids, n_blocks, ts / 1000.0, inputs, outputs, block_size, 0)


def _qwen_ids(obj: dict[str, Any]) -> tuple[int, int]:
    """(chat_id, parent_chat_id) of a Qwen-Bailian line; a missing or null parent is -1."""
    chat_id = field(obj, "chat_id")
    if not is_int(chat_id) or not -(2**63) <= chat_id <= INT64_MAX:
        raise LineError(f"'chat_id' must be an integer, got {shown(chat_id)}")
    parent = obj.get("parent_chat_id", -1)
    if parent is None:
        parent = -1
    if not is_int(parent) or not -(2**63) <= parent <= INT64_MAX:
        raise LineError(f"'parent_chat_id' must be an integer (-1 for a first turn), got {shown(parent)}")
    return chat_id, parent


def _conversation_roots(chat_ids: list[int], parents: list[int]) -> list[int]:
    """For each request, the chat_id at the root of its parent chain (its conversation).

    A parent of -1 (or any negative id) ends a chain; so does a parent that is not a request
    of the file (that parent id is then the root, so siblings still share a conversation) and
    a cycle. Complexity: O(n) with memoisation.
    """
    parent_of = dict(zip(chat_ids, parents))
    root: dict[int, int] = {}
    out = []
    for chat in chat_ids:
        path, node, seen = [], chat, set()
        while node not in root:
            parent = parent_of.get(node)
            if parent is None or parent < 0 or node in seen:
                root[node] = node
                break
            seen.add(node)
            path.append(node)
            node = parent
        for visited in path:
            root[visited] = root[node]
        out.append(root[chat])
    return out


def read_qwen(path: str | os.PathLike[str], block_size: int = 16, skip_bad: bool = False) -> RequestTrace:
    """Read an Alibaba Qwen-Bailian trace (github.com/alibaba-edu/qwen-bailian-usagetraces-anon).

    Documented fields per line: ``chat_id`` (int), ``parent_chat_id`` (-1 for a root request;
    a missing or null value is read as -1), ``timestamp`` (seconds), ``input_length``,
    ``output_length``, ``type`` (text/search/image/file; ignored), ``turn`` (ignored) and
    ``hash_ids`` (salted SipHash ids of 16-token blocks, remapped to integers). The hash ids
    are taken as given (they are not re-chained here), with the same checks as
    :func:`read_mooncake`, including ``len(hash_ids) == ceil(input_length / block_size)``.

    ``request_ids`` holds each line's ``chat_id`` (in the published traces one id per
    request, i.e. per turn); ``session_ids`` holds the conversation: the ``chat_id`` at the
    root of the ``parent_chat_id`` chain (see :func:`_conversation_roots`).
    Complexity: O(file size).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "q.jsonl")
    >>> _ = open(path, "w").write('{"chat_id": 7, "parent_chat_id": -1, "timestamp": 0, "input_length": 20, '
    ...                           '"output_length": 3, "hash_ids": [1, 2]}\\n'
    ...                           '{"chat_id": 8, "parent_chat_id": 7, "timestamp": 2, "input_length": 16, '
    ...                           '"output_length": 3, "hash_ids": [1]}\\n')
    >>> t = read_qwen(path)
    >>> t.request_ids.tolist(), t.session_ids.tolist(), t.block_tokens.tolist()
    ([7, 8], [7, 7], [16, 4, 16])
    """
    trace, extras = _read_hash_id_trace(path, block_size, skip_bad, _qwen_ids, 1.0)
    chat_ids = [chat for chat, _ in extras]
    trace.request_ids = np.array(chat_ids, dtype=np.int64)
    trace.session_ids = np.array(_conversation_roots(chat_ids, [parent for _, parent in extras]), dtype=np.int64)
    trace._check()
    return trace
