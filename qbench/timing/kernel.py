"""Kernel profile: which GPU kernels one call runs, their time, and host syncs inside."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from qbench.timing._cuda import require_cuda, torch
from qbench.timing.method import Call, Needs, Reading, TimingMethod
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize

#: record_function range name prefix marking call i ("qbench_call_3").
CALL_PREFIX = "qbench_call_"
#: record_function range name prefix marking the L2 flush before call i; its GPU work is dropped.
FLUSH_PREFIX = "qbench_flush_"

#: Host-side events that block the host on the GPU (aten ops and CUDA runtime calls as
#: torch.profiler / kineto name them).
HOST_SYNC_NAMES = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
    }
)
_DTOH = re.compile(r"memcpy\s*dtoh|device\s*->\s*(pageable|pinned)", re.IGNORECASE)


@dataclass(frozen=True)
class TraceEvent:
    """One profiler event reduced to what this module needs (times in µs, profiler clock)."""

    name: str
    start_us: float
    end_us: float
    on_gpu: bool

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class KernelEntry:
    """One GPU work item name of ONE call: mean count per call and µs per call (total)."""

    name: str
    count: float
    us: float
    kind: str  # "kernel", "memcpy" or "memset"

    def to_dict(self) -> dict:
        return {"name": self.name, "count": self.count, "us": self.us, "kind": self.kind}


@dataclass(frozen=True)
class KernelProfile:
    """Result of :func:`profile_kernels`.

    Attributes:
        kernels: per-call entries sorted by µs, largest first.
        kernel_us: Stats over calls of the summed GPU work item durations of one call
            (kernels + memcpy + memset; launch gaps excluded), µs.
        host_sync: a DtoH copy or a host-blocking call happened inside fn.
        host_sync_evidence: the event names that made host_sync true (deduplicated).
        calls: calls profiled.
    """

    kernels: tuple[KernelEntry, ...]
    kernel_us: Stats
    host_sync: bool
    host_sync_evidence: tuple[str, ...]
    calls: int

    def to_dict(self) -> dict:
        return {
            "kernels": [k.to_dict() for k in self.kernels],
            "kernel_us": self.kernel_us.to_dict(),
            "host_sync": self.host_sync,
            "host_sync_evidence": list(self.host_sync_evidence),
            "calls": self.calls,
        }

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.kernels]


def work_kind(name: str) -> str:
    """'memcpy', 'memset' or 'kernel' from a GPU event name (kineto: 'Memcpy DtoH (...)',
    'Memset (Device)')."""
    low = name.lower()
    if low.startswith("memcpy"):
        return "memcpy"
    if low.startswith("memset"):
        return "memset"
    return "kernel"


def split_by_call(
    call_ranges: Sequence[tuple[float, float]], gpu_events: Sequence[TraceEvent],
    skip_ranges: Sequence[tuple[float, float]] = (),
) -> list[list[TraceEvent]]:
    """Assign each GPU event to the last call whose host range started before it.

    Valid because the profiled loop synchronizes after every call (and after every flush):
    call i's GPU work starts after call i's host range starts and ends before the next range
    starts. An event whose last preceding range is one of ``skip_ranges`` (the L2 flush
    before a call) is dropped, as are events before the first range. `call_ranges` must be in
    call order.
    """
    marks = sorted([(s, i) for i, (s, _) in enumerate(call_ranges)] + [(s, None) for s, _ in skip_ranges],
                   key=lambda t: t[0])
    per_call: list[list[TraceEvent]] = [[] for _ in call_ranges]
    for ev in sorted(gpu_events, key=lambda e: e.start_us):
        owner, seen = None, False
        for s, idx in marks:
            if s <= ev.start_us:
                owner, seen = idx, True
        if seen and owner is not None:
            per_call[owner].append(ev)
    return per_call


def host_sync_evidence(
    call_ranges: Sequence[tuple[float, float]],
    cpu_events: Sequence[TraceEvent],
    per_call_gpu: Sequence[Sequence[TraceEvent]],
) -> list[str]:
    """Names showing a host sync inside fn: a HOST_SYNC_NAMES event within a call's host
    range, or a DtoH memcpy among a call's GPU events. Sorted, deduplicated."""
    found = set()
    for ev in cpu_events:
        if ev.name in HOST_SYNC_NAMES and any(s <= ev.start_us <= e for s, e in call_ranges):
            found.add(ev.name)
    for events in per_call_gpu:
        for ev in events:
            if _DTOH.search(ev.name):
                found.add(ev.name)
    return sorted(found)


def aggregate(per_call_gpu: Sequence[Sequence[TraceEvent]]) -> tuple[list[KernelEntry], list[float]]:
    """Per-name entries of one call (count and µs averaged over calls, sorted by µs,
    largest first) and the per-call sums of GPU work durations (µs)."""
    calls = len(per_call_gpu)
    if calls == 0:
        raise ValueError("aggregate: no calls")
    totals: dict[str, list[float]] = {}
    sums = []
    for events in per_call_gpu:
        sums.append(sum(ev.dur_us for ev in events))
        for ev in events:
            t = totals.setdefault(ev.name, [0.0, 0.0])
            t[0] += 1
            t[1] += ev.dur_us
    entries = [
        KernelEntry(name=name, count=c / calls, us=us / calls, kind=work_kind(name))
        for name, (c, us) in totals.items()
    ]
    entries.sort(key=lambda k: (-k.us, k.name))
    return entries, sums


def _events(prof) -> tuple[list[tuple[float, float]], list[tuple[float, float]],
                                                   list[TraceEvent], list[TraceEvent]]:
    """(call ranges in call order, flush ranges, CPU events, GPU events) from a finished profile."""
    from torch.autograd import DeviceType

    ranges: dict[int, tuple[float, float]] = {}
    flushes: list[tuple[float, float]] = []
    cpu: list[TraceEvent] = []
    gpu: list[TraceEvent] = []
    for evt in prof.events():
        name = evt.name
        start, end = float(evt.time_range.start), float(evt.time_range.end)
        is_gpu = evt.device_type == DeviceType.CUDA
        if name.startswith(CALL_PREFIX):
            if not is_gpu:  # the GPU-side user annotation of the range is skipped
                ranges[int(name[len(CALL_PREFIX):])] = (start, end)
            continue
        if name.startswith(FLUSH_PREFIX):
            if not is_gpu:
                flushes.append((start, end))
            continue
        if is_gpu:
            if getattr(evt, "is_user_annotation", False):
                continue
            gpu.append(TraceEvent(name, start, end, True))
        else:
            cpu.append(TraceEvent(name, start, end, False))
    return [ranges[i] for i in sorted(ranges)], flushes, cpu, gpu


def profile_kernels(fn: Callable[[], object], settings: TimingSettings, calls: Optional[int] = None,
                    flusher: Optional[object] = None) -> KernelProfile:
    """Profile ``calls`` calls of fn with torch.profiler (CPU + CUDA activities), L2 flushed.

    After ``settings.warmup`` calls and a synchronize, each call is preceded by
    ``flusher.flush()`` and a synchronize inside a ``record_function("qbench_flush_{i}")``
    range (its GPU work is dropped), then runs inside a ``record_function(f"qbench_call_{i}")``
    range followed (outside the range, inside the profile) by ``torch.cuda.synchronize()``.
    GPU events (kernels, memcpy, memset) are grouped per call by time (:func:`split_by_call`).
    So ``kernel_us`` is the sum of one call's kernel durations with the weight read from HBM
    (the kernels themselves, no launch gaps, no host), comparable with ``cold``; without a
    flusher the L2 is whatever the previous call left (hot for a weight smaller than L2).

    Args:
        fn: zero-argument callable enqueuing work on CUDA.
        settings: warmup is used; ``min_reps`` is the default number of calls.
        calls: calls profiled, >= 1 (default ``settings.min_reps``).
        flusher: an :class:`~qbench.timing.flush.L2Flusher`, or None for no flush.

    Returns:
        KernelProfile: kernels of one call (count, µs per call, kind), kernel_us Stats
        over calls (n = calls, converged None), host_sync and its evidence.

    Raises:
        ValueError: calls < 1.
        RuntimeError: no CUDA device, or the profiler recorded no call ranges or no GPU
            work at all (CUPTI unavailable, or fn does no GPU work).
    """
    require_cuda("profile_kernels")
    calls = settings.min_reps if calls is None else calls
    if calls < 1:
        raise ValueError(f"profile_kernels: calls must be >= 1, got {calls}")
    for _ in range(settings.warmup):
        fn()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(calls):
            if flusher is not None:
                with torch.profiler.record_function(f"{FLUSH_PREFIX}{i}"):
                    flusher.flush()
                    torch.cuda.synchronize()
            with torch.profiler.record_function(f"{CALL_PREFIX}{i}"):
                fn()
            torch.cuda.synchronize()
    ranges, flushes, cpu, gpu = _events(prof)
    if len(ranges) != calls:
        raise RuntimeError(f"profile_kernels: found {len(ranges)} call ranges, expected {calls}")
    per_call = split_by_call(ranges, gpu, flushes)
    if not any(per_call):
        raise RuntimeError(
            f"profile_kernels: torch.profiler recorded no GPU work in {calls} calls "
            "(CUPTI unavailable, or fn runs nothing on the GPU)"
        )
    entries, sums = aggregate(per_call)
    evidence = host_sync_evidence(ranges, cpu, per_call)
    return KernelProfile(
        kernels=tuple(entries),
        kernel_us=summarize(sums),
        host_sync=bool(evidence),
        host_sync_evidence=tuple(evidence),
        calls=calls,
    )


class Kernel(TimingMethod):
    """``kernel``: :func:`profile_kernels` of the call with the caller's flusher; the record is
    ``kernel_us`` and the reading carries the dispatch record (kernels, host_sync)."""

    def run(self, call: Call, settings: TimingSettings) -> Reading:
        prof = profile_kernels(call.fn, settings, flusher=call.flusher).to_dict()
        return Reading(prof["kernel_us"], dispatch={"kernels": prof["kernels"], "host_sync": prof["host_sync"],
                                                    "graph_capturable": None})


METHOD = Kernel("kernel", "sum of one call's GPU kernel durations (torch.profiler), L2 flushed before each "
                "profiled call, launch gaps excluded", "flushed", cuda=True, cpu=False, needs_capture=False,
                order=3, needs=Needs(flusher=True), shown_by_default=False, error_prefix="profiler: ")
