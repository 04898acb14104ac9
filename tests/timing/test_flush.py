import pytest
import torch

from qbench.timing.flush import L2Flusher

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_rejects_cpu_device():
    with pytest.raises(ValueError, match="'cpu'"):
        L2Flusher("cpu")


@pytest.mark.cuda
@needs_cuda
def test_flusher_size_and_flush():
    f = L2Flusher("cuda", multiple=4)
    assert f.l2_bytes > 0 and f.nbytes == (4 * f.l2_bytes) // 4 * 4
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
