"""The SPEC.md schedule: service model, schedule CSV (round trip, malformed lines), event order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from serving_reference import ref_events
from traces_random import random_trace

import stackdist
from stackdist.serving.pages import engine_pages
from stackdist.serving.schedule import ARRIVAL, FINISH, Schedule, event_order


def test_event_order_equals_a_plain_sort() -> None:
    for seed in range(20):
        tr = random_trace(seed, n_requests=25)
        for sched in (Schedule.from_service_model(tr, 2000, 20), Schedule.serial(tr.n_requests)):
            for decode in (False, True):
                ev = event_order(sched, tr.output_length, decode)
                ref = ref_events(sched.arrival_s, sched.prefill_end_s, sched.finish_s, tr.output_length, decode)
                assert list(zip(ev.time.tolist(), ev.kind.tolist(), ev.request.tolist(), ev.k.tolist())) == ref


def test_service_model_is_the_spec_arithmetic() -> None:
    raw = random_trace(3, n_requests=30)
    ms = [round(t * 1000) + 1700000000000 for t in raw.timestamps_s.tolist()]  # integer ms, as Mooncake
    tr = stackdist.RequestTrace(raw.block_ids, raw.offsets, raw.block_tokens, np.array(ms) / 1000.0,
                                raw.input_length, raw.output_length, block_size=raw.block_size)
    s = Schedule.from_service_model(tr)
    for i in range(tr.n_requests):
        a = (ms[i] - ms[0]) / 1000
        p = a + int(tr.input_length[i]) / 10000.0
        f = p + int(tr.output_length[i]) / 50.0
        assert (s.arrival_s[i], s.prefill_end_s[i], s.finish_s[i]) == (a, p, f)


def test_csv_round_trip(tmp_path: Path) -> None:
    tr = random_trace(4, n_requests=12)
    s = Schedule.from_service_model(tr)
    path = tmp_path / "s.csv"
    s.write_csv(path)
    back = Schedule.read_csv(path, tr.n_requests)
    for name in ("arrival_s", "prefill_end_s", "finish_s"):
        assert np.array_equal(getattr(s, name), getattr(back, name))


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        ("request,arrival_s,finish_s\n", 1, "header"),
        ("request,arrival_s,prefill_end_s,finish_s\n0,0,1\n", 2, "4 fields"),
        ("request,arrival_s,prefill_end_s,finish_s\n0,0,x,1\n", 2, "numbers"),
        ("request,arrival_s,prefill_end_s,finish_s\n0,0,1,2\n2,1,2,3\n", 3, "request must be 1"),
        ("request,arrival_s,prefill_end_s,finish_s\n0,0,2,1\n", 2, "arrival_s <= prefill_end_s <= finish_s"),
        ("request,arrival_s,prefill_end_s,finish_s\n0,0,nan,1\n", 2, "finite"),
    ],
)
def test_malformed_csv(tmp_path: Path, body: str, line: int, needle: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(stackdist.TraceFormatError) as err:
        Schedule.read_csv(path)
    assert err.value.line == line and needle in err.value.message


def test_row_count_checked(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    Schedule.serial(3).write_csv(path)
    with pytest.raises(stackdist.TraceFormatError, match="4 rows"):
        Schedule.read_csv(path, 4)


def test_bad_schedules() -> None:
    with pytest.raises(ValueError, match="arrival_s <= prefill_end_s <= finish_s"):
        Schedule(np.array([1.0]), np.array([0.5]), np.array([2.0]))
    with pytest.raises(ValueError, match="positive finite"):
        Schedule.from_service_model(random_trace(1, 3), prefill_tokens_per_s=0)
    with pytest.raises(ValueError, match="output_tokens"):
        event_order(Schedule.serial(2), np.array([1]), True)
    tie = Schedule(np.array([0.0]), np.array([1.0]), np.array([1.0]))  # finish sorts before prefill_end
    for decode in (True, False):
        with pytest.raises(ValueError, match="sort as arrival"):
            event_order(tie, np.array([3]), decode)
    with pytest.raises(ValueError, match="sort as arrival"):  # prefill_end sorts before arrival
        event_order(Schedule(np.array([0.0]), np.array([0.0]), np.array([1.0])), np.array([3]), False)
    ev = event_order(Schedule(np.array([0.0]), np.array([0.5]), np.array([1.0])), np.array([3]), True)
    assert ev.kind.tolist()[0] == ARRIVAL and ev.kind.tolist()[-1] == FINISH


def test_pages_checks() -> None:
    t = stackdist.RequestTrace(np.array([1]), np.array([0, 1]), np.array([16]), np.zeros(1),
                               np.array([20]), np.ones(1, np.int64), block_size=16)
    with pytest.raises(ValueError, match="cover the whole prompt"):
        engine_pages(t)


def test_service_model_counts_an_empty_answer_as_one_token(tmp_path: Path) -> None:
    # A Mooncake line with output_length 0 once made finish == prefill_end, which the event order
    # rejects ("times tie across kinds"): plan --semantics vllm exited 1 on such a trace.
    t = stackdist.RequestTrace.from_blocks([[1, 2], [1, 3]], block_size=16, output_length=[0, 4])
    s = Schedule.from_service_model(t, 1000.0, 50.0)
    assert (s.finish_s - s.prefill_end_s).tolist() == pytest.approx([1 / 50, 4 / 50])
    event_order(s, np.array([0, 4]), decode=True)  # a valid order: no tie across kinds
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [1, 2]}\n')
    assert stackdist.cli.main(["plan", str(path), "--semantics", "vllm", "--gpu-blocks", "100", "--json", str(tmp_path / "o.json")]) == 0
