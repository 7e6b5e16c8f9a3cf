"""The native sampler's JSON-lines scanners (``native_json.c``): access lines ``{"key": INT}``
or ``{"key": INT, "size": INT}`` (sized accesses, fed with their sizes), and Mooncake request
lines, whose ``hash_ids`` are the accesses.

Each accepts exactly a subset of the lines the compiled scanners of
:mod:`stackdist.traces.fast_json` accept, and feeds the same key values (a negative key by its
64-bit two's complement) and sizes; at the first line of any other shape (another field, a
string, a float, a 19-digit integer, a size outside 1..:data:`~.estimate.EXACT_SIZE`, a line
sized where the first was not or the reverse, a Mooncake line whose id count is not
``ceil(input_length / block_size)``, broken JSON) it gives up, and the caller leaves the file
to the compiled path, which gives the answer or the error.

>>> import numpy as np
>>> from stackdist.engine.scale.native import NativeShards, library
>>> lib = library()
>>> text = np.frombuffer(b'{"timestamp": 0, "input_length": 600, "hash_ids": [4, 5]}\\n', np.uint8)
>>> lib is None or (feed_mooncake(NativeShards(lib, [1], [2**64 - 1]), text, 512), feed_jsonl(NativeShards(lib, [1], [2**64 - 1]), text))
(True, False)
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .native import NativeShards

__all__ = ["feed_jsonl", "feed_mooncake"]


def _declared(lib: Any) -> Any:
    """``lib`` with the scanners' signatures declared (on its first use: ctypes keeps a
    library's function objects, so the declarations stay with it). O(1)."""
    if lib.sd_feed_mooncake.argtypes is None:
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        lib.sd_feed_jsonl.restype, lib.sd_feed_jsonl.argtypes = i64, [p, p, i64]
        lib.sd_feed_mooncake.restype, lib.sd_feed_mooncake.argtypes = i64, [p, p, i64, i64]
    return lib


def feed_jsonl(sampler: NativeShards, data: np.ndarray) -> bool:
    """Feed the keys of access lines ``{"key": INT}``, or the keys and sizes of lines ``{"key":
    INT, "size": INT}`` (either order; the sampler's :attr:`~.NativeShards.kind` then 2), every
    line of the first one's shape (``data``: a uint8 array of whole lines, no BOM); False, with
    the sampler then unusable, at the first line of another shape. O(bytes x seeds).

    >>> from stackdist.engine.scale.native import library
    >>> lib = library()
    >>> s = lib and NativeShards(lib, [1], [2**64 - 1])
    >>> lib is None or (feed_jsonl(s, np.frombuffer(b'{"key": -1}\\r\\n\\n{ "key" :5 }', np.uint8)), s.n_accesses)
    (True, 2)
    >>> s = lib and NativeShards(lib, [1], [2**64 - 1])
    >>> lib is None or (feed_jsonl(s, np.frombuffer(b'{"key": 4, "size": 3}\\n{"size": 3, "key": 4}', np.uint8)), s.kind, s.total_size)
    (True, 2, 6)
    """
    return sampler.feed_text(data, _declared(sampler.lib).sd_feed_jsonl)


def feed_mooncake(sampler: NativeShards, data: np.ndarray, block_size: int) -> bool:
    """Feed the ``hash_ids`` of Mooncake request lines, each request's in order (``data``: a
    uint8 array of whole lines, no BOM; ``block_size``: tokens per block, which ``input_length``
    must match); False, with the sampler then unusable, at the first line of another shape.
    O(bytes x seeds)."""
    scan = _declared(sampler.lib).sd_feed_mooncake

    def scan_lines(handle: Any, start: Any, length: int) -> int:
        return int(scan(handle, start, length, block_size))

    return sampler.feed_text(data, scan_lines)
