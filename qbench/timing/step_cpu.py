"""``step_cpu``: the eager decode step on the CPU, host wall clock per step (blocks of steps,
:func:`qbench.timing.cpu.time_cpu`). Weights are read from DRAM whenever the model exceeds the
last-level cache (any real model does)."""

from __future__ import annotations

from typing import Callable

from qbench.timing.method import Call, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats


def run(step: Callable[[], object], settings: TimingSettings) -> Stats:
    """µs per call of ``step`` on the CPU. Raises whatever the step raises."""
    from qbench.timing.cpu import time_cpu

    return time_cpu(step, settings)


class StepCpu(TimingMethod):
    """``step_cpu``: :func:`run` of the call (``call.fn``: one eager decode step on the CPU)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        return Reading(run(call.fn, settings).to_dict())


METHOD = StepCpu("step_cpu", "host wall time per eager decode step on the CPU (blocks of steps, perf_counter)",
                 "weights from DRAM (a model exceeds the caches)", cuda=False, cpu=True, needs_capture=False,
                 order=3, job="step", short="cpu", fallback_rank=2)
