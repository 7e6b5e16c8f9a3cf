"""The JSON Schemas of ``stackdist``'s JSON outputs (``plan``, ``curve``, ``tiers``, ``watch``), generated
from their typed results (:mod:`stackdist.output.typed_schema`).

``tools/write_schemas.py`` writes them (with kvlab's, :mod:`kvlab.placement.schemas`) to
``schemas/`` and the field reference to ``docs/json.md``; ``tests/test_schemas.py`` checks that the
committed files equal these and validates real outputs against them. Each schema has its ``$id``
and the ``schema_version`` the JSON carries (:data:`stackdist.version.SCHEMA_VERSION`).
"""

from __future__ import annotations

from typing import Any

from stackdist.output.typed_schema import output_schema
from stackdist.version import SCHEMA_VERSION

from .deployment_file import deployment_json_schema

__all__ = ["OUTPUTS", "schema_for", "schemas"]


def _plan() -> Any:
    from stackdist.planning.schema import Plan

    return Plan


def _curve() -> Any:
    from stackdist.render.report_types import CurveReport

    return CurveReport


def _tiers() -> Any:
    from stackdist.render.report_types import TiersReport

    return TiersReport


def _watch() -> Any:
    from stackdist.render.report_types import WatchRecord

    return WatchRecord


OUTPUTS: dict[str, tuple[str, Any, str | None]] = {
    "plan": ("stackdist plan --json: the capacity plan of a request trace", _plan, None),
    "curve": ("stackdist curve (JSON): the exact (or sampled) LRU hit curve of a trace", _curve, "curve"),
    "tiers": ("stackdist tiers (JSON): GPU + CPU tier hits for every CPU capacity", _tiers, "tiers"),
    "watch": ("stackdist watch: one JSON line per interval (each line is one document)", _watch, "watch"),
}
"""Each output: its title, the function giving its root type, and the ``kind`` it carries."""


def _resolved_deployment(props: dict[str, Any], defs: dict[str, Any]) -> None:
    """The plan's ``resolved_deployment``: the deployment file's sections and keys (from the keys' table)."""
    if "resolved_deployment" in props:
        said = {k: v for k, v in props["resolved_deployment"].items() if k == "description"}
        props["resolved_deployment"] = {**deployment_json_schema(defs), **said}


def schema_for(name: str) -> dict[str, Any]:
    """The JSON Schema of output ``name`` (:data:`OUTPUTS`). O(size of its types)."""
    title, root, kind = OUTPUTS[name]
    return output_schema(name, title, root(), SCHEMA_VERSION, kind, _resolved_deployment)


def schemas() -> dict[str, dict[str, Any]]:
    """Every output's schema by output name."""
    return {name: schema_for(name) for name in OUTPUTS}
