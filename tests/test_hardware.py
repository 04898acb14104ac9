import pytest

from qbench.hardware import DTYPES, TABLE, lookup

EXPECTED = {
    "NVIDIA H200": ("H200 SXM", 4800.0, {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9}),
    "NVIDIA H100 80GB HBM3": ("H100 SXM", 3350.0, {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp8": 1978.9}),
    "NVIDIA GeForce RTX 3080": ("RTX 3080", 760.0, {"fp32": 29.8, "tf32": 29.8, "fp16": 59.5, "bf16": 59.5, "fp8": None, "int8": 238.0}),
    "NVIDIA A100-SXM4-80GB": ("A100 SXM 80GB", 2039.0, {"bf16": 312.0, "fp8": None}),
    "NVIDIA A100-SXM4-40GB": ("A100 SXM 40GB", 1555.0, {}),
    "NVIDIA A100-PCIE-40GB": ("A100 PCIe 40GB", 1555.0, {}),
    "NVIDIA A100 80GB PCIe": ("A100 PCIe 80GB", 1935.0, {}),
    "NVIDIA H200 NVL": ("H200 NVL", 4800.0, {}),
    "NVIDIA H100 PCIe": ("H100 PCIe", 2000.0, {}),
    "NVIDIA L40S": ("L40S", 864.0, {}),
    "NVIDIA L4": ("L4", 300.0, {}),
    "NVIDIA GeForce RTX 4090": ("RTX 4090", 1008.0, {"bf16": 165.2}),
    "NVIDIA GeForce RTX 3090": ("RTX 3090", 936.0, {"fp8": None}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_lookup(name):
    gpu, gbps, rates = EXPECTED[name]
    spec = lookup(name)
    assert spec is not None and spec.gpu == gpu and spec.memory_gbps == gbps
    for dtype, value in rates.items():
        assert spec.tflops()[dtype] == value
    assert spec.source


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 3080 Ti", "NVIDIA H100 NVL", "NVIDIA L40", "Tesla T4", ""])
def test_lookup_unknown(name):
    assert lookup(name) is None


def test_table_sane():
    for _, spec in TABLE:
        assert set(spec.tflops()) == set(DTYPES)
        assert spec.fp16 == spec.bf16 and spec.tf32 <= spec.fp16
        d = spec.to_dict()
        assert set(d) == {"gpu", "source", "memory_gbps", "tflops"}
