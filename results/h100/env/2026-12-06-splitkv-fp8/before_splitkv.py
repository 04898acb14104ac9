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

An fp8 (e4m3) cache is read as stored and dequantized in the kernel: each loaded tile is converted
to ``q``'s dtype (exact: every e4m3 value is a bfloat16, float16 and float32 value) and the
per-KV-head scales are folded in, ``k_scale[h]`` into the softmax scale and ``v_scale[h]`` into the
slice's output, so no dequantized copy of the cache is ever written.

The kernels launch through :func:`split_kv_decode`, a torch custom op (``qbench::split_kv_decode``):
opaque to ``torch.compile`` (Inductor calls it as one extern kernel) and capturable in a CUDA graph
(its workspace is allocated inside the call, from the graph's pool when captured). The slice length
is an argument, fixed per (batch, context) by :func:`split_len`, so a captured step is static.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

#: Cached positions per inner iteration of a slice (and the unit a slice's length is a multiple of).
BLOCK_N = 64


@triton.jit
def _partial(Q, K, V, KS, VS, O, ML, seq_len, split_len, scale,
             sqb, sqh, sqg, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
             H_KV: tl.constexpr, NS: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
             BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SCALED: tl.constexpr):
    """One (sequence, KV head, slice): the slice's un-normalized output and its (m, l)."""
    bh = tl.program_id(0)
    sp = tl.program_id(1)
    b = bh // H_KV
    h = bh % H_KV
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + offs_g[:, None] * sqg + offs_d[None, :] * sqd,
                mask=offs_g[:, None] < G, other=0.0)
    qk_scale = scale
    if SCALED:  # the K scale of this head folds into the softmax scale
        qk_scale = scale * tl.load(KS + h)
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
        k = k.to(q.dtype)  # an fp8 tile converted exactly; a no-op otherwise
        if IEEE:
            s = tl.dot(q, k, input_precision="ieee")
        else:
            s = tl.dot(q, k)
        s = tl.where(valid[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * svs + offs_d[None, :] * svd, mask=valid[:, None], other=0.0)
        v = v.to(q.dtype)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if SCALED:  # the V scale of this head: the output is linear in V
        acc = acc * tl.load(VS + h)
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


def default_splits(batch_kv_heads: int, seq_len: int, sms: int, block_n: int = BLOCK_N) -> int:
    """Slices per (sequence, KV head): enough programs for about two waves of ``sms`` SMs, each
    slice at least ``4 * block_n`` positions (shorter slices cost more in the combine than they
    save). Returns a count in ``1 .. ceil(seq_len / block_n)``."""
    want = max(1, math.ceil(2 * sms / max(batch_kv_heads, 1)))
    most = max(1, seq_len // (4 * block_n))
    return max(1, min(want, most))


def split_len(batch_kv_heads: int, seq_len: int, sms: int, splits: Optional[int] = None,
              block_n: int = BLOCK_N) -> int:
    """Positions per slice for ``splits`` slices (None: :func:`default_splits`): a multiple of
    ``block_n``, no slice empty. The slice count is ``ceil(seq_len / split_len)``."""
    ns = splits or default_splits(batch_kv_heads, seq_len, sms, block_n)
    return block_n * math.ceil(seq_len / (ns * block_n))


def head_dim_reason(head_dim: int) -> Optional[str]:
    """Why the kernel cannot take ``head_dim`` (it must be a power of two >= 16: one tile per
    head), or None."""
    if head_dim & (head_dim - 1) or head_dim < 16:
        return f"the split-KV kernel needs a head_dim that is a power of two >= 16, got {head_dim}"
    return None


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_scale: Optional[torch.Tensor],
           v_scale: Optional[torch.Tensor]) -> None:
    b, hkv, g, d = q.shape
    if k.dim() != 4 or tuple(k.shape[:2]) != (b, hkv) or k.shape[3] != d or k.shape != v.shape:
        raise ValueError(f"split-KV: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match "
                         "[B, H_kv, G, D] against [B, H_kv, S, D]")
    if (k_scale is None) != (v_scale is None):
        raise ValueError("split-KV: give both k_scale and v_scale, or neither")
    if k_scale is not None and (k_scale.shape != (hkv,) or v_scale.shape != (hkv,)):
        raise ValueError(f"split-KV: k_scale and v_scale must be [H_kv] = [{hkv}] float32, got "
                         f"{tuple(k_scale.shape)} and {tuple(v_scale.shape)}")
    reason = head_dim_reason(d)
    if reason:
        raise ValueError(reason)


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, slice_len: int,
            k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor], out: torch.Tensor,
            o: Optional[torch.Tensor] = None, ml: Optional[torch.Tensor] = None) -> torch.Tensor:
    b, hkv, g, d = q.shape
    s = k.shape[2]
    splits = max(1, math.ceil(s / slice_len))
    g_pad = max(16, triton.next_power_of_2(g))
    rows = b * hkv * splits * g_pad
    o = torch.empty(rows, d, dtype=torch.float32, device=q.device) if o is None else o
    ml = torch.empty(rows, 2, dtype=torch.float32, device=q.device) if ml is None else ml
    scaled = k_scale is not None
    ks = k_scale if scaled else o  # an unread placeholder pointer when unscaled
    vs = v_scale if scaled else o
    _partial[(b * hkv, splits)](
        q, k, v, ks, vs, o, ml, s, slice_len, scale,
        *q.stride(), *k.stride(), *v.stride(),
        H_KV=hkv, NS=splits, G=g, G_PAD=g_pad, D=d, BLOCK_N=BLOCK_N, IEEE=q.dtype == torch.float32,
        SCALED=scaled, num_warps=4, num_stages=2)
    _combine[(b * hkv,)](o, ml, out, *out.stride(), H_KV=hkv, NS=splits, G=g, G_PAD=g_pad, D=d, num_warps=4)
    return out


@torch.library.custom_op("qbench::split_kv_decode", mutates_args=())
def split_kv_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, slice_len: int,
                    k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Split-KV decode attention: ``softmax(q kᵀ · scale) v`` per (sequence, KV head) -> ``[B, H_kv,
    G, D]`` in ``q``'s dtype.

    Args:
        q: ``[B, H_kv, G, D]`` float32, bfloat16 or float16.
        k, v: ``[B, H_kv, S, D]`` in ``q``'s dtype, or float8_e4m3fn with ``k_scale``/``v_scale``
            (the stored value times the scale is the value); any strides.
        scale: the softmax scale (1/√D for Llama).
        slice_len: cached positions per program (:func:`split_len`).
        k_scale, v_scale: ``[H_kv]`` float32 dequantization scales of an fp8 cache, or None.

    Raises:
        ValueError: shapes that do not match, one scale without the other, a head_dim the kernel
            cannot take.
    """
    _check(q, k, v, k_scale, v_scale)
    return _launch(q, k, v, scale, slice_len, k_scale, v_scale, torch.empty_like(q, memory_format=torch.contiguous_format))


@split_kv_decode.register_fake
def _(q, k, v, scale, slice_len, k_scale=None, v_scale=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


class SplitKV:
    """Decode attention over a fixed-shape cache, its workspace allocated once (the benchmark's and
    the tests' form of :func:`split_kv_decode`). ``splits``: slices of the cached positions per
    (sequence, KV head), None: :func:`default_splits` for ``sms`` SMs (None: this CUDA device's)."""

    def __init__(self, batch: int, kv_heads: int, group: int, head_dim: int, seq_len: int,
                 device: torch.device, splits: Optional[int] = None, block_n: int = BLOCK_N,
                 sms: Optional[int] = None):
        reason = head_dim_reason(head_dim)
        if reason:
            raise ValueError(reason)
        if block_n != BLOCK_N:
            raise ValueError(f"block_n is fixed at {BLOCK_N}, got {block_n}")
        if sms is None:
            sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.block_n = block_n
        self.split_len = split_len(batch * kv_heads, seq_len, sms, splits, block_n)
        self.splits = math.ceil(seq_len / self.split_len)
        self.g_pad = max(16, triton.next_power_of_2(group))
        self.shape = (batch, kv_heads, group, head_dim, seq_len)
        rows = batch * kv_heads * self.splits * self.g_pad
        self.o = torch.empty(rows, head_dim, dtype=torch.float32, device=device)
        self.ml = torch.empty(rows, 2, dtype=torch.float32, device=device)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float] = None,
                 out: Optional[torch.Tensor] = None, k_scale: Optional[torch.Tensor] = None,
                 v_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, hkv, g, d, s = self.shape
        if tuple(q.shape) != (b, hkv, g, d) or tuple(k.shape) != (b, hkv, s, d) or k.shape != v.shape:
            raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match "
                             f"the workspace's [B, H_kv, G, D] = {(b, hkv, g, d)} over S = {s}")
        _check(q, k, v, k_scale, v_scale)
        out = torch.empty_like(q) if out is None else out
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        return _launch(q, k, v, scale, self.split_len, k_scale, v_scale, out, self.o, self.ml)
