"""Whether a scenario fits in the device's free memory, asked before anything is allocated.

:func:`check_fits` reads the free memory and asks the scenario's job kind (:attr:`qbench.jobs.Job.fits`:
the layer job's estimate in :mod:`qbench.layer.memory`, the model step's in :mod:`qbench.step.spec`),
so the run stops with one line before a worker is started or a result file is written. The helpers
here (the per-worker overhead, byte sizes, the L2 size) are what the kinds' estimates share.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from qbench import jobs
from qbench.hardware import free_bytes  # noqa: F401 - re-exported: the memory checks' free memory

#: Worker process overhead counted on every device (bytes): on CUDA the worker's context and the
#: cuBLAS workspace, on the CPU the worker's own torch and library code.
PROCESS_OVERHEAD = 512 << 20
#: L2 size assumed when a CUDA device's properties cannot be read (bytes); larger than the L2 of
#: any current NVIDIA GPU (H100: 50 MiB, B200: 126 MiB), so the flush buffer is not underestimated.
FALLBACK_L2_BYTES = 128 << 20


def check_fits(scenario: Any, device: torch.device | str, *, free: Optional[int] = None,
               l2_bytes: Optional[int] = None) -> None:
    """Refuse a scenario that cannot fit in the free memory of ``device``, as its job kind's
    ``fits`` says (no check for a kind without one, or when the free memory is unreadable).

    Args:
        free: free bytes; default :func:`free_bytes` of ``device``.
        l2_bytes: the L2 size in bytes, for a kind whose estimate counts an L2 flush buffer.

    Raises:
        ScenarioError: the key at fault (``layer``, ``m``, ``model``), the estimate and the free memory.
    """
    device = torch.device(device)
    free = free_bytes(device) if free is None else free
    target = jobs.of_scenario(scenario).fits
    if free is None or target is None:
        return
    fits = jobs.load(target)
    if l2_bytes is not None:
        fits(scenario, device, free, l2_bytes=l2_bytes)
    else:
        fits(scenario, device, free)


def fmt_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()


def l2_bytes_of(device: torch.device) -> int:
    """The L2 size of CUDA ``device`` in bytes, :data:`FALLBACK_L2_BYTES` when unreadable."""
    try:
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    except (RuntimeError, AssertionError, AttributeError):
        return FALLBACK_L2_BYTES
