"""The machine a result ran on: the datasheet ceilings of its GPU, its CPU, and two machines told apart
(torch-free).

Datasheet ceilings per GPU model: memory bandwidth and dense peak matrix rates.

All rates are DENSE (NVIDIA datasheets print tensor-core rates "with sparsity"; the dense
rate is half of those). GeForce cards: the FP32-accumulate tensor rates (what PyTorch's
fp16/bf16 GEMMs use), which the Ampere GA102 and Ada whitepapers list separately from
the FP16-accumulate rates. Units: memory GB/s (1e9 bytes/s); fp32/tf32/fp16/bf16/fp8 in
TFLOP/s; int8 in TOPS. ``None``: the GPU has no tensor cores for that type (FP8 before
Ada/Hopper). These are leads: measure the ceilings on the card
(:func:`qbench.ceilings.measure_ceilings`).

The CPU, and two machines told apart. Two CPU result files that both say "AMD EPYC" can come from an AVX2-only Zen 3 and an
AVX-512-BF16 Zen 4, whose bf16 and bitsandbytes rows differ 10-460x. :func:`cpu_record` reads
what separates them: the model name and family from ``/proc/cpuinfo``, the instruction-set flags
that decide which kernels run (AVX2, AVX-512, AVX-512 BF16/VNNI, AMX), and the cache sizes from
sysfs. :mod:`qbench.env` stores it as ``env.cpu_info`` with torch's own verdict,
``torch.backends.cpu.get_cpu_capability()`` (``"AVX2"``, ``"AVX512"``, ``"AMX"``, ...).

:func:`machine_differences` compares the ``env`` of two result files and says, one line per fact,
what differs: readers (``compare``, ``model``) call it before they compare timings. It imports no
torch, so a reader stays fast.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet ceilings (see module docstring for units)."""

    gpu: str
    source: str
    memory_gbps: float
    fp32: float
    tf32: float
    fp16: float
    bf16: float
    fp8: float | None
    int8: float | None

    def tflops(self) -> dict[str, float | None]:
        """{dtype: dense peak TFLOP/s (TOPS for int8) or None} for DTYPES."""
        return {d: getattr(self, d) for d in DTYPES}

    def to_dict(self) -> dict:
        """The schema's ``ceilings.datasheet`` object."""
        return {"gpu": self.gpu, "source": self.source, "memory_gbps": self.memory_gbps,
                "tflops": self.tflops()}


_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (2024)"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (2023)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
_GA102_WP = "NVIDIA Ampere GA102 GPU Architecture whitepaper (v2.1), GeForce RTX 30 series specifications table"
_ADA_WP = "NVIDIA Ada GPU Architecture whitepaper (v2.02), Appendix A, GeForce RTX 4090 specifications table"

_H_SXM = dict(fp32=67.0, tf32=494.7, fp16=989.4, bf16=989.4, fp8=1978.9, int8=1978.9)
_A100 = dict(fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0, fp8=None, int8=624.0)

#: (pattern on the lower-cased torch.cuda.get_device_name(), spec); first match wins, so
#: more specific names come first. Names as the driver reports them, e.g. "NVIDIA H200",
#: "NVIDIA H200 NVL", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
#: "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA L40S", "NVIDIA L4",
#: "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3080".
TABLE: tuple[tuple[str, GpuSpec], ...] = (
    (r"\bh200\b.*\bnvl\b", GpuSpec("H200 NVL", _H200_DS + ", H200 NVL column", 4800.0,
                                   fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5, int8=1670.5)),
    (r"\bh200\b", GpuSpec("H200 SXM", _H200_DS + ", H200 SXM column", 4800.0, **_H_SXM)),
    (r"\bh100\b.*\bpcie\b", GpuSpec("H100 PCIe", _H100_DS + ", H100 PCIe column", 2000.0,
                                   fp32=51.0, tf32=378.0, fp16=756.5, bf16=756.5, fp8=1513.0, int8=1513.0)),
    (r"\bh100\b.*(\bsxm|hbm3)", GpuSpec("H100 SXM", _H100_DS + ", H100 SXM column", 3350.0, **_H_SXM)),
    (r"\ba100\b.*sxm.*\b80\s*gb", GpuSpec("A100 SXM 80GB", _A100_DS + ", A100 80GB SXM column", 2039.0, **_A100)),
    (r"\ba100\b.*sxm", GpuSpec("A100 SXM 40GB", _A100_DS + ", A100 40GB SXM column", 1555.0, **_A100)),
    (r"\ba100\b.*(80\s*gb.*pcie|pcie.*80\s*gb)",
     GpuSpec("A100 PCIe 80GB", _A100_DS + ", A100 80GB PCIe column", 1935.0, **_A100)),
    (r"\ba100\b.*pcie", GpuSpec("A100 PCIe 40GB", _A100_DS + ", A100 40GB PCIe column", 1555.0, **_A100)),
    (r"\bl40s\b", GpuSpec("L40S", "NVIDIA L40S GPU datasheet (2023)", 864.0,
                          fp32=91.6, tf32=183.0, fp16=362.05, bf16=362.05, fp8=733.0, int8=733.0)),
    (r"\bl4\b", GpuSpec("L4", "NVIDIA L4 Tensor Core GPU datasheet (2023)", 300.0,
                        fp32=30.3, tf32=60.0, fp16=121.0, bf16=121.0, fp8=242.5, int8=242.5)),
    (r"\brtx 4090\b(?!\s*d\b)(?!.*laptop)", GpuSpec("RTX 4090", _ADA_WP, 1008.0,
                                                    fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3, int8=660.6)),
    (r"\brtx 3090\b(?!\s*ti)", GpuSpec("RTX 3090", _GA102_WP + " (RTX 3090)", 936.0,
                                       fp32=35.6, tf32=35.6, fp16=71.0, bf16=71.0, fp8=None, int8=284.0)),
    (r"\brtx 3080\b(?!\s*ti)(?!.*laptop)", GpuSpec("RTX 3080", _GA102_WP + " (RTX 3080 10GB)", 760.0,
                                                   fp32=29.8, tf32=29.8, fp16=59.5, bf16=59.5, fp8=None, int8=238.0)),
)


def lookup(device_name: str) -> GpuSpec | None:
    """Datasheet spec for a ``torch.cuda.get_device_name()`` string, or None if unknown.

    Matching is case-insensitive on the patterns of TABLE, first match wins; "Ti",
    "Laptop", "4090 D" and H100 NVL are deliberately not matched (different specs).
    An "RTX 3080" is assumed to be the 10 GB card (760 GB/s; the 12 GB card has 912 GB/s
    and the same name).
    """
    low = device_name.lower()
    for pattern, spec in TABLE:
        if re.search(pattern, low):
            return spec
    return None


# ---- the CPU and its caches; two results' machines told apart --------------------------------------
#: /proc/cpuinfo flags that decide which CPU kernels run (Linux names, arch/x86 cpufeatures).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
             # aarch64 (Features line)
             "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm")

_CPUINFO_KEYS = {"model name": "model_name", "vendor_id": "vendor", "cpu family": "family", "model": "model",
                 "stepping": "stepping", "CPU implementer": "vendor", "CPU part": "model"}


def parse_cpuinfo(text: str) -> dict:
    """The first processor's facts from the text of ``/proc/cpuinfo``.

    Returns ``{"model_name", "vendor", "family", "model", "stepping": str | None, "flags": [names]}``:
    ``flags`` are those of :data:`ISA_FLAGS` the processor has (``flags`` line on x86,
    ``Features`` on aarch64), in :data:`ISA_FLAGS` order; a field the text lacks is None.
    """
    out: dict[str, Any] = {v: None for v in _CPUINFO_KEYS.values()}
    flags: set[str] = set()
    seen_flags = False
    for line in text.splitlines():
        if not line.strip():
            if seen_flags:
                break  # the first processor's block ends
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in _CPUINFO_KEYS and out[_CPUINFO_KEYS[key]] is None:
            out[_CPUINFO_KEYS[key]] = value
        elif key in ("flags", "Features"):
            flags |= set(value.split())
            seen_flags = True
    out["flags"] = [f for f in ISA_FLAGS if f in flags]
    return out


def _size_bytes(text: str) -> Optional[int]:
    text = text.strip().upper()
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * factor if digits.isdigit() else None


def cache_sizes(root: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """CPU 0's caches in bytes by name, ``{"L1d": 49152, "L1i": 32768, "L2": 1048576, "L3": 33554432}``,
    from sysfs (``index*/level``, ``type``, ``size``); ``{}`` where sysfs has no cache folder. The sizes
    are per cache instance (an L3 shared by a CCX counts once), as the kernel reports them."""
    out: dict[str, int] = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
        except OSError:
            continue
        if size is None or not level.isdigit():
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = size
    return out


def cpu_record(cpuinfo: str | Path = "/proc/cpuinfo", cache_root: str | Path = "/sys/devices/system/cpu/cpu0/cache",
               capability: Optional[str] = None) -> dict:
    """``env.cpu_info``: :func:`parse_cpuinfo` of ``cpuinfo`` (a path), ``caches`` (:func:`cache_sizes`)
    and ``capability`` (``torch.backends.cpu.get_cpu_capability()``, passed in by :mod:`qbench.env`:
    this module imports no torch). A file that cannot be read gives None fields, never an error."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    record = parse_cpuinfo(text)
    record["caches"] = cache_sizes(cache_root)
    record["capability"] = capability
    return record


def _mib(n: Optional[int]) -> str:
    if n is None:
        return "?"
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def machine_differences(env_a: dict, env_b: dict) -> list[str]:
    """What differs between the machines of two result files, one line per fact; ``[]`` when
    nothing recorded differs.

    Args:
        env_a, env_b: the ``env`` objects of two result documents (the "A" and "B" files; either may
            come from an older qbench that lacks ``cpu_info``).

    Compared: the device kind and name; for CUDA runs the compute capability, SM count and memory;
    for every run the host CPU: model name, torch's CPU capability (the kernels torch picks), the
    instruction-set flags of :data:`ISA_FLAGS`, the cache sizes, the CPU count and torch's thread
    count. Where both files are CPU runs and one lacks ``cpu_info`` (an older file),
    a line says the instruction sets cannot be compared: "AMD EPYC" in both files can be an
    AVX2-only and an AVX-512-BF16 part. Torch-free; never raises on missing or odd fields.
    """
    a, b = env_a or {}, env_b or {}
    out: list[str] = []

    def differ(label: str, x: Any, y: Any, why: str = "") -> None:
        if x is not None and y is not None and x != y:
            out.append(f"{label}: {x} (A) vs {y} (B){why}")

    dev_a, dev_b = str(a.get("device") or ""), str(b.get("device") or "")
    kind_a, kind_b = dev_a.split(":")[0] or None, dev_b.split(":")[0] or None
    differ("device", kind_a, kind_b)
    if kind_a == kind_b == "cuda":
        differ("GPU", a.get("device_name"), b.get("device_name"))
        cc_a, cc_b = a.get("compute_capability"), b.get("compute_capability")
        differ("compute capability", ".".join(map(str, cc_a)) if cc_a else None,
               ".".join(map(str, cc_b)) if cc_b else None)
        differ("SM count", a.get("sm_count"), b.get("sm_count"))
        differ("GPU memory", _gib(a.get("memory_bytes")), _gib(b.get("memory_bytes")))
    cpu_a, cpu_b = a.get("cpu_info"), b.get("cpu_info")
    differ("CPU", a.get("cpu"), b.get("cpu"))
    if isinstance(cpu_a, dict) and isinstance(cpu_b, dict):
        if a.get("cpu") is None or b.get("cpu") is None:
            differ("CPU", cpu_a.get("model_name"), cpu_b.get("model_name"))
        fam_a = "/".join(str(cpu_a.get(k)) for k in ("vendor", "family", "model")) if cpu_a.get("family") else None
        fam_b = "/".join(str(cpu_b.get(k)) for k in ("vendor", "family", "model")) if cpu_b.get("family") else None
        differ("CPU vendor/family/model", fam_a, fam_b)
        differ("CPU capability (torch.backends.cpu.get_cpu_capability)", cpu_a.get("capability"),
               cpu_b.get("capability"), ": torch runs other CPU kernels")
        flags_a, flags_b = cpu_a.get("flags"), cpu_b.get("flags")
        if isinstance(flags_a, list) and isinstance(flags_b, list) and set(flags_a) != set(flags_b):
            only_a = [f for f in ISA_FLAGS if f in flags_a and f not in flags_b]
            only_b = [f for f in ISA_FLAGS if f in flags_b and f not in flags_a]
            parts = ([f"only A has {', '.join(only_a)}"] if only_a else []) + (
                [f"only B has {', '.join(only_b)}"] if only_b else [])
            out.append(f"CPU instruction set: {'; '.join(parts)} (bf16, int8 and bitsandbytes CPU kernels "
                       "depend on these)")
        caches_a, caches_b = cpu_a.get("caches") or {}, cpu_b.get("caches") or {}
        for level in ("L1d", "L2", "L3"):
            if level in caches_a and level in caches_b:
                differ(f"{level} cache", _mib(caches_a[level]), _mib(caches_b[level]))
    elif kind_a == kind_b == "cpu":
        which = " and ".join(name for name, rec in (("A", cpu_a), ("B", cpu_b)) if not isinstance(rec, dict))
        out.append(f"CPU instruction set unknown: {which} {'does' if len(which) == 1 else 'do'} not record env.cpu_info "
                   "(an older qbench), so an AVX2-only and an AVX-512 CPU of one name cannot be told apart")
    differ("CPU count", a.get("cpu_count"), b.get("cpu_count"))
    differ("torch threads", a.get("torch_threads"), b.get("torch_threads"))
    return out


def _gib(n: Any) -> Optional[str]:
    return f"{n / (1 << 30):.1f} GiB" if isinstance(n, (int, float)) and not isinstance(n, bool) else None


def free_bytes(device: Any) -> Optional[int]:
    """Free memory of ``device`` in bytes, or None when it cannot be read.

    CUDA: ``torch.cuda.mem_get_info`` (free device memory, other processes' use included).
    CPU: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else ``os.sysconf`` available pages
    times the page size.
    """
    if str(device).startswith("cuda"):
        import torch

        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError, ValueError):
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file's unit is kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
