"""The layer job's peak device memory, estimated before anything is allocated.

A worker measures one scheme at a time (:mod:`qbench.runner`), so the peak is that of the worst
scheme, plus what every scheme shares: the FP32 weight, the activations and the float64
reference at the largest M, the output and the error-metric temporaries, and on CUDA the L2
flush buffer of the timing methods that flush the L2 (``cold``, ``kernel``). :func:`fits`
refuses, naming ``layer`` or ``m``, a scenario that cannot fit (:func:`qbench.memory.check_fits`
asks it through the job's record).

The estimate is an upper bound built from the tensors :mod:`qbench.measure` and
:mod:`qbench.inputs` allocate (``numel * element size``); it is meant to catch shapes that cannot
fit at all (a 131072 x 131072 layer, M = 1048576), not to predict the allocator's peak to the
byte.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from qbench.memory import PROCESS_OVERHEAD, fmt_bytes, itemsize, l2_bytes_of
from qbench.tables import ScenarioError
from qbench.timing import registry

_FP32, _BF16, _FP64 = 4, 2, 8


def estimate_bytes(scenario: Any, device: torch.device | str, *, l2_bytes: Optional[int] = None) -> dict:
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
    act_sizes = [itemsize(e.scheme.activation_dtype) for e in scenario.schemes]
    stored = max(act_sizes) * n * k
    weights = (_FP32 + _BF16 + _FP32) * n * k + stored + (_FP32 * n if scenario.layer.bias else 0)
    activations = _FP32 * m * k + sum(scenario.m) * k * max(act_sizes)
    reference = _FP64 * (m * k + n * k + m * n)
    outputs = _FP32 * m * n + 3 * _FP64 * m * n
    flush = 0
    if device.type == "cuda" and any(m.needs.flusher for m in registry.plan(scenario.timing.methods, "cuda")):
        flush = scenario.timing.flush_multiple * (l2_bytes if l2_bytes is not None else l2_bytes_of(device))
    parts = {"weights": weights, "activations": activations, "reference": reference, "outputs": outputs,
             "flush": flush, "overhead": PROCESS_OVERHEAD}
    return {**parts, "total": sum(parts.values()), "m": m}


def fits(scenario: Any, device: torch.device, free: int, *, l2_bytes: Optional[int] = None) -> None:
    """Refuse a layer scenario whose estimated peak (:func:`estimate_bytes`) exceeds ``free`` bytes.

    Args:
        l2_bytes: passed to :func:`estimate_bytes`.

    Raises:
        ScenarioError: ``layer`` when the layer would not fit even at M = 1, else ``m``;
            the message gives the estimate by part and the free memory.
    """
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
