"""The split-KV kernel on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``): split-KV
decode attention equals SDPA in FP32 on random inputs (lengths that are not multiples of the slice
or the block, one slice and many), an fp8 cache read in the kernel equals SDPA on the same stored
values, and the whole decode step with split-KV equals the step with SDPA.

Skipped without Triton (CI installs none; the CUDA tests in test_splitkv_cuda.py run the compiled
kernel) or where a CUDA device would make the interpreter the wrong thing to test.
"""

from __future__ import annotations

import importlib.util
import math
import os

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton is not installed: the split-KV kernel's CPU tests need it (TRITON_INTERPRET=1)",
                allow_module_level=True)
if torch.cuda.is_available():
    pytest.skip("a CUDA device is present: test_splitkv_cuda.py runs the compiled kernel", allow_module_level=True)
os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are defined (triton.jit reads it then)

from qbench.model import llama  # noqa: E402
from qbench.model import splitkv  # noqa: E402
from qbench.model.config import PRESETS  # noqa: E402


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("batch,kv_heads,group,seq_len,splits", [
    (1, 2, 4, 129, 1), (2, 2, 2, 300, 3), (1, 4, 1, 1000, None), (3, 1, 8, 77, 2)])
def test_split_kv_equals_sdpa_in_fp32(batch, kv_heads, group, seq_len, splits):
    g = torch.Generator().manual_seed(seq_len)
    q = torch.randn(batch, kv_heads, group, 32, generator=g)
    k, v = torch.randn(batch, kv_heads, seq_len, 32, generator=g), torch.randn(batch, kv_heads, seq_len, 32, generator=g)
    slice_len = splitkv.split_len(batch * kv_heads, seq_len, sms=4, splits=splits)
    assert splits is None or math.ceil(seq_len / slice_len) == splits
    out = llama.decode_attention(q, k, v, 0.2, slice_len=slice_len)
    assert _rel(out, llama.decode_attention(q, k, v, 0.2)) < 1e-5


def test_fp8_cache_in_kernel_equals_sdpa_on_the_stored_values():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 2, 4, 32, generator=g)
    k, v = torch.randn(2, 2, 333, 32, generator=g) * 3, torch.randn(2, 2, 333, 32, generator=g)
    ks, vs = llama.fp8_scale(k), llama.fp8_scale(v)
    k8, v8 = llama.fp8_quantize(k, ks), llama.fp8_quantize(v, vs)
    out = llama.decode_attention(q, k8, v8, 0.2, ks, vs, slice_len=splitkv.split_len(4, 333, 4, 3))
    assert _rel(out, llama.decode_attention(q, k8, v8, 0.2, ks, vs)) < 1e-5


def test_decode_step_with_split_kv_equals_the_step_with_sdpa():
    config = PRESETS["tiny"]
    dev = torch.device("cpu")
    weights = llama.Weights(config, 11, dev)
    prompt = torch.randint(0, config.vocab, (1, 150), generator=torch.Generator().manual_seed(1))
    cache = llama.KVCache.empty(config, 1, 151, torch.float32, dev)
    llama.prefill(weights, cache, prompt, torch.float32)
    tokens = torch.tensor([3, 500])
    out = {}
    for kind in ("sdpa", "split-kv"):
        model = llama.build_model(weights, llama.float_builder(torch.float32), torch.float32)
        step = llama.Decoder(model, cache.copies(2, torch.float32), 150, attention=kind, splits=3, sms=4)
        assert step.splits == (3 if kind == "split-kv" else None)
        out[kind] = step.logits(tokens)
    assert _rel(out["split-kv"], out["sdpa"]) < 1e-5


@pytest.mark.parametrize("block_n,splits,seq_len", [(128, 2, 333), (256, 1, 300), (16, 37, 587), (32, 20, 620)])
def test_tilings_and_many_slices_equal_sdpa_in_fp32(block_n, splits, seq_len):
    """Tiles longer and shorter than the default, lengths not a multiple of them, and slice counts
    past the combine's 16 slices at a time (37 = 2 x 16 + 5)."""
    g = torch.Generator().manual_seed(block_n)
    q = torch.randn(1, 2, 4, 32, generator=g)
    k, v = torch.randn(1, 2, seq_len, 32, generator=g), torch.randn(1, 2, seq_len, 32, generator=g)
    attn = splitkv.SplitKV(1, 2, 4, 32, seq_len, torch.device("cpu"), splits=splits, sms=4,
                           tile=splitkv.Tiling(block_n, num_stages=3))
    assert attn.splits == splits and attn.split_len % block_n == 0
    assert _rel(attn(q, k, v, scale=0.2), llama.decode_attention(q, k, v, 0.2)) < 1e-5


@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e6])
def test_fp8_tiles_as_float16_scale_the_query_by_a_power_of_two(magnitude):
    """The float16 path of an fp8 cache read against a bfloat16 query: the query scaled into
    float16's range exactly, so queries of any magnitude (1e6 is past float16's 65,504) attend like
    float64 over the same stored values, within the interpreter's float16 dots."""
    g = torch.Generator().manual_seed(11)
    q = (torch.randn(1, 2, 4, 32, generator=g) * magnitude).bfloat16()
    k, v = torch.randn(1, 2, 300, 32, generator=g), torch.randn(1, 2, 300, 32, generator=g)
    ks, vs = llama.fp8_scale(k), llama.fp8_scale(v)
    k8, v8 = llama.fp8_quantize(k, ks), llama.fp8_quantize(v, vs)
    scale = 0.2 / magnitude
    kd, vd = k8.double() * ks.double().view(1, -1, 1, 1), v8.double() * vs.double().view(1, -1, 1, 1)
    ref = torch.softmax(q.double() @ kd.transpose(-1, -2) * scale, -1) @ vd
    attn = splitkv.SplitKV(1, 2, 4, 32, 300, torch.device("cpu"), splits=2, sms=4,
                           tile=splitkv.Tiling(128, num_stages=3, f16=True))
    out = attn(q, k8, v8, scale=scale, k_scale=ks, v_scale=vs)
    assert torch.isfinite(out).all() and _rel(out, ref) < 1e-2


def test_tiling_is_per_cache_dtype_and_split_len_holds_whole_tiles():
    assert splitkv.tiling(torch.float8_e4m3fn) == splitkv.TILINGS[1]
    assert splitkv.tiling(torch.bfloat16) == splitkv.tiling(torch.float16) == splitkv.TILINGS[2]
    assert splitkv.tiling(None) == splitkv.Tiling() and splitkv.tiling(None).block_n == splitkv.BLOCK_N
    fp8 = splitkv.TILINGS[1]
    # 8 KV heads at M = 1 on 132 SMs, one program per SM: ceil(132 / 8) = 17 slices wanted
    n = 17 if fp8.waves == 1 else math.ceil(fp8.waves * 132 / 8)
    sl = splitkv.split_len(8, 32768, 132, kv_dtype=torch.float8_e4m3fn)
    assert sl % fp8.block_n == 0 and sl == fp8.block_n * math.ceil(32768 / (n * fp8.block_n))
    assert splitkv.split_len(8, 32768, 132, block_n=64) == 64 * math.ceil(32768 / (33 * 64))  # the first rule


@pytest.mark.parametrize("key,value", [("block_n", 96), ("block_n", 8), ("num_warps", 0), ("num_stages", 0),
                                       ("waves", 0), ("min_blocks", 0)])
def test_a_bad_tiling_is_refused(key, value):
    with pytest.raises(ValueError, match=f"Tiling.{key}"):
        splitkv.Tiling(**{key: value})
