import pytest
import torch

from qbench.timing.eager import time_eager
from qbench.timing.warm import GraphCaptureError, _root_cause, time_warm

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_root_cause_walks_context():
    try:
        try:
            raise ValueError("original")
        except ValueError:
            raise RuntimeError("capture_end failed")
    except RuntimeError as exc:
        assert str(_root_cause(exc)) == "original"


def test_graph_capture_error_reason():
    e = GraphCaptureError("one line")
    assert e.reason == "one line" and isinstance(e, RuntimeError)


@pytest.mark.cuda
@needs_cuda
def test_time_warm_faster_than_eager(bf16_matmul, fast_settings):
    warm = time_warm(bf16_matmul, fast_settings)
    eager = time_eager(bf16_matmul, fast_settings)
    assert 0 < warm.median < eager.median


@pytest.mark.cuda
@needs_cuda
def test_time_warm_item_raises_capture_error(fast_settings):
    x = torch.randn(16, device="cuda")
    with pytest.raises(GraphCaptureError) as info:
        time_warm(lambda: (x * 2).sum().item(), fast_settings)
    assert "\n" not in info.value.reason
    # the process can still run CUDA work on the default stream afterwards
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert float((x + 1).sum()) == pytest.approx(float(x.sum()) + 16, rel=1e-4)
