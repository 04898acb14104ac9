"""L2 flush: overwrite a buffer several times the L2 size before a cold call."""

from __future__ import annotations

import torch


class L2Flusher:
    """Evicts the weight from L2 by writing a buffer of ``multiple`` x L2 bytes.

    The L2 size comes from ``torch.cuda.get_device_properties(dev).L2_cache_size``
    (bytes; 60 MiB reported on the H200 per /work/.library/device/KINDS.md). Writing
    4 x L2 (the default of ``TimingSettings.flush_multiple``) leaves, under any
    reasonable replacement policy, no line of the previous call's data; triton's
    ``do_bench`` uses a fixed 256 MB buffer for the same purpose.

    Each ``flush()`` fills the buffer with a new int32 value (a full-write elementwise
    kernel on the current stream), so no hardware shortcut can skip an unchanged write.

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
        self._buf = torch.empty(self.nbytes // 4, dtype=torch.int32, device=dev)
        self._value = 0

    def flush(self) -> None:
        """Enqueue one full write of the buffer on the current stream (asynchronous)."""
        self._value = (self._value + 1) % 2_000_000_000
        self._buf.fill_(self._value)
