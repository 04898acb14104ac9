"""torchao schemes (torchao >= 0.18): FP8, INT8 and INT4, weight-only and dynamic-activation.

Each builds a bf16 (or, with ``activation_dtype = "fp16"``, fp16) ``nn.Linear`` from the FP32
weight and applies ``torchao.quantization.quantize_`` with one config. The quantized weight is a torchao tensor subclass that declares its parts in
``tensor_data_names`` (plus ``optional_tensor_data_names``); the ledger counts exactly those:
``qdata`` (or ``packed_weights``) is payload, every other part (scales, zero points, packed
scale-and-zero) is metadata. Configs and defaults: torchao docs, ``torchao/quantization/quant_api.py``.

Each scheme's ``emulate`` (:mod:`qbench.schemes.emulate`) quantizes the weight the way its build does,
with torchao's own ``from_hp`` or quant primitives where they run on any device (torchao 0.18), and
with mslk's rules rewritten in torch where torchao calls mslk (mslk 1.1.0, CUDA only); see the
``_emulate_*`` functions.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

import torch
import torch.nn.functional as F

from qbench.schemes.base import SchemeOptions, TensorPart, bias_parts, plain_linear
from qbench.schemes.emulate import (
    EmulatedLinear, act_mslk_fp8_row, cuda_scalar_div, group_view, mslk_fp8_row, to_e4m3,
)
from qbench.schemes.options import (  # noqa: F401 - the options models, re-exported where they were
    Fp8DynamicOptions, Fp8Int4Options, GroupOptions, IntxOptions, MslkGroupOptions, TorchaoOptions,
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
    place with ``config_factory(options)``; fp16 layers come wrapped in :class:`CastInputLinear`.
    The build keeps ``config_factory`` as its ``config_factory``: the torchao config a user's own
    ``quantize_`` call takes for the scheme (:mod:`qbench.search.snippet`)."""

    def build(weight: torch.Tensor, bias: Optional[torch.Tensor], options: SchemeOptions) -> torch.nn.Module:
        from torchao.quantization import quantize_

        dtype = _ACTIVATION_DTYPES[getattr(options, "activation_dtype", "bf16")]
        layer = plain_linear(weight, bias, dtype)
        quantize_(layer, config_factory(options))
        torchao_parts(layer)  # raises when quantize_ silently skipped the layer
        return layer if dtype == torch.bfloat16 else CastInputLinear(layer, dtype)

    build.config_factory = config_factory
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


# --- emulations ---------------------------------------------------------------------------------------

def _layer_dtype(options) -> torch.dtype:
    """The float dtype of the layer ``build`` makes: its weight before quantization, its bias, input
    and output (``options.activation_dtype``)."""
    return _ACTIVATION_DTYPES[getattr(options, "activation_dtype", "bf16")]


def _bias(bias: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    return None if bias is None else bias.to(dtype)


def _emulate_fp8_weight_only(weight, bias, options) -> torch.nn.Module:
    """fp8-weight-only: the weight through torchao's own ``Float8Tensor.from_hp`` with the config's
    dtype and granularity (per row; torchao picks mslk's row quantizer on SM90+ when mslk is
    installed, its torch rule elsewhere, as the real build does) and ``dequantize()`` to the layer
    dtype, which is the weight the real layer's ``torch.matmul`` uses."""
    from torchao.quantization.quantize_.workflows import Float8Tensor

    dtype, config = _layer_dtype(options), _fp8_weight_only(options)
    w = Float8Tensor.from_hp(weight.to(dtype), float8_dtype=config.weight_dtype, granularity=config.granularity)
    return EmulatedLinear(w.dequantize(), _bias(bias, dtype), dtype, dtype, rule="torchao Float8Tensor, dequantized")


def _act_torchao_fp8(x: torch.Tensor, float8_dtype, granularity) -> torch.Tensor:
    """torchao's dynamic FP8 activation quantization with the TORCH kernel preference
    (``Float8Tensor.from_hp``: ``_choose_scale_float8``, ``_quantize_affine_float8``), dequantized."""
    from torchao.quantization.quantize_.common import KernelPreference
    from torchao.quantization.quantize_.workflows import Float8Tensor

    return Float8Tensor.from_hp(x, float8_dtype=float8_dtype, granularity=granularity,
                                kernel_preference=KernelPreference.TORCH).dequantize(torch.float32)


def _emulate_fp8_dynamic(weight, bias, options) -> torch.nn.Module:
    """fp8-dynamic (``Float8DynamicActivationFloat8WeightConfig`` as :func:`_fp8_dynamic` makes it).

    ``kernel_preference = "torch"`` (default): weight and activations through torchao's
    ``Float8Tensor.from_hp`` with the TORCH preference and the config's granularities (per row by
    default: one scale per output row, one per token; per tensor: one each), which is
    ``scale = amax / 448`` computed in the layer dtype (bf16, so the scale is bf16-rounded), then
    ``e4m3(clamp(x / scale))``; the GEMM (``torch._scaled_mm``) is ``(x_q · w_q) * s_x * s_w + b``.
    ``"mslk"``: both quantized by mslk's ``quantize_fp8_row`` (:func:`~qbench.schemes.emulate.mslk_fp8_row`,
    fp32 scales), as ``f8f8bf16_rowwise`` sees them.

    Raises:
        ValueError: fp16 with per-row scales (torchao 0.18 asserts a bf16 weight for PerRow), or
            mslk with per-tensor scales or fp16 (see :func:`_fp8_dynamic_check`).
    """
    from functools import partial

    from torchao.quantization.quantize_.common import KernelPreference
    from torchao.quantization.quantize_.workflows import Float8Tensor

    dtype, config = _layer_dtype(options), _fp8_dynamic(options)
    act_g, w_g = config.granularity
    if options.activation_dtype != "bf16" and options.granularity == "per-row":
        raise ValueError("activation_dtype=fp16 with granularity=per-row: torchao 0.18 quantizes per-row FP8 "
                         "from a bf16 weight only (Float8DynamicActivationFloat8WeightConfig asserts it)")
    w = weight.to(dtype)
    if options.kernel_preference == "mslk":
        if options.granularity != "per-row" or options.activation_dtype != "bf16":
            raise ValueError("kernel_preference=mslk needs granularity=per-row and activation_dtype=bf16")
        q, scale = mslk_fp8_row(w)
        return EmulatedLinear(q.float() * scale, _bias(bias, dtype), dtype, dtype, act_quant=act_mslk_fp8_row,
                              rule="mslk quantize_fp8_row weight and activations, fp32 scales")
    wq = Float8Tensor.from_hp(w, float8_dtype=config.weight_dtype, granularity=w_g,
                              kernel_preference=KernelPreference.TORCH)
    act = partial(_act_torchao_fp8, float8_dtype=config.activation_dtype, granularity=act_g)
    return EmulatedLinear(wq.dequantize(torch.float32), _bias(bias, dtype), dtype, dtype, act_quant=act,
                          rule=f"torchao Float8Tensor ({options.granularity}) weight and activations")


def _emulate_int8_weight_only(weight, bias, options) -> torch.nn.Module:
    """int8-weight-only: the weight through torchao's own ``Int8Tensor.from_hp`` with the config's
    granularity (per row, symmetric: ``scale = amax / 127.5``, ``q = clamp(round(w / scale), -128,
    127)``). The real forward multiplies by ``q`` then by ``scale.to(layer dtype)``, so Ŵ is
    ``q * bf16(scale)`` (exact in float32)."""
    from torchao.quantization.quantize_.workflows import Int8Tensor

    dtype, config = _layer_dtype(options), _int8_weight_only(options)
    w = Int8Tensor.from_hp(weight.to(dtype), granularity=config.granularity)
    w_hat = w.qdata.float() * w.scale.to(dtype).float()
    return EmulatedLinear(w_hat, _bias(bias, dtype), dtype, dtype, rule="torchao Int8Tensor, q * bf16(scale)")


def _act_torchao_int8(x: torch.Tensor, granularity, mapping_type, reduce_range: bool) -> torch.Tensor:
    """torchao's dynamic int8 activation quantization (``Int8Tensor.from_hp``), dequantized."""
    from torchao.quantization.quantize_.workflows import Int8Tensor

    return Int8Tensor.from_hp(x, granularity, mapping_type=mapping_type,
                              reduce_range=reduce_range).dequantize(torch.float32)


def _emulate_w8a8_dynamic(weight, bias, options) -> torch.nn.Module:
    """w8a8-dynamic (``Int8DynamicActivationInt8WeightConfig``): weight and activations through
    torchao's own ``Int8Tensor.from_hp`` with the config's granularities and activation mapping
    (per row and per token, symmetric, fp32 scales), dequantized; the real forward's integer matmul
    times both scales is the same product."""
    from functools import partial

    from torchao.quantization.quantize_.workflows import Int8Tensor

    dtype, config = _layer_dtype(options), _w8a8_dynamic(options)
    act_g, w_g = Int8Tensor._normalize_granularity(config.granularity)
    w = Int8Tensor.from_hp(weight.to(dtype), granularity=w_g, reduce_range=config.reduce_range)
    act = partial(_act_torchao_int8, granularity=act_g, mapping_type=config.act_mapping_type,
                  reduce_range=config.reduce_range)
    return EmulatedLinear(w.dequantize(torch.float32), _bias(bias, dtype), dtype, dtype, act_quant=act,
                          rule="torchao Int8Tensor weight (per row) and activations (per token)")


def _emulate_int4_weight_only(weight, bias, options) -> torch.nn.Module:
    """int4-weight-only (tinygemm, ``Int4TilePackedTo4dTensor.from_hp`` with the TINYGEMM qparams
    algorithm): torchao's own ``_choose_qparams_affine_tinygemm`` and ``_quantize_affine_tinygemm``
    on the bf16 weight (asymmetric, uint4 0..15 per group of ``group_size``, float zero-point domain:
    ``scale = (max - min) / 15`` and ``zero = min + 8 * scale``, both bf16 and computed in bf16);
    dequantized as tinygemm does (``aten/src/ATen/native/cuda/int4mm.cu``: one bf16 FMA,
    ``(q - 8) * scale + zero``): in float32, then rounded to bf16. bf16 in and out. (from_hp also
    pads K to a multiple of 1024 and N to one of 8 with zeros: whole extra groups, no change.)

    Raises:
        ValueError: ``activation_dtype = "fp16"`` (tinygemm is bf16 only).
    """
    from torchao.quantization.quant_primitives import (
        MappingType, _choose_qparams_affine_tinygemm, _dequantize_affine_tinygemm, _quantize_affine_tinygemm,
    )

    if options.activation_dtype != "bf16":
        raise ValueError(f"activation_dtype={options.activation_dtype}: {_TINYGEMM_BF16}")
    w, block = weight.to(torch.bfloat16), [1, options.group_size]
    scale, zero = _choose_qparams_affine_tinygemm(w, MappingType.ASYMMETRIC, tuple(block), torch.int32, 0, 15,
                                                  scale_dtype=torch.bfloat16, zero_point_dtype=torch.bfloat16)
    q = _quantize_affine_tinygemm(w, block, scale, zero, torch.int32, 0, 15)
    w_hat = _dequantize_affine_tinygemm(q, block, scale, zero, torch.int32, 0, 15, output_dtype=torch.float32)
    return EmulatedLinear(w_hat.to(torch.bfloat16), _bias(bias, torch.bfloat16), torch.bfloat16, torch.bfloat16,
                          rule=f"tinygemm uint4 asymmetric, group {options.group_size}, bf16 dequant")


def _emulate_int4_intx(weight, bias, options) -> torch.nn.Module:
    """int4-intx (``IntxWeightOnlyConfig``): the weight through torchao's own
    ``IntxUnpackedToInt8Tensor.from_hp`` with the config's dtype, group size and mapping (int4
    -8..7, scales in the layer dtype) and ``dequantize()``, the weight the real forward's
    ``F.linear`` uses."""
    from torchao.quantization.quantize_.workflows import IntxUnpackedToInt8Tensor

    dtype, config = _layer_dtype(options), _int4_intx(options)
    w = IntxUnpackedToInt8Tensor.from_hp(weight.to(dtype), (1, config.granularity.group_size), config.weight_dtype,
                                         mapping_type=config.mapping_type)
    return EmulatedLinear(w.dequantize(), _bias(bias, dtype), dtype, dtype,
                          rule=f"torchao intx int4 {options.mapping}, group {options.group_size}")


def _mslk_int4_zp(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dequantized weight of mslk's ``int4_row_quantize_zp`` (mslk 1.1.0 ``mslk/quantize/shuffle.py``;
    torchao's ``Int4Tensor.from_hp`` and ``quantize_int4_preshuffle(dtype="bf16")`` call it): in
    float32 per group, ``scale = max(max - min, 1e-6) / 15``, ``zero = min + 8 * scale``,
    ``q = clamp(round((w - min) / scale), 0, 15) - 8`` (the ``/ 15`` as torch does it on the GPU,
    :func:`~qbench.schemes.emulate.cuda_scalar_div`); scale and zero then cast to bf16 (torchao),
    and the kernel (CUTLASS mixed-input ``ConvertAndScaleWithZero``, bf16 math) forms
    ``q * scale + zero``: here in float32, rounded once to bf16. Returns bf16 ``[N, K]``."""
    x = group_view(w.float(), group_size)
    lo, hi = x.amin(dim=-1, keepdim=True), x.amax(dim=-1, keepdim=True)
    scale = cuda_scalar_div((hi - lo).clamp(min=1e-6), 15)
    zero = lo + scale * 8
    q = x.sub(lo).div(scale).round().clamp(0, 15) - 8
    w_hat = q * scale.to(torch.bfloat16).float() + zero.to(torch.bfloat16).float()
    return w_hat.reshape(w.shape).to(torch.bfloat16)


def _emulate_int4_mslk(weight, bias, options) -> torch.nn.Module:
    """int4-plain / int4-preshuffled (mslk ``bf16i4bf16_rowwise`` / ``bf16i4bf16_shuffled``): both
    quantize with ``int4_row_quantize_zp`` (:func:`_mslk_int4_zp`; preshuffling only reorders);
    bf16 activations, bf16 out.

    Raises:
        ValueError: ``activation_dtype = "fp16"`` (the mslk int4 kernels are bf16 only).
    """
    if options.activation_dtype != "bf16":
        raise ValueError(f"activation_dtype={options.activation_dtype}: {_MSLK_INT4_BF16}")
    w_hat = _mslk_int4_zp(weight.to(torch.bfloat16), options.group_size)
    return EmulatedLinear(w_hat, _bias(bias, torch.bfloat16), torch.bfloat16, torch.bfloat16,
                          rule=f"mslk int4 asymmetric (zero point), group {options.group_size}")


def _mslk_int4_symmetric(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """mslk's ``int4_row_quantize`` (mslk 1.1.0): per group in float32, ``scale = max(amax, 1e-6) / 8``,
    ``q = clamp(round(w / scale), -8, 7)``. Returns ``q`` float ``[N, K/g, g]`` and ``scale`` ``[N, K/g, 1]``."""
    x = group_view(w.float(), group_size)
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6) / 8
    return x.div(scale).round().clamp(-8, 7), scale


#: torchao 0.18 fixes the group size of ``Float8DynamicActivationInt4WeightConfig`` at 128.
_FP8_INT4_GROUP = 128


def _emulate_fp8_int4(weight, bias, options) -> torch.nn.Module:
    """fp8-int4 (``Float8DynamicActivationInt4WeightConfig``, group 128); activations per token by
    mslk's ``quantize_fp8_row`` (:func:`~qbench.schemes.emulate.mslk_fp8_row`) in both layouts.

    ``preshuffled`` (``quantize_int4_preshuffle(dtype="fp8")``, mslk ``f8i4bf16_shuffled``): the bf16
    weight first to e4m3 per row (``quantize_fp8_row``: row scale r), then ``int4_row_quantize`` of
    those e4m3 values (:func:`_mslk_int4_symmetric`), group scales cast to e4m3; the kernel looks the
    int4 codes up in a table of ``e4m3(group_scale * q)`` (CUTLASS ``packed_scale_t``), so
    Ŵ = ``e4m3(e4m3(scale) * q) * r``.
    ``plain`` (``Int4Tensor.from_hp``: ``int4_row_quantize`` of the bf16 weight, scales to bf16,
    zero points 0; mslk ``f8i4bf16_rowwise``): the kernel converts ``q * scale`` in bf16 to the e4m3
    MMA type, so Ŵ = ``e4m3(bf16(q * bf16(scale)))`` (small weights land in e4m3's subnormals: that
    is the kernel's own loss).

    Raises:
        ValueError: ``activation_dtype = "fp16"`` (the kernels write bf16 only).
    """
    if options.activation_dtype != "bf16":
        raise ValueError(f"activation_dtype={options.activation_dtype}: {_MSLK_FP8_INT4_BF16}")
    w = weight.to(torch.bfloat16)
    if options.int4_packing_format == "preshuffled":
        w8, row_scale = mslk_fp8_row(w)
        q, scale = _mslk_int4_symmetric(w8.float(), _FP8_INT4_GROUP)
        w_hat = to_e4m3(q * scale.to(torch.float8_e4m3fn).float()).float().reshape(w.shape) * row_scale
    else:
        q, scale = _mslk_int4_symmetric(w, _FP8_INT4_GROUP)
        w_hat = to_e4m3((q * scale.to(torch.bfloat16).float()).to(torch.bfloat16)).float().reshape(w.shape)
    return EmulatedLinear(w_hat, _bias(bias, torch.bfloat16), torch.bfloat16, torch.bfloat16,
                          act_quant=act_mslk_fp8_row,
                          rule=f"mslk fp8 x int4 ({options.int4_packing_format}), group 128, fp8 rows")


def _int_mm_m(m: int, device: torch.device, options) -> Optional[str]:
    """Compiled w8a8-dynamic on CUDA: Inductor lowers the int8 x int8 matmul to ``torch._int_mm``,
    whose CUDA kernel refuses M <= 16 ("self.size(0) needs to be greater than 16"). Eager
    w8a8-dynamic and the CPU kernel take any M."""
    if device.type == "cuda" and getattr(options, "mode", "eager") == "compiled" and m <= 16:
        return (f"compiled w8a8-dynamic lowers to torch._int_mm, whose CUDA kernel needs M > 16 (M = {m}); "
                "the eager w8a8-dynamic row runs at this M")
    return None


# --- named by the declarations in qbench.schemes.catalog ---
build_fp8_weight_only = _quantized(_fp8_weight_only)
build_fp8_dynamic = _quantized(_fp8_dynamic)
build_int8_weight_only = _quantized(_int8_weight_only)
build_w8a8_dynamic = _quantized(_w8a8_dynamic)
build_int4_weight_only = _quantized(_int4_weight_only)
build_int4_intx = _quantized(_int4_intx)
build_int4_plain = _quantized(_int4_mslk("plain"))
build_int4_preshuffled = _quantized(_int4_mslk("preshuffled"))
build_fp8_int4 = _quantized(_fp8_int4)
tinygemm_check = _fp16_check(_TINYGEMM_BF16)
mslk_int4_check = _mslk_check(_MSLK_INT4_BF16)
mslk_fp8_int4_check = _mslk_check(_MSLK_FP8_INT4_BF16)
