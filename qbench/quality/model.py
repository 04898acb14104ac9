"""The teacher-forced forward of a Llama-family model whose linears a scheme built (torch).

``forward(tokens [T] int64) -> logits [T, vocab] float32``: embedding, then per block RMSNorm,
q/k/v projections (with the checkpoint's biases), RoPE (with the config's scaling), causal
grouped-query attention over the chunk, o projection, residual, RMSNorm, SiLU-gated MLP,
residual; final RMSNorm and LM head. The operations are ``transformers``' ``LlamaDecoderLayer``
(and ``Qwen2DecoderLayer`` with its q/k/v biases), written on qbench's step primitives
(:mod:`qbench.model.llama`: RoPE, RMSNorm), so each scheme's real module runs in every linear.

Hidden states flow in the model's activation dtype (the scheme's ``activation_dtype``; the
reference's dtype for the reference); a linear's output is cast back to it when a library returns
another dtype.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from qbench.model.config import BLOCK_LINEARS, StepModelConfig, linear_name
from qbench.model.llama import apply_rope, rms_norm, rope_cos_sin


class Cast(nn.Module):
    """A linear module run at another activation dtype: input cast to ``dtype``, output back to the
    caller's (a part quantized alone inside the reference model, :mod:`qbench.quality.measure`)."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner, self.dtype = inner, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.to(self.dtype)).to(x.dtype)


class FloatLinear(nn.Module):
    """``y = x W^T + b`` in the weight's dtype (the reference's linears and a float LM head)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class Block(nn.Module):
    """One decoder block over a whole chunk: ``forward(x [T, hidden], cos, sin) -> [T, hidden]``."""

    def __init__(self, config: StepModelConfig, linears: Mapping[str, nn.Module], attn_norm: torch.Tensor,
                 mlp_norm: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.eps, self.dtype = config.rms_eps, dtype
        self.linears = nn.ModuleDict(dict(linears))
        self.attn_norm = nn.Parameter(attn_norm.to(dtype), requires_grad=False)
        self.mlp_norm = nn.Parameter(mlp_norm.to(dtype), requires_grad=False)

    def _linear(self, role: str, x: torch.Tensor) -> torch.Tensor:
        y = self.linears[role](x)
        return y if y.dtype == self.dtype else y.to(self.dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        h = rms_norm(x, self.attn_norm, self.eps)
        q = self._linear("q_proj", h).view(t, self.heads, self.head_dim).transpose(0, 1)
        k = self._linear("k_proj", h).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self._linear("v_proj", h).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        att = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
        x = x + self._linear("o_proj", att.transpose(0, 1).reshape(t, self.heads * self.head_dim))
        h = rms_norm(x, self.mlp_norm, self.eps)
        return x + self._linear("down_proj", F.silu(self._linear("gate_proj", h)) * self._linear("up_proj", h))


class Forward(nn.Module):
    """The whole model, teacher-forced: ``forward(tokens [T]) -> logits [T, vocab]`` (float32)."""

    def __init__(self, config: StepModelConfig, embed: torch.Tensor, blocks: list[Block], norm: torch.Tensor,
                 head: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.config, self.dtype = config, dtype
        self.embed = nn.Parameter(embed.to(dtype), requires_grad=False)
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.Parameter(norm.to(dtype), requires_grad=False)
        self.head = head

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[0], device=tokens.device)
        cos, sin = rope_cos_sin(self.config, positions, self.dtype)
        x = self.embed[tokens]
        for block in self.blocks:
            x = block(x, cos, sin)
        x = rms_norm(x, self.norm, self.config.rms_eps)
        return self.head(x).float()


class Source:
    """Where a model's tensors come from, as FP32 on ``device``: a checkpoint
    (:class:`qbench.model.checkpoint.Checkpoint`, its own weights and biases) or seeded weights
    (:class:`qbench.model.llama.Weights`, no biases)."""

    def __init__(self, config: StepModelConfig, device: torch.device, checkpoint=None, seed: int = 0):
        from qbench.model.llama import Weights

        self.config, self.device, self.checkpoint = config, device, checkpoint
        self.seeded = None if checkpoint is not None else Weights(config, seed, device)

    def get(self, name: str) -> torch.Tensor:
        if self.checkpoint is None:
            return self.seeded.get(name)
        if name == "lm_head.weight" and self.config.tie_embeddings:
            name = "model.embed_tokens.weight"
        return self.checkpoint.tensor(name, str(self.device)).float()

    def bias(self, block: int, role: str) -> Optional[torch.Tensor]:
        if self.checkpoint is None or role not in self.config.biased:
            return None
        return self.checkpoint.bias(block, role, str(self.device)).float()


#: ``build(weight [N, K] fp32, bias [N] fp32 | None, block, role) -> nn.Module``.
LinearBuilder = Callable[[torch.Tensor, Optional[torch.Tensor], int, str], nn.Module]


def build_model(source: Source, linear: LinearBuilder, dtype: torch.dtype,
                head: Optional[LinearBuilder] = None, keep: Optional[list] = None) -> Forward:
    """A :class:`Forward` whose block linears ``linear`` builds from the source's FP32 weights, one
    block at a time (only one block's FP32 weights alive at once), non-linear parts in ``dtype``.
    ``head`` builds the LM head (default: a float layer in ``dtype``). ``keep``, a list, receives
    each block's ``{role: module}`` as built."""
    config = source.config
    blocks = []
    for b in range(config.blocks):
        linears = {}
        for role in BLOCK_LINEARS:
            linears[role] = linear(source.get(linear_name(b, role)), source.bias(b, role), b, role)
        if keep is not None:
            keep.append(linears)
        blocks.append(Block(config, linears, source.get(f"model.layers.{b}.input_layernorm.weight"),
                            source.get(f"model.layers.{b}.post_attention_layernorm.weight"), dtype))
    embed = source.get("model.embed_tokens.weight").to(dtype)
    if head is None and config.tie_embeddings:  # a float tied head shares the embedding's tensor, as the checkpoint does
        lm = FloatLinear(embed)
    else:
        w = source.get("lm_head.weight")
        lm = head(w, None, -1, "lm_head") if head is not None else FloatLinear(w.to(dtype))
    return Forward(config, embed, blocks, source.get("model.norm.weight"), lm, dtype)
