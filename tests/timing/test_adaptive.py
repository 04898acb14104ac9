import random

import pytest

from qbench.timing.adaptive import collect
from qbench.timing.settings import TimingSettings


def test_identical_samples_stop_at_min_reps():
    calls = []

    def batch(n):
        calls.append(n)
        return [10.0] * n

    samples, converged = collect(batch, TimingSettings(min_reps=20))
    assert len(samples) == 20 and converged and calls == [20]


def test_noisy_samples_run_to_max_reps():
    rng = random.Random(0)
    s = TimingSettings(min_reps=10, max_reps=300, budget_s=60.0)
    samples, converged = collect(lambda n: [rng.uniform(1, 1000) for _ in range(n)], s)
    assert len(samples) == 300 and not converged


def test_noisy_samples_stop_on_budget():
    rng = random.Random(1)
    now = [0.0]

    def clock():
        return now[0]

    def batch(n):
        now[0] += 0.01 * n  # 10 ms of fake time per sample
        return [rng.uniform(1, 1000) for _ in range(n)]

    s = TimingSettings(min_reps=10, max_reps=100_000, budget_s=1.0)
    samples, converged = collect(batch, s, clock=clock)
    assert not converged
    assert 10 <= len(samples) <= 120  # ~100 samples fit in 1 s of fake time
    assert now[0] <= 1.2


def test_min_reps_even_if_budget_spent():
    now = [0.0]

    def batch(n):
        now[0] += 100.0
        return [float(i) for i in range(1, n + 1)]

    samples, _ = collect(batch, TimingSettings(min_reps=20, budget_s=0.001), clock=lambda: now[0])
    assert len(samples) == 20


def test_wrong_count_raises():
    with pytest.raises(ValueError):
        collect(lambda n: [1.0], TimingSettings(min_reps=5))
