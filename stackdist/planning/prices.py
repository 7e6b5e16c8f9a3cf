"""The one price table: assumed US$ per GB (1e9 bytes) of each memory tier, its parser, and what
a deployment costs per hour.

The defaults are labelled assumptions everywhere they are used (the planner's tier plan, the
placement simulator's cost model); ``--prices`` overrides them.

**A deployment per hour.** A GPU is rented whole: its price per GPU-hour (``data/gpus.json``,
an assumed on-demand price with its source; the caller may give another) includes its HBM, so
the ``hbm`` price per GB is not used for a deployment (only by the tier plan). DRAM and SSD
behind the GPUs are priced from their purchase price per GB amortised straight-line over
:data:`AMORTISATION_YEARS` years of 8,760 hours, used around the clock (no power, chassis or
margin: a floor): ``US$ per GB-hour = US$ per GB / 26,280``. Then

- ``US$/hour = GPUs x US$ per GPU-hour + CPU GiB x 2**30 / 1e9 x DRAM US$ per GB-hour
  + disk GiB x 2**30 / 1e9 x SSD US$ per GB-hour``;
- ``US$ per million input tokens = US$/hour / (input tokens per hour / 1e6)``, the input tokens
  per hour being the counted requests' prompt tokens over their time span (first to last
  arrival) in hours; with no time span it is left out, with the reason;
- ``US$ per million uncached input tokens``: the same over the tokens left to prefill
  (``input tokens x (1 - prefix token hit rate)``) where the hit rate is known and below 1.

>>> PRICES_USD_PER_GB["hbm"], TIERS
(187.5, ('hbm', 'dram', 'ssd'))
>>> parse_prices("hbm=200,ssd=0.1")
{'hbm': 200.0, 'ssd': 0.1}
>>> p = DeploymentPrices(gpu="h200", usd_per_gpu_hour=4.0, gpu_price_source="assumed")
>>> cost = deployment_cost(2, p, input_tokens_per_hour=4e6)
>>> cost["usd_per_hour"], cost["usd_per_million_input_tokens"]
(8.0, 2.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stackdist.errors import UsageError

__all__ = [
    "AMORTISATION_HOURS",
    "AMORTISATION_YEARS",
    "PRICES_USD_PER_GB",
    "TIERS",
    "DeploymentPrices",
    "deployment_cost",
    "input_tokens_per_hour",
    "parse_prices",
    "price_list",
]

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


AMORTISATION_YEARS = 3
"""DRAM and SSD purchase prices are spread over this many years of use, around the clock."""
AMORTISATION_HOURS = AMORTISATION_YEARS * 8760
"""26,280 hours: US$ per GB-hour = US$ per GB / this."""
_GB_PER_GIB = 2**30 / 1e9


@dataclass(frozen=True)
class DeploymentPrices:
    """What a deployment costs per hour: the GPU's price per GPU-hour and where it came from, and
    the DRAM / SSD purchase prices per GB (``prices``: ``--prices`` given, else the defaults)
    amortised over :data:`AMORTISATION_HOURS`."""

    gpu: str
    usd_per_gpu_hour: float
    gpu_price_source: str
    prices_per_gb: dict[str, float] | None = None

    @property
    def usd_per_gb_hour(self) -> dict[str, float]:
        """DRAM and SSD, US$ per GB (1e9 bytes) per hour.

        >>> DeploymentPrices("h200", 4.0, "x", {"dram": 2.628}).usd_per_gb_hour["dram"]
        0.0001
        """
        _, dram, ssd = price_list(self.prices_per_gb)
        return {"dram": dram / AMORTISATION_HOURS, "ssd": ssd / AMORTISATION_HOURS}

    def describe(self) -> dict[str, Any]:
        """The price inputs and their sources, for the JSON."""
        _, dram, ssd = price_list(self.prices_per_gb)
        given = self.prices_per_gb or {}
        return {
            "gpu": self.gpu, "usd_per_gpu_hour": self.usd_per_gpu_hour, "gpu_price_source": self.gpu_price_source,
            "usd_per_gb": {"dram": dram, "ssd": ssd},
            "usd_per_gb_source": {t: "given" if t in given else "assumed"
                                  for t in ("dram", "ssd")},
            "usd_per_gb_hour": self.usd_per_gb_hour,
            "amortisation": (f"DRAM and SSD purchase prices per GB (1e9 bytes) spread straight-line over "
                             f"{AMORTISATION_YEARS} years x 8,760 hours = {AMORTISATION_HOURS:,} hours of use (no power, "
                             "chassis or margin: a floor); the GPU's hourly price includes its HBM, so the hbm price "
                             "per GB prices only the tier plan"),
        }


def input_tokens_per_hour(input_tokens: int, span_s: float) -> tuple[float | None, str]:
    """The prompt tokens per hour of ``input_tokens`` arriving over ``span_s`` seconds, or None
    and why not (no time span).

    >>> input_tokens_per_hour(2638, 3.0)[0], input_tokens_per_hour(10, 0.0)[0]
    (3165600.0, None)
    """
    if not (span_s > 0 and math.isfinite(span_s)):
        return None, ("the counted requests have no time span (one request, or all at one timestamp): no input "
                      "tokens per hour to divide by")
    if input_tokens <= 0:
        return None, "the counted requests have no input tokens"
    return input_tokens * 3600.0 / span_s, f"{input_tokens:,} input tokens over {span_s:,.3f} s"


def deployment_cost(gpus: int, prices: DeploymentPrices, cpu_gib: float = 0.0, disk_gib: float = 0.0,
                    input_tokens_per_hour: float | None = None, no_rate_reason: str = "",
                    hit_rate: float | None = None) -> dict[str, Any]:
    """US$ per hour of ``gpus`` GPUs plus ``cpu_gib`` GiB of DRAM and ``disk_gib`` GiB of SSD, and
    US$ per million input tokens (and uncached ones, with ``hit_rate``) at ``input_tokens_per_hour``
    (module docstring). A figure that cannot be given is absent, its reason under ``..._not_given``.

    >>> p = DeploymentPrices("h200", 4.0, "x", {"dram": 2.628, "ssd": 0.2628})
    >>> c = deployment_cost(1, p, cpu_gib=1e9 / 2**30 * 1000, disk_gib=1e9 / 2**30 * 1000, input_tokens_per_hour=2e6,
    ...                     hit_rate=0.75)
    >>> round(c["usd_per_hour"], 6), round(c["usd_per_million_input_tokens"], 6), round(c["usd_per_million_uncached_input_tokens"], 6)
    (4.11, 2.055, 8.22)
    """
    rates = prices.usd_per_gb_hour
    gpu_usd = gpus * prices.usd_per_gpu_hour
    cpu_usd = cpu_gib * _GB_PER_GIB * rates["dram"]
    disk_usd = disk_gib * _GB_PER_GIB * rates["ssd"]
    total = gpu_usd + cpu_usd + disk_usd
    out: dict[str, Any] = {"gpus": int(gpus), "cpu_gib": float(cpu_gib), "disk_gib": float(disk_gib),
                           "usd_per_hour": total, "gpu_usd_per_hour": gpu_usd, "cpu_usd_per_hour": cpu_usd,
                           "disk_usd_per_hour": disk_usd}
    if input_tokens_per_hour is None:
        out["usd_per_million_input_tokens_not_given"] = no_rate_reason or "no input tokens per hour"
        return out
    out["usd_per_million_input_tokens"] = total / (input_tokens_per_hour / 1e6)
    if hit_rate is not None:
        uncached = input_tokens_per_hour * (1.0 - hit_rate)
        if uncached > 0:
            out["usd_per_million_uncached_input_tokens"] = total / (uncached / 1e6)
        else:
            out["usd_per_million_uncached_input_tokens_not_given"] = "every input token is a prefix hit"
    return out
