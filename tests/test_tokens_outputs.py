"""The token-id reader's output ids (``output_ids`` / ``output_token_ids``): good and malformed lines."""

from __future__ import annotations

import pytest

from stackdist.errors import TraceFormatError
from stackdist.traces import read_token_ids
from stackdist.traces.blocks import chain_hashes


def _file(tmp_path, text):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["output_ids", "output_token_ids"])
def test_answer_blocks_are_the_written_blocks_past_the_prompt(tmp_path, name):
    prompt, answer = list(range(1, 21)), list(range(100, 131))  # P = 20, O = 31: 50 tokens written
    t = read_token_ids(_file(tmp_path, f'{{"input_ids": {prompt}, "{name}": {answer}}}\n[5]\n'), block_size=16,
                       partial_last_block=True)
    written = chain_hashes(prompt + answer[:-1], 16)  # 3 full blocks: [0,16) is prompt, then 2 of the answer
    assert t.output_length.tolist() == [31, 0]
    assert t.answer_block_ids[0].tolist() == written[1:].tolist() and len(t.answer_block_ids[1]) == 0
    assert t.select([1, 0]).answer_block_ids[1].tolist() == written[1:].tolist()


def test_no_outputs_no_answer_field(tmp_path):
    assert read_token_ids(_file(tmp_path, '{"input_ids": [1, 2], "output_length": 4}\n')).answer_block_ids is None


def test_equal_length_answers_stay_one_array_per_request(tmp_path):
    t = read_token_ids(_file(tmp_path, '{"input_ids": [1], "output_ids": [2, 3, 4]}\n' * 2), block_size=2)
    assert t.answer_block_ids.shape == (2,) and [len(a) for a in t.answer_block_ids] == [1, 1]


@pytest.mark.parametrize("line, says", [
    ('{"input_ids": [1], "output_ids": 3}', "'output_ids' must be a list"),
    ('{"input_ids": [1], "output_token_ids": [1, -2]}', "'output_token_ids' must be a list of non-negative"),
    ('{"input_ids": [1], "output_ids": [1, 2], "output_length": 3}', "'output_length' is 3 but 'output_ids' has 2"),
])
def test_malformed_outputs_name_the_line(tmp_path, line, says):
    with pytest.raises(TraceFormatError, match=says):
        read_token_ids(_file(tmp_path, line + "\n"))
    assert read_token_ids(_file(tmp_path, line + "\n[1, 2]\n"), skip_bad=True).skipped == 1
