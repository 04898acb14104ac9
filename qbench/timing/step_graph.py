"""``step_graph``: the eager decode step captured in one CUDA graph and replayed (the engine's view).

The whole step (embedding, every block's kernels, norm, LM head, argmax) is captured once after
warm-up on a side stream (:func:`qbench.timing.warm.capture_graph`); a sample is one replay
between two CUDA events. Every replay reads every block's weights from HBM (the blocks' weights
are distinct and together far larger than L2) and the KV cache of every block; there are no launch
gaps and no host work: what a decode engine that replays a captured step (vLLM, TensorRT-LLM,
SGLang) pays per token, with the eager kernels.
"""

from __future__ import annotations

from typing import Callable

from qbench.timing.method import Call, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats


def run(step: Callable[[], object], settings: TimingSettings) -> Stats:
    """µs per replay of one CUDA graph of ``step`` (a zero-argument call of the whole decode step).

    Raises:
        RuntimeError: no CUDA device.
        qbench.timing.warm.GraphCaptureError: the step cannot be captured (a host sync inside).
    """
    from qbench.timing.stream import time_stream

    return time_stream([step], settings)


class StepGraph(TimingMethod):
    """``step_graph``: :func:`run` of the call (``call.fn``: one whole decode step)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        return Reading(run(call.fn, settings).to_dict())


METHOD = StepGraph("step_graph", "µs per replay of one CUDA graph of the eager decode step (every block, the LM head, "
                   "argmax): no launch gaps, no host work: the engine's view", "weights and KV cache from HBM",
                   cuda=True, cpu=False, needs_capture=True, order=0, job="step",
                   short="graph", fallback_rank=1)
