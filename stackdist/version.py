"""The package version and the JSON reports' schema version (one place each; read by
``--version`` and written into every JSON output)."""

__version__ = "0.2.0"

SCHEMA_VERSION = 1
"""The shape of the JSON reports (:mod:`stackdist.planning.schema` says what it names)."""
