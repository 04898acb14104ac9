"""``step_reduce_overhead``: ``torch.compile(mode="reduce-overhead")`` called in a decode loop.

As gpt-fast's ``generate.py`` and torchao's ``_models/llama/generate.py`` call it: the token of step
n is the input of step n + 1, with no host synchronization in between, so the compiled wrapper's
host work per call (guards, CUDA-graph-tree bookkeeping, one graph launch per compiled region)
overlaps the GPU's work on the previous step. A sample is the host wall time of ``LOOP_STEPS``
such steps (fewer for a slow step, :func:`loop_steps`), from a synchronized start to a synchronize
after the last, divided by the steps: the per-token time a decode loop sees, host included.

Beside it (extras of the reading): ``host_us``, the median host time of one call (the time the
call takes to return, GPU work not waited for), and ``synced_us``, the median of one call plus a
synchronize from an idle GPU: what a loop that cannot pipeline (one that reads each token on the
host before the next step) pays, the launch-time trap of timing one call at a time.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

from qbench.timing.adaptive import collect
from qbench.timing.method import Call, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize

#: Decode steps per sample: long enough that the one synchronize ending a sample is a small
#: share of it (a step is >= ~1 ms on a billion-parameter model), short enough for many samples.
#: Project choice.
LOOP_STEPS = 16
#: The fewest steps per sample, and the wall time (s) a sample of a slow step is sized to: a step of
#: hundreds of ms (compiled int8 weight-only at M = 16 lowers to a slow kernel) would take seconds per
#: sample at 16 steps, while the one unoverlapped call a sample holds is already under 1 % of 4 steps
#: of it. Project choice.
MIN_LOOP_STEPS = 4
LOOP_SAMPLE_S = 0.25
#: Calls timed one at a time for ``host_us`` and ``synced_us``.
SINGLE_CALLS = 10


def loop_steps(step_s: float) -> int:
    """Decode steps per sample for a step of ``step_s`` seconds (a synchronized estimate):
    :data:`LOOP_STEPS` for a step up to ``LOOP_SAMPLE_S / LOOP_STEPS`` (15.6 ms), then as many as
    fill :data:`LOOP_SAMPLE_S`, at least :data:`MIN_LOOP_STEPS`. A sample's pipeline fill (the first
    call's host work, not overlapped) is then at most the host time over ``LOOP_SAMPLE_S`` of it.

    Raises:
        ValueError: ``step_s`` is not a positive finite number.
    """
    if not (step_s > 0 and math.isfinite(step_s)):
        raise ValueError(f"loop_steps: step_s must be a positive finite number of seconds, got {step_s!r}")
    return max(MIN_LOOP_STEPS, min(LOOP_STEPS, math.ceil(LOOP_SAMPLE_S / step_s)))


def run(step: Callable[[object], object], first: object, settings: TimingSettings,
        synchronize: Callable[[], None], mark_step: Callable[[], None] = lambda: None) -> tuple[Stats, dict]:
    """Per-step µs of ``step`` in a pipelined decode loop, and the single-call extras.

    Args:
        step: ``step(tokens) -> next tokens`` (the compiled step; CUDA-graph trees inside).
        first: the first tokens.
        settings: warmup (steps before timing), min_reps, max_reps, target_rel_ci, budget_s.
        synchronize: waits for the device (``torch.cuda.synchronize``).
        mark_step: called before each step (``torch.compiler.cudagraph_mark_step_begin``).

    Returns:
        ``(Stats, {"loop_steps", "host_us", "synced_us"})``, µs.
    """
    state = {"tokens": first}

    def one() -> None:
        mark_step()
        state["tokens"] = step(state["tokens"])

    for _ in range(max(3, settings.warmup)):
        one()
    synchronize()
    t0 = time.perf_counter()
    for _ in range(2):
        one()
    synchronize()
    steps = loop_steps((time.perf_counter() - t0) / 2)

    def sample_batch(n: int) -> list[float]:
        out = []
        for _ in range(n):
            synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                one()
            synchronize()
            out.append((time.perf_counter() - t0) * 1e6 / steps)
        return out

    samples, converged, stop = collect(sample_batch, settings)
    host, synced = [], []
    for _ in range(SINGLE_CALLS):
        synchronize()
        t0 = time.perf_counter()
        one()
        t1 = time.perf_counter()
        synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        synced.append((t2 - t0) * 1e6)
    extras = {"loop_steps": steps, "host_us": statistics.median(host), "synced_us": statistics.median(synced)}
    return summarize(samples, converged, stop), extras


class StepReduceOverhead(TimingMethod):
    """``step_reduce_overhead``: :func:`run` of the call in a decode loop. ``call.fn`` is one step
    that feeds itself (it reads the tokens its previous call produced and keeps its own); the loop
    synchronizes ``call.device`` and marks each step's start for CUDA-graph trees
    (``torch.compiler.cudagraph_mark_step_begin``). The record adds ``loop_steps``, ``host_us`` and
    ``synced_us`` (``extras``)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        import torch

        stats, extras = run(lambda _tokens: call.fn(), None, settings,
                            lambda: torch.cuda.synchronize(call.device), torch.compiler.cudagraph_mark_step_begin)
        return Reading({**stats.to_dict(), **extras})


METHOD = StepReduceOverhead(
    "step_reduce_overhead", "µs per step of torch.compile(mode='reduce-overhead') in a decode loop (token n feeds "
    "step n+1, no sync between): host included, hidden behind the GPU when it can be; extras: host_us (one call's "
    "host time), synced_us (one call + sync from idle)", "weights and KV cache from HBM", cuda=True, cpu=False,
    needs_capture=False, order=2, extras=("loop_steps", "host_us", "synced_us"), job="step",
    compiled="reduce-overhead", short="loop (r-o)", twin="step_compiled", fallback_rank=3)
