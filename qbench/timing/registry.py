"""The one registry of timing methods: a method is one module plus one line in :data:`MODULES`.

Each module ``qbench.timing.<name>`` defines ``METHOD``, a :class:`~qbench.timing.method.TimingMethod`
(its metadata and its ``run``). The modules are imported on first use of :data:`METHODS` (PEP 562)
and import torch only when a method runs, so readers of results (report, compare, recommend) use
the metadata without torch. Scenario validation (``timing.methods``), :mod:`qbench.measure`,
:mod:`qbench.tp.measure`, the results reader and every renderer take the method names, their
order and what each includes from here.

Jobs: a method of job ``"layer"`` times one linear layer (:mod:`qbench.measure`, scenario
``timing.methods``); a method of another job (``"step"``: a model step) is in :data:`METHODS`
too, so that readers know its name and metadata (the step table's notes,
:mod:`qbench.step.view`), but :func:`plan` gives it only to its own job, :func:`extras_owner`
reads one job's methods, and :data:`LAYER_METHODS`, :data:`SCENARIO_METHODS`,
:data:`DECISION_METHOD`, :data:`CPU_METHOD` and :data:`FALLBACK_METHODS` hold layer methods only
(:data:`STEP_METHODS`: the step job's). The step methods (``qbench.timing.step_*``) are timed by
:mod:`qbench.step.measure` through their modules' ``run`` functions.
"""

from __future__ import annotations

import importlib
from typing import Iterable

from qbench.timing.method import TimingMethod

#: The method modules under ``qbench.timing``, in the order tables show the methods: the layer
#: job's, then the model-step job's (:mod:`qbench.step`).
MODULES = ("stream", "cold", "warm", "eager", "kernel", "cpu",
           "step_graph", "step_compiled", "step_reduce_overhead", "step_cpu")
#: The job of a single linear layer (:mod:`qbench.measure`).
LAYER = "layer"
#: The job of a model's decode step (:mod:`qbench.step.measure`).
STEP = "step"

#: ``launch_overhead_us`` = median of the first - median of the second: the host clock around a call
#: and its synchronize, minus the summed durations of its kernels.
LAUNCH_OVERHEAD = ("eager", "kernel")

_methods: dict[str, TimingMethod] = {}


def methods() -> dict[str, TimingMethod]:
    """Every registered method (name -> method), in table order; imports the modules once.

    Raises:
        ValueError: two modules define the same name, or a module has no ``METHOD``.
    """
    if not _methods:
        found: dict[str, TimingMethod] = {}
        for module in MODULES:
            method = getattr(importlib.import_module(f"qbench.timing.{module}"), "METHOD", None)
            if not isinstance(method, TimingMethod):
                raise ValueError(f"qbench.timing.{module}: defines no METHOD (a TimingMethod)")
            if method.name in found:
                raise ValueError(f"timing method {method.name!r} is defined twice")
            found[method.name] = method
        _methods.update(found)
    return _methods


def load() -> None:
    """Import every method module now (the forkserver's preload)."""
    methods()


def layer_methods() -> list[TimingMethod]:
    """The methods of the layer job, in table order."""
    return [m for m in methods().values() if m.job == LAYER]


def plan(names: Iterable[str], device_type: str, job: str = LAYER) -> list[TimingMethod]:
    """The methods of ``job`` to run on a ``device_type`` row, in run order.

    A method runs when it is listed in ``names`` or is ``always`` run, and runs on the device
    (:meth:`~qbench.timing.method.TimingMethod.runs_on`). Order: the plain phase, then the graph
    phase (graph methods on CUDA only: :meth:`~qbench.timing.method.TimingMethod.phase_on`), each by
    ``order``. Names listed that do not run there are the caller's to explain
    (:meth:`~qbench.timing.method.TimingMethod.unavailable`).

    Raises:
        KeyError: a name that is not a registered method of ``job`` (the known ones in the message).
    """
    names = list(names)
    known = {m.name: m for m in methods().values() if m.job == job}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"unknown {job} timing method {unknown[0]!r}; known: {', '.join(known)}")
    chosen = [m for m in known.values() if m.runs_on(device_type) and (m.name in names or m.always)]
    return sorted(chosen, key=lambda m: (m.phase_on(device_type) == "graph", m.order))


def fallback(device_type: str) -> TimingMethod:
    """The layer method of lowest ``fallback_rank`` that runs on ``device_type`` (the end-to-end
    time of a tensor-parallel row: ``cold`` on CUDA, ``cpu`` on the CPU)."""
    return next(m for m in sorted(layer_methods(), key=_rank) if m.fallback_rank is not None
                and m.runs_on(device_type))


def decision_order(job: str) -> tuple[str, ...]:
    """The methods of ``job`` that decisions may read, best first (``fallback_rank`` ascending):
    for the step job the compiled step in a graph, the eager step in a graph, the CPU step, the
    decode loop."""
    return tuple(m.name for m in sorted((m for m in methods().values() if m.job == job), key=_rank)
                 if m.fallback_rank is not None)


def extras_owner(job: str = LAYER) -> dict[str, str]:
    """STATS key -> the method of ``job`` whose records alone carry it (those methods' ``extras``)."""
    return {key: m.name for m in methods().values() if m.job == job for key in m.extras}


def _rank(method: TimingMethod) -> int:
    return method.fallback_rank if method.fallback_rank is not None else 1 << 30


def _derived(name: str):
    layer = layer_methods()
    if name == "METHODS":
        return methods()
    if name == "LAYER_METHODS":
        # The layer job's methods, in table order (what a layer row's ``latency_us`` may hold).
        return tuple(m.name for m in layer)
    if name == "STEP_METHODS":
        # The model-step job's methods, in table order (what a step row's ``latency_us`` may hold).
        return tuple(m.name for m in methods().values() if m.job == STEP)
    if name == "SCENARIO_METHODS":
        # Methods a scenario's ``timing.methods`` may list (the others run on every row they can).
        return tuple(m.name for m in layer if not m.always)
    if name == "CPU_METHOD":
        # The method every CPU row has.
        return next(m.name for m in layer if m.always and m.cpu)
    if name == "HOST_CLOCK_METHOD":
        # The host-clock reading of one call (what a loop that cannot capture a graph pays).
        return next(m.name for m in layer if m.host_clock)
    if name == "DECISION_METHOD":
        # The method decisions read by default, on CUDA and CPU results alike.
        return next(m.name for m in layer if m.decision)
    if name == "FALLBACK_METHODS":
        # What readers read when a file lacks the decision method, in order.
        return tuple(m.name for m in sorted(layer, key=_rank) if m.fallback_rank is not None)
    if name == "COMPARISON_ORDER":
        # The decision method, then the fallbacks (tensor-parallel speed-ups use the first both rows have).
        return (_derived("DECISION_METHOD"), *_derived("FALLBACK_METHODS"))
    raise AttributeError(f"module 'qbench.timing.registry' has no attribute {name!r}")


_DERIVED = ("METHODS", "LAYER_METHODS", "STEP_METHODS", "SCENARIO_METHODS", "CPU_METHOD", "HOST_CLOCK_METHOD", "DECISION_METHOD", "FALLBACK_METHODS", "COMPARISON_ORDER")


def __getattr__(name: str):
    if name not in _DERIVED:
        raise AttributeError(f"module 'qbench.timing.registry' has no attribute {name!r}")
    value = _derived(name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_DERIVED])
