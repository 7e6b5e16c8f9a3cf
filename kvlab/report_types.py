"""The typed shape of the lab's own JSON outputs that carry a schema version: ``kvlab run-lab``'s
``manifest.json`` and ``kvlab block-lab --json``. The schemas in ``schemas/`` are generated from
these (:mod:`kvlab.schemas`); ``tests/test_schemas.py`` validates real outputs against them. The
lab's seven result files and ``kvlab summarize``'s output keep the formats the lab's spec fixes
(no version key; ``manifest.json`` versions them and gives each file's SHA-256).
"""

from __future__ import annotations

from typing import TypedDict

from kvlab.placement.report_types import Tool

__all__ = ["BlockLabConfig", "BlockLabPassNumbered", "BlockLabReport", "BlockLabRequest", "LabManifest", "ManifestFile"]


class ManifestFile(TypedDict):
    description: str  # what the result file holds (the lab's spec)
    bytes: int  # its size in bytes
    sha256: str  # its SHA-256, hex


class LabManifest(TypedDict):
    """``kvlab run-lab --out DIR``: ``DIR/manifest.json``."""

    schema_version: int
    kind: str
    tool: Tool
    files: dict[str, ManifestFile]  # per result file name


class BlockLabConfig(TypedDict):
    gpu_tokens: int  # the GPU cache in tokens
    block_size: int  # tokens per block
    capacity_blocks: int  # the GPU cache in blocks
    docs: int  # documents per pass
    tokens: int  # tokens per document
    question_tokens: int  # tokens of the question after each document
    passes: list[str]  # the pass orders (fwd, rev, ...)
    seed: int  # the seed of the questions' tokens
    doc_blocks: int  # blocks per document
    request_tokens: int  # tokens per request (document + question)
    request_blocks: int  # full blocks per request


class TTFTPoint(TypedDict):
    P: int  # tokens of the document cached in the fixture's measurement
    wall_ms_median: float  # the measured median wall TTFT, ms
    gpu_work_ms: float  # the measured GPU work, ms


class TTFTFields(TypedDict):
    P: str
    wall_ms: str
    gpu_work_ms: str
    doc_tokens: str
    question_tokens: str


class TTFTModel(TypedDict):
    source: str  # the partial-prefix fixture file
    column: str  # the fixture's column used
    doc_tokens: int  # the fixture's document length in tokens
    question_tokens: int  # the fixture's question length in tokens
    points: list[TTFTPoint]
    fields: TTFTFields  # where each input is in the fixture


class TTFTEstimate(TypedDict):
    fixture_P: float  # the cached prefix scaled to the fixture's document, tokens
    between_P: list[int]  # the measured points it is interpolated between
    wall_ms: float  # interpolated wall TTFT, ms
    gpu_work_ms: float  # interpolated GPU work, ms
    mixes_attention_paths: bool  # between P=0 (causal) and the first P>0 (masked): two kernels joined


class EngineHits(TypedDict):
    prefix_blocks: int  # leading blocks of the request found in the cache
    prefix_tokens: int  # their tokens
    resident_at_arrival: int  # the request's blocks in the cache when it arrived
    prefill_tokens: int  # tokens still to compute
    ttft: TTFTEstimate


class PerAccessHits(EngineHits):
    cached_blocks: int  # the request's blocks hit anywhere (per-access reads every block)


BlockLabRequest = TypedDict("BlockLabRequest", {
    "doc": int, "doc_blocks": int, "whole_document_hit": bool, "engine": EngineHits, "per-access": PerAccessHits})
"""One request: its document, whether the whole-document lab hit it, and each semantics' hits."""


BlockLabPassNumbered = TypedDict("BlockLabPassNumbered", {"pass": int, "order": str, "requests": list[BlockLabRequest]})
"""A pass of the block lab (``pass`` is a Python keyword, hence this form)."""


class BlockLabReport(TypedDict):
    """``kvlab block-lab --json``: the lab at block granularity."""

    schema_version: int
    kind: str
    tool: Tool
    config: BlockLabConfig
    verified_against: dict[str, str]  # each semantics' reference simulator
    ttft_model: TTFTModel
    notes: list[str]
    passes: list[BlockLabPassNumbered]
