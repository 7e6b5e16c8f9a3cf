"""Tests for stackdist.planning.geometry: KV bytes per token from shapes and config.json files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stackdist.errors import UsageError
from stackdist.planning.geometry import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    ModelGeometry,
    catalog_entries,
    dtype_bytes,
    from_hf_config,
    geometry_for,
)

DATA = Path(__file__).parent / "data"
QWEN = DATA / "qwen2.5-1.5b_config.json"
DEEPSEEK = DATA / "deepseek-v3_config.json"


def test_qwen2_5_1_5b_config_hand_computed():
    geometry = from_hf_config(QWEN)
    # head_dim is absent: 1536 hidden / 12 heads = 128; K and V x 28 layers x 2 KV heads x 128 x 2 bytes
    assert (geometry.num_layers, geometry.num_kv_heads, geometry.head_dim, geometry.dtype_bytes) == (28, 2, 128, 2)
    assert geometry.kv_bytes_per_token == 2 * 28 * 2 * 128 * 2 == 28672
    assert not geometry.is_mla and geometry.name == "qwen2.5-1.5b_config"
    assert geometry.kv_bytes_per_token == DEFAULT_MODEL.kv_bytes_per_token  # data/fixtures/README.md: 28672 B


def test_deepseek_v3_config_is_mla_hand_computed():
    geometry = from_hf_config(DEEPSEEK)
    assert geometry.is_mla and (geometry.kv_lora_rank, geometry.qk_rope_head_dim) == (512, 64)
    # one latent of 512 + a 64-wide RoPE key per layer, 61 layers, bf16
    assert geometry.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70272
    assert geometry.kv_bytes_per_token == KNOWN_MODELS["deepseek-v3"].kv_bytes_per_token


def test_deepseek_sparse_attention_adds_the_indexer_key_hand_computed(tmp_path, capsys):
    """DeepSeek-V3.2 (DSA): every layer keeps the MLA latent and the indexer's key (128 fp8 values
    and one fp32 scale); fp8 is vLLM's fp8_ds_mla row (latent fp8, 4 fp32 scales, RoPE key bf16)."""
    config = json.loads(DEEPSEEK.read_text()) | {"index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
    bf16 = from_hf_config(config)
    assert bf16.is_sparse_mla and bf16.layer_bytes_per_token == (512 + 64) * 2 + (128 + 4) == 1284
    fp8 = from_hf_config(config, dtype="fp8")
    assert fp8.layer_bytes_per_token == 512 + 4 * 4 + 64 * 2 + (128 + 4) == 788
    assert fp8.kv_bytes_per_token == 61 * 788 and bf16.vllm_block_size == 64
    assert from_hf_config(DEEPSEEK).vllm_block_size is None  # dense MLA: vLLM's default block
    with pytest.raises(UsageError, match="index_topk_freq or index_topk_pattern"):
        from_hf_config(config | {"index_topk_freq": 2})
    # the plan runs vLLM's model at 64-token blocks unless --engine-block-size says otherwise
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 1024, "output_length": 1, "hash_ids": [0, 1]})
                             + "\n" for i in range(3)))
    from naive import run_stackdist

    for extra, block in (([], 64), (["--engine-block-size", "16"], 16)):
        out = tmp_path / f"plan{block}.json"
        code, _, err = run_stackdist(capsys, "plan", trace, "--format", "mooncake", "--model-config", path, "--semantics",
                                     "vllm", "--gpu-blocks", "inf", "--json", out, *extra)
        assert code == 0, err
        assert json.loads(out.read_text())["engine_models"]["vllm"]["engine_block_size_tokens"] == block


def test_dtype_override_and_dict_and_folder_input(tmp_path):
    assert from_hf_config(QWEN, dtype="float8_e4m3fn").kv_bytes_per_token == 14336
    assert from_hf_config(QWEN, dtype="float32").kv_bytes_per_token == 57344
    assert from_hf_config(QWEN, dtype=1).kv_bytes_per_token == 14336
    config = json.loads(QWEN.read_text())
    assert from_hf_config(config).kv_bytes_per_token == 28672
    folder = tmp_path / "Qwen2.5-1.5B"
    folder.mkdir()
    shutil.copy(QWEN, folder / "config.json")
    geometry = from_hf_config(folder)
    assert geometry.kv_bytes_per_token == 28672 and geometry.name == "Qwen2.5-1.5B"
    assert geometry_for(folder).kv_bytes_per_token == 28672  # an existing path wins over names


def test_explicit_head_dim_wins_over_hidden_size_ratio():
    config = {"num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
              "hidden_size": 2048, "head_dim": 256, "dtype": "bfloat16"}
    assert from_hf_config(config).kv_bytes_per_token == 2 * 4 * 8 * 256 * 2
    no_kv = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": None,
             "hidden_size": 64, "torch_dtype": "float16"}
    assert from_hf_config(no_kv).kv_bytes_per_token == 2 * 2 * 4 * 16 * 2  # MHA: kv heads = heads


def test_nested_text_config_of_a_multimodal_model():
    config = {"model_type": "llava", "torch_dtype": "bfloat16",
              "vision_config": {"num_hidden_layers": 24},
              "text_config": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                              "hidden_size": 4096}}
    assert from_hf_config(config).kv_bytes_per_token == 131072


def test_known_models_hand_computed():
    expected = {
        "qwen2.5-1.5b": 2 * 28 * 2 * 128 * 2,
        "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
        "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
        "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,
        "deepseek-v3": 61 * 576 * 2,
    }
    assert {name: g.kv_bytes_per_token for name, g in KNOWN_MODELS.items()} == expected
    assert expected == {"qwen2.5-1.5b": 28672, "qwen2.5-7b": 57344, "llama-3.1-8b": 131072,
                        "llama-3.1-70b": 327680, "deepseek-v3": 70272}
    assert geometry_for("meta-llama/Llama-3.1-70B").kv_bytes_per_token == 327680
    assert geometry_for("Qwen2.5-7B") is KNOWN_MODELS["qwen2.5-7b"]
    assert geometry_for(str(DEEPSEEK)).kv_bytes_per_token == 70272


def test_unknown_model_names_the_allowed_values():
    with pytest.raises(UsageError) as info:
        geometry_for("gpt-5")
    names = ", ".join(sorted(catalog_entries()))  # the five known models and the bundled catalog
    assert set(KNOWN_MODELS) <= set(catalog_entries())
    assert str(info.value) == f"model must be a config.json path or one of {names}; got 'gpt-5'"


def write_config(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


BASE = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize(
    "drop, change, message",
    [
        ("num_hidden_layers", {}, "missing field 'num_hidden_layers'"),
        ("torch_dtype", {}, "missing field 'torch_dtype' (or 'dtype'); pass dtype= to choose one"),
        ("hidden_size", {}, "missing field 'hidden_size' (needed when head_dim is absent)"),
        ("num_attention_heads", {}, "missing field 'num_key_value_heads' (or 'num_attention_heads')"),
        (None, {"num_hidden_layers": "28"}, "field 'num_hidden_layers' must be a non-negative integer, got '28'"),
        (None, {"num_hidden_layers": 0}, "missing field 'num_hidden_layers'"),
        (None, {"head_dim": 12.5}, "field 'head_dim' must be a non-negative integer, got 12.5"),
        (None, {"kv_lora_rank": 512}, "missing field 'qk_rope_head_dim' (needed with kv_lora_rank, MLA)"),
        (None, {"torch_dtype": "int4"}, "field 'torch_dtype' must be one of bfloat16, float16, float32, float64, float8* (or a byte count 1, 2, 4, 8), got 'int4'"),
    ],
)
def test_config_errors_name_the_file_and_field(tmp_path, drop, change, message):
    config = {k: v for k, v in BASE.items() if k != drop}
    config.update(change)
    path = write_config(tmp_path, config)
    with pytest.raises(UsageError) as info:
        from_hf_config(path)
    assert str(info.value) == f"{path}: {message}"


def test_config_file_problems(tmp_path):
    with pytest.raises(UsageError) as info:
        from_hf_config(tmp_path / "missing.json")
    assert str(info.value) == f"{tmp_path / 'missing.json'}: no such config file"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match=r"bad.json: not a readable JSON config"):
        from_hf_config(bad)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(UsageError, match="a config.json must hold a JSON object"):
        from_hf_config(listed)
    with pytest.raises(UsageError, match=r"^config \(text_config\): missing field 'num_hidden_layers'$"):
        from_hf_config({"text_config": {"num_attention_heads": 2}, "dtype": "bfloat16"})


def test_dtype_names_and_bad_override():
    assert [dtype_bytes(d) for d in ("bfloat16", "torch.float16", "half", "float32", "fp8_e5m2", "float8_e4m3fn", "FP16")] == [2, 2, 2, 4, 1, 1, 2]
    with pytest.raises(UsageError, match=r"dtype must be one of .* got 'int8'"):
        from_hf_config(QWEN, dtype="int8")
    with pytest.raises(UsageError, match="dtype as a byte count must be 1, 2, 4 or 8, got 3"):
        dtype_bytes(3)


def test_model_geometry_validates_its_fields():
    with pytest.raises(UsageError, match="num_layers must be an integer >= 1, got 0"):
        ModelGeometry("x", 0, 1, 1, 2)
    with pytest.raises(UsageError, match="head_dim must be an integer >= 1, got 1.5"):
        ModelGeometry("x", 1, 1, 1.5, 2)
    with pytest.raises(UsageError, match="kv_lora_rank and qk_rope_head_dim must be given together"):
        ModelGeometry("x", 1, 1, 1, 2, kv_lora_rank=512)
    mla = ModelGeometry("x", 3, 1, 1, 2, kv_lora_rank=512, qk_rope_head_dim=0)
    assert mla.kv_bytes_per_token == 3 * 512 * 2
