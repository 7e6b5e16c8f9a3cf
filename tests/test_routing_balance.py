"""A router that does not spread the load is flagged (issue 24): the busiest worker's share of the
requests in every cluster row and routing-worth row, and a warning in the table and the JSON when
it is over 1.5 times the fair share; none for balanced routers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from naive import run_stackdist

from stackdist.planning.engine_plan import IMBALANCE, routing_balance


def test_balance_by_hand() -> None:
    assert routing_balance(np.array([0, 0, 0, 1] * 5), 2, "session") == (0.75, "")  # 1.5 x the fair share: not over
    share, warning = routing_balance(np.array([0, 0, 0, 0, 0, 1] * 4), 2, "session")
    assert share == 5 / 6 and "worker 0" in warning and "83.3%" in warning and 5 / 6 > IMBALANCE / 2
    assert routing_balance(np.array([0, 0, 0, 0, 0, 1]), 2, "session")[1] == ""  # 6 requests: chance, not flagged
    assert routing_balance(np.array([2] * 40), 4, "recorded")[1] == ""  # the trace's own workers: reported, not flagged
    assert routing_balance(np.array([-1, -1]), 2, "random") == (0.0, "")  # an infeasible pool: no requests placed


def test_plan_flags_a_collapsed_router(capsys, tmp_path: Path) -> None:
    """80 requests that all start with the same block (a shared system prompt): prefix-hash sends
    them all to one worker; round-robin spreads them."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 1024, "output_length": 8,
                                         "hash_ids": [0, 1 + i]}) + "\n" for i in range(80)))
    for router, flagged in (("prefix-hash", True), ("round-robin", False)):
        out = tmp_path / f"{router}.json"
        code, text, err = run_stackdist(capsys, "plan", trace, "--workers", 4, "--router", router, "--json", out)
        assert code == 0, err
        section = json.loads(out.read_text())["cluster"]
        warned = [w for row in section["pools"] for w in row["warnings"]]
        assert bool(warned) == flagged and (f"WARNING: router {router} sent" in text) == flagged
        assert all(row["busiest_worker_share"] == (1.0 if flagged else row["busiest_worker_share"]) for row in section["pools"])
        worth = section["routing_worth"]
        assert any("router prefix-hash" in w for row in worth for w in row["warnings"])  # every router compared
        assert all(row["busiest_worker_share"]["round-robin"] == 0.25 for row in worth)


def test_workers_pools_follow_the_gpu(capsys, tmp_path: Path) -> None:
    """With --gpu and no --gpu-blocks, each worker's pool is one replica's HBM in the trace's blocks
    (the budgets' own figure), not sizes spread from the trace."""
    out = tmp_path / "plan.json"
    code, _, err = run_stackdist(capsys, "plan", Path(__file__).resolve().parent / "data" / "mooncake_small.jsonl",
                                 "--workers", 2, "--gpu", "h200", "--model", "qwen3-8b", "--json", out)
    assert code == 0, err
    plan = json.loads(out.read_text())
    replica = plan["budgets"]["hardware"]["kv_tokens"] // plan["trace"]["block_size_tokens"]
    assert [row["gpu_blocks"] for row in plan["cluster"]["pools"]] == [replica]
