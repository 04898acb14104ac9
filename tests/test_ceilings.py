import pytest
import torch

from qbench.ceilings import measure_ceilings


def test_rejects_a_device_neither_cuda_nor_cpu():
    with pytest.raises(ValueError, match="CUDA or the CPU, got 'meta'"):
        measure_ceilings("meta", ["bf16"])


def test_cpu_copy_size_is_4x_the_last_level_cache_within_bounds():
    from qbench.ceilings import CPU_COPY_MAX, CPU_COPY_MIN, cpu_copy_bytes

    assert cpu_copy_bytes(32 << 20) == 128 << 20
    assert cpu_copy_bytes(1 << 20) == CPU_COPY_MIN
    assert cpu_copy_bytes(1 << 30) == CPU_COPY_MAX
    assert cpu_copy_bytes(None) == 2 * CPU_COPY_MIN


def test_cpu_ceilings_are_measured_fast_and_feed_the_roofline():
    import time

    from qbench.measure import finish_row

    t0 = time.perf_counter()
    c = measure_ceilings("cpu", ["fp32", "bf16", "tf32"])
    spent = time.perf_counter() - t0
    assert spent < 10, spent  # about 0.5 s on an idle 2-core machine; generous for a shared one
    m = c["measured"]
    assert c["datasheet"] is None and "no CPU datasheet" in c["datasheet_reason"]
    assert 0.5 < m["memory_gbps"] < 2000
    assert m["tflops"]["fp32"] > 0 and m["tflops"]["bf16"] > 0
    assert m["tflops"]["tf32"] is None and m["reasons"]["tf32"] == "tf32 has no CPU kernel"
    assert "fastest of" in m["method"]["matmul_by_dtype"]["fp32"]
    # a CPU row now gets a roofline from these ceilings
    row = {"status": "ok", "min_bytes": 2 * 512 * 512, "flops": 2 * 512 * 512, "compute_dtype": "bf16",
           "device": "cpu", "stored_bytes": 2 * 512 * 512, "roofline_us": None, "roofline_bound": None,
           "roofline_source": None, "roofline_reason": None, "hbm_floor_us": None, "hbm_floor_fraction": None,
           "launch_overhead_us": None, "roofline_fraction": None, "achieved_gbps": None, "achieved_tflops": None,
           "achieved_method": None, "flags": [], "latency_us": {"stream": {"median": 1e6}, "cpu": {"median": 1e6}}}
    finish_row(row, c)
    bw_us = row["min_bytes"] / (m["memory_gbps"] * 1e9) * 1e6
    math_us = row["flops"] / (m["tflops"]["bf16"] * 1e12) * 1e6
    assert row["roofline_source"] == "measured" and abs(row["roofline_us"] - max(bw_us, math_us)) < 1e-9
    assert abs(row["hbm_floor_us"] - row["stored_bytes"] / (m["memory_gbps"] * 1e9) * 1e6) < 1e-9
    assert row["roofline_reason"] is None and row["flags"] == []


def test_a_cpu_row_without_ceilings_says_why():
    from qbench.measure import _ceiling

    assert _ceiling(None, "bf16", "cpu")[3] == "no CPU ceilings measured (a file from before 2026-12-01)"
    cpu = {"measured": {"memory_gbps": 20.0, "tflops": {"bf16": 0.5}}}
    assert _ceiling(cpu, "bf16", "cpu")[0] is None  # not marked as the CPU's: a GPU's ceilings never bound a CPU row
    assert _ceiling({**cpu, "device": "cpu"}, "bf16", "cpu")[:3] == (0.5, 20.0, "measured")


def test_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="'fp4'"):
        measure_ceilings("cuda", ["fp4"])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_measure_ceilings_h200_ranges():
    c = measure_ceilings("cuda", ["fp32", "bf16", "fp8", "int8"])
    m = c["measured"]
    assert 1000 < m["memory_gbps"] < 10000
    assert m["tflops"]["bf16"] > m["tflops"]["fp32"] > 0
    for d, v in m["tflops"].items():
        assert v is not None or d in m["reasons"]
