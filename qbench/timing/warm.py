"""Warm timing: CUDA-graph replay of several calls, L2 hot, launch overhead gone (``warm``); the
graph capture every graph method uses (:func:`capture_graph`)."""

from __future__ import annotations

from typing import Callable

from qbench.timing._cuda import GraphCaptureError, one_line, replay_samples, require_cuda, torch
from qbench.timing.method import Call, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats

__all__ = ["METHOD", "GraphCaptureError", "capture_graph", "time_warm"]

#: Fewest side-stream warm-up calls before capture; the PyTorch CUDA-graphs notes
#: ("Whole-network capture") warm up 3 iterations on a side stream.
MIN_SIDE_STREAM_WARMUP = 3


def _root_cause(exc: BaseException) -> BaseException:
    """The first exception of a chain (``__cause__`` or ``__context__``), cycles guarded."""
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or id(nxt) in seen:
            return exc
        seen.add(id(nxt))
        exc = nxt


def _cleanup_failed_capture(graph, stream) -> list[str]:
    """Undo what a failed capture may have left; returns one note per step that failed.

    ``torch.cuda.graph.__exit__`` calls ``capture_end`` before restoring the stream, so
    when capture_end raises, the capture stream stays current: restore `stream`. Then
    end a capture still open, synchronize, reset the graph, drop cuBLAS workspaces that
    may have come from the graph's private pool, and empty the cache.
    """
    notes: list[str] = []

    def step(name: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - recorded into the reason, not dropped
            notes.append(f"{name}: {one_line(exc, 120)}")

    if torch.cuda.is_current_stream_capturing():
        step("capture_end", graph.capture_end)
    if torch.cuda.current_stream() != stream:
        step("set_stream", lambda: torch.cuda.set_stream(stream))
    step("synchronize", torch.cuda.synchronize)
    step("reset", graph.reset)
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        step("clear_cublas_workspaces", torch._C._cuda_clearCublasWorkspaces)
    step("empty_cache", torch.cuda.empty_cache)
    return notes


def capture_graph(fn: Callable[[], object], calls: int, warmup: int):
    """Capture ``calls`` calls of fn in one CUDA graph, after warm-up on a side stream.

    Follows the PyTorch CUDA-graphs notes: warm up on a side stream that waits for the
    current one, make the current stream wait for it, then capture with
    ``torch.cuda.graph`` (capture_error_mode "global": any synchronizing call fails).

    Raises:
        GraphCaptureError: capture failed; the reason names the original error and any
            cleanup step that failed too.
    """
    current = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(max(warmup, MIN_SIDE_STREAM_WARMUP)):
            fn()
    current.wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as exc:
        notes = _cleanup_failed_capture(graph, current)
        root = _root_cause(exc)
        reason = f"CUDA graph capture failed: {one_line(root)}"
        if root is not exc:
            reason += f" (then {one_line(exc, 120)})"
        if notes:
            reason += "; cleanup: " + "; ".join(notes)
        raise GraphCaptureError(reason) from exc
    return graph


def time_warm(fn: Callable[[], object], settings: TimingSettings) -> Stats:
    """GPU time per call of ``fn`` replayed from a CUDA graph, µs (method label ``warm``).

    ``settings.graph_calls`` calls are captured in one graph; each sample is one replay
    between two CUDA events, divided by graph_calls. Launch overhead and host gaps are
    gone; the L2 is hot (the previous call just read the same weight: a weight smaller
    than L2, 60 MiB on the H200, is served from L2). Call this method LAST in a
    worker process: a failed capture can leave CUDA state (RNG, allocator pools) broken.

    Args:
        fn: zero-argument callable; must be capturable (no host sync, no CPU-side
            decisions on GPU values, static shapes and addresses).
        settings: warmup, graph_calls, min_reps, max_reps, target_rel_ci, budget_s.

    Returns:
        Stats, µs per call; ``n`` counts replays.

    Raises:
        RuntimeError: no CUDA device.
        GraphCaptureError: fn cannot be captured (one-line ``reason``).
    """
    require_cuda("time_warm")
    graph = capture_graph(fn, settings.graph_calls, settings.warmup)
    return replay_samples(graph, settings.graph_calls, settings)


class Warm(TimingMethod):
    """``warm``: :func:`time_warm` of the call (graph phase)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        return Reading(time_warm(call.fn, settings).to_dict())


METHOD = Warm("warm", "µs per call of a CUDA graph of 20 calls on one weight: L2-hot, no launch",
              "hot (weight < L2 is served from L2)", cuda=True, cpu=False, needs_capture=True,
              phase="graph", order=4)
