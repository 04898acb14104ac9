"""``step_cpu``: the eager decode step on the CPU, host wall clock per step (blocks of steps,
:func:`qbench.timing.cpu.time_cpu`). Weights are read from DRAM whenever the model exceeds the
last-level cache (any real model does)."""

from __future__ import annotations

from typing import Callable

from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats


def run(step: Callable[[], object], settings: TimingSettings) -> Stats:
    """µs per call of ``step`` on the CPU. Raises whatever the step raises."""
    from qbench.timing.cpu import time_cpu

    return time_cpu(step, settings)
