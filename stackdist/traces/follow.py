"""A growing file (or standard input) read line by line as it grows: what ``stackdist watch``
follows. Complete lines only; a partial last line waits for its newline while following."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import IO

__all__ = ["follow_lines"]


def follow_lines(stream: IO[bytes], follow: bool, poll_s: float, stop: threading.Event) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every complete non-blank line, waiting at the end for more when
    ``follow`` (a partial last line waits for its newline). Ends at EOF otherwise, or on ``stop``.

    >>> import io; list(follow_lines(io.BytesIO(b"a\\n\\nb"), False, 0.1, threading.Event()))
    [(1, b'a'), (3, b'b')]
    """
    lineno, pending = 0, b""
    while not stop.is_set():
        raw = stream.readline()
        if not raw:
            if not follow:
                break
            time.sleep(poll_s)
            continue
        pending += raw
        if not pending.endswith(b"\n") and follow:
            continue
        lineno += 1
        line, pending = pending.rstrip(b"\r\n"), b""
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line.strip():
            yield lineno, line
    if pending.strip() and not stop.is_set():
        yield lineno + 1, pending.rstrip(b"\r\n")
