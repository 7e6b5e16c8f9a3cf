"""The pool a hit-rate target needs for a model with a hybrid KV cache (vLLM's full attention beside
sliding-window, chunked-local or Mamba groups, :mod:`stackdist.serving.hybrid`), and what the
other groups cost: the same search for the full-attention group(s) alone.

**Targets.** A target ``t`` asks for ``ceil(t x C)`` hit tokens over the counted requests, ``C``
the *full-attention ceiling*: the hit tokens of the full-attention group(s) alone with a pool
that never evicts (what the prefix cache could give if the other groups cost nothing; for a model
with no full-attention group, the hybrid's own ceiling). The full-attention working-set rows of
a plain model answer the same fractions of their own ceiling, so the two columns side by side
answer the same hit tokens, and their difference is the blocks the window / chunk / Mamba groups
cost. A target above the hybrid's ceiling (its hits with a pool that never evicts, every block of
every group kept) is reported unreachable, with that ceiling. Each row also answers the same
fraction of the hybrid's own ceiling (``of_own_ceiling``, always reachable).

**Search, not proof.** Each probe is one exact run of the engine model's hybrid cache (vLLM's:
the compiled :mod:`stackdist.serving.hybrid_kernel`) at one pool size. Per target the
bracket ``(lo, hi]`` starts at ``(min_pool - 1, never-evicting pool]`` (the run's own pools are
probes already); each round probes the geometric midpoints of every open bracket, until
``hi = lo + 1`` or ``hi <= lo x 1.01`` (:data:`PRECISION`). The answer is the smallest *probed*
pool reaching the target whose lower bracket end was probed and does not. Hits are not proved
monotone in the pool for a hybrid cache (evicting a window block can make room that keeps a
full-attention block, and the junction rule makes hits depend on what was cut before), so a
smaller unprobed pool may reach a target too: the section says so, and lists every pair of probes
where a larger pool hit less (``non_monotone``), so the user sees whether the probes contradict
the bracket.

>>> from stackdist.traces import RequestTrace
>>> from stackdist.serving.hybrid import GroupSpec, kv_cache_groups
>>> from stackdist.serving.hybrid_kernel import simulate_hybrid_fast
>>> t = RequestTrace.from_blocks([[1, 2, 3], [1, 2, 3], [1, 2, 3]], block_size=16, last_tokens=[8, 8, 8])
>>> g = kv_cache_groups([GroupSpec("sliding", 16, window=16), GroupSpec("full", 16)])
>>> run = lambda groups, pools: simulate_hybrid_fast(t, groups, pools)
>>> ws = hybrid_search(t, g, run, False, np.ones(3, bool), 16 * 1024, [0.5, 1.0])
>>> [(r["reachable"], r["gpu_blocks"], r["full_attention"]["gpu_blocks"]) for r in ws["rows"]]
[(True, 7, 4), (True, 7, 4)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stackdist.serving.hybrid import GroupSpec
from stackdist.serving.hybrid_kernel import never_evicting_pool
from stackdist.serving.pages import engine_pages
from stackdist.serving.results import ServingResult
from stackdist.traces import RequestTrace

__all__ = ["PRECISION", "Simulate", "bisect_targets", "hybrid_search", "non_monotone"]

Simulate = Callable[[tuple[GroupSpec, ...], list[int | None]], ServingResult]
"""An engine model's hybrid run: (its KV cache groups, pools) -> per-pool, per-request hits."""

PRECISION = 0.01
"""The search stops when a bracket ``(lo, hi]`` is within this relative width (or one pool)."""

def bisect_targets(known: dict[int, int], needs: Sequence[int], probe: Callable[[list[int]], list[int]], floor: int,
                   upper: int, progress: Callable[[str], None] | None = None, what: str = "") -> int:
    """Probe pools until each need's bracket ``(lo, hi]`` is closed (module docstring). ``known``
    maps a probed pool to its hit tokens (-1: infeasible) and must hold ``upper`` (whose hits reach
    every need searched); it is filled in place. Returns the rounds. O(rounds x needs) probes.

    >>> known = {100: 10}
    >>> bisect_targets(known, [5], lambda pools: [p // 10 for p in pools], 1, 100)
    8
    >>> min(p for p, h in known.items() if h >= 5)
    50
    """
    rounds = 0
    while True:
        todo = sorted({_middle(lo, hi) for lo, hi in (bracket(known, n, floor, upper) for n in needs)
                       if hi - lo > 1 and hi > lo * (1 + PRECISION)})
        if not todo:
            return rounds
        if progress is not None:
            progress(f"{what}round {rounds + 1}, pools {', '.join(map(str, todo))}")
        for pool, hits in zip(todo, probe(todo), strict=True):
            known[pool] = hits
        rounds += 1


def bracket(known: dict[int, int], need: int, floor: int, upper: int) -> tuple[int, int]:
    """``(lo, hi]``: hi the smallest probed pool reaching ``need``, lo the largest probed pool
    below it that does not (or ``floor``). O(probes)."""
    hi = min((p for p, h in known.items() if h >= need), default=upper)
    lo = max((p for p, h in known.items() if p < hi and h < need), default=floor)
    return lo, hi


def _middle(lo: int, hi: int) -> int:
    mid = round(math.sqrt(lo * hi)) if lo >= 1 else (lo + hi) // 2
    return min(max(mid, lo + 1), hi - 1)


def non_monotone(known: dict[int, int]) -> list[dict[str, int]]:
    """Each feasible probe that hit less than a smaller feasible probe, with the smaller pool that
    hit the most before it. O(probes log probes).

    >>> non_monotone({2: 5, 3: 4, 4: 6})
    [{'smaller_pool': 2, 'smaller_hit_tokens': 5, 'pool': 3, 'hit_tokens': 4}]
    """
    out = []
    best_pool, best = 0, -1
    for pool, hits in sorted(known.items()):
        if hits < 0:
            continue
        if hits < best:
            out.append({"smaller_pool": best_pool, "smaller_hit_tokens": best, "pool": pool, "hit_tokens": hits})
        elif hits > best:
            best_pool, best = pool, hits
    return out


def hybrid_search(trace: RequestTrace, groups: Sequence[GroupSpec], simulate: Simulate, decode: bool,
                  counted: np.ndarray, block_bytes: int, targets: Sequence[float],
                  known: dict[int | None, int] | None = None, progress: Callable[[str], None] | None = None,
                  min_pool: int = 2) -> dict[str, Any]:
    """The working-set section of a hybrid model (module docstring): per target the smallest probed
    pool whose exact hybrid run reaches it, or why not, beside the full-attention group's own.
    ``simulate(groups, pools)`` is the engine model's hybrid run (every pool exact; None: a pool
    that never evicts); ``known`` the counted hit tokens of pools already run (-1 infeasible);
    ``block_bytes`` one block's bytes (one group's layers); ``min_pool`` the smallest pool there is.
    Complexity: O(probes) runs of the model.
    """
    pages = engine_pages(trace, 16)
    full = tuple(g for g in groups if g.kind == "full")
    input_tokens = int(trace.input_length[counted].sum())

    def rate(hits: int) -> float:
        return hits / input_tokens if input_tokens else 0.0

    def point(pool: int, hits: int) -> dict[str, Any]:
        return {"gpu_blocks": int(pool), "gib": pool * block_bytes / 2**30, "hit_tokens": int(hits),
                "prefix_token_hit_rate": rate(hits)}

    def searcher(model: tuple[GroupSpec, ...], given: dict[int | None, int]) -> tuple[Any, ...]:
        count = [0]

        def probe(pools: list[int | None]) -> list[int]:
            count[0] += len(pools)
            r = simulate(model, pools)
            return [int(r.hit_tokens[i][counted].sum()) if r.failed_request[i] < 0 else -1 for i in range(len(pools))]

        state = {int(p): h for p, h in given.items() if p is not None}
        ceiling = given[None] if None in given else probe([None])[0]
        upper = never_evicting_pool(pages, model, decode)  # the pool None stands for: nothing is evicted
        state[upper] = ceiling
        return state, ceiling, upper, probe, count

    hyb, hyb_ceiling, hyb_upper, hyb_probe, hyb_count = searcher(tuple(groups), dict(known or {}))
    if full and len(full) < len(groups):
        fa, fa_ceiling, fa_upper, fa_probe, fa_count = searcher(full, {})
    else:
        fa, fa_ceiling, fa_upper, fa_probe, fa_count = hyb, hyb_ceiling, hyb_upper, hyb_probe, hyb_count
    if hyb_ceiling < 0 or fa_ceiling < 0:  # a pool that never evicts cannot fail (it holds every block written)
        return {"skipped": "the model cannot run the trace even with a pool that never evicts"}
    needs = [math.ceil(t * fa_ceiling - 1e-9) for t in targets]
    floor = min_pool - 1
    own = [math.ceil(t * hyb_ceiling - 1e-9) for t in targets]
    rounds = bisect_targets(hyb, [n for n in needs if n <= hyb_ceiling] + own, hyb_probe, floor, hyb_upper, progress,
                            "vllm hybrid model: working sets, ")
    if fa is not hyb:
        rounds += bisect_targets(fa, needs, fa_probe, floor, fa_upper, progress,
                                 "vllm full-attention group(s) alone: working sets, ")

    def answer(known: dict[int, int], need: int, upper: int) -> dict[str, Any]:
        lo, hi = bracket(known, need, floor, upper)
        return {**point(hi, known[hi]), "one_smaller": None if lo <= floor else
                {"gpu_blocks": lo, "feasible": known[lo] >= 0, "hit_tokens": known[lo] if known[lo] >= 0 else None}}

    rows = []
    for t, need, mine in zip(targets, needs, own, strict=True):
        fa_row = answer(fa, need, fa_upper)
        row: dict[str, Any] = {"fraction_of_ceiling": t, "hit_tokens_needed": need, "reachable": need <= hyb_ceiling}
        if need <= hyb_ceiling:
            row.update(answer(hyb, need, hyb_upper))
            row["other_groups_cost_blocks"] = row["gpu_blocks"] - fa_row["gpu_blocks"]
            row["other_groups_cost_gib"] = row["gib"] - fa_row["gib"]
        else:
            row.update(gpu_blocks=None, gib=None, hit_tokens=None, prefix_token_hit_rate=None, one_smaller=None,
                       other_groups_cost_blocks=None, other_groups_cost_gib=None,
                       unreachable=(f"the hybrid cache hits {hyb_ceiling:,} tokens ({rate(hyb_ceiling):.2%}) with a pool "
                                    f"that never evicts ({hyb_upper:,} blocks), below the {need:,} this target needs"))
        row["full_attention"] = fa_row
        row["of_own_ceiling"] = {"hit_tokens_needed": mine, **answer(hyb, mine, hyb_upper)}
        rows.append(row)
    probes = hyb_count[0] + (fa_count[0] if fa is not hyb else 0)
    odd = non_monotone(hyb)
    return {
        "method": "bisection", "exact": False, "probes": probes, "rounds": rounds,
        "targets_of": ("the full-attention group(s) alone with a pool that never evicts" if fa is not hyb else
                       "this model's own ceiling (no full-attention group beside the others)"),
        "full_attention_ceiling_hit_tokens": fa_ceiling,
        "full_attention_ceiling_prefix_token_hit_rate": rate(fa_ceiling),
        "ceiling_hit_tokens": hyb_ceiling, "ceiling_prefix_token_hit_rate": rate(hyb_ceiling),
        "search": (f"a search, not a proof: bisection over pools {min_pool}..{hyb_upper:,} ({hyb_upper:,} never "
                   f"evicts), every probe an exact run of the hybrid cache ({probes} runs, the full-attention group(s) "
                   f"alone searched the same way, geometric midpoints to within {PRECISION:.0%} or one pool); each answer "
                   "is the smallest probed pool reaching the target, the bracket's lower end probed and not reaching it; "
                   "hits are not proved monotone in the pool for a hybrid cache, so a smaller unprobed pool may reach it "
                   + ("too; the probes never saw a larger pool hit less" if not odd else
                      f"too, and {len(odd)} probe(s) hit less than a smaller probed pool (non_monotone)")),
        "non_monotone": odd, "min_feasible_pool": None, "rows": rows,
        "points": [point(p, h) for p, h in sorted(hyb.items()) if h >= 0 and p != hyb_upper],
        "full_attention_points": [point(p, h) for p, h in sorted(fa.items()) if h >= 0 and p != fa_upper],
    }
