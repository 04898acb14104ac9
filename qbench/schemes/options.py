"""The options a scheme takes, as pydantic models, and the registry's torch-free errors.

A scheme's declaration (:mod:`qbench.schemes.catalog`) names its options model from here; the
scenario loader validates a ``[[schemes]]`` table against it with the bad key and value named
(strict: no coercion of strings to numbers or booleans).
"""

from __future__ import annotations

import difflib
import os
import unicodedata
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class UnknownSchemeError(KeyError):
    """A scheme name that is not registered; the message suggests the closest names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def unknown(name: str, known: list[str]) -> UnknownSchemeError:
    """The error for ``name``, with the closest of ``known`` (difflib, cutoff 0.5) as a hint."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:  # the hint alone keeps the line short; `qbench list` has the rest
        return UnknownSchemeError(f"unknown scheme {name!r}; did you mean {', '.join(close)}? (`qbench list` names all "
                                  f"{len(known)})")
    return UnknownSchemeError(f"unknown scheme {name!r} (known: {', '.join(known)})")


class SchemeOptions(BaseModel):
    """Options every scheme takes.

    Attributes:
        mode: ``"eager"`` runs the module as built; ``"compiled"`` wraps it in ``torch.compile``
            (compiled before timing; recompilations are counted in the row).
        label: the row's ``scheme`` label; default ``name`` or ``name+compiled``.
    """

    # strict: a TOML string is never coerced to a number or a bool (threshold = "6", double_quant =
    # "off" are refused like seed = "7"); an integer is still accepted for a float option.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    mode: Literal["eager", "compiled"] = "eager"
    label: Optional[str] = Field(default=None, min_length=1, max_length=64)

    @field_validator("label")
    @classmethod
    def _printable(cls, value: Optional[str]) -> Optional[str]:
        """A label is printed in every table and written into CSV, Markdown and HTML: no control
        character (terminal escapes, newlines), no ``|`` (a Markdown table's cell border), no ``<``,
        ``>`` or backtick (markup), and no ``=``, ``+``, ``-`` or ``@`` first (a spreadsheet formula)."""
        if value is None:
            return value
        bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") or c in "|<>`"), None)
        if bad is not None:
            raise ValueError(f"must be printable text without control characters, '|', '<', '>' or '`' "
                             f"(it is printed in tables), found {bad!r}")
        if value[0] in "=+-@":
            raise ValueError(f"must not start with {value[0]!r} (a spreadsheet would read it as a formula)")
        return value


# --- torchao ---------------------------------------------------------------------------------------

class TorchaoOptions(SchemeOptions):
    """Options every torchao scheme takes: ``activation_dtype``, the float dtype of the layer
    (its activations, its output, and its float scales and zero points): ``bf16`` (default) or
    ``fp16``. Kernels that take bf16 only make an fp16 row ``skipped`` with the constraint in the
    reason (tinygemm int4, mslk int4, mslk FP8 GEMM). qbench feeds every torchao scheme bf16
    activations, so an fp16 layer converts them first (``torchao_schemes.CastInputLinear``: one
    cast kernel inside the timed call); the row's ``activation_dtype`` field still says bfloat16
    (the dtype handed to the layer)."""

    activation_dtype: Literal["bf16", "fp16"] = "bf16"


class Fp8DynamicOptions(TorchaoOptions):
    """Options of ``fp8-dynamic``: ``granularity`` of the activation and weight scales, and
    ``kernel_preference``: torchao's ``KernelPreference`` for the activation quantization and the
    GEMM. ``torch`` (the default here): eager aten ops quantize the activation (abs, amax, divide,
    clamp, cast, scale: 8 kernels around the GEMM) and ``torch._scaled_mm`` (cuBLAS) multiplies. ``mslk``: one Triton
    kernel quantizes per row and mslk's CUTLASS ``f8f8bf16_rowwise`` multiplies (needs the
    ``mslk-cuda`` package and SM90+). torchao's own default, AUTO, silently picks mslk when that
    package is importable, so a row's kernels would depend on what happens to be installed; qbench
    asks for one explicitly (the two differ in speed several-fold at M = 1)."""

    granularity: Literal["per-row", "per-tensor"] = "per-row"
    kernel_preference: Literal["torch", "mslk"] = "torch"


class Fp8Int4Options(TorchaoOptions):
    """Options of ``fp8-int4``: ``int4_packing_format``, the weight layout torchao's
    ``Float8DynamicActivationInt4WeightConfig`` builds: ``preshuffled`` (default; torchao's
    default too: ``Int4PreshuffledTensor``, mslk ``f8i4bf16_shuffled``) or ``plain``
    (``Int4Tensor``, mslk ``f8i4bf16_rowwise``). The group size is fixed at 128 by torchao."""

    int4_packing_format: Literal["preshuffled", "plain"] = "preshuffled"


class GroupOptions(TorchaoOptions):
    """Options of the per-group int4 schemes: ``group_size`` (K elements sharing one scale) and
    ``activation_dtype`` (:class:`TorchaoOptions`)."""

    group_size: Literal[32, 64, 128, 256] = 128


class MslkGroupOptions(TorchaoOptions):
    """Options of ``int4-plain`` and ``int4-preshuffled``: ``group_size`` 128 (default) or 256:
    mslk's int4 quantizer documents "must be at least 128" (``mslk.quantize.shuffle.
    quantize_int4_preshuffle``), and torchao says of its FP8 x int4 config that the kernel
    "only supports 128 and above"; and ``activation_dtype`` (bf16 only: fp16 is a skipped row)."""

    group_size: Literal[128, 256] = 128


class IntxOptions(GroupOptions):
    """Options of ``int4-intx``: group size and ``mapping`` (symmetric stores zero points of 0)."""

    mapping: Literal["symmetric", "asymmetric"] = "symmetric"


class CalibratedGroupOptions(TorchaoOptions):
    """Options of the calibrated int4 schemes (``int4-hqq``, ``int4-gptq``, ``int4-awq``, tinygemm's
    grid): ``group_size`` 128 (default) or 64 (K elements sharing one scale and zero point; the
    sizes GPTQ and AWQ checkpoints ship), and ``activation_dtype`` (bf16 only: tinygemm). ``fp16``
    is refused when the scenario is read, not made a skipped row as on ``int4-weight-only``: the
    quality job would find out only after collecting the calibration activations."""

    group_size: Literal[64, 128] = 128

    @field_validator("activation_dtype")
    @classmethod
    def _bf16(cls, value: str) -> str:
        if value != "bf16":
            raise ValueError("must be 'bf16': tinygemm (aten._weight_int4pack_mm), the calibrated int4 schemes' "
                             "kernel and emulation, takes bf16 only")
        return value


class GptqOptions(CalibratedGroupOptions):
    """Options of ``int4-gptq``: ``damp``, the dampening added to H's diagonal as a share of its mean
    (GPTQ's ``percdamp``; torchao's and the paper's default 0.01)."""

    damp: float = Field(default=0.01, gt=0.0, le=1.0)


class AwqOptions(CalibratedGroupOptions):
    """Options of ``int4-awq``: ``grid``, the number of exponents α = 0, 1/grid, ... searched for the
    scales mean|x|^α (torchao's ``scale_search_space_size``, default 20)."""

    grid: int = Field(default=20, ge=2, le=100)


# --- bitsandbytes ----------------------------------------------------------------------------------

class Int8BnbOptions(SchemeOptions):
    """Options of ``int8-bnb``: ``threshold``, the outlier magnitude above which an activation
    column is computed in fp16 (0 disables the decomposition)."""

    threshold: float = Field(default=6.0, ge=0.0)


class FourBitOptions(SchemeOptions):
    """Options of the bitsandbytes 4-bit schemes: ``blocksize`` (weights per absmax),
    ``double_quant`` (quantize the absmax values too; bitsandbytes' ``compress_statistics``) and
    ``compute_dtype`` (``Linear4bit``'s ``compute_dtype``, transformers' ``bnb_4bit_compute_dtype``):
    ``bf16`` (default), ``fp16`` or ``fp32``.

    The layer still takes and returns bf16 (the model's dtype): ``Linear4bit.forward`` converts X
    to the compute dtype and the output back (two elementwise kernels when they differ), and the
    4-bit kernel runs in the compute dtype. **fp32 is the slow path**, and bitsandbytes warns
    only when the input is fp16: in bitsandbytes 0.50 (``backends/cuda/ops.py``,
    ``_gemm_4bit_use_custom_cuda``) fp32 has no tensor-core (MMA) 4-bit kernel, so its own kernel
    (SIMT, fp32 activations) serves M < 8 only, and from M = 8 the weight is dequantized to fp32
    and multiplied by an fp32 GEMM, without tensor cores while TF32 is off (torch's default):
    fp32's 51 TFLOP/s on an H200 against bf16's ~990. The row's ``compute_dtype`` field still
    says bf16 (the scheme's declared dtype, whose peak bounds the roofline); the label says
    ``[compute_dtype=fp32]``."""

    blocksize: Literal[32, 64, 128, 256, 512, 1024, 2048, 4096] = 64
    double_quant: bool = True
    compute_dtype: Literal["bf16", "fp16", "fp32"] = "bf16"


# --- gemlite ---------------------------------------------------------------------------------------

class GemliteInt4Options(SchemeOptions):
    """Options of ``int4-weight-only-gemlite``: ``group_size``, K elements sharing one scale and
    zero point: 128 (default) or 64 (gemlite's README: any multiple of 32, with autotuning, on by
    default, below 128)."""

    group_size: Literal[64, 128] = 128


def plugins() -> list[str]:
    """The module paths ``QBENCH_PLUGINS`` names (comma-separated; blanks ignored)."""
    return [p.strip() for p in os.environ.get("QBENCH_PLUGINS", "").split(",") if p.strip()]
