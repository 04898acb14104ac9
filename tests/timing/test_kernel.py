import pytest
import torch

from qbench.timing.kernel import (
    TraceEvent,
    aggregate,
    host_sync_evidence,
    profile_kernels,
    split_by_call,
    work_kind,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def gpu(name, s, e):
    return TraceEvent(name, s, e, True)


def cpu(name, s, e):
    return TraceEvent(name, s, e, False)


RANGES = [(0.0, 10.0), (100.0, 110.0)]
GPU = [gpu("gemm_a", 12, 20), gpu("cast", 21, 23), gpu("gemm_a", 112, 122), gpu("Memcpy DtoH (Device -> Pageable)", 125, 126)]


def test_split_by_call():
    per = split_by_call(RANGES, GPU + [gpu("early", -5, -1)])
    assert [[e.name for e in c] for c in per] == [["gemm_a", "cast"], ["gemm_a", "Memcpy DtoH (Device -> Pageable)"]]


def test_aggregate_per_call():
    entries, sums = aggregate(split_by_call(RANGES, GPU))
    assert sums == [10.0, 11.0]
    top = entries[0]
    assert (top.name, top.count, top.us, top.kind) == ("gemm_a", 1.0, 9.0, "kernel")
    assert {e.name: e.kind for e in entries}["Memcpy DtoH (Device -> Pageable)"] == "memcpy"


def test_host_sync_evidence():
    per = split_by_call(RANGES, GPU[:3])
    assert host_sync_evidence(RANGES, [cpu("cudaDeviceSynchronize", 50, 60)], per) == []
    assert host_sync_evidence(RANGES, [cpu("aten::item", 103, 104)], per) == ["aten::item"]
    per2 = split_by_call(RANGES, GPU)
    assert host_sync_evidence(RANGES, [], per2) == ["Memcpy DtoH (Device -> Pageable)"]


def test_work_kind():
    assert work_kind("Memset (Device)") == "memset"
    assert work_kind("Memcpy HtoD (Pageable -> Device)") == "memcpy"
    assert work_kind("nvjet_hsh_64x8") == "kernel"


@pytest.mark.cuda
@needs_cuda
def test_profile_plain_matmul(bf16_matmul, fast_settings):
    from qbench.dispatch import is_float_gemm

    p = profile_kernels(bf16_matmul, fast_settings, calls=5)
    assert p.kernel_us.median > 0 and p.kernel_us.n == 5
    assert any(is_float_gemm(k.name) for k in p.kernels), p.kernel_names
    assert p.host_sync is False
    assert set(p.to_dict()) == {"kernels", "kernel_us", "host_sync", "host_sync_evidence", "calls"}


@pytest.mark.cuda
@needs_cuda
def test_profile_item_has_host_sync(fast_settings):
    x = torch.randn(1024, device="cuda")
    p = profile_kernels(lambda: (x * 2).sum().item(), fast_settings, calls=3)
    assert p.host_sync is True and p.host_sync_evidence
