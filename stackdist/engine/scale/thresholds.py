"""The seeded hash's parameters of SHARDS sampling: each seed's salt and the inclusive 64-bit
threshold of a rate (see :mod:`.sampling`). Plain Python."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TWO64", "rate_of_threshold", "seed_mix", "threshold_for_rate"]

TWO64 = 2.0**64


def threshold_for_rate(rate: float) -> int:
    """The inclusive 64-bit threshold for ``rate`` (keep ``h <= T``); rate 1.0 keeps every hash.

    >>> threshold_for_rate(1.0) == 2**64 - 1, threshold_for_rate(0.5) == 2**63 - 1
    (True, True)
    """
    if not 0 < rate <= 1:
        raise ValueError(f"sample rate must be in (0, 1]; got {rate}.")
    return min(2**64 - 1, max(0, int(rate * 2**64) - 1))


def rate_of_threshold(threshold: Any) -> Any:
    """The sampling rate of an inclusive threshold (scalar or array). O(1) each.

    >>> float(rate_of_threshold(2**63 - 1))
    0.5
    """
    return np.minimum(1.0, (np.asarray(threshold, dtype=np.uint64).astype(np.float64) + 1.0) / TWO64)


def seed_mix(seed: int) -> int:
    """The 64-bit constant a seed XORs into every key before mixing. O(1).

    >>> seed_mix(0) != seed_mix(1)
    True
    """
    x = (int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    return x ^ (x >> 31)
