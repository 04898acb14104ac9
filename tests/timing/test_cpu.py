import time

import torch

from qbench.timing.cpu import time_cpu
from qbench.timing.settings import TimingSettings


def test_time_cpu_trivial_op():
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    s = time_cpu(lambda: a @ b, TimingSettings(warmup=2, min_reps=5, max_reps=50, budget_s=0.5))
    assert 5 <= s.n <= 50 and 0 < s.p10 <= s.median <= s.p90
    assert s.median < 0.5e6  # a 64 x 64 product is not half a second


def test_time_cpu_converged_flag_is_the_loops_verdict():
    """Five samples never meet a CI target (no distribution-free CI of the median below n = 6):
    not converged, stopped at max_reps; six samples with a target no spread can miss: converged."""
    calls = []
    fn = lambda: calls.append(1)  # noqa: E731
    s = time_cpu(fn, TimingSettings(warmup=0, min_reps=5, max_reps=5, budget_s=10.0))
    assert s.n == 5 and s.converged is False
    s = time_cpu(fn, TimingSettings.model_construct(warmup=0, min_reps=6, max_reps=100, budget_s=10.0, target_rel_ci=1e9))
    assert s.n == 6 and s.converged is True
    assert len(calls) >= 11  # every sample is at least one call


def test_calls_made_are_warmup_calibration_and_samples():
    """A call slower than the 100 µs block: one calibration call, blocks of one call, so warmup 3 +
    1 + 6 samples = 10 calls exactly (Timer.timeit would have added 2 warm-up calls per sample)."""
    calls = []

    def slow():
        calls.append(1)
        time.sleep(2e-4)

    s = time_cpu(slow, TimingSettings.model_construct(warmup=3, min_reps=6, max_reps=6, budget_s=10.0, target_rel_ci=1e9))
    assert s.n == 6 and len(calls) == 3 + 1 + 6
    assert s.median >= 200.0  # µs: at least the sleep


def test_block_size_powers_of_ten():
    from qbench.timing.cpu import block_size, time_block

    assert block_size(lambda: time.sleep(2e-4)) == 1
    fast = block_size(lambda: None)
    assert fast in (10, 100, 1000, 10_000, 100_000) and time_block(lambda: None, fast) * fast >= 1e-4 * 0.5

