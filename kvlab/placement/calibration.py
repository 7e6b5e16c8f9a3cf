"""Latency model and its calibration from the H200 measurements in ``data/fixtures/``.

Every default below is either derived from a named file and field (``derive_from_fixtures``
recomputes it; the tests check the constants against it) or labelled an ASSUMPTION. The
hardware's cost and the framework's host overhead are kept apart:

- Hardware (the default model, "an engine with CUDA graphs and paged attention"): GPU work
  from ``torch.profiler`` (sum of CUDA kernel and memcpy time), not wall time.
  * prefill: weighted least squares (weights 1/t, i.e. relative error) of
    ``gpu_busy_h200.json rows[].miss.profiler_gpu_ms`` against the prefilled tokens
    ``rows[].doc_tokens + rows[].question_tokens`` with ``t = a + b*n + c*n^2`` (7 points,
    544..32032 tokens, every residual within 3%). With ``n_cached`` tokens already cached the
    attention term counts the new token pairs: ``a + b*n + c*(n^2 + 2*n*n_cached)``.
  * decode: least squares of ``gpu_busy_h200.json rows[].decode_step.profiler_gpu_ms``
    against the context ``doc_tokens + question_tokens``: ``t = a + b*context``.
  * host-to-device: least squares of ``tier_latency_h200.json rows[].h2d_ms`` against
    ``rows[].kv_bytes``; the slope gives the bandwidth, the intercept the per-transfer latency.
- Framework (HuggingFace eager; only in :meth:`LatencyModel.hf_eager`):
  * host floor: the smallest hit wall time, min over ``tier_latency_h200.json`` rows of
    ``gpu_hit_ttft_ms`` and ``cpu_hit_ttft_ms`` (hit TTFT never went below it);
  * launch overhead of GPU-bound prefills: median over ``partial_prefix_h200.json`` rows with
    ``prefill_tokens >= 2464`` of ``gpu_prefix.wall_ms_median - gpu_prefix.gpu_work_ms``;
  * cached-prefix penalty (HF builds a mask and takes a non-flash SDPA path when a prefix is
    cached): median over ``partial_prefix_h200.json`` rows with ``P > 0`` of
    ``gpu_prefix.gpu_work_ms`` minus the hardware prefill model.
- ASSUMPTIONS (not measured here): device-to-host bandwidth equals host-to-device; NVMe
  read 7.0 GB/s, write 5.0 GB/s, 0.08 ms per transfer (a PCIe 4.0 x4 datacenter SSD).

>>> m = LatencyModel()
>>> round(m.prefill_ms(4896), 1)  # measured GPU work: 34.72 ms
34.6
>>> round(m.transfer_ms("h2d", 139460608), 2)  # a 4864-token document; measured 2.558 ms
2.57
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_FIXTURES",
    "FIXTURE_KV_BYTES_PER_TOKEN",
    "LatencyModel",
    "derive_from_fixtures",
    "kv_bytes_per_token",
]

#: ``tier_latency_h200.json kv_bytes_per_token`` (2 x 28 layers x 2 KV heads x 128 x 2 bytes).
FIXTURE_KV_BYTES_PER_TOKEN = 28672
#: Where the measurements live in a checkout.
DEFAULT_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"  # package data (kvlab/data)

LINKS = ("h2d", "d2h", "nvme_read", "nvme_write")


@dataclass(frozen=True)
class LatencyModel:
    """Prefill, decode and transfer times; every field can be overridden (``replace``)."""

    # Hardware: prefill GPU work, gpu_busy_h200.json rows[].miss.profiler_gpu_ms (fit above).
    prefill_fixed_ms: float = 3.0680
    prefill_ms_per_token: float = 5.6767e-3
    prefill_ms_per_token_pair: float = 1.5600e-7
    # Hardware: decode step GPU work, gpu_busy_h200.json rows[].decode_step.profiler_gpu_ms.
    decode_fixed_ms: float = 3.1500
    decode_ms_per_context_token: float = 2.6824e-5
    # Hardware: pinned host-to-device copy, tier_latency_h200.json rows[].h2d_ms vs kv_bytes.
    h2d_gbps: float = 55.341
    h2d_latency_ms: float = 0.0478
    # ASSUMPTION: device-to-host as host-to-device (not measured without allocation noise).
    d2h_gbps: float = 55.341
    d2h_latency_ms: float = 0.0478
    # ASSUMPTION: NVMe SSD (PCIe 4.0 x4 datacenter drive); not measured here.
    nvme_read_gbps: float = 7.0
    nvme_write_gbps: float = 5.0
    nvme_latency_ms: float = 0.08
    # Framework overheads (0 = hardware only); see hf_eager().
    host_floor_ms: float = 0.0
    launch_overhead_ms: float = 0.0
    cached_prefix_penalty_ms: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite non-negative number, got {value!r}.")
        for name in ("h2d_gbps", "d2h_gbps", "nvme_read_gbps", "nvme_write_gbps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}.")

    @classmethod
    def hf_eager(cls, **overrides: float) -> LatencyModel:
        """The hardware model plus HF-eager host overhead, as measured (see module docstring)."""
        base = {"host_floor_ms": 21.43, "launch_overhead_ms": 4.646, "cached_prefix_penalty_ms": 5.581}
        base.update(overrides)
        return cls(**base)

    def with_overrides(self, **overrides: float) -> LatencyModel:
        """A copy with some fields replaced (unknown names raise TypeError)."""
        return replace(self, **overrides)

    def gpu_prefill_ms(self, n_new: int, n_cached: int = 0) -> float:
        """GPU work to prefill ``n_new`` tokens on top of ``n_cached`` cached tokens."""
        pairs = n_new * n_new + 2 * n_new * n_cached
        work = self.prefill_fixed_ms + self.prefill_ms_per_token * n_new + self.prefill_ms_per_token_pair * pairs
        if n_cached > 0:
            work += self.cached_prefix_penalty_ms
        return work

    def prefill_ms(self, n_new: int, n_cached: int = 0) -> float:
        """Prefill time: GPU work plus launch overhead, never below the host floor."""
        return max(self.host_floor_ms, self.gpu_prefill_ms(n_new, n_cached) + self.launch_overhead_ms)

    def decode_ms(self, context_tokens: float) -> float:
        """One decode step's compute at a context of ``context_tokens`` (batch one)."""
        return self.decode_fixed_ms + self.decode_ms_per_context_token * context_tokens

    def transfer_ms(self, link: str, nbytes: float) -> float:
        """Time of one transfer of ``nbytes`` over ``link`` (0 for nothing to move)."""
        if nbytes <= 0:
            return 0.0
        if link == "h2d":
            gbps, latency = self.h2d_gbps, self.h2d_latency_ms
        elif link == "d2h":
            gbps, latency = self.d2h_gbps, self.d2h_latency_ms
        elif link == "nvme_read":
            gbps, latency = self.nvme_read_gbps, self.nvme_latency_ms
        elif link == "nvme_write":
            gbps, latency = self.nvme_write_gbps, self.nvme_latency_ms
        else:
            raise ValueError(f"link must be one of {', '.join(LINKS)}; got {link!r}.")
        return latency + nbytes / (gbps * 1e6)

    def to_dict(self) -> dict[str, float]:
        """The fields as a plain dict (for JSON reports)."""
        return asdict(self)


def kv_bytes_per_token() -> int:
    """KV bytes per token of the measured model, from the planner's geometry when present.

    ``stackdist.planning.geometry.DEFAULT_MODEL.kv_bytes_per_token``; if that module is not installed,
    the fixture's ``kv_bytes_per_token`` (28672), which is the same model.
    """
    try:
        from stackdist.planning.geometry import DEFAULT_MODEL  # type: ignore[import-not-found]
    except ImportError:
        return FIXTURE_KV_BYTES_PER_TOKEN
    return int(DEFAULT_MODEL.kv_bytes_per_token)


def _load(directory: Path, name: str) -> Any:
    """The JSON of one fixture; FileNotFoundError when it is missing, ValueError naming the file
    (and line) when it is unreadable, not UTF-8, not JSON, or holds an integer too long to read."""
    path = Path(directory) / name
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: calibration fixture not found.") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the calibration fixture: {exc.strerror or exc}.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x}).") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}).") from None
    except ValueError:  # an integer beyond Python's 4300-digit limit
        raise ValueError(f"{path}: a number has more than 4300 digits.") from None


def _rows(data: Any, path: Path, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """``data["rows"]``, each row checked to hold ``fields`` (``a.b`` for nested) as finite
    numbers; ValueError naming the file, row and field."""
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: rows must be a non-empty list of measurements.")
    for index, row in enumerate(rows):
        for field in fields:
            value: Any = row
            for part in field.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(float(value)):
                raise ValueError(f"{path}: rows[{index}].{field} must be a finite number, got {value!r}.")
    return rows


def derive_from_fixtures(directory: str | Path = DEFAULT_FIXTURES) -> dict[str, float]:
    """Recompute every measured default of :class:`LatencyModel` from the fixture files.

    Returns a dict of field name -> value (hardware fields, plus the three HF-eager fields).
    A missing fixture is a FileNotFoundError, an unreadable or malformed one a ValueError, each
    naming the file (and the line, or the row and field). O(rows).
    """
    directory = Path(directory)
    busy = _rows(_load(directory, "gpu_busy_h200.json"), directory / "gpu_busy_h200.json",
                 ("doc_tokens", "question_tokens", "miss.profiler_gpu_ms", "decode_step.profiler_gpu_ms"))
    n = np.array([r["doc_tokens"] + r["question_tokens"] for r in busy], dtype=float)
    miss = np.array([r["miss"]["profiler_gpu_ms"] for r in busy], dtype=float)
    design = np.stack([np.ones_like(n), n, n * n], axis=1)
    weight = 1.0 / miss
    a, b, c = np.linalg.lstsq(design * weight[:, None], miss * weight, rcond=None)[0]
    decode = np.array([r["decode_step"]["profiler_gpu_ms"] for r in busy], dtype=float)
    d_slope, d_fixed = np.polyfit(n, decode, 1)
    tiers = _rows(_load(directory, "tier_latency_h200.json"), directory / "tier_latency_h200.json",
                  ("kv_bytes", "h2d_ms", "gpu_hit_ttft_ms", "cpu_hit_ttft_ms"))
    kv_bytes = np.array([r["kv_bytes"] for r in tiers], dtype=float)
    h2d_ms = np.array([r["h2d_ms"] for r in tiers], dtype=float)
    slope, intercept = np.polyfit(kv_bytes, h2d_ms, 1)
    partial = _rows(_load(directory, "partial_prefix_h200.json"), directory / "partial_prefix_h200.json",
                    ("P", "prefill_tokens", "gpu_prefix.gpu_work_ms", "gpu_prefix.wall_ms_median"))
    hardware = LatencyModel(prefill_fixed_ms=float(a), prefill_ms_per_token=float(b), prefill_ms_per_token_pair=float(c))
    penalty = [
        r["gpu_prefix"]["gpu_work_ms"] - hardware.gpu_prefill_ms(r["prefill_tokens"], r["P"]) for r in partial if r["P"] > 0
    ]
    launch = [
        r["gpu_prefix"]["wall_ms_median"] - r["gpu_prefix"]["gpu_work_ms"] for r in partial if r["prefill_tokens"] >= 2464
    ]
    return {
        "prefill_fixed_ms": float(a),
        "prefill_ms_per_token": float(b),
        "prefill_ms_per_token_pair": float(c),
        "decode_fixed_ms": float(d_fixed),
        "decode_ms_per_context_token": float(d_slope),
        "h2d_gbps": float(1.0 / slope / 1e6),
        "h2d_latency_ms": float(intercept),
        "host_floor_ms": float(min(min(r["gpu_hit_ttft_ms"], r["cpu_hit_ttft_ms"]) for r in tiers)),
        "launch_overhead_ms": float(statistics.median(launch)),
        "cached_prefix_penalty_ms": float(statistics.median(penalty)),
    }
