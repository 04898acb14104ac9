"""Timing methods for one (scheme, M) row; one module per method.

| method | function | includes | L2 |
|---|---|---|---|
| ``cpu`` | :func:`time_cpu` | whole host call (torch.utils.benchmark.Timer) | n/a |
| ``eager`` | :func:`time_eager` | launch + host overhead + kernels + synchronize | as left |
| ``cold`` | :func:`time_cold` | kernels and gaps between them, launch hidden | flushed |
| ``warm`` | :func:`time_warm` | CUDA-graph replay, per call | hot |
| ``kernel`` | :func:`profile_kernels` | sum of GPU kernel durations (profiler) | as left |

All times are µs per call, summarized as :class:`Stats`; repetitions are adaptive
(:func:`collect`, :class:`TimingSettings`).
"""

from qbench.timing.adaptive import Collected, collect
from qbench.timing.cold import time_cold
from qbench.timing.cpu import time_cpu
from qbench.timing.eager import time_eager
from qbench.timing.flush import L2Flusher
from qbench.timing.kernel import KernelEntry, KernelProfile, profile_kernels
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, median_ci_rel, summarize
from qbench.timing.warm import GraphCaptureError, time_warm

__all__ = [
    "Collected",
    "GraphCaptureError",
    "KernelEntry",
    "KernelProfile",
    "L2Flusher",
    "Stats",
    "TimingSettings",
    "collect",
    "median_ci_rel",
    "profile_kernels",
    "summarize",
    "time_cold",
    "time_cpu",
    "time_eager",
    "time_warm",
]
