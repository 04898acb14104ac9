"""Timing methods for one (scheme, M) row; one module per method, one registry of them.

| method | function | includes | L2 |
|---|---|---|---|
| ``stream`` | :func:`time_stream` / :func:`time_stream_cpu` | per call of a CUDA graph over L distinct weight copies (CPU: copies in sequence) | weight from HBM |
| ``cold`` | :func:`time_cold` | kernels and gaps between them, launch hidden | flushed by a read |
| ``warm`` | :func:`time_warm` | CUDA-graph replay of one weight, per call | hot |
| ``eager`` | :func:`time_eager` | launch + host overhead + kernels + synchronize | as left |
| ``kernel`` | :func:`profile_kernels` | sum of GPU kernel durations (profiler) | flushed |
| ``cpu`` | :func:`time_cpu` | whole host call (blocks timed with perf_counter, gc off) | hot |

Names, order and what each includes: :mod:`qbench.timing.registry`. All times are µs per
call, summarized as :class:`Stats`; repetitions are adaptive (:func:`collect`,
:class:`TimingSettings`).
"""

import importlib

#: Public name -> the submodule defining it. Imported on first use (PEP 562), so that readers of
#: results (report, compare, recommend) can use :mod:`qbench.timing.registry` without torch.
_WHERE = {
    "Collected": "adaptive", "collect": "adaptive", "time_cold": "cold", "time_cpu": "cpu",
    "time_eager": "eager", "L2Flusher": "flush", "KernelEntry": "kernel", "KernelProfile": "kernel",
    "profile_kernels": "kernel", "METHODS": "registry", "TimingMethod": "registry",
    "TimingSettings": "settings", "Stats": "stats", "median_ci_rel": "stats", "summarize": "stats",
    "StreamPlan": "stream", "StreamPlanError": "stream", "last_level_cache_bytes": "stream",
    "plan_copies": "stream", "time_stream": "stream", "time_stream_cpu": "stream",
    "GraphCaptureError": "warm", "time_warm": "warm",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'qbench.timing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"qbench.timing.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
