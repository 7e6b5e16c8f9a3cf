"""The JSON Schemas of ``python -m kvlab.placement``'s JSON outputs, generated from
:mod:`.report_types` (``tools/write_schemas.py`` writes them with ``stackdist``'s to ``schemas/``); ``experiments``' ``results.json`` has its
``claims`` section loosely typed.
"""

from __future__ import annotations

from typing import Any

from stackdist.output.typed_schema import output_schema
from stackdist.version import SCHEMA_VERSION

from .report_types import CalibrationReport, ExperimentsReport, SimulateReport

__all__ = ["OUTPUTS", "schema_for", "schemas"]

OUTPUTS: dict[str, tuple[str, Any, str]] = {
    "placement-simulate": ("python -m kvlab.placement simulate: one three-tier placement simulation", SimulateReport,
                           "placement-simulate"),
    "placement-calibration": ("python -m kvlab.placement calibration: the latency defaults and the fixtures' values",
                              CalibrationReport, "placement-calibration"),
    "placement-experiments": ("python -m kvlab.placement experiments: results.json", ExperimentsReport,
                              "placement-experiments"),
}
"""Each output: its title, root type and the ``kind`` it carries."""


def schema_for(name: str) -> dict[str, Any]:
    """The JSON Schema of output ``name`` (:data:`OUTPUTS`)."""
    title, root, kind = OUTPUTS[name]
    return output_schema(name, title, root, SCHEMA_VERSION, kind)


def schemas() -> dict[str, dict[str, Any]]:
    """Every output's schema by output name."""
    return {name: schema_for(name) for name in OUTPUTS}
