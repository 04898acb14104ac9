"""measure: the flags a row carries when it could mislead a reader, each tripped by an input made
to trip it (issue 12, item 4): a weight repacked on the first call, a compiled call that compiled
nothing or broke its graph, and a failed row's reason that keeps the exception's first and last line."""

from __future__ import annotations

import torch

from qbench import scenario, schemes
from qbench.schemes import ledger
from qbench.measure import describe_exception, failed_rows, measure_scheme
from qbench.schemes.base import Scheme, TensorPart
from tests.conftest import small_scenario_toml

CPU = torch.device("cpu")


class _Repacking(torch.nn.Module):
    """A linear whose stored weight becomes smaller on its first call (as bitsandbytes' 4-bit CPU
    layer repacks): a float32 weight, then the same values kept as bf16."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)

    def forward(self, x):
        if self.weight.dtype == torch.float32:
            self.weight = torch.nn.Parameter(self.weight.to(torch.bfloat16), requires_grad=False)
        return torch.nn.functional.linear(x, self.weight.float())


class _Broken(torch.nn.Module):
    """A linear whose forward breaks the Dynamo graph once (a print of a traced value)."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)

    def forward(self, x):
        y = torch.nn.functional.linear(x, self.weight)
        torch._dynamo.graph_break()
        return y * 1.0


def _register(name, build):
    if name not in schemes.names():
        schemes.register(Scheme(
            name=name, library="torch", family="float", summary=f"{name} (test only)", weight_dtype="float32",
            activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32, build=build,
            parts=lambda m: [TensorPart("weight", "payload", m.weight.detach())],
        ))


def _rows(tmp_path, name, mode="eager"):
    text = small_scenario_toml([name], m=(1, 2)).replace(f'name = "{name}"', f'name = "{name}"\nmode = "{mode}"')
    path = tmp_path / "s.toml"
    path.write_text(text)
    sc = scenario.load(path)
    return measure_scheme(sc, 0, CPU)


def test_a_weight_repacked_on_the_first_call_is_counted_as_timed_and_flagged(tmp_path):
    _register("repack-test", lambda w, b, o: _Repacking(w))
    try:
        rows = _rows(tmp_path, "repack-test")
    finally:
        schemes._REGISTRY.pop("repack-test", None)
    k, n = 256, 128
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert row["stored_bytes"] == k * n * 2  # bf16 after the first call, not the 4-byte build
        assert any(f["name"] == "repacked" and f"{k * n * 4} -> {k * n * 2}" in f["text"] for f in row["flags"])


def _proc_stat(monkeypatch, busy_fraction: float) -> None:
    """/proc/stat as the row's 0.1 s window sees it: ``busy_fraction`` of every CPU busy."""
    from qbench import env

    lines = iter(["cpu  0 0 0 0 0 0 0 0", f"cpu  {busy_fraction * 1000:.0f} 0 0 {(1 - busy_fraction) * 1000:.0f} 0 0 0 0"] * 100)
    monkeypatch.setattr(env, "_proc_stat_cpu", lambda: next(lines))
    monkeypatch.setattr(env.time, "sleep", lambda s: None)


def test_an_unchanged_weight_has_no_flags(tmp_path, monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine
    _proc_stat(monkeypatch, 0.0)
    rows = _rows(tmp_path, "fp32")
    assert [r["flags"] for r in rows] == [[], []]
    assert rows[0]["stored_bytes"] == 256 * 128 * 4


def test_a_busy_cpu_flags_every_cpu_row(tmp_path, monkeypatch):
    import os

    cores = os.cpu_count()
    # every core busy with other work while the worker sleeps after its timing
    _proc_stat(monkeypatch, 1.0)
    rows = _rows(tmp_path, "fp32")
    for row in rows:
        assert row["cpu_load"]["free_cores"] == 0.0 and row["cpu_load"]["oversubscribed"] is True
        assert row["cpu_load"]["busy_cores_now"] == float(cores)
        assert [f["name"] for f in row["flags"]] == ["cpu-busy"]
        assert f"{float(cores):.1f} cores busy with other work leaves 0.0 free cores" in row["flags"][0]["text"]


def test_a_busy_load_average_without_proc_stat_still_flags(tmp_path, monkeypatch):
    """No /proc/stat: the 1-minute average minus the worker's own threads decides."""
    import os

    from qbench import env

    monkeypatch.setattr(env, "_proc_stat_cpu", lambda: None)
    cores = os.cpu_count()
    monkeypatch.setattr("os.getloadavg", lambda: (float(cores + torch.get_num_threads()), 0.0, 0.0))
    rows = _rows(tmp_path, "fp32")
    for row in rows:
        assert row["cpu_load"]["free_cores"] == 0.0 and row["cpu_load"]["busy_cores_now"] is None
        assert row["flags"][0]["name"] == "cpu-busy"
        assert row["flags"][0]["text"].startswith(f"load {cores + torch.get_num_threads():.1f} leaves 0.0 free")


def test_a_throttle_reason_after_a_method_is_a_flag(monkeypatch):
    """One reading for every job's producer (qbench.gpu_state.record_reading): the layer runner's and
    the model step's rows get the same reading and the same flag."""
    from qbench import gpu_state, measure

    runner = measure._Runner.__new__(measure._Runner)
    runner.device = torch.device("cuda", 0)
    monkeypatch.setattr(gpu_state, "read_gpu_state",
                        lambda index: {"sm_clock_mhz": 1500, "throttle_reasons": ["sw_power_cap"]})
    row = {"flags": [], "gpu_state": None}
    runner._reading(row, "stream")
    assert row["gpu_state"]["by_method"]["stream"]["sm_clock_mhz"] == 1500
    assert row["flags"] == [{"name": "throttled", "text": "sw_power_cap active right after stream"}]
    step_row = {"flags": [], "gpu_state": None}
    gpu_state.record_reading(step_row, "step_graph", torch.device("cuda", 0))
    assert step_row["flags"] == [{"name": "throttled", "text": "sw_power_cap active right after step_graph"}]
    cpu_row = {"flags": [], "gpu_state": None}
    gpu_state.record_reading(cpu_row, "step_cpu", torch.device("cpu"))
    assert cpu_row == {"flags": [], "gpu_state": None}


def test_graph_breaks_are_counted_and_flagged(tmp_path):
    import pytest

    from qbench.compile_info import have_compiler

    if not have_compiler():
        pytest.skip("torch.compile on CPU needs a C++ compiler (none found)")
    _register("break-test", lambda w, b, o: _Broken(w))
    try:
        rows = _rows(tmp_path, "break-test", mode="compiled")
    finally:
        schemes._REGISTRY.pop("break-test", None)
    row = rows[0]
    assert row["status"] == "ok", row["reason"]
    assert row["compile"]["graph_breaks"] >= 1
    assert any(f["name"] == "graph-breaks" for f in row["flags"])
    # a non-torchao scheme is compiled with the settings a torchao build switches on (compile_info.tune_like_torchao)
    assert row["compile"]["inductor"]["coordinate_descent_tuning"] is True


class _Uncompilable(torch.nn.Module):
    """A linear whose forward Dynamo is told to skip: torch.compile compiles no graph."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)

    @torch._dynamo.disable
    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


def test_a_compiled_row_that_compiled_nothing_is_flagged(tmp_path):
    import pytest

    from qbench.compile_info import have_compiler

    if not have_compiler():
        pytest.skip("compiled rows on CPU need a C++ compiler (none found): the row would be skipped")
    _register("nocompile-test", lambda w, b, o: _Uncompilable(w))
    try:
        rows = _rows(tmp_path, "nocompile-test", mode="compiled")
    finally:
        schemes._REGISTRY.pop("nocompile-test", None)
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert row["compile"]["graphs_compiled"] == 0
        assert any(f["name"] == "not-compiled" for f in row["flags"])


def test_describe_exception_keeps_type_first_and_last_line():
    exc = AssertionError("expected 16 | K, got 4000\n  more context\nSee https://example.org/opcheck")
    assert describe_exception(exc) == ("AssertionError: expected 16 | K, got 4000 … "
                                       "See https://example.org/opcheck")
    assert describe_exception(ValueError("one line")) == "ValueError: one line"
    assert describe_exception(RuntimeError()) == "RuntimeError"
    assert len(describe_exception(ValueError("x" * 1000))) == 300


def test_failed_rows_keeps_first_and_last_line():
    rows = failed_rows([{}, {}], "failed", "run: AssertionError: the assertion\nframe\nSee https://x/opcheck")
    assert [r["reason"] for r in rows] == ["run: AssertionError: the assertion … See https://x/opcheck"] * 2
    assert failed_rows([{}], "skipped", "")[0]["reason"] == "skipped"


def test_ledger_count_is_the_repacked_state():
    # the hand value behind the first test: 256 x 128 float32 -> bf16
    module = _Repacking(torch.randn(128, 256))
    before = ledger.count([TensorPart("weight", "payload", module.weight.detach())]).stored_bytes
    module(torch.randn(1, 256))
    after = ledger.count([TensorPart("weight", "payload", module.weight.detach())]).stored_bytes
    assert (before, after) == (131072, 65536)


def test_a_row_faster_than_its_roofline_is_flagged():
    from qbench.measure import finish_row

    # 2*1*4096*4096 FLOPs, 33,570,816 min bytes; ceilings 4000 GB/s -> 8.39 µs roofline; stream 7.0 µs
    row = {"status": "ok", "min_bytes": 33570816, "flops": 2 * 4096 * 4096, "compute_dtype": "bf16",
           "device": "cuda:0", "stored_bytes": 33554432, "roofline_us": None, "roofline_bound": None,
           "roofline_source": None, "roofline_reason": None, "hbm_floor_us": None, "hbm_floor_fraction": None,
           "launch_overhead_us": None, "roofline_fraction": None, "achieved_gbps": None, "achieved_tflops": None,
           "achieved_method": None, "flags": [],
           "latency_us": {"stream": {"median": 7.0}, "cold": {"median": 9.0}}}
    finish_row(row, {"measured": {"memory_gbps": 4000.0, "tflops": {"bf16": 800.0}}})
    assert abs(row["roofline_us"] - 33570816 / 4000e9 * 1e6) < 1e-9
    assert row["achieved_method"] == "stream" and row["roofline_fraction"] > 1
    assert len(row["flags"]) == 1 and row["flags"][0]["name"] == "above-ceiling"
    assert row["flags"][0]["text"].startswith("stream 7 µs is faster than the measured roofline allows (8.39 µs)")
    row2 = dict(row, flags=[], latency_us={"stream": {"median": 9.0}})
    finish_row(row2, {"measured": {"memory_gbps": 4000.0, "tflops": {"bf16": 800.0}}})
    assert row2["flags"] == []


# ---- the one error path writes structured reasons (schema 2: row.reason_record) ----------------

def test_a_method_that_raises_is_an_error_reason_and_failed_copies_a_copies_reason(tmp_path, monkeypatch):
    """measure's one error path: a method whose run raises gets ``{"kind": "error"}`` with the
    exception's first line; a method that needs copies whose calls cannot be made (before it runs)
    gets ``{"kind": "copies"}``; a CUDA method on a CPU row ``cuda-only``. The cpu time stays."""
    from qbench import measure
    from qbench.timing import stream

    def boom(self, call, settings):
        raise RuntimeError("timer broke\nsecond line")

    monkeypatch.setattr(stream.Stream, "run", boom)
    rows = _rows(tmp_path, "fp32")
    for row in rows:
        assert row["status"] == "ok" and row["latency_us"]["cpu"]["median"] > 0
        assert row["latency_us"]["stream"] is None
        assert row["latency_reasons"]["stream"] == {"kind": "error", "text": "RuntimeError: timer broke"}
        assert {row["latency_reasons"][m]["kind"] for m in ("cold", "warm", "eager", "kernel")} == {"cuda-only"}
    monkeypatch.undo()

    def no_calls(self, x):
        raise MemoryError("copies' calls")

    monkeypatch.setattr(measure._Runner, "_calls", no_calls)
    for row in _rows(tmp_path, "fp32"):
        assert row["latency_reasons"]["stream"] == {"kind": "copies", "text": "MemoryError: copies' calls"}


def _fault_rows(tmp_path, weight, scheme="fp32", inputs_table=""):
    """Rows of ``scheme`` at M = 1, 2 on a 256 x 256 weight saved to a safetensors file."""
    from safetensors.torch import save_file

    save_file({"w": weight}, str(tmp_path / "w.safetensors"))
    text = small_scenario_toml([scheme], m=(1, 2), n=256) + inputs_table + \
        '\n[weight]\nsource = "safetensors"\npath = "w.safetensors"\ntensor = "w"\n'
    path = tmp_path / "s.toml"
    path.write_text(text)
    return measure_scheme(scenario.load(path), 0, CPU)


def test_a_non_finite_or_all_zero_weight_is_an_input_fault_on_every_row(tmp_path):
    """The break report's finding 8: every scheme, fp32 included, was blamed for non-finite outputs."""
    w = torch.randn(256, 256) / 16
    w[3, 5], w[7, 9] = float("nan"), float("inf")
    rows = _fault_rows(tmp_path, w)
    for row in rows:
        faults = [f["text"] for f in row["flags"] if f["name"] == "input-fault"]
        assert faults == ["the weight has 2 non-finite entries (1 NaN, 1 Inf): the float64 reference is "
                          "not finite, so no scheme's error means anything"], row["flags"]
        assert row["weight_source"] == "safetensors w.safetensors:w"
    rows = _fault_rows(tmp_path, torch.zeros(256, 256))
    assert all(any(f["name"] == "input-fault" and f["text"].startswith("the weight is all zeros") for f in r["flags"])
               for r in rows)
    assert not any(f["name"] == "input-fault" for r in _fault_rows(tmp_path, w.nan_to_num(0, 0, 0)) for f in r["flags"])


def test_fp16_cast_overflow_of_outlier_activations_is_an_input_fault(tmp_path):
    """The break report's finding 11: qbench's own cast of 1e6 outliers to fp16 gives inf."""
    table = "\n[inputs]\noutlier_fraction = 0.01\noutlier_magnitude = 1e6\n"
    w = torch.randn(256, 256) / 16
    fp16 = _fault_rows(tmp_path, w, "fp16", table)
    for row in fp16:
        (fault,) = [f["text"] for f in row["flags"] if f["name"] == "input-fault"]
        count = int(fault.split()[0])  # 3 outlier columns of 256: up to 3 per row of X exceed 65504 after x 1e6
        assert 1 <= count <= 3 * row["m"] and " activation values overflow float16 (|x| > 65504) when qbench " \
            "casts the FP32 activations" in fault, fault
    fp32 = _fault_rows(tmp_path, w, "fp32", table)  # fp32 activations hold 1e6: no fault
    assert not any(f["name"] == "input-fault" for r in fp32 for f in r["flags"])


def test_unavailable_reason_is_the_one_rule_of_worker_and_runner(monkeypatch):
    """A compiled entry on the CPU without a C++ compiler is skipped with one reason, the same
    whether the worker (measure_scheme) or the runner (before it starts a worker) asks; an eager
    entry, or a CUDA device, is not refused by that rule."""
    import tomllib

    from qbench import compile_info
    from qbench.measure import unavailable_reason

    text = small_scenario_toml(["fp32", "fp32"], m=(1,)).replace('name = "fp32"\n', 'name = "fp32"\nmode = "compiled"\n', 1)
    sc = scenario.from_dict(tomllib.loads(text), "t.toml")
    compiled, eager = sc.schemes
    fp32 = schemes.get("fp32")
    monkeypatch.setattr(compile_info, "have_compiler", lambda: False)
    assert unavailable_reason(fp32, compiled, CPU) == "torch.compile on CPU needs a C++ compiler (none found)"
    assert unavailable_reason(fp32, eager, CPU) is None
    rows = measure_scheme(sc, 0, CPU)
    assert [(r["status"], r["reason"]) for r in rows] == [("skipped", "torch.compile on CPU needs a C++ compiler (none found)")]
    monkeypatch.setattr(compile_info, "have_compiler", lambda: True)
    assert unavailable_reason(fp32, compiled, CPU) is None
