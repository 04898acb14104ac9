import random

import pytest

from qbench.timing.adaptive import collect
from qbench.timing.settings import TimingSettings


def test_identical_samples_stop_at_min_reps():
    calls = []

    def batch(n):
        calls.append(n)
        return [10.0] * n

    samples, converged, stop = collect(batch, TimingSettings(min_reps=20))
    assert len(samples) == 20 and converged and calls == [20] and stop == "ci-target"


def test_noisy_samples_run_to_max_reps():
    rng = random.Random(0)
    s = TimingSettings(min_reps=10, max_reps=300, budget_s=60.0)
    samples, converged, stop = collect(lambda n: [rng.uniform(1, 1000) for _ in range(n)], s)
    assert len(samples) == 300 and not converged and stop == "max-reps"


def test_noisy_samples_stop_on_budget():
    rng = random.Random(1)
    now = [0.0]

    def clock():
        return now[0]

    def batch(n):
        now[0] += 0.01 * n  # 10 ms of fake time per sample
        return [rng.uniform(1, 1000) for _ in range(n)]

    s = TimingSettings(min_reps=10, max_reps=100_000, budget_s=1.0)
    samples, converged, stop = collect(batch, s, clock=clock)
    assert not converged and stop == "budget"
    assert 10 <= len(samples) <= 120  # ~100 samples fit in 1 s of fake time
    assert now[0] <= 1.2


def test_min_reps_even_if_budget_spent():
    now = [0.0]

    def batch(n):
        now[0] += 100.0
        return [float(i) for i in range(1, n + 1)]

    samples, _, stop = collect(batch, TimingSettings(min_reps=20, budget_s=0.001), clock=lambda: now[0])
    assert len(samples) == 20 and stop == "budget"


def test_wrong_count_raises():
    with pytest.raises(ValueError):
        collect(lambda n: [1.0], TimingSettings(min_reps=5))


# ---- the exact batch sequence (mutation testing, docs/testing.md) --------------------------------

def _noisy_run(settings, cost_s):
    """Run collect on samples that never converge (1, 1000, 1, ...) with a fake clock that advances
    ``cost_s`` per sample; returns (batch sizes asked, samples, converged)."""
    now, asked = [0.0], []

    def batch(n):
        asked.append(n)
        now[0] += cost_s * n
        return [1.0 if (len(asked) + i) % 2 else 1000.0 for i in range(n)]

    samples, converged, _ = collect(batch, settings, clock=lambda: now[0])
    return asked, samples, converged


def test_batches_grow_by_half_and_stop_at_the_budget():
    """1/16 s per sample, 1 s budget, by hand: 4 (0.25 s spent, 0.75 left: half of 4 = 2, 12 fit) -> 2
    (6 in, 0.625 left: 3) -> 3 (9 in, 0.4375 left: 4, 7 fit) -> 4 (13 in, 0.1875 left: 6 but 3 fit)
    -> 3 (16 in, 0 left: stop, not converged)."""
    asked, samples, converged = _noisy_run(TimingSettings(min_reps=4, max_reps=100, budget_s=1.0), 1 / 16)
    assert asked == [4, 2, 3, 4, 3] and len(samples) == 16 and converged is False


def test_batches_with_a_frozen_clock_stop_at_max_reps():
    asked, samples, converged = _noisy_run(TimingSettings(min_reps=4, max_reps=10, budget_s=1.0), 0.0)
    assert asked == [4, 2, 3, 1] and converged is False  # no time per sample: only max_reps bounds a batch


def test_batches_of_one():
    # below the settings' bounds (min_reps >= 3) on purpose: the loop's edge, built without validation
    asked, _, _ = _noisy_run(TimingSettings.model_construct(min_reps=1, max_reps=3, budget_s=1.0), 0.0)
    assert asked == [1, 1, 1]  # half of 1 sample is still one
    # 1/4 s per sample, 1 s: 2 (0.5 left: 1) -> 1 (0.25 left: 1 fits) -> 1 (0 left: stop)
    asked, samples, _ = _noisy_run(TimingSettings.model_construct(min_reps=2, max_reps=100, budget_s=1.0), 0.25)
    assert asked == [2, 1, 1] and len(samples) == 4


def test_converged_only_strictly_under_the_target():
    samples = [0.75, 1.0, 1.0, 1.0, 1.0, 1.25]  # ranks (1, 6): (1.25 - 0.75) / 2 / 1 = 0.25
    s = TimingSettings(min_reps=6, max_reps=6, target_rel_ci=0.25)
    assert collect(lambda n: samples[:n], s) == (samples, False, "max-reps")
    s = TimingSettings(min_reps=6, max_reps=6, target_rel_ci=0.2500001)
    assert collect(lambda n: samples[:n], s) == (samples, True, "ci-target")


def test_wrong_count_message():
    with pytest.raises(ValueError, match=r"^sample_batch\(5\) returned 1 samples$"):
        collect(lambda n: [1.0], TimingSettings(min_reps=5))


def test_stop_reaches_the_stats_dict_only_when_set():
    """``stop`` travels from collect through summarize into the row's STATS dict; a kernel-profile
    Stats (no adaptive loop) has no ``stop`` key."""
    from qbench.timing.stats import summarize

    got = collect(lambda n: [5.0] * n, TimingSettings(min_reps=6))
    d = summarize(got.samples, got.converged, got.stop).to_dict()
    assert d["stop"] == "ci-target" and d["median"] == 5.0 and d["n"] == 6
    assert "stop" not in summarize([1.0, 2.0, 3.0]).to_dict()
