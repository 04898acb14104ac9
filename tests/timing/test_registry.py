"""The one registry of timing methods: every name the scenario, the results reader and measure use
comes from it; stream is the decision method; unknown names are refused with the known ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qbench.timing import registry
from qbench.timing.registry import CPU_METHOD, CUDA_METHODS, DECISION_METHOD, METHODS, SCENARIO_METHODS, get


def test_every_scenario_method_is_registered():
    from qbench import scenario

    assert set(scenario.METHODS) <= set(METHODS)
    assert tuple(scenario.METHODS) == SCENARIO_METHODS == ("stream", "cold", "warm", "eager", "kernel")
    assert scenario.TimingSpec().methods == SCENARIO_METHODS  # a scenario runs every method by default
    assert all(METHODS[m].cuda for m in SCENARIO_METHODS)


def test_the_judge_uses_the_registry():
    from qbench import judge

    assert judge.CPU_METHOD == CPU_METHOD == "cpu"
    assert judge.DECISION_METHOD == DECISION_METHOD
    assert judge.METHOD_CHOICES == tuple(METHODS)
    assert judge.FALLBACK_METHODS == ("cold", CPU_METHOD)


def test_decision_method_is_stream_and_unique():
    assert DECISION_METHOD == "stream"
    assert [m.name for m in METHODS.values() if m.decision] == ["stream"]


def test_method_properties():
    stream, cpu = METHODS["stream"], METHODS["cpu"]
    assert (stream.cuda, stream.cpu, stream.needs_capture) == (True, True, True)
    assert (cpu.cuda, cpu.cpu, cpu.needs_capture) == (False, True, False)
    assert METHODS["warm"].needs_capture and not METHODS["cold"].needs_capture
    assert [n for n, m in METHODS.items() if m.cpu] == ["stream", "cpu"]
    assert list(METHODS) == ["stream", "cold", "warm", "eager", "kernel", "cpu"]  # table order
    for name, method in METHODS.items():
        assert method.name == name and method.includes and method.cache
        assert "\n" not in method.includes


def test_get_known_and_unknown():
    assert get("stream") is METHODS["stream"]
    with pytest.raises(KeyError) as info:
        get("hot")
    message = str(info.value)
    assert "'hot'" in message
    for name in METHODS:
        assert name in message


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
