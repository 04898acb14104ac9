"""The decode step's attention choice and KV-cache dtype on the CPU: the fp8 cache's ledger by hand,
its scale rule and saturation, the step's rows (which attention ran and why, the attention timed on
its own, the step split three ways), the refusals of bad values and of a choice that cannot run
here, and the quality job's fp8 cache on the committed trained checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qbench import cli
from qbench.model import llama
from qbench.model.config import PRESETS
from qbench.scenario import from_dict
from qbench.step import floor
from qbench.step.measure import measure_step_scheme

ROOT = Path(__file__).resolve().parents[2]


def _scenario(schemes, *, m=(1,), context=(8,), **model):
    data = {"name": "kv-test", "seed": 3, "device": "cpu", "m": list(m),
            "model": {"name": "tiny", "context": list(context), **model},
            "timing": {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.05}, "schemes": schemes}
    return from_dict(data, "<test>")


# -- the ledger, by hand ---------------------------------------------------------------------
def test_fp8_kv_bytes_by_hand():
    c = PRESETS["llama3.1-8b"]  # 32 blocks, 8 KV heads of 128: 2 x 8 x 128 = 2048 K+V elements per position
    scales = 2 * 8 * 4  # K and V scales per KV head, float32, one block
    out = floor.step_bytes(c, m=16, context=4096, blocks=32, block_weight_bytes=0, lm_head_bytes=0, act_itemsize=2,
                           kv_itemsize=1, kv_scale_bytes=scales)
    assert out["kv_read"] == 32 * 16 * 4097 * 2048 == 4_296_015_872
    assert out["kv_write"] == 32 * 16 * 2048 == 1_048_576
    assert out["kv_scales"] == 32 * 64 == 2048
    ledger = floor.kv_cache_bytes(c, m=16, context=4096, blocks=32, kv_itemsize=1, kv_scale_bytes=scales)
    assert ledger == {"per_token": 65_536, "per_context": 268_500_992, "scales": 2048,
                      "total": 16 * 268_500_992 + 2048}
    bf16 = floor.kv_cache_bytes(c, m=1, context=32768, blocks=32, kv_itemsize=2)
    assert bf16["per_token"] == 131_072 and bf16["per_context"] == 32769 * 131_072 and bf16["scales"] == 0
    # one block's attention: K and V of 4097 positions of 16 sequences, scales, q read and output written
    assert floor.attention_bytes(c, m=16, context=4096, kv_itemsize=1, act_itemsize=2, kv_scale_bytes=scales) == \
        16 * 4097 * 2048 + 64 + 2 * 16 * 32 * 128 * 2
    assert "kv_scales" not in floor.step_bytes(c, m=1, context=8, blocks=32, block_weight_bytes=0, lm_head_bytes=0,
                                               act_itemsize=2, kv_itemsize=2)


# -- the fp8 cache ---------------------------------------------------------------------------
def test_fp8_scale_is_absmax_per_kv_head_and_writes_saturate():
    x = torch.zeros(1, 3, 4, 8)
    x[0, 0, 2, 5] = -896.0  # head 0: absmax 896 -> scale 2
    x[0, 1] = 0.5           # head 1: 0.5 / 448
    scale = llama.fp8_scale(x)  # head 2 is all zeros: scale 1
    assert scale.tolist() == pytest.approx([2.0, 0.5 / 448, 1.0])
    q = llama.fp8_quantize(x, scale)
    assert q.dtype == torch.float8_e4m3fn
    assert q[0, 0, 2, 5].float().item() == -448.0 and q[0, 1, 0, 0].float().item() == 448.0
    beyond = llama.fp8_quantize(torch.full((1, 3, 8), 1e6), scale)  # a decode write past the prefill's absmax
    assert torch.isfinite(beyond.float()).all() and beyond.float().max().item() == 448.0


def test_chunk_through_a_float_cache_equals_no_cache_and_fp8_differs_slightly():
    torch.manual_seed(0)
    config = PRESETS["tiny"]
    weights = llama.Weights(config, 5, torch.device("cpu"))
    model = llama.build_model(weights, llama.float_builder(torch.float32), torch.float32)
    tokens = torch.randint(0, config.vocab, (1, 40))
    with torch.inference_mode():
        plain = model(tokens)
        f32 = model(tokens, 0, llama.KVCache.empty(config, 1, 40, torch.float32, torch.device("cpu")))
        cache = llama.KVCache.empty(config, 1, 40, llama.FP8_KV, torch.device("cpu"))
        fp8 = model(tokens, 0, cache)
    assert torch.equal(plain, f32)
    rel = ((fp8 - plain).norm() / plain.norm()).item()
    assert 0 < rel < 0.1
    assert cache.quantized and cache[0].k.dtype == torch.float8_e4m3fn and (cache[0].k_scale != 1).all()


def test_sdpa_reads_an_fp8_cache_as_its_dequantized_values():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 2, 3, 16, generator=g)
    k, v = torch.randn(2, 2, 50, 16, generator=g), torch.randn(2, 2, 50, 16, generator=g)
    ks, vs = llama.fp8_scale(k), llama.fp8_scale(v)
    k8, v8 = llama.fp8_quantize(k, ks), llama.fp8_quantize(v, vs)
    kd, vd = k8.double() * ks.double().view(1, -1, 1, 1), v8.double() * vs.double().view(1, -1, 1, 1)
    ref = torch.softmax(q.double() @ kd.transpose(-1, -2) / 4.0, -1) @ vd
    out = llama.decode_attention(q, k8, v8, 0.25, ks, vs)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-6


# -- the step job ----------------------------------------------------------------------------
def test_fp8_step_rows_on_cpu_record_attention_kv_and_the_three_way_split():
    base = measure_step_scheme(_scenario([{"name": "fp32"}], context=(20,)), 0, torch.device("cpu"), None)[0]
    row = measure_step_scheme(_scenario([{"name": "fp32"}], context=(20,), kv_cache="fp8"), 0,
                              torch.device("cpu"), None)[0]
    c = PRESETS["tiny"]  # 2 blocks, 2 KV heads of 64: 256 K+V elements per position per block
    assert row["status"] == "ok" and base["status"] == "ok"
    assert row["attention"]["kernel"] == "sdpa" and row["attention"]["chosen"].startswith("auto: SDPA")
    assert row["attention"]["kv_read"] == "before" and base["attention"]["kv_read"] == "as stored"
    assert row["kv_cache"]["dtype"] == "float8_e4m3fn" and base["kv_cache"]["dtype"] == "float32"
    assert row["kv_cache"]["per_token"] == 2 * 256 * 1 and base["kv_cache"]["per_token"] == 2 * 256 * 4
    assert row["bytes"]["kv_read"] == 2 * 21 * 256 and row["bytes"]["kv_scales"] == 2 * 2 * 2 * 4
    assert row["attention"]["per_layer"]["median"] > 0
    assert row["attention"]["us"] == pytest.approx(row["attention"]["per_layer"]["median"] * c.blocks)
    step = row["latency_us"]["step_cpu"]["median"]
    rest = step - row["linear"]["sum_us"] - row["attention"]["us"]
    if rest < 0:  # each part timed alone on a busy CPU can add up to more than the step: flagged, no rest written
        said = {f["name"] for f in row["flags"]} & {"split-above-step", "attention-above-step"}
        assert said and "step_cpu" not in row["other_us"]
    else:
        assert row["other_us"]["step_cpu"] == pytest.approx(rest)
    # the fp8 cache's rounding is in the error (the reference reads the activation-dtype cache)
    assert row["error"]["rel_fro"] > 10 * base["error"]["rel_fro"] and row["error"]["kl_div"] > 0


@pytest.mark.parametrize("busy", [True, False])
def test_a_cpu_step_timed_beside_other_work_is_flagged_cpu_busy(monkeypatch, busy):
    from qbench.step import measure

    text = "1.8 cores busy with other work leaves 0.2 free cores for 2 threads: noisy"
    monkeypatch.setattr(measure, "cpu_busy", lambda threads: ({}, text if busy else None))
    row = measure_step_scheme(_scenario([{"name": "fp32"}]), 0, torch.device("cpu"), None)[0]
    flags = [f for f in row["flags"] if f["name"] == "cpu-busy"]
    assert [f["text"] for f in flags] == ([f"step_cpu: {text}"] if busy else [])


def test_split_kv_asked_for_on_cpu_is_a_skipped_row():
    rows = measure_step_scheme(_scenario([{"name": "fp32"}], attention="split-kv"), 0, torch.device("cpu"), None)
    assert [r["status"] for r in rows] == ["skipped"]
    assert "split-KV kernel runs on CUDA" in rows[0]["reason"]


def test_a_torch_without_fp8_gives_fp8_cache_rows_skipped_with_the_reason(monkeypatch):
    monkeypatch.delattr(torch, "float8_e4m3fn")
    rows = measure_step_scheme(_scenario([{"name": "fp32"}], kv_cache="fp8"), 0, torch.device("cpu"), None)
    assert [r["status"] for r in rows] == ["skipped"]
    assert "has no float8_e4m3fn dtype: it cannot hold an fp8 KV cache" in rows[0]["reason"]


def test_fp8_split_kv_on_a_gpu_before_compute_capability_8_9_is_refused_with_the_reason(monkeypatch):
    """An A100 (8.0) has no e4m3 loads: the split-KV kernel cannot read an fp8 cache there."""
    pytest.importorskip("triton")
    from qbench.step.measure import split_kv_reason

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    why = split_kv_reason(PRESETS["llama3.1-8b"], torch.device("cuda"), fp8=True)
    assert why and "need compute capability 8.9+, this GPU is 8.0" in why
    assert split_kv_reason(PRESETS["llama3.1-8b"], torch.device("cuda"), fp8=False) is None


@pytest.mark.parametrize("key,value,allowed", [("kv_cache", "fp4", "'activation' or 'fp8'"),
                                               ("attention", "flash", "'auto', 'split-kv' or 'sdpa'")])
def test_bad_value_is_refused_in_one_line(tmp_path, capsys, key, value, allowed):
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\nm = [1]\n[model]\nname = "tiny"\ncontext = [8]\n{key} = "{value}"\n'
                    '[[schemes]]\nname = "fp32"\n')
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"qbench: {path}: model.{key}: input should be {allowed}, got '{value}'"


def test_quality_kv_cache_bad_value_is_refused(tmp_path, capsys):
    path = tmp_path / "q.toml"
    path.write_text(f'name = "q"\n[model]\ncheckpoint = "{ROOT / "data/checkpoints/tiny-shakespeare-llama"}"\n'
                    f'[quality]\ntext = "{ROOT / "data/text/hamlet.txt"}"\nkv_cache = "int8"\n[[schemes]]\nname = "fp32"\n')
    assert cli.main(["check", str(path)]) == 2
    assert capsys.readouterr().err.strip() == \
        f"qbench: {path}: quality.kv_cache: input should be 'activation' or 'fp8', got 'int8'"



@pytest.mark.parametrize("by", ["role", "block", "unit"])
def test_quality_fp8_kv_with_a_sensitivity_ranking_is_refused(tmp_path, capsys, by):
    """The sensitivity passes run each part alone without a KV cache: beside an fp8 cache they would rank another
    model than the row's (the break trial found every part's KLD equal to the float cache's)."""
    path = tmp_path / "q.toml"
    path.write_text(f'name = "q"\n[model]\ncheckpoint = "{ROOT / "data/checkpoints/tiny-shakespeare-llama"}"\n'
                    f'[quality]\ntext = "{ROOT / "data/text/hamlet.txt"}"\nkv_cache = "fp8"\nsensitivity = "{by}"\n'
                    '[[schemes]]\nname = "fp32"\n')
    assert cli.main(["check", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"qbench: {path}: quality.sensitivity: the sensitivity passes run each part alone without a KV cache, so "
        'beside kv_cache = "fp8" they would rank another model: rank with kv_cache = "activation" (or sensitivity = '
        f'"none"), got \'{by}\'')
# -- the quality job -------------------------------------------------------------------------
def test_fp8_kv_quality_on_the_trained_checkpoint_is_a_small_positive_kld(tmp_path):
    from tests.quality.conftest import run_scheme

    def scenario(kv):
        path = tmp_path / f"q_{kv}.toml"
        path.write_text(f'name = "q"\ndevice = "cpu"\n[model]\ncheckpoint = "{ROOT / "data/checkpoints/tiny-shakespeare-llama"}"'
                        f'\n[quality]\ntext = "{ROOT / "data/text/hamlet.txt"}"\nchunk = 256\nchunks = 3\nkv_cache = "{kv}"\n'
                        '[[schemes]]\nname = "fp32"\n')
        return path

    plain = run_scheme(scenario("activation"), 0, tmp_path)
    fp8 = run_scheme(scenario("fp8"), 0, tmp_path)
    assert plain["stats"]["kld"]["mean"] == pytest.approx(0.0, abs=1e-9) and "kv_cache" not in plain
    assert 1e-5 < fp8["stats"]["kld"]["mean"] < 1e-2  # fp8 e4m3 K and V: small, not nothing
    assert fp8["kv_cache"]["dtype"] == "float8_e4m3fn" and fp8["kv_cache"]["bytes_per_token"] == 4 * 2 * 2 * 32
