"""The JSON Schemas of the lab's versioned JSON outputs (``run-lab``'s manifest, ``block-lab``),
generated from :mod:`kvlab.report_types`, and the placement simulator's (:mod:`kvlab.placement.schemas`);
``tools/write_schemas.py`` writes them with ``stackdist``'s to ``schemas/``.
"""

from __future__ import annotations

from typing import Any

from stackdist.output.typed_schema import output_schema
from stackdist.version import SCHEMA_VERSION

from .report_types import BlockLabReport, LabManifest

__all__ = ["OUTPUTS", "schemas"]

OUTPUTS: dict[str, tuple[str, Any, str]] = {
    "kvlab-lab-manifest": ("kvlab run-lab --out DIR: DIR/manifest.json (the result files' versions and SHA-256)",
                           LabManifest, "kvlab-lab-manifest"),
    "block-lab": ("kvlab block-lab --json: the lab at block granularity", BlockLabReport, "block-lab"),
}
"""Each output: its title, root type and the ``kind`` it carries."""


def schemas() -> dict[str, dict[str, Any]]:
    """Every kvlab output's schema by output name (the lab's, then the placement simulator's)."""
    from kvlab.placement.schemas import schemas as placement

    return {**{name: output_schema(name, title, root, SCHEMA_VERSION, kind)
               for name, (title, root, kind) in OUTPUTS.items()}, **placement()}
