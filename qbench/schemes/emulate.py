"""Emulated layers: what a scheme's kernel computes, as a plain float32 matmul.

A scheme with no kernel on the device (most CUDA-only schemes on a CPU) still gets quality numbers
through :attr:`qbench.schemes.base.Scheme.emulate`: the weight is quantized by the library's own
rule and dequantized (Ŵ, kept in float32); the activations are converted to the dtype the kernel is
fed and, for dynamic-activation schemes, quantized and dequantized the way the kernel does (x̂);
then ``y = x̂ Ŵᵀ + b`` runs in strict IEEE float32 (TF32 and oneDNN's reduced precisions off for
the call) and is cast once to the layer's output dtype. Plain torch: CPU and CUDA alike.

Not emulated, being far below the quantization error the emulation is for: the kernel's
accumulation order and precision (split-K, FP8 fast accumulation) and the intermediate roundings of
its epilogue (a bf16 product rounded before a scale or the bias is applied). Each scheme's rules and
their sources are in its ``_emulate_*`` function (``float_schemes``, ``torchao_schemes``,
``bnb_schemes``, ``gemlite_schemes``).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from qbench.schemes.precision import strict_fp32

#: Largest finite float8_e4m3fn value.
E4M3_MAX = 448.0


class EmulatedLinear(torch.nn.Module):
    """``y = act_quant(x) @ weightᵀ + bias`` in float32, cast to ``output_dtype``.

    Args:
        weight: the dequantized weight Ŵ, ``[N, K]`` (kept as float32).
        bias: ``[N]`` as the kernel holds it (e.g. rounded to bf16), kept as float32; or None.
        input_dtype: the dtype x is converted to first (the dtype the kernel is fed).
        output_dtype: the dtype of the result (the real layer's output dtype).
        act_quant: ``act_quant(x [M, K] in input_dtype) -> float32 [M, K]``: the kernel's dynamic
            activation quantization, quantized and dequantized; None: ``x.float()``.
        rule: one line saying what is emulated (shown in ``repr``).
        estimate: whether the result is an estimate of the kernel's (default: when ``act_quant`` is
            given, since a kernel's dynamic activation quantization and accumulation differ from a
            float32 fake-quantization; False for an exact operand rounding such as TF32's).

    ``forward`` takes ``[..., K]`` and returns ``[..., N]`` in ``output_dtype``;
    :meth:`forward_float` returns the same before the final cast (float32).
    """

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], input_dtype: torch.dtype,
                 output_dtype: torch.dtype, act_quant: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 rule: str = "", estimate: Optional[bool] = None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().float().contiguous(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().float(), requires_grad=False)
        self.input_dtype, self.output_dtype = input_dtype, output_dtype
        self.act_quant = act_quant
        self.rule = rule
        self.estimate = act_quant is not None if estimate is None else estimate

    def forward_float(self, x: torch.Tensor) -> torch.Tensor:
        """The float32 result ``[..., N]``, before the cast to ``output_dtype``."""
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1]).to(self.input_dtype)
        x = self.act_quant(x) if self.act_quant is not None else x.float()
        with strict_fp32():
            y = F.linear(x, self.weight, self.bias)
        return y.reshape(*lead, y.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_float(x).to(self.output_dtype)

    def extra_repr(self) -> str:
        n, k = self.weight.shape
        return (f"in_features={k}, out_features={n}, input_dtype={self.input_dtype}, "
                f"output_dtype={self.output_dtype}, rule={self.rule!r}")


def round_to_tf32(x: torch.Tensor, mode: str = "rne") -> torch.Tensor:
    """``x`` (as float32) rounded to TF32's 10 explicit mantissa bits, returned as float32.

    ``mode``: ``"rne"`` round to nearest, ties to even (the default); ``"rna"`` ties away from zero
    (CUTLASS's ``tfloat32_t`` conversion, ``round_half_ulp_truncate``); ``"rz"`` truncation. Works
    on the bits: add the rounding increment to the 13 dropped bits, then clear them (a carry moves
    into the exponent, up to infinity past the largest float). Inf and NaN pass unchanged."""
    x = x.float().contiguous()
    bits = x.view(torch.int32)
    if mode == "rne":
        bits = bits + (0xFFF + ((bits >> 13) & 1))
    elif mode == "rna":
        bits = bits + 0x1000
    elif mode != "rz":
        raise ValueError(f"mode must be 'rne', 'rna' or 'rz', got {mode!r}")
    rounded = (bits & -8192).view(torch.float32)  # -8192 == 0xFFFFE000: keep sign, exponent, 10 bits
    return torch.where(torch.isfinite(x), rounded, x)


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """``x`` cast to float8_e4m3fn after clamping to ±448 (round to nearest even, saturating: the
    kernels' ``cvt.rn.satfinite``; an eager torch cast alone would turn overflow into NaN)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def mslk_fp8_row(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """mslk's ``quantize_fp8_row`` (mslk 1.1.0, ``mslk/quantize/triton/fp8_quantize.py``, the Triton
    kernel every CUDA caller gets) on ``[M, K]``, in float32: ``scale = max(amax_row, 1/512) / 448``
    (``eps_opt`` default 1/512), ``q = e4m3(clamp(x / scale, ±448))``, both divisions IEEE
    (``tl.div_rn``). Divided by a tensor here: torch divides by a Python scalar as a multiplication
    by its rounded reciprocal, a scale one ulp off that, on the H200, flipped the e4m3 rounding of
    weights sitting on a tie (bf16 weights over a bf16 absmax often do).

    Returns ``q`` float8_e4m3fn ``[M, K]`` and ``scale`` float32 ``[M, 1]`` (x ≈ q * scale)."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=1.0 / 512)
    scale = amax / torch.full_like(amax, E4M3_MAX)
    return to_e4m3(xf / scale), scale


def act_mslk_fp8_row(x: torch.Tensor) -> torch.Tensor:
    """Activation fake-quant of the mslk FP8 kernels: :func:`mslk_fp8_row`, dequantized (float32)."""
    q, scale = mslk_fp8_row(x)
    return q.float() * scale


def cuda_scalar_div(t: torch.Tensor, c: float) -> torch.Tensor:
    """``t / c`` for a Python scalar ``c`` as torch computes it on CUDA: ``t`` times the float32
    reciprocal ``fl(1/c)`` (ATen's ``div_true_kernel_cuda`` for a CPU-scalar divisor), which can be
    one ulp off the IEEE quotient that torch gives on the CPU. Library code that quantizes on the GPU
    with such a division is emulated with this, so the emulation is the same on either device."""
    return t * torch.tensor(1.0 / c, dtype=torch.float32, device=t.device)


def gemlite_rowwise_8bit(w: torch.Tensor, fp8: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """gemlite's 8-bit channel-wise rule (gemlite 0.6.0.post2 ``helper.A16W8.from_weights`` and
    ``A8W8_dynamic.from_weights``; the Triton ``scale_activations_per_token`` kernel applies the same
    to activations, per token), on ``[R, K]`` in float32: ``scale = max(amax_row / qmax, 1e-6)``
    (qmax 127 for int8, 448 for e4m3), ``q = round(clamp(w / scale, -128, 127))`` as int8, or
    ``e4m3(clamp(w / scale, ±448))``; ``amax / qmax`` as on CUDA (:func:`cuda_scalar_div`).

    Returns ``q`` (int8 or float8_e4m3fn) and ``scale`` float32 ``[R, 1]`` (w ≈ q * scale)."""
    wf = w.float()
    qmax = E4M3_MAX if fp8 else 127.0
    scale = cuda_scalar_div(wf.abs().amax(dim=-1, keepdim=True), qmax).clamp(min=1e-6)
    if fp8:
        return to_e4m3(wf / scale), scale
    return (wf / scale).clamp(-128, 127).round().to(torch.int8), scale


def act_gemlite_fp8(x: torch.Tensor) -> torch.Tensor:
    """Activation fake-quant of gemlite's FP8 dynamic path (per token, :func:`gemlite_rowwise_8bit`),
    dequantized (float32). gemlite's Triton kernel divides with Triton's ``/``, whose last-bit rounding
    may differ: a value within an ulp of an e4m3 rounding boundary may land on the other side."""
    q, scale = gemlite_rowwise_8bit(x, fp8=True)
    return q.float() * scale


def group_view(t: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[N, K]`` seen as ``[N, K / group_size, group_size]``."""
    n, k = t.shape
    if k % group_size:
        raise ValueError(f"in_features {k} is not a multiple of the group size {group_size}")
    return t.reshape(n, k // group_size, group_size)
