"""Output: the one output-path guard and atomic file writer, JSON formatting, and the stderr progress bar.

Package-internal; this ``__init__`` only re-exports.
"""

from .files import (
    check_outputs,
    check_writable,
    is_stream,
    same_file,
    write_atomic,
    write_files_atomic,
    write_json,
    write_stdout,
)
from .jsonfmt import dumps_json, json_default, tool_header
from .progress import (
    Progress,
    progress_enabled,
    set_progress,
    set_step_sink,
    stage,
    step,
)

__all__ = ["Progress", "check_outputs", "check_writable", "dumps_json", "is_stream", "json_default", "progress_enabled",
           "same_file", "set_progress", "set_step_sink", "stage", "step", "tool_header", "write_atomic", "write_files_atomic", "write_json", "write_stdout"]
