"""Model presets: the linear layers of one decode step of a model (torch-free).

A :class:`ModelPreset` lists the linear shapes of one decoder block with how many of each a block
has, the number of blocks, and the LM head, each shape with the scenario file that measures it.
``qbench model`` (:mod:`qbench.readers.model`) sums per-layer results over a preset.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LinearShape", "ModelPreset", "PRESETS"]


@dataclass(frozen=True)
class LinearShape:
    """One linear shape of a model.

    Attributes:
        names: the projections of that shape, e.g. ``"q_proj, o_proj"``.
        k: in_features.
        n: out_features.
        count: how many of them one block has (the LM head: how many the model has, 1).
        scenario: the scenario file that measures this shape.
    """

    names: str
    k: int
    n: int
    count: int
    scenario: str

    @property
    def label(self) -> str:
        return f"{self.names} {self.k}→{self.n}"


@dataclass(frozen=True)
class ModelPreset:
    """A model's linear layers: ``blocks`` decoder blocks of ``block`` shapes, plus ``lm_head``."""

    name: str
    title: str
    blocks: int
    block: tuple[LinearShape, ...]
    lm_head: LinearShape
    source: str


def _llama(name: str, title: str, blocks: int, hidden: int, kv: int, ffn: int, vocab: int,
           prefix: str, source: str) -> ModelPreset:
    """A Llama-architecture preset: q/o hidden→hidden, k/v hidden→kv (KV heads × head dim),
    gate/up hidden→ffn, down ffn→hidden, LM head hidden→vocab (untied)."""
    return ModelPreset(
        name=name, title=title, blocks=blocks, source=source,
        block=(LinearShape("q_proj, o_proj", hidden, hidden, 2, f"scenarios/{prefix}_q_o.toml"),
               LinearShape("k_proj, v_proj", hidden, kv, 2, f"scenarios/{prefix}_k_v.toml"),
               LinearShape("gate_proj, up_proj", hidden, ffn, 2, f"scenarios/{prefix}_gate_up.toml"),
               LinearShape("down_proj", ffn, hidden, 1, f"scenarios/{prefix}_down.toml")),
        lm_head=LinearShape("lm_head", hidden, vocab, 1, f"scenarios/{prefix}_lm_head.toml"),
    )


#: The model presets, by the name ``qbench model`` takes. Shapes from Meta's config.json files
#: (head dim 128 in both; o_proj is hidden→hidden because heads × head dim = hidden).
PRESETS: dict[str, ModelPreset] = {
    "llama3-8b": _llama("llama3-8b", "Llama-3-8B", 32, 4096, 1024, 14336, 128256, "llama3_8b",
                        "hidden 4096, 32 heads, 8 KV heads of 128, FFN 14336, vocab 128256, 32 layers"),
    "llama3.1-70b": _llama("llama3.1-70b", "Llama-3.1-70B", 80, 8192, 1024, 28672, 128256,
                           "llama31_70b",
                           "hidden 8192, 64 heads, 8 KV heads of 128, FFN 28672, vocab 128256, 80 layers"),
}
