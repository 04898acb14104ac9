"""The one registry of timing methods: every name the scenario, the results reader and measure use
comes from it; stream is the decision method; unknown names are refused with the known ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qbench.timing import registry
from qbench.timing.method import Call, Needs, Reading, TimingMethod
from qbench.timing.registry import CPU_METHOD, DECISION_METHOD, FALLBACK_METHODS, METHODS, SCENARIO_METHODS, plan


def test_every_scenario_method_is_registered():
    from qbench.layer import tables

    assert set(tables.METHODS) <= set(METHODS)
    assert tuple(tables.METHODS) == SCENARIO_METHODS == ("stream", "cold", "warm", "eager", "kernel")
    assert tables.LayerTiming().methods == SCENARIO_METHODS  # a layer scenario runs every method by default
    assert all(METHODS[m].cuda for m in SCENARIO_METHODS)


def test_the_judge_uses_the_registry():
    from qbench import judge

    assert judge.CPU_METHOD == CPU_METHOD == "cpu"
    assert judge.DECISION_METHOD == DECISION_METHOD
    assert judge.METHOD_CHOICES == registry.LAYER_METHODS  # a step's methods are not --method choices
    assert judge.FALLBACK_METHODS == FALLBACK_METHODS == ("cold", CPU_METHOD)
    # the seed page's host clock, what recommend quotes for a scheme a graph cannot capture: one layer method
    assert judge.HOST_CLOCK_METHOD == registry.HOST_CLOCK_METHOD == "eager"
    assert [m.name for m in registry.methods().values() if m.host_clock] == ["eager"]


def test_decision_method_is_stream_and_unique():
    assert DECISION_METHOD == "stream"
    assert [m.name for m in METHODS.values() if m.decision] == ["stream"]


def test_method_properties():
    stream, cpu = METHODS["stream"], METHODS["cpu"]
    assert (stream.cuda, stream.cpu, stream.needs_capture) == (True, True, True)
    assert (cpu.cuda, cpu.cpu, cpu.needs_capture) == (False, True, False)
    assert METHODS["warm"].needs_capture and not METHODS["cold"].needs_capture
    assert [n for n in registry.LAYER_METHODS if METHODS[n].cpu] == ["stream", "cpu"]
    assert registry.LAYER_METHODS == ("stream", "cold", "warm", "eager", "kernel", "cpu")  # table order
    assert registry.STEP_METHODS == ("step_graph", "step_compiled", "step_reduce_overhead", "step_cpu")
    assert list(METHODS) == [*registry.LAYER_METHODS, *registry.STEP_METHODS]
    for name, method in METHODS.items():
        assert method.name == name and method.includes and method.cache
        assert "\n" not in method.includes


def test_plan_orders_by_phase_then_order():
    """CUDA: the plain methods (cold, eager, kernel), then the graph methods (warm, then stream), in
    whatever order the scenario lists them; CPU: ``cpu`` (every CPU row has it) then ``stream``, no
    graph phase; a method not asked for does not run, unless it is ``always`` run."""
    names = lambda ms: [m.name for m in ms]  # noqa: E731
    assert names(plan(SCENARIO_METHODS, "cuda")) == ["cold", "eager", "kernel", "warm", "stream"]
    assert names(plan(["stream", "warm", "cold"], "cuda")) == ["cold", "warm", "stream"]
    assert names(plan(SCENARIO_METHODS, "cpu")) == ["cpu", "stream"]
    assert names(plan(["cold"], "cpu")) == ["cpu"]
    assert [m.phase_on("cuda") for m in plan(SCENARIO_METHODS, "cuda")] == ["plain"] * 3 + ["graph"] * 2
    assert names(plan([], "cuda", job="step")) == []  # no step method is always run
    assert names(plan(registry.STEP_METHODS, "cuda", job="step")) == ["step_graph", "step_compiled",
                                                                       "step_reduce_overhead"]
    assert names(plan(registry.STEP_METHODS, "cpu", job="step")) == ["step_cpu"]
    assert not {"step_graph", "step_cpu"} & set(names(plan(SCENARIO_METHODS, "cpu")) + names(plan(SCENARIO_METHODS, "cuda")))
    with pytest.raises(KeyError, match="unknown layer timing method 'step_graph'"):
        plan(["stream", "step_graph"], "cuda")  # the layer plan never runs a step method
    with pytest.raises(KeyError, match="unknown step timing method"):
        plan(["stream"], "cuda", job="step")  # a layer method is not a step method
    with pytest.raises(KeyError) as info:
        plan(["stream", "hot"], "cuda")
    assert "'hot'" in str(info.value) and all(n in str(info.value) for n in SCENARIO_METHODS)


def test_method_objects_carry_needs_extras_and_ranks():
    cold, kernel, cpu = METHODS["cold"], METHODS["kernel"], METHODS["cpu"]
    assert cold.needs == Needs(flusher=True, host_sync=True) and cold.extras == ("launch",)
    assert kernel.needs == Needs(flusher=True) and not kernel.shown_by_default
    assert cpu.needs == Needs(cpu_load=True) and cpu.always
    assert [n for n, m in METHODS.items() if not m.shown_by_default] == ["kernel"]
    assert registry.fallback("cuda").name == "cold" and registry.fallback("cpu").name == "cpu"
    assert registry.COMPARISON_ORDER == ("stream", "cold", "cpu")
    assert registry.extras_owner()["launch"] == "cold" and registry.extras_owner()["copies"] == "stream"
    assert [m.job for m in METHODS.values()] == ["layer"] * 6 + ["step"] * 4
    assert registry.extras_owner("step") == {"loop_steps": "step_reduce_overhead", "host_us": "step_reduce_overhead",
                                             "synced_us": "step_reduce_overhead"}
    assert "host_us" not in registry.extras_owner()  # a layer row's extras are the layer methods' only
    assert METHODS["warm"].unavailable("cpu") == "CUDA method; this row ran on the CPU"


def test_a_method_is_one_object_with_a_run():
    """A method of another job (a model step) written against the API: run() returns a Reading; the
    layer plan never picks it."""

    class Fixed(TimingMethod):
        def run(self, call: Call, settings) -> Reading:
            return Reading({"median": call.fn()})

    step = Fixed("step_fixed", "a fixed number", "as left", cuda=True, cpu=True, needs_capture=False, job="step")
    assert step.run(Call(fn=lambda: 2.0, device=None), None).record == {"median": 2.0}
    assert step.phase == "plain" and step.needs == Needs() and step.fallback_rank is None
    with pytest.raises(ValueError, match="phase"):
        TimingMethod("x", "x", "x", cuda=True, cpu=True, needs_capture=False, phase="hot")


def test_step_methods_are_the_step_specs_methods():
    """The [model] table's ``methods`` (torch-free :mod:`qbench.step.spec`) are the registry's step
    methods, in its order; a scenario's ``timing.methods`` refuses them."""
    from qbench.scenario import ScenarioError, from_dict
    from qbench.step import spec

    assert spec.STEP_METHODS == registry.STEP_METHODS
    with pytest.raises(ScenarioError, match="methods"):
        from_dict({"name": "x", "m": [1], "timing": {"methods": ["step_graph"]}, "schemes": ["bf16"]}, "x.toml")


def test_methods_are_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS["stream"].decision = False


def test_scenario_refuses_an_unknown_method():
    from qbench.scenario import ScenarioError, from_dict

    with pytest.raises(ScenarioError, match="methods"):
        from_dict({"name": "x", "m": [1], "timing": {"methods": ["stream", "hot"]}, "schemes": ["bf16"]}, "x.toml")
    sc = from_dict({"name": "x", "m": [1], "timing": {"methods": ["stream"]}, "schemes": ["bf16"]}, "x.toml")
    assert sc.timing.methods == ("stream",)


def test_registry_imports_without_torch():
    """Readers of results (report, compare, recommend) use the registry without importing torch."""
    code = "import sys, qbench.timing.registry as r; assert r.DECISION_METHOD; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert registry.__name__ == "qbench.timing.registry"
