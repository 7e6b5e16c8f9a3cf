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

Not modelled: sliding-window or linear-attention layers (all layers count as full attention),
KV-cache quantisation other than via ``dtype``, multi-token-prediction layers.

>>> DEFAULT_MODEL.kv_bytes_per_token
28672
>>> geometry_for("deepseek-v3").kv_bytes_per_token
70272
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from stackdist.errors import UsageError

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

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes"):
            _require_int(name, getattr(self, name), minimum=1)
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise UsageError("kv_lora_rank and qk_rope_head_dim must be given together (MLA) or not at all")
        if self.kv_lora_rank is not None:
            _require_int("kv_lora_rank", self.kv_lora_rank, minimum=1)
            _require_int("qk_rope_head_dim", self.qk_rope_head_dim, minimum=0)

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (one latent per layer instead of K and V)."""
        return self.kv_lora_rank is not None

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across all layers (see the module docstring)."""
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


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
        if name.startswith("float8") or name.startswith("fp8"):
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
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such config file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON config: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: a config.json must hold a JSON object")
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
            kv_lora_rank=kv_lora_rank, qk_rope_head_dim=rope,
        )
    if not kv_heads:
        raise UsageError(f"{where}: missing field 'num_key_value_heads' (or 'num_attention_heads')")
    if not head_dim:
        hidden = _required(config, "hidden_size", where, " (needed when head_dim is absent)")
        attention_heads = _required(config, "num_attention_heads", where, " (needed when head_dim is absent)")
        head_dim = hidden // attention_heads
    return ModelGeometry(name, layers, kv_heads, head_dim, element_bytes)


def geometry_for(name_or_path: str | os.PathLike[str]) -> ModelGeometry:
    """A known model by name (case-insensitive, ``org/`` prefix ignored) or a config.json path.

    An existing file or folder wins over a known name.

    >>> geometry_for("meta-llama/Llama-3.1-8B").kv_bytes_per_token
    131072
    """
    text = os.fspath(name_or_path)
    if os.path.exists(text):
        return from_hf_config(text)
    key = text.lower().rsplit("/", 1)[-1]
    if key in KNOWN_MODELS:
        return KNOWN_MODELS[key]
    raise UsageError(
        f"model must be a config.json path or one of {', '.join(sorted(KNOWN_MODELS))}; got {text!r}"
    )
