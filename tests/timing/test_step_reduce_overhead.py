"""``step_reduce_overhead``'s decode loop: steps per sample sized to the step, on a host clock
(no GPU: a step that sleeps stands in for one that waits on the device)."""

from __future__ import annotations

import math
import time

import pytest

from qbench.timing import step_reduce_overhead as ro
from qbench.timing.settings import TimingSettings


@pytest.mark.parametrize("step_s,steps", [
    (0.001, 16),     # a 1 ms step: LOOP_STEPS
    (0.0156, 16),    # 0.25 / 0.0156 = 16.03 -> 17, capped at 16
    (0.02, 13),      # 0.25 / 0.02 = 12.5 -> 13
    (0.05, 5),       # 0.25 / 0.05 = 5
    (0.269, 4),      # compiled int8 weight-only at M = 16 on the H200: 0.93 -> 1, raised to MIN_LOOP_STEPS
])
def test_loop_steps_fill_the_sample_time(step_s, steps):
    assert ro.loop_steps(step_s) == steps


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_loop_steps_refuses_a_step_time_that_is_not_a_positive_number(bad):
    with pytest.raises(ValueError, match="step_s must be a positive finite number"):
        ro.loop_steps(bad)


def test_a_slow_step_is_timed_with_the_fewest_steps_per_sample():
    calls = []

    def step(tokens):
        calls.append(tokens)
        time.sleep(0.07)  # 0.25 / 0.07 = 3.6 -> MIN_LOOP_STEPS
        return tokens + 1

    settings = TimingSettings.model_construct(warmup=0, min_reps=3, max_reps=3, target_rel_ci=0.5, budget_s=0.01)
    stats, extras = ro.run(step, 0, settings, synchronize=lambda: None)
    assert extras["loop_steps"] == ro.MIN_LOOP_STEPS == 4
    assert stats.n == 3 and 70_000 <= stats.median < 90_000  # µs per step
    # 3 warm-up steps, 2 to size the loop, 3 samples x 4 steps, 10 single calls; each fed the last
    assert len(calls) == 3 + 2 + 12 + ro.SINGLE_CALLS and calls == list(range(len(calls)))
    assert 70_000 <= extras["host_us"] < 90_000 and extras["synced_us"] >= extras["host_us"]
