"""Output: the one atomic file writer, JSON formatting, and the stderr progress bar.

Package-internal; this ``__init__`` only re-exports.
"""

from .files import check_writable, write_atomic, write_json
from .jsonfmt import dumps_json, json_default
from .progress import Progress

__all__ = ["Progress", "check_writable", "dumps_json", "json_default", "write_atomic", "write_json"]
