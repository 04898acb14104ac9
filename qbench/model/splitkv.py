"""Split-KV decode attention (flash-decoding) in Triton: the cached sequence cut across the SMs.

At decode (a few query rows per sequence) one attention program per (sequence, KV head) leaves most
SMs idle: Llama-3.1-8B at M = 1 has 8 KV heads, so 8 programs on a 132-SM GPU read the cache at a
few percent of HBM bandwidth. Flash-decoding (Dao et al., 2023; FlashAttention's ``num_splits``,
FlashInfer's decode kernels) gives each program one slice of the cached positions: it computes the
slice's softmax statistics (row max ``m``, sum ``l``) and its un-normalized output, and a second
kernel combines the slices exactly: ``out = Σ_s e^{m_s - m} acc_s / Σ_s e^{m_s - m} l_s`` with
``m = max_s m_s`` (the online-softmax identity; Milakov & Gimelshein, 2018).

Layout is the decode step's (GQA without repeating K/V): the ``G = heads / kv_heads`` query heads of
one KV head are the query rows of one program, padded to 16 rows for the tensor-core dot.

Shapes: ``q`` ``[B, H_kv, G, D]``; ``k``, ``v`` ``[B, H_kv, S, D]`` (S cached positions, all
attended: the step's cache holds exactly the filled positions); output ``[B, H_kv, G, D]`` in
``q``'s dtype. Float32 inputs run the dots in IEEE float32 (exact against a float32 reference);
bfloat16/float16 inputs run tensor-core dots with float32 accumulation.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl


@triton.jit
def _partial(Q, K, V, O, ML, seq_len, split_len, scale,
             sqb, sqh, sqg, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
             H_KV: tl.constexpr, NS: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
             BLOCK_N: tl.constexpr, IEEE: tl.constexpr):
    """One (sequence, KV head, slice): the slice's un-normalized output and its (m, l)."""
    bh = tl.program_id(0)
    sp = tl.program_id(1)
    b = bh // H_KV
    h = bh % H_KV
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + offs_g[:, None] * sqg + offs_d[None, :] * sqd,
                mask=offs_g[:, None] < G, other=0.0)
    start = sp * split_len
    end = tl.minimum(start + split_len, seq_len)
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    for n in range(start, end, BLOCK_N):
        offs_n = n + tl.arange(0, BLOCK_N)
        valid = offs_n < end
        k = tl.load(k_base + offs_n[None, :] * sks + offs_d[:, None] * skd, mask=valid[None, :], other=0.0)
        if IEEE:
            s = tl.dot(q, k, input_precision="ieee")
        else:
            s = tl.dot(q, k)
        s = tl.where(valid[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * svs + offs_d[None, :] * svd, mask=valid[:, None], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    row = (bh * NS + sp) * G_PAD
    tl.store(O + (row + offs_g[:, None]) * D + offs_d[None, :], acc)
    tl.store(ML + (row + offs_g) * 2, m_i)
    tl.store(ML + (row + offs_g) * 2 + 1, l_i)


@triton.jit
def _combine(O, ML, Out, sob, soh, sog, sod,
             H_KV: tl.constexpr, NS: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr):
    """One (sequence, KV head): the slices' outputs combined by their softmax statistics."""
    bh = tl.program_id(0)
    b = bh // H_KV
    h = bh % H_KV
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, D)
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    for sp in range(NS):
        m = tl.maximum(m, tl.load(ML + ((bh * NS + sp) * G_PAD + offs_g) * 2))
    num = tl.zeros([G_PAD, D], tl.float32)
    den = tl.zeros([G_PAD], tl.float32)
    for sp in range(NS):
        row = (bh * NS + sp) * G_PAD
        w = tl.exp(tl.load(ML + (row + offs_g) * 2) - m)
        den += w * tl.load(ML + (row + offs_g) * 2 + 1)
        num += w[:, None] * tl.load(O + (row + offs_g[:, None]) * D + offs_d[None, :])
    out = num / den[:, None]
    tl.store(Out + b * sob + h * soh + offs_g[:, None] * sog + offs_d[None, :] * sod,
             out.to(Out.dtype.element_ty), mask=offs_g[:, None] < G)


def default_splits(batch_kv_heads: int, seq_len: int, sms: int, block_n: int = 64) -> int:
    """Slices per (sequence, KV head): enough programs for about two waves of ``sms`` SMs, each
    slice at least ``4 * block_n`` positions (shorter slices cost more in the combine than they
    save). Returns a count in ``1 .. ceil(seq_len / block_n)``."""
    want = max(1, math.ceil(2 * sms / max(batch_kv_heads, 1)))
    most = max(1, seq_len // (4 * block_n))
    return max(1, min(want, most))


class SplitKV:
    """Decode attention over a fixed-shape cache, its workspace allocated once (so the call can be
    captured in a CUDA graph). ``splits``: slices of the cached positions per (sequence, KV head);
    None: :func:`default_splits` for this GPU."""

    def __init__(self, batch: int, kv_heads: int, group: int, head_dim: int, seq_len: int,
                 device: torch.device, splits: Optional[int] = None, block_n: int = 64):
        if head_dim & (head_dim - 1) or head_dim < 16:
            raise ValueError(f"head_dim must be a power of two >= 16, got {head_dim}")
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.block_n = block_n
        ns = splits or default_splits(batch * kv_heads, seq_len, sms, block_n)
        # slices a multiple of block_n long, none empty
        self.split_len = block_n * math.ceil(seq_len / (ns * block_n))
        self.splits = math.ceil(seq_len / self.split_len)
        self.g_pad = max(16, triton.next_power_of_2(group))
        self.shape = (batch, kv_heads, group, head_dim, seq_len)
        rows = batch * kv_heads * self.splits * self.g_pad
        self.o = torch.empty(rows, head_dim, dtype=torch.float32, device=device)
        self.ml = torch.empty(rows, 2, dtype=torch.float32, device=device)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float] = None,
                 out: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, hkv, g, d, s = self.shape
        if tuple(q.shape) != (b, hkv, g, d) or tuple(k.shape) != (b, hkv, s, d) or k.shape != v.shape:
            raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match "
                             f"the workspace's [B, H_kv, G, D] = {(b, hkv, g, d)} over S = {s}")
        out = torch.empty_like(q) if out is None else out
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        ieee = q.dtype == torch.float32
        _partial[(b * hkv, self.splits)](
            q, k, v, self.o, self.ml, s, self.split_len, scale,
            *q.stride(), *k.stride(), *v.stride(),
            H_KV=hkv, NS=self.splits, G=g, G_PAD=self.g_pad, D=d, BLOCK_N=self.block_n, IEEE=ieee,
            num_warps=4, num_stages=2)
        _combine[(b * hkv,)](self.o, self.ml, out, *out.stride(),
                             H_KV=hkv, NS=self.splits, G=g, G_PAD=self.g_pad, D=d, num_warps=4)
        return out
