"""stream: the copy plan (hand-computed counts), the CPU cache size, Stats scaling, call order, the
CPU path, and on CUDA the graph over distinct copies against the HBM floor and the cold method."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings as hsettings, strategies as st

from qbench.timing import stream
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats
from qbench.timing.stream import (
    MAX_COPIES,
    MIN_COPIES,
    STREAM_L2_MULTIPLE,
    StreamPlan,
    StreamPlanError,
    in_order,
    last_level_cache_bytes,
    plan_copies,
    time_stream,
    time_stream_cpu,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (no CUDA device on this machine)")

MiB = 1 << 20
H200_L2 = 60 * MiB


# --- plan_copies: L = max(4, ceil(4 * cache / copy)), capped by MAX_COPIES and half the free memory ---

@pytest.mark.parametrize("copy_bytes, copies, multiple", [
    (32 * MiB, 8, 8 * 32 / 60),          # 4096 x 4096 bf16: 240 / 32 = 7.5 -> 8, 4.267 x L2
    (17 * MiB // 2, 29, 29 * 8.5 / 60),  # 8.5 MiB (int4 tinygemm 4096^2): 240 / 8.5 = 28.2 -> 29
    (128 * MiB, 4, 4 * 128 / 60),        # larger than L2: the minimum of 4 copies, 8.533 x L2
    (60 * MiB, 4, 4.0),                  # exactly L2: 4 copies, exactly 4 x L2
])
def test_plan_copies_hand_computed(copy_bytes, copies, multiple):
    plan = plan_copies(copy_bytes, H200_L2, None)
    assert (plan.copies, plan.bounded_by) == (copies, None)
    assert plan.cache_multiple == pytest.approx(multiple)
    assert (plan.copy_bytes, plan.cache_bytes) == (copy_bytes, H200_L2)
    assert plan.copies * plan.copy_bytes >= STREAM_L2_MULTIPLE * plan.cache_bytes


def test_plan_copies_32_mib_is_4_267_times_l2():
    assert round(plan_copies(32 * MiB, H200_L2, None).cache_multiple, 3) == 4.267


def test_plan_copies_bounded_by_memory():
    # 32 MiB copies, 200 MiB free: half of it holds 3 new copies (+ the original) = 4 < the 8 wanted
    plan = plan_copies(32 * MiB, H200_L2, 200 * MiB)
    assert (plan.copies, plan.bounded_by) == (4, "memory")
    assert plan.cache_multiple == pytest.approx(4 * 32 / 60)


def test_plan_copies_memory_exactly_enough_is_not_bounded():
    # 8 copies wanted: 7 new ones of 32 MiB = 224 MiB = half of 448 MiB free
    plan = plan_copies(32 * MiB, H200_L2, 448 * MiB)
    assert (plan.copies, plan.bounded_by) == (8, None)
    assert plan_copies(32 * MiB, H200_L2, 448 * MiB - 1).bounded_by == "memory"


def test_plan_copies_too_little_memory_raises():
    # 1 GiB copies, 2 GiB free: half holds 1 new copy, 2 in all < 4
    with pytest.raises(StreamPlanError) as info:
        plan_copies(1 << 30, H200_L2, 2 << 30)
    err = info.value
    assert isinstance(err, ValueError)
    assert "\n" not in err.reason and str(MIN_COPIES) in err.reason and str(1 << 30) in err.reason


def test_plan_copies_no_free_memory_raises():
    with pytest.raises(StreamPlanError):
        plan_copies(MiB, H200_L2, 0)


def test_plan_copies_max_copies_bound():
    # 64 KiB copies would need 3840 copies for 4 x 60 MiB: capped at 512, 0.533 x L2
    plan = plan_copies(64 << 10, H200_L2, None)
    assert (plan.copies, plan.bounded_by) == (MAX_COPIES, "max_copies") == (512, "max_copies")
    assert plan.cache_multiple == pytest.approx(512 * 64 / (60 * 1024))
    small = plan_copies(MiB, H200_L2, None, max_copies=16)
    assert (small.copies, small.bounded_by) == (16, "max_copies")


def test_plan_copies_memory_bound_wins_over_max_copies():
    plan = plan_copies(64 << 10, H200_L2, 10 * MiB)  # 5 MiB / 64 KiB = 80 new + 1
    assert (plan.copies, plan.bounded_by) == (81, "memory")


def test_plan_copies_options():
    assert plan_copies(32 * MiB, H200_L2, None, multiple=8).copies == 15  # 480 / 32
    assert plan_copies(128 * MiB, H200_L2, None, min_copies=6).copies == 6
    # a quarter of 1 GiB free: 8 new 32 MiB copies + the original = 9 >= 8
    assert plan_copies(32 * MiB, H200_L2, 1 << 30, memory_fraction=0.25).bounded_by is None


@pytest.mark.parametrize("args", [(0, H200_L2), (-1, H200_L2), (MiB, 0), (MiB, -5)])
def test_plan_copies_rejects_non_positive_sizes(args):
    with pytest.raises(ValueError) as info:
        plan_copies(*args, None)
    assert not isinstance(info.value, StreamPlanError)


def test_plan_to_dict():
    d = plan_copies(32 * MiB, H200_L2, None).to_dict()
    assert d == {"copies": 8, "copy_bytes": 32 * MiB, "cache_bytes": H200_L2,
                 "cache_multiple": pytest.approx(4.2667, rel=1e-4), "bounded_by": None}


@hsettings(max_examples=300, deadline=None)
@given(copy_bytes=st.integers(1, 1 << 34), cache_bytes=st.integers(1, 1 << 31),
       free=st.one_of(st.none(), st.integers(0, 1 << 38)))
def test_plan_copies_invariants(copy_bytes, cache_bytes, free):
    """The smallest L >= 4 covering 4 x cache, unless a bound says why not; never over the bounds."""
    try:
        plan = plan_copies(copy_bytes, cache_bytes, free)
    except StreamPlanError:
        assert free is not None and 0.5 * free < (MIN_COPIES - 1) * copy_bytes
        return
    assert MIN_COPIES <= plan.copies <= MAX_COPIES
    assert plan.cache_multiple == pytest.approx(plan.copies * copy_bytes / cache_bytes)
    if free is not None:
        assert (plan.copies - 1) * copy_bytes <= 0.5 * free
    covered = plan.copies * copy_bytes >= STREAM_L2_MULTIPLE * cache_bytes
    if plan.bounded_by is None:
        assert covered
        if plan.copies > MIN_COPIES:  # one fewer copy would not cover 4 x cache
            assert (plan.copies - 1) * copy_bytes < STREAM_L2_MULTIPLE * cache_bytes
    else:
        assert plan.bounded_by in ("memory", "max_copies") and not covered


# --- last_level_cache_bytes ---

def _sysfs_sizes() -> list[int]:
    sizes = []
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip()
        sizes.append(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[text[-1]])
    return sizes


def test_last_level_cache_bytes_on_this_machine():
    llc = last_level_cache_bytes()
    assert isinstance(llc, int) and llc > 0
    sizes = _sysfs_sizes()
    if sizes:  # Linux: the largest cache sysfs lists for cpu0 (32 MiB of L3 on the dev machines)
        assert llc == max(sizes)
        assert llc >= 1 << 20


def _fake_sysfs(monkeypatch, tmp_path, sizes: dict):
    root = tmp_path / "cache"
    for index, text in sizes.items():
        (root / index).mkdir(parents=True)
        if text is not None:
            (root / index / "size").write_text(text + "\n")
    real = stream.Path
    monkeypatch.setattr(stream, "Path", lambda p: root if p == "/sys/devices/system/cpu/cpu0/cache" else real(p))


def test_last_level_cache_bytes_parses_sysfs_units(monkeypatch, tmp_path):
    _fake_sysfs(monkeypatch, tmp_path, {"index0": "48K", "index1": "32K", "index2": "2M", "index3": "36864K",
                                        "index4": None})
    assert last_level_cache_bytes() == 36864 << 10
    monkeypatch.undo()
    _fake_sysfs(monkeypatch, tmp_path / "b", {"index0": "48K", "index3": "1G"})
    assert last_level_cache_bytes() == 1 << 30


def test_last_level_cache_bytes_falls_back_to_sysconf(monkeypatch, tmp_path):
    _fake_sysfs(monkeypatch, tmp_path, {})
    values = {"SC_LEVEL3_CACHE_SIZE": 0, "SC_LEVEL2_CACHE_SIZE": 2 * MiB}
    monkeypatch.setattr(stream.os, "sysconf", lambda name: values[name])
    assert last_level_cache_bytes() == 2 * MiB

    def unknown(name):
        raise ValueError("unrecognized configuration name")

    monkeypatch.setattr(stream.os, "sysconf", unknown)
    assert last_level_cache_bytes() is None


# --- in_order ---

def test_in_order_calls_each_once_in_order():
    seen = []
    calls = [lambda i=i: seen.append(i) for i in range(5)]
    run = in_order(iter(calls))  # any iterable: kept as a tuple, so run() can be called again
    assert run() is None
    assert seen == [0, 1, 2, 3, 4]
    run()
    assert seen == [0, 1, 2, 3, 4] * 2


def test_in_order_propagates_and_stops():
    seen = []

    def boom():
        raise RuntimeError("copy 1 broke")

    run = in_order([lambda: seen.append(0), boom, lambda: seen.append(2)])
    with pytest.raises(RuntimeError, match="copy 1 broke"):
        run()
    assert seen == [0]


# --- time_stream_cpu / time_stream without CUDA ---

def test_time_stream_cpu_warms_every_copy_then_times_one_copy_per_call(monkeypatch):
    import qbench.timing.cpu as cpu

    seen = []
    got = {}

    def fake_time_cpu(fn, settings):
        got["settings"] = settings
        for _ in range(11):  # the timed callable: one copy per call, in rotation
            fn()
        return Stats(median=80.0, p10=40.0, p90=120.0, mean=90.0, cv=0.2, n=7, converged=False)

    monkeypatch.setattr(cpu, "time_cpu", fake_time_cpu)
    s = TimingSettings(min_reps=3)
    out = time_stream_cpu([lambda i=i: seen.append(i) for i in range(8)], s)
    # a warm-up pass over the 8 copies in order, then 11 timed calls rotating 0..7, 0, 1, 2
    assert seen == list(range(8)) + list(range(8)) + [0, 1, 2]
    assert got["settings"] is s
    assert out.median == 80.0 and out.n == 7  # per call already: no scaling


def test_rotate_wraps_around():
    from qbench.timing.stream import rotate

    seen = []
    run = rotate([lambda i=i: seen.append(i) for i in range(3)])
    for _ in range(7):
        run()
    assert seen == [0, 1, 2, 0, 1, 2, 0]


def test_time_stream_cpu_real_copies():
    layers = [torch.nn.Linear(64, 64) for _ in range(4)]
    x = torch.randn(2, 64)
    with torch.inference_mode():
        s = time_stream_cpu([lambda m=m: m(x) for m in layers],
                            TimingSettings(warmup=1, min_reps=3, max_reps=10, budget_s=0.2))
    assert s.n >= 3 and s.median > 0 and s.p10 <= s.median <= s.p90


def test_time_stream_cpu_rejects_no_calls():
    with pytest.raises(ValueError, match="at least one call"):
        time_stream_cpu([], TimingSettings())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_time_stream_without_cuda_raises():
    with pytest.raises(RuntimeError, match="time_stream: needs a CUDA device"):
        time_stream([lambda: None], TimingSettings())


def test_the_stream_method_object():
    """``METHOD`` of this module is the registry's ``stream``: a graph method needing copies, whose
    record adds the copies' plan (its ``extras``), the decision method, shown by default."""
    from qbench.timing import registry, stream

    method = registry.METHODS["stream"]
    assert method is stream.METHOD and method.phase == "graph" and method.needs.copies
    assert method.decision and method.shown_by_default and method.fallback_rank is None
    assert method.extras == stream.EXTRAS and "copies" in method.extras and "recompilations" in method.extras
    assert method.phase_on("cuda") == "graph" and method.phase_on("cpu") == "plain"


# --- CUDA: a graph over distinct copies ---

def _bf16_copies(copies: int, m: int = 1, k: int = 4096, n: int = 4096):
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(copies)]
    return [(lambda w=w: torch.nn.functional.linear(x, w)) for w in weights], weights[0].nbytes


@pytest.mark.cuda
@needs_cuda
def test_time_stream_bf16_eight_copies_not_faster_than_hbm(fast_settings):
    calls, nbytes = _bf16_copies(8)
    with torch.inference_mode():
        s = time_stream(calls, fast_settings)
    floor_us = nbytes / 4.8e12 * 1e6  # 33,554,432 B at the H200 datasheet's 4.8 TB/s: 6.99 µs
    assert s.median > 0 and s.n >= fast_settings.min_reps
    assert s.p10 <= s.median <= s.p90
    # the datasheet bandwidth is a ceiling no GPU of today passes (H200: 4.8 TB/s, the highest)
    assert s.median >= floor_us, f"stream {s.median:.2f} µs per call beats the HBM floor {floor_us:.2f} µs"


@pytest.mark.cuda
@needs_cuda
def test_time_stream_not_slower_than_cold_bf16_4096(fast_settings):
    from qbench.timing.cold import time_cold
    from qbench.timing.flush import L2Flusher

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copies = plan_copies(4096 * 4096 * 2, l2, None).copies
    calls, _ = _bf16_copies(copies)
    with torch.inference_mode():
        s = time_stream(calls, fast_settings)
        cold = time_cold(calls[0], fast_settings, L2Flusher("cuda"))
    assert 0 < s.median <= cold.median, (s.median, cold.median)


#: Run in a fresh process: a failed capture leaves torch's CUDA RNG in capture mode, so every later
#: torch.randn on CUDA in the same process raises "Offset increment outside graph capture encountered
#: unexpectedly" (seen on an H200, torch 2.11): the other CUDA tests of a pytest process would fail.
_CAPTURE_FAILURE = """
import json, torch
from qbench.timing.settings import TimingSettings
from qbench.timing.stream import time_stream
from qbench.timing.warm import GraphCaptureError
x = torch.randn(16, device="cuda")
calls = [lambda: (x * 2).sum().item(), lambda: (x * 3).sum()]
out = {}
try:
    time_stream(calls, TimingSettings(warmup=3, min_reps=10, max_reps=200, budget_s=0.5))
except GraphCaptureError as exc:
    out["error"] = "GraphCaptureError"
    out["one_line"] = "\\n" not in exc.reason
out["default_stream"] = torch.cuda.current_stream() == torch.cuda.default_stream()
out["still_computes"] = abs(float((x + 1).sum()) - (float(x.sum()) + 16)) < 1e-3
print(json.dumps(out))
"""


@pytest.mark.cuda
@needs_cuda
def test_time_stream_host_sync_raises_capture_error():
    import json
    import os
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-c", _CAPTURE_FAILURE], capture_output=True, text=True, timeout=300,
                         cwd=root, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out == {"error": "GraphCaptureError", "one_line": True, "default_stream": True, "still_computes": True}


@pytest.mark.cuda
@needs_cuda
def test_time_stream_rejects_no_calls(fast_settings):
    with pytest.raises(ValueError, match="at least one call"):
        time_stream([], fast_settings)


@pytest.mark.cuda
@needs_cuda
def test_time_stream_per_call_scales_with_copies(fast_settings):
    """Per call, not per replay: 16 copies take about as long per call as 8 (both from HBM)."""
    calls, _ = _bf16_copies(16)
    with torch.inference_mode():
        eight = time_stream(calls[:8], fast_settings)
        sixteen = time_stream(calls, fast_settings)
    assert 0.75 < sixteen.median / eight.median < 1.33, (eight.median, sixteen.median)
