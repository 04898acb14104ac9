"""The adaptive repetition loop shared by every timing method."""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

from qbench.timing.settings import TimingSettings
from qbench.timing.stats import median_ci_rel


#: Why the loop stopped (``Stats.stop``, the ``stop`` key of a row's timing reading).
STOP_REASONS = {
    "ci-target": "the median's 95 % CI half-width fell under target_rel_ci",
    "budget": "budget_s ran out before the CI target was met (at least min_reps samples)",
    "max-reps": "max_reps samples before the CI target was met",
}


class Collected(NamedTuple):
    """Samples (µs, in collection order), whether the CI target was met, and why the loop stopped
    (a key of :data:`STOP_REASONS`)."""

    samples: list[float]
    converged: bool
    stop: str = "ci-target"


def collect(
    sample_batch: Callable[[int], list[float]],
    settings: TimingSettings,
    clock: Callable[[], float] = time.perf_counter,
) -> Collected:
    """Call ``sample_batch(n)`` until enough samples are in.

    Stops when at least ``settings.min_reps`` samples are in AND one of: the median's
    relative CI half-width (:func:`~qbench.timing.stats.median_ci_rel`) is under
    ``settings.target_rel_ci`` (converged), ``settings.budget_s`` seconds of ``clock`` have
    passed, or ``settings.max_reps`` samples are in. The first batch asks for min_reps
    samples; later batches ask for half the samples so far (geometric growth keeps the
    CI checks cheap), capped by max_reps and by the samples the remaining budget allows at
    the cost per sample seen so far (at least 1).

    Args:
        sample_batch: takes a count n >= 1, returns exactly n samples in µs.
        settings: min_reps, max_reps, target_rel_ci, budget_s are used.
        clock: seconds; injectable for tests.

    Returns:
        ``Collected(samples, converged, stop)``, a (list[float], bool, str) named tuple; never
        more than max_reps samples; ``stop`` is a key of :data:`STOP_REASONS`.

    Raises:
        ValueError: sample_batch returned a different count than asked.
    """
    t0 = clock()
    samples: list[float] = []
    want = settings.min_reps
    while True:
        got = sample_batch(want)
        if len(got) != want:
            raise ValueError(f"sample_batch({want}) returned {len(got)} samples")
        samples.extend(float(x) for x in got)
        n = len(samples)
        if n < settings.min_reps:
            want = settings.min_reps - n
            continue
        if median_ci_rel(samples) < settings.target_rel_ci:
            return Collected(samples, True, "ci-target")
        elapsed = clock() - t0
        left = settings.budget_s - elapsed
        if n >= settings.max_reps:
            return Collected(samples, False, "max-reps")
        if left <= 0:
            return Collected(samples, False, "budget")
        want = min(max(1, n // 2), settings.max_reps - n)
        per_sample = elapsed / n
        if per_sample > 0:
            want = max(1, min(want, int(left / per_sample)))
