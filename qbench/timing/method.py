"""What every timing method is: :class:`TimingMethod` (metadata plus ``run``), the :class:`Call` it
times, what it :class:`Needs` from the caller, and the :class:`Reading` it returns.

A method is one module of this package defining one :class:`TimingMethod` subclass and one instance
of it (``METHOD``), listed by module name in :data:`qbench.timing.registry.MODULES`. The modules
import torch only when a method runs, so readers of results use the metadata without torch.

Life cycle (:mod:`qbench.measure` and :mod:`qbench.tp.measure` drive it, never naming a method):

1. :func:`qbench.timing.registry.plan` picks the methods of a job (``"layer"``) that run on the
   device, ordered by phase (``"plain"`` first, ``"graph"`` last) and ``order``;
2. the caller builds a :class:`Call` with what ``needs`` asks for (copies, an L2 flusher, the
   host-sync probe) and calls ``run(call, settings)``;
3. ``run`` returns a :class:`Reading` (the STATS dict with the method's ``extras`` keys, and for a
   profiler method the dispatch record) or raises; the caller writes the reading or the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Sequence

if TYPE_CHECKING:
    from qbench.timing.settings import TimingSettings

PHASES = ("plain", "graph")


@dataclass(frozen=True)
class Needs:
    """What a method needs from the caller besides the layer call.

    Attributes:
        copies: L distinct copies of the built layer (:attr:`Call.calls`, :attr:`Call.copies`); a
            row without them gets the copies' failure as this method's reason.
        flusher: an L2 flusher on the device (:attr:`Call.flusher`, :class:`qbench.timing.flush.L2Flusher`).
        host_sync: the host-sync probe's answer (:attr:`Call.host_sync`, :func:`qbench.timing._cuda.syncs_host`).
        cpu_load: the caller samples the CPU left for timing right after the method (the row's
            ``cpu_load`` and its ``cpu-busy`` flag, :func:`qbench.env.cpu_load`).
    """

    copies: bool = False
    flusher: bool = False
    host_sync: bool = False
    cpu_load: bool = False


@dataclass(frozen=True)
class Call:
    """One timed call and what the method's :class:`Needs` asked for, built by the caller per row.

    Attributes:
        fn: zero-argument callable: one call of the layer on this row's input.
        device: the ``torch.device`` the call runs on.
        calls: one zero-argument callable per copy, in order (``needs.copies``), else None.
        copies: the copies' record (``plan``: a :class:`~qbench.timing.stream.StreamPlan`, ``how``:
            ``"deepcopy"`` or ``"rebuilt"``), else None.
        stored_bytes: stored bytes of one copy as timed (after a repack on the first call), else None.
        flusher: an L2 flusher (``needs.flusher``), else None.
        host_sync: the call blocks the host on the GPU (``needs.host_sync``; False when not probed).
        graphs: Dynamo's count of compiled graphs (a zero-argument callable) for compiled schemes,
            else None.
    """

    fn: Callable[[], object]
    device: Any
    calls: Optional[Sequence[Callable[[], object]]] = None
    copies: Any = None
    stored_bytes: Optional[int] = None
    flusher: Any = None
    host_sync: bool = False
    graphs: Optional[Callable[[], int]] = None


@dataclass(frozen=True)
class Reading:
    """What one run of a method gives one row.

    Attributes:
        record: the STATS dict (``Stats.to_dict()``, µs per call) plus the method's ``extras`` keys;
            written to ``latency_us[name]``.
        dispatch: for a method that profiles the call: ``{"kernels": [...], "host_sync": bool,
            "graph_capturable": None}`` (the caller adds the dispatch ``label``), else None.
    """

    record: dict
    dispatch: Optional[dict] = None


@dataclass(frozen=True)
class TimingMethod:
    """One timing method: its metadata and its ``run``. Subclasses override :meth:`run`.

    Attributes:
        name: the JSON key under ``latency_us`` (``stream``, ``cold``, ...).
        includes: one line saying what the number contains (``report --help-columns``).
        cache: the L2 / CPU cache state the weight is read in.
        cuda: runs on CUDA rows.
        cpu: runs on CPU rows.
        needs_capture: the call must be capturable in a CUDA graph (a host sync makes it null).
        decision: decisions (recommend, crossover, --summary) read this method by default (one
            layer method has it).
        phase: ``"plain"`` or ``"graph"``: on CUDA, graph methods run after every plain method at
            every M, and the first failed capture ends capturing in the process (later graph
            methods say "not attempted"); on the CPU every method is plain.
        order: position within its phase (lower runs first).
        needs: what the caller provides (:class:`Needs`).
        extras: the keys this method adds to its STATS record (no other method's record has them).
        shown_by_default: default tables show its column (``--columns`` always can).
        fallback_rank: readers fall back to this method, lowest rank first, when a file lacks the
            decision method (None: never a fallback).
        always: runs on every row of a device it runs on, asked or not (not a scenario's choice).
        host_clock: the host-clock reading of one call (one layer method has it): what a decode
            loop that cannot be captured in a CUDA graph pays per call; ``recommend`` quotes it for a
            scheme it calls unusable in a graph-captured loop.
        job: ``"layer"`` (one linear layer, :mod:`qbench.measure`) or ``"step"`` (a model step);
            each job plans only its own methods.
        error_prefix: put before the exception in this method's reason (``"profiler: "``).
        compiled: step methods: the ``torch.compile`` mode of the step it times (``"default"``,
            ``"reduce-overhead"``), None for the eager step; a compiled method runs only for a
            compiled scheme, and its caller compiles the step before :meth:`run`.
        short: a short column title (tables of step rows); default the name.
        twin: the method the same step is timed by in another form, for comparisons: a compiled
            method's eager form (the baseline read when a file has no compiled baseline), the
            decode loop's hand-captured form (a loop slower than it beyond the noise is flagged).
    """

    name: str
    includes: str
    cache: str
    cuda: bool
    cpu: bool
    needs_capture: bool
    decision: bool = False
    host_clock: bool = False
    phase: Literal["plain", "graph"] = "plain"
    order: int = 0
    needs: Needs = field(default_factory=Needs)
    extras: tuple[str, ...] = ()
    shown_by_default: bool = True
    fallback_rank: Optional[int] = None
    always: bool = False
    job: str = "layer"
    error_prefix: str = ""
    compiled: Optional[Literal["default", "reduce-overhead"]] = None
    short: str = ""
    twin: Optional[str] = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"timing method {self.name!r}: phase must be one of {PHASES}, got {self.phase!r}")

    def runs_on(self, device_type: str) -> bool:
        """Whether this method runs on a ``device_type`` (``"cuda"``; anything else is a CPU) row."""
        return self.cuda if device_type == "cuda" else self.cpu

    def phase_on(self, device_type: str) -> str:
        """The phase on ``device_type``: ``"graph"`` only on CUDA (the CPU has no graphs)."""
        return self.phase if device_type == "cuda" else "plain"

    def unavailable(self, device_type: str) -> str:
        """The reason a row of ``device_type`` has no time of this method (it does not run there)."""
        return ("CUDA method; this row ran on the CPU" if device_type != "cuda"
                else "CPU method; this row ran on CUDA")

    def run(self, call: Call, settings: "TimingSettings") -> Reading:
        """Time ``call`` with ``settings``; µs per call in :attr:`Reading.record`.

        Raises:
            whatever the call or the timing raises (the caller writes it as the reason);
            :class:`qbench.timing._cuda.GraphCaptureError` for a graph method whose call cannot be
            captured.
        """
        raise NotImplementedError(f"timing method {self.name!r} has no run()")
