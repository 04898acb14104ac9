"""memory: the layer job's peak-memory estimate (hand-computed, :mod:`qbench.layer.memory`) and the check that refuses a scenario that
cannot fit, naming ``layer`` or ``m``, before anything is allocated."""

from __future__ import annotations

import pytest
import torch

from qbench import hardware, memory
from qbench.layer import memory as layer_memory
from qbench.scenario import ScenarioError, from_dict

MiB, GiB = 1 << 20, 1 << 30


def _scenario(k=4096, n=4096, m=(1, 16), schemes=("fp16",), bias=False, timing=None, source="mem.toml"):
    return from_dict({"name": "mem", "m": list(m), "layer": {"in_features": k, "out_features": n, "bias": bias},
                      "timing": timing or {}, "schemes": list(schemes)}, source)


def test_estimate_by_hand_cpu():
    k, n, ms = 4096, 2048, (1, 16)
    est = layer_memory.estimate_bytes(_scenario(k, n, ms, schemes=("fp16", "int4-intx")), "cpu")
    # FP32 weight 4 NK + 16-bit staging 2 NK + FP32 temporary 4 NK + widest stored weight (2 NK: fp16 / bf16 source)
    assert est["weights"] == (4 + 2 + 4 + 2) * n * k
    assert est["activations"] == 4 * 16 * k + (1 + 16) * k * 2
    assert est["reference"] == 8 * (16 * k + n * k + 16 * n)
    assert est["outputs"] == 4 * 16 * n + 24 * 16 * n
    assert est["flush"] == 0  # no L2 flush on the CPU
    assert est["overhead"] == memory.PROCESS_OVERHEAD and est["m"] == 16
    assert est["total"] == sum(est[p] for p in ("weights", "activations", "reference", "outputs", "flush", "overhead"))


def test_fp32_scheme_and_bias_count_four_bytes():
    k = n = 1024
    est = layer_memory.estimate_bytes(_scenario(k, n, (1,), schemes=("fp16", "fp32"), bias=True), "cpu")
    assert est["weights"] == (4 + 2 + 4 + 4) * n * k + 4 * n
    assert est["activations"] == 4 * k + 4 * k  # fp32 is the widest activation dtype


def test_cuda_adds_the_flush_buffer_only_for_cold_timing():
    sc = _scenario()
    est = layer_memory.estimate_bytes(sc, torch.device("cuda"), l2_bytes=50 * MiB)
    assert est["flush"] == 4 * 50 * MiB  # timing.flush_multiple (default 4) x L2
    sc2 = _scenario(timing={"flush_multiple": 8})
    assert layer_memory.estimate_bytes(sc2, "cuda:0", l2_bytes=50 * MiB)["flush"] == 8 * 50 * MiB
    warm_only = _scenario(timing={"methods": ["warm", "eager"]})
    assert layer_memory.estimate_bytes(warm_only, "cuda", l2_bytes=50 * MiB)["flush"] == 0
    kernel_only = _scenario(timing={"methods": ["kernel"]})  # the kernel method flushes the L2 too
    assert layer_memory.estimate_bytes(kernel_only, "cuda", l2_bytes=50 * MiB)["flush"] == 4 * 50 * MiB


def test_estimate_does_not_allocate():
    """A 131072 x 131072 layer at M = 2^20 is estimated (terabytes) without touching memory; by
    hand, with NK = 2^34, MK = MN = 2^37 and fp16 (2 bytes) the widest activation and stored weight:
    weights (4 + 2 + 4 + 2) NK, activations 4 MK + 2 MK, reference 8 (MK + NK + MN), outputs
    (4 + 24) MN, overhead 512 MiB = 2^29."""
    est = layer_memory.estimate_bytes(_scenario(1 << 17, 1 << 17, (1 << 20,)), "cpu")
    nk, mk = 1 << 34, 1 << 37
    assert est["weights"] == 12 * nk and est["activations"] == 6 * mk
    assert est["reference"] == 8 * (2 * mk + nk) and est["outputs"] == 28 * mk
    assert est["total"] == 12 * nk + 6 * mk + 8 * (2 * mk + nk) + 28 * mk + (1 << 29) == 7_216_081_928_192


def test_check_fits_passes_a_small_scenario():
    memory.check_fits(_scenario(256, 256, (1, 4)), "cpu")  # real free memory of this machine
    memory.check_fits(_scenario(), "cpu", free=2 * GiB)


def test_check_fits_blames_m_when_the_layer_fits():
    sc = _scenario(m=(1, 65536))
    with pytest.raises(ScenarioError) as info:
        memory.check_fits(sc, "cpu", free=2 * GiB)
    msg = str(info.value)
    assert msg.startswith("mem.toml: m: needs about ") and "at M=65536" in msg
    assert "only 2.0 GiB is free" in msg and msg.endswith("got [1, 65536]") and "\n" not in msg


def test_check_fits_blames_the_layer_when_it_cannot_fit_at_m_1():
    sc = _scenario(1 << 17, 1 << 17, (1,))
    with pytest.raises(ScenarioError) as info:
        memory.check_fits(sc, "cpu", free=8 * GiB)
    msg = str(info.value)
    assert msg.startswith("mem.toml: layer: ") and "in_features=131072, out_features=131072" in msg
    assert "weights 192.0 GiB" in msg and "\n" not in msg


def test_check_fits_on_cuda_counts_the_flush(monkeypatch):
    sc = _scenario(256, 256, (1,))
    base = layer_memory.estimate_bytes(sc, "cuda", l2_bytes=0)["total"]
    memory.check_fits(sc, "cuda", free=base, l2_bytes=0)
    with pytest.raises(ScenarioError, match="flush 200.0 MiB"):
        memory.check_fits(sc, "cuda", free=base + 100 * MiB, l2_bytes=50 * MiB)


def test_unknown_free_memory_skips_the_check(monkeypatch):
    huge = _scenario(1 << 17, 1 << 17, (1 << 20,))
    with pytest.raises(ScenarioError):  # with the free memory known, this scenario is refused
        memory.check_fits(huge, "cpu", free=8 * GiB)
    monkeypatch.setattr(memory, "free_bytes", lambda device: None)
    monkeypatch.setattr(layer_memory, "estimate_bytes", lambda *a, **k: pytest.fail("estimated without free memory"))
    assert memory.check_fits(huge, "cpu") is None


def test_free_bytes_on_cpu_is_plausible():
    free = memory.free_bytes("cpu")
    assert free is None or 64 * MiB < free < 1 << 50


def _meminfo(monkeypatch, text=None):
    import io

    def fake_open(path, *a, **k):
        assert path == "/proc/meminfo"
        if text is None:
            raise OSError("no /proc here")
        return io.StringIO(text)

    monkeypatch.setattr(hardware, "open", fake_open, raising=False)  # free_bytes lives in qbench.hardware


def test_free_bytes_reads_memavailable_in_kib(monkeypatch):
    _meminfo(monkeypatch, "MemTotal:       16384 kB\nMemFree:  1 kB\nMemAvailable:    2048 kB\n")
    assert memory.free_bytes("cpu") == 2048 * 1024


@pytest.mark.parametrize("text", [None, "MemTotal: 16384 kB\n", "MemAvailable: lots\n"])
def test_free_bytes_falls_back_to_sysconf(monkeypatch, text):
    _meminfo(monkeypatch, text)
    conf = {"SC_AVPHYS_PAGES": 10, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(hardware.os, "sysconf", lambda name: conf[name])
    assert memory.free_bytes("cpu") == 40960
    monkeypatch.setattr(hardware.os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert memory.free_bytes("cpu") is None


def test_fmt_bytes():
    assert memory.fmt_bytes(512) == "512 B"
    assert memory.fmt_bytes(1536) == "1.5 KiB"
    assert memory.fmt_bytes(3 * GiB) == "3.0 GiB"
    assert memory.fmt_bytes(5 << 40) == "5.0 TiB"


def test_run_refuses_a_scenario_too_big_before_writing(tmp_path, monkeypatch):
    """Needs the runner wiring: ``memory.check_fits(scenario, dev)`` in ``runner.run`` before
    the result file is written or a worker started. (Without it the stubs stop the test before a
    worker could try to allocate a 64 GiB weight.)"""
    from qbench import lifecycle, runner

    def no_worker(*args, **kwargs):
        raise AssertionError("a result was written or a worker started for a scenario that cannot fit in memory")

    monkeypatch.setattr(lifecycle, "write_results", no_worker)  # the partial and the complete file
    for name in ("_Workers", "_run_worker"):  # whichever this runner has
        monkeypatch.setattr(runner, name, no_worker, raising=False)
    sc = _scenario(1 << 17, 1 << 17, (1 << 20,), source=str(tmp_path / "big.toml"))
    with pytest.raises(ScenarioError, match=r"big\.toml: layer: "):
        runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    assert not (tmp_path / "r.json").exists()
