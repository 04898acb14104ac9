"""Datasheet ceilings per GPU model: memory bandwidth and dense peak matrix rates.

All rates are DENSE (NVIDIA datasheets print tensor-core rates "with sparsity"; the dense
rate is half of those). GeForce cards: the FP32-accumulate tensor rates (what PyTorch's
fp16/bf16 GEMMs use), which the Ampere GA102 and Ada whitepapers list separately from
the FP16-accumulate rates. Units: memory GB/s (1e9 bytes/s); fp32/tf32/fp16/bf16/fp8 in
TFLOP/s; int8 in TOPS. ``None``: the GPU has no tensor cores for that type (FP8 before
Ada/Hopper). These are leads: measure the ceilings on the card
(:func:`qbench.ceilings.measure_ceilings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
