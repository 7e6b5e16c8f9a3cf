"""How the product routers turn per-worker scores into one worker: Dynamo's sampler, llm-d's picker.

**Dynamo** (github.com/ai-dynamo/dynamo; the repository is over the snapshot size limit here, so it
was read file by file from the code index, without line numbers). ``lib/llm/src/kv_router/
scheduler.rs`` at commit db19bd2a (``softmax_sample``, ``DefaultWorkerSelector::select_worker``):
the logits of :mod:`.routed` (lower is better) are sampled with ``router_temperature``
(``KvRouterConfig`` default 0.0):

- ``T == 0``: the workers of the smallest logit; among several, one uniformly at random. The
  current selector (``lib/kv-router/src/scheduling/selector/default.rs`` at 07a6c9ce,
  ``minimum_cost_index``: a reservoir choice, each later tie replacing the pick with
  probability 1 / ties) is uniform among equal costs; db19bd2a first prefers the tie with the
  smallest indexer tree (``overlaps.tree_sizes``), which is not modelled. Dynamo has no
  deterministic tie rule (its candidates come out of a ``HashMap``), so none is kept here.
- ``T > 0``: all logits equal -> uniform; else ``p_w = softmax(-logit_w / (max - min) / T)``
  (the largest scaled value subtracted before ``exp``); the worker is the first whose
  cumulative probability reaches a uniform ``sample`` in [0, 1), the last if rounding leaves
  the sum short (db19bd2a ``softmax_sample``; 07a6c9ce ``softmax_sample_index``, the same).
  (An older version also divided every logit by the largest one first; with the ``max - min``
  scaling that changes nothing.)

**llm-d** (github.com/llm-d/llm-d-inference-scheduler at 520af478, ``max-score-picker``,
``pkg/epp/framework/plugins/scheduling/picker/maxscore/picker.go:91-106``): the endpoints are
shuffled, then stably sorted by score, highest first, and the first is taken: a uniform choice
among the endpoints of the highest total score (``maxNumOfEndpoints`` 1).

**The random draws**: one uniform ``u`` in [0, 1) per request, ``u = np.random.default_rng(seed)
.random(n)`` (:func:`router_draws`), used at that request's arrival whether or not it is needed,
so a run is reproducible from ``seed`` and a reference simulation can use the same draws. Among
``m`` tied workers (in index order) the choice is the ``floor(u * m)``-th; with a temperature,
``u`` is the ``sample`` of the cumulative rule (Dynamo's own keys come in hash order; the
distribution is the same).

>>> import numpy as np
>>> int(dynamo_pick(np.array([3.0, 1.0, 1.0]), 0.7, 0.0))   # ties 1 and 2: floor(0.7 x 2) = 1 -> worker 2
2
>>> int(llmd_pick(np.array([0.5, 2.0, 2.0, 1.0]), 0.2))     # ties 1 and 2: floor(0.2 x 2) = 0 -> worker 1
1
"""

from __future__ import annotations

import math

import numpy as np

from stackdist.engine.kernels import njit

__all__ = ["DEFAULT_TEMPERATURE", "LLMD_WEIGHTS", "LLM_D", "describe_dynamo", "describe_llmd", "dynamo_pick", "llmd_pick",
           "llmd_weights", "router_draws"]

DEFAULT_TEMPERATURE = 0.0
"""Dynamo's ``KvRouterConfig::router_temperature`` default."""
LLM_D = "llm-d"
"""llm-d's scheduler as a router name (:mod:`.routed`)."""
LLMD_WEIGHTS = {"prefix": 2.0, "kv-cache": 1.0, "queue": 1.0}
"""llm-d's scorer weights in the precise-prefix-cache sample configuration
(``deploy/config/epp-precise-prefix-cache-config.yaml`` at 520af478: ``precise-prefix-cache-scorer``
2.0, ``kv-cache-utilization-scorer`` 1.0, ``queue-scorer`` 1.0), in the profile's order."""


def llmd_weights(weights: dict[str, float] | None = None) -> np.ndarray:
    """The three weights (prefix, kv-cache, queue) as the kernels take them: :data:`LLMD_WEIGHTS`
    updated by ``weights``; ValueError on an unknown key or a negative or non-finite weight.

    >>> llmd_weights({"queue": 0.5}).tolist()
    [2.0, 1.0, 0.5]
    """
    merged = dict(LLMD_WEIGHTS)
    for name, value in (weights or {}).items():
        if name not in LLMD_WEIGHTS:
            raise ValueError(f"llm-d weights are {', '.join(LLMD_WEIGHTS)}; got {name!r}")
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"llm-d weight {name} must be a finite non-negative number; got {value!r}")
        merged[name] = float(value)
    return np.array([merged[k] for k in LLMD_WEIGHTS], np.float64)


def describe_dynamo(weight: float, temperature: float, seed: int) -> str:
    """Dynamo's KV router as run, in words (the plan's ``cluster.kv_aware``).

    >>> describe_dynamo(1.0, 0.0, 0)
    "Dynamo's KV-router logit: 1 x prefill blocks still to compute + active blocks, the least wins (router_temperature 0), ties uniformly at random (seed 0)"
    """
    cost = ("minus the prefix hit the engine would report (the longest-prefix router)" if math.isinf(weight) else
            f"{weight:g} x prefill blocks still to compute + active blocks")
    rule = ("the least wins (router_temperature 0), ties uniformly at random" if temperature == 0 else
            f"sampled by softmax(-logit / (max - min) / {temperature:g}) (router_temperature {temperature:g})")
    return f"Dynamo's KV-router logit: {cost}, {rule} (seed {seed})"


def describe_llmd(weights: dict[str, float] | None, seed: int) -> str:
    """llm-d's scheduler as run, in words (the plan's ``cluster.llm_d``).

    >>> describe_llmd(None, 0).split(";")[0]
    'llm-d scheduler: 2 x precise prefix-cache score (full prompt blocks the engine holds / prompt blocks) + 1 x (1 - KV usage) + 1 x queue score ((max - waiting) / (max - min))'
    """
    w = dict(zip(LLMD_WEIGHTS, llmd_weights(weights).tolist()))
    return (f"llm-d scheduler: {w['prefix']:g} x precise prefix-cache score (full prompt blocks the engine holds / "
            f"prompt blocks) + {w['kv-cache']:g} x (1 - KV usage) + {w['queue']:g} x queue score ((max - waiting) / "
            f"(max - min)); the highest wins, ties uniformly at random (seed {seed})")


def router_draws(n: int, seed: int) -> np.ndarray:
    """One uniform draw in [0, 1) per request, the routers' only randomness (module docstring).

    >>> router_draws(3, 0).tolist() == np.random.default_rng(0).random(3).tolist()
    True
    """
    return np.random.default_rng(int(seed)).random(int(n))


@njit(cache=True, nogil=True)
def _tied(values, best, u):  # type: ignore[no-untyped-def]
    """The ``floor(u * m)``-th (in index order) of the ``m`` entries equal to ``best``."""
    m = 0
    for v in range(values.size):
        if values[v] == best:
            m += 1
    pick = min(math.floor(u * m), m - 1)
    for v in range(values.size):
        if values[v] == best:
            if pick == 0:
                return v
            pick -= 1
    return values.size - 1


@njit(cache=True, nogil=True)
def dynamo_pick(cost, u, temperature):  # type: ignore[no-untyped-def]
    """Dynamo's worker for logits ``cost`` (lower is better), draw ``u``, ``temperature``
    (module docstring). O(K)."""
    lo, hi = np.inf, -np.inf
    for v in range(cost.size):
        lo = min(lo, cost[v])
        hi = max(hi, cost[v])
    if temperature == 0.0:
        return _tied(cost, lo, u)
    K = cost.size
    p = np.empty(K)
    if lo == hi:
        p[:] = 1.0 / K
    else:
        top = -np.inf
        for v in range(K):
            p[v] = -(cost[v] / (hi - lo)) / temperature
            top = max(top, p[v])
        total = 0.0
        for v in range(K):
            p[v] = math.exp(p[v] - top)
            total += p[v]
        for v in range(K):
            p[v] = p[v] / total
    acc = 0.0
    for v in range(K):
        acc += p[v]
        if u <= acc:
            return v
    return K - 1


@njit(cache=True, nogil=True)
def llmd_pick(score, u):  # type: ignore[no-untyped-def]
    """llm-d's max-score picker: uniformly among the highest ``score`` (draw ``u``). O(K)."""
    hi = -np.inf
    for v in range(score.size):
        hi = max(hi, score[v])
    return _tied(score, hi, u)
