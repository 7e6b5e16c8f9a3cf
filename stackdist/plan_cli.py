"""Placeholder wiring for ``stackdist plan`` (filled in by the planner)."""

from __future__ import annotations

import argparse


def add_plan_parser(sub) -> None:  # type: ignore[no-untyped-def]
    return None


def run_plan(args: argparse.Namespace) -> int:
    raise NotImplementedError
