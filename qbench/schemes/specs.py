"""What a scenario needs to know about a scheme, without torch: its name, its options (a pydantic
model) and the multiples K and N must be (group size, block size, kernel constraint).

``qbench check`` and ``qbench run``'s first step validate a scenario from these alone, so a typo is
answered in a fraction of a second, before anything imports torch (a torch import is 2-3 s on a
quiet machine, 13-48 s on a loaded 2-core one). The scheme modules (``float_schemes``,
``torchao_schemes``, ``bnb_schemes``, ``gemlite_schemes``) register the full :class:`Scheme`
with ``**spec(name)``, so the options model and the multiples exist in one place.

A scheme of a ``QBENCH_PLUGINS`` module has no entry here; :func:`lookup` then loads the full
registry (which imports torch) to find it.

Adding a scheme: its entry in :data:`SPECS` here, its ``register(Scheme(**spec(name), ...))`` in a
scheme module (``tests/test_schemes.py`` checks that the two lists agree).
"""

from __future__ import annotations

import difflib
import os
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class UnknownSchemeError(KeyError):
    """A scheme name that is not registered; the message suggests the closest names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def unknown(name: str, known: list[str]) -> UnknownSchemeError:
    """The error for ``name``, with the closest of ``known`` (difflib, cutoff 0.5) as a hint."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return UnknownSchemeError(f"unknown scheme {name!r}{hint} (known: {', '.join(known)})")


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


#: ``GemLiteLinearTriton.MIN_SIZE``: in_features must be a multiple of 32.
GEMLITE_MIN_K = 32


def _one(options) -> int:
    return 1


def _group_size(options) -> int:
    return options.group_size


def _blocksize(options) -> int:
    return options.blocksize


def _multiple_of_16(options) -> int:
    """FP8 GEMMs (``torch._scaled_mm``, cuBLASLt; mslk's rowwise GEMM) need K and N multiples of 16;
    torchao 0.18's ``quantize_`` silently leaves other shapes unquantized."""
    return 16


def _gemlite_min_k(options) -> int:
    return GEMLITE_MIN_K


def _fixed_128(options) -> int:
    """fp8-int4: torchao fixes the group size at 128."""
    return 128


@dataclass(frozen=True)
class SchemeSpec:
    """The torch-free part of a scheme: ``name``, ``options_model``, and ``k_multiple(options)`` /
    ``n_multiple(options)``, the numbers in_features (K) and out_features (N) must be multiples of."""

    name: str
    options_model: type[SchemeOptions] = SchemeOptions
    k_multiple: Callable[[SchemeOptions], int] = field(default=_one)
    n_multiple: Callable[[SchemeOptions], int] = field(default=_one)


def _specs(*entries: SchemeSpec) -> dict[str, SchemeSpec]:
    return {s.name: s for s in entries}


#: Every built-in scheme, in registration order (float, torchao, bitsandbytes, gemlite).
SPECS: dict[str, SchemeSpec] = _specs(
    SchemeSpec("fp32"), SchemeSpec("tf32"), SchemeSpec("fp16"), SchemeSpec("bf16"),
    SchemeSpec("fp8-weight-only", TorchaoOptions),
    SchemeSpec("fp8-dynamic", Fp8DynamicOptions, _multiple_of_16, _multiple_of_16),
    SchemeSpec("int8-weight-only", TorchaoOptions),
    SchemeSpec("w8a8-dynamic", TorchaoOptions),
    SchemeSpec("int4-weight-only", GroupOptions, _group_size),
    SchemeSpec("int4-intx", IntxOptions, _group_size),
    SchemeSpec("int4-plain", MslkGroupOptions, _group_size),
    SchemeSpec("int4-preshuffled", MslkGroupOptions, _group_size),
    SchemeSpec("fp8-int4", Fp8Int4Options, _fixed_128),
    SchemeSpec("int8-bnb", Int8BnbOptions),
    SchemeSpec("nf4-bnb", FourBitOptions, _blocksize),
    SchemeSpec("fp4-bnb", FourBitOptions, _blocksize),
    SchemeSpec("int4-weight-only-gemlite", GemliteInt4Options, _group_size),
    SchemeSpec("int8-weight-only-gemlite", SchemeOptions, _gemlite_min_k),
    SchemeSpec("fp8-weight-only-gemlite", SchemeOptions, _gemlite_min_k),
    SchemeSpec("fp8-dynamic-gemlite", SchemeOptions, _gemlite_min_k),
)


def spec(name: str) -> dict:
    """``Scheme(**spec(name), ...)``'s torch-free fields of built-in scheme ``name``: ``name``,
    ``options_model``, ``k_multiple``, ``n_multiple``.

    Raises:
        KeyError: ``name`` is not in :data:`SPECS`."""
    s = SPECS[name]
    return {"name": s.name, "options_model": s.options_model, "k_multiple": s.k_multiple, "n_multiple": s.n_multiple}


def plugins() -> list[str]:
    """The module paths ``QBENCH_PLUGINS`` names (comma-separated; blanks ignored)."""
    return [p.strip() for p in os.environ.get("QBENCH_PLUGINS", "").split(",") if p.strip()]


def lookup(name: str) -> SchemeSpec:
    """The spec of scheme ``name``: a built-in one from :data:`SPECS` (no torch import); any other
    from the registry (a scheme registered in this process, or by a ``QBENCH_PLUGINS`` module: then
    the full registry is loaded, which imports torch and the plugins).

    Raises:
        UnknownSchemeError: no such scheme, with the closest names.
        qbench.schemes.PluginError: a plugin module cannot be imported or registers a name twice.
    """
    if name in SPECS:
        return SPECS[name]
    from qbench import schemes

    scheme = schemes._REGISTRY.get(name)
    if scheme is None and plugins():
        scheme = schemes.get(name)
    if scheme is None:
        raise unknown(name, list(dict.fromkeys([*SPECS, *schemes._REGISTRY])))
    return SchemeSpec(scheme.name, scheme.options_model, scheme.k_multiple, scheme.n_multiple)
