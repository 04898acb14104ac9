"""``step_compiled``: the step compiled by ``torch.compile`` (default mode: no CUDA graphs of its
own) and captured by hand in one CUDA graph, replayed.

Compilation is regional, as ``torch.compile``'s regional-compilation recipe does for repeated
transformer blocks: one compiled function for the block (every block instance reuses its code:
parameters and buffers are graph inputs under ``inline_inbuilt_nn_modules``) and one for the
norm, LM head and argmax. The caller compiles and warms up (the compile happens outside the timed
region); this module captures and times exactly like ``step_graph``, so the two differ only by
the kernels that ran.
"""

from __future__ import annotations

from typing import Callable

from qbench.timing.method import Call, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats


def run(step: Callable[[], object], settings: TimingSettings) -> Stats:
    """µs per replay of one CUDA graph of the compiled ``step``.

    Raises:
        RuntimeError: no CUDA device.
        qbench.timing.warm.GraphCaptureError: the compiled step cannot be captured.
    """
    from qbench.timing.stream import time_stream

    return time_stream([step], settings)


class StepCompiled(TimingMethod):
    """``step_compiled``: :func:`run` of the call (``call.fn``: the compiled step, already compiled
    and warmed up by the caller)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        return Reading(run(call.fn, settings).to_dict())


METHOD = StepCompiled("step_compiled", "µs per replay of one CUDA graph of the step compiled by torch.compile (default "
                      "mode, one compiled block reused by every block), captured by hand",
                      "weights and KV cache from HBM", cuda=True, cpu=False, needs_capture=True, order=1, job="step",
                      compiled="default", short="compiled", twin="step_graph", fallback_rank=0)
