"""A request trace as engine pages (16-token KV blocks), the input of the engine models.

``reblock(trace, 16)`` splits each hash block into pages; page ``s`` of block ``b``
has an id derived from ``(b, s)`` only (SPEC.md, *Trace*), so equal page ids mean equal whole
prefixes. The engines only ever hash or key *full* pages (vLLM's block hashes cover full blocks;
SGLang's tree keys are page-aligned), so a page is usable as a cache key iff it holds 16
tokens; only a request's last page may be partial.

>>> import numpy as np
>>> t = RequestTrace(np.array([5, 6, 5]), np.array([0, 2, 3]), np.array([32, 8, 32]),
...     np.zeros(2), np.array([40, 32]), np.array([2, 1]), block_size=32)
>>> p = engine_pages(t)
>>> p.key.tolist(), p.offsets.tolist(), p.full_pages.tolist()
([10, 11, 12, 10, 11], [0, 3, 5], [2, 2])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stackdist.engine.keys import dense_keys
from stackdist.traces import RequestTrace, reblock

__all__ = ["PAGE_TOKENS", "EnginePages", "engine_pages"]

PAGE_TOKENS = 16


@dataclass(frozen=True)
class EnginePages:
    """Pages of every request, head first: request ``r`` owns ``key[offsets[r]:offsets[r+1]]``.

    ``key`` holds dense page ids in ``0..n_keys-1`` (int64, from ``stackdist.dense_keys``); ``input_tokens`` (P) and
    ``output_tokens`` (O) are per request; ``full_pages[r] = P // 16`` pages are full, and
    ``cdiv(P, 16)`` pages are allocated for the prompt. ``continued_by[r]`` (or None) is the
    later request whose prompt continues request r's prompt and answer (decode reuse: the blocks
    r writes while decoding are cached under that request's page ids; see
    :mod:`stackdist.serving.decode_reuse`), -1 for none.
    """

    key: np.ndarray
    offsets: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    n_keys: int
    page_tokens: int = PAGE_TOKENS
    continued_by: np.ndarray | None = None

    @property
    def n_requests(self) -> int:
        """Number of requests."""
        return len(self.input_tokens)

    @property
    def full_pages(self) -> np.ndarray:
        """Full pages per request: ``P // 16``."""
        return self.input_tokens // self.page_tokens

    @property
    def hit_cap_pages(self) -> np.ndarray:
        """Pages a lookup may serve at most: ``(P - 1) // 16`` (both engines keep the last
        prompt token out of the match)."""
        return np.maximum(self.input_tokens - 1, 0) // self.page_tokens


def engine_pages(trace: RequestTrace, page_tokens: int = PAGE_TOKENS) -> EnginePages:
    """Re-block ``trace`` into ``page_tokens``-token pages with dense ids.

    Requires the blocks to cover the whole prompt (sum of a request's block tokens equal to
    its ``input_length``) and at least one prompt token per request. Complexity: O(pages).

    >>> import numpy as np
    >>> t = RequestTrace(np.array([3]), np.array([0, 1]), np.array([20]), np.zeros(1),
    ...     np.array([20]), np.array([1]), block_size=32)
    >>> engine_pages(t).hit_cap_pages.tolist(), engine_pages(t).full_pages.tolist()
    ([1], [1])
    """
    if trace.block_size % page_tokens:
        raise ValueError(f"the trace block size must be a multiple of {page_tokens}; got {trace.block_size}")
    pages = trace if trace.block_size == page_tokens else reblock(trace, page_tokens)
    offsets = np.asarray(pages.offsets, dtype=np.int64)
    tokens = np.asarray(pages.block_tokens, dtype=np.int64)
    inp = np.asarray(trace.input_length, dtype=np.int64)
    if np.any(inp < 1):
        raise ValueError(f"every request needs input_length >= 1; got {int(inp.min())}")
    covered = np.add.reduceat(tokens, offsets[:-1]) if len(tokens) else np.zeros(0, np.int64)
    covered = np.where(np.diff(offsets) > 0, covered, 0)
    if not np.array_equal(covered, inp):
        r = int(np.flatnonzero(covered != inp)[0])
        raise ValueError(f"the blocks must cover the whole prompt; request {r} has {int(covered[r])} of {int(inp[r])} tokens")
    last = offsets[1:] - 1
    partial = tokens < page_tokens
    partial[last] = False
    if partial.any():
        raise ValueError(f"only a request's last page may hold fewer than {page_tokens} tokens")
    dense = dense_keys(pages.block_ids)
    out = np.asarray(trace.output_length, dtype=np.int64)
    return EnginePages(np.ascontiguousarray(dense.ids, dtype=np.int64), offsets, inp, out, int(dense.n_keys), page_tokens)
