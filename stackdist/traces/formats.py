"""Which reader reads which request format, and the formats' default block sizes."""

from __future__ import annotations

import os

import numpy as np

from stackdist.engine.keys import dense_keys
from stackdist.errors import UsageError
from stackdist.input_names import DEFAULT_BLOCK_SIZE, REQUEST_FORMATS

from .access import AccessTrace
from .hashed import read_mooncake, read_qwen
from .logs import read_dynamo, read_lmcache
from .requests import RequestTrace, check_block_size
from .tokens import read_token_ids

__all__ = ["DEFAULT_BLOCK_SIZE", "REQUEST_FORMATS", "access_as_requests", "read_requests"]



def read_requests(
    path: str | os.PathLike[str],
    format: str = "mooncake",
    block_size: int | None = None,
    skip_bad: bool = False,
    partial_last_block: bool = False,
) -> RequestTrace:
    """Read a request trace in ``format`` ("mooncake", "qwen" or "tokens").

    ``block_size`` defaults to 512 for mooncake and 16 for qwen and tokens;
    ``partial_last_block`` applies to "tokens" only. Complexity: that of the reader.

    >>> read_requests("trace.jsonl", "parquet")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: format must be one of mooncake, qwen, tokens, dynamo, lmcache, got 'parquet'
    """
    if format not in REQUEST_FORMATS:
        raise UsageError(f"format must be one of {', '.join(REQUEST_FORMATS)}, got {format!r}")
    size = DEFAULT_BLOCK_SIZE[format] if block_size is None else check_block_size(block_size)
    if format == "mooncake":
        return read_mooncake(path, block_size=size, skip_bad=skip_bad)
    if format == "qwen":
        return read_qwen(path, block_size=size, skip_bad=skip_bad)
    if format == "dynamo":  # the block size is the file's own trace_block_size
        return read_dynamo(path, skip_bad=skip_bad)
    if format == "lmcache":  # the block size is the logs' own chunk_size
        return read_lmcache(path, skip_bad=skip_bad)
    return read_token_ids(path, block_size=size, partial_last_block=partial_last_block, skip_bad=skip_bad)


def access_as_requests(access: AccessTrace, block_size: int | None = None) -> RequestTrace:
    """A ``key[,size]`` access stream as a request trace: every access is a one-block request
    whose block holds ``size`` tokens (1 when unsized), so it can be planned like any trace.

    ``block_size`` defaults to the largest size and must be at least it. O(n).

    >>> from stackdist.traces import AccessTrace
    >>> t = access_as_requests(AccessTrace(np.array([3, 4, 3]), np.array([2, 5, 2]), "x.csv"))
    >>> t.n_requests, t.block_size, t.block_tokens.tolist()
    (3, 5, [2, 5, 2])
    """
    n = access.n_accesses
    tokens = np.ones(n, np.int64) if access.sizes is None else access.sizes
    size = int(tokens.max(initial=1)) if block_size is None else check_block_size(block_size)
    if n and int(tokens.max()) > size:
        raise UsageError(f"--block-size ({size}) must be at least the largest size in {access.source} ({int(tokens.max())}).")
    return RequestTrace(dense_keys(access.keys).ids, np.arange(n + 1), tokens, np.zeros(n), tokens,
                        np.zeros(n, np.int64), block_size=size, source=os.fspath(access.source))
