"""torchao schemes (torchao >= 0.18): FP8, INT8 and INT4, weight-only and dynamic-activation.

Each builds a bf16 ``nn.Linear`` from the FP32 weight and applies ``torchao.quantization.quantize_``
with one config. The quantized weight is a torchao tensor subclass that declares its parts in
``tensor_data_names`` (plus ``optional_tensor_data_names``); the ledger counts exactly those:
``qdata`` (or ``packed_weights``) is payload, every other part (scales, zero points, packed
scale-and-zero) is metadata. Configs and defaults: torchao docs, ``torchao/quantization/quant_api.py``.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch

from qbench.schemes import register
from qbench.schemes.base import Scheme, SchemeOptions, TensorPart, bias_parts, plain_linear

_PAYLOAD_NAMES = ("qdata", "packed_weights", "qdata_and_metadata")


def torchao_parts(module: torch.nn.Module) -> list[TensorPart]:
    """Ledger parts of a torchao-quantized linear: the weight subclass's declared tensors.

    Raises:
        TypeError: if the weight is not a torchao tensor subclass (quantization did not apply).
    """
    weight = module.weight
    names = list(getattr(weight, "tensor_data_names", None) or [])
    if not names:
        raise TypeError(f"weight is {type(weight).__name__}, not a torchao quantized tensor: quantize_ did not apply")
    names += list(getattr(weight, "optional_tensor_data_names", None) or [])
    parts = []
    for name in names:
        tensor = getattr(weight, name, None)
        if isinstance(tensor, torch.Tensor):
            role = "payload" if name in _PAYLOAD_NAMES else "metadata"
            parts.append(TensorPart(f"weight.{name}", role, tensor.detach()))
    return parts + bias_parts(module)


def _quantized(config_factory):
    """A ``build`` that quantizes a bf16 linear in place with ``config_factory(options)``."""

    def build(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
        from torchao.quantization import quantize_

        layer = plain_linear(weight, bias, torch.bfloat16)
        quantize_(layer, config_factory(options))
        torchao_parts(layer)  # raises when quantize_ silently skipped the layer
        return layer

    return build


class Fp8DynamicOptions(SchemeOptions):
    """Options of ``fp8-dynamic``: ``granularity`` of the activation and weight scales, and
    ``kernel_preference``: torchao's ``KernelPreference`` for the activation quantization and the
    GEMM. ``torch`` (the default here): eager aten ops quantize the activation (abs, amax, divide,
    clamp, cast, scale: 8 kernels around the GEMM) and ``torch._scaled_mm`` (cuBLAS) multiplies. ``mslk``: one Triton
    kernel quantizes per row and mslk's CUTLASS ``f8f8bf16_rowwise`` multiplies (needs the
    ``mslk-cuda`` package and SM90+). torchao's own default, AUTO, silently picks mslk when that
    package is importable, so a row's kernels would depend on what happens to be installed; qbench
    asks for one explicitly (H200, graph of 8 copies, M = 1: torch 28.3 µs, mslk 10.4 µs,
    ``results/h200/cold-experiment.json``)."""

    granularity: Literal["per-row", "per-tensor"] = "per-row"
    kernel_preference: Literal["torch", "mslk"] = "torch"


class GroupOptions(SchemeOptions):
    """Options of the per-group int4 schemes: ``group_size`` (K elements sharing one scale)."""

    group_size: Literal[32, 64, 128, 256] = 128


class IntxOptions(GroupOptions):
    """Options of ``int4-intx``: group size and ``mapping`` (symmetric stores zero points of 0)."""

    mapping: Literal["symmetric", "asymmetric"] = "symmetric"


def _fp8_weight_only(options):
    from torchao.quantization import Float8WeightOnlyConfig

    return Float8WeightOnlyConfig()


def _fp8_dynamic(options):
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, PerTensor

    from torchao.quantization.quantize_.common import KernelPreference

    granularity = PerRow() if options.granularity == "per-row" else PerTensor()
    preference = KernelPreference.MSLK if options.kernel_preference == "mslk" else KernelPreference.TORCH
    return Float8DynamicActivationFloat8WeightConfig(granularity=granularity, kernel_preference=preference)


def _fp8_dynamic_check(device: torch.device, options) -> Optional[str]:
    """mslk needs its package and per-row scales (torchao 0.18 has no tensorwise mslk GEMM)."""
    import importlib.util

    if options.kernel_preference != "mslk":
        return None
    if importlib.util.find_spec("mslk") is None:
        return "kernel_preference=mslk needs the mslk-cuda package (pip install mslk-cuda)"
    if options.granularity != "per-row":
        return "kernel_preference=mslk needs granularity=per-row (torchao 0.18 has no tensorwise mslk GEMM)"
    return None


def _int8_weight_only(options):
    from torchao.quantization import Int8WeightOnlyConfig

    return Int8WeightOnlyConfig()


def _w8a8_dynamic(options):
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig

    return Int8DynamicActivationInt8WeightConfig()


def _int4_weight_only(options):
    from torchao.quantization import Int4WeightOnlyConfig

    # torchao 0.18's default int4 packing ("plain") needs the fbgemm-gpu-genai kernels, which are
    # not on PyPI; "tile_packed_to_4d" is the tinygemm layout served by aten._weight_int4pack_mm.
    return Int4WeightOnlyConfig(group_size=options.group_size, int4_packing_format="tile_packed_to_4d")


def _int4_intx(options):
    from torchao.quantization import IntxWeightOnlyConfig, MappingType, PerGroup

    mapping = MappingType.SYMMETRIC if options.mapping == "symmetric" else MappingType.ASYMMETRIC
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(options.group_size), mapping_type=mapping)


def _group_size(options) -> int:
    return options.group_size


_COMMON = dict(library="torchao", packages=("torchao",), activation_dtype=torch.bfloat16)

register(Scheme(
    name="fp8-weight-only", family="weight-only", weight_dtype="float8_e4m3fn", compute_dtype="bf16", nominal_bits=8,
    summary="torchao Float8WeightOnlyConfig: e4m3 weight, per-row scales, bf16 activations",
    build=_quantized(_fp8_weight_only), parts=torchao_parts, **_COMMON,
))
register(Scheme(
    name="fp8-dynamic", family="dynamic", weight_dtype="float8_e4m3fn", compute_dtype="fp8", nominal_bits=8,
    summary="torchao Float8DynamicActivationFloat8WeightConfig: e4m3 weight and dynamically quantized activations, FP8 GEMM",
    build=_quantized(_fp8_dynamic), parts=torchao_parts, options_model=Fp8DynamicOptions,
    extra_check=_fp8_dynamic_check, cuda_only=True, min_compute_capability=(8, 9), **_COMMON,
))
register(Scheme(
    name="int8-weight-only", family="weight-only", weight_dtype="int8", compute_dtype="bf16", nominal_bits=8,
    summary="torchao Int8WeightOnlyConfig: int8 weight, per-row scales, bf16 activations",
    build=_quantized(_int8_weight_only), parts=torchao_parts, **_COMMON,
))
register(Scheme(
    name="w8a8-dynamic", family="dynamic", weight_dtype="int8", compute_dtype="int8", nominal_bits=8,
    summary="torchao Int8DynamicActivationInt8WeightConfig: int8 weight (per-row), per-token dynamic int8 activations",
    build=_quantized(_w8a8_dynamic), parts=torchao_parts, **_COMMON,
))
register(Scheme(
    name="int4-weight-only", family="weight-only", weight_dtype="int4 (tinygemm packed int32)", compute_dtype="bf16",
    nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, tile_packed_to_4d (tinygemm): uint4 per-group asymmetric, bf16 scale+zero",
    build=_quantized(_int4_weight_only), parts=torchao_parts, options_model=GroupOptions,
    cuda_only=True, min_compute_capability=(8, 0), k_multiple=_group_size, **_COMMON,
))
register(Scheme(
    name="int4-intx", family="weight-only", weight_dtype="int4 (in int8)", compute_dtype="bf16", nominal_bits=4,
    summary="torchao IntxWeightOnlyConfig(int4, PerGroup): int4 values stored one per int8, per-group scales; runs on CPU",
    build=_quantized(_int4_intx), parts=torchao_parts, options_model=IntxOptions, k_multiple=_group_size, **_COMMON,
))
