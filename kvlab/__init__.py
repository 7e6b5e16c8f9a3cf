"""kvlab: a teaching lab for KV-cache offload, with reference cache simulators.

Modules:

- :mod:`kvlab.kvsim`: reference simulators (``LRUCache``, ``TwoTierCache``, ``ExclusiveTierCache``).
- :mod:`kvlab.scenario`: the document-scan scenario (``run_scenario``, ``scenario_trace``).
- :mod:`kvlab.summarize`: TTFT summary of measured JSONL (``summarize``).
- :mod:`kvlab.lab`: builds the lab's result folder (``python -m kvlab run-lab --out DIR``).

``kvsim.py``, ``scenario.py`` and ``summarize.py`` use the standard library only and also run
when copied alone into an empty folder.
"""

from .kvsim import ExclusiveTierCache, LRUCache, TwoTierCache

__all__ = ["ExclusiveTierCache", "LRUCache", "TwoTierCache"]
