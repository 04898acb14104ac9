"""The one Llama-family forward (torch): embedding -> blocks -> RMSNorm -> LM head, written once and
run by every model job.

Each block is ``transformers``' ``LlamaDecoderLayer`` (``Qwen2DecoderLayer`` with q/k/v biases):
RMSNorm, q/k/v projections, RoPE (with the config's scaling), grouped-query attention, o
projection, residual, RMSNorm, SiLU-gated MLP (gate, up, down), residual. The linears are modules
a builder made (a scheme's :attr:`qbench.schemes.base.Scheme.build`, or :class:`FloatLinear` with
the checkpoint's bias), so a job runs the scheme's real kernels in every linear. A tied head is a
:class:`FloatLinear` over the embedding's own tensor.

In gpt-fast's shape (``Transformer.forward(idx, input_pos)``): :meth:`Llama.forward`
``(tokens, input_pos, cache=None)``, where the tokens' first position is ``input_pos``:

* ``tokens [B, T]`` (a chunk): causal attention over the chunk (from position 0) or over the
  cache's first ``input_pos`` positions and the chunk; K and V written into ``cache`` when one is
  given (the prefill). The quality job's teacher-forced chunks run here with ``cache=None``.
* ``tokens [M]`` (the decode step: one new token per sequence): the token's K and V are written
  at position ``input_pos`` of the cache and the query attends over positions ``0 .. input_pos``.
  Written for speed like the engines' decode loops: no per-op Python decision (shapes and the
  position are fixed when the step is built, so :class:`Decoder` can be captured in one CUDA
  graph or compiled), a static cache of ``context + 1`` positions, and GQA without repeating K/V:
  the ``heads / kv_heads`` query heads of one KV head are the query rows of one attention call
  (``[M, kv_heads, group, head_dim]`` against ``[M, kv_heads, context + 1, head_dim]``).

The KV cache is an object of its own (:class:`KVCache`, one :class:`LayerCache` per block) with
its own dtype. Every linear sees a 2-D ``[rows, K]`` input. Hidden states flow in the model's
dtype; a linear's output is cast back to it when a library returns another dtype.
"""

from __future__ import annotations

import math
import zlib
from itertools import islice, repeat
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from qbench.model.config import BLOCK_LINEARS, StepModelConfig, linear_name
from qbench.schemes.precision import strict_fp32

#: Rows of a chunk's MLP computed at once: a long prefill's ``[rows, ffn]`` intermediates stay
#: bounded (128k positions × an FFN of 14336 would be 3.7 GB in bf16 per intermediate).
MLP_CHUNK = 4096


class Weights:
    """The model's FP32 tensors by ``transformers`` state-dict name, on ``device``.

    Either from a ``state_dict`` (a checkpoint's :class:`qbench.model.checkpoint.TensorMap`, or
    the weights of a ``transformers`` model in tests), or generated: every tensor from its own
    seeded generator (seed = CRC-32 of the name, mixed with ``seed``), so any tensor can be made
    again alone and identically on the same device (the FP32 reference step regenerates a block's
    weights instead of keeping 4 bytes per weight of the whole model). Generated values: linear
    weights N(0, 1/K) (K = in_features, the layer scenarios' weight), the embedding N(0, 1),
    RMSNorm weights 1 and the biases of a biased model 0 (``transformers``' initial values: a bias
    costs its bytes and its add in every kernel whatever its values).
    """

    def __init__(self, config: StepModelConfig, seed: int, device: torch.device,
                 state_dict: Optional[Mapping[str, torch.Tensor]] = None):
        self.config, self.seed, self.device, self.state_dict = config, seed, torch.device(device), state_dict

    def shape(self, name: str) -> tuple[int, ...]:
        c = self.config
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            return (c.vocab, c.hidden)
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            return (c.hidden,)
        role = name.split(".")[-2]
        k, n = c.linear_shapes()[role]
        return (n, k)

    def get(self, name: str) -> torch.Tensor:
        """The FP32 tensor ``name`` on the device (a tensor of its own: writing it changes no source).

        Raises:
            KeyError: a state dict without ``name``.
        """
        if self.config.tie_embeddings and name == "lm_head.weight":  # a tied head is the embedding
            name = "model.embed_tokens.weight"
        if self.state_dict is not None:
            source = self.state_dict[name].detach()
            out = source.to(self.device, torch.float32)
            return out.clone() if out.data_ptr() == source.data_ptr() else out
        shape = self.shape(name)
        if len(shape) == 1:
            return torch.ones(shape, dtype=torch.float32, device=self.device)
        gen = torch.Generator(device=self.device)
        gen.manual_seed((self.seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63))
        out = torch.randn(shape, generator=gen, dtype=torch.float32, device=self.device)
        if name != "model.embed_tokens.weight":
            out.mul_(1.0 / math.sqrt(shape[1]))
        return out

    def bias(self, block: int, role: str) -> Optional[torch.Tensor]:
        """The FP32 bias ``[N]`` of a block's linear ``role``, or None where the model has none."""
        if role not in self.config.biased:
            return None
        if self.state_dict is None:
            return torch.zeros(self.config.linear_shapes()[role][1], dtype=torch.float32, device=self.device)
        return self.get(linear_name(block, role).removesuffix("weight") + "bias")


def rope_inv_freq(config: StepModelConfig) -> torch.Tensor:
    """RoPE inverse frequencies ``[head_dim / 2]`` (float64), with the config's scaling.

    ``default``: ``1 / theta^(2i / head_dim)`` (RoFormer). ``linear``: divided by ``factor``.
    ``llama3``: Meta's Llama 3.1 rule as ``transformers``' ``_compute_llama3_parameters`` states
    it: wavelengths longer than ``original_max_position_embeddings / low_freq_factor`` are divided
    by ``factor``, shorter than ``... / high_freq_factor`` kept, and the band between interpolated.
    """
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        inv = inv / float(scaling["factor"])
    elif kind == "llama3":
        factor, low, high = float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        mid = (wavelen <= old / low) & (wavelen >= old / high)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv


def rope_cos_sin(config: StepModelConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[len(positions), head_dim]`` in ``dtype`` (the two halves repeat:
    ``transformers``' rotate-half layout)."""
    freqs = positions.to(torch.float64)[:, None] * rope_inv_freq(config).to(positions.device)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


#: The decode step's attention implementations (:func:`decode_attention`): ``split-kv`` (the Triton
#: flash-decoding kernel of :mod:`qbench.model.splitkv`, CUDA) and ``sdpa`` (one
#: ``scaled_dot_product_attention`` call, the G query heads of a KV head as its query rows).
DECODE_ATTENTION = ("split-kv", "sdpa")
#: The fp8 KV-cache dtype (OCP e4m3, finite: no infinities) and its largest finite value.
FP8_KV = torch.float8_e4m3fn
FP8_MAX = 448.0


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                     k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                     slice_len: int = 0) -> torch.Tensor:
    """The decode step's attention, GQA without repeating K/V: ``q [M, kv_heads, group, head_dim]`` (the
    query heads of one KV head as the query rows) against the filled cache ``k``, ``v``
    ``[M, kv_heads, S, head_dim]``, every cached position attended (no mask). Returns ``q``'s shape
    and dtype.

    ``slice_len > 0``: the split-KV kernel (``torch.ops.qbench.split_kv_decode``; import
    :mod:`qbench.model.splitkv` first), slices of ``slice_len`` positions; an fp8 cache is read as
    stored and dequantized in the kernel. ``slice_len = 0``: one SDPA call; an fp8 cache is
    dequantized before it (converted to ``q``'s dtype, a copy; exact, every e4m3 value is a
    bf16/fp16/fp32 value), its per-KV-head scales ``k_scale``, ``v_scale`` ``[kv_heads]`` (float32)
    folded into ``q`` and the output.
    """
    if slice_len:
        return torch.ops.qbench.split_kv_decode(q, k, v, scale, slice_len, k_scale, v_scale)
    if k_scale is not None:
        q = q * k_scale.view(1, -1, 1, 1).to(q.dtype)
        k, v = k.to(q.dtype), v.to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, scale=scale)
    return out if v_scale is None else out * v_scale.view(1, -1, 1, 1).to(out.dtype)


def fp8_scale(x: torch.Tensor) -> torch.Tensor:
    """The fp8 cache's scale rule: per KV head, ``absmax / 448`` over every other dim of ``x``
    ``[B, kv_heads, T, head_dim]`` (float32 ``[kv_heads]``; a head of zeros gets 1), so the largest
    value written maps to e4m3's largest finite value."""
    amax = x.detach().abs().float().amax(dim=(0, 2, 3))
    return torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))


def fp8_quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x / scale`` saturated to ±448 and rounded to e4m3 (nearest, even): ``scale`` ``[kv_heads]``
    broadcast over dim 1 of ``x`` (``[M, kv_heads, D]`` or ``[B, kv_heads, T, D]``). Saturating:
    torch's cast gives NaN beyond e4m3's range, and a decode step's K may exceed the prefill's
    absmax."""
    shape = (1, -1) + (1,) * (x.dim() - 2)
    return (x.float() / scale.view(shape)).clamp(-FP8_MAX, FP8_MAX).to(FP8_KV)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as LlamaRMSNorm computes it: in FP32, then back to ``x``'s dtype, times ``weight``."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE, rotate-half layout: ``x * cos + rotate_half(x) * sin`` over the last dim."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class FloatLinear(nn.Module):
    """``y = x W^T + b`` in the weight's dtype (references, float LM heads, prefill weights that no
    scheme built); ``bias`` optional (Qwen2's q/k/v)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class LayerCache(nn.Module):
    """One block's K and V: buffers ``k``, ``v`` ``[B, kv_heads, slots, head_dim]`` (buffers of a
    module, so a compiled block treats them as the model's own state).

    An fp8 cache (``k.dtype`` is :data:`FP8_KV`) also holds ``k_scale``, ``v_scale`` ``[kv_heads]``
    (float32): the stored value times its head's scale is the value. The scale rule: static per
    (block, KV head), set by the first write at position 0 (the prefill, or a teacher-forced chunk)
    from that write's absmax (:func:`fp8_scale`); later writes (the decode step's) are quantized with
    it, saturating at ±448 × scale.
    """

    def __init__(self, k: torch.Tensor, v: torch.Tensor, k_scale: Optional[torch.Tensor] = None,
                 v_scale: Optional[torch.Tensor] = None):
        super().__init__()
        self.register_buffer("k", k, persistent=False)
        self.register_buffer("v", v, persistent=False)
        if k.dtype == FP8_KV and (k_scale is None or v_scale is None):
            k_scale = torch.ones(k.shape[1], dtype=torch.float32, device=k.device)
            v_scale = torch.ones(k.shape[1], dtype=torch.float32, device=k.device)
        self.register_buffer("k_scale", k_scale, persistent=False)
        self.register_buffer("v_scale", v_scale, persistent=False)

    @property
    def quantized(self) -> bool:
        """Whether the cache stores fp8 values with scales."""
        return self.k_scale is not None

    def calibrate(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Set the fp8 scales from ``k``, ``v`` ``[B, kv_heads, T, head_dim]`` (:func:`fp8_scale`)."""
        self.k_scale.copy_(fp8_scale(k))
        self.v_scale.copy_(fp8_scale(v))

    def write(self, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``, ``v`` at position ``pos`` (``[M, kv_heads, D]``: one position) or at ``pos ..
        pos + T - 1`` (``[B, kv_heads, T, D]``), quantized when the cache is fp8."""
        if self.quantized:
            k, v = fp8_quantize(k, self.k_scale), fp8_quantize(v, self.v_scale)
        else:
            k, v = k.to(self.k.dtype), v.to(self.v.dtype)
        if k.dim() == 3:
            self.k[:, :, pos] = k
            self.v[:, :, pos] = v
        else:
            self.k[:, :, pos:pos + k.shape[2]] = k
            self.v[:, :, pos:pos + k.shape[2]] = v

    def read(self, batch: int, positions: int, dtype: torch.dtype, first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of ``batch`` sequences from sequence ``first`` and ``positions`` positions in ``dtype``
        (dequantized: stored value × scale, in float32, then cast); only those sequences are converted."""
        k, v = self.k[first:first + batch, :, :positions], self.v[first:first + batch, :, :positions]
        if not self.quantized:
            return k.to(dtype), v.to(dtype)
        return ((k.float() * self.k_scale.view(1, -1, 1, 1)).to(dtype),
                (v.float() * self.v_scale.view(1, -1, 1, 1)).to(dtype))

    def scale_bytes(self) -> int:
        """Bytes of the scales a read of this cache also loads (0 unquantized)."""
        return 0 if not self.quantized else self.k_scale.numel() * 4 + self.v_scale.numel() * 4


class KVCache(nn.Module):
    """The K/V cache of every block, in a dtype of its own (independent of the weights' and the
    activations': a lower-precision cache is one argument).

    Index or iterate it for the blocks' :class:`LayerCache`.
    """

    def __init__(self, layers: Sequence[LayerCache]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    @classmethod
    def empty(cls, config: StepModelConfig, batch: int, slots: int, dtype: torch.dtype, device: torch.device,
              blocks: Optional[int] = None) -> "KVCache":
        """Zeroed K and V for ``blocks`` blocks (default: the model's), each ``[batch, kv_heads,
        slots, head_dim]`` in ``dtype`` (:data:`FP8_KV`: an fp8 cache, scales 1 until its first write
        at position 0 sets them)."""
        shape = (batch, config.kv_heads, slots, config.head_dim)
        return cls([LayerCache(torch.zeros(shape, device=device).to(dtype), torch.zeros(shape, device=device).to(dtype))
                    for _ in range(config.blocks if blocks is None else blocks)])

    @property
    def shape(self) -> tuple[int, ...]:
        """``(batch, kv_heads, slots, head_dim)``."""
        return tuple(self.layers[0].k.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.layers[0].k.dtype

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[LayerCache]:
        return iter(self.layers)

    def __getitem__(self, index: int) -> LayerCache:
        return self.layers[index]

    @property
    def quantized(self) -> bool:
        """Whether the cache stores fp8 values with scales (:class:`LayerCache`)."""
        return self.layers[0].quantized

    def copies(self, batch: int, dtype: torch.dtype) -> "KVCache":
        """A cache of ``batch`` sequences in ``dtype``, each its own copy of this one's (a cache of
        one shared prompt: every sequence still reads its own slots). An fp8 ``dtype``: each block
        quantized with scales from its filled values (:func:`fp8_scale`), as if they had been
        written at position 0, the prefill."""
        out = []
        for layer in self.layers:
            k, v = layer.read(layer.k.shape[0], layer.k.shape[2], torch.float32 if dtype == FP8_KV else dtype)
            if dtype == FP8_KV:
                ks, vs = fp8_scale(k), fp8_scale(v)
                k, v = fp8_quantize(k, ks), fp8_quantize(v, vs)
                out.append(LayerCache(k.expand(batch, -1, -1, -1).contiguous(), v.expand(batch, -1, -1, -1).contiguous(),
                                      ks, vs))
            else:
                out.append(LayerCache(k.expand(batch, -1, -1, -1).contiguous(), v.expand(batch, -1, -1, -1).contiguous()))
            del k, v
        return KVCache(out)

    def each_as(self, dtype: torch.dtype, batch: Optional[int] = None, via: Optional[torch.dtype] = None,
                seqs: slice = slice(None)) -> Iterator[LayerCache]:
        """Each block's cache as a copy in ``dtype`` (dequantized when fp8), one at a time (this cache
        is not written; only one block's copy is alive at once). ``seqs``: only those sequences;
        ``batch``: expanded to that many sequences (a shared prompt's cache); ``via``: rounded through
        that dtype first (the cache a step in ``via`` would hold)."""
        for layer in self.layers:
            first, stop, _ = seqs.indices(layer.k.shape[0])
            k, v = layer.read(stop - first, layer.k.shape[2], via or dtype, first)
            k, v = k.to(dtype), v.to(dtype)
            if k.untyped_storage().data_ptr() == layer.k.untyped_storage().data_ptr():  # a view: copy it
                k, v = k.clone(), v.clone()
            if batch is not None and batch != k.shape[0]:
                k, v = k.expand(batch, -1, -1, -1).contiguous(), v.expand(batch, -1, -1, -1).contiguous()
            yield LayerCache(k, v)


class Block(nn.Module):
    """One decoder block: ``forward(x, cos, sin, cache=None, pos=0)``.

    ``x [M, hidden]`` is the decode step (one token per sequence at position ``pos``, written into
    ``cache`` and attending over its positions ``0 .. pos``); ``x [B, T, hidden]`` is a chunk from
    position ``pos`` (causal). ``cos``/``sin`` are ``[head_dim]`` (decode) or ``[T, head_dim]``.
    """

    def __init__(self, config: StepModelConfig, linears: Mapping[str, nn.Module], attn_norm: torch.Tensor,
                 mlp_norm: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.group = config.heads // config.kv_heads
        self.eps, self.dtype = config.rms_eps, dtype
        self.scale = 1.0 / math.sqrt(config.head_dim)
        self.slice_len = 0  # the decode attention's split-KV slice (0: SDPA); set by Decoder
        for role in BLOCK_LINEARS:
            setattr(self, role, linears[role])
        self.attn_norm = nn.Parameter(attn_norm.to(dtype), requires_grad=False)
        self.mlp_norm = nn.Parameter(mlp_norm.to(dtype), requires_grad=False)

    def _linear(self, role: str, x: torch.Tensor) -> torch.Tensor:
        y = getattr(self, role)(x)
        return y if y.dtype == self.dtype else y.to(self.dtype)

    def _mlp(self, h: torch.Tensor) -> torch.Tensor:
        return self._linear("down_proj", F.silu(self._linear("gate_proj", h)) * self._linear("up_proj", h))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: Optional[LayerCache] = None,
                pos: int = 0) -> torch.Tensor:
        if x.dim() == 2:
            h = rms_norm(x, self.attn_norm, self.eps)
            x = x + self._linear("o_proj", self._attend_one(h, cos, sin, cache, pos))
            return x + self._mlp(rms_norm(x, self.mlp_norm, self.eps))
        b, t, d = x.shape
        flat = x.reshape(b * t, d)
        h = rms_norm(flat, self.attn_norm, self.eps)
        flat = flat + self._linear("o_proj", self._attend_chunk(h, b, t, cos, sin, cache, pos))
        for s in range(0, b * t, MLP_CHUNK):
            part = flat[s:s + MLP_CHUNK]
            part += self._mlp(rms_norm(part, self.mlp_norm, self.eps))
        return flat.view(b, t, d)

    def _attend_one(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: LayerCache,
                    pos: int) -> torch.Tensor:
        """The decode step's attention: ``h [M, hidden]`` -> ``[M, heads × head_dim]``."""
        m = h.shape[0]
        q = self._linear("q_proj", h).view(m, self.heads, self.head_dim)
        k = self._linear("k_proj", h).view(m, self.kv_heads, self.head_dim)
        v = self._linear("v_proj", h).view(m, self.kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.write(pos, k, v)
        att = decode_attention(q.view(m, self.kv_heads, self.group, self.head_dim),
                               cache.k[:, :, :pos + 1], cache.v[:, :, :pos + 1], self.scale,
                               cache.k_scale, cache.v_scale, self.slice_len)
        return att.reshape(m, self.heads * self.head_dim)

    def _attend_chunk(self, h: torch.Tensor, b: int, t: int, cos: torch.Tensor, sin: torch.Tensor,
                      cache: Optional[LayerCache], pos: int) -> torch.Tensor:
        """A chunk's causal attention: ``h [B × T, hidden]`` -> ``[B × T, heads × head_dim]``; K and V
        written into positions ``pos .. pos + T - 1`` of ``cache`` (a cache of M sequences takes a
        chunk of B = 1 as every sequence's). With an fp8 cache the chunk attends over the cache's
        dequantized values, its own positions' included (what a later step would read), and a chunk
        at position 0 sets the cache's scales."""
        q = self._linear("q_proj", h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self._linear("k_proj", h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self._linear("v_proj", h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        quantized = cache is not None and cache.quantized
        if cache is not None:
            if quantized and pos == 0:  # the first write sets the fp8 cache's static scales
                cache.calibrate(k, v)
            cache.write(pos, k, v)
        if pos > 0 and cache is None:
            raise ValueError(f"a chunk at position {pos} > 0 attends over the cached positions: give a cache")
        if pos > 0 or quantized:  # attend over what the cache holds (an fp8 cache's values, dequantized)
            k, v = cache.read(b, pos + t, q.dtype)
        if pos == 0:
            mask, causal = None, True
        else:  # the cached positions and the chunk: position pos + i sees 0 .. pos + i
            mask = torch.arange(pos + t, device=q.device)[None, :] <= torch.arange(pos, pos + t, device=q.device)[:, None]
            causal = False
        att = F.scaled_dot_product_attention(q, k.repeat_interleave(self.group, dim=1), v.repeat_interleave(self.group, dim=1),
                                             attn_mask=mask, is_causal=causal, scale=self.scale)
        return att.transpose(1, 2).reshape(b * t, self.heads * self.head_dim)


def _call_block(block: Block, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: Optional[LayerCache],
                pos: int) -> torch.Tensor:
    return block(x, cos, sin, cache, pos)


class Llama(nn.Module):
    """A Llama-family model: ``forward(tokens, input_pos=0, cache=None)`` -> FP32 logits (the
    normed hidden state without a head): ``[B, T, vocab]`` for a chunk ``[B, T]``, ``[M, vocab]``
    for one decode token per sequence ``[M]`` (see the module docstring).

    ``blocks``: built :class:`Block` modules, or an iterable that builds each block when reached
    (:class:`BlocksOnDemand`: one block's weights alive at a time). ``block_call(block, x, cos,
    sin, cache, pos)`` runs one block; a job may point it at a compiled form.
    """

    def __init__(self, config: StepModelConfig, embed: torch.Tensor, blocks: Iterable[Block], norm: torch.Tensor,
                 head: Optional[nn.Module], dtype: torch.dtype):
        super().__init__()
        self.config, self.dtype = config, dtype
        self.embed = nn.Parameter(embed.to(dtype), requires_grad=False)
        self.blocks = nn.ModuleList(blocks) if isinstance(blocks, (list, tuple)) else blocks
        self.norm = nn.Parameter(norm.to(dtype), requires_grad=False)
        self.head = head
        self.block_call: Callable = _call_block

    def rope(self, input_pos: int, t: Optional[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for ``t`` positions from ``input_pos`` (``[t, head_dim]``), or for the one
        position ``input_pos`` (``t = None``: ``[head_dim]``), in the model's dtype."""
        if t is None:
            cos, sin = rope_cos_sin(self.config, torch.tensor([input_pos], device=device), self.dtype)
            return cos[0], sin[0]
        return rope_cos_sin(self.config, torch.arange(input_pos, input_pos + t, device=device), self.dtype)

    def hidden(self, tokens: torch.Tensor, input_pos: int = 0, cache: Optional[Iterable[LayerCache]] = None,
               blocks: Optional[int] = None, rope: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """The hidden state after the first ``blocks`` blocks (all by default), before the final
        norm: ``[M, hidden]`` or ``[B, T, hidden]``. ``rope``: the cos and sin to use (a decode
        step computes them once when built)."""
        x = F.embedding(tokens, self.embed)
        cos, sin = rope if rope is not None else self.rope(input_pos, None if tokens.dim() == 1 else tokens.shape[1],
                                                            tokens.device)
        layers = iter(repeat(None) if cache is None else cache)
        for block in islice(self.blocks, blocks):
            layer = next(layers)
            x = self.block_call(block, x, cos, sin, layer, input_pos)
            del block, layer  # a block built on demand, and a cache copy, freed before the next is made
        return x

    def forward(self, tokens: torch.Tensor, input_pos: int = 0, cache: Optional[Iterable[LayerCache]] = None,
                rope: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        x = rms_norm(self.hidden(tokens, input_pos, cache, rope=rope), self.norm, self.config.rms_eps)
        return (x if self.head is None else self.head(x)).float()


class Decoder(nn.Module):
    """The decode step of ``model`` at one context: ``forward(tokens [M], blocks=None)`` -> the next
    tokens ``[M]`` (argmax of the logits; the normed hidden state ``[M, hidden]`` without a head).

    ``cache`` holds ``context + 1`` positions, ``0 .. context - 1`` filled (:func:`prefill`); every
    call writes position ``context`` and attends over all of them. RoPE's cos and sin of that
    position are computed once, here. ``head_call`` runs the norm, the head and the argmax; a job
    may point it (and ``model.block_call``) at compiled forms. :meth:`logits` gives the logits.

    ``attention``: ``"sdpa"`` or ``"split-kv"`` (:data:`DECODE_ATTENTION`). Split-KV's slice length is
    fixed here, from the cache's shape and ``sms`` (default: the CUDA device's SM count), or from
    ``splits``: the step's shapes are static, so it can be captured in one CUDA graph. ``splits``
    (the attribute) is the slice count that runs (None for SDPA).

    Raises:
        ValueError: an unknown ``attention``, or a head_dim the split-KV kernel cannot take.
        ImportError: ``"split-kv"`` without Triton.
    """

    def __init__(self, model: Llama, cache: KVCache, context: int, attention: str = "sdpa",
                 splits: Optional[int] = None, sms: Optional[int] = None):
        super().__init__()
        self.model, self.cache, self.context = model, cache, context
        cos, sin = model.rope(context, None, model.embed.device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.head_call: Callable = self._head
        if attention not in DECODE_ATTENTION:
            raise ValueError(f"decode attention must be one of {', '.join(DECODE_ATTENTION)}, got {attention!r}")
        self.attention, self.splits, slice_len = attention, None, 0
        if attention == "split-kv":
            from qbench.model import splitkv  # Triton; registers torch.ops.qbench.split_kv_decode

            reason = splitkv.head_dim_reason(model.config.head_dim)
            if reason:
                raise ValueError(reason)
            batch, _, slots, _ = cache.shape
            if sms is None:
                sms = torch.cuda.get_device_properties(model.embed.device).multi_processor_count
            slice_len = splitkv.split_len(batch * model.config.kv_heads, slots, sms, splits, kv_dtype=cache.dtype)
            self.splits = math.ceil(slots / slice_len)
        if isinstance(model.blocks, nn.ModuleList):  # (blocks built on demand take the default, SDPA)
            for block in model.blocks:
                block.slice_len = slice_len

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        x = rms_norm(x, self.model.norm, self.model.config.rms_eps)
        if self.model.head is None:
            return x
        return self.model.head(x).argmax(dim=-1)

    def forward(self, tokens: torch.Tensor, blocks: Optional[int] = None) -> torch.Tensor:
        return self.head_call(self.model.hidden(tokens, self.context, self.cache, blocks, rope=(self.cos, self.sin)))

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """FP32 logits ``[M, vocab]`` of the step (eager; the normed hidden state without a head)."""
        return self.model(tokens, self.context, self.cache, rope=(self.cos, self.sin))


#: ``build(weight [N, K] fp32, bias [N] fp32 | None, block, role) -> nn.Module``.
LinearBuilder = Callable[[torch.Tensor, Optional[torch.Tensor], int, str], nn.Module]


def float_builder(dtype: torch.dtype) -> LinearBuilder:
    """A builder of :class:`FloatLinear` layers in ``dtype`` (weight and bias)."""
    return lambda w, b, i, r: FloatLinear(w.to(dtype), None if b is None else b.to(dtype))


def build_block(weights: Weights, index: int, linear: LinearBuilder, dtype: torch.dtype,
                keep: Optional[list] = None) -> Block:
    """Block ``index``, its linears from ``linear(fp32 weight [N, K], bias, index, role)``;
    ``keep``, a list, receives its ``{role: module}``."""
    linears = {role: linear(weights.get(linear_name(index, role)), weights.bias(index, role), index, role)
               for role in BLOCK_LINEARS}
    if keep is not None:
        keep.append(linears)
    return Block(weights.config, linears, weights.get(f"model.layers.{index}.input_layernorm.weight"),
                 weights.get(f"model.layers.{index}.post_attention_layernorm.weight"), dtype)


class BlocksOnDemand:
    """The first ``count`` blocks, each built when the forward reaches it and dropped after: a
    model run through one block's weights at a time (the prefill, the FP32 reference)."""

    def __init__(self, weights: Weights, linear: LinearBuilder, dtype: torch.dtype, count: int):
        self.weights, self.linear, self.dtype, self.count = weights, linear, dtype, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Block]:
        for i in range(self.count):
            yield build_block(self.weights, i, self.linear, self.dtype)


def build_model(weights: Weights, linear: LinearBuilder, dtype: torch.dtype, head: Optional[LinearBuilder] = None,
                keep: Optional[list] = None, lm_head: bool = True) -> Llama:
    """A :class:`Llama` whose block linears ``linear`` builds from the FP32 weights, one block at a
    time (only one block's FP32 weights alive at once), the rest in ``dtype``. ``head`` builds the
    LM head (default: a float layer in ``dtype``; a tied one shares the embedding's tensor, as the
    checkpoint stores it); ``lm_head=False``: no head. ``keep``, a list, receives each block's
    ``{role: module}`` as built."""
    config = weights.config
    blocks = [build_block(weights, b, linear, dtype, keep) for b in range(config.blocks)]
    embed = weights.get("model.embed_tokens.weight").to(dtype)
    if not lm_head:
        lm = None
    elif head is None and config.tie_embeddings:
        lm = FloatLinear(embed)
    else:
        w = weights.get("lm_head.weight")
        lm = head(w, None, -1, "lm_head") if head is not None else FloatLinear(w.to(dtype))
    return Llama(config, embed, blocks, weights.get("model.norm.weight"), lm, dtype)


@torch.inference_mode()
def prefill(weights: Weights, cache: KVCache, prompt: torch.Tensor, dtype: torch.dtype) -> None:
    """Fill positions ``0 .. P - 1`` of ``cache`` from ``prompt`` ``[B, P]`` (int64) through the
    one forward, block by block (:class:`BlocksOnDemand`), the weights cast to ``dtype``.

    ``B`` is the cache's batch, or 1 (one prompt shared by every sequence: its K and V are computed
    once and copied into each sequence's slots; the decode step then still reads distinct caches).

    Raises:
        ValueError: a prompt longer than the cache or a batch that is neither 1 nor the cache's.
    """
    b, p = prompt.shape
    m, _, slots, _ = cache.shape
    if p >= slots or b not in (1, m):
        raise ValueError(f"prefill: prompt [{b}, {p}] does not fit a cache of M={m}, {slots} positions")
    model = Llama(weights.config, weights.get("model.embed_tokens.weight"),
                  BlocksOnDemand(weights, float_builder(dtype), dtype, len(cache)),
                  weights.get("model.norm.weight"), None, dtype)
    model.hidden(prompt, 0, cache)


#: Most bytes of one block's FP32 K+V copy the reference holds at once (:func:`reference_group`).
#: Project choice: small beside a large model's cache (Llama-3.1-8B's, M = 16, 32,768 positions: 8.6 GB a block).
REFERENCE_COPY_BYTES = 1 << 30


def reference_group(config: StepModelConfig, m: int, positions: int) -> int:
    """Sequences the FP32 reference takes at a time: as many as keep one block's FP32 K+V copy of
    ``positions`` positions within :data:`REFERENCE_COPY_BYTES`, at least 1, at most ``m``."""
    per_sequence = positions * config.kv_elements_per_position() * 4
    return max(1, min(m, REFERENCE_COPY_BYTES // per_sequence))


@torch.inference_mode()
def reference_logits(weights: Weights, cache: KVCache, tokens: torch.Tensor, context: int,
                     lm_head: bool, via: Optional[torch.dtype] = None, group: Optional[int] = None) -> torch.Tensor:
    """The FP32 step's logits ``[M, vocab]`` (or normed hidden state without ``lm_head``), through
    the one forward block by block: each block's weights made again in FP32 and its cache copied to
    FP32 (``cache`` is not written), so the reference holds one block at a time. Strict FP32
    matmuls (TF32 off). ``cache`` may hold one shared prompt (batch 1): it is expanded to the M
    tokens; ``via``: its values rounded through that dtype first (:meth:`KVCache.each_as`);
    ``group``: at most that many sequences at a time (each group's own pass, its blocks made again),
    so a block's FP32 cache copy holds ``group`` sequences, not M (:func:`reference_group`)."""
    config = weights.config
    m = tokens.shape[0]
    group = m if group is None else max(1, min(group, m))
    shared = cache[0].k.shape[0] == 1 and m > 1
    with strict_fp32():  # the per-backend API: the legacy getters raise once it was used (torch >= 2.9)
        head = FloatLinear(weights.get("lm_head.weight")) if lm_head else None
        embed, norm = weights.get("model.embed_tokens.weight"), weights.get("model.norm.weight")
        outs = []
        for g0 in range(0, m, group):  # the head, embedding and norm made once; each pass builds its blocks
            part = tokens[g0:g0 + group]
            model = Llama(config, embed, BlocksOnDemand(weights, float_builder(torch.float32), torch.float32,
                                                        len(cache)), norm, head, torch.float32)
            layers = (cache.each_as(torch.float32, batch=part.shape[0], via=via) if shared
                      else cache.each_as(torch.float32, via=via, seqs=slice(g0, g0 + part.shape[0])))
            outs.append(model(part, context, layers))
            del model
        return outs[0] if len(outs) == 1 else torch.cat(outs)
