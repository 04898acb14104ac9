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
from qbench.schemes import register
from qbench.schemes.base import Scheme, SchemeOptions, linear_parts, plain_linear
from qbench.schemes.emulate import EmulatedLinear, round_to_tf32
from qbench.schemes.specs import spec


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
    nearest even, :func:`qbench.schemes.emulate.round_to_tf32`), products exact and accumulated in
    FP32 as on the tensor cores, bias added in FP32 (cuBLAS's epilogue); float32 in and out."""
    return EmulatedLinear(round_to_tf32(weight), bias, torch.float32, torch.float32, act_quant=round_to_tf32,
                          rule="operands rounded to TF32 (RNE), fp32 accumulate")


register(Scheme(
    **spec("fp32"), library="torch", family="float",
    summary="FP32 weight and activations, strict IEEE FP32 matmul (TF32 off, checked at each call)",
    weight_dtype="float32", activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32,
    build=_build_fp32, parts=linear_parts, emulate=_emulate_float(torch.float32),
    worker_env={precision.ENV_OVERRIDE: "0"},
))

register(Scheme(
    **spec("tf32"), library="torch", family="float",
    summary="FP32 storage, TF32 tensor-core matmul (10-bit mantissa products, FP32 accumulate)",
    weight_dtype="float32", activation_dtype=torch.float32, compute_dtype="tf32", nominal_bits=32,
    build=_build_tf32, parts=linear_parts, emulate=_emulate_tf32, cuda_only=True, min_compute_capability=(8, 0),
    extra_check=_tf32_check,
))

for _name, _dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
    register(Scheme(
        **spec(_name), library="torch", family="float",
        summary=f"{_name.upper()} weight and activations; on CUDA a {_name} cuBLAS GEMM/GEMV with FP32 accumulate",
        weight_dtype=str(_dtype).removeprefix("torch."), activation_dtype=_dtype, compute_dtype=_name,
        nominal_bits=16,
        build=lambda weight, bias, options, _dtype=_dtype: plain_linear(weight, bias, _dtype),
        parts=linear_parts, emulate=_emulate_float(_dtype),
    ))
