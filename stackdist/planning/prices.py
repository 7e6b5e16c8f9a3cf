"""The one price table: assumed US$ per GB (1e9 bytes) of each memory tier, and its parser.

The defaults are labelled assumptions everywhere they are used (the planner's tier plan, the
placement simulator's cost model); ``--prices`` overrides them.

>>> PRICES_USD_PER_GB["hbm"], TIERS
(187.5, ('hbm', 'dram', 'ssd'))
>>> parse_prices("hbm=200,ssd=0.1")
{'hbm': 200.0, 'ssd': 0.1}
"""

from __future__ import annotations

import math

from stackdist.errors import UsageError

__all__ = ["PRICES_USD_PER_GB", "TIERS", "parse_prices", "price_list"]

TIERS = ("hbm", "dram", "ssd")
PRICES_USD_PER_GB: dict[str, float] = {"hbm": 187.50, "dram": 3.50, "ssd": 0.08}
"""Assumptions: HBM as a share of a GPU's price per GB of HBM, server DDR5, datacenter NVMe."""


def parse_prices(text: str) -> dict[str, float]:
    """``hbm=P,dram=P,ssd=P`` (any subset) as a dict; UsageError naming ``--prices`` otherwise.

    Prices must be finite and non-negative. O(len(text)).
    """
    prices = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if name.strip() not in TIERS or not math.isfinite(price) or price < 0:
            raise UsageError(
                f"--prices must look like hbm=187.5,dram=3.5,ssd=0.08 (finite, non-negative US$ per GB); got {text!r}."
            )
        prices[name.strip()] = price
    return prices


def price_list(prices: dict[str, float] | None = None) -> tuple[float, float, float]:
    """The (hbm, dram, ssd) prices: the defaults with ``prices`` applied.

    >>> price_list({"dram": 4.0})
    (187.5, 4.0, 0.08)
    """
    merged = dict(PRICES_USD_PER_GB, **(prices or {}))
    return merged["hbm"], merged["dram"], merged["ssd"]
