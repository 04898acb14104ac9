"""Eager timing: host clock around one call plus a device synchronize (``eager``)."""

from __future__ import annotations

import time
from typing import Callable

from qbench.timing._cuda import require_cuda, torch
from qbench.timing.adaptive import collect
from qbench.timing.method import Call, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize


def time_eager(fn: Callable[[], object], settings: TimingSettings) -> Stats:
    """Host wall time of ``fn(); torch.cuda.synchronize()``, µs (method label ``eager``).

    The seed page's method: ``time.perf_counter`` before the call and after the
    synchronize of the current device, the GPU idle at the start of every sample. It
    includes Python and dispatcher overhead, every kernel launch, the gaps between
    kernels, the kernels themselves and the synchronize round trip; the L2 is whatever
    the previous call left (warm for a weight that fits in it).

    Args:
        fn: zero-argument callable that enqueues work on the current CUDA device.
        settings: warmup (calls), min_reps, max_reps, target_rel_ci, budget_s.

    Returns:
        Stats, µs per call.

    Raises:
        RuntimeError: no CUDA device. Whatever fn raises.
    """
    require_cuda("time_eager")
    cuda = torch.cuda  # bound once: the timed region holds the call and the synchronize only
    for _ in range(settings.warmup):
        fn()
    cuda.synchronize()

    def sample_batch(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            cuda.synchronize()
            out.append((time.perf_counter() - t0) * 1e6)
        return out

    samples, converged, stop = collect(sample_batch, settings)
    return summarize(samples, converged, stop)


class Eager(TimingMethod):
    """``eager``: :func:`time_eager` of the call."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        return Reading(time_eager(call.fn, settings).to_dict())


METHOD = Eager("eager", "host clock around call + torch.cuda.synchronize(): Python, launch, kernels, sync "
               "(the seed page's method)", "as the previous call left it", cuda=True, cpu=False,
               needs_capture=False, order=2, host_clock=True)
