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

How a program walks its slice (positions per tile, warps, pipeline stages, how many slices) is a
:class:`Tiling`, chosen per cache dtype by :func:`tiling` (measured; docs/step.md): an fp8 tile
holds half the bytes of a bfloat16 tile of the same positions, so the fp8 cache takes longer tiles
and deeper pipelines to keep as many bytes in flight per SM.

The kernels launch through :func:`split_kv_decode`, a torch custom op (``qbench::split_kv_decode``):
opaque to ``torch.compile`` (Inductor calls it as one extern kernel) and capturable in a CUDA graph
(its workspace is allocated inside the call, from the graph's pool when captured). The slice length
is an argument, fixed per (batch, context) by :func:`split_len`, so a captured step is static.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

#: Cached positions per tile of a cache whose dtype is not given (the unit a slice's length is a
#: multiple of when :func:`split_len` is not told the cache's dtype).
BLOCK_N = 64


@dataclass(frozen=True)
class Tiling:
    """How the partial kernel walks a slice of the cache.

    ``block_n``: cached positions per tile (a power of two >= 16; a slice's length is a multiple
    of it); ``num_warps``, ``num_stages``: Triton's launch options (stages: tiles loaded ahead);
    ``waves``: :func:`default_splits` aims at ``waves`` programs per SM; ``min_blocks``: the
    shortest slice it makes, in tiles; ``f16``: an fp8 tile read against a bfloat16 query is
    converted to float16 (one instruction per two values on sm_89+, against three to bfloat16)
    and the query to float16 after an exact power-of-two scaling, undone in the softmax scale.
    """
    block_n: int = BLOCK_N
    num_warps: int = 4
    num_stages: int = 2
    waves: int = 2
    min_blocks: int = 4
    f16: bool = False

    def __post_init__(self):
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"Tiling.block_n must be a power of two >= 16, got {self.block_n}")
        for key in ("num_warps", "num_stages", "waves", "min_blocks"):
            if getattr(self, key) < 1:
                raise ValueError(f"Tiling.{key} must be >= 1, got {getattr(self, key)}")


#: The tiling per cache element size in bytes (fp8: 1; bfloat16, float16: 2; float32: 4), from the
#: configuration sweep of :mod:`qbench.model.attention_bench` on an H100 (docs/step.md): an fp8 cache
#: reads 128-position tiles three deep, converted to float16; bfloat16 64-position tiles three deep;
#: both about one program per SM. float32 (the tests' exact path) keeps the first kernel's tiling.
#: A GPU with less shared memory per block than the stages need runs fewer (:func:`_stages`).
TILINGS = {1: Tiling(block_n=128, num_warps=4, num_stages=3, waves=1, min_blocks=2, f16=True),
           2: Tiling(block_n=64, num_warps=4, num_stages=3, waves=1, min_blocks=4),
           4: Tiling()}


def tiling(kv_dtype: Optional[torch.dtype] = None) -> Tiling:
    """The measured :class:`Tiling` for a cache of ``kv_dtype`` (None: the default, 64-position
    tiles)."""
    if kv_dtype is None:
        return Tiling()
    return TILINGS.get(torch.empty((), dtype=kv_dtype).element_size(), Tiling())


@triton.jit
def _partial(Q, K, V, KS, VS, O, ML, seq_len, split_len, scale,
             sqb, sqh, sqg, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
             H_KV: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
             BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SCALED: tl.constexpr, F16: tl.constexpr):
    """One (sequence, KV head, slice): the slice's un-normalized output and its (m, l)."""
    bh = tl.program_id(0)
    sp = tl.program_id(1)
    ns = tl.num_programs(1)
    b = bh // H_KV
    h = bh % H_KV
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + offs_g[:, None] * sqg + offs_d[None, :] * sqd,
                mask=offs_g[:, None] < G, other=0.0)
    qk_scale = scale
    if SCALED:  # the K scale of this head folds into the softmax scale
        qk_scale = scale * tl.load(KS + h)
    if F16:  # q to float16 times 2^e, largest |q| in [2^14, 2^15): exact for bf16 values down to 2^-31 of it
        qf = q.to(tl.float32)
        e = (tl.max(tl.max(tl.abs(qf), 1), 0).to(tl.int32, bitcast=True) >> 23) & 0xFF
        e = tl.minimum(tl.maximum(e, 14), 254)
        two = ((268 - e) << 23).to(tl.float32, bitcast=True)  # 2^(141 - e), a power of two
        q = (qf * two).to(tl.float16)
        qk_scale = qk_scale / two
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
        k = k.to(q.dtype)  # an fp8 tile converted exactly (to float16 under F16); a no-op otherwise
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
    row = (bh * ns + sp) * G  # the G real query rows only (the padding rows are zeros)
    real = offs_g < G
    tl.store(O + (row + offs_g[:, None]) * D + offs_d[None, :], acc, mask=real[:, None])
    tl.store(ML + (row + offs_g) * 2, m_i, mask=real)
    tl.store(ML + (row + offs_g) * 2 + 1, l_i, mask=real)


@triton.jit
def _combine(O, ML, Out, NS, sob, soh, sog, sod,
             H_KV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, SB: tl.constexpr):
    """One (sequence, KV head, query row): the slices' outputs combined by their softmax statistics,
    ``SB`` slices loaded at a time (their loads in flight together, not one slice after another)."""
    pid = tl.program_id(0)
    bh = pid // G
    g = pid % G
    b = bh // H_KV
    h = bh % H_KV
    offs_s = tl.arange(0, SB)
    offs_d = tl.arange(0, D)
    mv = tl.full([SB], float("-inf"), tl.float32)
    for s0 in range(0, NS, SB):
        sp = s0 + offs_s
        mv = tl.maximum(mv, tl.load(ML + ((bh * NS + sp) * G + g) * 2, mask=sp < NS, other=float("-inf")))
    m = tl.max(mv, 0)
    num = tl.zeros([D], tl.float32)
    den = tl.zeros([SB], tl.float32)
    for s0 in range(0, NS, SB):
        sp = s0 + offs_s
        valid = sp < NS
        row = (bh * NS + sp) * G + g
        w = tl.exp(tl.load(ML + row * 2, mask=valid, other=float("-inf")) - m)  # 0 past the last slice
        den += w * tl.load(ML + row * 2 + 1, mask=valid, other=0.0)
        num += tl.sum(w[:, None] * tl.load(O + row[:, None] * D + offs_d[None, :], mask=valid[:, None], other=0.0), 0)
    out = num / tl.sum(den, 0)
    tl.store(Out + b * sob + h * soh + g * sog + offs_d * sod, out.to(Out.dtype.element_ty))


def default_splits(batch_kv_heads: int, seq_len: int, sms: int, block_n: Optional[int] = None,
                   kv_dtype: Optional[torch.dtype] = None, tile: Optional[Tiling] = None) -> int:
    """Slices per (sequence, KV head): enough programs for ``waves`` programs per SM over ``sms``
    SMs, each slice at least ``min_blocks`` tiles (shorter slices cost more in the combine than
    they save), by ``tile`` (None: :func:`tiling` of ``kv_dtype``; ``block_n`` overrides its tile
    length). Returns a count in ``1 .. ceil(seq_len / block_n)``."""
    tile = tile or tiling(kv_dtype)
    block_n = block_n or tile.block_n
    want = max(1, math.ceil(tile.waves * sms / max(batch_kv_heads, 1)))
    most = max(1, seq_len // (tile.min_blocks * block_n))
    return max(1, min(want, most))


def split_len(batch_kv_heads: int, seq_len: int, sms: int, splits: Optional[int] = None,
              block_n: Optional[int] = None, kv_dtype: Optional[torch.dtype] = None,
              tile: Optional[Tiling] = None) -> int:
    """Positions per slice for ``splits`` slices (None: :func:`default_splits`): a multiple of
    the tile length (``block_n``, else that of ``tile``, else of :func:`tiling` of ``kv_dtype``;
    pass the cache's dtype so the slices hold whole tiles of the kernel that reads it), no slice
    empty. The slice count is ``ceil(seq_len / split_len)``."""
    tile = tile or tiling(kv_dtype)
    block_n = block_n or tile.block_n
    ns = splits or default_splits(batch_kv_heads, seq_len, sms, block_n, tile=tile)
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


@functools.lru_cache(maxsize=None)
def _shared_memory(index: int) -> int:
    """Bytes of shared memory a block may opt in to on CUDA device ``index`` (0: unknown)."""
    return getattr(torch.cuda.get_device_properties(index), "shared_memory_per_block_optin", 0)


def _stages(tile: Tiling, d: int, itemsize: int, device: torch.device) -> int:
    """``tile.num_stages``, or fewer where that many K and V tiles would not fit in 7/8 of the
    device's shared memory per block (the rest left to the kernel's other buffers); at least 1."""
    if device.type != "cuda":
        return tile.num_stages
    smem = _shared_memory(device.index if device.index is not None else torch.cuda.current_device())
    if not smem:
        return tile.num_stages
    return max(1, min(tile.num_stages, smem * 7 // 8 // (2 * tile.block_n * d * itemsize)))


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, slice_len: int,
            k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor], out: torch.Tensor,
            o: Optional[torch.Tensor] = None, ml: Optional[torch.Tensor] = None,
            tile: Optional[Tiling] = None) -> torch.Tensor:
    b, hkv, g, d = q.shape
    s = k.shape[2]
    tile = tile or tiling(k.dtype)
    splits = max(1, math.ceil(s / slice_len))
    g_pad = max(16, triton.next_power_of_2(g))
    rows = b * hkv * splits * g
    o = torch.empty(rows, d, dtype=torch.float32, device=q.device) if o is None else o
    ml = torch.empty(rows, 2, dtype=torch.float32, device=q.device) if ml is None else ml
    scaled = k_scale is not None
    ks = k_scale if scaled else o  # an unread placeholder pointer when unscaled
    vs = v_scale if scaled else o
    f16 = tile.f16 and k.element_size() == 1 and q.dtype == torch.bfloat16
    _partial[(b * hkv, splits)](
        q, k, v, ks, vs, o, ml, s, slice_len, scale,
        *q.stride(), *k.stride(), *v.stride(),
        H_KV=hkv, G=g, G_PAD=g_pad, D=d, BLOCK_N=tile.block_n, IEEE=q.dtype == torch.float32,
        SCALED=scaled, F16=f16, num_warps=tile.num_warps,
        num_stages=_stages(tile, d, k.element_size(), k.device))
    _combine[(b * hkv * g,)](o, ml, out, splits, *out.stride(), H_KV=hkv, G=g, D=d,
                             SB=min(16, triton.next_power_of_2(splits)), num_warps=4)
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
    (sequence, KV head), None: :func:`default_splits` for ``sms`` SMs (None: this CUDA device's).
    ``tile``: how the kernel walks a slice (None: :func:`tiling` of ``kv_dtype``, the cache's
    dtype, itself None for the default tiling); ``block_n`` overrides its tile length.

    Raises:
        ValueError: a head_dim the kernel cannot take, a ``block_n`` that is not a power of two >= 16.
    """

    def __init__(self, batch: int, kv_heads: int, group: int, head_dim: int, seq_len: int,
                 device: torch.device, splits: Optional[int] = None, block_n: Optional[int] = None,
                 sms: Optional[int] = None, kv_dtype: Optional[torch.dtype] = None,
                 tile: Optional[Tiling] = None):
        reason = head_dim_reason(head_dim)
        if reason:
            raise ValueError(reason)
        tile = tile or tiling(kv_dtype)
        if block_n is not None and block_n != tile.block_n:
            tile = Tiling(block_n, tile.num_warps, tile.num_stages, tile.waves, tile.min_blocks, tile.f16)
        if sms is None:
            sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.tile = tile
        self.block_n = tile.block_n
        self.split_len = split_len(batch * kv_heads, seq_len, sms, splits, tile=tile)
        self.splits = math.ceil(seq_len / self.split_len)
        self.g_pad = max(16, triton.next_power_of_2(group))
        self.shape = (batch, kv_heads, group, head_dim, seq_len)
        rows = batch * kv_heads * self.splits * group
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
        return _launch(q, k, v, scale, self.split_len, k_scale, v_scale, out, self.o, self.ml, self.tile)
