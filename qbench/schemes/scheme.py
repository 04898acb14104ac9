"""What a scheme is, without torch: one record that declares everything about a scheme in one place.

A :class:`Scheme` names what it needs (CUDA, a compute capability, a package), which options it
takes (a pydantic model, so a scenario's options are validated at the edge with the bad key and
value named), the multiples K and N must be, how its layout shards for tensor parallelism
(:class:`~qbench.schemes.shard_rule.Sharding`), how it builds the layer and which of the layer's
tensors are payload and which metadata (the byte ledger counts those real tensors,
:mod:`qbench.schemes.ledger`).

The torch code a scheme runs (``build``, ``parts``, ``emulate``, the checks) is named by
:class:`Impl` (module and attribute) and imported on first call, so a record, the registry and the
scenario validation that reads a scheme's options never import torch (a torch import is seconds).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from qbench.schemes.shard_rule import Sharding
from qbench.schemes.options import SchemeOptions
from qbench.schemes.tuning_cache import TuningCache

#: The folder that holds the ``qbench`` package: put first on a worker's ``PYTHONPATH`` so the
#: worker imports this checkout's qbench, whatever is installed.
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent.parent)


@dataclass(frozen=True)
class Impl:
    """A function of a torch module, named and imported when first called: ``Impl(module, attr)(*args)``
    is ``getattr(import_module(module), attr)(*args)``. Pickles as its two names."""

    module: str
    attr: str

    def __call__(self, *args, **kwargs):
        return getattr(importlib.import_module(self.module), self.attr)(*args, **kwargs)


def impl(module: str) -> Callable[[str], Impl]:
    """``impl("qbench.schemes.x")("f")`` -> :class:`Impl` of ``qbench.schemes.x.f``."""
    return lambda attr: Impl(module, attr)


class _TorchDType:
    """The data descriptor of :attr:`Scheme.activation_dtype`: declared as a ``torch.dtype`` or its
    name (``"bfloat16"``, torch-free), read back as the ``torch.dtype`` (importing torch then)."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, obj, objtype=None):
        if obj is None:
            raise AttributeError("activation_dtype has no default")  # dataclasses: a required field
        value = obj.__dict__[self.slot]
        if isinstance(value, str):
            import torch

            return getattr(torch, value)
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


def _one(options) -> int:
    return 1


@dataclass(frozen=True, eq=False)
class Scheme:
    """A registered way to build and run the linear layer, declared once.

    Attributes:
        name: registry key, used in scenarios (``[[schemes]] name = "..."``).
        library: ``torch``, ``torchao``, ``bitsandbytes`` or ``gemlite``.
        summary: one line for ``qbench list``.
        family: ``float``, ``weight-only``, ``dynamic`` (dynamic activation quantization) or
            ``bnb``; used to read the kernels that ran (:mod:`qbench.dispatch`).
        weight_dtype: label of the stored weight values (e.g. ``"int4 (in int8)"``).
        activation_dtype: the ``torch.dtype`` the FP32 activations are converted to before the
            call; declared as a dtype or its name (``"bfloat16"``: no torch import until read).
        compute_dtype: the dtype whose peak bounds the math (``fp32``, ``tf32``, ``fp16``,
            ``bf16``, ``fp8``, ``int8``), a key of the ceilings tables.
        nominal_bits: the format's nominal bit width (a label, never used to count bytes).
        build: ``build(weight, bias, options) -> nn.Module``; ``weight`` is the FP32
            ``[N, K]`` weight on the target device, ``bias`` FP32 ``[N]`` or None.
        parts: ``parts(module) -> list[TensorPart]``: the tensors the built module stores.
        options_model: pydantic model of the scheme's options.
        shard: how the layout shards along N (column) and K (row) for tensor parallelism
            (:class:`~qbench.schemes.shard_rule.Sharding`); None: the tp job skips the scheme with
            a reason saying so.
        packages: import names the scheme needs (a missing one makes the row ``skipped``).
        cuda_only: the scheme has no CPU kernel.
        min_compute_capability: lowest CUDA compute capability, e.g. ``(8, 9)`` for FP8.
        k_multiple: ``k_multiple(options) -> int``: in_features must be a multiple of this
            (group size, block size); 1 when there is no constraint (checked when the scenario is read).
        n_multiple: ``n_multiple(options) -> int``: out_features must be a multiple of this.
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
        needs_calibration: the scheme chooses its quantized values from calibration activations
            (GPTQ, AWQ): its ``build`` and ``emulate`` take ``calibration=`` (the statistics of the
            linear's input, :class:`qbench.schemes.calibrated.LinearStats`); the quality job refuses
            a scenario naming it without ``[quality] calibration``; without statistics (the layer
            and step jobs) they build round-to-nearest values on the same format and kernel.
        inductor_tuning: building it switches Inductor's coordinate-descent tuning on for the whole process (a
            torchao config whose ``set_inductor_config`` is on, torchao's default). Step files made before every
            compiled worker got those settings (:func:`qbench.compile_info.tune_like_torchao`) hold no record of
            them: this says which compiled rows had them (:func:`qbench.step.view.inductor_sides`).

    Two records are equal only when they are the same record (the registry holds one per name).
    """

    name: str
    library: str
    summary: str
    family: str
    weight_dtype: str
    activation_dtype: Any = _TorchDType()
    compute_dtype: str
    nominal_bits: float
    build: Callable[..., Any]
    parts: Callable[[Any], list]
    options_model: type[SchemeOptions] = SchemeOptions
    shard: Optional[Sharding] = None
    packages: tuple[str, ...] = ()
    cuda_only: bool = False
    min_compute_capability: Optional[tuple[int, int]] = None
    k_multiple: Callable[[SchemeOptions], int] = field(default=_one)
    n_multiple: Callable[[SchemeOptions], int] = field(default=_one)
    worker_env: dict = field(default_factory=dict)
    extra_check: Optional[Callable[[Any, SchemeOptions], Optional[str]]] = None
    storage_format: Optional[str] = None
    m_check: Optional[Callable[[int, Any, SchemeOptions], Optional[str]]] = None
    tuning_cache: Optional[TuningCache] = None
    emulate: Optional[Callable[..., Any]] = None
    needs_calibration: bool = False
    inductor_tuning: bool = False

    def __post_init__(self) -> None:
        if self.storage_format is None:
            object.__setattr__(self, "storage_format", storage_format_of(self.weight_dtype))
        elif self.storage_format not in STORAGE_FORMATS:
            raise ValueError(f"scheme {self.name!r}: storage_format {self.storage_format!r} is not one of "
                             f"{', '.join(STORAGE_FORMATS)}")

    @property
    def activation_name(self) -> str:
        """The activation dtype's name (``bfloat16``), without importing torch."""
        value = self.__dict__["_activation_dtype"]
        return value if isinstance(value, str) else str(value).removeprefix("torch.")

    def unavailable_reason(self, device, options: SchemeOptions) -> Optional[str]:
        """One line saying why this scheme cannot run on ``device`` (a ``torch.device``) here, or
        None if it can. A CUDA-only scheme on the CPU says so before any missing package:
        installing the package would not make it run there."""
        if device.type != "cuda" and self.cuda_only:
            return f"{self.name} has no CPU kernel: needs CUDA"
        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                return f"package {package!r} is not installed (pip install {package})"
        if device.type == "cuda":
            import torch

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

    def emulated_build(self, weight, bias=None, options: Optional[SchemeOptions] = None):
        """The emulated layer (:attr:`emulate`) of FP32 ``weight`` [N, K] and ``bias`` [N] on their
        device, built without autograd; ``options`` default to the scheme's defaults.

        Raises:
            NotImplementedError: the scheme has no emulation.
            ValueError: options the kernel refuses everywhere (e.g. fp16 for a bf16-only kernel).
        """
        if self.emulate is None:
            raise NotImplementedError(f"scheme {self.name!r} has no emulation")
        import torch

        options = self.options_model() if options is None else options
        with torch.no_grad():
            return self.emulate(weight, bias, options)

    def m_reason(self, m: int, device, options: SchemeOptions) -> Optional[str]:
        """One line saying why the row at ``m`` cannot run on ``device`` (:attr:`m_check`), or None."""
        return None if self.m_check is None else self.m_check(m, device, options)

    def worker_environ(self, base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """The environment of a worker process that runs this scheme: ``base`` (default this
        process's environment) with :data:`PACKAGE_ROOT` first on ``PYTHONPATH`` and
        :attr:`worker_env` applied (a None value removes the variable)."""
        env = dict(os.environ if base is None else base)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        for key, value in self.worker_env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env


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
