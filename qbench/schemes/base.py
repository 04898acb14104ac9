"""What a scheme is: one registered unit that builds a linear layer from the FP32 weight.

A :class:`Scheme` says what it needs (CUDA, a compute capability, a package), how it builds the
layer, which of the layer's tensors are payload and which are metadata (the byte ledger counts
those real tensors, :mod:`qbench.schemes.ledger`), and which options it takes (a pydantic model, so a
scenario's options are validated at the edge with the bad key and value named).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional

import torch

from qbench.schemes.specs import SchemeOptions  # noqa: F401 - re-exported: torch-free, for scenario validation
from qbench.schemes.tuning_cache import TuningCache


@dataclass(frozen=True)
class TensorPart:
    """One tensor the layer stores, as counted by the byte ledger.

    Attributes:
        name: where it lives, e.g. ``weight.qdata`` or ``weight.quant_state.absmax``.
        role: ``"payload"`` (weight values), ``"metadata"`` (scales, zero points, absmax, code
            tables, nested statistics) or ``"bias"``.
        tensor: the tensor itself; its bytes are ``numel * element_size``.
    """

    name: str
    role: Literal["payload", "metadata", "bias"]
    tensor: torch.Tensor


@dataclass(frozen=True)
class Scheme:
    """A registered way to build and run the linear layer.

    Attributes:
        name: registry key, used in scenarios (``[[schemes]] name = "..."``).
        library: ``torch``, ``torchao`` or ``bitsandbytes``.
        summary: one line for ``qbench list``.
        family: ``float``, ``weight-only``, ``dynamic`` (dynamic activation quantization) or
            ``bnb``; used to read the kernels that ran (:mod:`qbench.dispatch`).
        weight_dtype: label of the stored weight values (e.g. ``"int4 (in int8)"``).
        activation_dtype: dtype the FP32 activations are converted to before the call.
        compute_dtype: the dtype whose peak bounds the math (``fp32``, ``tf32``, ``fp16``,
            ``bf16``, ``fp8``, ``int8``), a key of the ceilings tables.
        nominal_bits: the format's nominal bit width (a label, never used to count bytes).
        build: ``build(weight, bias, options) -> nn.Module``; ``weight`` is the FP32
            ``[N, K]`` weight on the target device, ``bias`` FP32 ``[N]`` or None.
        parts: ``parts(module) -> list[TensorPart]``: the tensors the built module stores.
        options_model: pydantic model of the scheme's options.
        packages: import names the scheme needs (a missing one makes the row ``skipped``).
        cuda_only: the scheme has no CPU kernel.
        min_compute_capability: lowest CUDA compute capability, e.g. ``(8, 9)`` for FP8.
        n_multiple: ``n_multiple(options) -> int``: out_features must be a multiple of this
            (checked when the scenario is read, like ``k_multiple``).
        k_multiple: ``k_multiple(options) -> int``: in_features must be a multiple of this
            (group size, block size); 1 when there is no constraint.
        worker_env: environment variables set (str) or removed (None) in the scheme's worker
            process, e.g. ``NVIDIA_TF32_OVERRIDE=0`` to force strict FP32 in cuBLAS.
        extra_check: ``extra_check(device, options) -> reason | None`` for anything else.
        m_check: ``m_check(m, device, options) -> reason | None``: a kernel that cannot take this M
            (the row at that M is ``skipped`` with the reason; the other M still run).
        storage_format: the storage format the weight is counted under when kernels of one
            format are compared (``qbench recommend --by-format``): one of
            :data:`STORAGE_FORMATS`; ``None`` (the default) derives it from ``weight_dtype``
            (:func:`storage_format_of`). Set it only for a label that function cannot read.
            (``dataclasses.replace`` with a new ``weight_dtype`` keeps the old format unless it
            passes ``storage_format=None`` too.)
        tuning_cache: a :class:`qbench.schemes.tuning_cache.TuningCache` for a library that autotunes its
            kernels on the first call (gemlite): tuned configs are read before the build and saved
            after measuring, so later runs on this GPU skip the tuning. None: nothing kept.
        emulate: ``emulate(weight, bias, options) -> nn.Module`` (same arguments as ``build``): the
            kernel's arithmetic without the kernel, for a device that has none (the quality job's
            CPU rows): the weight quantized by the library's rule and dequantized, the activations
            converted to the kernel's input dtype and, for dynamic-activation schemes, quantized and
            dequantized as the kernel does, the matmul in float32, the result cast to the real
            layer's output dtype. Plain torch, CPU or CUDA (:mod:`qbench.schemes.emulate`). Raises
            ``ValueError`` for options the kernel refuses everywhere. None: no emulation.
    """

    name: str
    library: str
    summary: str
    family: str
    weight_dtype: str
    activation_dtype: torch.dtype
    compute_dtype: str
    nominal_bits: float
    build: Callable[[torch.Tensor, Optional[torch.Tensor], SchemeOptions], torch.nn.Module]
    parts: Callable[[torch.nn.Module], list[TensorPart]]
    options_model: type[SchemeOptions] = SchemeOptions
    packages: tuple[str, ...] = ()
    cuda_only: bool = False
    min_compute_capability: Optional[tuple[int, int]] = None
    k_multiple: Callable[[SchemeOptions], int] = field(default=lambda options: 1)
    n_multiple: Callable[[SchemeOptions], int] = field(default=lambda options: 1)
    worker_env: dict = field(default_factory=dict)
    extra_check: Optional[Callable[[torch.device, SchemeOptions], Optional[str]]] = None
    storage_format: Optional[str] = None
    m_check: Optional[Callable[[int, torch.device, SchemeOptions], Optional[str]]] = None
    tuning_cache: Optional[TuningCache] = None
    emulate: Optional[Callable[[torch.Tensor, Optional[torch.Tensor], SchemeOptions], torch.nn.Module]] = None

    def __post_init__(self) -> None:
        if self.storage_format is None:
            object.__setattr__(self, "storage_format", storage_format_of(self.weight_dtype))
        elif self.storage_format not in STORAGE_FORMATS:
            raise ValueError(f"scheme {self.name!r}: storage_format {self.storage_format!r} is not one of "
                             f"{', '.join(STORAGE_FORMATS)}")

    def unavailable_reason(self, device: torch.device, options: SchemeOptions) -> Optional[str]:
        """One line saying why this scheme cannot run on ``device`` here, or None if it can. A
        CUDA-only scheme on the CPU says so before any missing package: installing the package
        would not make it run there."""
        if device.type != "cuda" and self.cuda_only:
            return f"{self.name} has no CPU kernel: needs CUDA"
        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                return f"package {package!r} is not installed (pip install {package})"
        if device.type != "cuda":
            if self.cuda_only:
                return f"{self.name} has no CPU kernel: needs CUDA"
        else:
            if not torch.cuda.is_available():
                return "CUDA is not available"
            if self.min_compute_capability is not None:
                cc = torch.cuda.get_device_capability(device)
                if tuple(cc) < self.min_compute_capability:
                    need = ".".join(map(str, self.min_compute_capability))
                    return f"needs compute capability >= {need}, device has {cc[0]}.{cc[1]}"
        if self.extra_check is not None:
            return self.extra_check(device, options)
        return None

    def emulated_build(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                       options: Optional[SchemeOptions] = None) -> torch.nn.Module:
        """The emulated layer (:attr:`emulate`) of FP32 ``weight`` [N, K] and ``bias`` [N] on their
        device, built without autograd; ``options`` default to the scheme's defaults.

        Raises:
            NotImplementedError: the scheme has no emulation.
            ValueError: options the kernel refuses everywhere (e.g. fp16 for a bf16-only kernel).
        """
        if self.emulate is None:
            raise NotImplementedError(f"scheme {self.name!r} has no emulation")
        options = self.options_model() if options is None else options
        with torch.no_grad():
            return self.emulate(weight, bias, options)

    def m_reason(self, m: int, device: torch.device, options: SchemeOptions) -> Optional[str]:
        """One line saying why the row at ``m`` cannot run on ``device`` (:attr:`m_check`), or None."""
        return None if self.m_check is None else self.m_check(m, device, options)


#: The storage formats of :func:`storage_format_of`, in the order ``--by-format`` lists them: the
#: quantized formats first, then the float references; ``other`` for a label it cannot read.
STORAGE_FORMATS = ("8-bit float", "8-bit int", "4-bit int", "4-bit float", "16-bit float",
                   "32-bit float", "other")

#: Leading token of a ``weight_dtype`` label -> storage format. NF4 (NormalFloat: 16 levels at the
#: quantiles of a normal distribution, read through a code table) counts as a 4-bit float, as
#: bitsandbytes and the QLoRA paper class it, beside FP4 (e2m1).
_FORMAT_OF_TOKEN = (
    (re.compile(r"(float|fp)32|tf32"), "32-bit float"),
    (re.compile(r"(b?float|b?fp|bf)16|half"), "16-bit float"),
    (re.compile(r"(float|fp)8|e4m3|e5m2"), "8-bit float"),
    (re.compile(r"u?int8"), "8-bit int"),
    (re.compile(r"u?int4"), "4-bit int"),
    (re.compile(r"nf4|(float|fp)4|e2m1|mxfp4|nvfp4"), "4-bit float"),
)


def storage_format_of(weight_dtype: Optional[str]) -> str:
    """The storage format of a ``weight_dtype`` label, read from its first word: ``float8_e4m3fn``
    -> ``8-bit float``, ``int8`` -> ``8-bit int``, ``int4 (tinygemm packed int32)`` and ``int4 (in
    int8)`` -> ``4-bit int``, ``nf4 (2 per uint8)`` and ``fp4 (2 per uint8)`` -> ``4-bit float``,
    ``bfloat16`` / ``float16`` -> ``16-bit float``, ``float32`` -> ``32-bit float``; anything else
    (or ``None``) -> ``other``. The words in parentheses describe the container, not the format."""
    token = str(weight_dtype or "").strip().lower().split(" ", 1)[0].split("(", 1)[0]
    token = token.removeprefix("torch.")
    for pattern, fmt in _FORMAT_OF_TOKEN:
        if pattern.fullmatch(token) or pattern.fullmatch(token.split("_", 1)[0]):
            return fmt
    return "other"


def linear_parts(module: torch.nn.Module) -> list[TensorPart]:
    """Ledger parts of a plain ``nn.Linear``: the whole weight is payload; no metadata."""
    parts = [TensorPart("weight", "payload", module.weight.detach())]
    return parts + bias_parts(module)


def bias_parts(module: torch.nn.Module) -> list[TensorPart]:
    """The bias of a linear module as a ledger part, or nothing when it has none."""
    bias = getattr(module, "bias", None)
    return [] if bias is None else [TensorPart("bias", "bias", bias.detach())]


def plain_linear(weight: torch.Tensor, bias: Optional[torch.Tensor], dtype: torch.dtype) -> torch.nn.Linear:
    """An ``nn.Linear`` holding ``weight`` ([N, K]) and ``bias`` converted to ``dtype``, on their device."""
    n, k = weight.shape
    layer = torch.nn.Linear(k, n, bias=bias is not None, device="meta")
    layer.weight = torch.nn.Parameter(weight.detach().to(dtype).clone(), requires_grad=False)
    if bias is not None:
        layer.bias = torch.nn.Parameter(bias.detach().to(dtype).clone(), requires_grad=False)
    return layer.eval()
