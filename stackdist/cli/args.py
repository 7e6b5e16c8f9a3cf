"""Command-line argument parsing shared by the ``stackdist`` subcommands."""

from __future__ import annotations

from stackdist.errors import UsageError


def int_list(text: str, name: str) -> list[int]:
    """Non-negative integers from ``"1,2,3"``; a :class:`UsageError` naming ``name`` otherwise.

    >>> int_list("0, 4096", "--capacities")
    [0, 4096]
    """
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise UsageError(f"{name} must be a comma-separated list of non-negative integers; got {text!r}.")
    return values


def fraction_list(text: str, name: str) -> list[float]:
    """Fractions in (0, 1] from ``"0.9,0.99"``; a :class:`UsageError` naming ``name`` otherwise.

    >>> fraction_list("0.5,1", "--targets")
    [0.5, 1.0]
    """
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not 0 < v <= 1 for v in values):
        raise UsageError(f"{name} must be a comma-separated list of fractions in (0, 1]; got {text!r}.")
    return values
