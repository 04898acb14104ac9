"""CUDA helpers shared by the timing methods (private): the event sampling and the graph-replay
sampling every CUDA method uses, the host-sync probe, and ``torch`` imported on first use.

The method modules import ``torch`` from here (:data:`torch`), so importing them (the registry
does, for readers of results) does not import torch; the first attribute read imports it.
"""

from __future__ import annotations

import importlib
from typing import Callable, Optional

from qbench.timing.adaptive import collect
from qbench.timing.stats import Stats, summarize


class _Torch:
    """``torch``, imported on the first attribute read (each read goes to the real module, so
    monkeypatching torch still works). Hot loops bind what they call to a local first."""

    def __getattr__(self, name: str):
        return getattr(importlib.import_module("torch"), name)


#: ``torch``, imported on first use.
torch = _Torch()

#: Samples recorded between two host synchronizations. Each sample enqueues ~5 items;
#: 64 samples stay well under the CUDA launch queue depth (~1024 entries, a commonly
#: reported figure, not a documented constant), so the host never stalls on a full queue
#: in a way that exposes launch gaps. Project choice.
MAX_INFLIGHT = 64


class GraphCaptureError(RuntimeError):
    """fn could not be captured in a CUDA graph; ``reason`` is one line for the row."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def require_cuda(what: str) -> None:
    """Raise RuntimeError naming `what` when torch has no usable CUDA device."""
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what}: needs a CUDA device; torch.cuda.is_available() is False")


def event_pairs(n: int) -> list:
    """n (start, end) pairs of timing-enabled CUDA events on the current device."""
    event = torch.cuda.Event
    return [(event(enable_timing=True), event(enable_timing=True)) for _ in range(n)]


def one_line(exc: BaseException, limit: int = 240) -> str:
    """'Type: first line of message', cut to `limit` characters."""
    msg = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {msg[0] if msg else ''}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def chunks(n: int, size: int = MAX_INFLIGHT) -> list[int]:
    """Split n into chunk sizes of at most `size`: chunks(130, 64) == [64, 64, 2]."""
    out = [size] * (n // size)
    if n % size:
        out.append(n % size)
    return out


def event_samples(body: Callable[[], object], max_reps: int, per_call: int = 1,
                  before: Optional[Callable[[], object]] = None) -> Callable[[int], list[float]]:
    """A ``sample_batch(n)`` for :func:`~qbench.timing.adaptive.collect`: each sample is
    ``before()`` (untimed), a start event, ``body()``, an end event; up to :data:`MAX_INFLIGHT`
    samples are enqueued before one synchronize. A sample is the event time / ``per_call``, µs.

    Args:
        body: zero-argument callable enqueuing the timed work on the current stream.
        max_reps: most samples ever asked for (sizes the event pool: min(max_reps, MAX_INFLIGHT)).
        per_call: calls of the layer one body makes (a graph of L copies: L).
        before: zero-argument callable enqueued before the start event of every sample, or None.
    """
    pool = event_pairs(min(max_reps, MAX_INFLIGHT))
    sync = torch.cuda.synchronize

    def sample_batch(n: int) -> list[float]:
        out: list[float] = []
        for size in chunks(n, len(pool)):
            pairs = pool[:size]
            for start, end in pairs:
                if before is not None:
                    before()
                start.record()
                body()
                end.record()
            sync()
            out.extend(start.elapsed_time(end) * 1e3 / per_call for start, end in pairs)
        return out

    return sample_batch


def replay_samples(graph, per_call: int, settings) -> Stats:
    """Stats of replays of a captured CUDA ``graph`` between CUDA events, µs per call (replay time /
    ``per_call``); the first replay (which uploads the graph) is not timed; the graph is reset after.

    Args:
        graph: a captured ``torch.cuda.CUDAGraph``.
        per_call: calls of the layer the graph holds, >= 1.
        settings: min_reps, max_reps, target_rel_ci, budget_s.
    """
    graph.replay()  # the first replay uploads the graph
    torch.cuda.synchronize()
    try:
        samples, converged, stop = collect(event_samples(graph.replay, settings.max_reps, per_call), settings)
    finally:
        graph.reset()
    return summarize(samples, converged, stop)


def syncs_host(fn: Callable[[], object]) -> bool:
    """True when one call of ``fn`` blocks the host on the GPU (``.item()``, a DtoH copy, ...): the
    host-sync probe (:attr:`qbench.timing.method.Needs.host_sync`).

    Runs fn once under ``torch.cuda.set_sync_debug_mode("error")``, which makes every
    synchronizing CUDA call torch knows of raise (PyTorch docs, ``torch.cuda.set_sync_debug_mode``).

    Raises:
        whatever fn raises other than the synchronizing error.
    """
    cuda = torch.cuda
    previous = cuda.get_sync_debug_mode()
    cuda.synchronize()
    cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as exc:
        if "synchroniz" in str(exc):
            return True
        raise
    finally:
        cuda.set_sync_debug_mode(previous)
        cuda.synchronize()
    return False
