"""The bundled model catalog (planning/geometry.py, data/models.json): every entry's KV bytes by hand.

Per entry, from the published config.json of the HF repo named in the catalog:
full layers x 2 (K, V) x KV heads x head_dim x 2 bytes (bf16), sliding layers likewise but held
for at most the window; MLA: layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackdist.errors import UsageError
from stackdist.planning.geometry import (
    KNOWN_MODELS,
    catalog,
    catalog_entries,
    catalog_help,
    geometry_for,
    model_spec,
    spec_from_config,
)

# name: (full layers, sliding layers, window, KV bytes per token of one layer), all bf16
HAND = {
    "qwen2.5-1.5b": (28, 0, None, 2 * 2 * 128 * 2),
    "qwen2.5-7b": (28, 0, None, 2 * 4 * 128 * 2),  # head_dim = 3584 / 28
    "qwen3-0.6b": (28, 0, None, 2 * 8 * 128 * 2),
    "qwen3-1.7b": (28, 0, None, 2 * 8 * 128 * 2),
    "qwen3-4b": (36, 0, None, 2 * 8 * 128 * 2),
    "qwen3-8b": (36, 0, None, 2 * 8 * 128 * 2),
    "qwen3-14b": (40, 0, None, 2 * 8 * 128 * 2),
    "qwen3-32b": (64, 0, None, 2 * 8 * 128 * 2),
    "qwen3-30b-a3b": (48, 0, None, 2 * 4 * 128 * 2),
    "qwen3-235b-a22b": (94, 0, None, 2 * 4 * 128 * 2),
    "llama-3.1-8b": (32, 0, None, 2 * 8 * 128 * 2),  # head_dim = 4096 / 32
    "llama-3.1-70b": (80, 0, None, 2 * 8 * 128 * 2),
    "llama-3.1-405b": (126, 0, None, 2 * 8 * 128 * 2),
    "llama-3.2-1b": (16, 0, None, 2 * 8 * 64 * 2),
    "llama-3.2-3b": (28, 0, None, 2 * 8 * 128 * 2),
    "llama-3.3-70b": (80, 0, None, 2 * 8 * 128 * 2),
    "deepseek-v3": (61, 0, None, (512 + 64) * 2),
    "deepseek-r1": (61, 0, None, (512 + 64) * 2),
    "deepseek-v3.2": (61, 0, None, (512 + 64) * 2 + 128 + 4),  # + the DSA indexer key: 128 fp8 values, one fp32 scale
    "kimi-k2": (61, 0, None, (512 + 64) * 2),
    "gpt-oss-20b": (12, 12, 128, 2 * 8 * 64 * 2),  # layer_types alternate sliding, full
    "gpt-oss-120b": (18, 18, 128, 2 * 8 * 64 * 2),
    "gemma-3-1b": (4, 22, 512, 2 * 1 * 256 * 2),  # pattern 6: layers 5, 11, 17, 23 are global
    "gemma-3-4b": (5, 29, 1024, 2 * 4 * 256 * 2),
    "gemma-3-12b": (8, 40, 1024, 2 * 8 * 256 * 2),
    "gemma-3-27b": (10, 52, 1024, 2 * 16 * 128 * 2),
    "mistral-7b": (32, 0, None, 2 * 8 * 128 * 2),
    "mistral-small-24b": (40, 0, None, 2 * 8 * 128 * 2),
    "mistral-large-2411": (88, 0, None, 2 * 8 * 128 * 2),
    "mixtral-8x7b": (32, 0, None, 2 * 8 * 128 * 2),
    "mixtral-8x22b": (56, 0, None, 2 * 8 * 128 * 2),
    "glm-4-9b": (40, 0, None, 2 * 2 * 128 * 2),
    "glm-4.5-air": (46, 0, None, 2 * 8 * 128 * 2),
    "glm-4.5": (92, 0, None, 2 * 8 * 128 * 2),
    "llama-4-scout": (12, 0, None, 2 * 8 * 128 * 2),  # every 4th layer full, 36 chunked-local layers
    "qwen3-next-80b-a3b": (12, 0, None, 2 * 2 * 256 * 2),  # every 4th layer full, 36 linear-attention layers
}


def test_every_catalog_entry_hand_computed():
    assert set(catalog()) == set(HAND)
    for name, (full, sliding, window, per_layer) in HAND.items():
        g = catalog()[name].geometry
        got = (g.num_full_layers, g.num_sliding_layers, g.sliding_window, g.layer_bytes_per_token)
        assert got == (full, sliding, window, per_layer), name
        assert g.kv_bytes_per_token == full * per_layer
        assert g.all_layers_bytes_per_token == g.num_layers * per_layer
        assert g.num_layers == full + sliding or g.layer_kinds.count("full") == full, name
        for tokens in (1, 100, 5000):
            assert g.kv_bytes_for(tokens) == full * per_layer * tokens + sliding * per_layer * min(tokens, window or 0)


def test_headline_numbers():
    spec = {name: s.geometry for name, s in catalog().items()}
    assert spec["qwen3-8b"].kv_bytes_per_token == 147456 and spec["llama-3.3-70b"].kv_bytes_per_token == 327680
    assert spec["deepseek-v3"].kv_bytes_per_token == 70272 and spec["deepseek-v3"].is_mla
    # the over-counts of the issue: gpt-oss 2x, Gemma-3-27B about 5x at a 32k-token request
    gpt, gemma = spec["gpt-oss-120b"], spec["gemma-3-27b"]
    assert gpt.all_layers_bytes_per_token == 2 * gpt.kv_bytes_per_token
    assert 4.5 < gemma.all_layers_bytes_per_token * 32768 / gemma.kv_bytes_for(32768) < 5.5
    assert gemma.kv_bytes_for(32768) == 10 * 8192 * 32768 + 52 * 8192 * 1024


def test_the_five_known_models_agree_with_the_catalog():
    for name, geometry in KNOWN_MODELS.items():
        assert catalog()[name].geometry == geometry


def test_every_entry_cites_its_repo_and_parameters():
    for name, entry in catalog_entries().items():
        assert "/" in entry["hf_repo"] and entry["params"] > 0, name
        assert entry["torch_dtype"] == "bfloat16"
        spec = catalog()[name]
        assert spec.weights_bytes and spec.active and spec.attention_flops_per_pair, name
        assert name in catalog_help() and entry["hf_repo"] in catalog_help()
    assert catalog()["qwen3-30b-a3b"].active == 3.3e9 and catalog()["qwen3-8b"].active == 8.2e9
    assert catalog()["deepseek-v3"].weights_bytes == 671e9  # fp8 checkpoint: 1 byte per parameter
    assert catalog()["deepseek-v3"].attention_flops_per_pair == 2 * 128 * ((128 + 64) + 128)
    assert catalog()["gpt-oss-120b"].weights_bytes == 60.8 * 2**30


@pytest.mark.parametrize("name, expected", [
    ("Qwen/Qwen3-8B", "qwen3-8b"), ("qwen3-8b", "qwen3-8b"), ("google/gemma-3-27b-it", "gemma-3-27b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"), ("OPENAI/GPT-OSS-120B", "gpt-oss-120b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("zai-org/GLM-4.5", "glm-4.5"),
])
def test_lookup_by_name_or_repo(name, expected):
    assert model_spec(name).name == expected
    assert geometry_for(name).kv_bytes_per_token == catalog()[expected].geometry.kv_bytes_per_token


def test_kv_dtype():
    assert model_spec("qwen3-8b", "fp8").geometry.kv_bytes_per_token == 147456 // 2
    assert model_spec("qwen3-8b", "auto").geometry.kv_bytes_per_token == 147456
    assert model_spec("qwen3-8b", "fp32").geometry.kv_bytes_per_token == 147456 * 2
    assert model_spec("deepseek-v3", "fp8").geometry.kv_bytes_per_token == 61 * 576
    with pytest.raises(UsageError, match="--kv-dtype must be one of auto, bf16"):
        model_spec("qwen3-8b", "int3")
    with pytest.raises(UsageError, match="--model must be a config.json path or one of deepseek-r1"):
        model_spec("gpt-5")


def test_hybrid_config_files_parse_like_the_catalog(tmp_path):
    gpt = dict(catalog_entries()["gpt-oss-120b"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(gpt))
    assert spec_from_config(path).geometry.kv_bytes_per_token == 18 * 2048
    gemma = {"model_type": "gemma3", "torch_dtype": "bfloat16",
             "text_config": {k: v for k, v in catalog_entries()["gemma-3-27b"].items() if k not in ("torch_dtype",)}}
    path.write_text(json.dumps(gemma))
    g = spec_from_config(path).geometry
    assert (g.num_sliding_layers, g.sliding_window, g.kv_bytes_per_token) == (52, 1024, 81920)
    # a sliding_window with no layer pattern (Qwen2's unused field) counts as full attention
    qwen = dict(catalog_entries()["qwen2.5-7b"], sliding_window=131072, use_sliding_window=False)
    assert spec_from_config(qwen).geometry.num_sliding_layers == 0
    bad = dict(gpt, layer_types=["sliding_attention"] * 3)
    with pytest.raises(UsageError, match="'layer_types' must list one string per layer"):
        spec_from_config(bad)
    with pytest.raises(UsageError, match="every layer is sliding-window"):
        spec_from_config(dict(gpt, layer_types=["sliding_attention"] * 36))


# Published configs (the fields the estimate reads) and the model cards' parameter counts
LLAMA_8B = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
DEEPSEEK_V3 = {"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "num_hidden_layers": 61,
               "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "num_attention_heads": 128,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}
MIXTRAL = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "torch_dtype": "bfloat16"}
QWEN25_15B = {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("config, total, active", [
    (LLAMA_8B, 8.03e9, 8.03e9), (DEEPSEEK_V3, 671e9, 37e9), (MIXTRAL, 46.7e9, 12.9e9),
    (QWEN25_15B, 1.544e9, 1.544e9),  # data/fixtures/README.md: 1.544 B parameters
])
def test_parameter_estimate_from_a_config(config, total, active):
    from stackdist.planning.geometry import estimate_params

    got_total, got_active = estimate_params(config)
    assert got_total == pytest.approx(total, rel=0.01) and got_active == pytest.approx(active, rel=0.02)


def test_a_config_file_gets_weights_from_its_estimate(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V3))
    spec = spec_from_config(path)
    assert spec.weights_bytes == pytest.approx(671e9, rel=0.01)  # fp8: one byte per parameter
    assert "estimated from the config" in spec.weights_source
    assert spec.geometry.kv_bytes_per_token == 70272
    assert spec_from_config({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8,
                             "torch_dtype": "bfloat16"}).weights_bytes is None  # no vocab: no estimate


CONFIGS = Path(__file__).parent / "data" / "engines" / "hybrid" / "configs"


@pytest.mark.parametrize("config, kinds, window, chunk, state", [
    ("gpt-oss-20b.json", ("sliding", "full") * 12, 128, None, 0),
    ("gemma-3-27b-it.json", tuple("full" if (i + 1) % 6 == 0 else "sliding" for i in range(62)), 1024, None, 0),
    ("Llama-4-Scout-17B-16E-Instruct.json", ("chunked", "chunked", "chunked", "full") * 12, None, 8192, 0),
    # conv (4 - 1) x (2 x 16 x 128 + 32 x 128) + state 32 x 128 x 128, bf16
    ("Qwen3-Next-80B-A3B-Instruct.json", ("mamba", "mamba", "mamba", "full") * 12, None, None,
     (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2),
])
def test_the_published_hybrid_configs_parse_as_vllm_reads_them(config, kinds, window, chunk, state):
    g = spec_from_config(CONFIGS / config).geometry
    assert (g.layer_kinds, g.sliding_window, g.attention_chunk_size, g.mamba_state_bytes) == (kinds, window, chunk, state)
    assert g.kv_bytes_per_token == kinds.count("full") * g.layer_bytes_per_token


def test_the_catalog_hybrids_equal_their_published_configs():
    for name, config in (("gemma-3-27b", "gemma-3-27b-it.json"), ("llama-4-scout", "Llama-4-Scout-17B-16E-Instruct.json"),
                         ("qwen3-next-80b-a3b", "Qwen3-Next-80B-A3B-Instruct.json"), ("gpt-oss-20b", "gpt-oss-20b.json")):
        mine, theirs = catalog()[name].geometry, spec_from_config(CONFIGS / config).geometry
        assert (mine.layer_kinds, mine.sliding_window, mine.attention_chunk_size, mine.mamba_state_bytes,
                mine.layer_bytes_per_token) == (theirs.layer_kinds, theirs.sliding_window, theirs.attention_chunk_size,
                                                theirs.mamba_state_bytes, theirs.layer_bytes_per_token), name
