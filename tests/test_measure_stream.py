"""measure: the ``stream`` method through :func:`qbench.measure.measure_scheme` on the CPU (every
registered scheme), the distinct copies :func:`make_copies` builds, and the derived fields of
:func:`finish_row` (HBM floor, the method the achieved rates come from). CUDA rows at the end."""

from __future__ import annotations

import copy
import functools
import shutil

import pytest
import torch

from qbench import formulas, schemes
from qbench.schemes import ledger
from qbench.measure import Copies, base_row, finish_row, make_copies, measure_scheme
from qbench.scenario import from_dict
from qbench.schemes.base import Scheme, linear_parts, plain_linear
from qbench.timing import stream
from qbench.timing.stream import MAX_COPIES, MIN_COPIES, STREAM_L2_MULTIPLE, StreamPlanError
from tests.conftest import CUDA, needs_cuda

CPU = torch.device("cpu")
K = N = 256
M = (1, 4)
TIMING = {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.02}
#: Every scheme registered when this module is collected (the built-in ones; plugins of other tests
#: are registered later, inside their tests).
ALL = schemes.names()
STATS_KEYS = {"median", "p10", "p90", "mean", "cv", "n"}
PLAN_KEYS = {"copies", "copy_bytes", "cache_bytes", "cache_multiple", "bounded_by"}
HAVE_COMPILER = any(shutil.which(c) for c in ("cc", "gcc", "g++", "clang", "c++"))


def _scenario(entries, m=M, k=K, n=N, **timing):
    return from_dict({"name": "stream", "m": list(m), "layer": {"in_features": k, "out_features": n},
                      "timing": {**TIMING, **timing}, "schemes": entries}, "stream.toml")


@functools.cache
def _rows(name: str, mode: str = "eager") -> tuple:
    """measure_scheme's rows for one scheme on the CPU, 256 x 256, M = 1 and 4 (run once per test session)."""
    return tuple(measure_scheme(_scenario([{"name": name, "mode": mode}]), 0, CPU))


def _check_stream_row(row: dict) -> dict:
    """Everything a CPU ``ok`` row's stream record must hold; returns the record."""
    rec = row["latency_us"]["stream"]
    assert rec is not None, row["latency_reasons"].get("stream")
    assert "stream" not in row["latency_reasons"]
    assert STATS_KEYS | PLAN_KEYS | {"how"} <= set(rec)
    assert rec["n"] >= TIMING["min_reps"] and isinstance(rec["n"], int)
    assert 0 < rec["p10"] <= rec["median"] <= rec["p90"]
    assert rec["how"] in ("deepcopy", "rebuilt")
    # the plan: at least 4 copies of this row's stored bytes, against the CPU's last-level cache
    assert rec["copies"] >= MIN_COPIES
    assert rec["copy_bytes"] == row["stored_bytes"]
    assert rec["cache_bytes"] == stream.last_level_cache_bytes()
    assert rec["cache_multiple"] == pytest.approx(rec["copies"] * rec["copy_bytes"] / rec["cache_bytes"])
    if rec["bounded_by"] is None:
        assert rec["copies"] * rec["copy_bytes"] >= STREAM_L2_MULTIPLE * rec["cache_bytes"]
    else:
        assert rec["bounded_by"] in ("memory", "max_copies")
        assert rec["copies"] * rec["copy_bytes"] < STREAM_L2_MULTIPLE * rec["cache_bytes"]
        if rec["bounded_by"] == "max_copies":
            assert rec["copies"] == MAX_COPIES
    # CPU: no bandwidth ceiling, so no HBM floor; the achieved rates come from the stream median
    assert row["hbm_floor_us"] is None and row["hbm_floor_fraction"] is None
    assert row["roofline_us"] is None and row["roofline_reason"]
    assert row["achieved_method"] == "stream"
    gbps, tflops = formulas.achieved(row["flops"], row["min_bytes"], rec["median"])
    assert row["achieved_gbps"] == pytest.approx(gbps) and row["achieved_tflops"] == pytest.approx(tflops)
    assert row["latency_us"]["cpu"]["median"] > 0
    for method in ("cold", "warm", "eager", "kernel"):
        assert row["latency_us"][method] is None and row["latency_reasons"][method] == {
            "kind": "cuda-only", "text": "CUDA method; this row ran on the CPU"}
    assert set(row["worker_phases_s"]) == {"build", "copies", "measure", "by_method"}
    # CPU rows spend time in cpu and stream only; the two are part of measure
    spent = row["worker_phases_s"]["by_method"]
    assert set(spent) == {"cpu", "stream"} and 0 < sum(spent.values()) <= row["worker_phases_s"]["measure"]
    return rec


# --- every registered scheme: a stream row, or a skipped row with its reason ---

@pytest.mark.parametrize("name", ALL)
def test_every_scheme_gets_a_stream_row_or_a_skip_reason(name):
    scheme = schemes.get(name)
    rows = _rows(name)
    assert [r["m"] for r in rows] == list(M)
    why = scheme.unavailable_reason(CPU, scheme.options_model())
    if why is not None:
        assert [(r["status"], r["reason"]) for r in rows] == [("skipped", why)] * len(M)
        assert all(r["latency_us"] == {} for r in rows)
        return
    assert [r["status"] for r in rows] == ["ok"] * len(M), [r["reason"] for r in rows]
    recs = [_check_stream_row(r) for r in rows]
    # one set of copies serves every M
    assert len({(r["copies"], r["how"], r["copy_bytes"]) for r in recs}) == 1


@pytest.mark.parametrize("name", ["bf16", "int8-weight-only"])
def test_compiled_scheme_streams_compiled_copies_without_recompiling(name):
    if not HAVE_COMPILER:
        pytest.skip("torch.compile on CPU needs a C++ compiler (none found)")
    if schemes.get(name).unavailable_reason(CPU, schemes.get(name).options_model()):
        pytest.skip(f"{name} cannot run on this CPU")
    rows = _rows(name, "compiled")
    assert [r["status"] for r in rows] == ["ok"] * len(M), [r["reason"] for r in rows]
    for row in rows:
        rec = _check_stream_row(row)
        # every copy reuses the graph compiled for the original at this M
        assert rec["recompilations"] == 0, rec
        assert row["compile"]["recompilations_during_timing"] == 0
    assert "recompilations" not in _rows(name)[0]["latency_us"]["stream"]  # eager rows carry none


# --- the stream method's absence and failures leave the other methods alone ---

def test_no_stream_method_builds_no_copies(monkeypatch):
    import qbench.measure as measure

    def forbidden(*args, **kwargs):
        raise AssertionError("make_copies called without the stream method")

    monkeypatch.setattr(measure, "make_copies", forbidden)
    rows = measure_scheme(_scenario(["fp32"], methods=["cold"]), 0, CPU)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for row in rows:
        assert "stream" not in row["latency_us"]
        assert row["latency_us"]["cpu"]["median"] > 0 and row["latency_us"]["cold"] is None
        assert row["achieved_method"] is None and row["achieved_gbps"] is None


def test_too_little_memory_for_copies_is_a_reason(monkeypatch):
    import qbench.memory

    monkeypatch.setattr(qbench.memory, "free_bytes", lambda device: 4096)
    rows = measure_scheme(_scenario(["fp32"]), 0, CPU)
    for row in rows:
        assert row["status"] == "ok" and row["latency_us"]["stream"] is None
        assert row["latency_reasons"]["stream"]["kind"] == "copies"
        assert row["latency_reasons"]["stream"]["text"].startswith(
            "copies for stream: StreamPlanError: stream needs 4 copies")
        assert row["latency_us"]["cpu"]["median"] > 0
        assert row["achieved_method"] is None


def test_no_cache_size_is_a_reason(monkeypatch):
    monkeypatch.setattr(stream, "last_level_cache_bytes", lambda: None)
    row, = measure_scheme(_scenario(["bf16"], m=(2,)), 0, CPU)
    assert row["status"] == "ok" and row["latency_us"]["stream"] is None
    assert row["latency_reasons"]["stream"] == {"kind": "copies",
                                                "text": "copies for stream: RuntimeError: no cache size readable for cpu"}


# --- make_copies: distinct storage, identical values ---

def _entry(name: str):
    return _scenario([name]).schemes[0]


def _built(name: str, k: int = K, n: int = N, bias: bool = False):
    scheme = schemes.get(name)
    gen = torch.Generator().manual_seed(7)
    weight = torch.randn(n, k, generator=gen) / k**0.5
    b = torch.randn(n, generator=gen) if bias else None
    module = scheme.build(weight, b, scheme.options_model())
    return scheme, weight, b, module, ledger.count(scheme.parts(module)).stored_bytes


def _part_storages(scheme, module) -> set[int]:
    return {p.tensor.untyped_storage().data_ptr() for p in scheme.parts(module)}


def _reachable_storages(obj, seen=None, depth=0) -> set[int]:
    """Storage addresses of every non-empty tensor reachable from a module: parameters, buffers,
    attributes, the inner tensors of tensor subclasses (__tensor_flatten__), and the tensors held in
    objects of the quantization libraries (bitsandbytes' quant_state, torchao's tensors)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 8:
        return set()
    seen.add(id(obj))
    out: set[int] = set()
    if isinstance(obj, torch.Tensor):
        if type(obj) not in (torch.Tensor, torch.nn.Parameter) and hasattr(obj, "__tensor_flatten__"):
            for name in obj.__tensor_flatten__()[0]:
                out |= _reachable_storages(getattr(obj, name), seen, depth + 1)
        elif obj.numel():
            out.add(obj.untyped_storage().data_ptr())
        for value in getattr(obj, "__dict__", {}).values():
            out |= _reachable_storages(value, seen, depth + 1)
    elif isinstance(obj, torch.nn.Module):
        for key, value in vars(obj).items():
            values = value.values() if key in ("_parameters", "_buffers", "_modules") else [value]
            for v in values:
                out |= _reachable_storages(v, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out |= _reachable_storages(v, seen, depth + 1)
    elif isinstance(obj, dict):
        for v in obj.values():
            out |= _reachable_storages(v, seen, depth + 1)
    elif hasattr(obj, "__dict__") and type(obj).__module__.split(".")[0] in ("bitsandbytes", "torchao"):
        for v in vars(obj).values():
            out |= _reachable_storages(v, seen, depth + 1)
    return out


CPU_SCHEMES = [n for n in ALL if not schemes.get(n).unavailable_reason(CPU, schemes.get(n).options_model())]


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_make_copies_are_distinct_and_identical(name, monkeypatch):
    # a 1 MiB "cache" keeps the copy count small: L = max(4, ceil(4 MiB / stored bytes))
    monkeypatch.setattr(stream, "last_level_cache_bytes", lambda: 1 << 20)
    scheme, weight, bias, module, stored = _built(name, bias=True)
    copies = make_copies(module, scheme, weight, bias, _entry(name), stored, CPU)
    assert isinstance(copies, Copies)
    plan = copies.plan
    assert plan.copies == max(MIN_COPIES, -(-STREAM_L2_MULTIPLE * (1 << 20) // stored))
    assert (plan.copy_bytes, plan.cache_bytes, plan.bounded_by) == (stored, 1 << 20, None)
    assert len(copies.modules) == plan.copies and copies.modules[0] is module
    assert copies.how == "deepcopy"  # every built-in scheme deep-copies into new storage
    # pairwise disjoint storage: by the ledger's parts, and by every tensor the modules reach
    seen_parts: set[int] = set()
    seen_all: set[int] = set()
    for mod in copies.modules:
        parts, reach = _part_storages(scheme, mod), _reachable_storages(mod)
        assert parts and not parts & seen_parts, "a copy shares a ledger part with another copy"
        assert not reach & seen_all, "a copy shares a tensor with another copy"
        assert parts <= reach
        seen_parts |= parts
        seen_all |= reach
        assert ledger.count(scheme.parts(mod)).stored_bytes == stored
    # identical quantized values: every copy gives the original's output, bit for bit
    x = torch.randn(3, K, generator=torch.Generator().manual_seed(1)).to(scheme.activation_dtype)
    with torch.inference_mode():
        want = module(x)
        for mod in (copies.modules[1], copies.modules[len(copies.modules) // 2], copies.modules[-1]):
            torch.testing.assert_close(mod(x), want, rtol=0, atol=0)


def _fake_scheme(name: str, build) -> Scheme:
    return Scheme(name=name, library="torch", family="float", summary="test only", weight_dtype="float32",
                  activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32, build=build,
                  parts=linear_parts)


class _SharingLinear(torch.nn.Linear):
    """A deep copy that shares the weight (as a tensor subclass without a real deepcopy might)."""

    def __deepcopy__(self, memo):
        dup = torch.nn.Linear(self.in_features, self.out_features, bias=False, device="meta")
        dup.weight = self.weight
        return dup


class _NoDeepcopyLinear(torch.nn.Linear):
    def __deepcopy__(self, memo):
        raise TypeError("cannot deepcopy this tensor subclass")


def _as(cls, weight, bias):
    layer = plain_linear(weight, bias, torch.float32)
    layer.__class__ = cls
    return layer


@pytest.mark.parametrize("cls", [_SharingLinear, _NoDeepcopyLinear])
def test_make_copies_rebuilds_when_deepcopy_shares_or_fails(cls, monkeypatch):
    monkeypatch.setattr(stream, "last_level_cache_bytes", lambda: 1 << 18)  # 256 KiB -> 4 copies of 256 KiB
    builds = []

    def build(weight, bias, options):
        builds.append(1)
        return _as(cls, weight, bias)

    scheme = _fake_scheme("test-copies", build)
    weight = torch.randn(N, K)
    module = build(weight, None, None)
    copies = make_copies(module, scheme, weight, None, _entry("fp32"), K * N * 4, CPU)
    assert copies.how == "rebuilt" and copies.plan.copies == 4 and len(builds) == 4
    ptrs = [_part_storages(scheme, m) for m in copies.modules]
    assert len(set().union(*ptrs)) == 4
    for mod in copies.modules:
        assert torch.equal(mod.weight, module.weight)


def test_make_copies_refuses_a_rebuild_that_shares_storage(monkeypatch):
    monkeypatch.setattr(stream, "last_level_cache_bytes", lambda: 1 << 18)
    shared = torch.randn(N, K)

    def build(weight, bias, options):
        layer = torch.nn.Linear(K, N, bias=False, device="meta")
        layer.weight = torch.nn.Parameter(shared, requires_grad=False)  # the same storage every time
        layer.__class__ = _SharingLinear
        return layer

    scheme = _fake_scheme("test-copies", build)
    with pytest.raises(RuntimeError, match="rebuilt copy shares storage"):
        make_copies(build(shared, None, None), scheme, shared, None, _entry("fp32"), K * N * 4, CPU)


def test_make_copies_plan_errors_propagate(monkeypatch):
    import qbench.memory

    monkeypatch.setattr(qbench.memory, "free_bytes", lambda device: 0)
    scheme, weight, bias, module, stored = _built("fp32")
    with pytest.raises(StreamPlanError):
        make_copies(module, scheme, weight, bias, _entry("fp32"), stored, CPU)


def test_make_copies_plans_against_the_llc_on_cpu():
    scheme, weight, bias, module, stored = _built("fp32", k=512, n=512)  # 1 MiB
    copies = make_copies(module, scheme, weight, bias, _entry("fp32"), stored, CPU)
    llc = stream.last_level_cache_bytes()
    want = stream.plan_copies(stored, llc, None)  # this machine has GiBs free: memory does not bound
    assert (copies.plan.copies, copies.plan.cache_bytes, copies.plan.copy_bytes) == (want.copies, llc, stored)
    assert len(copies.modules) == want.copies


# --- finish_row: the HBM floor and the method the achieved rates come from ---

def _row(device: str, stored: int = 33_554_432, **latency) -> dict:
    sc = _scenario(["bf16"], m=(1,), k=4096, n=4096)
    row = base_row(sc, sc.schemes[0], schemes.get("bf16"), 1, torch.device(device))
    row.update(stored_bytes=stored, output_dtype="bfloat16",
               min_bytes=formulas.min_bytes(1, 4096, 4096, weight_bytes=stored, act_itemsize=2, out_itemsize=2))
    row["latency_us"] = {k: (None if v is None else {"median": v, "p10": v, "p90": v, "mean": v, "cv": 0.0, "n": 3})
                         for k, v in latency.items()}
    return row


CEILINGS = {"measured": {"tflops": {"bf16": 700.0}, "memory_gbps": 4000.0},
            "datasheet": {"tflops": {"bf16": 989.4}, "memory_gbps": 4800.0}}


def test_finish_row_hbm_floor_and_stream_rates():
    row = _row("cuda:0", stream=10.0, cold=20.0)
    finish_row(row, CEILINGS)
    assert row["hbm_floor_us"] == pytest.approx(8.388608)  # 33,554,432 B at the measured 4000 GB/s
    assert row["hbm_floor_fraction"] == pytest.approx(0.8388608)
    assert row["roofline_source"] == "measured"
    assert row["achieved_method"] == "stream"
    assert row["achieved_gbps"] == pytest.approx(row["min_bytes"] / 10e-6 / 1e9)
    assert row["roofline_fraction"] == pytest.approx(row["roofline_us"] / 10.0)


def test_finish_row_falls_back_to_cold_without_stream():
    row = _row("cuda:0", stream=None, cold=20.0)
    finish_row(row, CEILINGS)
    assert row["hbm_floor_us"] == pytest.approx(8.388608) and row["hbm_floor_fraction"] is None
    assert row["achieved_method"] == "cold"
    assert row["achieved_gbps"] == pytest.approx(row["min_bytes"] / 20e-6 / 1e9)


def test_finish_row_datasheet_bandwidth_when_nothing_measured():
    row = _row("cuda:0", stream=8.0)
    finish_row(row, {"datasheet": CEILINGS["datasheet"]})
    assert row["roofline_source"] == "datasheet"
    assert row["hbm_floor_us"] == pytest.approx(33_554_432 / 4.8e12 * 1e6)
    assert row["hbm_floor_fraction"] == pytest.approx(33_554_432 / 4.8e12 * 1e6 / 8.0)


def test_finish_row_no_ceilings_no_floor_and_no_times():
    row = _row("cuda:0")
    finish_row(row, None)
    assert row["hbm_floor_us"] is None and row["roofline_reason"]
    assert row["achieved_method"] is None and row["achieved_gbps"] is None


def test_finish_row_cpu_has_no_hbm_floor():
    row = _row("cpu", stream=50.0, cpu=40.0)
    finish_row(row, CEILINGS)  # ceilings are for a GPU: a CPU row never takes them
    assert row["hbm_floor_us"] is None and row["hbm_floor_fraction"] is None
    assert row["roofline_us"] is None and "CPU" in row["roofline_reason"]
    assert row["achieved_method"] == "stream"
    assert row["achieved_gbps"] == pytest.approx(row["min_bytes"] / 50e-6 / 1e9)


def test_finish_row_leaves_failed_rows_alone():
    row = _row("cuda:0", stream=10.0)
    row["status"] = "failed"
    before = copy.deepcopy(row)
    finish_row(row, CEILINGS)
    assert row == before


# --- the whole path, written and read back ---

def test_run_writes_stream_rows_the_reader_accepts(tmp_path):
    from qbench import runner, scenario
    from qbench.results import read_results
    from tests.conftest import small_scenario_toml

    path = tmp_path / "s.toml"
    path.write_text(small_scenario_toml(["bf16"], m=(1,)))
    out = runner.run(scenario.load(path), device="cpu", out=str(tmp_path / "r.json"))
    assert out.exit_code == 0
    saved = read_results(tmp_path / "r.json")
    assert len(saved.rows) == 1
    for row in saved.rows:
        rec = row.latency_us["stream"]
        assert row.status == "ok" and rec.copies >= MIN_COPIES and rec.median > 0
        # the run measured the CPU's copy bandwidth: the floor is the weight read once from DRAM
        bandwidth = saved.ceilings.measured.memory_gbps
        assert row.hbm_floor_us == pytest.approx(row.stored_bytes / (bandwidth * 1e9) * 1e6)
        assert row.achieved_method == "stream"


# --- a failing stream on the CPU must not take the scheme's other rows down ---

class _FragileLinear(torch.nn.Linear):
    """Runs as the original; every copy (deepcopy or rebuild) raises when called."""

    def forward(self, x):
        if getattr(self, "_origin", None) != id(self):
            raise RuntimeError("this copy of the layer cannot run")
        return super().forward(x)


@pytest.fixture
def fragile_scheme():
    def build(weight, bias, options):
        layer = _as(_FragileLinear, weight, bias)
        layer._origin = id(layer)  # a deep copy keeps the attribute, not the identity
        return layer

    scheme = _fake_scheme("test-fragile-copies", build)
    schemes.register(scheme)
    yield scheme
    schemes._REGISTRY.pop(scheme.name, None)


def test_cpu_stream_failure_is_a_reason_not_an_exception(fragile_scheme):
    rows = measure_scheme(_scenario([fragile_scheme.name]), 0, CPU)
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert row["latency_us"]["cpu"]["median"] > 0
        assert row["latency_us"]["stream"] is None
        assert "this copy of the layer cannot run" in row["latency_reasons"]["stream"]["text"]


def test_fragile_scheme_original_runs(fragile_scheme):
    """The xfail above fails for the reason it names: the original layer runs, its copies do not."""
    module = fragile_scheme.build(torch.randn(N, K), None, None)
    x = torch.randn(2, K)
    assert module(x).shape == (2, N)
    with pytest.raises(RuntimeError, match="this copy of the layer cannot run"):
        copy.deepcopy(module)(x)


# --- CUDA: a bf16 decode layer ---

@pytest.mark.cuda
@needs_cuda
def test_cuda_bf16_stream_row_against_the_hbm_floor():
    sc = _scenario(["bf16"], m=(1,), k=4096, n=4096, methods=["stream", "cold", "warm"],
                   min_reps=10, max_reps=200, budget_s=0.5)
    row, = measure_scheme(sc, 0, torch.device("cuda"), {"datasheet": CEILINGS["datasheet"]})
    assert row["status"] == "ok", row["reason"]
    rec = row["latency_us"]["stream"]
    assert rec is not None, row["latency_reasons"]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert rec["cache_bytes"] == l2 and rec["copy_bytes"] == 33_554_432
    assert rec["copies"] == stream.plan_copies(33_554_432, l2, None).copies and rec["bounded_by"] is None
    assert row["hbm_floor_us"] == pytest.approx(33_554_432 / 4.8e12 * 1e6)
    # nothing reads 32 MiB from HBM faster than the datasheet bandwidth
    assert 0 < row["hbm_floor_fraction"] <= 1.0, (rec["median"], row["hbm_floor_us"])
    assert rec["median"] <= row["latency_us"]["cold"]["median"]
    assert row["achieved_method"] == "stream"


@pytest.mark.cuda
@needs_cuda
def test_cuda_compiled_int8_copies_do_not_recompile():
    name = "int8-weight-only"
    if schemes.get(name).unavailable_reason(torch.device("cuda"), schemes.get(name).options_model()):
        pytest.skip(f"{name} cannot run here")
    sc = _scenario([{"name": name, "mode": "compiled"}], m=(1, 16), k=4096, n=4096, methods=["stream"],
                   min_reps=10, max_reps=200, budget_s=0.5)
    rows = measure_scheme(sc, 0, torch.device("cuda"))
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        rec = row["latency_us"]["stream"]
        assert rec is not None, row["latency_reasons"]
        assert rec["recompilations"] == 0 and rec["copies"] >= MIN_COPIES, rec
