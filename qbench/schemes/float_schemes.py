"""Plain torch floating-point schemes: fp32 (strict), tf32, fp16, bf16.

Each is an ``nn.Linear`` in the dtype; ``torch.nn.functional.linear`` dispatches to cuBLAS /
cuBLASLt on CUDA and to oneDNN / BLAS on CPU. fp32 and tf32 check the FP32 matmul precision at
the moment of every call (:mod:`qbench.schemes.precision`), so a flag flipped elsewhere in the process
fails the row instead of silently changing what was measured.

Emulations (:mod:`qbench.schemes.emulate`): fp32, fp16 and bf16 round weight, bias and activations to
the dtype and multiply in float32 (their kernels accumulate in FP32); tf32 rounds both operands to
TF32 (:func:`_emulate_tf32`).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from qbench.schemes import precision
from qbench.schemes.base import SchemeOptions, plain_linear
from qbench.schemes.emulate import EmulatedLinear, round_to_tf32


class PrecisionCheckedLinear(torch.nn.Module):
    """An FP32 linear layer that refuses to run unless cuBLAS FP32 matmuls use ``expect``.

    Args:
        layer: an FP32 ``nn.Linear``.
        expect: ``"ieee"`` (strict FP32) or ``"tf32"``.

    Raises (at call time):
        RuntimeError: if :func:`qbench.schemes.precision.cuda_matmul_fp32_precision` differs from ``expect``
            on a CUDA input, or oneDNN's FP32 matmul precision is not ``ieee`` on a CPU input.
    """

    def __init__(self, layer: torch.nn.Linear, expect: str):
        super().__init__()
        self.weight = layer.weight
        self.bias = layer.bias
        self.expect = expect

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            now = precision.cuda_matmul_fp32_precision()
            if now != self.expect:
                raise RuntimeError(f"FP32 matmul precision is {now!r} at call time, this layer needs {self.expect!r}")
        else:
            now = precision.cpu_matmul_fp32_precision()
            if now != "ieee":
                raise RuntimeError(f"oneDNN FP32 matmul precision is {now!r} at call time: CPU FP32 would not be strict")
        return F.linear(x, self.weight, self.bias)


def _build_fp32(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
    precision.set_cuda_matmul_fp32_precision("ieee")
    return PrecisionCheckedLinear(plain_linear(weight, bias, torch.float32), "ieee")


def _build_tf32(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
    precision.set_cuda_matmul_fp32_precision("tf32")
    return PrecisionCheckedLinear(plain_linear(weight, bias, torch.float32), "tf32")


def _tf32_check(device: torch.device, options: SchemeOptions) -> Optional[str]:
    if precision.os.environ.get(precision.ENV_OVERRIDE) == "0":
        return "NVIDIA_TF32_OVERRIDE=0 is set: cuBLAS would run this row as strict FP32"
    return None


def _emulate_float(dtype: torch.dtype):
    """``emulate`` of fp32 / fp16 / bf16: weight, bias and activations in ``dtype``, float32 matmul,
    output ``dtype`` (cuBLAS and oneDNN accumulate 16-bit GEMMs in FP32)."""

    def emulate(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
        b = None if bias is None else bias.to(dtype)
        return EmulatedLinear(weight.to(dtype), b, dtype, dtype, rule=f"{dtype} operands, fp32 accumulate")

    return emulate


def _emulate_tf32(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
    """``emulate`` of tf32: weight and activations rounded to TF32 (10 explicit mantissa bits, round to
    nearest even, :func:`qbench.schemes.emulate.round_to_tf32`: on the H200, torch 2.11 + cu130, a
    TF32 cuBLAS GEMM matched RNE to 2e-7 of the output, ties-away to 4e-6, truncation to 9e-4),
    products exact and accumulated in FP32 as on the tensor cores, bias added in FP32; float32 in
    and out. (The same H200 ran ``F.linear`` *with a bias* at M = 16, cublasLt's bias epilogue, in
    strict FP32 with TF32 on: error 1.1e-7 against 2.9e-4 without the bias. The emulation follows
    the scheme, TF32, not that.)"""
    return EmulatedLinear(round_to_tf32(weight), bias, torch.float32, torch.float32, act_quant=round_to_tf32,
                          rule="operands rounded to TF32 (RNE), fp32 accumulate", estimate=False)


# --- named by the declarations in qbench.schemes.catalog ---
emulate_fp32 = _emulate_float(torch.float32)
emulate_fp16 = _emulate_float(torch.float16)
emulate_bf16 = _emulate_float(torch.bfloat16)


def build_fp16(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
    return plain_linear(weight, bias, torch.float16)


def build_bf16(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
    return plain_linear(weight, bias, torch.bfloat16)
