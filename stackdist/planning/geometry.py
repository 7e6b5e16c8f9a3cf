"""KV-cache bytes per token from a model's shapes or its Hugging Face ``config.json``.

Formulas (bytes of KV cache one token occupies, all layers together):

- Standard multi-head / grouped-query attention stores a key and a value vector per KV head
  per layer: ``2 * num_layers * num_kv_heads * head_dim * dtype_bytes``. (This is what vLLM
  allocates per token for full attention; e.g. the lab's Qwen2.5-1.5B: 2 * 28 * 2 * 128 * 2 =
  28672 B, see data/fixtures/README.md.)
- Multi-head latent attention (DeepSeek-V2 paper, arXiv:2405.04434, section 2.1) caches one
  compressed latent ``c_KV`` of ``kv_lora_rank`` values plus the decoupled RoPE key of
  ``qk_rope_head_dim`` values per layer -- no separate K and V:
  ``num_layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes`` (DeepSeek-V3: 61 * 576 * 2
  = 70272 B).

- Sliding-window (local) layers (``layer_types`` / ``sliding_window_pattern`` with
  ``sliding_window``: gpt-oss, Gemma-3) hold at most their window: the KV bytes of a request of
  T tokens are ``full_bytes_per_token * T + sliding_bytes_per_token * min(T, window)``
  (:meth:`ModelGeometry.kv_bytes_for`). ``kv_bytes_per_token`` is then the full-attention part
  only: it is what a cached block costs per token (a block-count capacity is bytes divided by
  it); the sliding part is a per-request bound (see :mod:`stackdist.planning.budgets` for how
  it enters a capacity). ``all_layers_bytes_per_token`` is the old over-count (every layer
  as full attention), the conservative bound.

Chunked-local (Llama 4) and linear-attention / Mamba layers (Qwen3-Next) are read into
``layer_kinds`` (as vLLM 0.33.0's model code decides them) for the hybrid engine model
(:mod:`stackdist.serving.hybrid`, docs/hybrid.md); ``kv_bytes_per_token`` counts the
full-attention layers only, and the byte budgets (``--gpu``, ``--capacity``) refuse such models
(what a chunk or a Mamba state holds per request is not in them). Not modelled: KV-cache
quantisation scales (fp8 counts one byte per element), multi-token-prediction layers.

**The bundled model catalog**: config fields of the models people plan today, with their source.

``data/models.json`` holds, per model, the Hugging Face ``config.json`` fields that set the KV
cache (see its ``about``) and the repo id they come from; every entry goes through the same
parser as a user's ``config.json`` (:func:`from_hf_config`), so a catalog entry and
the downloaded config give the same bytes. Besides the geometry, an entry carries what the
hardware and TTFT answers need: the parameter count (total and active per token), the weights'
bytes, and the attention FLOPs per (query, key) pair.

>>> spec = model_spec("Qwen/Qwen3-8B")
>>> spec.name, spec.geometry.kv_bytes_per_token, spec.hf_repo
('qwen3-8b', 147456, 'Qwen/Qwen3-8B')
>>> model_spec("gpt-oss-120b", kv_dtype="fp8").geometry.kv_bytes_per_token  # 18 full layers x 2 x 8 x 64 x 1
18432

>>> DEFAULT_MODEL.kv_bytes_per_token
28672
>>> geometry_for("deepseek-v3").kv_bytes_per_token
70272
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from stackdist.errors import UsageError
from stackdist.traces.side_inputs import read_config_json

_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "float64": 8,
    "fp8": 1,
}


@dataclass(frozen=True)
class ModelGeometry:
    """The attention shapes that set a model's KV-cache size per token.

    ``kv_lora_rank`` and ``qk_rope_head_dim`` are set for MLA models (DeepSeek-V2/V3 style);
    then ``num_kv_heads`` and ``head_dim`` are informational only.

    >>> ModelGeometry("tiny", num_layers=2, num_kv_heads=4, head_dim=8, dtype_bytes=2).kv_bytes_per_token
    256
    """

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    layer_kinds: tuple[str, ...] = ()
    """Per layer, in layer order, its KV cache kind as vLLM groups it: ``full``, ``sliding``,
    ``chunked`` (chunked local attention) or ``mamba`` (linear attention / SSM state); empty when
    every layer is full attention or only the sliding count is known."""
    attention_chunk_size: int | None = None
    mamba_state_bytes: int = 0
    """Bytes of one Mamba layer's state (one request, one checkpoint)."""
    indexer_bytes_per_token: int = 0
    """DeepSeek sparse attention (DSA, DeepSeek-V3.2): the lightning indexer's key cache per token
    and layer, kept beside the MLA latent in every layer (:attr:`layer_bytes_per_token`)."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes"):
            _require_int(name, getattr(self, name), minimum=1)
        _require_int("num_sliding_layers", self.num_sliding_layers, minimum=0)
        if self.num_sliding_layers >= self.num_layers:
            raise UsageError(f"num_sliding_layers must be below num_layers ({self.num_layers}), got {self.num_sliding_layers}")
        if (self.sliding_window is None) != (self.num_sliding_layers == 0):
            raise UsageError("sliding_window and num_sliding_layers > 0 must be given together or not at all")
        if self.sliding_window is not None:
            _require_int("sliding_window", self.sliding_window, minimum=1)
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise UsageError("kv_lora_rank and qk_rope_head_dim must be given together (MLA) or not at all")
        if self.layer_kinds:
            if len(self.layer_kinds) != self.num_layers or not set(self.layer_kinds) <= set(LAYER_KINDS):
                raise UsageError(f"layer_kinds must name one of {', '.join(LAYER_KINDS)} per layer ({self.num_layers})")
            if self.layer_kinds.count("sliding") != self.num_sliding_layers:
                raise UsageError("layer_kinds must count num_sliding_layers sliding layers")
            if ("chunked" in self.layer_kinds) != (self.attention_chunk_size is not None):
                raise UsageError("chunked layers and attention_chunk_size must be given together")
            if ("mamba" in self.layer_kinds) != (self.mamba_state_bytes > 0):
                raise UsageError("mamba layers and mamba_state_bytes must be given together")
        if self.kv_lora_rank is not None:
            _require_int("kv_lora_rank", self.kv_lora_rank, minimum=1)
            _require_int("qk_rope_head_dim", self.qk_rope_head_dim, minimum=0)
        _require_int("indexer_bytes_per_token", self.indexer_bytes_per_token, minimum=0)
        if self.indexer_bytes_per_token and self.kv_lora_rank is None:
            raise UsageError("indexer_bytes_per_token (DeepSeek sparse attention) needs an MLA model (kv_lora_rank)")

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (one latent per layer instead of K and V)."""
        return self.kv_lora_rank is not None

    @property
    def is_sparse_mla(self) -> bool:
        """True for DeepSeek sparse attention (an MLA latent plus an indexer key in every layer)."""
        return self.indexer_bytes_per_token > 0

    @property
    def layer_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies in one layer (MLA: the latent plus the RoPE key).

        DeepSeek sparse attention adds the indexer's key (:attr:`indexer_bytes_per_token`), and
        its fp8 cache is vLLM 0.33.0's ``fp8_ds_mla`` layout: the latent in fp8, one fp32 scale
        per 128 values, the RoPE key kept in bf16 (656 B for DeepSeek-V3.2,
        ``v1/attention/backends/mla/flashmla_sparse.py:79``; any quantized dtype is served in it,
        ``model_executor/layers/attention/mla_attention.py:359``).

        >>> KNOWN_MODELS["llama-3.1-8b"].layer_bytes_per_token
        4096
        >>> geometry_for("deepseek-v3.2").layer_bytes_per_token  # bf16 latent + RoPE key, fp8 indexer key
        1284
        """
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            if self.indexer_bytes_per_token and self.dtype_bytes == 1:
                latent = self.kv_lora_rank + self.kv_lora_rank // 128 * 4 + self.qk_rope_head_dim * 2
            else:
                latent = (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
            return latent + self.indexer_bytes_per_token
        return 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def vllm_block_size(self) -> int | None:
        """The KV block vLLM 0.33.0 gives this model when the user sets none, if not its default 16:
        64 for DeepSeek sparse attention (its indexer kernels read 64-token pages:
        ``v1/attention/backends/mla/indexer.py:285``; FlashMLA sparse needs a multiple of 64,
        ``flashmla_sparse.py:158``)."""
        return 64 if self.is_sparse_mla else None

    @property
    def num_full_layers(self) -> int:
        """Layers with full attention (all layers unless some are sliding-window, chunked-local or
        Mamba layers)."""
        if self.layer_kinds:
            return self.layer_kinds.count("full")
        return self.num_layers - self.num_sliding_layers

    @property
    def is_hybrid(self) -> bool:
        """True when some layers are sliding-window layers."""
        return self.num_sliding_layers > 0

    @property
    def has_kv_groups(self) -> bool:
        """True when some layers are not full attention (sliding-window, chunked-local or Mamba):
        vLLM caches them in several KV cache groups of one pool."""
        return self.is_hybrid or bool(set(self.layer_kinds) - {"full"})

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token of the full-attention layers: what a cached block costs per
        token. Equal to :attr:`all_layers_bytes_per_token` unless the model is hybrid."""
        return self.num_full_layers * self.layer_bytes_per_token

    @property
    def sliding_bytes_per_token(self) -> int:
        """KV bytes per token of the sliding-window layers (held for at most the window)."""
        return self.num_sliding_layers * self.layer_bytes_per_token

    @property
    def all_layers_bytes_per_token(self) -> int:
        """Every layer counted as full attention (the over-count for hybrid models)."""
        return self.num_layers * self.layer_bytes_per_token

    def kv_bytes_for(self, tokens: Any) -> Any:
        """KV bytes of a request of ``tokens`` tokens: full layers x tokens + sliding layers x
        min(tokens, window). Works on numpy arrays.

        >>> g = ModelGeometry("h", 4, 1, 8, 2, sliding_window=16, num_sliding_layers=3)
        >>> g.kv_bytes_for(10), g.kv_bytes_for(100)
        (1280, 4736)
        """
        window = self.sliding_window or 0
        out = self.kv_bytes_per_token * np.asarray(tokens) + self.sliding_bytes_per_token * np.minimum(tokens, window)
        return int(out) if np.ndim(out) == 0 else out


LAYER_KINDS = ("full", "sliding", "chunked", "mamba")
"""The KV cache kinds of a layer (vLLM's FullAttentionSpec, SlidingWindowSpec,
ChunkedLocalAttentionSpec, MambaSpec)."""


def _require_int(name: str, value: Any, minimum: int) -> None:
    """UsageError unless value is an int >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}")


DEFAULT_MODEL = ModelGeometry("qwen2.5-1.5b", num_layers=28, num_kv_heads=2, head_dim=128, dtype_bytes=2)
"""The lab's measured model (data/fixtures/README.md): Qwen2.5-1.5B shapes in bf16, 28672 B/token."""

KNOWN_MODELS: dict[str, ModelGeometry] = {
    geometry.name: geometry
    for geometry in (
        DEFAULT_MODEL,
        ModelGeometry("qwen2.5-7b", num_layers=28, num_kv_heads=4, head_dim=128, dtype_bytes=2),
        ModelGeometry("llama-3.1-8b", num_layers=32, num_kv_heads=8, head_dim=128, dtype_bytes=2),
        ModelGeometry("llama-3.1-70b", num_layers=80, num_kv_heads=8, head_dim=128, dtype_bytes=2),
        ModelGeometry(
            "deepseek-v3", num_layers=61, num_kv_heads=128, head_dim=192, dtype_bytes=2,
            kv_lora_rank=512, qk_rope_head_dim=64,
        ),
    )
}
"""Published geometries (bf16 KV cache) by lower-case name; see :func:`geometry_for`."""


def with_kv_bytes_per_token(geometry: ModelGeometry, per_token: int, name: str) -> ModelGeometry:
    """A geometry of ``per_token`` KV bytes per token, as a log states them (LMCache's shapes x
    dtypes): ``geometry``'s own shapes at another element size when one of 1, 2, 4 or 8 bytes
    gives ``per_token`` (an fp8 KV cache of the model: its layers and heads kept, so tensor
    parallelism shards it as before), else one layer of that many bytes named ``name``. O(1).

    >>> g = with_kv_bytes_per_token(DEFAULT_MODEL, 14336, "log"); g.name, g.dtype_bytes, g.kv_bytes_per_token
    ('qwen2.5-1.5b', 1, 14336)
    >>> g = with_kv_bytes_per_token(DEFAULT_MODEL, 4096, "log"); g.name, g.num_layers, g.kv_bytes_per_token
    ('log', 1, 4096)
    """
    if per_token < 1:
        raise ValueError(f"KV bytes per token must be positive, got {per_token}")
    for size in (1, 2, 4, 8):
        same = dataclasses.replace(geometry, dtype_bytes=size)
        if same.kv_bytes_per_token == per_token:
            return same
    if per_token % 2 == 0:  # K and V of one head
        return ModelGeometry(name, num_layers=1, num_kv_heads=1, head_dim=per_token // 2, dtype_bytes=1)
    return ModelGeometry(name, num_layers=1, num_kv_heads=1, head_dim=1, dtype_bytes=1, kv_lora_rank=per_token,
                         qk_rope_head_dim=0)


def dtype_bytes(dtype: str | int, where: str = "dtype") -> int:
    """Bytes per element of a dtype name (``bfloat16``, ``float16``, ``float32``, ``float8*``...).

    An int is taken as the byte count itself.

    >>> dtype_bytes("float8_e4m3fn"), dtype_bytes("bfloat16"), dtype_bytes(4)
    (1, 2, 4)
    """
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in (1, 2, 4, 8):
            return dtype
        raise UsageError(f"{where} as a byte count must be 1, 2, 4 or 8, got {dtype}")
    if isinstance(dtype, str):
        name = dtype.lower().removeprefix("torch.")
        if name.startswith(("float8", "fp8")):
            return 1
        if name in _DTYPE_BYTES:
            return _DTYPE_BYTES[name]
    raise UsageError(
        f"{where} must be one of bfloat16, float16, float32, float64, float8* (or a byte count "
        f"1, 2, 4, 8), got {dtype!r}"
    )


def _load_config(path_or_dict: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[dict[str, Any], str, str]:
    """(config dict, where it came from for messages, default model name)."""
    if isinstance(path_or_dict, Mapping):
        config = dict(path_or_dict)
        return config, "config", str(config.get("_name_or_path") or config.get("model_type") or "unnamed")
    path = os.fspath(path_or_dict)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    config = read_config_json(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem == "config":  # name a model folder's config.json after the folder
        stem = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = config.get("_name_or_path") or stem or config.get("model_type") or "unnamed"
    return config, path, str(name)


def _config_int(config: Mapping[str, Any], key: str, where: str) -> int | None:
    """config[key] as a positive int, None when absent or null; UsageError when malformed."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{where}: field '{key}' must be a non-negative integer, got {value!r}")
    return value


def _required(config: Mapping[str, Any], key: str, where: str, why: str = "") -> int:
    """A field that must be present; the error names the file and the field."""
    value = _config_int(config, key, where)
    if value is None or value == 0:
        raise UsageError(f"{where}: missing field '{key}'{why}")
    return value


def from_hf_config(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any], dtype: str | int | None = None
) -> ModelGeometry:
    """Read a Hugging Face ``config.json`` (a file, a model folder or a dict) into a ModelGeometry.

    Uses ``num_hidden_layers``; ``num_key_value_heads`` (default ``num_attention_heads``);
    ``head_dim`` (default ``hidden_size // num_attention_heads``); ``torch_dtype`` or
    ``dtype`` unless ``dtype`` is passed (KV-cache element type: e.g. "bfloat16", "fp8", or a
    byte count). A config with ``kv_lora_rank`` is MLA (also needs ``qk_rope_head_dim``).
    Multimodal configs with a nested ``text_config`` use the text model's fields. A missing
    field is a UsageError naming the file and the field.
    """
    top, where, name = _load_config(path_or_dict)
    config = top
    if isinstance(top.get("text_config"), Mapping) and "num_hidden_layers" not in top:
        config = top["text_config"]
        where = f"{where} (text_config)"
    layers = _required(config, "num_hidden_layers", where)
    if dtype is None:
        found = config.get("torch_dtype") or config.get("dtype") or top.get("torch_dtype") or top.get("dtype")
        if found is None and _layer_kinds(config, layers, where):
            # a hybrid model's config without a dtype (gpt-oss): transformers reads float32, which
            # vLLM 0.33.0's "auto" dtype downcasts to the platform's first (bfloat16 on CUDA;
            # config/model.py:2441 _resolve_auto_dtype)
            found = "bfloat16"
        if found is None:
            raise UsageError(f"{where}: missing field 'torch_dtype' (or 'dtype'); pass dtype= to choose one")
        element_bytes = dtype_bytes(found, where=f"{where}: field 'torch_dtype'")
    else:
        element_bytes = dtype_bytes(dtype)
    heads = _config_int(config, "num_attention_heads", where)
    kv_heads = _config_int(config, "num_key_value_heads", where) or heads
    head_dim = _config_int(config, "head_dim", where)
    kv_lora_rank = _config_int(config, "kv_lora_rank", where)
    if kv_lora_rank:
        rope = _config_int(config, "qk_rope_head_dim", where)
        if rope is None:
            raise UsageError(f"{where}: missing field 'qk_rope_head_dim' (needed with kv_lora_rank, MLA)")
        nope = _config_int(config, "qk_nope_head_dim", where) or 0
        return ModelGeometry(
            name, layers, kv_heads or 1, head_dim or (nope + rope) or 1, element_bytes,
            kv_lora_rank=kv_lora_rank, qk_rope_head_dim=rope, indexer_bytes_per_token=_indexer_bytes(config, where),
        )
    if not kv_heads:
        raise UsageError(f"{where}: missing field 'num_key_value_heads' (or 'num_attention_heads')")
    if not head_dim:
        hidden = _required(config, "hidden_size", where, " (needed when head_dim is absent)")
        attention_heads = _required(config, "num_attention_heads", where, " (needed when head_dim is absent)")
        head_dim = hidden // attention_heads
    kinds = _layer_kinds(config, layers, where)
    if kinds:
        sliding = kinds.count("sliding")
        window = _required(config, "sliding_window", where, " (needed with sliding layers)") if sliding else None
        chunk = _required(config, "attention_chunk_size", where, " (needed with chunked layers)") if "chunked" in kinds else None
        state = _mamba_state_bytes(config, where, element_bytes, _mamba_ssm_bytes(top, config, where, element_bytes)) \
            if "mamba" in kinds else 0
        if kinds.count("full") == 0:
            what = "every layer is sliding-window" if set(kinds) == {"sliding"} else "no layer is full attention"
            raise UsageError(f"{where}: {what}; a prefix cache of such a model is not modelled")
        return ModelGeometry(name, layers, kv_heads, head_dim, element_bytes, sliding_window=window,
                             num_sliding_layers=sliding, layer_kinds=kinds if set(kinds) != {"full"} else (),
                             attention_chunk_size=chunk, mamba_state_bytes=state)
    window, sliding = _sliding_layers(config, layers, where)
    return ModelGeometry(name, layers, kv_heads, head_dim, element_bytes, sliding_window=window, num_sliding_layers=sliding)


def _indexer_bytes(config: Mapping[str, Any], where: str) -> int:
    """DeepSeek sparse attention's indexer key bytes per token and layer, 0 without DSA.

    vLLM 0.33.0 (``model_executor/models/deepseek_v2.py``): a config with ``index_topk`` is
    DeepSeek-V3.2 (:1138); each layer whose indexer is not skipped keeps a key cache of
    ``index_head_dim`` fp8 values plus one fp32 scale per 128 (``Indexer``, :699, :729-734:
    ``head_dim + head_dim // 128 * 4`` bytes, uint8, whatever the KV dtype), one
    ``MLAAttentionSpec`` beside the latent's in the same full-attention group (:658). With the
    default ``index_topk_freq`` 1 and no ``index_topk_pattern`` no layer skips it (:1145-1156); a
    config that skips some is refused (their caches would differ by layer).
    """
    if config.get("index_topk") is None:
        return 0
    if (_config_int(config, "index_topk_freq", where) or 1) != 1 or config.get("index_topk_pattern"):
        raise UsageError(f"{where}: an index_topk_freq or index_topk_pattern that skips the indexer in some layers "
                         "is not modelled (their KV caches differ by layer)")
    head = _config_int(config, "index_head_dim", where) or 128
    return head + head // 128 * 4


_KIND_OF_TYPE = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
                 "linear_attention": "mamba"}


def _layer_kinds(config: Mapping[str, Any], layers: int, where: str) -> tuple[str, ...]:
    """Per-layer kinds as vLLM 0.33.0's model code decides them (empty: the legacy sliding rule):

    - ``layer_types`` when given (``sliding_attention``, ``full_attention``, ``chunked_attention``,
      ``linear_attention``): gpt-oss (``models/gpt_oss.py``), Gemma 3 (``models/gemma3.py``),
      Qwen3-Next (``models/qwen3_next.py``) read it;
    - Gemma 3 without it: ``sliding_window_pattern`` (transformers' default 6): layer i is full iff
      ``(i + 1) % pattern == 0``;
    - gpt-oss without it: even layers sliding, odd full (``models/gpt_oss.py``);
    - Llama 4 (``attention_chunk_size``): ``no_rope_layers[i] == 0`` is a full ("NoPE") layer, else
      chunked local (``models/llama4.py``); an empty list is transformers' default, every
      ``no_rope_layer_interval``-th (4) layer full;
    - Qwen3-Next without ``layer_types``: every ``full_attention_interval``-th layer full, the rest
      linear attention (Mamba-style state).
    """
    model_type = str(config.get("model_type") or "")
    types = config.get("layer_types")
    if isinstance(types, list) and all(isinstance(t, str) for t in types) and len(types) == layers \
            and set(types) <= set(_KIND_OF_TYPE) and set(types) & {"chunked_attention", "linear_attention"}:
        return tuple(_KIND_OF_TYPE[t] for t in types)
    if isinstance(types, list) and types:
        return tuple(_KIND_OF_TYPE.get(t, "full") for t in types) if len(types) == layers and \
            set(types) <= set(_KIND_OF_TYPE) else ()
    pattern = _config_int(config, "sliding_window_pattern", where)
    if (pattern or model_type.startswith("gemma3")) and config.get("sliding_window"):
        pattern = pattern or 6
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers))
    if model_type == "gpt_oss" and config.get("sliding_window"):
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(layers))
    if model_type.startswith("llama4") and config.get("attention_chunk_size"):
        no_rope = config.get("no_rope_layers") or []
        if not no_rope:
            interval = _config_int(config, "no_rope_layer_interval", where) or 4
            no_rope = [int((i + 1) % interval != 0) for i in range(layers)]
        if len(no_rope) != layers:
            raise UsageError(f"{where}: field 'no_rope_layers' must have one entry per layer ({layers})")
        return tuple("full" if x == 0 else "chunked" for x in no_rope)
    every = _config_int(config, "full_attention_interval", where)
    if every and config.get("linear_num_value_heads"):
        return tuple("full" if (i + 1) % every == 0 else "mamba" for i in range(layers))
    return ()


_QWEN3_5 = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
            "Qwen3_5MoeForConditionalGeneration")
"""The architectures whose ``mamba_ssm_dtype`` vLLM 0.33.0 applies (``models/config.py:1259-1262``)."""


def _mamba_ssm_bytes(top: Mapping[str, Any], config: Mapping[str, Any], where: str, element_bytes: int) -> int:
    """Bytes per element of a gated-delta-net layer's temporal (SSM) state. vLLM 0.33.0 keeps
    ``mamba_ssm_cache_dtype`` "auto" (the model dtype) except for Qwen3.5, whose config's
    ``mamba_ssm_dtype`` (``float32`` in the published Qwen3.5 configs) becomes the SSM cache dtype
    (``Qwen3_5ForConditionalGenerationConfig.verify_and_update_config``, ``models/config.py:953-977``).
    Without ``architectures`` the ``model_type`` (``qwen3_5*``) decides. O(1).

    >>> _mamba_ssm_bytes({"architectures": ["Qwen3_5ForConditionalGeneration"]}, {"mamba_ssm_dtype": "float32"}, "c", 2)
    4
    >>> _mamba_ssm_bytes({"architectures": ["Qwen3NextForCausalLM"]}, {"mamba_ssm_dtype": "float32"}, "c", 2)
    2
    """
    found = config.get("mamba_ssm_dtype")
    archs = top.get("architectures") or config.get("architectures") or []
    if archs:
        qwen3_5 = isinstance(archs, list) and str(archs[0]) in _QWEN3_5
    else:
        qwen3_5 = str(top.get("model_type") or config.get("model_type") or "").startswith("qwen3_5")
    if found is None or not qwen3_5:
        return element_bytes
    return dtype_bytes(str(found), where=f"{where}: field 'mamba_ssm_dtype'")


def _mamba_state_bytes(config: Mapping[str, Any], where: str, element_bytes: int, ssm_bytes: int | None = None) -> int:
    """One gated-delta-net layer's state bytes (Qwen3-Next, Qwen3.5), vLLM 0.33.0
    ``MambaStateShapeCalculator.gated_delta_net_state_shape`` (``mamba_utils.py:272``): a conv
    state of ``(kernel - 1) x (2 x key heads x key dim + value heads x value dim)`` in the model
    dtype and a temporal state of ``value heads x value dim x key dim`` in ``ssm_bytes``
    (default the model dtype: ``_mamba_state_dtype``, ``mamba_utils.py:98``, with
    ``mamba_ssm_cache_dtype`` "auto"; see :func:`_mamba_ssm_bytes`).

    >>> _mamba_state_bytes({"linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
    ...     "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}, "c", 2)
    1097728
    """
    nk = _required(config, "linear_num_key_heads", where, " (needed with linear-attention layers)")
    dk = _required(config, "linear_key_head_dim", where, " (needed with linear-attention layers)")
    nv = _required(config, "linear_num_value_heads", where, " (needed with linear-attention layers)")
    dv = _required(config, "linear_value_head_dim", where, " (needed with linear-attention layers)")
    kernel = _required(config, "linear_conv_kernel_dim", where, " (needed with linear-attention layers)")
    return (kernel - 1) * (2 * nk * dk + nv * dv) * element_bytes + nv * dv * dk * (ssm_bytes or element_bytes)


def _sliding_layers(config: Mapping[str, Any], layers: int, where: str) -> tuple[int | None, int]:
    """(window, number of sliding layers) from ``layer_types`` or ``sliding_window_pattern``."""
    types = config.get("layer_types")
    pattern = _config_int(config, "sliding_window_pattern", where)
    if isinstance(types, list):
        if len(types) != layers or not all(isinstance(t, str) for t in types):
            raise UsageError(f"{where}: field 'layer_types' must list one string per layer ({layers}), got {types!r}")
        sliding = sum(t == "sliding_attention" for t in types)
    elif pattern:
        sliding = sum((i + 1) % pattern != 0 for i in range(layers))
    else:
        return None, 0
    if sliding == 0:
        return None, 0
    window = _required(config, "sliding_window", where, " (needed with sliding layers)")
    if sliding >= layers:
        raise UsageError(f"{where}: every layer is sliding-window; a prefix cache of such a model is not modelled")
    return window, sliding


@cache
def catalog_entries() -> dict[str, dict[str, Any]]:
    """The bundled catalog (``data/models.json``) as config.json dicts by lower-case name, with
    ``layer_types_repeat`` expanded to ``layer_types`` (see :mod:`stackdist.planning.catalog`)."""
    text = resources.files("stackdist.planning").joinpath("data/models.json").read_text(encoding="utf-8")
    out = {}
    for name, entry in json.loads(text)["models"].items():
        config = dict(entry, _name_or_path=name)
        unit = config.pop("layer_types_repeat", None)
        if unit:
            config["layer_types"] = [unit[i % len(unit)] for i in range(int(config["num_hidden_layers"]))]
        out[name] = config
    return out


def catalog_name(name: str) -> str | None:
    """The catalog's name for a model name or Hugging Face repo id (case-insensitive), or None.

    >>> catalog_name("Qwen/Qwen3-8B"), catalog_name("google/gemma-3-27b-it"), catalog_name("gpt-5")
    ('qwen3-8b', 'gemma-3-27b', None)
    """
    key = name.strip().lower()
    tail = key.rsplit("/", 1)[-1]
    entries = catalog_entries()
    if tail in entries:
        return tail
    for known, entry in entries.items():
        repo = str(entry.get("hf_repo", "")).lower()
        if key == repo or tail == repo.rsplit("/", 1)[-1]:
            return known
    return None


def geometry_for(name_or_path: str | os.PathLike[str]) -> ModelGeometry:
    """A known or catalog model by name or HF repo id (case-insensitive, ``org/`` prefix
    ignored) or a config.json path. An existing file or folder wins over a known name.

    >>> geometry_for("meta-llama/Llama-3.1-8B").kv_bytes_per_token
    131072
    >>> geometry_for("openai/gpt-oss-120b").sliding_window
    128
    """
    text = os.fspath(name_or_path)
    if os.path.exists(text):
        return from_hf_config(text)
    key = text.lower().rsplit("/", 1)[-1]
    if key in KNOWN_MODELS:
        return KNOWN_MODELS[key]
    found = catalog_name(text)
    if found is not None:
        return from_hf_config(catalog_entries()[found])
    raise UsageError(
        f"model must be a config.json path or one of {', '.join(sorted(catalog_entries()))}; got {text!r}"
    )


KV_DTYPES = ("auto", "bf16", "bfloat16", "fp16", "float16", "fp32", "float32", "fp8", "fp8_e4m3", "fp8_e5m2")
"""``--kv-dtype`` values: ``auto`` is the model's own dtype (vLLM's ``--kv-cache-dtype auto``)."""


@dataclass(frozen=True)
class ModelSpec:
    """A model as the planner needs it: KV geometry, weights and prefill FLOPs.

    ``params`` / ``active_params``: total and per-token parameters (None when unknown);
    ``weights_bytes``: the weights' bytes on the GPUs of one replica (None when unknown);
    ``attention_flops_per_pair``: FLOPs of one layer for one (query, key) pair, QK^T plus AV:
    2 x heads x (qk_dim + v_dim).
    """

    name: str
    geometry: ModelGeometry
    hf_repo: str | None = None
    params: float | None = None
    active_params: float | None = None
    weights_bytes: float | None = None
    weights_source: str = "unknown"
    attention_flops_per_pair: int | None = None
    num_attention_heads: int | None = None

    @property
    def active(self) -> float | None:
        """Parameters used per token (the total for dense models)."""
        return self.active_params if self.active_params is not None else self.params

    def describe(self) -> dict[str, Any]:
        """JSON-ready fields for the plan's model section."""
        g = self.geometry
        return {
            "hf_repo": self.hf_repo, "params": self.params, "active_params": self.active,
            "weights_gib": None if self.weights_bytes is None else self.weights_bytes / 2**30,
            "weights_source": self.weights_source, "kv_dtype_bytes": g.dtype_bytes,
            "num_layers": g.num_layers, "num_full_layers": g.num_full_layers,
            "num_sliding_layers": g.num_sliding_layers, "sliding_window_tokens": g.sliding_window,
            "mla": g.is_mla, "dsa_indexer_bytes_per_token_and_layer": g.indexer_bytes_per_token,
            "sliding_bytes_per_token": g.sliding_bytes_per_token,
            "all_layers_bytes_per_token": g.all_layers_bytes_per_token,
            "attention_flops_per_pair": self.attention_flops_per_pair,
        }


def _attention_flops(config: Mapping[str, Any]) -> int | None:
    heads = config.get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0:
        return None
    if config.get("kv_lora_rank"):
        qk = int(config.get("qk_nope_head_dim") or 0) + int(config.get("qk_rope_head_dim") or 0)
        v = int(config.get("v_head_dim") or qk)
    else:
        hidden = config.get("hidden_size")
        qk = int(config.get("head_dim") or (hidden // heads if isinstance(hidden, int) else 0))
        v = qk
    return 2 * heads * (qk + v) if qk else None


def spec_from_config(
    config: Mapping[str, Any] | str | os.PathLike[str], name: str | None = None, kv_dtype: str | None = None
) -> ModelSpec:
    """A :class:`ModelSpec` from a config dict or ``config.json`` path (params and weights from
    ``params`` / ``active_params`` / ``weights_gib`` / ``weight_bytes_per_param`` when present)."""
    if not isinstance(config, Mapping):
        path = os.path.join(config, "config.json") if os.path.isdir(config) else os.fspath(config)
        geometry = from_hf_config(path, dtype=_kv_bytes(kv_dtype))
        fields: dict[str, Any] = read_config_json(path)  # from_hf_config has checked it is a JSON object
    else:
        fields = dict(config)
        geometry = from_hf_config(dict(fields, _name_or_path=name or fields.get("_name_or_path")), dtype=_kv_bytes(kv_dtype))
    text: Mapping[str, Any] = (fields["text_config"] if isinstance(fields.get("text_config"), Mapping)
                               and "num_hidden_layers" not in fields else fields)
    params, active = fields.get("params"), fields.get("active_params")
    weights, source = None, "unknown (give --weights)"
    per = fields.get("weight_bytes_per_param") or _weight_bytes(fields)
    if params is None and (estimate := estimate_params(text)) is not None:
        params, active = estimate
        source = f"parameters estimated from the config x {per:g} bytes"
    elif params is not None:
        source = f"params x {per:g} bytes"
    if fields.get("weights_gib") is not None:
        weights, source = float(fields["weights_gib"]) * 2**30, "published checkpoint size"
    elif params is not None:
        weights = float(params) * float(per)
    heads = text.get("num_attention_heads")
    return ModelSpec(name or geometry.name, geometry, fields.get("hf_repo"), params, active, weights, source,
                     _attention_flops(text), heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0
                     else None)


def _weight_bytes(config: Mapping[str, Any]) -> float:
    """Bytes per stored weight: an fp8 or n-bit ``quantization_config``, else ``torch_dtype``."""
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping):
        if str(quant.get("quant_method", "")).lower() == "fp8" or str(quant.get("fmt", "")).startswith("e4m3"):
            return 1.0
        if isinstance(quant.get("bits"), int) and quant["bits"] > 0:
            return quant["bits"] / 8
    try:
        return float(dtype_bytes(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")))
    except UsageError:
        return 2.0


def estimate_params(config: Mapping[str, Any]) -> tuple[float, float] | None:
    """(total, active per token) parameters of a decoder from its config.json fields: embeddings
    (twice unless tied), attention (GQA q/k/v/o or MLA's low-rank projections), gated MLPs
    (3 x hidden x intermediate) and MoE experts (routed, shared, router; ``first_k_dense_replace``
    dense layers). Norms and biases are left out (well under 1 %). None when fields are missing.

    >>> total, active = estimate_params({"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
    ...     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8})
    >>> round(total / 1e9, 2), total == active
    (8.03, True)
    """
    def get(key: str, default: Any = None) -> Any:
        value = config.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    vocab, h, layers, heads = get("vocab_size"), get("hidden_size"), get("num_hidden_layers"), get("num_attention_heads")
    if not (vocab and h and layers and heads):
        return None
    if get("kv_lora_rank"):
        nope, rope, v, rank = get("qk_nope_head_dim", 0), get("qk_rope_head_dim", 0), get("v_head_dim", 0), get("kv_lora_rank")
        q_rank = get("q_lora_rank")
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        attention = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
    else:
        hd, kv = get("head_dim") or h // heads, get("num_key_value_heads") or heads
        attention = 2 * h * heads * hd + 2 * h * kv * hd
    experts = get("num_local_experts") or get("num_experts") or get("n_routed_experts") or 0
    dense_mlp = 3 * h * (get("intermediate_size") or 0)
    total = active = vocab * h * (1 if config.get("tie_word_embeddings") else 2) + layers * attention
    if not experts:
        return float(total + layers * dense_mlp), float(active + layers * dense_mlp)
    moe = 3 * h * (get("moe_intermediate_size") or get("intermediate_size") or 0)
    shared = 3 * h * (get("shared_expert_intermediate_size") or 0) + get("n_shared_experts", 0) * moe
    dense, sparse = get("first_k_dense_replace", 0), layers - get("first_k_dense_replace", 0)
    k = get("num_experts_per_tok") or get("experts_per_token") or 1
    total += dense * dense_mlp + sparse * (experts * moe + shared + h * experts)
    active += dense * dense_mlp + sparse * (k * moe + shared + h * experts)
    return float(total), float(active)


def _kv_bytes(kv_dtype: str | None) -> str | None:
    if kv_dtype is None or kv_dtype == "auto":
        return None
    if kv_dtype not in KV_DTYPES:
        raise UsageError(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}; got {kv_dtype!r}")
    return kv_dtype


@cache
def catalog() -> dict[str, ModelSpec]:
    """Every bundled model by lower-case name (model dtype KV cache)."""
    return {name: spec_from_config(entry, name) for name, entry in catalog_entries().items()}


def model_spec(name_or_path: str | os.PathLike[str], kv_dtype: str | None = None) -> ModelSpec:
    """A catalog model by name or HF repo id (case-insensitive), or a ``config.json`` path (a file
    or folder that exists wins); ``kv_dtype`` replaces the KV element type (``auto``: the model's).

    >>> model_spec("meta-llama/Llama-3.3-70B-Instruct").name
    'llama-3.3-70b'
    """
    text = os.fspath(name_or_path)
    if os.path.exists(text):
        return spec_from_config(text, kv_dtype=kv_dtype)
    found = catalog_name(text)
    if found is None:
        raise UsageError(f"--model must be a config.json path or one of {', '.join(sorted(catalog_entries()))}; got {text!r}")
    spec = catalog()[found]
    byte_name = _kv_bytes(kv_dtype)
    if byte_name is None:
        return spec
    return dataclasses.replace(spec, geometry=dataclasses.replace(spec.geometry, dtype_bytes=dtype_bytes(byte_name, "--kv-dtype")))


def catalog_help() -> str:
    """The catalog as one line per model for ``--help``: name, KV bytes per token, source."""
    lines = []
    for name, spec in catalog().items():
        g = spec.geometry
        others = {k: g.layer_kinds.count(k) for k in ("chunked", "mamba") if k in g.layer_kinds}
        what = {"chunked": f"chunked local, chunk {g.attention_chunk_size:,}" if g.attention_chunk_size else "",
                "mamba": f"Mamba/GDN, state {g.mamba_state_bytes:,} B"}
        kind = "MLA + DSA indexer key" if g.is_sparse_mla else "MLA" if g.is_mla else (
            f"{g.num_sliding_layers}/{g.num_layers} layers window {g.sliding_window}" if g.is_hybrid else
            ", ".join(f"{n}/{g.num_layers} layers {what[k]}" for k, n in others.items()) or "full attention")
        lines.append(f"  {name:<18} {g.kv_bytes_per_token:>7,} B/token ({kind})  {spec.hf_repo}")
    return "\n".join(lines)
