"""The ``[model]`` table of a model-step scenario (torch-free).

::

    [model]
    name = "llama3-8b"          # a preset (qbench.model.config.PRESETS), or
    # config = "path/config.json" # any Llama-family Hugging Face config.json (relative to the scenario)
    # checkpoint = "DIR"          # a Hugging Face folder (config.json, safetensors, tokenizer.json) or a
    #                             # model id in the local Hugging Face cache: its own weights
    context = [128, 4096]       # positions already in the KV cache when the step runs
    blocks = 32                 # build at most this many blocks (default: the model's, as many as fit)
    lm_head = true              # the step ends with the LM head and argmax (false: at the final norm)
    quantize_lm_head = false    # the scheme also builds the LM head (default: the activation dtype)
    methods = ["step_graph", "step_compiled", "step_reduce_overhead"]   # default: all that apply
    linear_sum = true           # measure the per-layer stream sum of the same linears in the same run

A scenario with ``[model]`` has no ``[layer]``, no ``[tp]`` and a seeded weight: every error names
the file, ``model.<key>`` and the value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from qbench.model.config import PRESETS, ConfigError, StepModelConfig, read_hf_config
from qbench.timing import registry

#: The step methods, in table order: the timing registry's ``job = "step"`` methods (a method
#: whose ``compiled`` is set runs only for a compiled scheme).
STEP_METHODS: tuple[str, ...] = registry.STEP_METHODS
#: Largest context a scenario may ask for (positions), whatever the model says.
CONTEXT_MAX = 1 << 20


class ModelSpec(BaseModel):
    """The validated ``[model]`` table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    name: Optional[str] = Field(default=None, min_length=1, max_length=200)
    config: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    checkpoint: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    context: tuple[int, ...] = Field(default=(), max_length=16)
    blocks: Optional[int] = Field(default=None, gt=0, le=1024)
    lm_head: bool = True
    quantize_lm_head: bool = False
    methods: tuple[Literal[STEP_METHODS], ...] = Field(default=STEP_METHODS, min_length=1)
    linear_sum: bool = True

    @field_validator("context", mode="before")
    @classmethod
    def _listed(cls, value):
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        return tuple(value) if isinstance(value, list) else value

    @field_validator("methods", mode="before")
    @classmethod
    def _methods_listed(cls, value):
        return tuple(value) if isinstance(value, list) else value

    @field_validator("context")
    @classmethod
    def _context(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for i, c in enumerate(value):
            if c <= 0 or c > CONTEXT_MAX:
                raise ValueError(f"every context must be an integer in 1..{CONTEXT_MAX}, item {i} is {c}")
        if len(set(value)) != len(value):
            raise ValueError("context values must be distinct")
        return value

    @field_validator("methods")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("step methods must be distinct")
        return value

    def to_dict(self) -> dict:
        data = self.model_dump()
        data["context"], data["methods"] = list(self.context), list(self.methods)
        if self.checkpoint is None:
            data.pop("checkpoint")
        return data


def resolve(spec: ModelSpec, source: str) -> StepModelConfig:
    """The model configuration ``spec`` names: a preset, or the config.json at ``config``
    (relative to the folder of the scenario file ``source``).

    Raises:
        ConfigError: key ``model.name`` / ``model.config`` / ``model.<config key>`` and the reason.
    """
    given = [k for k in ("name", "config", "checkpoint") if getattr(spec, k) is not None]
    if len(given) != 1:
        raise ConfigError("model", f"give exactly one of 'name' (a preset: {', '.join(PRESETS)}), 'config' "
                                   f"(a Llama-family config.json) or 'checkpoint' (a Hugging Face folder), got "
                                   f"name={spec.name!r}, config={spec.config!r}, checkpoint={spec.checkpoint!r}")
    if spec.checkpoint is not None:
        from qbench.model import checkpoint  # torch-free: opened once per process

        return checkpoint.open_named(spec.checkpoint, source).config
    if spec.name is not None:
        if spec.name not in PRESETS:
            raise ConfigError("model.name", f"unknown model preset (known: {', '.join(PRESETS)}; or give "
                                            f"'config' = a Llama-family config.json), got {spec.name!r}")
        return PRESETS[spec.name]
    path = Path(spec.config)
    if not path.is_absolute():
        path = Path(source).parent / path
    try:
        return read_hf_config(path)
    except ConfigError as exc:
        key = f"model.config.{exc.key}" if exc.key else "model.config"
        raise ConfigError(key, f"{exc.message} (in {path})") from None


def check(spec: ModelSpec, source: str) -> StepModelConfig:
    """:func:`resolve`, then contexts given, a model without biases, every context within the model's ``max_position_embeddings`` and
    ``blocks`` within the model's block count.

    Raises:
        ConfigError: ``model.context`` / ``model.blocks`` / what :func:`resolve` raises.
    """
    config = resolve(spec, source)
    if not spec.context:
        raise ConfigError("model.context", "missing: the positions already in the KV cache when the step runs, "
                                           "e.g. context = [128, 4096], got nothing")
    if config.biased:
        key = "model_type" if config.model_type == "qwen2" else "attention_bias"
        raise ConfigError(f"model.config.{key}", f"the Llama decode step has no biases, got biases on "
                                                 f"{', '.join(config.biased)} ({config.model_type})")
    for c in spec.context:
        if c + 1 > config.max_positions:
            raise ConfigError("model.context", f"the step at context {c} writes position {c}, beyond {config.title}'s "
                                               f"max_position_embeddings = {config.max_positions}, got {c}")
    if spec.blocks is not None and spec.blocks > config.blocks:
        raise ConfigError("model.blocks", f"{config.title} has {config.blocks} blocks, got {spec.blocks}")
    return config
