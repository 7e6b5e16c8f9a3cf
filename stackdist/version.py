"""The package version (one place; read by ``--version`` and written into every JSON output)."""

__version__ = "0.2.0"
