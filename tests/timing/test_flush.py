import pytest
import torch

from qbench.timing.flush import L2Flusher

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_rejects_cpu_device():
    with pytest.raises(ValueError, match="'cpu'"):
        L2Flusher("cpu")


def _fake_cuda(monkeypatch, l2_bytes=1001, available=True):
    """qbench.timing.flush on a CPU torch that claims a CUDA device with ``l2_bytes`` of L2 (the
    buffers are CPU tensors, so flush() really runs)."""
    import types

    from qbench.timing import flush

    props = []
    fake = types.SimpleNamespace(
        device=torch.device, int32=torch.int32, int64=torch.int64, sum=torch.sum,
        ones=lambda n, dtype, device: torch.ones(n, dtype=dtype),
        zeros=lambda shape, dtype, device: torch.zeros(shape, dtype=dtype),
        cuda=types.SimpleNamespace(is_available=lambda: available, current_device=lambda: 3,
                                   get_device_properties=lambda dev: props.append(dev) or
                                   types.SimpleNamespace(L2_cache_size=l2_bytes)))
    monkeypatch.setattr(flush, "torch", fake)
    return props


def test_flusher_size_and_flush_by_hand(monkeypatch):
    props = _fake_cuda(monkeypatch, l2_bytes=1001)
    f = L2Flusher("cuda", multiple=3)
    # 3 x 1001 = 3003 bytes, rounded down to whole int32: 3000 bytes, 750 elements
    assert (f.l2_bytes, f.nbytes, f._buf.numel(), f.device) == (1001, 3000, 750, torch.device("cuda", 3))
    assert props == [torch.device("cuda", 3)]  # the current device when none is named
    f.flush()
    assert int(f._sink) == 750 and bool((f._buf == 1).all())  # a read: the sum of the ones, buffer unchanged
    assert L2Flusher(1, multiple=1).nbytes == 1000 and props[-1] == torch.device("cuda", 1)


def test_flusher_refusals(monkeypatch):
    _fake_cuda(monkeypatch, l2_bytes=0)
    with pytest.raises(RuntimeError, match="reports L2_cache_size=0"):
        L2Flusher("cuda:0")
    with pytest.raises(ValueError, match="multiple must be >= 1, got 0"):
        L2Flusher("cuda:0", multiple=0)
    _fake_cuda(monkeypatch, available=False)
    with pytest.raises(RuntimeError, match="is_available"):
        L2Flusher("cuda:0")


@pytest.mark.cuda
@needs_cuda
def test_flusher_size_and_flush():
    f = L2Flusher("cuda", multiple=4)
    assert f.l2_bytes == torch.cuda.get_device_properties(f.device).L2_cache_size
    assert f.nbytes == 4 * f.l2_bytes - (4 * f.l2_bytes) % 4
    f.flush()
    f.flush()
    torch.cuda.synchronize()


@pytest.mark.cuda
@needs_cuda
def test_flush_reads_and_never_writes_the_buffer():
    """The read flush: one reduction over the buffer into an int64 scalar; the buffer stays all ones
    (a write flush would leave dirty lines in L2 for the timed call to write back)."""
    f = L2Flusher("cuda", multiple=2)
    before = f._buf.data_ptr()
    for _ in range(3):
        f.flush()
    torch.cuda.synchronize()
    assert f._buf.data_ptr() == before and f._buf.dtype == torch.int32
    assert int(f._sink) == f._buf.numel() == f.nbytes // 4
    assert bool((f._buf == 1).all())
    assert f.nbytes >= 2 * f.l2_bytes - 3


@pytest.mark.cuda
@needs_cuda
def test_flush_is_one_read_of_the_buffer():
    """One reduction kernel reads the buffer (torch.sum into the int64 scalar; seen on an H200 with
    torch 2.11: the reduction, then an elementwise copy of its 8-byte result into ``out``)."""
    f = L2Flusher("cuda")
    f.flush()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        f.flush()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False) and not e.name.lower().startswith("memset")]
    reductions = [k for k in kernels if "reduce_kernel" in k]
    assert len(reductions) == 1 and "sum_functor" in reductions[0], kernels
    assert all("copy" in k for k in kernels if k not in reductions), kernels
    assert len(kernels) <= 2, kernels
