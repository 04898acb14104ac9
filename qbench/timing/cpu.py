"""CPU timing: ``torch.utils.benchmark.Timer`` blocks under the adaptive loop. No CUDA."""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.benchmark import Timer

from qbench.timing.adaptive import collect
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize

#: Shortest block of calls timed as one sample (s). 100 µs keeps perf_counter resolution
#: (< 1 µs on Linux) and Timer's per-block overhead (a few µs) under ~1-2 % of a sample.
#: Project choice, in the spirit of Timer.blocked_autorange's block sizing.
MIN_BLOCK_S = 1e-4

#: Upper bound on calls per block, so a no-op fn cannot make calibration loop forever.
MAX_BLOCK_CALLS = 1_000_000


def block_size(timer: Timer, min_block_s: float = MIN_BLOCK_S) -> int:
    """Calls per sample: the smallest power of ten whose block lasts >= min_block_s.

    Mirrors ``Timer._estimate_block_size`` (private API, so re-implemented here).
    Returns an int in [1, MAX_BLOCK_CALLS].
    """
    number = 1
    while number < MAX_BLOCK_CALLS:
        per_call = timer.timeit(number).times[0]
        if per_call * number >= min_block_s:
            break
        number *= 10
    return number


def time_cpu(fn: Callable[[], object], settings: TimingSettings) -> Stats:
    """Host time per call of ``fn`` on the CPU, µs (method label ``cpu``).

    What it includes: the whole Python call of fn (dispatch, allocation, the math), with
    torch's intra-op thread count as the process has it (``torch.get_num_threads()``,
    passed to Timer, whose own default is 1 thread). Each sample is the mean of a block
    of ``block_size`` back-to-back calls timed by ``torch.utils.benchmark.Timer.timeit``
    (which disables the garbage collector around the block); the adaptive loop
    (:func:`qbench.timing.adaptive.collect`) decides how many samples.

    Args:
        fn: zero-argument callable; its result is discarded. Inputs must be bound already.
        settings: warmup (calls), min_reps, max_reps, target_rel_ci, budget_s.

    Returns:
        Stats in µs per call; ``n`` counts samples (blocks), not calls.

    Raises:
        whatever fn raises.
    """
    timer = Timer(
        stmt="fn()",
        globals={"fn": fn},
        label="qbench",
        description="cpu",
        num_threads=torch.get_num_threads(),
    )
    if settings.warmup:
        timer.timeit(settings.warmup)
    number = block_size(timer)

    def sample_batch(n: int) -> list[float]:
        return [timer.timeit(number).times[0] * 1e6 for _ in range(n)]

    samples, converged, stop = collect(sample_batch, settings)
    return summarize(samples, converged, stop)
