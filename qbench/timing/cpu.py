"""CPU timing: blocks of back-to-back calls under the adaptive loop. No CUDA.

qbench times its blocks itself (``time.perf_counter`` around ``number`` calls, the garbage collector
disabled around the block as ``timeit`` does) instead of with ``torch.utils.benchmark.Timer.timeit``:
``Timer.timeit(number)`` runs ``max(number // 100, 2)`` untimed warm-up calls before every timed
block (torch/utils/benchmark/utils/timer.py), so a sample of one slow call would cost three calls.
The warm-up of ``settings.warmup`` calls is done once, before the first sample.
"""

from __future__ import annotations

import gc
import time
from typing import Callable

from qbench.timing.adaptive import collect
from qbench.timing.method import Call, Needs, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize

#: Shortest block of calls timed as one sample (s). 100 µs keeps perf_counter resolution
#: (< 1 µs on Linux) and the block's own overhead (a loop iteration, well under 1 µs) under ~1 %
#: of a sample. Project choice, in the spirit of Timer.blocked_autorange's block sizing.
MIN_BLOCK_S = 1e-4

#: Upper bound on calls per block, so a no-op fn cannot make calibration loop forever.
MAX_BLOCK_CALLS = 1_000_000


def time_block(fn: Callable[[], object], number: int) -> float:
    """Seconds per call of ``number`` back-to-back calls of ``fn`` (the garbage collector disabled
    for the block, re-enabled after if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t0) / number
    finally:
        if was_enabled:
            gc.enable()


def block_size(fn: Callable[[], object], min_block_s: float = MIN_BLOCK_S) -> int:
    """Calls per sample: the smallest power of ten whose block lasts >= min_block_s (as
    ``Timer._estimate_block_size``). Returns an int in [1, MAX_BLOCK_CALLS]; a call of at least
    ``min_block_s`` costs one calibration call."""
    number = 1
    while number < MAX_BLOCK_CALLS:
        if time_block(fn, number) * number >= min_block_s:
            break
        number *= 10
    return number


def time_cpu(fn: Callable[[], object], settings: TimingSettings) -> Stats:
    """Host time per call of ``fn`` on the CPU, µs (method label ``cpu``).

    What it includes: the whole Python call of fn (dispatch, allocation, the math), with
    torch's intra-op thread count as the process has it (``torch.get_num_threads()``). Each
    sample is the mean of a block of ``block_size`` back-to-back calls (:func:`time_block`); the
    adaptive loop (:func:`qbench.timing.adaptive.collect`) decides how many samples. Calls made:
    ``settings.warmup`` + the block calibration + samples x block, nothing else.

    Args:
        fn: zero-argument callable; its result is discarded. Inputs must be bound already.
        settings: warmup (calls), min_reps, max_reps, target_rel_ci, budget_s.

    Returns:
        Stats in µs per call; ``n`` counts samples (blocks), not calls.

    Raises:
        whatever fn raises.
    """
    for _ in range(settings.warmup):
        fn()
    number = block_size(fn)

    def sample_batch(n: int) -> list[float]:
        return [time_block(fn, number) * 1e6 for _ in range(n)]

    samples, converged, stop = collect(sample_batch, settings)
    return summarize(samples, converged, stop)


class Cpu(TimingMethod):
    """``cpu``: :func:`time_cpu` of the call; every CPU row has it, and the caller samples the CPU
    load right after it (``needs.cpu_load``)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        return Reading(time_cpu(call.fn, settings).to_dict())


METHOD = Cpu("cpu", "host wall time per call on one weight (blocks of calls, perf_counter)",
             "hot when the weight fits in the caches", cuda=False, cpu=True, needs_capture=False,
             order=0, needs=Needs(cpu_load=True), fallback_rank=2, always=True)
