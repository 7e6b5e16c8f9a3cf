"""``simulate --model/--model-config/--gpu``: the served model's KV bytes, the GPU's KV pool as the
HBM bound, and the measured 1.5B/H200 latency model scaled to them (kvlab/placement/served.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvlab.placement.__main__ import main
from kvlab.placement.calibration import LatencyModel
from kvlab.placement.served import REFERENCE_GPU, REFERENCE_MODEL, Served
from stackdist.planning.hardware import gpu_table

SMALL_CHAT = ["simulate", "--workload", "chat", "--param", "n_sessions=2", "--param", "accesses_per_session=150",
              "--capacities", "8,64,512"]


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else out), err


def test_the_measured_model_on_the_measured_gpu_is_the_measurement_unchanged():
    for served in (Served.of(None, None), Served.of("Qwen/Qwen2.5-1.5B-Instruct", "H200"), Served.of("QWEN2.5-1.5B", None)):
        assert served.measured and served.spec.name == REFERENCE_MODEL and served.gpu.name == REFERENCE_GPU
        for base in (LatencyModel(), LatencyModel.hf_eager()):
            assert served.latency(base) == base
        assert served.kv_bytes_per_token == 2 * 28 * 2 * 128 * 2  # Qwen2.5-1.5B: 28 layers x 2 KV heads x 128 x bf16
    assert Served.of(None, None).note().startswith("no model given: KV bytes and TTFT are for qwen2.5-1.5b")
    assert Served.of("qwen2.5-1.5b", "h200").note() is None  # named, measured: nothing to say


def test_another_gpu_scales_only_what_its_numbers_change():
    # Same model on a B200: bf16 peak 2250 vs 989.4 TFLOP/s, HBM 8000 vs 4800 GB/s, the same 55 GB/s host link
    # (stackdist/planning/data/gpus.json). The 1.5B's weights read (3.1 GB / 8 TB/s = 0.4 ms) is under the fixed terms.
    gpus = gpu_table()
    base, scaled = LatencyModel(), Served.of("qwen2.5-1.5b", "b200").latency(LatencyModel())
    flops = gpus["h200"].bf16_tflops / gpus["b200"].bf16_tflops
    assert scaled.prefill_ms_per_token == pytest.approx(base.prefill_ms_per_token * flops, rel=1e-12)
    assert scaled.prefill_ms_per_token_pair == pytest.approx(base.prefill_ms_per_token_pair * flops, rel=1e-12)
    assert scaled.decode_ms_per_context_token == pytest.approx(base.decode_ms_per_context_token * 4800 / 8000, rel=1e-12)
    unchanged = ("prefill_fixed_ms", "decode_fixed_ms", "h2d_gbps", "d2h_gbps", "h2d_latency_ms", "nvme_read_gbps",
                 "nvme_write_gbps", "nvme_latency_ms", "host_floor_ms", "launch_overhead_ms", "cached_prefix_penalty_ms")
    assert all(getattr(scaled, f) == getattr(base, f) for f in unchanged)
    a100 = Served.of("qwen2.5-1.5b", "a100-40g").latency(LatencyModel())  # a 25 GB/s host link (PCIe 4.0 x16)
    assert a100.h2d_gbps == pytest.approx(base.h2d_gbps * 25 / 55, rel=1e-12) and a100.d2h_gbps == a100.h2d_gbps


def test_a_larger_model_scales_flops_layers_and_kv_bytes():
    # Llama-3.1-8B on an H200: 32 layers, 8 KV heads of 128 (131,072 B/token), 32 heads of 128 (attention FLOPs
    # per pair per layer 2 x 32 x 256); against Qwen2.5-1.5B's 28 layers and 12 heads of 128.
    served = Served.of("meta-llama/Llama-3.1-8B-Instruct", "h200")
    base, scaled = LatencyModel(), served.latency(LatencyModel())
    assert served.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 and not served.measured
    assert scaled.prefill_ms_per_token_pair == pytest.approx(base.prefill_ms_per_token_pair * (32 * 32) / (28 * 12))
    assert scaled.prefill_fixed_ms == pytest.approx(base.prefill_fixed_ms * 32 / 28)  # weights read 16 GB / 4.8 TB/s < it
    assert scaled.decode_ms_per_context_token == pytest.approx(base.decode_ms_per_context_token * 131072 / 28672)
    ratio = served.spec.active / Served.of(None, None).spec.active
    assert 4.5 < ratio < 6 and scaled.prefill_ms_per_token == pytest.approx(base.prefill_ms_per_token * ratio)
    assert "extrapolated from the measured qwen2.5-1.5b" in served.note()


def test_the_weights_read_is_the_floor_of_a_large_model():
    served = Served.of("llama-3.1-70b", "b200")  # 141 GB of bf16 weights at 8 TB/s: 17.6 ms a step at least
    floor = served.spec.weights_bytes / 8000e6
    scaled = served.latency(LatencyModel())
    assert scaled.decode_fixed_ms == pytest.approx(floor) and scaled.prefill_fixed_ms == pytest.approx(floor)
    assert floor > LatencyModel().decode_fixed_ms * 80 / 28  # the floor, not the per-layer launches, decides


def test_a_moe_decode_step_reads_only_the_active_weights():
    served = Served.of("qwen3-30b-a3b", "h200")  # 30.5B parameters, 3.3B active per token
    spec, scaled = served.spec, served.latency(LatencyModel())
    assert spec.active < spec.params / 5
    assert scaled.prefill_fixed_ms == pytest.approx(spec.weights_bytes / 4800e6)  # a prefill touches every expert
    decode_read = spec.weights_bytes * spec.active / spec.params / 4800e6
    assert scaled.decode_fixed_ms == pytest.approx(max(decode_read, LatencyModel().decode_fixed_ms * 48 / 28))


def test_simulate_with_a_model_moves_its_kv_bytes(capsys):
    code, default, err = run(capsys, *SMALL_CHAT)
    assert code == 0 and "note: no model given: KV bytes and TTFT are for qwen2.5-1.5b" in err
    code, qwen3, err = run(capsys, *SMALL_CHAT, "--model", "Qwen/Qwen3-8B", "--gpu", "H100")
    assert code == 0 and "are extrapolated from the measured qwen2.5-1.5b on one h200" in err
    # the same blocks move (capacities in blocks); each block carries 36 x 8 x 128 x 2 x 2 bytes per token
    assert qwen3["hits"] == default["hits"] and qwen3["misses"] == default["misses"]
    kv = 36 * 8 * 128 * 2 * 2
    assert qwen3["config"]["bytes_per_token"] == kv and qwen3["served"]["kv_bytes_per_token"] == kv
    assert {k: v * 28672 for k, v in qwen3["migration_bytes"].items()} == {k: v * kv for k, v in default["migration_bytes"].items()}
    assert qwen3["migration_bytes_total"] > 0
    assert qwen3["served"]["latency_basis"] == "extrapolated" and default["served"]["latency_basis"] == "measured"
    assert qwen3["ttft_ms"]["mean"] > default["ttft_ms"]["mean"]  # 5x the FLOPs on the same peak
    assert qwen3["latency_model"] == dataclasses.asdict(Served.of("qwen3-8b", "h100").latency(LatencyModel()))
    code, named, err = run(capsys, *SMALL_CHAT, "--model", "qwen2.5-1.5b")
    assert code == 0 and "note" not in err and named["ttft_ms"] == default["ttft_ms"]


def test_experiments_serve_the_model_too(capfd, tmp_path: Path):
    runs = {}
    for label, extra in (("default", []), ("qwen3", ["--model", "qwen3-8b", "--gpu", "h100"])):
        code = main(["experiments", "--quick", "--no-plots", "--out", str(tmp_path / label), *extra])
        err = capfd.readouterr().err
        assert code == 0, err
        runs[label] = (json.loads((tmp_path / label / "results.json").read_text()), err)
    (default, default_err), (qwen3, qwen3_err) = runs["default"], runs["qwen3"]
    assert "note: no model given: KV bytes and TTFT are for qwen2.5-1.5b" in default_err
    assert "qwen3-8b on h100 are extrapolated" in qwen3_err
    assert qwen3["served"]["model"] == "qwen3-8b" and qwen3["kv_bytes_per_token"] == 147456
    for name, rows in default["grid"].items():  # the same blocks move, each of 147,456 / 28,672 the bytes
        for a, b in zip(rows, qwen3["grid"][name]):
            assert a["hits"] == b["hits"] and a["misses"] == b["misses"]
            assert {k: v * 147456 for k, v in a["migration_bytes"].items()} == \
                {k: v * 28672 for k, v in b["migration_bytes"].items()}
    assert qwen3["latency_model"] == dataclasses.asdict(Served.of("qwen3-8b", "h100").latency(LatencyModel()))
    code = main(["experiments", "--quick", "--no-plots", "--out", str(tmp_path / "big"), "--gpu-sessions", "1e6"])
    err = capfd.readouterr().err
    assert code == 2 and "does not fit one h200 serving qwen2.5-1.5b" in err and "--gpu-sessions" in err
    assert not (tmp_path / "big").exists()  # refused before any work


def test_the_hbm_tier_is_bounded_by_the_gpus_kv_pool(capsys):
    most = Served.of("qwen3-8b", "a100-40g").max_hbm_blocks(16)
    args = ["simulate", "--workload", "chat", "--param", "n_sessions=1", "--param", "accesses_per_session=50",
            "--model", "qwen3-8b", "--gpu", "a100-40g"]
    code, result, err = run(capsys, *args, "--capacities", f"{most},0,0")
    assert code == 0 and result["served"]["hbm_tier_max_blocks"] == most, err
    code, _, err = run(capsys, *args, "--capacities", f"{most + 1},0,0")
    assert code == 2 and "--capacities" in err and f"give at most {most:,}" in err and "Traceback" not in err
    # 40 GiB x 0.9 - 16.4 GiB of weights - 3 GiB assumed = 16.6 GiB of 144 KiB per token: ~121k tokens
    assert 110_000 < most * 16 < 130_000


def test_a_default_hbm_tier_beyond_the_pool_says_to_give_capacities(capsys, tmp_path: Path):
    # one 102,400-token prompt (200 blocks of 512): the default HBM tier is that footprint, but Qwen3-32B's
    # 61 GiB of weights leave an H100 a pool of about 31k tokens (60 blocks of 512)
    trace = tmp_path / "long.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 102400, "output_length": 8,
                                 "hash_ids": list(range(200))}) + "\n")
    most = Served.of("qwen3-32b", "h100").max_hbm_blocks(512)
    code, _, err = run(capsys, "simulate", "--workload", f"mooncake:{trace}", "--model", "qwen3-32b", "--gpu", "h100")
    assert code == 2 and "the default HBM tier (one session footprint): an HBM tier of 200 blocks of 512 tokens" in err
    assert f"give --capacities with an HBM tier of at most {most:,} blocks" in err and 40 < most < 80


@pytest.mark.parametrize("argv,code,needle", [
    (["--model", "gpt-5"], 2, "--model must be a config.json path or one of"),
    (["--gpu", "tpu"], 2, "argument --gpu: invalid choice: 'tpu'"),
    (["--model", "llama-3.1-70b", "--gpu", "h100"], 1, "does not fit on 1 x h100"),
    (["--model", "deepseek-v3", "--gpu", "b200"], 1, "The placement simulator models one GPU (no tensor parallelism)"),
    (["--model", "qwen3-8b", "--model-config", "x.json"], 2, "not allowed with argument --model"),
])
def test_bad_models_and_gpus(capsys, argv, code, needle):
    got, _, err = run(capsys, *SMALL_CHAT, *argv)
    assert got == code and needle in err and "Traceback" not in err, err


def test_model_config_file(capsys, tmp_path: Path):
    config = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
              "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}  # Llama-3.1-8B's shapes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, result, err = run(capsys, *SMALL_CHAT, "--model-config", path)
    assert code == 0 and result["served"]["kv_bytes_per_token"] == 131072 and result["served"]["model_given"], err
    missing = tmp_path / "none.json"
    code, _, err = run(capsys, *SMALL_CHAT, "--model-config", missing)
    assert code == 1 and f"--model-config {missing}: no such file" in err
    path.write_text(json.dumps({k: v for k, v in config.items() if k != "num_hidden_layers"}))
    code, _, err = run(capsys, *SMALL_CHAT, "--model-config", path)
    assert code == 1 and f"--model-config {path}" in err and "num_hidden_layers" in err and "Traceback" not in err
    path.write_text(json.dumps({k: v for k, v in config.items() if k != "torch_dtype"}))
    code, _, err = run(capsys, *SMALL_CHAT, "--model-config", path)
    assert code == 1 and "missing field 'torch_dtype'" in err and 'add "torch_dtype" (e.g. "bfloat16")' in err


@pytest.mark.xdist_group("matplotlib")
def test_hit_split_legend_covers_no_bar():
    from kvlab.placement.plots import figure

    def row(policy: str, hbm: float) -> dict:
        return {"config": {"policy": policy, "organisation": "exclusive", "prefetch": "none"},
                "hit_rates": {"hbm": hbm, "dram": 0.05, "ssd": 0.05}, "miss_rate": 0.9 - hbm}

    grid = {name: [row(p, 0.2) for p in ("lru", "lfu", "predicted", "ewma")] for name in ("chat", "agent", "docqa")}
    fig = figure("hit_split.png", {"grid": grid})
    fig.canvas.draw()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1
    box = legends[0].get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent()), "the legend covers a panel"
