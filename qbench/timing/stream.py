"""Stream timing: a CUDA graph over L distinct weight copies, each read from HBM (label ``stream``).

A decode engine (vLLM, SGLang, TensorRT-LLM, gpt-fast) captures the decode step in a CUDA graph,
and every layer's weight comes from HBM because the model is far larger than L2. One 4096 x 4096
layer fits in the H200's 60 MiB L2, so timing calls that reuse one weight measures L2. This method
builds L copies of the layer (together >= ``STREAM_L2_MULTIPLE`` x L2), captures one graph calling
copy 1, 2, ..., L in order on one input, and reports replay time / L: no launch gaps, no host, every
weight read from HBM. Int4 decode kernel benchmarks (Marlin's, IST-DASLab/marlin ``bench.py``) use
distinct weight copies for the same reason.

On CPU the same idea without a graph: copies that together exceed the last-level cache, called in
sequence, so the weight comes from DRAM, not from a cache the previous call filled.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from qbench.timing._cuda import replay_samples, require_cuda
from qbench.timing.method import Call, Needs, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats
from qbench.timing.warm import capture_graph

#: Copies together hold at least this many times the cache (project choice, the same multiple as
#: the L2 flush buffer: under LRU-like replacement no line of copy i survives to its next call).
STREAM_L2_MULTIPLE = 4
#: Fewest copies, whatever the sizes (a layer larger than the cache still gets 4).
MIN_COPIES = 4
#: Share of the free memory the copies may take (the rest stays for activations, outputs, the
#: graph's pool and other processes). Project choice.
MEMORY_FRACTION = 0.5
#: Upper bound on the copy count (small layers: a 64 KiB layer would otherwise want ~4000 copies;
#: 512 keeps graph capture and build time bounded and still exceeds the cache many times for
#: any layer over 0.5 MiB at 60 MiB of L2). Project choice.
MAX_COPIES = 512


class StreamPlanError(ValueError):
    """Not even MIN_COPIES copies fit in the memory allowed; ``reason`` is one line for the row."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class StreamPlan:
    """How many copies to stream and what they cover.

    Attributes:
        copies: L, distinct copies of the layer (>= MIN_COPIES).
        copy_bytes: stored bytes of one copy (payload + metadata + bias).
        cache_bytes: the cache the copies must overflow (L2 on CUDA, last-level cache on CPU).
        cache_multiple: copies x copy_bytes / cache_bytes (>= STREAM_L2_MULTIPLE unless memory
            or MAX_COPIES bounded the count; ``bounded_by`` says which).
        bounded_by: None, "memory" or "max_copies".
    """

    copies: int
    copy_bytes: int
    cache_bytes: int
    cache_multiple: float
    bounded_by: Optional[str] = None

    def to_dict(self) -> dict:
        return {"copies": self.copies, "copy_bytes": self.copy_bytes, "cache_bytes": self.cache_bytes,
                "cache_multiple": self.cache_multiple, "bounded_by": self.bounded_by}


def plan_copies(copy_bytes: int, cache_bytes: int, free_bytes: Optional[int], *,
                multiple: int = STREAM_L2_MULTIPLE, min_copies: int = MIN_COPIES,
                max_copies: int = MAX_COPIES, memory_fraction: float = MEMORY_FRACTION) -> StreamPlan:
    """Copies L so that L x copy_bytes >= multiple x cache_bytes, at least min_copies.

    L = max(min_copies, ceil(multiple * cache_bytes / copy_bytes)), then capped by max_copies and
    by floor(memory_fraction * free_bytes / copy_bytes) (no memory cap when free_bytes is None).
    The original layer is copy 1, so L - 1 new copies are built.

    Args:
        copy_bytes: stored bytes of one copy, > 0.
        cache_bytes: L2 (CUDA) or last-level cache (CPU) bytes, > 0.
        free_bytes: free device memory in bytes, or None when unknown.

    Raises:
        ValueError: copy_bytes or cache_bytes <= 0.
        StreamPlanError: fewer than min_copies copies fit in memory_fraction of free_bytes.
    """
    if copy_bytes <= 0 or cache_bytes <= 0:
        raise ValueError(f"plan_copies: copy_bytes and cache_bytes must be > 0, got {copy_bytes}, {cache_bytes}")
    want = max(min_copies, math.ceil(multiple * cache_bytes / copy_bytes))
    copies, bounded = want, None
    if copies > max_copies:
        copies, bounded = max_copies, "max_copies"
    if free_bytes is not None:
        # the original already exists: only L - 1 copies are new
        fit = int(memory_fraction * free_bytes // copy_bytes) + 1
        if fit < min_copies:
            raise StreamPlanError(
                f"stream needs {min_copies} copies of {copy_bytes} B; only {fit} fit in "
                f"{memory_fraction:.0%} of the {free_bytes} B free")
        if fit < copies:
            copies, bounded = fit, "memory"
    return StreamPlan(copies=copies, copy_bytes=copy_bytes, cache_bytes=cache_bytes,
                      cache_multiple=copies * copy_bytes / cache_bytes, bounded_by=bounded)


def last_level_cache_bytes() -> Optional[int]:
    """The CPU's largest cache in bytes (the last level), or None when it cannot be read.

    Linux sysfs first (``/sys/devices/system/cpu/cpu0/cache/index*/size``, e.g. "32768K"), then
    ``os.sysconf("SC_LEVEL3_CACHE_SIZE")`` / ``SC_LEVEL2_CACHE_SIZE`` (glibc).
    """
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * factor)
    if sizes:
        return max(sizes)
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            value = int(os.sysconf(name))
        except (ValueError, OSError, AttributeError):
            continue
        if value > 0:
            return value
    return None


def in_order(calls: Sequence[Callable[[], object]]) -> Callable[[], None]:
    """One callable that calls ``calls[0]``, ``calls[1]``, ... once each, in order."""
    calls = tuple(calls)

    def run() -> None:
        for call in calls:
            call()

    return run


def time_stream(calls: Sequence[Callable[[], object]], settings: TimingSettings) -> Stats:
    """GPU time per call of a CUDA graph calling each of ``calls`` once in order, µs (``stream``).

    ``calls[i]`` must call copy i of the layer on the same input. After warm-up on a side stream
    (PyTorch CUDA-graphs notes), one graph captures calls[0..L-1]; each sample is one replay
    between two CUDA events divided by L. With copies that together exceed L2 several times,
    every call reads its weight from HBM, as in a decode engine's graph-captured step; launch
    overhead and host gaps are gone; the activation (one input) stays L2-hot, as in a decode step.

    Args:
        calls: L >= 1 zero-argument callables, each capturable.
        settings: warmup, min_reps, max_reps, target_rel_ci, budget_s.

    Returns:
        Stats, µs per call; ``n`` counts replays.

    Raises:
        ValueError: no calls.
        RuntimeError: no CUDA device.
        GraphCaptureError: a call cannot be captured (host sync, CPU decision on a GPU value).
    """
    require_cuda("time_stream")
    if not calls:
        raise ValueError("time_stream: needs at least one call")
    graph = capture_graph(in_order(calls), 1, settings.warmup)
    return replay_samples(graph, len(calls), settings)


def rotate(calls: Sequence[Callable[[], object]]) -> Callable[[], None]:
    """One callable that calls ``calls[0]`` on its first use, ``calls[1]`` on the next, ..., wrapping
    around: consecutive uses touch different copies, each copy every L-th use."""
    calls = tuple(calls)
    state = {"next": 0}

    def run() -> None:
        i = state["next"]
        state["next"] = (i + 1) % len(calls)
        calls[i]()

    return run


def time_stream_cpu(calls: Sequence[Callable[[], object]], settings: TimingSettings) -> Stats:
    """Host time per call of ``calls`` called in rotation on the CPU, µs (``stream`` on CPU).

    After one pass over every copy (a bitsandbytes 4-bit CPU layer repacks its weight on its first
    call), :func:`qbench.timing.cpu.time_cpu` times a callable that calls the next copy each time
    (:func:`rotate`): each timed call reads a copy that L - 1 other calls have pushed out of the
    last-level cache, so its weight comes from DRAM. A sample is a block of such calls (>= 100 µs),
    so a slow layer costs as many calls as the ``cpu`` method, not L times more.

    Raises:
        ValueError: no calls. Whatever a call raises.
    """
    from qbench.timing.cpu import time_cpu

    if not calls:
        raise ValueError("time_stream_cpu: needs at least one call")
    in_order(calls)()
    return time_cpu(rotate(calls), settings)


#: The keys a ``stream`` record adds to STATS (:meth:`Stream.run`).
EXTRAS = ("copies", "copy_bytes", "planned_copy_bytes", "cache_bytes", "cache_multiple", "bounded_by", "how",
          "recompilations")


class Stream(TimingMethod):
    """``stream``: :func:`time_stream` (CUDA) or :func:`time_stream_cpu` (CPU) of the copies' calls.

    The record adds the copies' plan (``copies``, ``copy_bytes``, ``cache_bytes``,
    ``cache_multiple``, ``bounded_by``), ``how`` they were made, ``planned_copy_bytes`` when the
    weight was repacked on its first call (``copy_bytes`` is then the timed, repacked size), and
    for compiled schemes ``recompilations``: Dynamo graphs compiled while stream ran.
    """

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        before = call.graphs() if call.graphs is not None else None
        timer = time_stream if call.device.type == "cuda" else time_stream_cpu
        stats = timer(call.calls, settings)
        record = {**stats.to_dict(), **call.copies.plan.to_dict(), "how": call.copies.how}
        if call.stored_bytes is not None and call.stored_bytes != record["copy_bytes"]:  # repacked on its first call
            record["planned_copy_bytes"] = record["copy_bytes"]
            record["copy_bytes"] = call.stored_bytes
            record["cache_multiple"] = record["copies"] * call.stored_bytes / record["cache_bytes"]
        if before is not None:
            record["recompilations"] = call.graphs() - before
        return Reading(record)


METHOD = Stream(
    "stream", "µs per call of one CUDA graph calling L distinct weight copies in order (copies together >= 4 x L2): "
    "weights streamed from HBM, no launch gaps, as a decode engine's graph-captured step; on CPU the copies exceed "
    "the last-level cache, no graph", "weight from HBM (DRAM on CPU)", cuda=True, cpu=True, needs_capture=True,
    decision=True, phase="graph", order=5, needs=Needs(copies=True), extras=EXTRAS)
