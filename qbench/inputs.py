"""The FP32 weight, the FP32 activations and the float64 reference every scheme is judged against.

Every scheme of a scenario is built from the same FP32 weight ``W [N, K]`` and fed the same FP32
activations ``X [M, K]`` (converted to the scheme's activation dtype), drawn from a CPU
``torch.Generator`` so CPU and CUDA runs see identical numbers for a given seed.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from qbench.layer.weight import weight_path
from qbench.scenario import Scenario

#: Largest finite float8 e4m3fn value (OCP 8-bit floating point spec, "E4M3": 448).
FP8_E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


def make_weight(scenario: Scenario, device: torch.device) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The FP32 weight ``[N, K]`` and bias ``[N]`` (or None) on ``device``.

    ``weight.source = "random"``: ``N(0, 1/K)`` entries (the scale of ``nn.Linear``'s default init,
    so outputs are O(1) and fp16 cannot overflow), bias ``N(0, 0.01)``. ``"student-t"``: Student-t
    entries of ``df`` degrees of freedom (:func:`student_t`) scaled to variance 1/K (heavy tails:
    the largest of N x K entries is many standard deviations out). ``"outlier-channels"``: the
    Gaussian with :func:`weight_outlier_channels` (input channels, columns of W) x ``outlier_scale``.
    ``"safetensors"`` / ``"hf-checkpoint"``: the named tensor of the file or of the checkpoint
    folder's shard (:func:`qbench.model.checkpoint.tensor_file`), which must have shape ``[N, K]``.

    Raises:
        ValueError: a safetensors tensor that is missing or has the wrong shape, one line.
    """
    k, n = scenario.layer.in_features, scenario.layer.out_features
    gen = torch.Generator().manual_seed(scenario.seed)
    spec = scenario.weight
    if spec.source in ("safetensors", "hf-checkpoint"):
        weight = load_safetensors_weight(scenario, n, k)
    elif spec.source == "student-t":
        weight = student_t((n, k), spec.df, gen) * math.sqrt((spec.df - 2) / spec.df) / math.sqrt(k)
    else:
        weight = torch.randn(n, k, generator=gen, dtype=torch.float32) / math.sqrt(k)
        if spec.source == "outlier-channels":
            weight[:, weight_outlier_channels(scenario)] *= spec.outlier_scale
    bias = torch.randn(n, generator=gen, dtype=torch.float32) * 0.1 if scenario.layer.bias else None
    return weight.to(device), (None if bias is None else bias.to(device))


def load_safetensors_weight(scenario: Scenario, n: int, k: int) -> torch.Tensor:
    """Read ``scenario.weight.tensor`` from ``scenario.weight.path`` as FP32 ``[N, K]``.

    Raises:
        ValueError: missing file, missing tensor, or a shape other than ``[N, K]``.
    """
    from safetensors import safe_open

    from qbench.model.checkpoint import ConfigError, tensor_file

    path = weight_path(scenario)  # the loader already checked file, name, shape and dtype (header only)
    if scenario.weight.source == "hf-checkpoint":  # the model library's reader finds the tensor's shard
        try:
            path = tensor_file(path, scenario.weight.tensor)
        except ConfigError as exc:
            raise ValueError(f"{scenario.source}: {exc}") from None
    if not path.exists():
        raise ValueError(f"{scenario.source}: weight.path: no such file, got {str(path)!r}")
    with safe_open(str(path), framework="pt") as f:
        if scenario.weight.tensor not in f.keys():
            raise ValueError(f"{scenario.source}: weight.tensor: {scenario.weight.tensor!r} is not in {path}; "
                             f"it has {', '.join(sorted(f.keys())[:8])}")
        weight = f.get_tensor(scenario.weight.tensor)
    if tuple(weight.shape) != (n, k):
        raise ValueError(f"{scenario.source}: weight.tensor: shape must be [out_features, in_features] = [{n}, {k}], "
                         f"got {list(weight.shape)}")
    return weight.to(torch.float32)


def student_t(shape: tuple[int, ...], df: float, gen: torch.Generator) -> torch.Tensor:
    """FP32 Student-t samples of ``df`` degrees of freedom (variance df / (df - 2) for df > 2), drawn
    from ``gen`` by Bailey's polar method (Bailey 1994, Math. Comp. 62: with U, V uniform on
    (-1, 1) and W = U^2 + V^2 < 1, ``U * sqrt(df (W^(-2/df) - 1) / W)`` is t-distributed), so a
    seed gives the same weight on every device."""
    count = math.prod(shape)
    parts, have = [], 0
    while have < count:
        uv = torch.rand(2, 2 * (count - have) + 64, generator=gen, dtype=torch.float64) * 2 - 1
        w = (uv * uv).sum(0)
        keep = (w < 1) & (w > 0)
        u, w = uv[0][keep], w[keep]
        parts.append(u * torch.sqrt(df * (w.pow(-2.0 / df) - 1) / w))
        have += parts[-1].numel()
    return torch.cat(parts)[:count].reshape(shape).to(torch.float32)


def weight_outlier_channels(scenario: Scenario) -> torch.Tensor:
    """Indices (int64, sorted) of the ``weight.outlier_channels`` input channels (columns of W)
    that ``source = "outlier-channels"`` scales, chosen by the seed; empty for other sources."""
    count, k = scenario.weight.outlier_channels, scenario.layer.in_features
    if scenario.weight.source != "outlier-channels" or not count:
        return torch.empty(0, dtype=torch.long)
    gen = torch.Generator().manual_seed(scenario.seed + 11)
    return torch.randperm(k, generator=gen)[:count].sort().values


def input_faults(weight: Optional[torch.Tensor], x32: Optional[torch.Tensor] = None,
                 x: Optional[torch.Tensor] = None) -> list[str]:
    """``input-fault: ...`` flags, one sentence each, for inputs that make every scheme's error
    meaningless: a weight with NaN or Inf entries (the float64 reference is then not finite, so
    every row, fp32 included, reads non-finite), an all-zero weight (every error is 0: nothing is
    measured), and activations ``x32`` that are finite in FP32 but not after the cast to the
    scheme's activation dtype ``x`` (fp16 overflows above 65504: the overflow is qbench's input,
    not the scheme's doing). ``[]`` when the inputs are sound; ``weight`` None: the activations only."""
    flags = []
    finite = torch.isfinite(weight) if weight is not None else None
    bad = 0 if finite is None else int(finite.numel() - finite.sum().item())
    if bad:
        nan = int(torch.isnan(weight).sum().item())
        flags.append(f"input-fault: the weight has {bad} non-finite entries ({nan} NaN, {bad - nan} Inf): the float64 "
                     "reference is not finite, so no scheme's error means anything")
    elif weight is not None and not bool(weight.any()):
        flags.append("input-fault: the weight is all zeros: every output is the bias, every error is 0 and says "
                     "nothing about the scheme")
    if x32 is not None and x is not None and x.dtype != x32.dtype:
        over = int((torch.isfinite(x32) & ~torch.isfinite(x)).sum().item())
        if over:
            limit = torch.finfo(x.dtype).max
            flags.append(f"input-fault: {over} activation values overflow {str(x.dtype).removeprefix('torch.')} "
                         f"(|x| > {limit:.6g}) when qbench casts the FP32 activations: non-finite outputs come "
                         "from the input, not the scheme")
    return flags


def make_activations(scenario: Scenario, m: int, device: torch.device) -> torch.Tensor:
    """FP32 activations ``[M, K]`` on ``device``: standard normal, with outlier columns if asked.

    ``inputs.outlier_fraction`` of the K columns (at least one when the fraction is > 0), chosen
    by the seed, are multiplied by ``inputs.outlier_magnitude``: the outlier features of
    LLM.int8 (Dettmers et al. 2022) that bitsandbytes' threshold routes to fp16.
    """
    k = scenario.layer.in_features
    gen = torch.Generator().manual_seed(scenario.seed * 1_000_003 + m)
    x = torch.randn(m, k, generator=gen, dtype=torch.float32)
    cols = outlier_columns(scenario)
    if cols.numel():
        x[:, cols] *= scenario.inputs.outlier_magnitude
    return x.to(device)


def outlier_columns(scenario: Scenario) -> torch.Tensor:
    """Indices (int64) of the activation columns made outliers; empty when there are none."""
    fraction, k = scenario.inputs.outlier_fraction, scenario.layer.in_features
    if fraction <= 0:
        return torch.empty(0, dtype=torch.long)
    count = max(1, round(fraction * k))
    gen = torch.Generator().manual_seed(scenario.seed + 7)
    return torch.randperm(k, generator=gen)[:count].sort().values


def reference(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``Y_ref = X @ W^T (+ bias)`` in float64 from the FP32 tensors, ``[M, N]``.

    float64 has no TF32 mode, so no precision flag can leak into the reference.
    """
    y = x.to(torch.float64) @ weight.to(torch.float64).T
    return y if bias is None else y + bias.to(torch.float64)


def count_over(x: torch.Tensor, limit: float) -> int:
    """Number of elements with ``|x| > limit`` (e.g. FP8 e4m3 saturation at 448)."""
    return int((x.abs() > limit).sum().item())


def count_outlier_columns(x: torch.Tensor, threshold: float) -> int:
    """Columns of ``x [M, K]`` holding any ``|value| > threshold`` (LLM.int8's outlier rule);
    0 when ``threshold`` is 0 (decomposition off)."""
    if threshold <= 0:
        return 0
    return int((x.abs() > threshold).any(dim=0).sum().item())
