"""methods/plan.py: the plan by method. The sampled plan against the exact plan (exact counts
and ceilings, working sets and coverage within the estimator's error, equal at rate 1), an error
bar for every number it prints, and the CLI's refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from naive import real_trace_paths

from stackdist.methods import Exact, Sampled
from stackdist.methods.plan import plan
from stackdist.planning import PlanOptions
from stackdist.traces import RequestTrace


def _sessions(seed: int, n: int = 400, prompts: int = 4, pages: int = 8) -> RequestTrace:
    """Chained requests: a shared system prompt, then a session's growing history (each id one
    whole prefix: the id of a block is keyed by its parent's id and its own value). O(blocks)."""
    rng = np.random.default_rng(seed)
    ids: dict[tuple[int, int], int] = {}
    history: dict[int, list[int]] = {}
    rows = []

    def extend(chain: list[int], values: list[int]) -> None:
        for v in values:
            chain.append(ids.setdefault((chain[-1] if chain else -1, v), len(ids)))

    for _ in range(n):
        s = int(rng.integers(0, 60))
        if s not in history:
            history[s] = []
            extend(history[s], [int(rng.integers(0, prompts))] * pages)
        extend(history[s], [int(rng.integers(10, 10**6)) for _ in range(int(rng.integers(1, 2 * pages)))])
        rows.append(list(history[s]))
    return RequestTrace.from_blocks(rows, block_size=16)


def _numbers(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numbers(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, (*path, i))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path


def _get(node, path):
    for step in path:
        node = node[step]
    return node


@pytest.mark.parametrize("seed", range(3))
def test_sampled_at_rate_one_is_the_exact_plan(seed):
    trace = _sessions(seed, 150)
    options = PlanOptions(coverage_target=[1.0, 0.5][seed % 2])
    exact, sampled = plan(trace, options).plan, plan(trace, options, Sampled(rate=1.0, seeds=2)).plan
    for name in ("engine", "per-access"):
        e, s = exact["semantics"][name], sampled["semantics"][name]
        assert s["working_set"] == e["working_set"] and s["coverage"] == e["coverage"]
        assert s["summary"] == e["summary"] and s["tier_plan"] == e["tier_plan"]
        assert s["tier_plan_by_coverage"] == e["tier_plan_by_coverage"]
        assert np.allclose(s["curve"]["prefix_token_hit_rate"], e["curve"]["prefix_token_hit_rate"])
    assert sampled["trace"] == exact["trace"] and sampled["comparison"]["working_sets"] == exact["comparison"]["working_sets"]


def test_sampled_plan_is_within_its_error_and_exact_where_it_says():
    trace = _sessions(7, 3000, pages=40)
    exact = plan(trace, PlanOptions()).plan
    got = plan(trace, PlanOptions(), Sampled(rate=0.2, seeds=3)).plan
    assert got["trace"] == exact["trace"]  # the counts of the whole trace: exact
    for name in ("engine", "per-access"):
        e, s = exact["semantics"][name], got["semantics"][name]
        assert s["summary"] | {"saturation_blocks": 0} == e["summary"] | {"saturation_blocks": 0}  # exact but saturation
        assert s["coverage"]["n_requests_with_reuse"] == e["coverage"]["n_requests_with_reuse"]
        for row_e, row_s in zip(e["working_set"], s["working_set"], strict=True):
            want, have = row_e["fraction_of_ceiling"]["blocks"], row_s["fraction_of_ceiling"]["blocks"]
            assert abs(have - want) <= 0.08 * want + 10, (name, row_e["target"], have, want)
        for q in ("p50", "p90", "p99"):  # coverage: the deepest reused block's depth, estimated (not biased low)
            want = e["coverage"]["requests_with_reuse"][q]["blocks"]
            have = s["coverage"]["requests_with_reuse"][q]["blocks"]
            assert abs(have - want) <= 0.1 * want + 10, (name, q, have, want)


def test_every_number_of_a_sampled_plan_has_its_error_bar():
    trace = _sessions(3, 300)
    got = plan(trace, PlanOptions(), Sampled(rate=0.5, seeds=3)).plan
    spread = got["sampling"]["spread"]
    for part in ("semantics", "comparison"):
        for path in _numbers(got[part]):
            bar = _get(spread[part], path)
            assert bar["min"] <= _get(got[part], path) <= bar["max"], path
    assert json.loads(json.dumps(got["sampling"]))  # plain JSON


def test_sampled_plan_leaves_time_windows_out_with_the_reason():
    trace = _sessions(4, 200)
    got = plan(trace, PlanOptions(window_seconds=50.0), Sampled(rate=0.5)).plan
    assert "time_windows" not in got["semantics"]["engine"] and "time windows" in got["sampling"]["omitted"]["time_windows"]
    assert "time_windows" in plan(trace, PlanOptions(window_seconds=50.0), Exact()).plan["semantics"]["engine"]


def test_sampled_plan_cli_refusals(tmp_path, capsys):
    from stackdist.cli.main import main

    rows = [{"timestamp": i, "input_length": 48, "hash_ids": [i % 3, 10 + i % 3, 100 + i]} for i in range(50)]
    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["plan", str(trace), "--block-size", "16", "--sample-rate", "0.5"]
    assert main([*base, "--json", str(tmp_path / "ok.json")]) == 0
    for extra in (["--semantics", "vllm"], ["--optimal"], ["--workers", "2"], ["--dask", "local"]):
        assert main([*base, *extra]) == 2, extra
        assert "sample" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"  # id 5 has two parents: not chained
    bad.write_text("".join(json.dumps({"timestamp": i, "input_length": 32, "hash_ids": [i % 2, 5]}) + "\n" for i in range(20)))
    assert main(["plan", str(bad), "--block-size", "16", "--sample-rate", "0.5"]) == 1
    assert "prefix-chained" in capsys.readouterr().err


@pytest.mark.parametrize("path", real_trace_paths(), ids=lambda p: p.stem)
def test_sampled_plan_on_the_real_traces(path):
    # The shared Mooncake traces (prefix-chained): at rate 1 the estimate is the exact plan; at 0.1
    # every working set and coverage quantile is within 5% (plus the sample's resolution of 1/R
    # blocks) of the exact one, and the counts and ceilings are exact.
    from stackdist.traces import read_mooncake

    trace = read_mooncake(path)
    exact = plan(trace, PlanOptions()).plan
    same = plan(trace, PlanOptions(), Sampled(rate=1.0, seeds=1)).plan
    near = plan(trace, PlanOptions(), Sampled(rate=0.1, seeds=2)).plan
    assert near["trace"] == exact["trace"]
    for name in ("engine", "per-access"):
        e, s, n = exact["semantics"][name], same["semantics"][name], near["semantics"][name]
        assert s["working_set"] == e["working_set"] and s["coverage"] == e["coverage"]
        assert n["summary"] | {"saturation_blocks": 0} == e["summary"] | {"saturation_blocks": 0}
        for row_e, row_n in zip(e["working_set"], n["working_set"], strict=True):
            want, have = row_e["fraction_of_ceiling"]["blocks"], row_n["fraction_of_ceiling"]["blocks"]
            assert abs(have - want) <= 0.05 * want + 10, (name, row_e["target"], have, want)
        for q, cap in e["coverage"]["requests_with_reuse"].items():
            have = n["coverage"]["requests_with_reuse"][q]["blocks"]
            assert abs(have - cap["blocks"]) <= 0.05 * cap["blocks"] + 10, (name, q, have, cap["blocks"])
