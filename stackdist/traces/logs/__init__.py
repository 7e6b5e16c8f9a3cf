"""Readers of engine logs: NVIDIA Dynamo's request traces (:mod:`.dynamo`) and LMCache's
lookup-hash logs (:mod:`.lmcache`). This ``__init__`` only re-exports."""

from .dynamo import read_dynamo
from .lmcache import read_lmcache

__all__ = ["read_dynamo", "read_lmcache"]
