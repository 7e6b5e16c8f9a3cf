"""The attention block vLLM 0.33.0's own platform code derives for a Mamba (gated delta net) hybrid,
against the driver's derivation (``drive_vllm_hybrid.build_specs``) and the product's
(``stackdist plan --model-config ... --json``: ``hybrid.block_size_tokens``).

Run with the vLLM venv:

    $VLLM_PY validation/check_hybrid_block_size.py --product-python $VENV/bin/python [CONFIG.json ...]

What runs is vLLM's ``Platform._align_hybrid_block_size`` (``platforms/interface.py:940-1137``)
with the FlashAttention backend class (``v1/attention/backends/flash_attn.py``, kernel blocks
``MultipleOf(16)``), after the architecture's own ``verify_and_update_config``
(``models/config.py:1211``, ``MODELS_CONFIG_MAP``: Qwen3.5 sets ``mamba_ssm_cache_dtype`` from the
config's ``mamba_ssm_dtype``, 953-977). Stand-ins, because no model is built on this CPU:

- ``model_config``: dtype, kv heads, head size, architecture, ``hf_text_config`` from the JSON;
- the model class for the state shape/dtype: Qwen3-Next's ``Qwen3NextForCausalLM``
  (``models/qwen3_next.py:882-912``); Qwen3.5's classmethods (``models/qwen3_5.py:388-420``,
  ``609-640``) are the same calls line for line, and ``qwen3_5.py`` imports the vision tower;
- ``get_mamba_prefill_checkpoint_alignment``: 64 when the GDN prefill is FlashInfer's (Hopper,
  or Blackwell with CUDA 13: ``gdn/qwen_gdn_linear_attn.py:148-270, 686-700``), None with the
  Triton/FLA prefill (Ampere, ROCm, CPU);
- ``_find_non_ssm_backends``: [FlashAttention] (the CUDA default backend);
- modules vLLM imports but this venv lacks (einops, compressed_tensors, ...): empty stand-ins,
  never called on this path.

Prints one JSON line per (config, --block-size, alignment); exit 1 when the three disagree.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

_MISSING = ("einops", "compressed_tensors", "flashinfer", "cutlass", "deep_gemm", "quack", "tilelang", "fla")


class _Absent(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return type(k, (), {"__init__": lambda self, *a, **kw: None, "__call__": lambda self, *a, **kw: None})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in _MISSING:
            try:
                if importlib.machinery.PathFinder.find_spec(name.split(".")[0]) is not None:
                    return None
            except (ImportError, ValueError):
                pass
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Absent(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())

import drive_vllm_hybrid as dvh
import torch
import vllm.model_executor.layers.mamba.abstract as mamba_abstract
from vllm.config import CacheConfig, DeviceConfig, VllmConfig
from vllm.model_executor.models import ModelRegistry
from vllm.model_executor.models.config import MODELS_CONFIG_MAP
from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def vllm_platform_block(cfg: dict, block_size: int | None, alignment: int | None) -> dict:
    """vLLM's own _align_hybrid_block_size on a stand-in model config."""
    t = cfg.get("text_config", cfg)
    arch = (cfg.get("architectures") or t.get("architectures"))[0]
    dtype = DTYPES[str(t.get("torch_dtype") or t.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")]

    class ModelStub:
        use_mla = False
        is_hybrid = True
        architecture = arch
        hf_text_config = types.SimpleNamespace(**t)
        hf_config = types.SimpleNamespace(**cfg)

        def get_num_kv_heads(self, parallel_config):
            return t["num_key_value_heads"]

        def get_head_size(self):
            return t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]

        def __getattr__(self, k):
            return None

    ModelStub.dtype = dtype
    cache = CacheConfig(block_size=block_size or CacheConfig.DEFAULT_BLOCK_SIZE, enable_prefix_caching=True,
                        mamba_cache_mode="align")
    vc = VllmConfig(cache_config=cache, device_config=DeviceConfig("cpu"))
    object.__setattr__(vc, "model_config", ModelStub())
    if arch in MODELS_CONFIG_MAP:
        MODELS_CONFIG_MAP[arch].verify_and_update_config(vc)
    qwen3_next = importlib.import_module("vllm.model_executor.models.qwen3_next").Qwen3NextForCausalLM
    ModelRegistry.resolve_model_cls = lambda a, model_config=None: (qwen3_next, a)
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda v: alignment
    Platform._find_non_ssm_backends = classmethod(lambda cls, v: [FlashAttentionBackend])
    Platform._align_hybrid_block_size.__func__(Platform, vc, FlashAttentionBackend)
    return {"block_size": cache.block_size, "mamba_block_size": cache.mamba_block_size,
            "mamba_page_size_padded": cache.mamba_page_size_padded, "mamba_ssm_cache_dtype": cache.mamba_ssm_cache_dtype}


def product_block(product_python: str, config_path: str, block_size: int | None, alignment: int | None) -> int | None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.jsonl")
        with open(trace, "w") as fh:
            fh.write(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}) + "\n")
        js = os.path.join(tmp, "p.json")
        cmd = [product_python, "-m", "stackdist", "plan", trace, "--format", "mooncake", "--semantics", "vllm",
               "--model-config", config_path, "--gpu-blocks", "65537", "--schedule", "serial", "--no-decode",
               "--json", js, "--gdn-checkpoint-alignment", str(alignment or 0)]
        if block_size is not None:
            cmd += ["--engine-block-size", str(block_size)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO)
        if not os.path.exists(js):
            print(proc.stderr[-400:], file=sys.stderr)
            return None
        with open(js) as fh:
            return json.load(fh)["engine_models"]["vllm"]["hybrid"]["block_size_tokens"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", default=[
        os.path.join(REPO, "tests/data/engines/hybrid/configs/Qwen3-Next-80B-A3B-Instruct.json"),
        os.path.join(REPO, "tests/data/engines/hybrid_holdout/configs/Qwen3.5-27B.json")])
    ap.add_argument("--product-python", default=sys.executable)
    ap.add_argument("--block-sizes", default="none,16,32,64,128,576")
    args = ap.parse_args(argv)
    bad = 0
    for path in args.configs:
        with open(path) as fh:
            cfg = json.load(fh)
        for text in args.block_sizes.split(","):
            bs = None if text == "none" else int(text)
            for alignment in (64, None):
                plat = vllm_platform_block(cfg, bs, alignment)
                _, _deriv, driver_bs = dvh.build_specs(cfg, bs, "align", alignment)
                prod = product_block(args.product_python, path, bs, alignment)
                ok = plat["block_size"] == driver_bs == prod
                bad += not ok
                print(json.dumps({"config": os.path.basename(path), "block_size_flag": bs, "gdn_alignment": alignment,
                                  "vllm_platform": plat, "driver": driver_bs, "product": prod, "agree": ok}), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
