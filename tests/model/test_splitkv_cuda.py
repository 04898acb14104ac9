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
