"""Split-KV decode attention (qbench.model.splitkv) against a float32 reference on CUDA.

Known answers: with float32 inputs the kernel's IEEE dots and its exact slice combine must equal
softmax(q kᵀ / √D) v computed in float64 to float32 rounding, for any slice count (one slice is plain
attention; many slices exercise the combine) and sequence lengths that are not a multiple of the
block; bfloat16 inputs land within bf16 rounding of the same reference.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import needs_cuda

pytestmark = [pytest.mark.cuda, needs_cuda]


def _reference(q, k, v):
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v.double()


def _rel(a, b):
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("batch,kv_heads,group,seq_len,splits", [
    (1, 8, 4, 4097, None), (1, 8, 4, 4097, 1), (2, 2, 1, 300, 3), (3, 4, 8, 129, 2), (1, 8, 4, 32769, None),
])
def test_float32_exact(batch, kv_heads, group, seq_len, splits):
    from qbench.model.splitkv import SplitKV
    g = torch.Generator(device="cuda").manual_seed(seq_len)
    q = torch.randn(batch, kv_heads, group, 128, device="cuda", generator=g)
    k = torch.randn(batch, kv_heads, seq_len, 128, device="cuda", generator=g)
    v = torch.randn(batch, kv_heads, seq_len, 128, device="cuda", generator=g)
    attn = SplitKV(batch, kv_heads, group, 128, seq_len, q.device, splits=splits)
    out = torch.full_like(q, float("nan"))  # every element must be written
    attn(q, k, v, out=out)
    assert torch.isfinite(out).all()
    assert _rel(out, _reference(q, k, v)) < 1e-5
    if splits is None:
        assert attn.splits > 1


def test_bfloat16_within_rounding():
    from qbench.model.splitkv import SplitKV
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, 8, s, 128, device="cuda", generator=g).bfloat16() for s in (4, 8192, 8192))
    out = SplitKV(1, 8, 4, 128, 8192, q.device)(q, k, v)
    assert out.dtype == torch.bfloat16
    assert _rel(out, _reference(q, k, v)) < 1e-2


def test_shape_mismatch_is_refused():
    from qbench.model.splitkv import SplitKV
    attn = SplitKV(1, 8, 4, 128, 256, torch.device("cuda"))
    q = torch.zeros(1, 8, 4, 128, device="cuda")
    kv = torch.zeros(1, 8, 255, 128, device="cuda")
    with pytest.raises(ValueError, match="do not match"):
        attn(q, kv, kv)


@pytest.mark.parametrize("seq_len,splits", [(129, 1), (300, 3), (4097, None), (1000, 7)])
def test_decode_attention_split_kv_equals_sdpa_in_fp32(seq_len, splits):
    from qbench.model import llama, splitkv
    g = torch.Generator(device="cuda").manual_seed(seq_len)
    q = torch.randn(2, 8, 4, 128, device="cuda", generator=g)
    k, v = (torch.randn(2, 8, seq_len, 128, device="cuda", generator=g) for _ in range(2))
    sl = splitkv.split_len(16, seq_len, 132, splits)
    from qbench.schemes.precision import strict_fp32

    with strict_fp32():  # the per-backend API: the legacy allow_tf32 raises once another test set it (torch >= 2.9)
        sdpa = llama.decode_attention(q, k, v, 1 / math.sqrt(128))
    assert _rel(llama.decode_attention(q, k, v, 1 / math.sqrt(128), slice_len=sl), sdpa.double()) < 1e-5


def test_fp8_cache_dequantized_in_kernel():
    from qbench.model import llama, splitkv
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 loads in Triton need compute capability 8.9+")
    g = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(1, 8, 4, 128, device="cuda", generator=g)
    k, v = (torch.randn(1, 8, 5000, 128, device="cuda", generator=g) for _ in range(2))
    ks, vs = llama.fp8_scale(k), llama.fp8_scale(v)
    k8, v8 = llama.fp8_quantize(k, ks), llama.fp8_quantize(v, vs)
    kd, vd = k8.double() * ks.double().view(1, -1, 1, 1), v8.double() * vs.double().view(1, -1, 1, 1)
    ref = torch.softmax(q.double() @ kd.transpose(-1, -2) / math.sqrt(128), -1) @ vd
    out = llama.decode_attention(q, k8, v8, 1 / math.sqrt(128), ks, vs, splitkv.split_len(8, 5000, 132))
    assert _rel(out, ref) < 1e-5
    outb = llama.decode_attention(q.bfloat16(), k8, v8, 1 / math.sqrt(128), ks, vs, splitkv.split_len(8, 5000, 132))
    assert _rel(outb, ref) < 1e-2


@pytest.mark.parametrize("kv_cache", ["activation", "fp8"])
def test_step_rows_run_split_kv_in_one_graph(kv_cache):
    from qbench.scenario import from_dict
    from qbench.step.measure import measure_step_scheme
    s = from_dict({"name": "skv", "seed": 3, "device": "cuda", "m": [1, 4],
                   "model": {"name": "tiny", "context": [300], "kv_cache": kv_cache},
                   "timing": {"warmup": 2, "min_reps": 5, "max_reps": 30, "budget_s": 0.2},
                   "schemes": [{"name": "bf16"}, {"name": "bf16", "mode": "compiled"}]}, "<test>")
    for i in range(2):
        for row in measure_step_scheme(s, i, torch.device("cuda"), None):
            assert row["status"] == "ok", row["reason"]
            assert row["attention"]["kernel"] == "split-kv" and row["attention"]["splits"] >= 1
            assert row["attention"]["kv_read"] == ("in kernel" if kv_cache == "fp8" else "as stored")
            assert row["latency_us"]["step_graph"]["median"] > 0 and row["attention"]["per_layer"]["median"] > 0
            assert row["error"]["rel_fro"] < (0.05 if kv_cache == "fp8" else 0.02)
            if i == 1:
                assert row["latency_us"]["step_compiled"]["median"] > 0
                assert not row["compile"].get("graph_breaks")


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
@pytest.mark.parametrize("seq_len", [4097, 32769])
def test_default_tiling_per_cache_dtype(kv, seq_len):
    """The per-dtype tiling (fp8: 128-position tiles read as float16) against float64 attention over
    the stored values, at lengths that are not a multiple of the tile, M = 1 and 2."""
    from qbench.model import llama, splitkv
    if kv == "fp8" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 loads in Triton need compute capability 8.9+")
    g = torch.Generator(device="cuda").manual_seed(seq_len)
    for m in (1, 2):
        q = torch.randn(m, 8, 4, 128, device="cuda", generator=g).bfloat16()
        k, v = (torch.randn(m, 8, seq_len, 128, device="cuda", generator=g) for _ in range(2))
        ks = vs = None
        if kv == "fp8":
            ks, vs = llama.fp8_scale(k), llama.fp8_scale(v)
            k, v = llama.fp8_quantize(k, ks), llama.fp8_quantize(v, vs)
            kd, vd = k.double() * ks.double().view(1, -1, 1, 1), v.double() * vs.double().view(1, -1, 1, 1)
        else:
            k, v = k.bfloat16(), v.bfloat16()
            kd, vd = k.double(), v.double()
        attn = splitkv.SplitKV(m, 8, 4, 128, seq_len, q.device, kv_dtype=k.dtype)
        assert attn.tile == splitkv.tiling(k.dtype) and attn.split_len % attn.tile.block_n == 0
        out = attn(q, k, v, k_scale=ks, v_scale=vs)
        ref = torch.softmax(q.double() @ kd.transpose(-1, -2) / math.sqrt(128), -1) @ vd
        assert _rel(out, ref) < 1e-2  # the bfloat16 output's rounding


@pytest.mark.parametrize("f16", [False, True])
def test_fp8_tile_conversion_keeps_a_large_query_exact(f16):
    """A bfloat16 query beyond float16's range (|q| ~ 1e6): the float16 path scales it by a power
    of two first, so both conversions give the attention of the same values (to the bfloat16
    output's rounding), finite."""
    from qbench.model import llama, splitkv
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 loads in Triton need compute capability 8.9+")
    g = torch.Generator(device="cuda").manual_seed(3)
    q = (torch.randn(1, 8, 4, 128, device="cuda", generator=g) * 1e4).bfloat16()
    k, v = (torch.randn(1, 8, 3000, 128, device="cuda", generator=g) * 1e-4 for _ in range(2))
    ks, vs = llama.fp8_scale(k), llama.fp8_scale(v)
    k8, v8 = llama.fp8_quantize(k, ks), llama.fp8_quantize(v, vs)
    kd, vd = k8.double() * ks.double().view(1, -1, 1, 1), v8.double() * vs.double().view(1, -1, 1, 1)
    ref = torch.softmax(q.double() @ kd.transpose(-1, -2) / math.sqrt(128), -1) @ vd
    tile = splitkv.Tiling(128, 4, 3, f16=f16)
    out = splitkv.SplitKV(1, 8, 4, 128, 3000, q.device, tile=tile)(q * 128, k8, v8, scale=1 / (128 * math.sqrt(128)),
                                                                    k_scale=ks, v_scale=vs)
    assert torch.isfinite(out).all()
    assert _rel(out, ref) < 1e-2
