"""Decoded answers reused: which later request continues an earlier one's prompt and answer.

In a multi-turn session the next prompt carries the earlier prompt and the earlier answer, so
the KV the earlier request wrote while decoding is a prefix the later request can hit. A
hash-id trace covers prompts only, so the continuation is inferred: request ``q`` continues
request ``r`` when ``q`` comes later (in the same session, where the trace has sessions), its
prompt extends ``r``'s prompt (it holds ``r``'s last full page at the same position: with
prefix-chained page ids that means every full page of ``r`` is a page of ``q``), and it is at
least as long as ``r``'s prompt plus its answer. The first such ``q`` is taken. Then the blocks
``r`` fills while decoding (vLLM: the pages from ``r``'s last partial prompt page up to its last
full written page) are cached under ``q``'s page ids at the same positions, so ``q`` (and any
request sharing that prefix) can hit them.

Where the inference can be wrong: an answer edited before the next turn (thinking tokens
stripped, tool output rewritten) makes ``q``'s pages differ from what ``r`` wrote, yet the
lengths may still fit, so the reuse is over-counted; a continuation in another session is missed
when the trace has sessions. :func:`continuations` reports how often it fires.

>>> import numpy as np
>>> from stackdist.traces import RequestTrace
>>> from stackdist.serving.pages import engine_pages
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2, 3, 4]], block_size=16, output_length=[20, 5])
>>> continuations(t, engine_pages(t)).tolist()
[1, -1]
"""

from __future__ import annotations

import numpy as np

from stackdist.traces import RequestTrace

from .pages import EnginePages

__all__ = ["continuations", "reuse_summary"]


def continuations(trace: RequestTrace, pages: EnginePages) -> np.ndarray:
    """For every request, the index of the later request that continues it, or -1 (module
    docstring). O(pages log pages) to index the pages, plus the candidates scanned.
    """
    n = pages.n_requests
    out = np.full(n, -1, np.int64)
    if n == 0:
        return out
    full = pages.full_pages
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(pages.offsets))
    order = np.argsort(pages.key, kind="stable")  # pages of one id, in request order
    sorted_keys = pages.key[order]
    sessions = trace.session_ids
    wanted = pages.input_tokens + pages.output_tokens
    for r in np.flatnonzero((full > 0) & (pages.output_tokens > 1)).tolist():
        k = pages.key[pages.offsets[r] + full[r] - 1]
        lo, hi = np.searchsorted(sorted_keys, k, "left"), np.searchsorted(sorted_keys, k, "right")
        for q in owner[order[lo:hi]].tolist():
            if q > r and pages.input_tokens[q] >= wanted[r] and (sessions is None or sessions[q] == sessions[r]):
                out[r] = q
                break
    return out


def reuse_summary(pages: EnginePages, continued_by: np.ndarray, block_size: int = 16) -> dict[str, int]:
    """How often the inference fires: requests continued and the answer tokens (in full blocks)
    counted as reusable. O(requests).

    >>> from stackdist.traces import RequestTrace
    >>> from stackdist.serving.pages import engine_pages
    >>> t = RequestTrace.from_blocks([[1, 2], [1, 2, 3, 4]], block_size=16, output_length=[20, 5])
    >>> reuse_summary(engine_pages(t), np.array([1, -1]))
    {'requests_continued': 1, 'answer_tokens_reusable': 16}
    """
    has = continued_by >= 0
    written = pages.input_tokens + np.maximum(pages.output_tokens, 1) - 1
    reusable = (written // block_size - pages.full_pages) * block_size
    return {"requests_continued": int(has.sum()), "answer_tokens_reusable": int(np.maximum(reusable[has], 0).sum())}
