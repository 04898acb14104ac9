import torch

from qbench.timing.cpu import time_cpu
from qbench.timing.settings import TimingSettings


def test_time_cpu_trivial_op():
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    s = time_cpu(lambda: a @ b, TimingSettings(warmup=2, min_reps=5, max_reps=50, budget_s=0.5))
    assert s.n >= 5 and s.median > 0 and s.p10 <= s.median <= s.p90
    assert s.converged in (True, False)
