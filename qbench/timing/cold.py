"""Cold timing: L2 flushed, launch hidden behind a busy GPU, per-call CUDA events (``cold``)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable

from qbench.timing._cuda import event_pairs, event_samples, require_cuda, syncs_host, torch
from qbench.timing.adaptive import collect
from qbench.timing.method import Call, Needs, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize

if TYPE_CHECKING:
    from qbench.timing.flush import L2Flusher

__all__ = ["METHOD", "busy_cycles", "enqueue_us", "sleep_us_per_cycle", "syncs_host", "time_cold"]

#: Host enqueue trials; the largest is kept (a GC pause only makes the sleep longer).
ENQUEUE_TRIALS = 5
#: Busy period = BUSY_FACTOR x host enqueue time + BUSY_MARGIN_US (project choice: 2x
#: covers host jitter of the same size as the enqueue itself).
BUSY_FACTOR = 2.0
BUSY_MARGIN_US = 20.0
#: Cap on the busy period, µs. A fn that synchronizes inside cannot be hidden anyway;
#: the cap only bounds the wall time spent sleeping.
MAX_BUSY_US = 20_000.0
#: Cycles of torch.cuda._sleep used to calibrate µs per cycle (~1 ms at 2 GHz).
CAL_CYCLES = 2_000_000
CAL_TRIALS = 3


def busy_cycles(enqueue_us: float, us_per_cycle: float) -> int:
    """Spin cycles for ``torch.cuda._sleep`` so the GPU stays busy longer than the host
    needs to enqueue one sample.

    busy_us = min(MAX_BUSY_US, BUSY_FACTOR * enqueue_us + BUSY_MARGIN_US);
    cycles = ceil(busy_us / us_per_cycle).

    Args:
        enqueue_us: host time to enqueue flush + event + fn + event, µs (>= 0).
        us_per_cycle: µs per _sleep cycle at the fastest clock seen, > 0.

    Raises:
        ValueError: us_per_cycle <= 0 or enqueue_us < 0 (value in the message).
    """
    if not us_per_cycle > 0:
        raise ValueError(f"busy_cycles: us_per_cycle must be > 0, got {us_per_cycle}")
    if enqueue_us < 0:
        raise ValueError(f"busy_cycles: enqueue_us must be >= 0, got {enqueue_us}")
    busy_us = min(MAX_BUSY_US, BUSY_FACTOR * enqueue_us + BUSY_MARGIN_US)
    return int(math.ceil(busy_us / us_per_cycle))


def sleep_us_per_cycle(cycles: int = CAL_CYCLES, trials: int = CAL_TRIALS) -> float:
    """µs per ``torch.cuda._sleep`` cycle, the smallest of `trials` event-timed runs.

    _sleep spins on the SM clock (clock64), so its duration depends on the clock; the
    smallest value (fastest clock) makes ``busy_cycles`` err on the long side.
    """
    start, end = event_pairs(1)[0]
    vals = []
    for _ in range(trials):
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        vals.append(start.elapsed_time(end) * 1e3 / cycles)
    return min(vals)


def enqueue_us(fn: Callable[[], object], flusher: L2Flusher, trials: int = ENQUEUE_TRIALS) -> float:
    """Largest host time (µs) to enqueue flush, start event, fn, end event, GPU idle first."""
    start, end = event_pairs(1)[0]
    worst = 0.0
    for _ in range(trials):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        flusher.flush()
        start.record()
        fn()
        end.record()
        worst = max(worst, (time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return worst


def _time_cold_synced(fn: Callable[[], object], settings: TimingSettings, flusher: L2Flusher) -> Stats:
    """Cold for a host-syncing fn: per sample flush, synchronize, start event, fn, end event,
    synchronize. The GPU is idle when fn starts, so its launch is in the number, as in a real
    loop, where fn's own sync drains the queue and the host launches the rest on an idle GPU."""
    start, end = event_pairs(1)[0]

    def sample_batch(n: int) -> list[float]:
        out: list[float] = []
        for _ in range(n):
            flusher.flush()
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e3)
        return out

    samples, converged, stop = collect(sample_batch, settings)
    return summarize(samples, converged, stop)


def time_cold(fn: Callable[[], object], settings: TimingSettings, flusher: L2Flusher,
              host_sync: bool = False) -> Stats:
    """GPU time of one call of ``fn`` with a cold L2, µs (method label ``cold``).

    With ``host_sync`` (fn blocks the host inside; :func:`syncs_host`) the launch cannot be
    hidden: each sample starts on an idle GPU after a flush and includes fn's host work
    (:func:`_time_cold_synced`): a busy period before such a fn made its time depend on how long
    the GPU slept.

    Per sample, enqueued without waiting: ``torch.cuda._sleep(c)`` (keeps the GPU busy),
    ``flusher.flush()`` (L2 now holds the flush buffer, not the weight), start event,
    ``fn()``, end event. ``c`` is calibrated once so the sleep lasts longer than the
    host needs to enqueue flush + events + fn (measured first, :func:`enqueue_us`), so
    when the start event fires fn's kernels are already queued: launch overhead is
    hidden wherever fn enqueues its work without waiting on the host. Up to
    ``MAX_INFLIGHT`` samples are recorded before one synchronize. The time is start-to-
    end event time: fn's kernels and the gaps between them, with the weight read from
    HBM. A fn that synchronizes inside (e.g. ``.item()``) shows its host round trip.

    Args:
        fn: zero-argument callable enqueuing work on the current CUDA stream.
        settings: warmup (calls, each after a flush), min_reps, max_reps,
            target_rel_ci, budget_s.
        flusher: an :class:`L2Flusher` on fn's device.

    Returns:
        Stats, µs per call (event resolution ~0.5 µs per the CUDA runtime docs of
        cudaEventElapsedTime).

    Raises:
        RuntimeError: no CUDA device. Whatever fn raises.
    """
    require_cuda("time_cold")
    for _ in range(settings.warmup):
        flusher.flush()
        fn()
    torch.cuda.synchronize()
    if host_sync:
        return _time_cold_synced(fn, settings, flusher)
    cycles = busy_cycles(enqueue_us(fn, flusher), sleep_us_per_cycle())
    sleep, flush = torch.cuda._sleep, flusher.flush

    def busy_then_flush() -> None:
        sleep(cycles)
        flush()

    samples, converged, stop = collect(event_samples(fn, settings.max_reps, before=busy_then_flush), settings)
    return summarize(samples, converged, stop)


#: Shown on a cold record: whether the host launch was hidden (``launch``).
LAUNCH = {False: "hidden", True: "exposed (host sync inside the call)"}


class Cold(TimingMethod):
    """``cold``: :func:`time_cold` with the caller's flusher and host-sync probe; the record adds
    ``launch`` (:data:`LAUNCH`)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        stats = time_cold(call.fn, settings, call.flusher, host_sync=call.host_sync)
        return Reading({**stats.to_dict(), "launch": LAUNCH[call.host_sync]})


METHOD = Cold(
    "cold", "one call between CUDA events, L2 flushed by a read (no dirty lines), launch hidden behind a "
    "busy GPU: kernels and the gaps between them", "flushed", cuda=True, cpu=False, needs_capture=False,
    order=1, needs=Needs(flusher=True, host_sync=True), extras=("launch",), fallback_rank=1)
