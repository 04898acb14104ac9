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
    attention = "auto"          # the decode attention: "split-kv" (Triton flash-decoding, CUDA), "sdpa", or
                                # "auto": split-KV where it can run (CUDA with Triton), else SDPA
    kv_cache = "activation"     # the KV cache's dtype: the activation dtype, or "fp8" (e4m3, a static scale
                                # per block and KV head from the prefill's absmax)

A scenario with ``[model]`` (and no ``[quality]``) is a model-step scenario: it has ``m`` and this
table, and no ``[layer]``, ``[weight]``, ``[inputs]``, ``[tp]`` or ``timing.methods``. Every error
names the file, ``model.<key>`` and the value. This module holds the job's table model
(:class:`StepTables`), its checks, its ``qbench check`` line and its memory fit (:attr:`qbench.jobs.Job`).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from qbench.model.source import ModelSource, resolve
from qbench.model import recipe as recipes
from qbench.model.config import ConfigError, StepModelConfig
from qbench.tables import MTables, ScenarioError
from qbench.timing import registry

__all__ = ["ModelSpec", "StepTables", "check", "resolve", "step_model"]

#: The step methods, in table order: the timing registry's ``job = "step"`` methods (a method
#: whose ``compiled`` is set runs only for a compiled scheme).
STEP_METHODS: tuple[str, ...] = registry.STEP_METHODS
#: Largest context a scenario may ask for (positions), whatever the model says.
CONTEXT_MAX = 1 << 20
#: ``[model] attention``: the decode step's attention (:data:`qbench.model.llama.DECODE_ATTENTION`,
#: or ``auto``: split-KV where it can run, else SDPA; the row says which ran and why).
ATTENTION: tuple[str, ...] = ("auto", "split-kv", "sdpa")
#: ``kv_cache`` (the step's ``[model]`` and the quality job's ``[quality]``): the KV cache's dtype,
#: the activation dtype or fp8 (e4m3 with a static scale per block and KV head).
KV_CACHE: tuple[str, ...] = ("activation", "fp8")


class ModelSpec(ModelSource):
    """The validated ``[model]`` table of a model-step scenario (see the module docstring): the
    model's source (:class:`qbench.model.source.ModelSource`, or ``config``) and the step's keys."""

    config: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    context: tuple[int, ...] = Field(default=(), max_length=16)
    blocks: Optional[int] = Field(default=None, gt=0, le=1024)
    lm_head: bool = True
    quantize_lm_head: bool = False
    methods: tuple[Literal[STEP_METHODS], ...] = Field(default=STEP_METHODS, min_length=1)
    linear_sum: bool = True
    attention: Literal[ATTENTION] = "auto"
    kv_cache: Literal[KV_CACHE] = "activation"

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
        data = super().to_dict()
        data["context"], data["methods"] = list(self.context), list(self.methods)
        for key, default in (("attention", "auto"), ("kv_cache", "activation")):  # a scenario's record as before
            if data[key] == default:
                data.pop(key)
        return data


def check(spec: ModelSpec, source: str) -> StepModelConfig:
    """:func:`resolve`, then contexts given, every context within the model's ``max_position_embeddings``
    and ``blocks`` within the model's block count. A biased model (Qwen2's q/k/v, ``attention_bias``,
    ``mlp_bias``) runs with its biases: the checkpoint's, or zeros for seeded weights.

    Raises:
        ConfigError: ``model.context`` / ``model.blocks`` / ``model.quantize_lm_head`` (without an LM head) /
            what :func:`resolve` raises.
    """
    config = resolve(spec, source)
    if not spec.context:
        raise ConfigError("model.context", "missing: the positions already in the KV cache when the step runs, "
                                           "e.g. context = [128, 4096], got nothing")
    for c in spec.context:
        if config.sliding_window is not None and c + 1 > config.sliding_window:
            raise ConfigError("model.context", f"the step at context {c} attends {c + 1} positions, beyond "
                                               f"{config.title}'s sliding_window = {config.sliding_window} ("
                                               f"{config.model_type}): qbench's step attends every cached position, "
                                               f"so it would time another model, got {c}")
        if c + 1 > config.max_positions:
            raise ConfigError("model.context", f"the step at context {c} writes position {c}, beyond {config.title}'s "
                                               f"max_position_embeddings = {config.max_positions}, got {c}")
    if spec.blocks is not None and spec.blocks > config.blocks:
        raise ConfigError("model.blocks", f"{config.title} has {config.blocks} blocks, got {spec.blocks}")
    if spec.quantize_lm_head and not spec.lm_head:
        raise ConfigError("model.quantize_lm_head", "the step has no LM head to quantize (model.lm_head = false "
                                                    "ends it at the final norm), got true")
    return config


_FP32, _BF16 = 4, 2
#: Why a model-step scenario takes none of the layer job's keys.
_SEEDED = "its weights are seeded per block and its inputs are token ids"


class StepTables(MTables):
    """A model-step scenario's own keys: ``m`` and ``[model]``."""

    REFUSED = {"layer": "a model-step scenario builds every layer of the model", "weight": _SEEDED,
               "inputs": _SEEDED, "tp": "a model-step scenario runs the whole model on one device",
               "timing.methods": "a model-step scenario lists its step methods in model.methods"}
    MISSING = {"m": "a [model] table without [quality] is a model-step scenario, which lists the M values of its "
                    "decode step (sequences decoded at once), e.g. m = [1, 16], and its context; for a quality "
                    "scenario (perplexity and KL divergence over a text) add a [quality] table (text = a UTF-8 file)"}
    model: ModelSpec

    def tables_dict(self) -> dict:
        return {"m": list(self.m), "model": self.model.to_dict()}


def step_model(scenario: Any) -> StepModelConfig:
    """The model a model-step scenario's ``[model]`` table names, checked (:func:`check`). Torch-free.

    Raises:
        ScenarioError: the scenario is not a model-step scenario, or the key ``model.<key>`` that
            :func:`check` refuses and why.
    """
    if scenario.job != "step":
        raise ScenarioError(scenario.source, "model", f"not a model-step scenario (a {scenario.job} scenario)")
    try:
        return check(scenario.model, scenario.source)
    except ConfigError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def check_scenario(scenario: Any) -> None:
    """A model-step scenario's cross-key rules: its model (:func:`step_model`) and every recipe
    against it (:func:`qbench.model.recipe.check_entries`), the LM head as ``[model]`` says.

    Raises:
        ScenarioError: the key at fault and why."""
    config = step_model(scenario)
    spec = scenario.model
    head = "none" if not spec.lm_head else ("scheme" if spec.quantize_lm_head else "float")
    recipes.check_entries(scenario, config, head, "model.quantize_lm_head" + ("" if spec.lm_head else " (and model.lm_head)"))


def describe(scenario: Any) -> str:
    """The ``qbench check`` summary: ``M = [1, 16]; model Llama-3-8B, context [128, 4096]``."""
    config = step_model(scenario)
    return f"M = {list(scenario.m)}; model {config.title}, context {list(scenario.model.context)}{_notes(scenario)}"


def _notes(scenario: Any) -> str:
    """What ``qbench check`` adds of how the checkpoint is read (:attr:`qbench.model.checkpoint.Checkpoint.notes`):
    ``"; note: ..."`` per note, ``""`` without a checkpoint."""
    if scenario.model.checkpoint is None:
        return ""
    from qbench.model.checkpoint import open_named

    return "".join(f"; note: {n}" for n in open_named(scenario.model.checkpoint, scenario.source).notes
                   if "bos_token_id" not in n)  # the step decodes no text: its BOS does not matter


def fits(scenario: Any, device: Any, free: int) -> None:
    """Refuse a model-step scenario that cannot run in ``free`` bytes of ``device``: not even one
    block (:func:`_check_step_fits`), or, on a CPU, where every block is built, the whole model
    (:func:`_check_cpu_step_fits`).

    Raises:
        ScenarioError: ``model``, naming the estimate and the free memory."""
    _check_step_fits(scenario, device, free)
    if device.type == "cpu":  # on a CPU every block is built: the whole model must fit
        _check_cpu_step_fits(scenario, device, free)


def _check_step_fits(scenario: Any, device: Any, free: int) -> None:
    """Refuse a model-step scenario when not even one block fits: one block's seven linear layers
    in 16 bits, its KV cache at the largest M and context (16 bits), the FP32 embedding and LM head
    while they are built, one block's FP32 weights (the reference step) and the process overhead.
    The worker builds as many blocks as fit (:mod:`qbench.step.measure`); this only refuses what
    cannot run at all.

    Raises:
        ScenarioError: ``model`` naming the estimate, the free memory and the model.
    """
    from qbench.memory import PROCESS_OVERHEAD, fmt_bytes  # torch: a run's check, not validation's

    config = step_model(scenario)
    m, ctx = max(scenario.m), max(scenario.model.context)
    need = (config.block_linear_params() * (_BF16 + _FP32) + m * (ctx + 1) * config.kv_elements_per_position() * _BF16
            + 2 * config.vocab * config.hidden * _FP32 + PROCESS_OVERHEAD)
    if need > free:
        raise ScenarioError(scenario.source, "model", f"not even one block of {config.title} fits: one block, its KV cache "
                            f"at M={m} and context {ctx}, the embedding and LM head need about {fmt_bytes(need)} of "
                            f"{device} memory, only {fmt_bytes(free)} is free, got name={scenario.model.name!r}, "
                            f"context={list(scenario.model.context)}")


def estimate_cpu_step_bytes(scenario: Any) -> dict:
    """Peak memory (bytes) of one worker of a model-step scenario on the CPU, by part: there every
    block the step asks for (``[model] blocks``, default all) is built, where CUDA builds as many as
    fit (:mod:`qbench.step.measure`). With B blocks, P linear weights per block, s the widest
    activation element size of the scenario's schemes (a stored weight is at most its 16-bit or
    FP32 source), M and C the largest M and context, E = 2 × KV heads × head dim:

    * ``weights``: B P s, plus one block's FP32 source while it is built (4 P);
    * ``kv_cache``: the M sequences' caches, B M (C + 1) E s, and the prompt's FP32 cache,
      B (C + 1) E 4;
    * ``embedding``: the embedding and the LM head, 2 × vocab × hidden × s, plus one FP32 source;
    * ``reference``: the FP32 step's one block and its FP32 cache, 4 P + 4 M (C + 1) E;
    * ``overhead``: :data:`PROCESS_OVERHEAD`.

    Returns:
        the parts and ``"total"`` (ints, bytes), ``"blocks"``, ``"m"`` and ``"context"``.
    """
    from qbench.memory import PROCESS_OVERHEAD, itemsize  # torch: a run's check, not validation's

    config = step_model(scenario)
    blocks = min(scenario.model.blocks or config.blocks, config.blocks)
    m, ctx = max(scenario.m), max(scenario.model.context)
    size = max(itemsize(e.scheme.activation_dtype) for e in scenario.schemes)
    params, kv = config.block_linear_params(), config.kv_elements_per_position()
    parts = {"weights": blocks * params * size + _FP32 * params,
             "kv_cache": blocks * m * (ctx + 1) * kv * size + blocks * (ctx + 1) * kv * _FP32,
             "embedding": config.vocab * config.hidden * (2 * size + _FP32),
             "reference": _FP32 * params + _FP32 * m * (ctx + 1) * kv,
             "overhead": PROCESS_OVERHEAD}
    return {**parts, "total": sum(parts.values()), "blocks": blocks, "m": m, "context": ctx}


def _check_cpu_step_fits(scenario: Any, device: Any, free: int) -> None:
    """Refuse a model-step scenario whose whole model (:func:`estimate_cpu_step_bytes`) does not
    fit in the CPU's free memory: a Llama-3-8B step on a 24 GiB machine, which would otherwise
    build blocks for minutes before the system runs out.

    Raises:
        ScenarioError: ``model`` naming the estimate by part, the free memory and what to change.
    """
    from qbench.memory import fmt_bytes

    est = estimate_cpu_step_bytes(scenario)
    if est["total"] <= free:
        return
    parts = ", ".join(f"{name.replace('_', ' ')} {fmt_bytes(est[name])}" for name in
                      ("weights", "kv_cache", "embedding", "reference", "overhead"))
    raise ScenarioError(scenario.source, "model", f"{step_model(scenario).title} on the CPU builds all {est['blocks']} "
                        f"blocks: about {fmt_bytes(est['total'])} at M={est['m']} and context {est['context']} "
                        f"({parts}), only {fmt_bytes(free)} is free; use [model] blocks, smaller m or context, "
                        f"or a GPU, got name={scenario.model.name!r}, context={list(scenario.model.context)}")
