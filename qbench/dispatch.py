"""Classify which code path a quantized linear layer took, from its GPU kernel names.

Labels (the row's ``dispatch.label``):

- ``fused-quantized``: some kernel reads the quantized weight directly (a quantized GEMM
  or GEMV, or a torch.compile Triton kernel for a quantized family).
- ``dequantize+gemm``: a separate non-GEMM kernel (the dequantization, usually an
  elementwise or ``kDequantize*`` kernel) plus a float GEMM: the weight is written back
  to memory in float and read again.
- ``float-gemm``: only float GEMM kernels (plus, for a non-float family, nothing else:
  the quantized weight was not touched in this call, so it must have been dequantized
  and cached earlier; the row's bytes then overstate the saving).
- ``unknown``: no recognizable GEMM.

The name patterns (case-insensitive regular expressions below) come from the kernel
names torch.profiler shows for: PyTorch's tinygemm int4 kernel
(``_weight_int4pack_mm`` / ``tinygemm_*``, aten/src/ATen/native/cuda/int4mm.cu),
cuBLAS / cuBLASLt (``sm90_xmma_gemm_<types>_...``, ``nvjet_<typecode>_...``,
``gemv2T_kernel``, ``splitKreduce_kernel``), CUTLASS (``cutlass::Kernel2<cutlass_80_
wmma_tensorop_bf16_s161616gemm...>``, int8 ``i16832gemm``), Inductor (``triton_poi_``,
``triton_red_``, ``triton_per_``, ``triton_tem_fused_mm``) and bitsandbytes
(``kgemm_4bit_inference*``, ``gemm_4bit_simt`` (seen on the H200, bnb 0.50), ``gemv_4bit``, ``kDequantizeBlockwise``,
``kInt8VectorQuant``), mslk's CUTLASS int4 GEMMs (``cutlass::int4b_t`` is ``integer_subbyte`` in
the mangled name) and gemlite's Triton kernels (``gemv_INT_revsplitK_kernel``,
``gemm_splitK_INT_kernel``: the function names in gemlite 0.6's ``triton_kernels``; neither of the
last two seen in a profile yet). They are heuristics: a new library version may rename kernels;
unmatched names fall to ``unknown``. The ``nvjet`` type code decoding (``q``/``e`` for
FP8, ``i`` for int8, ``h``/``s``/``t`` float) is inferred from observed names, not
documented by NVIDIA; check it against a profile on the GPU.
"""

from __future__ import annotations

import re
from typing import Iterable

FAMILIES = ("float", "weight-only", "dynamic", "bnb")
LABELS = ("fused-quantized", "dequantize+gemm", "float-gemm", "unknown")

#: Kernels that are quantized GEMMs/GEMVs by name alone.
_QUANT_GEMM_NAME = re.compile(
    r"_weight_int4pack_mm|int4pack|tinygemm|gemm_4bit|gemv_4bit|_int_mm|scaled_mm"
    r"|imma|igemm|i\d{4,6}gemm"
    # gemlite's Triton kernels (gemv_INT_revsplitK_kernel, gemm_splitK_INT_kernel, gemm_MX_kernel):
    # they read the packed or 8-bit weight themselves
    r"|gem[mv]\w*_(?:int|mx)_\w*kernel",
    re.IGNORECASE,
)
#: A quantized operand type in a GEMM-like name (cuBLAS "gemm_e4m3e4m3_...", cuBLASLt
#: "gemm_i8i8_...", CUTLASS "...gemm_e4m3_e4m3_f32..."). Alone it is not enough: a cast
#: kernel "elementwise_kernel<..., c10::Float8_e4m3fn>" is a dequantization, not a GEMM.
#: CUTLASS's int4 type is ``integer_subbyte<4, true>`` in a mangled name (mslk's int4 GEMMs), and
#: its mixed-input mainloops say ``MixedInput``.
_QUANT_TYPE = re.compile(r"i8i8|s8s8|u8s8|s8u8|f8f8|e4m3|e5m2|fp8|float8|int8|int4|integer_subbyte|mixedinput",
                         re.IGNORECASE)
_GEMM_LIKE = re.compile(r"gemm|gemv|xmma|nvjet|cutlass|matmul|_mm\b|_mm_", re.IGNORECASE)

#: Float (or any) GEMM/GEMV library kernels.
_GEMM = re.compile(
    r"gemm|gemv|xmma|nvjet|cutlass|cublas|splitkreduce|wmma|hmma|dot_kernel",
    re.IGNORECASE,
)
_NVJET_CODE = re.compile(r"nvjet_(?:sm\d+_)?([a-z]+)_", re.IGNORECASE)
_TRITON = re.compile(r"^(void\s+)?triton_", re.IGNORECASE)
_TRITON_MM = re.compile(r"mm|dot|tem_", re.IGNORECASE)
_COPY_OR_SET = re.compile(r"^(memcpy|memset)", re.IGNORECASE)


def _nvjet_is_quantized(name: str) -> bool:
    m = _NVJET_CODE.search(name)
    return bool(m) and any(c in m.group(1).lower() for c in "qei")


def is_quantized_gemm(name: str) -> bool:
    """True for a kernel that multiplies with a quantized (int4/int8/fp8) operand."""
    if _QUANT_GEMM_NAME.search(name) or _nvjet_is_quantized(name):
        return True
    return bool(_QUANT_TYPE.search(name)) and bool(_GEMM_LIKE.search(name))


def is_float_gemm(name: str) -> bool:
    """True for a library GEMM/GEMV kernel that is not a quantized one."""
    return bool(_GEMM.search(name)) and not is_quantized_gemm(name)


def is_triton(name: str) -> bool:
    """True for an Inductor/Triton kernel name (``triton_...``)."""
    return bool(_TRITON.search(name))


def classify_dispatch(kernel_names: Iterable[str], scheme_family: str) -> str:
    """Label the code path from the GPU work item names of one call.

    Rules, in order (memcpy/memset items are ignored):
    1. no kernels -> ``unknown``;
    2. a quantized GEMM/GEMV (:func:`is_quantized_gemm`) -> ``fused-quantized``;
    3. a Triton kernel whose name has ``mm``/``dot``/``tem_``, or Triton kernels only:
       ``float-gemm`` for the float family, else ``fused-quantized`` (Inductor fused the
       dequantization into the matmul or reduction);
    4. a float GEMM: ``float-gemm`` for the float family or when it is the only kind of
       kernel; ``dequantize+gemm`` when another kernel ran beside it;
    5. otherwise ``unknown``.

    Args:
        kernel_names: names as torch.profiler reports them (any order, duplicates ok).
        scheme_family: one of FAMILIES: "float", "weight-only", "dynamic", "bnb".

    Returns:
        one of LABELS.

    Raises:
        ValueError: unknown scheme_family (value in the message).
    """
    if scheme_family not in FAMILIES:
        raise ValueError(f"classify_dispatch: scheme_family must be one of {FAMILIES}, got {scheme_family!r}")
    names = [n for n in kernel_names if n and not _COPY_OR_SET.search(n.strip())]
    if not names:
        return "unknown"
    if any(is_quantized_gemm(n) for n in names):
        return "fused-quantized"
    triton = [n for n in names if is_triton(n)]
    if any(_TRITON_MM.search(n) for n in triton) or len(triton) == len(names):
        return "float-gemm" if scheme_family == "float" else "fused-quantized"
    gemms = [n for n in names if is_float_gemm(n)]
    if gemms:
        if scheme_family == "float" or len(gemms) == len(names):
            return "float-gemm"
        return "dequantize+gemm"
    return "unknown"
