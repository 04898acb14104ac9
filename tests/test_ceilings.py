import pytest
import torch

from qbench.ceilings import measure_ceilings


def test_rejects_cpu_device():
    with pytest.raises(ValueError, match="'cpu'"):
        measure_ceilings("cpu", ["bf16"])


def test_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="'fp4'"):
        measure_ceilings("cuda", ["fp4"])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_measure_ceilings_h200_ranges():
    c = measure_ceilings("cuda", ["fp32", "bf16", "fp8", "int8"])
    m = c["measured"]
    assert 1000 < m["memory_gbps"] < 10000
    assert m["tflops"]["bf16"] > m["tflops"]["fp32"] > 0
    for d, v in m["tflops"].items():
        assert v is not None or d in m["reasons"]
