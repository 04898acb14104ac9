"""The one registry of timing methods: name, what each includes, and what it needs.

Scenario validation (``timing.methods``), :mod:`qbench.measure`, the results reader and every
renderer take the method names and their order from here; a method is added in one place.

| name | includes | L2 / cache | needs CUDA | needs capture |
|---|---|---|---|---|
| ``stream`` | per call of a CUDA graph over L distinct weight copies (>= 4 x L2): the decode engine's number | weight from HBM | no (CPU: copies > last-level cache, no graph) | yes on CUDA |
| ``cold`` | one call's kernels and the gaps between them, launch hidden behind a busy GPU | flushed (read flush, clean lines) | yes | no |
| ``warm`` | per call of a graph of 20 calls on ONE weight | hot | yes | yes |
| ``eager`` | host clock around call + synchronize: launch, Python, kernels, sync | as left | yes | no |
| ``kernel`` | sum of the GPU kernel durations of one call (torch.profiler), gaps excluded | flushed before each call | yes | no |
| ``cpu`` | host wall time per call (blocks of calls, perf_counter), one weight | hot | no (CPU only) | no |
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingMethod:
    """One timing method.

    Attributes:
        name: the JSON key under ``latency_us`` (``stream``, ``cold``, ...).
        includes: one line saying what the number contains (shown by ``report --help-columns``).
        cache: the L2 / CPU cache state the weight is read in.
        cuda: runs on CUDA rows.
        cpu: runs on CPU rows.
        needs_capture: the call must be capturable in a CUDA graph (a host sync makes it null).
        decision: decisions (recommend, crossover, --summary) read this method by default.
    """

    name: str
    includes: str
    cache: str
    cuda: bool
    cpu: bool
    needs_capture: bool
    decision: bool = False
    job: str = "layer"


#: Every method, in the order tables show them.
METHODS: dict[str, TimingMethod] = {m.name: m for m in (
    TimingMethod("stream", "µs per call of one CUDA graph calling L distinct weight copies in order "
                 "(copies together >= 4 x L2): weights streamed from HBM, no launch gaps, as a decode "
                 "engine's graph-captured step; on CPU the copies exceed the last-level cache, no graph",
                 "weight from HBM (DRAM on CPU)", cuda=True, cpu=True, needs_capture=True, decision=True),
    TimingMethod("cold", "one call between CUDA events, L2 flushed by a read (no dirty lines), launch "
                 "hidden behind a busy GPU: kernels and the gaps between them", "flushed", cuda=True,
                 cpu=False, needs_capture=False),
    TimingMethod("warm", "µs per call of a CUDA graph of 20 calls on one weight: L2-hot, no launch",
                 "hot (weight < L2 is served from L2)", cuda=True, cpu=False, needs_capture=True),
    TimingMethod("eager", "host clock around call + torch.cuda.synchronize(): Python, launch, kernels, sync "
                 "(the seed page's method)", "as the previous call left it", cuda=True, cpu=False,
                 needs_capture=False),
    TimingMethod("kernel", "sum of one call's GPU kernel durations (torch.profiler), L2 flushed before each "
                 "profiled call, launch gaps excluded", "flushed", cuda=True, cpu=False, needs_capture=False),
    TimingMethod("cpu", "host wall time per call on one weight (blocks of calls, perf_counter)",
                 "hot when the weight fits in the caches", cuda=False, cpu=True, needs_capture=False),
    # the model-step job's methods (qbench.step): one module each, qbench/timing/step_*.py
    TimingMethod("step_graph", "µs per replay of one CUDA graph of the eager decode step (every block, the LM head, "
                 "argmax): no launch gaps, no host work: the engine's view", "weights and KV cache from HBM",
                 cuda=True, cpu=False, needs_capture=True, job="step"),
    TimingMethod("step_compiled", "µs per replay of one CUDA graph of the step compiled by torch.compile (default mode, "
                 "one compiled block reused by every block), captured by hand", "weights and KV cache from HBM",
                 cuda=True, cpu=False, needs_capture=True, job="step"),
    TimingMethod("step_reduce_overhead", "µs per step of torch.compile(mode='reduce-overhead') in a decode loop (token "
                 "n feeds step n+1, no sync between): host included, hidden behind the GPU when it can be; extras: "
                 "host_us (one call's host time), synced_us (one call + sync from idle)", "weights and KV cache from HBM",
                 cuda=True, cpu=False, needs_capture=False, job="step"),
    TimingMethod("step_cpu", "host wall time per eager decode step on the CPU (blocks of steps, perf_counter)",
                 "weights from DRAM (a model exceeds the caches)", cuda=False, cpu=True, needs_capture=False, job="step"),
)}

#: Methods a scenario's ``timing.methods`` may list (run on CUDA; ``stream`` also on CPU).
SCENARIO_METHODS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.cuda and m.job == "layer")
#: The model-step job's methods (:mod:`qbench.step`), in table order.
STEP_METHODS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.job == "step")
#: CUDA methods in table order.
CUDA_METHODS: tuple[str, ...] = SCENARIO_METHODS
#: The method every CPU row has.
CPU_METHOD = "cpu"
#: The method decisions read by default, on CUDA and CPU results alike.
DECISION_METHOD: str = next(n for n, m in METHODS.items() if m.decision)
#: The layer methods (what a layer row's ``latency_us`` may hold).
LAYER_METHODS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.job == "layer")


def get(name: str) -> TimingMethod:
    """The method called ``name``.

    Raises:
        KeyError: unknown name; the message lists the known ones.
    """
    try:
        return METHODS[name]
    except KeyError:
        raise KeyError(f"unknown timing method {name!r}; known: {', '.join(METHODS)}") from None
