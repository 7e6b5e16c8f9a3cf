"""Serving models: what an engine does with each request, turned into what the engine replays.

- :mod:`.semantics`: the ``engine`` (idealized prefix LRU) and ``per-access`` (KVSET) models,
  one replay each for every capacity, and the per-request hit query.

This ``__init__`` only re-exports.
"""

from .semantics import SEMANTICS, PrefixReplay, replay_requests, request_hits

__all__ = ["SEMANTICS", "PrefixReplay", "replay_requests", "request_hits"]
