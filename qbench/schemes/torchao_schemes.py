"""torchao schemes (torchao >= 0.18): FP8, INT8 and INT4, weight-only and dynamic-activation.

Each builds a bf16 (or, with ``activation_dtype = "fp16"``, fp16) ``nn.Linear`` from the FP32
weight and applies ``torchao.quantization.quantize_`` with one config. The quantized weight is a torchao tensor subclass that declares its parts in
``tensor_data_names`` (plus ``optional_tensor_data_names``); the ledger counts exactly those:
``qdata`` (or ``packed_weights``) is payload, every other part (scales, zero points, packed
scale-and-zero) is metadata. Configs and defaults: torchao docs, ``torchao/quantization/quant_api.py``.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

import torch
import torch.nn.functional as F

from qbench.schemes import register
from qbench.schemes.base import Scheme, SchemeOptions, TensorPart, bias_parts, plain_linear
from qbench.schemes.specs import (  # noqa: F401 - the options models, re-exported where they were
    Fp8DynamicOptions, Fp8Int4Options, GroupOptions, IntxOptions, MslkGroupOptions, TorchaoOptions, spec,
)

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


_ACTIVATION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class CastInputLinear(torch.nn.Module):
    """A quantized linear whose activations are ``input_dtype`` (fp16), fed by a bf16 caller.

    qbench converts the FP32 activations to the scheme's declared ``activation_dtype`` (bf16 for
    every torchao scheme) before the call; a layer built with ``activation_dtype = "fp16"`` holds
    fp16 scales and returns fp16, so this wrapper converts X to fp16 first: one elementwise kernel
    of M x K elements inside the timed call (listed among the row's kernels; under
    ``torch.compile`` Inductor may fuse it). The conversion is exact for magnitudes between
    2^-14 and 65504 (bf16's 8 significant bits fit in fp16's 11), so the row's error is that of
    bf16-rounded activations, a little above what an fp16 model would see.

    Attributes:
        weight, bias: the quantized layer's parameters (the ledger reads ``weight``).
        input_dtype: the dtype X is converted to.
    """

    def __init__(self, layer: torch.nn.Linear, input_dtype: torch.dtype):
        super().__init__()
        self.weight = layer.weight
        self.bias = layer.bias
        self.input_dtype = input_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.input_dtype:
            x = x.to(self.input_dtype)
        return F.linear(x, self.weight, self.bias)


def _quantized(config_factory):
    """A ``build`` that quantizes a bf16 (or fp16, from ``options.activation_dtype``) linear in
    place with ``config_factory(options)``; fp16 layers come wrapped in :class:`CastInputLinear`."""

    def build(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
        from torchao.quantization import quantize_

        dtype = _ACTIVATION_DTYPES[getattr(options, "activation_dtype", "bf16")]
        layer = plain_linear(weight, bias, dtype)
        quantize_(layer, config_factory(options))
        torchao_parts(layer)  # raises when quantize_ silently skipped the layer
        return layer if dtype == torch.bfloat16 else CastInputLinear(layer, dtype)

    return build


def _fp8_weight_only(options):
    from torchao.quantization import Float8WeightOnlyConfig

    return Float8WeightOnlyConfig()


def _fp8_dynamic(options):
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, PerTensor

    from torchao.quantization.quantize_.common import KernelPreference

    granularity = PerRow() if options.granularity == "per-row" else PerTensor()
    preference = KernelPreference.MSLK if options.kernel_preference == "mslk" else KernelPreference.TORCH
    return Float8DynamicActivationFloat8WeightConfig(granularity=granularity, kernel_preference=preference)


#: The pip name of the package whose import name is ``mslk`` (``Scheme.packages`` would tell
#: users to ``pip install mslk``, a different name), and qbench's extra that pins it.
MSLK_MISSING = "needs the mslk-cuda package (pip install mslk-cuda, or qbench's extra: pip install -e '.[kernels]')"


def _mslk_missing() -> bool:
    return importlib.util.find_spec("mslk") is None


def _fp8_dynamic_check(device: torch.device, options) -> Optional[str]:
    """mslk needs its package and per-row scales (torchao 0.18 has no tensorwise mslk GEMM), and
    writes bf16 only."""
    if options.kernel_preference != "mslk":
        return None
    if _mslk_missing():
        return f"kernel_preference=mslk {MSLK_MISSING}"
    if options.granularity != "per-row":
        return "kernel_preference=mslk needs granularity=per-row (torchao 0.18 has no tensorwise mslk GEMM)"
    if options.activation_dtype != "bf16":
        return "kernel_preference=mslk takes bf16 only: mslk's f8f8bf16_rowwise GEMM writes a bf16 output"
    return None


def _fp16_check(constraint: str):
    """An ``extra_check`` that refuses ``activation_dtype = "fp16"`` with ``constraint`` as the reason."""

    def check(device: torch.device, options) -> Optional[str]:
        if options.activation_dtype != "bf16":
            return f"activation_dtype={options.activation_dtype}: {constraint}"
        return None

    return check


def _mslk_check(constraint: str):
    """``extra_check`` of the mslk int4 schemes: the mslk-cuda package, then bf16 activations."""
    fp16 = _fp16_check(constraint)

    def check(device: torch.device, options) -> Optional[str]:
        if _mslk_missing():
            return MSLK_MISSING
        return fp16(device, options)

    return check


_TINYGEMM_BF16 = ("tinygemm (aten._weight_int4pack_mm) takes bf16 only: torchao's Int4TilePackedTo4dTensor "
                  "is bf16 and converts any other input to bf16")
_MSLK_INT4_BF16 = "mslk's bf16i4bf16 int4 kernels take bf16 activations and write bf16 only"
_MSLK_FP8_INT4_BF16 = "mslk's f8i4bf16 kernels write bf16 only (torchao quantizes the activations to FP8 itself)"


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


def _int4_mslk(packing: str):
    """Config factory of ``int4-plain`` / ``int4-preshuffled``: torchao's default int4 config
    with ``int4_packing_format`` ``plain`` (``Int4Tensor``: mslk ``bf16i4bf16_rowwise``) or
    ``preshuffled`` (``Int4PreshuffledTensor``: mslk ``bf16i4bf16_shuffled``)."""

    def factory(options):
        from torchao.quantization import Int4WeightOnlyConfig

        return Int4WeightOnlyConfig(group_size=options.group_size, int4_packing_format=packing)

    return factory


def _fp8_int4(options):
    from torchao.quantization import Float8DynamicActivationInt4WeightConfig

    return Float8DynamicActivationInt4WeightConfig(int4_packing_format=options.int4_packing_format)


def _int4_intx(options):
    from torchao.quantization import IntxWeightOnlyConfig, MappingType, PerGroup

    mapping = MappingType.SYMMETRIC if options.mapping == "symmetric" else MappingType.ASYMMETRIC
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(options.group_size), mapping_type=mapping)


_COMMON = dict(library="torchao", packages=("torchao",), activation_dtype=torch.bfloat16)
#: The mslk schemes: CUTLASS kernels built for Hopper (WGMMA), SM90.
_MSLK = dict(cuda_only=True, min_compute_capability=(9, 0), **_COMMON)

register(Scheme(
    **spec("fp8-weight-only"), family="weight-only", weight_dtype="float8_e4m3fn", compute_dtype="bf16", nominal_bits=8,
    summary="torchao Float8WeightOnlyConfig: e4m3 weight, per-row scales, bf16 activations",
    build=_quantized(_fp8_weight_only), parts=torchao_parts, **_COMMON,
))
register(Scheme(
    **spec("fp8-dynamic"), family="dynamic", weight_dtype="float8_e4m3fn", compute_dtype="fp8", nominal_bits=8,
    summary="torchao Float8DynamicActivationFloat8WeightConfig: e4m3 weight and dynamically quantized activations, FP8 GEMM",
    build=_quantized(_fp8_dynamic), parts=torchao_parts, extra_check=_fp8_dynamic_check, cuda_only=True, min_compute_capability=(8, 9), **_COMMON,
))
register(Scheme(
    **spec("int8-weight-only"), family="weight-only", weight_dtype="int8", compute_dtype="bf16", nominal_bits=8,
    summary="torchao Int8WeightOnlyConfig: int8 weight, per-row scales, bf16 activations",
    build=_quantized(_int8_weight_only), parts=torchao_parts, **_COMMON,
))
def _int_mm_m(m: int, device: torch.device, options) -> Optional[str]:
    """Compiled w8a8-dynamic on CUDA: Inductor lowers the int8 x int8 matmul to ``torch._int_mm``,
    whose CUDA kernel refuses M <= 16 ("self.size(0) needs to be greater than 16"). Eager
    w8a8-dynamic and the CPU kernel take any M."""
    if device.type == "cuda" and getattr(options, "mode", "eager") == "compiled" and m <= 16:
        return (f"compiled w8a8-dynamic lowers to torch._int_mm, whose CUDA kernel needs M > 16 (M = {m}); "
                "the eager w8a8-dynamic row runs at this M")
    return None


register(Scheme(
    **spec("w8a8-dynamic"), family="dynamic", weight_dtype="int8", compute_dtype="int8", nominal_bits=8,
    summary="torchao Int8DynamicActivationInt8WeightConfig: int8 weight (per-row), per-token dynamic int8 activations",
    build=_quantized(_w8a8_dynamic), parts=torchao_parts, m_check=_int_mm_m, **_COMMON,
))
register(Scheme(
    **spec("int4-weight-only"), family="weight-only", weight_dtype="int4 (tinygemm packed int32)", compute_dtype="bf16",
    nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, tile_packed_to_4d (tinygemm): uint4 per-group asymmetric, bf16 scale+zero",
    build=_quantized(_int4_weight_only), parts=torchao_parts, extra_check=_fp16_check(_TINYGEMM_BF16), cuda_only=True, min_compute_capability=(8, 0), **_COMMON,
))
register(Scheme(
    **spec("int4-intx"), family="weight-only", weight_dtype="int4 (in int8)", compute_dtype="bf16", nominal_bits=4,
    summary="torchao IntxWeightOnlyConfig(int4, PerGroup): int4 values stored one per int8, per-group scales; runs on CPU",
    build=_quantized(_int4_intx), parts=torchao_parts, **_COMMON,
))

# --- mslk kernels (the mslk-cuda package, SM90): torchao 0.18's default int4 path and FP8 x int4 ---
register(Scheme(
    **spec("int4-plain"), family="weight-only", weight_dtype="int4 (2 per int8, plain)", compute_dtype="bf16",
    nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, plain packing (torchao's default): int4 per-group asymmetric, bf16 scale "
            "and zero point; mslk CUTLASS bf16i4bf16_rowwise (needs mslk-cuda, SM90)",
    build=_quantized(_int4_mslk("plain")), parts=torchao_parts, extra_check=_mslk_check(_MSLK_INT4_BF16), **_MSLK,
))
register(Scheme(
    **spec("int4-preshuffled"), family="weight-only", weight_dtype="int4 (2 per int8, mslk preshuffled)",
    compute_dtype="bf16", nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, preshuffled packing: int4 per-group asymmetric in mslk's WGMMA load order, "
            "bf16 scale and zero point; mslk CUTLASS bf16i4bf16_shuffled (needs mslk-cuda, SM90)",
    build=_quantized(_int4_mslk("preshuffled")), parts=torchao_parts, extra_check=_mslk_check(_MSLK_INT4_BF16), **_MSLK,
))
register(Scheme(
    **spec("fp8-int4"), family="dynamic", weight_dtype="int4 (2 per int8, symmetric)", compute_dtype="fp8",
    nominal_bits=4,
    summary="torchao Float8DynamicActivationInt4WeightConfig: symmetric int4 weight (group 128, fp8 group scales, "
            "fp32 row scales), per-row dynamic FP8 activations; mslk f8i4bf16_shuffled (needs mslk-cuda, SM90)",
    build=_quantized(_fp8_int4), parts=torchao_parts, extra_check=_mslk_check(_MSLK_FP8_INT4_BF16), **_MSLK,
))
