"""Peak device memory of a scenario, estimated before anything is allocated.

A worker measures one scheme at a time (:mod:`qbench.runner`), so the peak is that of the worst
scheme, plus what every scheme shares: the FP32 weight, the activations and the float64
reference at the largest M, the output and the error-metric temporaries, and on CUDA the L2
flush buffer of the timing methods that flush the L2 (``cold``, ``kernel``). :func:`check_fits` compares the estimate with the free
memory of the device and refuses, as a :class:`~qbench.scenario.ScenarioError` naming ``layer``
or ``m``, a scenario that cannot fit, so the run stops with one line before a worker is started
or a result file is written.

The estimate is an upper bound built from the tensors :mod:`qbench.measure` and
:mod:`qbench.inputs` allocate (``numel * element size``); it is meant to catch shapes that cannot
fit at all (a 131072 x 131072 layer, M = 1048576), not to predict the allocator's peak to the
byte.
"""

from __future__ import annotations

from typing import Optional

import torch

from qbench.hardware import free_bytes  # noqa: F401 - re-exported: the memory checks' free memory
from qbench.scenario import Scenario, ScenarioError, step_model
from qbench.timing import registry

#: Worker process overhead counted on every device (bytes): on CUDA the worker's context and the
#: cuBLAS workspace, on the CPU the worker's own torch and library code.
PROCESS_OVERHEAD = 512 << 20
#: L2 size assumed when a CUDA device's properties cannot be read (bytes); larger than the L2 of
#: any current NVIDIA GPU (H100: 50 MiB, B200: 126 MiB), so the flush buffer is not underestimated.
FALLBACK_L2_BYTES = 128 << 20
_FP32, _BF16, _FP64 = 4, 2, 8


def estimate_bytes(scenario: Scenario, device: torch.device | str, *, l2_bytes: Optional[int] = None) -> dict:
    """Peak memory (bytes) of one worker of ``scenario`` on ``device``, by part.

    With K = ``in_features``, N = ``out_features``, M = the largest ``m``:

    * ``weights``: the FP32 weight (4 NK), the 16-bit copy a quantizer starts from (2 NK), one
      FP32-sized quantization temporary (4 NK), and the largest stored weight over the
      scenario's schemes, bounded by NK times the element size of the scheme's activation dtype
      (the dtype it is built from: FP32 for fp32 / tf32, 16-bit for every other scheme, whose
      quantized payload plus scales is smaller than its 16-bit source); plus the bias (4 N).
    * ``activations``: the FP32 activations at M (4 MK) and the converted activations the
      worker keeps for every M (sum of M times K times the widest activation element size).
    * ``reference``: the float64 reference ``X @ W^T``: X and W upcast (8 MK + 8 NK) and Y_ref
      (8 MN).
    * ``outputs``: the layer's output (at most 4 MN) and three float64 [M, N] temporaries of
      :func:`qbench.metrics.error_metrics` (24 MN).
    * ``flush``: on CUDA, when a method that flushes the L2 runs (``needs.flusher``: ``cold``,
      ``kernel``), ``timing.flush_multiple`` x the L2 size (``l2_bytes``; read from the device when
      None, :data:`FALLBACK_L2_BYTES` if that fails).
    * ``overhead``: :data:`PROCESS_OVERHEAD`.

    Returns:
        ``{"weights", "activations", "reference", "outputs", "flush", "overhead", "total"}``,
        ints in bytes, plus ``"m"``: the M the activation terms were taken at.
    """
    device = torch.device(device)
    k, n = scenario.layer.in_features, scenario.layer.out_features
    m = max(scenario.m)
    act_sizes = [_itemsize(e.scheme.activation_dtype) for e in scenario.schemes]
    stored = max(act_sizes) * n * k
    weights = (_FP32 + _BF16 + _FP32) * n * k + stored + (_FP32 * n if scenario.layer.bias else 0)
    activations = _FP32 * m * k + sum(scenario.m) * k * max(act_sizes)
    reference = _FP64 * (m * k + n * k + m * n)
    outputs = _FP32 * m * n + 3 * _FP64 * m * n
    flush = 0
    if device.type == "cuda" and any(m.needs.flusher for m in registry.plan(scenario.timing.methods, "cuda")):
        flush = scenario.timing.flush_multiple * (l2_bytes if l2_bytes is not None else _l2_bytes(device))
    parts = {"weights": weights, "activations": activations, "reference": reference, "outputs": outputs,
             "flush": flush, "overhead": PROCESS_OVERHEAD}
    return {**parts, "total": sum(parts.values()), "m": m}


def check_fits(scenario: Scenario, device: torch.device | str, *, free: Optional[int] = None,
               l2_bytes: Optional[int] = None) -> None:
    """Refuse a scenario whose estimated peak (:func:`estimate_bytes`) exceeds the free memory.

    Args:
        free: free bytes; default :func:`free_bytes` of ``device`` (no check when unreadable).
        l2_bytes: passed to :func:`estimate_bytes`.

    Raises:
        ScenarioError: ``layer`` when the layer would not fit even at M = 1, else ``m``;
            the message gives the estimate by part and the free memory.
    """
    device = torch.device(device)
    free = free_bytes(device) if free is None else free
    if free is None:
        return
    if scenario.quality is not None:  # a quality worker checks its model against the free memory before building
        return  # (qbench.quality.measure.estimate_bytes): a model that does not fit is a skipped row
    if scenario.model is not None:
        _check_step_fits(scenario, device, free)
        if device.type == "cpu":  # on a CPU every block is built: the whole model must fit
            _check_cpu_step_fits(scenario, device, free)
        return
    est = estimate_bytes(scenario, device, l2_bytes=l2_bytes)
    if est["total"] <= free:
        return
    k, n = scenario.layer.in_features, scenario.layer.out_features
    parts = ", ".join(f"{name} {fmt_bytes(est[name])}" for name in
                      ("weights", "activations", "reference", "outputs", "flush", "overhead") if est[name])
    need = f"needs about {fmt_bytes(est['total'])} of {device} memory at M={est['m']} ({parts}), " \
           f"only {fmt_bytes(free)} is free"
    at_one = scenario.model_copy(update={"m": (1,)})
    if estimate_bytes(at_one, device, l2_bytes=l2_bytes)["total"] > free:
        raise ScenarioError(scenario.source, "layer", f"{need}; it would not fit even at M=1: use a smaller layer, "
                                                      f"got in_features={k}, out_features={n}")
    raise ScenarioError(scenario.source, "m", f"{need}: use smaller M values, got {list(scenario.m)}")


def _check_step_fits(scenario: Scenario, device: torch.device, free: int) -> None:
    """Refuse a model-step scenario when not even one block fits: one block's seven linear layers
    in 16 bits, its KV cache at the largest M and context (16 bits), the FP32 embedding and LM head
    while they are built, one block's FP32 weights (the reference step) and the process overhead.
    The worker builds as many blocks as fit (:mod:`qbench.step.measure`); this only refuses what
    cannot run at all.

    Raises:
        ScenarioError: ``model`` naming the estimate, the free memory and the model.
    """
    config = step_model(scenario)
    m, ctx = max(scenario.m), max(scenario.model.context)
    need = (config.block_linear_params() * (_BF16 + _FP32) + m * (ctx + 1) * config.kv_elements_per_position() * _BF16
            + 2 * config.vocab * config.hidden * _FP32 + PROCESS_OVERHEAD)
    if need > free:
        raise ScenarioError(scenario.source, "model", f"not even one block of {config.title} fits: one block, its KV cache "
                            f"at M={m} and context {ctx}, the embedding and LM head need about {fmt_bytes(need)} of "
                            f"{device} memory, only {fmt_bytes(free)} is free, got name={scenario.model.name!r}, "
                            f"context={list(scenario.model.context)}")


def estimate_cpu_step_bytes(scenario: Scenario) -> dict:
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
    config = step_model(scenario)
    blocks = min(scenario.model.blocks or config.blocks, config.blocks)
    m, ctx = max(scenario.m), max(scenario.model.context)
    size = max(_itemsize(e.scheme.activation_dtype) for e in scenario.schemes)
    params, kv = config.block_linear_params(), config.kv_elements_per_position()
    parts = {"weights": blocks * params * size + _FP32 * params,
             "kv_cache": blocks * m * (ctx + 1) * kv * size + blocks * (ctx + 1) * kv * _FP32,
             "embedding": config.vocab * config.hidden * (2 * size + _FP32),
             "reference": _FP32 * params + _FP32 * m * (ctx + 1) * kv,
             "overhead": PROCESS_OVERHEAD}
    return {**parts, "total": sum(parts.values()), "blocks": blocks, "m": m, "context": ctx}


def _check_cpu_step_fits(scenario: Scenario, device: torch.device, free: int) -> None:
    """Refuse a model-step scenario whose whole model (:func:`estimate_cpu_step_bytes`) does not
    fit in the CPU's free memory: a Llama-3-8B step on a 24 GiB machine, which would otherwise
    build blocks for minutes before the system runs out.

    Raises:
        ScenarioError: ``model`` naming the estimate by part, the free memory and what to change.
    """
    est = estimate_cpu_step_bytes(scenario)
    if est["total"] <= free:
        return
    parts = ", ".join(f"{name.replace('_', ' ')} {fmt_bytes(est[name])}" for name in
                      ("weights", "kv_cache", "embedding", "reference", "overhead"))
    raise ScenarioError(scenario.source, "model", f"{step_model(scenario).title} on the CPU builds all {est['blocks']} "
                        f"blocks: about {fmt_bytes(est['total'])} at M={est['m']} and context {est['context']} "
                        f"({parts}), only {fmt_bytes(free)} is free; use [model] blocks, smaller m or context, "
                        f"or a GPU, got name={scenario.model.name!r}, context={list(scenario.model.context)}")


def fmt_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _l2_bytes(device: torch.device) -> int:
    try:
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    except (RuntimeError, AssertionError, AttributeError):
        return FALLBACK_L2_BYTES
