import pytest
import torch

from qbench.timing.kernel import (
    CALL_PREFIX,
    FLUSH_PREFIX,
    TraceEvent,
    _events,
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


# the profiled loop with a flusher: flush range i (flush kernel + synchronize), then call range i
FLUSHES = [(0.0, 50.0), (200.0, 250.0)]
CALLS = [(100.0, 110.0), (300.0, 310.0)]
FLUSH_KERNEL = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<int, sum_functor<int, long, long>>>"
FLUSHED_GPU = [gpu(FLUSH_KERNEL, 10, 40), gpu("gemm_a", 112, 120), gpu(FLUSH_KERNEL, 210, 240),
               gpu("gemm_a", 312, 320), gpu("splitKreduce_kernel", 321, 322)]


def test_split_by_call_drops_flush_work_keeps_call_work():
    per = split_by_call(CALLS, FLUSHED_GPU, FLUSHES)
    assert [[e.name for e in c] for c in per] == [["gemm_a"], ["gemm_a", "splitKreduce_kernel"]]
    entries, sums = aggregate(per)
    assert sums == [8.0, 9.0] and FLUSH_KERNEL not in [e.name for e in entries]


def test_split_by_call_skip_ranges_in_any_order_and_gpu_lag():
    # flush work that starts after its host range ended (GPU lag) but before the call: still dropped;
    # a call kernel that starts after the call's host range ended: still the call's
    late = [gpu(FLUSH_KERNEL, 60, 90), gpu("gemm_a", 150, 160), gpu(FLUSH_KERNEL, 260, 280), gpu("gemm_a", 330, 340)]
    per = split_by_call(CALLS, late, list(reversed(FLUSHES)))
    assert [[(e.name, e.start_us) for e in c] for c in per] == [[("gemm_a", 150)], [("gemm_a", 330)]]


def test_split_by_call_without_skip_ranges_counts_flush_in_previous_call():
    # what the skip ranges are for: without them the second flush lands in call 0
    per = split_by_call(CALLS, FLUSHED_GPU)
    assert [e.name for e in per[0]] == ["gemm_a", FLUSH_KERNEL]


def test_split_by_call_events_before_everything_dropped():
    per = split_by_call(CALLS, [gpu("early", -5, -1)] + FLUSHED_GPU, FLUSHES)
    assert "early" not in [e.name for c in per for e in c]
    assert split_by_call([], FLUSHED_GPU, FLUSHES) == []


class _Range:
    def __init__(self, start, end):
        self.start, self.end = start, end


class _Evt:
    def __init__(self, name, start, end, cuda, annotation=False):
        from torch.autograd import DeviceType

        self.name, self.time_range = name, _Range(start, end)
        self.device_type = DeviceType.CUDA if cuda else DeviceType.CPU
        self.is_user_annotation = annotation


class _Prof:
    def __init__(self, events):
        self._events = events

    def events(self):
        return self._events


def test_events_separates_call_and_flush_ranges():
    prof = _Prof([
        _Evt(f"{FLUSH_PREFIX}0", 0, 50, False), _Evt(f"{FLUSH_PREFIX}0", 5, 45, True, annotation=True),
        _Evt(FLUSH_KERNEL, 10, 40, True), _Evt("cudaDeviceSynchronize", 41, 49, False),
        _Evt(f"{CALL_PREFIX}1", 300, 310, False), _Evt(f"{CALL_PREFIX}0", 100, 110, False),
        _Evt(f"{CALL_PREFIX}0", 101, 119, True, annotation=True),
        _Evt("gemm_a", 112, 120, True), _Evt("aten::linear", 101, 109, False),
        _Evt(f"{FLUSH_PREFIX}1", 200, 250, False), _Evt("gemm_a", 312, 320, True),
    ])
    ranges, flushes, cpu_events, gpu_events = _events(prof)
    assert ranges == [(100.0, 110.0), (300.0, 310.0)]  # call order, not event order
    assert flushes == [(0.0, 50.0), (200.0, 250.0)]
    assert [e.name for e in cpu_events] == ["cudaDeviceSynchronize", "aten::linear"]
    assert [e.name for e in gpu_events] == [FLUSH_KERNEL, "gemm_a", "gemm_a"]
    per = split_by_call(ranges, gpu_events, flushes)
    assert [[e.name for e in c] for c in per] == [["gemm_a"], ["gemm_a"]]
    # the flush's synchronize is outside every call range: no host sync is blamed on the call
    assert host_sync_evidence(ranges, cpu_events, per) == []


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


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_profile_kernels_without_cuda_raises():
    from qbench.timing.settings import TimingSettings

    with pytest.raises(RuntimeError, match="profile_kernels: needs a CUDA device"):
        profile_kernels(lambda: None, TimingSettings())


def _flush_kernels(names):
    return [n for n in names if "sum_functor" in n or ("reduce_kernel" in n and "at::native" in n)]


@pytest.mark.cuda
@needs_cuda
def test_profile_with_flusher_drops_the_flush_kernel(bf16_matmul, fast_settings):
    from qbench.timing.flush import L2Flusher

    flushed = profile_kernels(bf16_matmul, fast_settings, flusher=L2Flusher("cuda"))
    plain = profile_kernels(bf16_matmul, fast_settings)
    assert flushed.calls == fast_settings.min_reps == flushed.kernel_us.n  # default: min_reps calls
    assert _flush_kernels(flushed.kernel_names) == [], flushed.kernel_names
    assert _flush_kernels(plain.kernel_names) == []
    # the same kernels, once per call each, with and without the flush
    assert sorted(flushed.kernel_names) == sorted(plain.kernel_names)
    assert all(k.count == 1.0 for k in flushed.kernels), [(k.name, k.count) for k in flushed.kernels]
    assert flushed.host_sync is False and flushed.host_sync_evidence == ()
    # the flush really ran and really is one reduction of the 4 x L2 buffer (about 240 MiB on an
    # H200, > 30 µs): had it been counted, kernel_us would be far above the plain profile's
    assert flushed.kernel_us.median < plain.kernel_us.median + 20.0


@pytest.mark.cuda
@needs_cuda
def test_profile_item_has_host_sync(fast_settings):
    x = torch.randn(1024, device="cuda")
    p = profile_kernels(lambda: (x * 2).sum().item(), fast_settings, calls=3)
    assert p.host_sync is True and p.host_sync_evidence
