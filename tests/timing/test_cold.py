import pytest
import torch

from qbench.timing.cold import MAX_BUSY_US, busy_cycles, time_cold
from qbench.timing.flush import L2Flusher

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_busy_cycles_known():
    # 2 * 40 + 20 = 100 µs at 0.0005 µs/cycle (2 GHz) -> 200_000 cycles
    assert busy_cycles(40.0, 0.0005) == 200_000
    assert busy_cycles(1e9, 1.0) == int(MAX_BUSY_US)


@pytest.mark.parametrize("args", [(1.0, 0.0), (-1.0, 1.0)])
def test_busy_cycles_rejects(args):
    with pytest.raises(ValueError):
        busy_cycles(*args)


@pytest.mark.cuda
@needs_cuda
def test_time_cold_bf16_matmul(bf16_matmul, fast_settings):
    s = time_cold(bf16_matmul, fast_settings, L2Flusher("cuda"))
    assert fast_settings.min_reps <= s.n <= fast_settings.max_reps and s.p10 <= s.median <= s.p90
    # the weight comes from HBM: 4096 x 4096 bf16 = 33,554,432 B cannot be read faster than at the
    # fastest HBM qbench knows (H200 datasheet, 4.8 TB/s): 6.99 µs
    assert s.median >= 33_554_432 / 4.8e6
