"""Small CUDA helpers shared by the timing methods (private)."""

from __future__ import annotations

import torch


def require_cuda(what: str) -> None:
    """Raise RuntimeError naming `what` when torch has no usable CUDA device."""
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what}: needs a CUDA device; torch.cuda.is_available() is False")


def event_pairs(n: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    """n (start, end) pairs of timing-enabled CUDA events on the current device."""
    return [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(n)
    ]


def one_line(exc: BaseException, limit: int = 240) -> str:
    """'Type: first line of message', cut to `limit` characters."""
    msg = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {msg[0] if msg else ''}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."

#: Samples recorded between two host synchronizations. Each sample enqueues ~5 items;
#: 64 samples stay well under the CUDA launch queue depth (~1024 entries, a commonly
#: reported figure, not a documented constant), so the host never stalls on a full queue
#: in a way that exposes launch gaps. Project choice.
MAX_INFLIGHT = 64


def chunks(n: int, size: int = MAX_INFLIGHT) -> list[int]:
    """Split n into chunk sizes of at most `size`: chunks(130, 64) == [64, 64, 2]."""
    out = [size] * (n // size)
    if n % size:
        out.append(n % size)
    return out
