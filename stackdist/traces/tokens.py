"""Reader of token-id request traces: one request's token ids a line, hashed into chained blocks.

A line may also carry the answer's token ids, under ``output_ids`` or ``output_token_ids``
(the names vLLM's ``RequestOutput`` / ``CompletionOutput.token_ids`` exports and OpenAI-style
logs use; a list of non-negative integers, the last one the final sampled token). Then
``output_length`` is their count (an ``output_length`` field, if also given, must agree), and the
trace carries ``answer_block_ids``: the chained ids of the full blocks of prompt + answer
(without the last token, whose KV is never computed) beyond the prompt's full blocks, so the
blocks a request fills while decoding are hashed from its real tokens and ``--decode-reuse``
is exact (:mod:`stackdist.serving.decode_reuse`), with no inference.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError

from .blocks import chain_hashes
from .lines import (
    INT64_MAX,
    LineError,
    count_field,
    data_lines,
    json_line,
    shown,
    time_field,
)
from .requests import RequestTrace, assemble, check_block_size

__all__ = ["read_token_ids"]

OUTPUT_FIELDS = ("output_ids", "output_token_ids")


def _token_list(obj: Any) -> tuple[list[int], dict[str, Any]]:
    """(token ids, the object or {}) from a list line or an object with input_ids/token_ids."""
    if type(obj) is list:
        tokens, fields = obj, {}
    elif type(obj) is dict:
        name = "input_ids" if "input_ids" in obj else "token_ids"
        if name not in obj:
            raise LineError("missing field 'input_ids' (or 'token_ids')")
        tokens, fields = obj[name], obj
        if type(tokens) is not list:
            raise LineError(f"'{name}' must be a list of token ids, got {shown(tokens)}")
    else:
        raise LineError(f"expected a JSON list of token ids or an object, got {shown(obj)}")
    if not all(type(t) is int and 0 <= t <= INT64_MAX for t in tokens):
        position, bad = next((i, t) for i, t in enumerate(tokens) if type(t) is not int or not 0 <= t <= INT64_MAX)
        raise LineError(f"token id {position} must be a non-negative integer, got {shown(bad)}")
    return tokens, fields


def _outputs(fields: dict[str, Any], tokens: list[int], block_size: int) -> tuple[int, np.ndarray | None]:
    """(output length, answer block ids or None) of one line (module docstring). O(tokens)."""
    name = next((n for n in OUTPUT_FIELDS if n in fields), None)
    if name is None:
        return count_field(fields, "output_length", default=0), None
    out = fields[name]
    if type(out) is not list or not all(type(t) is int and 0 <= t <= INT64_MAX for t in out):
        raise LineError(f"'{name}' must be a list of non-negative token ids, got {shown(out)}")
    if "output_length" in fields and count_field(fields, "output_length") != len(out):
        raise LineError(f"'output_length' is {fields['output_length']} but '{name}' has {len(out)} token ids")
    written = chain_hashes(tokens + out[:-1], block_size)
    return len(out), written[len(tokens) // block_size:]


def read_token_ids(
    path: str | os.PathLike[str],
    block_size: int = 16,
    partial_last_block: bool = False,
    skip_bad: bool = False,
) -> RequestTrace:
    """Read one request per line as token ids and hash them into prefix-chained blocks.

    A line is a JSON list of token ids, or an object with ``input_ids`` (or ``token_ids``), an
    optional ``timestamp`` (seconds; on every line or on none -- 0.0 when absent) and an
    optional ``output_length`` (0 when absent) or the answer's token ids (module docstring).
    Block ids come from
    :func:`stackdist.traces.blocks.chain_hashes` (uint64). ``input_length`` is the number of tokens.

    With ``partial_last_block=False`` (vLLM's behaviour: only full blocks are cached) a
    trailing partial block is not represented: every block holds ``block_size`` tokens and
    prefix-token hit rates computed from the blocks exclude each prompt's tail. With
    ``True`` the tail becomes a block of its own, counted by its real length.
    Complexity: O(tokens).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> _ = open(path, "w").write("[1, 2, 3, 4, 5]\\n[1, 2, 3, 4, 9]\\n")
    >>> t = read_token_ids(path, block_size=2)
    >>> t.n_blocks, bool(t.block_ids[0] == t.block_ids[2]), t.input_length.tolist()
    (4, True, [5, 5])
    >>> _ = open(path, "w").write('{"input_ids": [1, 2, 3], "output_ids": [4, 5, 6]}\\n[1, 2, 3, 4, 5, 7]\\n')
    >>> t = read_token_ids(path, block_size=2, partial_last_block=True)
    >>> t.output_length.tolist(), [len(a) for a in t.answer_block_ids]  # [3, 4] is written while decoding
    ([3, 0], [1, 0])
    >>> bool(t.answer_block_ids[0][0] == t.block_ids[3])  # the next prompt's block [3, 4]
    True
    """
    block_size = check_block_size(block_size)
    pieces: list[np.ndarray] = []
    n_blocks: list[int] = []
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    answers: list[np.ndarray | None] = []
    first_timestamp: tuple[int, bool] | None = None
    skipped = 0
    for lineno, raw in data_lines(path):
        try:
            tokens, fields = _token_list(json_line(raw))
            has_time = "timestamp" in fields
            if first_timestamp is None:
                first_timestamp = (lineno, has_time)
            elif has_time != first_timestamp[1]:
                raise LineError(
                    f"{'has' if has_time else 'lacks'} 'timestamp' but line {first_timestamp[0]} "
                    f"{'lacks' if has_time else 'has'} it; timestamps must be on every line or on none"
                )
            timestamp = time_field(fields, "timestamp") if has_time else 0.0
            output_length, answer = _outputs(fields, tokens, block_size)
        except LineError as exc:
            if not skip_bad:
                raise TraceFormatError(path, lineno, str(exc)) from None
            skipped += 1
            continue
        ids = chain_hashes(tokens, block_size, partial_last_block=partial_last_block)
        pieces.append(ids)
        n_blocks.append(int(ids.shape[0]))
        times.append(timestamp)
        inputs.append(len(tokens))
        outputs.append(output_length)
        answers.append(answer)
    block_ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint64)
    return _with_answers(assemble(path, block_ids.astype(np.uint64), n_blocks, times, inputs, outputs, block_size, skipped), answers)


def _with_answers(trace: RequestTrace, answers: list[np.ndarray | None]) -> RequestTrace:
    """``trace`` with ``answer_block_ids`` when any line had output ids (others: none). O(requests)."""
    if all(a is None for a in answers):
        return trace
    held = np.empty(len(answers), dtype=object)
    for i, a in enumerate(answers):  # element by element: equal lengths must not make a 2-d array
        held[i] = np.zeros(0, np.uint64) if a is None else a
    return dataclasses.replace(trace, answer_block_ids=held)
