"""measure's one loop over the planned methods, on a CUDA row played on the CPU: every method's
``run`` is replaced by a fake that logs what it got, so the order (plain phase per M, then the
graph phase at every M), what ``needs`` provides, the one error path, and "one failed capture
ends capturing" are checked without a GPU."""

from __future__ import annotations

import types

import pytest
import torch

from qbench import measure, scenario
from qbench.timing import registry
from qbench.timing._cuda import GraphCaptureError
from qbench.timing.method import Reading


@pytest.fixture
def cuda_runner(monkeypatch):
    """A ``_Runner`` for a CUDA device with fake methods; returns (runner, rows, log)."""
    log: list[tuple] = []

    def fake_run(self, call, settings):
        m = call.fn()
        log.append((self.name, m, call.flusher is not None, call.host_sync, len(call.calls or ())))
        if (self.name, m) == ("eager", 1):
            raise ValueError("bad call\nsecond line")
        if (self.name, m) == ("kernel", 1):
            raise RuntimeError("no CUPTI")
        if (self.name, m) == ("warm", 8):
            raise GraphCaptureError("CUDA graph capture failed: RuntimeError: operation not permitted")
        dispatch = ({"kernels": [{"name": "ampere_bf16_s16816gemm"}], "host_sync": False, "graph_capturable": None}
                    if self.name == "kernel" else None)
        return Reading({"median": float(m)}, dispatch=dispatch)

    for method in registry.METHODS.values():
        monkeypatch.setattr(type(method), "run", fake_run)
    monkeypatch.setattr(measure, "syncs_host", lambda fn: True)
    monkeypatch.setattr(measure, "_gpu_state_module", lambda: None)
    import qbench.timing.flush

    monkeypatch.setattr(qbench.timing.flush, "L2Flusher", lambda device, multiple: types.SimpleNamespace(multiple=multiple))
    sc = scenario.from_dict({"name": "x", "m": [1, 8], "schemes": ["bf16"]}, "x.toml")
    runner = measure._Runner.__new__(measure._Runner)
    device = torch.device("cuda", 0)
    plan = registry.plan(sc.timing.methods, device.type)
    runner.scenario, runner.device, runner.settings, runner.compiled = sc, device, sc.timing, False
    runner.scheme = types.SimpleNamespace(family="float")
    runner.book = types.SimpleNamespace(stored_bytes=1024)
    runner.plain = [m for m in plan if m.phase_on("cuda") == "plain"]
    runner.graph = [m for m in plan if m.phase_on("cuda") == "graph"]
    runner.module = lambda x: x
    runner.flusher, runner.spent, runner._copy_modules, runner.copies_why = None, {}, None, None
    runner.copies = measure.Copies([runner.module, runner.module], plan=None, how="deepcopy")
    runner.inputs = {1: 1, 8: 8}
    rows = [{"m": m, "status": "ok", "latency_us": {}, "latency_reasons": {}, "dispatch": None, "flags": [],
             "gpu_state": None} for m in (1, 8)]
    return runner, rows, log


def test_plain_phase_per_m_then_graph_phase_and_one_failed_capture(cuda_runner):
    runner, rows, log = cuda_runner
    for row in rows:
        for method in runner.plain:
            runner._run(row, method, runner.inputs[row["m"]], graph=False)
    runner.measure_graphs(rows)
    # (name, M, flusher given, host_sync probed, copies) in the order they ran
    assert log == [("cold", 1, True, True, 0), ("eager", 1, False, False, 0), ("kernel", 1, True, False, 0),
                   ("cold", 8, True, True, 0), ("eager", 8, False, False, 0), ("kernel", 8, True, False, 0),
                   ("warm", 1, False, False, 0), ("stream", 1, False, False, 2), ("warm", 8, False, False, 0)]
    one, eight = rows
    assert list(one["latency_us"]) == ["cold", "eager", "kernel", "warm", "stream"]
    assert one["latency_us"]["eager"] is None and one["latency_reasons"]["eager"] == {"kind": "error", "text": "ValueError: bad call"}
    assert one["latency_reasons"]["kernel"] == {"kind": "error", "text": "profiler: RuntimeError: no CUPTI"}  # error_prefix
    assert eight["dispatch"] == {"label": "float-gemm", "kernels": [{"name": "ampere_bf16_s16816gemm"}],
                                 "host_sync": False, "graph_capturable": False}
    assert one["dispatch"] is None  # its kernel method failed: no dispatch record to mark
    failure = "CUDA graph capture failed at M=8: CUDA graph capture failed: RuntimeError: operation not permitted"
    assert eight["latency_reasons"]["warm"] == {"kind": "capture-failed", "text": failure}
    assert eight["latency_reasons"]["stream"] == {"kind": "not-attempted", "text": f"not attempted: {failure}"}
    assert one["latency_us"]["stream"] == {"median": 1.0}
    assert list(runner.spent) == ["cold", "eager", "kernel", "warm", "stream"]


def test_a_method_without_its_copies_gets_their_reason_and_capturing_goes_on(cuda_runner):
    runner, rows, log = cuda_runner
    runner.copies, runner.copies_why = None, "copies for stream: StreamPlanError: only 2 fit"
    runner.measure_graphs(rows[:1])
    assert rows[0]["latency_reasons"] == {"stream": {"kind": "copies", "text": "copies for stream: StreamPlanError: only 2 fit"}}
    assert [entry[0] for entry in log] == ["warm"]  # stream's run was never called
