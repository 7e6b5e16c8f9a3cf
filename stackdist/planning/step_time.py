"""How long one scheduler step lasts: ``fixed + T x per_token`` seconds for a step that schedules
T tokens (the plan's scheduler schedule), and where the two numbers come from, in the order the
command line tries them:

1. Given by the user.
2. A TTFT calibration file: the fit ``a + b x uncached tokens`` of that file (``a`` the fixed
   part, ``b`` per token), as measured, not rescaled.
3. An H200 with the model the bundled fixtures measured (Qwen2.5-1.5B shapes, the default
   model): the same fit to ``data/ttft.jsonl`` (one H200, HF eager, batch 1: a = 29.1 ms is mostly
   the host's launch floor, b = 1.67 us per token; ``data/fixtures/README.md``).
4. A GPU and a catalog model: the planner's roofline (:class:`~.hardware.RooflineTTFT`).
   The fixed part is one read of the weights from HBM (``weights / (TP x HBM bandwidth)``: every
   step, decode included, reads them once) plus the TTFT model's fixed overhead. The per-token part is the
   token-weighted mean over the trace of a prompt token's cost (``2 x active params`` plus its
   attention, at the trace's mean number of keys a prompt token sees, over ``TP x peak x
   efficiency``) and, with decode, a generated token's (the same compute plus reading its
   request's KV, ``(P + O / 2) x KV bytes per token / (TP x HBM bandwidth)``). A linear
   stand-in for a step whose true cost is ``max(compute, memory)`` and depends on the batch's
   mix: it over-counts a step by at most the fixed part and is exact for neither pure prefill nor
   pure decode.
5. Otherwise 0.020 s + 10 us per token: an assumption, said so.

Hits shorten the prefill because the scheduler schedules only the uncached tokens (a request
admitted with a hit of h tokens computes ``P - h``), so no term here counts them.

>>> s = step_time_from_calibration(CalibratedTTFT(29.0, 0.002), "data/ttft.jsonl")
>>> round(s.fixed_s, 6), round(s.per_token_s, 9), s.source
(0.029, 2e-06, 'calibration')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from stackdist.errors import UsageError
from stackdist.traces import RequestTrace

from .hardware import (
    CalibratedTTFT,
    RooflineTTFT,
    calibration_rows,
    fit_calibration,
    sliding_pairs,
)

__all__ = ["ASSUMED", "StepTime", "bundled_h200_fit", "parse_step_time", "step_time_from_calibration",
           "step_time_from_roofline"]

FIXTURE_MODEL, FIXTURE_GPU = "qwen2.5-1.5b", "h200"


@dataclass(frozen=True)
class StepTime:
    """A step of T scheduled tokens lasts ``fixed_s + T x per_token_s``; ``source`` is given,
    calibration, h200-fixture, roofline or assumed; ``detail`` says how it was derived."""

    fixed_s: float
    per_token_s: float
    source: str
    detail: str


ASSUMED = StepTime(0.020, 0.00001, "assumed", "an assumed step time (nothing given to derive it from)")


def parse_step_time(text: str, flag: str) -> StepTime:
    """``FIXED_S,PER_TOKEN_S`` as given; a UsageError naming ``flag`` otherwise.

    >>> parse_step_time("0.02,1e-5", "the step time").per_token_s
    1e-05
    """
    try:
        fixed, per_token = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} must be FIXED_S,PER_TOKEN_S (two numbers of seconds); got {text!r}.") from None
    if not (0 <= fixed < float("inf") and 0 <= per_token < float("inf") and fixed + per_token > 0):
        raise UsageError(f"{flag} must be two non-negative finite seconds, not both 0; got {text!r}.")
    return StepTime(fixed, per_token, "given", f"given ({flag})")


def step_time_from_calibration(model: CalibratedTTFT, where: str, source: str = "calibration") -> StepTime:
    """The fit's fixed part and per-uncached-token slope; a fit with a negative part cannot be a
    step time (ValueError)."""
    fixed, per_token = model.a_ms / 1e3, model.b_ms_per_token / 1e3
    if fixed < 0 or per_token < 0 or fixed + per_token <= 0:
        raise ValueError(f"the TTFT fit to {where} ({model.a_ms:.3g} ms + {model.b_ms_per_token:.3g} ms per token) has a "
                         "negative part and cannot be a step time")
    rmse = (model.fit or {}).get("rmse_ms")
    return StepTime(fixed, per_token, source, f"fit to {where}: {model.a_ms:.2f} ms + {model.b_ms_per_token * 1e3:.3f} us "
                    f"per uncached token{f' (rmse {rmse:.1f} ms)' if rmse is not None else ''}, one request at a time, not rescaled")


def bundled_h200_fit() -> CalibratedTTFT | None:
    """The fit to the bundled H200 measurements (``data/ttft.jsonl``), or None when not installed."""
    try:
        text = (resources.files("kvlab") / "data" / "ttft.jsonl").read_text()
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        return None
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return fit_calibration(calibration_rows(records, "data/ttft.jsonl"), "data/ttft.jsonl")


def step_time_from_roofline(model: RooflineTTFT, trace: RequestTrace, decode: bool) -> StepTime:
    """Module docstring, item 4: weights read once per step, and the trace's token-weighted mean
    cost of a prompt and (with decode) a generated token."""
    spec, g, gpu, tp = model.spec, model.spec.geometry, model.gpu, model.tensor_parallel
    active, weights, per_pair = spec.active, spec.weights_bytes, spec.attention_flops_per_pair
    if active is None or weights is None or not per_pair:
        raise ValueError("a step time from the GPU needs the model's parameter count and attention shapes (a catalog "
                         "model)")
    P = trace.input_length.astype(np.float64)
    O = np.maximum(trace.output_length.astype(np.float64), 1) - 1 if decode else np.zeros_like(P)
    prompt = max(P.sum(), 1.0)
    keys_full = float((P * (P + 1) / 2).sum() / prompt)  # keys a prompt token sees, on average
    keys_slide = float(sliding_pairs(0, P, g.sliding_window).sum() / prompt) if g.is_hybrid and g.sliding_window else 0.0
    flops_rate = tp * model.peak_flops * model.efficiency
    hbm = tp * gpu.hbm_gbps * 1e9

    def compute(keys_f: float, keys_s: float) -> float:
        attention = per_pair * (g.num_full_layers * keys_f + g.num_sliding_layers * keys_s)
        return (2 * active + attention) / flops_rate

    per_prompt = compute(keys_full, keys_slide)
    per_token = per_prompt
    generated = float(O.sum())
    if generated > 0:
        context = float(((P + O / 2) * O).sum() / generated)
        window = min(context, g.sliding_window) if g.is_hybrid and g.sliding_window else 0.0
        kv_read = (context * g.kv_bytes_per_token + window * g.sliding_bytes_per_token) / hbm
        per_decode = compute(context, window) + kv_read
        per_token = (per_prompt * float(P.sum()) + per_decode * generated) / (float(P.sum()) + generated)
    fixed = weights / hbm + model.overhead_ms / 1e3
    detail = (f"roofline of {spec.name} on {tp} x {gpu.name}: {fixed * 1e3:.2f} ms per step (weights read once"
              + (f" + {model.overhead_ms:g} ms overhead" if model.overhead_ms else "")
              + f") + {per_token * 1e6:.2f} us per token ({per_prompt * 1e6:.2f} us per prompt token at "
              f"{model.efficiency:g} of {model.peak_flops / 1e12:.0f} TFLOP/s"
              + (f", {per_decode * 1e6:.1f} us per generated token with its KV read" if generated > 0 else "")
              + "); an estimate, not a measurement")
    return StepTime(fixed, per_token, "roofline", detail)


def describe(step: StepTime) -> dict[str, Any]:
    """The JSON form."""
    return {"fixed_s": step.fixed_s, "per_token_s": step.per_token_s, "source": step.source, "detail": step.detail}
