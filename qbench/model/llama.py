"""qbench's compact Llama decode step (torch): embedding -> N blocks -> norm -> LM head -> argmax.

Each block is LlamaForCausalLM's decoder layer (``transformers``' ``modeling_llama``): RMSNorm,
q/k/v projections, RoPE, a write of the new position's K and V into a static KV cache,
grouped-query attention over every cached position, o projection, residual, RMSNorm, SiLU-gated
MLP (gate, up, down), residual. The seven linear layers of every block (and, when asked, the LM
head) are modules a qbench scheme built (:attr:`qbench.schemes.base.Scheme.build`), so the step
runs the scheme's real kernels.

Written for speed like the engines' decode loops (gpt-fast's ``model.py``): no per-op Python
decision in the step (shapes and the position are fixed when the model is built, so the step can
be captured in one CUDA graph or compiled), a static KV cache of exactly ``context + 1`` positions
per block (the cached context and the new token: attention reads only the filled cache, no mask
over a longer one), and GQA computed without repeating K/V: the ``heads / kv_heads`` query heads
of one KV head are the query rows of one attention call (``[M, kv_heads, group, head_dim]``
against ``[M, kv_heads, context + 1, head_dim]``).

Shapes: M sequences decode one token each (``tokens``: ``[M]`` int64); hidden states are
``[M, hidden]``; the KV cache of one block is two ``[M, kv_heads, context + 1, head_dim]``
tensors. Positions ``0 .. context - 1`` are filled by :func:`prefill`; the step writes position
``context`` and attends over all ``context + 1``.
"""

from __future__ import annotations

import math
import zlib
from typing import Callable, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from qbench.model.config import BLOCK_LINEARS, StepModelConfig, linear_name  # noqa: F401 - re-exported



class Weights:
    """The model's FP32 weights by ``transformers`` state-dict name, on ``device``.

    Either from a ``state_dict`` (tests: the weights of a ``transformers`` model), or generated:
    every tensor from its own seeded generator (seed = CRC-32 of the name, mixed with ``seed``), so
    any tensor can be made again alone and identically on the same device (the FP32 reference
    step regenerates a block's weights instead of keeping 4 bytes per weight of the whole model).
    Generated values: linear weights N(0, 1/K) (K = in_features, the layer scenarios' weight), the
    embedding N(0, 1), RMSNorm weights 1 (``transformers``' initial value).
    """

    def __init__(self, config: StepModelConfig, seed: int, device: torch.device,
                 state_dict: Optional[Mapping[str, torch.Tensor]] = None):
        self.config, self.seed, self.device, self.state_dict = config, seed, torch.device(device), state_dict

    def shape(self, name: str) -> tuple[int, ...]:
        c = self.config
        if name == "model.embed_tokens.weight":
            return (c.vocab, c.hidden)
        if name == "lm_head.weight":
            return (c.vocab, c.hidden)
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            return (c.hidden,)
        role = name.split(".")[-2]
        k, n = c.linear_shapes()[role]
        return (n, k)

    def get(self, name: str) -> torch.Tensor:
        """The FP32 tensor ``name`` on the device (a new tensor each call).

        Raises:
            KeyError: a state dict without ``name``.
        """
        if self.state_dict is not None:
            if name == "lm_head.weight" and name not in self.state_dict and self.config.tie_embeddings:
                name = "model.embed_tokens.weight"
            return self.state_dict[name].detach().to(self.device, torch.float32).clone()
        if self.config.tie_embeddings and name == "lm_head.weight":
            name = "model.embed_tokens.weight"
        shape = self.shape(name)
        if len(shape) == 1:
            return torch.ones(shape, dtype=torch.float32, device=self.device)
        gen = torch.Generator(device=self.device)
        gen.manual_seed((self.seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63))
        out = torch.randn(shape, generator=gen, dtype=torch.float32, device=self.device)
        if name != "model.embed_tokens.weight":
            out.mul_(1.0 / math.sqrt(shape[1]))
        return out


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
    """A bias-free linear layer ``y = x W^T`` in the weight's dtype (the FP32 reference, the LM head
    and prefill weights that no scheme built)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class Block(nn.Module):
    """One decoder block for decode: ``forward(x [M, hidden], cos, sin) -> [M, hidden]``.

    Holds the seven linear modules, the two RMSNorm weights, and its KV cache (buffers
    ``k_cache``/``v_cache`` ``[M, kv_heads, context + 1, head_dim]``); writes position
    ``position`` (= the context) and attends over the whole cache.
    """

    def __init__(self, config: StepModelConfig, linears: Mapping[str, nn.Module], attn_norm: torch.Tensor,
                 mlp_norm: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, position: int,
                 dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.eps, self.position, self.dtype = config.rms_eps, position, dtype
        self.scale = 1.0 / math.sqrt(config.head_dim)
        for role in BLOCK_LINEARS:
            setattr(self, role, linears[role])
        self.attn_norm = nn.Parameter(attn_norm.to(dtype), requires_grad=False)
        self.mlp_norm = nn.Parameter(mlp_norm.to(dtype), requires_grad=False)
        self.register_buffer("k_cache", k_cache, persistent=False)
        self.register_buffer("v_cache", v_cache, persistent=False)

    def _linear(self, role: str, x: torch.Tensor) -> torch.Tensor:
        y = getattr(self, role)(x)
        return y if y.dtype == self.dtype else y.to(self.dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]
        h = rms_norm(x, self.attn_norm, self.eps)
        q = self._linear("q_proj", h).view(m, self.heads, self.head_dim)
        k = self._linear("k_proj", h).view(m, self.kv_heads, self.head_dim)
        v = self._linear("v_proj", h).view(m, self.kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        self.k_cache[:, :, self.position] = k
        self.v_cache[:, :, self.position] = v
        group = self.heads // self.kv_heads
        att = F.scaled_dot_product_attention(q.view(m, self.kv_heads, group, self.head_dim), self.k_cache,
                                             self.v_cache, scale=self.scale)
        x = x + self._linear("o_proj", att.reshape(m, self.heads * self.head_dim))
        h = rms_norm(x, self.mlp_norm, self.eps)
        return x + self._linear("down_proj", F.silu(self._linear("gate_proj", h)) * self._linear("up_proj", h))


class DecodeModel(nn.Module):
    """The decode step of ``blocks`` Llama blocks at one context length.

    ``forward(tokens [M] int64) -> next tokens [M] int64`` (argmax of the logits; with
    ``lm_head=False`` the normed hidden state ``[M, hidden]``); :meth:`logits` returns the logits
    ``[M, vocab]`` (or that hidden state) for the error metrics.
    """

    def __init__(self, config: StepModelConfig, embed: torch.Tensor, blocks: list[Block], norm: torch.Tensor,
                 lm_head: Optional[nn.Module], context: int, dtype: torch.dtype):
        super().__init__()
        self.config, self.context, self.dtype = config, context, dtype
        self.embed = nn.Parameter(embed.to(dtype), requires_grad=False)
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.Parameter(norm.to(dtype), requires_grad=False)
        self.lm_head = lm_head
        device = embed.device
        cos, sin = rope_cos_sin(config, torch.tensor([context], device=device), dtype)
        self.register_buffer("cos", cos[0], persistent=False)
        self.register_buffer("sin", sin[0], persistent=False)
        self.block_call: Callable = lambda block, x, cos, sin: block(x, cos, sin)
        self.head_call: Callable = self._head

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        x = rms_norm(x, self.norm, self.config.rms_eps)
        if self.lm_head is None:
            return x
        logits = self.lm_head(x)
        return logits.argmax(dim=-1)

    def hidden(self, tokens: torch.Tensor, blocks: Optional[int] = None) -> torch.Tensor:
        """The hidden state after the first ``blocks`` blocks (all by default), ``[M, hidden]``."""
        x = F.embedding(tokens, self.embed)
        for block in list(self.blocks)[: blocks if blocks is not None else len(self.blocks)]:
            x = self.block_call(block, x, self.cos, self.sin)
        return x

    def forward(self, tokens: torch.Tensor, blocks: Optional[int] = None) -> torch.Tensor:
        return self.head_call(self.hidden(tokens, blocks))

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """FP32 logits ``[M, vocab]`` of the step (eager; the normed hidden state without a head)."""
        x = rms_norm(self.hidden(tokens), self.norm, self.config.rms_eps)
        out = x if self.lm_head is None else self.lm_head(x)
        return out.float()


def new_cache(config: StepModelConfig, m: int, context: int, dtype: torch.dtype, device: torch.device,
              blocks: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Zeroed K and V caches for ``blocks`` blocks, each ``[m, kv_heads, context + 1, head_dim]``."""
    shape = (m, config.kv_heads, context + 1, config.head_dim)
    return [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(blocks)]


@torch.inference_mode()
def prefill(weights: Weights, cache: list[tuple[torch.Tensor, torch.Tensor]], prompt: torch.Tensor,
            dtype: torch.dtype, chunk: int = 4096) -> None:
    """Fill positions ``0 .. P - 1`` of ``cache`` from ``prompt`` ``[B, P]`` (int64) through the
    blocks, block by block, with ``weights`` cast to ``dtype`` (made again per block: nothing but
    one block's weights is held).

    ``B`` is the cache's M, or 1 (one prompt shared by every sequence: its K and V are computed once
    and copied into each sequence's slots; the decode step then still reads M distinct caches).
    Attention is causal over the prompt (``is_causal``; K/V repeated to the query heads), the MLP
    runs in chunks of ``chunk`` positions.

    Raises:
        ValueError: a prompt longer than the cache or a batch that is neither 1 nor the cache's M.
    """
    config = weights.config
    b, p = prompt.shape
    m, _, slots, _ = cache[0][0].shape
    if p >= slots or b not in (1, m):
        raise ValueError(f"prefill: prompt [{b}, {p}] does not fit a cache of M={m}, {slots} positions")
    cos, sin = rope_cos_sin(config, torch.arange(p, device=prompt.device), dtype)
    x = F.embedding(prompt, weights.get("model.embed_tokens.weight").to(dtype))  # [B, P, hidden]
    group = config.heads // config.kv_heads
    for i, (k_cache, v_cache) in enumerate(cache):
        lin = {role: weights.get(linear_name(i, role)).to(dtype) for role in BLOCK_LINEARS}
        an = weights.get(f"model.layers.{i}.input_layernorm.weight").to(dtype)
        mn = weights.get(f"model.layers.{i}.post_attention_layernorm.weight").to(dtype)
        h = rms_norm(x, an, config.rms_eps)
        q = F.linear(h, lin["q_proj"]).view(b, p, config.heads, config.head_dim).transpose(1, 2)
        k = F.linear(h, lin["k_proj"]).view(b, p, config.kv_heads, config.head_dim).transpose(1, 2)
        v = F.linear(h, lin["v_proj"]).view(b, p, config.kv_heads, config.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k_cache[:, :, :p] = k.to(k_cache.dtype)
        v_cache[:, :, :p] = v.to(v_cache.dtype)
        att = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                                             is_causal=True, scale=1.0 / math.sqrt(config.head_dim))
        x = x + F.linear(att.transpose(1, 2).reshape(b, p, config.heads * config.head_dim), lin["o_proj"])
        del q, k, v, att
        for s in range(0, p, chunk):
            part = x[:, s:s + chunk]
            h = rms_norm(part, mn, config.rms_eps)
            part += F.linear(F.silu(F.linear(h, lin["gate_proj"])) * F.linear(h, lin["up_proj"]), lin["down_proj"])
        del lin


def build_block(config: StepModelConfig, weights: Weights, index: int, k_cache: torch.Tensor, v_cache: torch.Tensor,
                make_linear: Callable[[torch.Tensor, str], nn.Module], context: int, dtype: torch.dtype) -> Block:
    """Block ``index`` with its linear layers from ``make_linear(fp32_weight [N, K], role)``."""
    linears = {role: make_linear(weights.get(linear_name(index, role)), role) for role in BLOCK_LINEARS}
    return Block(config, linears, weights.get(f"model.layers.{index}.input_layernorm.weight"),
                 weights.get(f"model.layers.{index}.post_attention_layernorm.weight"), k_cache, v_cache, context, dtype)


@torch.inference_mode()
def reference_logits(weights: Weights, cache: list[tuple[torch.Tensor, torch.Tensor]], tokens: torch.Tensor,
                     context: int, lm_head: bool) -> torch.Tensor:
    """The FP32 step's logits ``[M, vocab]`` (or normed hidden state without ``lm_head``), block by
    block: each block's weights made again in FP32 and its cache copied to FP32 (the given cache is
    not written), so the reference holds one block at a time. Strict FP32 matmuls (TF32 off).

    Uses the same :class:`Block` code as the measured step.
    """
    config = weights.config
    prev = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        dev = tokens.device
        cos, sin = rope_cos_sin(config, torch.tensor([context], device=dev), torch.float32)
        x = F.embedding(tokens, weights.get("model.embed_tokens.weight"))
        for i, (k_cache, v_cache) in enumerate(cache):
            one = build_block(config, weights, i, k_cache.float(), v_cache.float(), lambda w, role: FloatLinear(w),
                              context, torch.float32)
            x = one(x, cos[0], sin[0])
            del one
        x = rms_norm(x, weights.get("model.norm.weight"), config.rms_eps)
        return F.linear(x, weights.get("lm_head.weight")) if lm_head else x
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev[0]
        torch.set_float32_matmul_precision(prev[1])
