import pytest
import torch

from qbench.timing.eager import time_eager
from qbench.timing.settings import TimingSettings

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.cuda
@needs_cuda
def test_time_eager_bf16_matmul(bf16_matmul, fast_settings):
    s = time_eager(bf16_matmul, fast_settings)
    assert s.median > 0 and s.n >= 10


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_time_eager_without_cuda_raises():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        time_eager(lambda: None, TimingSettings())
