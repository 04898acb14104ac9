"""FP32 matmul precision: strict IEEE FP32 versus TF32, set, checked and recorded.

``torch.float32`` on a CUDA backend with TF32 enabled multiplies with TF32 (10-bit mantissa)
semantics: the API dtype and the execution precision differ (seed page, "what a dtype changes").
TF32 can be switched on elsewhere in the process (``torch.set_float32_matmul_precision("high")``,
``torch.backends.cuda.matmul.allow_tf32 = True``) or, for cuBLAS, by the environment variable
``NVIDIA_TF32_OVERRIDE`` (``0`` disables TF32 in NVIDIA libraries whatever the program asks;
NVIDIA "Accelerating AI Training with NVIDIA TF32 Tensor Cores"). qbench therefore

* sets the precision with PyTorch's per-backend API (``torch.backends.cuda.matmul.fp32_precision``,
  PyTorch >= 2.9, "TensorFloat-32 (TF32) on Ampere (and later) devices" in the CUDA notes),
* checks it again at the moment of each call of the ``fp32`` / ``tf32`` layers
  (:func:`cuda_matmul_fp32_precision`), and
* records every flag in the result's ``env`` (:func:`precision_state`).
"""

from __future__ import annotations

import contextlib
import os

import torch

ENV_OVERRIDE = "NVIDIA_TF32_OVERRIDE"


def _new_api(path: str) -> str | None:
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, str) else None


def cuda_matmul_fp32_precision() -> str:
    """The precision cuBLAS matmuls of float32 tensors run with now: ``"ieee"`` or ``"tf32"``.

    Resolves ``torch.backends.cuda.matmul.fp32_precision``, falling back to the global
    ``torch.backends.fp32_precision`` when it is ``"none"``, and to ``"ieee"`` (PyTorch's default)
    when both are. ``NVIDIA_TF32_OVERRIDE=0`` turns a ``"tf32"`` request into ``"ieee"``.
    """
    value = _new_api("cuda.matmul.fp32_precision") or "none"
    if value == "none":
        value = _new_api("fp32_precision") or "none"
    if value == "none":
        value = "ieee"
    if value == "tf32" and os.environ.get(ENV_OVERRIDE) == "0":
        value = "ieee"
    return value


def cpu_matmul_fp32_precision() -> str:
    """The precision oneDNN (CPU) matmuls of float32 tensors run with now: ``"ieee"``, ``"tf32"``
    or ``"bf16"``.

    ``torch.backends.mkldnn.matmul.fp32_precision`` already resolves to its parents
    (``mkldnn.fp32_precision``, then the global ``fp32_precision``) when it is ``"none"``;
    ``"none"`` all the way up is PyTorch's default, strict IEEE FP32.
    ``torch.set_float32_matmul_precision("medium")`` sets it to ``"bf16"`` and ``"high"`` to
    ``"tf32"`` (PyTorch >= 2.9).
    """
    value = _new_api("mkldnn.matmul.fp32_precision") or "none"
    if value == "none":
        value = _new_api("mkldnn.fp32_precision") or "none"
    if value == "none":
        value = _new_api("fp32_precision") or "none"
    return "ieee" if value == "none" else value


def set_cuda_matmul_fp32_precision(value: str) -> None:
    """Set the FP32 precision of cuBLAS matmuls and cuDNN convolutions: ``"ieee"`` or ``"tf32"``.

    Also sets oneDNN's (CPU) matmul precision to ``"ieee"`` for strict FP32, so that
    ``torch.set_float32_matmul_precision("medium")`` cannot route CPU FP32 matmuls through bf16.

    Raises:
        ValueError: for any other value.
    """
    if value not in ("ieee", "tf32"):
        raise ValueError(f"precision must be 'ieee' or 'tf32', got {value!r}")
    torch.backends.cuda.matmul.fp32_precision = value
    torch.backends.cudnn.conv.fp32_precision = value
    if value == "ieee":
        torch.backends.mkldnn.matmul.fp32_precision = "ieee"


def precision_state() -> dict:
    """Every flag that decides FP32 matmul precision, for the result's ``env``.

    Legacy getters (``allow_tf32``, ``get_float32_matmul_precision``) raise in PyTorch >= 2.9
    once the new API was used; such a value is recorded as ``"unreadable (mixed APIs)"``.
    """
    state = {
        "cuda_matmul_fp32_precision": _new_api("cuda.matmul.fp32_precision"),
        "cudnn_conv_fp32_precision": _new_api("cudnn.conv.fp32_precision"),
        "mkldnn_matmul_fp32_precision": _new_api("mkldnn.matmul.fp32_precision"),
        "global_fp32_precision": _new_api("fp32_precision"),
        "effective_cuda_matmul": cuda_matmul_fp32_precision(),
        "effective_cpu_matmul": cpu_matmul_fp32_precision(),
        ENV_OVERRIDE: os.environ.get(ENV_OVERRIDE),
    }
    matmul = torch.backends.cuda.matmul
    for key in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        value = getattr(matmul, key, None)  # cuBLAS may reduce fp16 / bf16 GEMM partial sums in 16 bits
        state[f"cuda_matmul_{key}"] = value if isinstance(value, (bool, type(None))) else str(value)
    for key, getter in (
        ("float32_matmul_precision", torch.get_float32_matmul_precision),
        ("cuda_matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
    ):
        try:
            state[key] = getter()
        except RuntimeError:
            state[key] = "unreadable (mixed APIs)"
    return state


@contextlib.contextmanager
def strict_fp32():
    """Float32 matmuls in strict IEEE FP32 inside the block (cuBLAS TF32 and oneDNN bf16/TF32 off),
    the flags restored after; a no-op when they already say ``ieee``."""
    cuda, mkl = torch.backends.cuda.matmul, torch.backends.mkldnn.matmul
    saved = (cuda.fp32_precision, mkl.fp32_precision)
    if saved == ("ieee", "ieee"):
        yield
        return
    cuda.fp32_precision, mkl.fp32_precision = "ieee", "ieee"
    try:
        yield
    finally:
        cuda.fp32_precision, mkl.fp32_precision = saved
