"""Names as people write them, for the argparse ``type=`` of ``--gpu``, ``--model`` and
``--kv-dtype``: any case, a model by its Hugging Face repo id, a KV dtype by vLLM's or torch's
name; an unknown one is a usage error with the closest name (:func:`~.common.did_you_mean`).

Light on purpose: the planner (numpy, numba) is imported only when a name is checked, so that
``curve`` and ``tiers`` build their parsers without it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .args import InputPath
from .common import did_you_mean

__all__ = ["KV_DTYPE_ALIASES", "KV_DTYPE_NAMES", "add_model_arguments", "gpu_name", "kv_dtype_name", "model_name"]

KV_DTYPE_ALIASES = {
    "auto": "auto", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
    "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32", "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2", "fp8_inc": "fp8",
}
"""``--kv-dtype`` spellings -> the name the planner uses. vLLM's ``--kv-cache-dtype`` choices
(``CacheDType`` in ``vllm/config/cache.py``: auto, bfloat16, float16 (newer releases), fp8, fp8_e4m3,
fp8_e5m2, fp8_inc, fp8_ds_mla; some releases int8) plus torch's names (``torch.float8_e4m3fn``)
and the short forms (bf16, fp16, half). ``fp8_inc`` (Intel Gaudi's fp8) is 1 byte like fp8.
Case, ``-`` for ``_`` and a ``torch.`` prefix do not matter. Every value is one of the planner's
``KV_DTYPES`` (``stackdist.planning.geometry``; tests/test_cli_names.py checks each)."""

KV_DTYPE_NAMES = tuple(dict.fromkeys(KV_DTYPE_ALIASES.values()))
"""The names ``--kv-dtype`` turns every spelling into."""

_KV_NOT_MODELLED = {
    "fp8_ds_mla": "DeepSeek MLA's fp8 layout (656 bytes per token per layer: fp8 latent, fp32 scales, bf16 RoPE) is "
                  "not modelled; --kv-dtype fp8 gives the 1-byte approximation",
    "int8": "an int8 KV cache is not modelled (its scales are not counted); --kv-dtype fp8 gives the 1-byte size",
}


def kv_dtype_name(text: str) -> str:
    """An argparse ``type=`` for ``--kv-dtype``: the planner's name for any common spelling. O(1).

    >>> kv_dtype_name("FP8-E4M3"), kv_dtype_name("torch.float8_e4m3fn"), kv_dtype_name("half"), kv_dtype_name("BF16")
    ('fp8_e4m3', 'fp8_e4m3', 'float16', 'bfloat16')
    """
    key = text.strip().lower().replace("-", "_").removeprefix("torch.")
    if key in KV_DTYPE_ALIASES:
        return KV_DTYPE_ALIASES[key]
    if key in _KV_NOT_MODELLED:
        raise argparse.ArgumentTypeError(f"{text!r}: {_KV_NOT_MODELLED[key]}")
    raise argparse.ArgumentTypeError(f"unknown KV dtype {text!r}{did_you_mean(key, KV_DTYPE_ALIASES)}; one of "
                                     f"{', '.join(KV_DTYPE_NAMES)} (or vLLM's and torch's names: fp8_e4m3fn, half, ...)")


def gpu_name(text: str) -> str:
    """An argparse ``type=`` for ``--gpu``: a bundled GPU, case-insensitive. O(GPUs).

    >>> gpu_name("H200"), gpu_name(" a100-80G ")
    ('h200', 'a100-80g')
    """
    from stackdist.planning.hardware import gpu_table

    table = gpu_table()
    key = text.strip().lower()
    if key not in table:
        raise argparse.ArgumentTypeError(f"unknown GPU {text!r}{did_you_mean(key, table)}; one of {', '.join(table)}")
    return key


def model_name(text: str) -> str:
    """An argparse ``type=`` for ``--model``: a bundled model by name or Hugging Face repo id
    (case-insensitive) as the catalog names it, or a config.json path that exists (an
    :class:`~stackdist.cli.args.InputPath`, so that no output may be it). O(models).

    >>> model_name("QWEN3-32B"), model_name("meta-llama/Llama-3.1-8B-Instruct")
    ('qwen3-32b', 'llama-3.1-8b')
    """
    from stackdist.planning.geometry import catalog_entries, catalog_name

    if os.path.exists(text):
        return InputPath(text)  # a file the command reads: the output guard refuses to overwrite it
    found = catalog_name(text)
    if found is None:
        names = sorted(catalog_entries())
        tail = text.strip().lower().rsplit("/", 1)[-1]
        raise argparse.ArgumentTypeError(f"unknown model {text!r}{did_you_mean(tail, names)}; a config.json path or "
                                         f"one of {', '.join(names)}")
    return found


def add_model_arguments(p: Any, purpose: str) -> None:
    """``--model`` and ``--kv-dtype`` alone (``curve``, ``tiers``: bytes to blocks). O(1)."""
    p.add_argument("--model", type=model_name, metavar="NAME",
                   help=f"a bundled model (as stackdist plan --help lists them) or a config.json: {purpose}")
    p.add_argument("--kv-dtype", type=kv_dtype_name, metavar="DTYPE",
                   help=f"with --model: the KV-cache element type ({', '.join(KV_DTYPE_NAMES)}, or vLLM's names; default "
                   "the model's)")
