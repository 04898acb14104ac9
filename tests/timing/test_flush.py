import pytest
import torch

from qbench.timing.flush import L2Flusher

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_rejects_cpu_device():
    with pytest.raises(ValueError, match="'cpu'"):
        L2Flusher("cpu")


@pytest.mark.cuda
@needs_cuda
def test_flusher_size_and_flush():
    f = L2Flusher("cuda", multiple=4)
    assert f.l2_bytes > 0 and f.nbytes == (4 * f.l2_bytes) // 4 * 4
    f.flush()
    f.flush()
    torch.cuda.synchronize()
