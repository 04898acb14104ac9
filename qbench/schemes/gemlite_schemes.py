"""gemlite schemes (gemlite 0.6): Triton GEMV / GEMM kernels for low-bit weights (Mobius Labs).

gemlite is a pure-Python package of Triton kernels; one module class, ``GemLiteLinearTriton``,
serves every format, and ``gemlite.helper`` turns an ``nn.Linear`` into one (``A16W8_INT8``,
``A16W8_FP8``, ``A8W8_fp8_dynamic``: ``.from_linear(layer)``; the grouped int4 helper,
``A16W4_HQQ_INT``, takes quantized values: ``.from_weights(W_q, scales, zeros)``). Its forward
picks the kernel by M (``gemlite.core.get_matmul_type``): a GEMV (``GEMV_REVSPLITK`` for 4-bit,
``GEMV_SPLITK`` for 8-bit) up to M = 4 (4-bit) or 2 (8-bit), ``GEMM_SPLITK`` below 64, ``GEMM``
from 64; each is autotuned by Triton on its first call at a new M bucket (qbench's untimed first
call; no tuned config ships for the H200, only for the H100 and others).

Each scheme builds a bf16 ``nn.Linear`` from the FP32 weight (as the torchao and bitsandbytes
schemes do: a bf16 checkpoint quantized) and hands it to gemlite's helper; activations and output
are bf16. The ledger counts the module's own tensors (:func:`gemlite_parts`): ``W_q`` (the packed
or plain weight) is payload; ``scales``, ``zeros``, ``meta_scale`` and the int32 ``metadata`` /
``orig_shape`` records are metadata; empty placeholders (an unused ``zeros``) are left out.

Importing gemlite needs a CUDA device (it reads the device's properties at import), so this
module imports it only inside ``build`` and the tuning-cache hooks.

Each scheme's ``emulate`` (:mod:`qbench.schemes.emulate`) redoes gemlite's quantization and its
kernels' dequantization in torch, without importing gemlite (see the ``_emulate_*`` functions). Not
emulated: below M = 64 the split-K GEMM adds its partial sums into the bf16 output with atomics
(more rounding, run-to-run noise); from M = 64 (the quality job's chunks) one GEMM writes once.

Autotuning costs seconds per scheme and run; the tuned configs are kept between runs on the same GPU
and versions (:data:`TUNING_CACHE`, :mod:`qbench.schemes.tuning_cache`), with gemlite's own
``cache_config`` / ``load_config``.
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

import torch

from qbench.schemes.base import SchemeOptions, TensorPart, bias_parts, plain_linear
from qbench.schemes.emulate import EmulatedLinear, act_gemlite_fp8, gemlite_rowwise_8bit, group_view
from qbench.schemes.options import GemliteInt4Options

#: ``GemLiteLinearTriton`` tensors other than the weight, in the order the kernel receives the
#: first three (``get_tensor_args``: W_q, scales, zeros, meta_scale); ``metadata`` and
#: ``orig_shape`` are the int32 records a checkpoint carries (12 + 2 values).
_METADATA_NAMES = ("scales", "zeros", "meta_scale", "metadata", "orig_shape")



def gemlite_parts(module: torch.nn.Module) -> list[TensorPart]:
    """Ledger parts of a ``GemLiteLinearTriton``: ``W_q`` (payload), then every non-empty tensor
    of :data:`_METADATA_NAMES` (metadata), then the bias.

    ``W_q`` is int32 with 8 int4 values each (K/8 x N) for the 4-bit scheme, and the plain
    ``[N, K]`` int8 / float8 weight seen through a transpose for the 8-bit ones.

    Raises:
        TypeError: if the module holds no packed weight (``pack`` did not run).
    """
    w_q = getattr(module, "W_q", None)
    if not isinstance(w_q, torch.Tensor) or w_q.numel() == 0:
        raise TypeError(f"{type(module).__name__} holds no packed W_q: gemlite's pack() did not run")
    parts = [TensorPart("W_q", "payload", w_q.detach())]
    for name in _METADATA_NAMES:
        tensor = getattr(module, name, None)
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            parts.append(TensorPart(name, "metadata", tensor.detach()))
    return parts + bias_parts(module)


def rtn_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round-to-nearest asymmetric int4 per group of ``group_size`` K elements, min-max range.

    ``scale = (max - min) / 15`` (rounded to bf16, the dtype gemlite stores), ``zero =
    round(-min / scale)`` clamped to 0..15 (an integer, exact in bf16), ``W_q = clamp(round(w /
    scale) + zero, 0, 15)``; gemlite's HQQ-format dequantization is ``(W_q - zero) * scale``. HQQ's
    optimizer (the ``hqq`` package, which ``A16W4_HQQ_INT.from_hqqlinear`` expects) is not used:
    this is the plain min-max rule of torchao's int4 quantizers, so the formats compare on their
    kernels, not on their calibration.

    Args:
        weight: ``[N, K]`` float weight; K a multiple of ``group_size``.
        group_size: K elements per group.

    Returns:
        ``W_q`` uint8 ``[N, K]`` in 0..15, ``scales`` and ``zeros`` bf16 ``[N, K / group_size]``.
    """
    n, k = weight.shape
    w = weight.detach().float().reshape(n, k // group_size, group_size)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    scale = ((hi - lo).clamp(min=1e-6) / 15).to(torch.bfloat16)
    s = scale.float()
    zero = torch.round(-lo / s).clamp(0, 15)
    w_q = (torch.round(w / s.unsqueeze(-1)) + zero.unsqueeze(-1)).clamp(0, 15).to(torch.uint8)
    return w_q.reshape(n, k), scale, zero.to(torch.bfloat16)


def _build_int4(weight: torch.Tensor, bias: Optional[torch.Tensor], options: GemliteInt4Options) -> torch.nn.Module:
    from gemlite.helper import A16W4_HQQ_INT

    layer = plain_linear(weight, bias, torch.bfloat16)
    w_q, scales, zeros = rtn_int4(layer.weight, options.group_size)
    b = None if layer.bias is None else layer.bias.detach()
    return A16W4_HQQ_INT(device=weight.device, dtype=torch.bfloat16).from_weights(w_q, scales, zeros, bias=b).eval()


def _from_linear(helper_name: str):
    """A ``build`` that converts a bf16 ``nn.Linear`` with ``gemlite.helper.<helper_name>``."""

    def build(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
        from gemlite import helper

        processor = getattr(helper, helper_name)(device=weight.device, dtype=torch.bfloat16)
        return processor.from_linear(plain_linear(weight, bias, torch.bfloat16)).eval()

    return build


def _bias16(bias: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if bias is None else bias.to(torch.bfloat16)


def _emulate_int4(weight: torch.Tensor, bias: Optional[torch.Tensor], options: GemliteInt4Options) -> torch.nn.Module:
    """int4-weight-only-gemlite: :func:`rtn_int4` on the bf16 weight, as the build; gemlite's
    ``pack`` (``fma_mode=True``) stores ``zero' = bf16(-zero * scale)`` and its kernels dequantize
    with ``tl.fma(W_q, scale, zero')`` in bf16 (``triton_kernels/utils.py`` ``dequantize``,
    ``W_group_mode`` 4): here ``W_q * scale + zero'`` in float32, rounded once to bf16. bf16 in and out."""
    w_q, scales, zeros = rtn_int4(weight.to(torch.bfloat16), options.group_size)
    zero_fma = (-zeros.float() * scales.float()).to(torch.bfloat16)
    w_hat = group_view(w_q.float(), options.group_size) * scales.float()[..., None] + zero_fma.float()[..., None]
    return EmulatedLinear(w_hat.reshape(weight.shape).to(torch.bfloat16), _bias16(bias), torch.bfloat16,
                          torch.bfloat16, rule=f"gemlite uint4 min-max asymmetric, group {options.group_size}")


def _emulate_8bit(fp8: bool):
    """int8- / fp8-weight-only-gemlite (``A16W8_INT8`` / ``A16W8_FP8``): the fp32 copy of the bf16
    weight quantized per row by :func:`qbench.schemes.emulate.gemlite_rowwise_8bit`; the kernels
    pre-scale (``W_group_mode`` 2: ``W_q * scale`` in fp32) and cast to the bf16 input dtype before
    ``tl.dot``, so Ŵ = ``bf16(W_q * scale)``. bf16 in and out."""

    def emulate(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
        q, scale = gemlite_rowwise_8bit(weight.to(torch.bfloat16), fp8=fp8)
        w_hat = (q.float() * scale).to(torch.bfloat16)
        return EmulatedLinear(w_hat, _bias16(bias), torch.bfloat16, torch.bfloat16,
                              rule=f"gemlite {'e4m3' if fp8 else 'int8'} per-row, bf16 dequant")

    return emulate


def _emulate_fp8_dynamic(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
    """fp8-dynamic-gemlite (``A8W8_fp8_dynamic``): weight per row and activations per token by
    :func:`qbench.schemes.emulate.gemlite_rowwise_8bit` (e4m3, fp32 scales); the kernel multiplies
    e4m3 by e4m3 and post-scales by both scales (``channel_scale_mode`` 3). bf16 in and out."""
    q, scale = gemlite_rowwise_8bit(weight.to(torch.bfloat16), fp8=True)
    return EmulatedLinear(q.float() * scale, _bias16(bias), torch.bfloat16, torch.bfloat16, act_quant=act_gemlite_fp8,
                          rule="gemlite e4m3 per-row weight, per-token activations")


def _tuned_entries() -> int:
    """Tuned configs gemlite holds in memory (``GEMLITE_TRITON_CONFIG_CACHE``: kernel -> key -> config)."""
    from gemlite import core

    return sum(len(configs) for configs in core.GEMLITE_TRITON_CONFIG_CACHE.values())


def _cache_version(device) -> str:
    import gemlite
    import triton

    return f"{gemlite.__version__}-triton-{triton.__version__}-{torch.cuda.get_device_name(device)}"


def _cache_load(path: str) -> int:
    from gemlite.core import GemLiteLinearTriton

    if not GemLiteLinearTriton.load_config(path, print_error=False):
        raise ValueError(f"gemlite could not read {path}")
    return _tuned_entries()


def _cache_save(path: str) -> int:
    """gemlite's ``cache_config`` merges the file with what this process tuned and writes it back;
    it runs on a copy that then replaces the file, so a crash mid-write leaves the old file."""
    import json

    from gemlite.core import GemLiteLinearTriton

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if os.path.isfile(path):
            shutil.copyfile(path, tmp)
        GemLiteLinearTriton.cache_config(tmp)  # an unreadable copy is replaced, not merged
        with open(tmp, encoding="utf-8") as f:
            saved = sum(len(configs) for configs in json.load(f).values())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return saved


# --- named by the declarations in qbench.schemes.catalog ---
build_int8 = _from_linear("A16W8_INT8")
build_fp8 = _from_linear("A16W8_FP8")
build_fp8_dynamic = _from_linear("A8W8_fp8_dynamic")
emulate_int8 = _emulate_8bit(fp8=False)
emulate_fp8 = _emulate_8bit(fp8=True)
