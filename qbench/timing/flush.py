"""L2 flush: READ a buffer several times the L2 size before a cold call, leaving L2 clean."""

from __future__ import annotations

import torch


class L2Flusher:
    """Evicts the weight from L2 by reading a buffer of ``multiple`` x L2 bytes.

    The L2 size comes from ``torch.cuda.get_device_properties(dev).L2_cache_size``
    (bytes; a row's ``env.l2_bytes``).
    Reading 4 x L2 (the default of ``TimingSettings.flush_multiple``) leaves, under any
    reasonable replacement policy, no line of the previous call's data.

    Why a read and not a write (triton's ``do_bench`` zeroes a 256 MB buffer): the GPU's L2
    is write-back, so a flush that *writes* leaves L2 full of dirty lines, and the timed
    kernel pays their write-back to HBM while it reads its weight: measured on an H200, a write
    flush put an 8192 x 8192 bf16 layer's cold time about 30 % above a CUDA graph streaming
    distinct weight copies from HBM, a read flush within 10 % (docs/methodology.md, "cold").

    Each ``flush()`` is one reduction kernel (``torch.sum`` over the int32 buffer into a
    preallocated int64 scalar): it reads every byte of the buffer and writes 8 bytes.

    Attributes:
        device: torch.device of the buffer.
        l2_bytes: L2 size in bytes.
        nbytes: buffer size in bytes (multiple x l2_bytes, rounded down to 4 bytes).

    Raises:
        ValueError: device is not a CUDA device, or multiple < 1.
        RuntimeError: CUDA unavailable, or the device reports no L2 size.
        torch.OutOfMemoryError: the buffer does not fit.
    """

    def __init__(self, device: torch.device | str | int, multiple: int = 4) -> None:
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if dev.type != "cuda":
            raise ValueError(f"L2Flusher: device must be a CUDA device, got {str(dev)!r}")
        if multiple < 1:
            raise ValueError(f"L2Flusher: multiple must be >= 1, got {multiple}")
        if not torch.cuda.is_available():
            raise RuntimeError("L2Flusher: torch.cuda.is_available() is False")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        if l2 <= 0:
            raise RuntimeError(f"L2Flusher: {dev} reports L2_cache_size={l2}")
        self.device = dev
        self.l2_bytes = l2
        self.nbytes = (multiple * l2) // 4 * 4
        self._buf = torch.ones(self.nbytes // 4, dtype=torch.int32, device=dev)
        self._sink = torch.zeros((), dtype=torch.int64, device=dev)

    def flush(self) -> None:
        """Enqueue one full read of the buffer on the current stream (asynchronous)."""
        torch.sum(self._buf, dim=0, dtype=torch.int64, out=self._sink)
