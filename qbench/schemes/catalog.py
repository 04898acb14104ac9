"""Every built-in scheme, declared once: what it is, what it needs, its options, the multiples K and
N must be, how it shards, and the torch functions that build, count and emulate it.

Torch-free: the functions are :class:`~qbench.schemes.scheme.Impl` names of the library modules
(``float_schemes``, ``torchao_schemes``, ``bnb_schemes``, ``gemlite_schemes``), imported when first
called, so ``qbench check`` validates a scenario's scheme options in a fraction of a second.

Adding a scheme: one ``register(Scheme(...))`` here, and its ``build`` / ``parts`` / ``emulate``
functions in a library module; the CLI, the scenario loader, the tp job and the parametrized tests
pick it up (``tests/schemes/test_declaration.py``).
"""

from __future__ import annotations

from qbench.schemes import register
from qbench.schemes.scheme import Scheme, impl
from qbench.schemes.shard_rule import (
    DYNAMIC_ROW, GROUP_COLUMN, GROUP_ROW, PER_GROUP, PER_ROW, PER_ROW_COLUMN, UNQUANTIZED, ShardRule, Sharding,
    fp8_dynamic_column, group_size, no_double_quant,
)
from qbench.schemes.options import (
    AwqOptions, CalibratedGroupOptions, FourBitOptions, Fp8DynamicOptions, GptqOptions, Fp8Int4Options, GemliteInt4Options, GroupOptions, Int8BnbOptions, IntxOptions,
    MslkGroupOptions, SchemeOptions, TorchaoOptions,
)
from qbench.schemes.tuning_cache import TuningCache

_base = impl("qbench.schemes.base")
_float = impl("qbench.schemes.float_schemes")
_ao = impl("qbench.schemes.torchao_schemes")
_bnb = impl("qbench.schemes.bnb_schemes")
_gl = impl("qbench.schemes.gemlite_schemes")
_cal = impl("qbench.schemes.calibrated")

#: precision.ENV_OVERRIDE: cuBLAS reads it at start-up; "0" forces strict FP32.
TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"


def _blocksize(options) -> int:
    return options.blocksize


def _multiple_of_16(options) -> int:
    """FP8 GEMMs (``torch._scaled_mm``, cuBLASLt; mslk's rowwise GEMM) need K and N multiples of 16;
    torchao 0.18's ``quantize_`` silently leaves other shapes unquantized."""
    return 16


#: ``GemLiteLinearTriton.MIN_SIZE``: in_features must be a multiple of 32.
GEMLITE_MIN_K = 32


def _gemlite_min_k(options) -> int:
    return GEMLITE_MIN_K


#: torchao 0.18 fixes the group size of ``Float8DynamicActivationInt4WeightConfig`` at 128.
FP8_INT4_GROUP = 128


def _fixed_128(options) -> int:
    return FP8_INT4_GROUP


# --- plain torch ---------------------------------------------------------------------------------

_FLOAT = dict(library="torch", family="float", parts=_base("linear_parts"), options_model=SchemeOptions,
              shard=UNQUANTIZED)

register(Scheme(
    name="fp32", summary="FP32 weight and activations, strict IEEE FP32 matmul (TF32 off, checked at each call)",
    weight_dtype="float32", activation_dtype="float32", compute_dtype="fp32", nominal_bits=32,
    build=_float("_build_fp32"), emulate=_float("emulate_fp32"), worker_env={TF32_OVERRIDE: "0"}, **_FLOAT,
))
register(Scheme(
    name="tf32", summary="FP32 storage, TF32 tensor-core matmul (10-bit mantissa products, FP32 accumulate)",
    weight_dtype="float32", activation_dtype="float32", compute_dtype="tf32", nominal_bits=32,
    build=_float("_build_tf32"), emulate=_float("_emulate_tf32"), cuda_only=True, min_compute_capability=(8, 0),
    extra_check=_float("_tf32_check"), **_FLOAT,
))
for _name, _dtype in (("fp16", "float16"), ("bf16", "bfloat16")):
    register(Scheme(
        name=_name,
        summary=f"{_name.upper()} weight and activations; on CUDA a {_name} cuBLAS GEMM/GEMV with FP32 accumulate",
        weight_dtype=_dtype, activation_dtype=_dtype, compute_dtype=_name, nominal_bits=16,
        build=_float(f"build_{_name}"), emulate=_float(f"emulate_{_name}"), **_FLOAT,
    ))

# --- torchao -------------------------------------------------------------------------------------

_AO = dict(library="torchao", packages=("torchao",), activation_dtype="bfloat16", parts=_ao("torchao_parts"))
#: The mslk schemes: CUTLASS kernels built for Hopper (WGMMA), SM90.
_MSLK = dict(cuda_only=True, min_compute_capability=(9, 0), **_AO)
#: torchao schemes built by a config whose ``set_inductor_config`` is on: the build switches Inductor's tuning on.
_AO_TUNED, _MSLK_TUNED = dict(_AO, inductor_tuning=True), dict(_MSLK, inductor_tuning=True)

register(Scheme(
    name="fp8-weight-only", family="weight-only", weight_dtype="float8_e4m3fn", compute_dtype="bf16", nominal_bits=8,
    summary="torchao Float8WeightOnlyConfig: e4m3 weight, per-row scales, bf16 activations",
    options_model=TorchaoOptions, shard=PER_ROW,
    build=_ao("build_fp8_weight_only"), emulate=_ao("_emulate_fp8_weight_only"), **_AO_TUNED,
))
register(Scheme(
    name="fp8-dynamic", family="dynamic", weight_dtype="float8_e4m3fn", compute_dtype="fp8", nominal_bits=8,
    summary="torchao Float8DynamicActivationFloat8WeightConfig: e4m3 weight and dynamically quantized activations, FP8 GEMM",
    options_model=Fp8DynamicOptions, k_multiple=_multiple_of_16, n_multiple=_multiple_of_16,
    shard=Sharding(
        column=ShardRule(True, "per-row weight scales split with N; per-token activation scales are over all of K on "
                               "every rank (per-tensor: each shard takes its own weight absmax)",
                         same_as_slice=fp8_dynamic_column),
        row=DYNAMIC_ROW),
    build=_ao("build_fp8_dynamic"), emulate=_ao("_emulate_fp8_dynamic"), extra_check=_ao("_fp8_dynamic_check"),
    cuda_only=True, min_compute_capability=(8, 9), **_AO_TUNED,
))
register(Scheme(
    name="int8-weight-only", family="weight-only", weight_dtype="int8", compute_dtype="bf16", nominal_bits=8,
    summary="torchao Int8WeightOnlyConfig: int8 weight, per-row scales, bf16 activations",
    options_model=TorchaoOptions, shard=PER_ROW,
    build=_ao("build_int8_weight_only"), emulate=_ao("_emulate_int8_weight_only"), **_AO_TUNED,
))
register(Scheme(
    name="w8a8-dynamic", family="dynamic", weight_dtype="int8", compute_dtype="int8", nominal_bits=8,
    summary="torchao Int8DynamicActivationInt8WeightConfig: int8 weight (per-row), per-token dynamic int8 activations",
    options_model=TorchaoOptions,
    shard=Sharding(ShardRule(True, "per-row weight scales split with N; per-token activation scales over all of K"),
                   DYNAMIC_ROW),
    build=_ao("build_w8a8_dynamic"), emulate=_ao("_emulate_w8a8_dynamic"), m_check=_ao("_int_mm_m"), **_AO_TUNED,
))
register(Scheme(
    name="int4-weight-only", family="weight-only", weight_dtype="int4 (tinygemm packed int32)", compute_dtype="bf16",
    nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, tile_packed_to_4d (tinygemm): uint4 per-group asymmetric, bf16 scale+zero",
    options_model=GroupOptions, k_multiple=group_size,
    shard=Sharding(
        column=ShardRule(True, "per-group scales along K: a column shard keeps whole groups",
                         multiple=lambda options: 8,
                         why_multiple="the tinygemm N tile (torchao pads N to a multiple of 8)"),
        row=ShardRule(True, "per-group scales along K; the tinygemm layout pads K to a multiple of 1024",
                      multiple=lambda options: max(1024, options.group_size),
                      why_multiple="1024, the tinygemm K padding (torchao Int4TilePackedTo4dTensor.from_hp pads K to a "
                                   "multiple of 1024: a smaller shard would store and read padding)")),
    build=_ao("build_int4_weight_only"), emulate=_ao("_emulate_int4_weight_only"), extra_check=_ao("tinygemm_check"),
    cuda_only=True, min_compute_capability=(8, 0), **_AO_TUNED,
))
register(Scheme(
    name="int4-intx", family="weight-only", weight_dtype="int4 (in int8)", compute_dtype="bf16", nominal_bits=4,
    summary="torchao IntxWeightOnlyConfig(int4, PerGroup): int4 values stored one per int8, per-group scales; runs on CPU",
    options_model=IntxOptions, k_multiple=group_size, shard=PER_GROUP,
    build=_ao("build_int4_intx"), emulate=_ao("_emulate_int4_intx"), **_AO,
))

# calibrated int4 on the tinygemm grid (qbench.schemes.calibrated): int4-weight-only's format and kernel
_TINYGEMM_SHARD = Sharding(
    column=ShardRule(True, "per-group scales along K: a column shard keeps whole groups", multiple=lambda options: 8,
                     why_multiple="the tinygemm N tile (torchao pads N to a multiple of 8)"),
    row=ShardRule(True, "per-group scales along K; the tinygemm layout pads K to a multiple of 1024; a calibrated "
                        "choice of values is made on the whole weight, so a shard's values differ from its slice's",
                  multiple=lambda options: max(1024, options.group_size),
                  why_multiple="1024, the tinygemm K padding", same_as_slice=lambda options: False))
_CALIBRATED = dict(family="weight-only", weight_dtype="int4 (tinygemm packed int32)", compute_dtype="bf16",
                   nominal_bits=4, k_multiple=group_size, shard=_TINYGEMM_SHARD, extra_check=_ao("tinygemm_check"),
                   cuda_only=True, min_compute_capability=(8, 0), **_AO)
_SPEED_NOTE = ("layer and step jobs (no calibration text) time the same kernel on round-to-nearest values of the "
               "same shape")
register(Scheme(
    name="int4-hqq",
    summary="HQQ int4 (torchao Int4WeightOnlyConfig, int4_choose_qparams_algorithm=hqq): scale and zero per group "
            "searched to fit the weight, no data; tinygemm uint4 asymmetric, bf16 scale+zero",
    options_model=CalibratedGroupOptions, build=_cal("build_hqq"), emulate=_cal("emulate_hqq"), **_CALIBRATED,
))
register(Scheme(
    name="int4-gptq",
    summary="GPTQ int4 (Frantar et al.; torchao.prototype.gptq's algorithm on the tinygemm grid): needs "
            f"[quality] calibration activations (H = 2XᵀX, error feedback); {_SPEED_NOTE}",
    options_model=GptqOptions, build=_cal("build_gptq"), emulate=_cal("emulate_gptq"), needs_calibration=True,
    **_CALIBRATED,
))
register(Scheme(
    name="int4-awq",
    summary="AWQ int4 (Lin et al.; torchao.prototype.awq's search on the tinygemm grid): needs [quality] "
            f"calibration activations (scales mean|x|^α, X pre-scaled at run time); {_SPEED_NOTE}",
    options_model=AwqOptions, build=_cal("build_awq"), emulate=_cal("emulate_awq"), needs_calibration=True,
    **_CALIBRATED,
))

# mslk kernels (the mslk-cuda package, SM90): torchao 0.18's default int4 path and FP8 x int4
register(Scheme(
    name="int4-plain", family="weight-only", weight_dtype="int4 (2 per int8, plain)", compute_dtype="bf16",
    nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, plain packing (torchao's default): int4 per-group asymmetric, bf16 scale "
            "and zero point; mslk CUTLASS bf16i4bf16_rowwise (needs mslk-cuda, SM90)",
    options_model=MslkGroupOptions, k_multiple=group_size, shard=PER_GROUP,
    build=_ao("build_int4_plain"), emulate=_ao("_emulate_int4_mslk"), extra_check=_ao("mslk_int4_check"), **_MSLK_TUNED,
))
register(Scheme(
    name="int4-preshuffled", family="weight-only", weight_dtype="int4 (2 per int8, mslk preshuffled)",
    compute_dtype="bf16", nominal_bits=4,
    summary="torchao Int4WeightOnlyConfig, preshuffled packing: int4 per-group asymmetric in mslk's WGMMA load order, "
            "bf16 scale and zero point; mslk CUTLASS bf16i4bf16_shuffled (needs mslk-cuda, SM90)",
    options_model=MslkGroupOptions, k_multiple=group_size, shard=PER_GROUP,
    build=_ao("build_int4_preshuffled"), emulate=_ao("_emulate_int4_mslk"), extra_check=_ao("mslk_int4_check"),
    **_MSLK_TUNED,
))
register(Scheme(
    name="fp8-int4", family="dynamic", weight_dtype="int4 (2 per int8, symmetric)", compute_dtype="fp8",
    nominal_bits=4,
    summary="torchao Float8DynamicActivationInt4WeightConfig: symmetric int4 weight (group 128, fp8 group scales, "
            "fp32 row scales), per-row dynamic FP8 activations; mslk f8i4bf16_shuffled (needs mslk-cuda, SM90)",
    options_model=Fp8Int4Options, k_multiple=_fixed_128,
    shard=Sharding(
        column=ShardRule(True, "per-group int4 scales along K and (preshuffled) per-row FP8 scales split with N; "
                               "per-token activation scales are over all of K on every rank"),
        row=ShardRule(True, "groups of 128 along K stay whole; preshuffled: the per-row FP8 scale of the weight is "
                            "taken over each rank's K/p columns",
                      multiple=_fixed_128, why_multiple="torchao's fixed group size 128",
                      same_as_slice=lambda options: options.int4_packing_format == "plain")),
    build=_ao("build_fp8_int4"), emulate=_ao("_emulate_fp8_int4"), extra_check=_ao("mslk_fp8_int4_check"), **_MSLK,
))

# --- bitsandbytes --------------------------------------------------------------------------------

register(Scheme(
    name="int8-bnb", library="bitsandbytes", family="bnb", weight_dtype="int8", activation_dtype="float16",
    compute_dtype="int8", nominal_bits=8, packages=("bitsandbytes",),
    summary="bitsandbytes Linear8bitLt (LLM.int8): int8 weight, per-row absmax, fp16 outlier columns above threshold",
    options_model=Int8BnbOptions,
    shard=Sharding(
        column=ShardRule(True, "per-row absmax (SCB) split with N; outlier columns of X are seen by every rank"),
        row=ShardRule(True, "per-row absmax (SCB) over each rank's K/p columns; outlier columns are partitioned",
                      same_as_slice=lambda options: False)),
    build=_bnb("_build_int8"), parts=_bnb("int8_parts"), emulate=_bnb("_emulate_int8"),
))
_FOUR_BIT = Sharding(
    column=ShardRule(True, "absmax per block of the row-major weight: N/p whole rows hold whole blocks; "
                           "double-quantization statistics are recomputed per shard",
                     same_as_slice=no_double_quant),
    row=ShardRule(True, "absmax per block along each row: K/p must hold whole blocks; double-quantization "
                        "statistics are recomputed per shard",
                  multiple=_blocksize, why_multiple="blocksize", same_as_slice=no_double_quant))
for _qt in ("nf4", "fp4"):
    register(Scheme(
        name=f"{_qt}-bnb", library="bitsandbytes", family="bnb", weight_dtype=f"{_qt} (2 per uint8)",
        activation_dtype="bfloat16", compute_dtype="bf16", nominal_bits=4, packages=("bitsandbytes",),
        summary=f"bitsandbytes Linear4bit {_qt.upper()}: block size 64, absmax per block, double quantization on; "
                "compute_dtype bf16 (fp16, or fp32: the slow path, no tensor-core 4-bit kernel)",
        options_model=FourBitOptions, k_multiple=_blocksize, shard=_FOUR_BIT,
        build=_bnb(f"build_{_qt}"), parts=_bnb("four_bit_parts"), emulate=_bnb(f"emulate_{_qt}"),
    ))

# --- gemlite -------------------------------------------------------------------------------------

#: gemlite's autotune configs, kept per gemlite / Triton version and GPU (:mod:`qbench.schemes.tuning_cache`).
GEMLITE_TUNING = TuningCache(library="gemlite", version=_gl("_cache_version"), load=_gl("_cache_load"),
                             save=_gl("_cache_save"))
_GL = dict(library="gemlite", packages=("gemlite",), activation_dtype="bfloat16", cuda_only=True,
           tuning_cache=GEMLITE_TUNING, parts=_gl("gemlite_parts"))
_GEMLITE_PER_ROW = Sharding(
    PER_ROW_COLUMN,
    ShardRule(True, "per-row scales over K: each row shard takes the absmax of its own K/p columns",
              multiple=_gemlite_min_k, why_multiple="gemlite's in_features multiple of 32",
              same_as_slice=lambda options: False))

register(Scheme(
    name="int4-weight-only-gemlite", family="weight-only", weight_dtype="uint4 (8 per int32)", compute_dtype="bf16",
    nominal_bits=4,
    summary="gemlite A16W4 (GemLiteLinearTriton, 4-bit grouped): min-max asymmetric int4 per group, bf16 scale and "
            "zero; Triton GEMV (RevSplit-K) at M <= 4, split-K GEMM below 64, GEMM above",
    options_model=GemliteInt4Options, k_multiple=group_size, shard=Sharding(GROUP_COLUMN, GROUP_ROW),
    build=_gl("_build_int4"), emulate=_gl("_emulate_int4"), min_compute_capability=(8, 0), **_GL,
))
register(Scheme(
    name="int8-weight-only-gemlite", family="weight-only", weight_dtype="int8", compute_dtype="bf16", nominal_bits=8,
    summary="gemlite A16W8_INT8: int8 weight, fp32 per-row scale, bf16 activations; Triton split-K GEMV at M <= 2",
    k_multiple=_gemlite_min_k, shard=_GEMLITE_PER_ROW,
    build=_gl("build_int8"), emulate=_gl("emulate_int8"), min_compute_capability=(8, 0), **_GL,
))
register(Scheme(
    name="fp8-weight-only-gemlite", family="weight-only", weight_dtype="float8_e4m3fn", compute_dtype="bf16",
    nominal_bits=8,
    summary="gemlite A16W8_FP8: e4m3 weight, fp32 per-row scale, bf16 activations; Triton split-K GEMV at M <= 2",
    k_multiple=_gemlite_min_k, shard=_GEMLITE_PER_ROW,
    build=_gl("build_fp8"), emulate=_gl("emulate_fp8"), min_compute_capability=(8, 9), **_GL,
))
register(Scheme(
    name="fp8-dynamic-gemlite", family="dynamic", weight_dtype="float8_e4m3fn", compute_dtype="fp8", nominal_bits=8,
    summary="gemlite A8W8_fp8_dynamic: e4m3 weight (fp32 per-row scale), per-token dynamic e4m3 activations "
            "(Triton quantize kernel), FP8 Triton GEMV / GEMM",
    k_multiple=_gemlite_min_k,
    shard=Sharding(
        column=ShardRule(True, "per-row weight scales split with N; per-token activation scales are over all of K on "
                               "every rank"),
        row=ShardRule(True, "weight and per-token activation scales are taken over each rank's K/p columns",
                      multiple=_gemlite_min_k, why_multiple="gemlite's in_features multiple of 32",
                      same_as_slice=lambda options: False)),
    build=_gl("build_fp8_dynamic"), emulate=_gl("_emulate_fp8_dynamic"), min_compute_capability=(8, 9), **_GL,
))
