"""The vLLM Production Stack router's ``prefixaware`` routing logic over a trace's chunks.

The rule, as read in github.com/vllm-project/production-stack at commit a6c01db0 (tag
vllm-stack-0.1.12 + 14; ``src/vllm_router/routers/routing_logic.py``, ``PrefixAwareRouter``,
lines 431-522; its trie ``src/vllm_router/prefix/hashtrie.py``, ``HashTrie``, lines 36-104; the
launcher's default ``--prefix-min-match-length 0``, ``parsers/parser.py:450-461``). The router
keeps one trie of the prompts it has sent (``HashTrie(chunk_size=128)``): the prompt text is cut
into 128-character chunks (the last one shorter), each hashed with xxh64 (hashtrie.py:56-57); a
node per chunk under its parent, each node holding the set of endpoints that were sent a prompt
through it (insert adds the endpoint to the root and to every node on the prompt's path,
hashtrie.py:59-75). At the arrival of a request:

1. ``longest_prefix_match(prompt, available)`` (hashtrie.py:77-104): walk the prompt's chunks
   from the root; at each chunk's node (stop when there is none) intersect its endpoints with
   the ones selected so far (at first: every available endpoint); stop when the intersection
   is empty, else it becomes the selection and the match grows by one chunk.
2. With the default minimum match length 0 (routing_logic.py:507, ``match_length <
   prefix_min_match_length`` never holds) the endpoint is ``random.choice(list(selected))``
   (routing_logic.py:518): uniform among the endpoints holding the longest match, or among all
   endpoints when nothing matched.
3. The prompt is inserted under the chosen endpoint (routing_logic.py:520). Nothing is ever
   evicted ("we assume that there is no eviction of prefix cache", routing_logic.py:436), and
   the router reads no load, no engine state and no clock.

Since an insert adds its endpoint to every node on the path, a node's endpoints are a subset of
its parent's; the intersection of step 1 is therefore the endpoint set of the deepest chunk of the
prompt present in the trie (or every endpoint when its first chunk is not). And, with a fixed set
of endpoints, every node but the root holds exactly one: a node is created holding the endpoint
chosen for the request that created it, and a request that reaches an existing node is sent to
an endpoint of its deepest matched node, which by induction holds one, already on the whole
matched path. So the router is *first-chunk affinity*: a request whose first chunk was seen goes
where that chunk went, any other to a uniformly random endpoint; the load is never read (on a
trace whose prompts share a first chunk, e.g. a system prompt, every request goes to one worker).

**How it is modelled here** (the choice depends only on the order of arrivals and the random
draws, so it is computed before the engines run and is exact for any engine model, pool size,
schedule or scheduler):

- The text is the request's prompt in chunks of ``chunk_chars / chars_per_token`` tokens (128 /
  4 = 32 tokens), as pages (:func:`~.sglang_router.router_pages`: equal page ids mean equal
  whole prefixes). A prompt's last chunk, when shorter, is keyed by its page and its length in
  tokens, so it matches only an equal prompt end, never a full chunk (the product hashes the
  short string: equal only to the same short string). The product cuts characters; here a cut
  falls every 32 tokens (a trace whose blocks do not split into them, or with an empty prompt,
  is cut at its own blocks).
- ``random.choice`` over a set of URLs (Python's set order, an unseeded generator): here worker
  ``tied[floor(u_r x len(tied))]`` with ``tied`` the candidate workers in index order and
  ``u_r`` request r's draw from ``numpy.random.default_rng(seed).random(n)``: uniform, as the
  product, and reproducible.
- Requests are routed in arrival order of the schedule (ties by index).
- Checked against the product's own trie: ``validation/drive_production_stack_router.py`` runs
  production-stack's ``hashtrie.py`` (a6c01db0, xxhash 3.5.0 as pinned) on 12 seeded workloads
  (603 requests, 1 to 5 workers: shared heads, conversations, resends with another short end,
  empty prompts) as ``route_request`` does, recording each request's draw; this model given the
  same draws routes every request to the same worker (``tests/data/engines/routers/``).
- Not modelled: ``--prefix-min-match-length`` above 0 (its fallback is the router's QPS over a
  sliding window of its request statistics); chat requests (the product joins the messages'
  contents with newlines, no template); endpoints joining or leaving.

>>> import numpy as np
>>> from stackdist.traces import RequestTrace
>>> from .schedule import Schedule
>>> t = RequestTrace.from_blocks([[1, 2], [3, 4], [1, 2], [3, 5]], block_size=32, last_tokens=[32] * 4)
>>> w = production_stack_prefixaware(router_pages(t, 32), Schedule.serial(4), 2)
>>> bool(w[2] == w[0] and w[3] == w[1])
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.traces import RequestTrace

from .pages import EnginePages
from .schedule import Schedule
from .sglang_router import router_pages, router_prompts

__all__ = ["PRODUCTION_STACK_PREFIXAWARE", "PrefixAwareConfig", "chunk_keys", "describe",
           "prefixaware_pages", "production_stack_prefixaware"]

PRODUCTION_STACK_PREFIXAWARE = "production-stack-prefixaware"
"""The router's name, as the plan's routers are named."""


@dataclass(frozen=True)
class PrefixAwareConfig:
    """The ``prefixaware`` router's settings: the trie's chunk (``HashTrie(chunk_size=128)``
    characters, hashtrie.py:37) and the characters per token that turn it into tokens."""

    chunk_chars: int = 128
    chars_per_token: float = 4.0

    def __post_init__(self) -> None:
        if self.chunk_chars < 1 or not self.chars_per_token > 0:
            raise ValueError(f"chunk_chars must be a positive integer and chars_per_token positive; got "
                             f"{self.chunk_chars!r}, {self.chars_per_token!r}")

    @property
    def chunk_tokens(self) -> int:
        """The chunk in tokens (at least 1).

        >>> PrefixAwareConfig().chunk_tokens
        32
        """
        return max(1, int(self.chunk_chars // self.chars_per_token))


def prefixaware_pages(trace: RequestTrace, config: PrefixAwareConfig = PrefixAwareConfig()) -> EnginePages:
    """The router's chunks of every request (:func:`~.sglang_router.router_pages` at the chunk's
    tokens). O(blocks)."""
    return router_pages(trace, config.chunk_tokens)


def describe(config: PrefixAwareConfig = PrefixAwareConfig(), seed: int = 0) -> str:
    """The router and its settings in words (the plan's ``cluster`` section).

    >>> print(describe().split(";")[0])
    vLLM Production Stack router prefixaware: the workers holding the longest prefix in the router's trie of every prompt it sent (never evicted), one at random
    """
    return ("vLLM Production Stack router prefixaware: the workers holding the longest prefix in the router's trie "
            "of every prompt it sent (never evicted), one at random; all workers when nothing matches; no load read; "
            f"{config.chunk_chars}-character chunks as {config.chunk_tokens}-token pages (or the trace's own blocks where "
            f"they do not split into them); draws seeded {seed}")


@njit(cache=True, nogil=True)
def _route(key, off, ntr, order, draw, held, present, out):  # type: ignore[no-untyped-def]
    """Each request of ``order`` to a worker (module docstring): ``held[page, w]`` says w was sent
    a prompt through ``page``; ``present[page]`` that any worker was."""
    k = held.shape[1]
    tied = np.empty(k, np.int64)
    for r in order:
        a, m = off[r], ntr[r]
        j = 0
        while j < m and present[key[a + j]]:
            j += 1
        n = 0
        for w in range(k):
            if j == 0 or held[key[a + j - 1], w]:
                tied[n] = w
                n += 1
        pick = min(int(draw[r] * n), n - 1)
        w = tied[pick]
        for i in range(m):
            held[key[a + i], w] = True
            present[key[a + i]] = True
        out[r] = w


def chunk_keys(key: np.ndarray, off: np.ndarray, ntr: np.ndarray, P: np.ndarray, B: int,
               n_keys: int) -> tuple[np.ndarray, int]:
    """``key`` with every prompt's short last chunk (``P % B`` tokens, when its page is the
    prompt's last) re-keyed by (page, tokens) past the ``n_keys`` page ids; the new key count
    (at least 1). O(pages + requests log requests).

    >>> k, n = chunk_keys(np.array([0, 1, 0, 1]), np.array([0, 2, 4]), np.array([2, 2]), np.array([40, 64]), 32, 2)
    >>> k.tolist(), n
    ([0, 2, 0, 1], 3)
    """
    out = key.copy()
    short = np.flatnonzero((ntr > 0) & (ntr == (P + B - 1) // B) & (P % B != 0))
    if short.size:
        pos = off[short] + ntr[short] - 1
        pair = key[pos] * np.int64(B) + P[short] % B
        uniq, inverse = np.unique(pair, return_inverse=True)
        out[pos] = n_keys + inverse.reshape(-1)
        n_keys += uniq.size
    return out, max(n_keys, 1)


def production_stack_prefixaware(pages: EnginePages, schedule: Schedule, workers: int, seed: int = 0,
                                 draws: np.ndarray | None = None) -> np.ndarray:
    """Every request's worker under the Production Stack's ``prefixaware`` router (module docstring),
    ``pages`` the router's chunks (:func:`prefixaware_pages`); ``draws`` (one in [0, 1) per request)
    replaces the seeded draws (the product driven with recorded draws,
    ``validation/drive_production_stack_router.py``).

    O(prompt pages + requests x workers) time, O(page ids x workers) bytes.
    """
    k, n, B, off, P, ntr = router_prompts(pages, schedule, workers)
    key, n_keys = chunk_keys(pages.key.astype(np.int64), off, ntr, P, B, int(pages.n_keys))
    held = np.zeros((n_keys, k), np.bool_)
    present = np.zeros(n_keys, np.bool_)
    draw = np.random.default_rng(seed).random(n) if draws is None else np.asarray(draws, np.float64)
    if draw.shape != (n,) or not ((draw >= 0) & (draw < 1)).all():
        raise ValueError(f"draws must be {n} numbers in [0, 1)")
    order = np.lexsort((np.arange(n), schedule.arrival_s)).astype(np.int64)
    out = np.zeros(n, np.int64)
    if n:
        _route(key, off, ntr, order, draw, held, present, out)
    return out
