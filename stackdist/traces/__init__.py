"""Traces: readers of access and request traces, and the two trace types they return.

- :mod:`.access`: :class:`AccessTrace` (``key[,size]`` accesses) from CSV/TSV, JSONL, ``.npy``.
- :mod:`.requests`: :class:`RequestTrace`, the one request-trace type (prompt KV blocks per
  request, prefix-chained).
- :mod:`.hashed` (Mooncake, Qwen-Bailian), :mod:`.tokens` (token ids), :mod:`.logs.dynamo` (Dynamo's
  request trace, with workers, sessions, schedule and engine-reported hits), :mod:`.logs.lmcache`
  (LMCache's lookup-hash logs): request readers;
  :mod:`.formats` is the one registry of formats (a row each: reader, kind, streamed reader, compiled
  scan, suffixes, default block size, unit); ``read_requests`` reads any request format.
- :mod:`.blocks`: prefix-chained block hashing, re-blocking into finer pages, dense ids.
- :mod:`.lines`: the line-level parsing the readers share.

This ``__init__`` only re-exports, lazily (:mod:`stackdist.lazy`).
"""

from typing import TYPE_CHECKING

from stackdist.lazy import lazy_exports

if TYPE_CHECKING:  # the eager form, for type checkers
    from .access import AccessTrace, access_as_requests, read_access_trace
    from .blocks import ROOT_HASH, chain_hashes, dense_ids, reblock
    from .formats import FORMATS, TraceFormat, read_requests, register
    from .hashed import read_mooncake, read_qwen
    from .logs import read_dynamo, read_lmcache
    from .requests import RequestTrace
    from .tokens import read_token_ids

__getattr__, __dir__ = lazy_exports(__name__, {
    "access": ("AccessTrace", "access_as_requests", "read_access_trace",),
    "blocks": ("ROOT_HASH", "chain_hashes", "dense_ids", "reblock",),
    "formats": ("FORMATS", "TraceFormat", "read_requests", "register",),
    "hashed": ("read_mooncake", "read_qwen",),
    "logs": ("read_dynamo", "read_lmcache",),
    "requests": ("RequestTrace",),
    "tokens": ("read_token_ids",),
})

__all__ = [
    "FORMATS",
    "ROOT_HASH",
    "AccessTrace",
    "RequestTrace",
    "TraceFormat",
    "access_as_requests",
    "chain_hashes",
    "dense_ids",
    "read_access_trace",
    "read_dynamo",
    "read_lmcache",
    "read_mooncake",
    "read_qwen",
    "read_requests",
    "read_token_ids",
    "reblock",
    "register",
]
