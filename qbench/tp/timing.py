"""Timing across ranks: every rank takes the same samples, and a sample is the slowest rank's.

A tensor-parallel layer is as fast as its slowest rank: the collective waits for it. So each
sample is taken on every rank at once (a barrier first) and the sample kept is the maximum over
ranks; the per-rank medians are kept too. The adaptive loop (:func:`qbench.timing.collect`) runs
on every rank with the same, maximum-over-ranks samples and a clock that is the maximum over
ranks, so every rank makes the same stop decision and calls the collectives the same number of
times (a rank that stopped early would hang the others).

* CPU (gloo): host time of one call, ``time.perf_counter`` around it, barrier before each sample
  (the ``time_cpu`` idea without blocks: a call of a 4096-wide layer is far above the clock's
  resolution).
* CUDA (NCCL): ``cold`` as in :func:`qbench.timing.time_cold`: ``torch.cuda._sleep`` keeps the GPU
  busy while the host enqueues (the same number of cycles on every rank: the maximum of each
  rank's calibration), the L2 is flushed when asked, and CUDA events bracket the call; one
  sample at a time, synchronized, with a barrier before each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from qbench.timing.adaptive import STOP_REASONS, collect
from qbench.timing.settings import TimingSettings
from qbench.timing.stats import Stats, summarize


@dataclass
class RankGroup:
    """This process's place in the tensor-parallel group (``size`` 1: no torch.distributed)."""

    rank: int
    size: int
    device: torch.device
    group: object = None
    _flusher: Optional[object] = field(default=None, repr=False)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier(group=self.group)

    def gather_floats(self, values: list[float]) -> torch.Tensor:
        """``[size, len(values)]`` float64 on the CPU: every rank's ``values`` (same length on every rank)."""
        local = torch.tensor(values, dtype=torch.float64, device=self.device)
        if not self.distributed:
            return local.view(1, -1).cpu()
        import torch.distributed as dist

        out = torch.empty(self.size * local.numel(), dtype=torch.float64, device=self.device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out, local, group=self.group)
        return out.view(self.size, -1).cpu()

    def max_float(self, value: float) -> float:
        return float(self.gather_floats([value]).max())

    def sum_int(self, value: int) -> int:
        return int(self.gather_floats([float(value)]).sum())

    def flusher(self, multiple: int):
        if self._flusher is None:
            from qbench.timing.flush import L2Flusher

            self._flusher = L2Flusher(self.device, multiple)
        return self._flusher


@dataclass
class RankStats:
    """Stats of the maximum-over-ranks samples (schema STATS via ``stats.to_dict()``) and each
    rank's median (µs)."""

    stats: object
    per_rank_median: list[float]


def synced_time(fn: Callable[[], object], settings: TimingSettings, ranks: RankGroup, *,
                flush: bool = False) -> RankStats:
    """Time ``fn`` on every rank at once, µs per call, as described in the module docstring.

    Args:
        fn: zero-argument callable; may call collectives (every rank calls it equally often).
        settings: warmup, min_reps, max_reps, target_rel_ci, budget_s (flush_multiple on CUDA).
        ranks: the group.
        flush: CUDA only: flush the L2 before each sample (``cold``).

    Raises:
        whatever fn raises (on one rank; the others then fail in their next collective).
    """
    cuda = ranks.device.type == "cuda"
    sample = _cuda_sampler(fn, settings, ranks, flush) if cuda else _cpu_sampler(fn, ranks)
    for _ in range(settings.warmup):
        sample()
    per_rank: list[torch.Tensor] = []

    def sample_batch(n: int) -> list[float]:
        local = [sample() for _ in range(n)]
        table = ranks.gather_floats(local)
        per_rank.append(table)
        return table.max(dim=0).values.tolist()

    def clock() -> float:
        return ranks.max_float(time.perf_counter())

    samples, converged, stop = collect(sample_batch, settings, clock=clock)
    table = torch.cat(per_rank, dim=1)
    return RankStats(summarize(samples, converged, stop), table.median(dim=1).values.tolist())


def _cpu_sampler(fn: Callable[[], object], ranks: RankGroup) -> Callable[[], float]:
    def sample() -> float:
        ranks.barrier()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6

    return sample


def _cuda_sampler(fn: Callable[[], object], settings: TimingSettings, ranks: RankGroup, flush: bool):
    """One sample of ``fn`` (µs): cold's event sampling (:func:`qbench.timing._cuda.event_samples`)
    with a barrier hook before each sample: synchronize, barrier, busy-wait, flush."""
    from qbench.timing._cuda import event_samples
    from qbench.timing.cold import busy_cycles, sleep_us_per_cycle

    flusher = ranks.flusher(settings.flush_multiple) if flush else None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if flusher is not None:
        flusher.flush()
    fn()
    torch.cuda.synchronize()
    enqueue = (time.perf_counter() - t0) * 1e6  # an upper bound: it includes the GPU time
    cycles = int(ranks.max_float(busy_cycles(enqueue, sleep_us_per_cycle())))

    def together() -> None:
        torch.cuda.synchronize()
        ranks.barrier()
        torch.cuda._sleep(cycles)
        if flusher is not None:
            flusher.flush()

    one = event_samples(fn, 1, before=together)
    return lambda: one(1)[0]


def per_rank_cold(fn: Callable[[], object], settings: TimingSettings, ranks: RankGroup) -> RankStats:
    """CUDA: :func:`qbench.timing.time_cold` of a collective-free ``fn`` on each rank on its own
    (ranks run at once; nothing is shared), then the slowest rank's stats and every rank's median."""
    from qbench.timing.cold import time_cold

    stats = time_cold(fn, settings, ranks.flusher(settings.flush_multiple))
    return RankStats(*_slowest_rank(stats, ranks))


def _slowest_rank(stats, ranks: RankGroup) -> tuple:
    """(the slowest rank's Stats, every rank's median): each rank's STATS gathered as floats, its
    ``converged`` as 0/1 and its ``stop`` as an index into :data:`qbench.timing.adaptive.STOP_REASONS`
    (-1: none), so the row says why the slowest rank's loop stopped, as every other reading does."""
    reasons = list(STOP_REASONS)
    stop = float(reasons.index(stats.stop)) if stats.stop in reasons else -1.0
    converged = -1.0 if stats.converged is None else float(bool(stats.converged))
    table = ranks.gather_floats([stats.median, stats.p10, stats.p90, stats.mean, stats.cv, float(stats.n),
                                 converged, stop])
    medians = table[:, 0].tolist()
    slowest = max(range(len(medians)), key=medians.__getitem__)
    median, p10, p90, mean, cv, n, conv, why = table[slowest].tolist()
    return (Stats(median, p10, p90, mean, cv, int(n), None if conv < 0 else bool(conv),
                  reasons[int(why)] if why >= 0 else None), medians)


def _per_call(stats: RankStats, calls: int) -> RankStats:
    """``stats`` of samples that each covered ``calls`` calls, as µs per call (cv unchanged)."""
    s = stats.stats
    return RankStats(Stats(s.median / calls, s.p10 / calls, s.p90 / calls, s.mean / calls, s.cv, s.n,
                           s.converged, s.stop), [m / calls for m in stats.per_rank_median])


def synced_stream(calls: list, settings: TimingSettings, ranks: RankGroup) -> RankStats:
    """``stream`` across ranks: each of ``calls`` calls copy i of the rank's shard and then the
    collective, on one input; µs per call (call + collective), the slowest rank's samples.

    * CUDA (NCCL): after a warm-up, every rank captures one CUDA graph of calls[0..L-1]: L sharded
      calls and L NCCL collectives (NCCL >= 2.9.6 collectives can be captured, every rank capturing
      the same sequence); a sample is one replay on every rank at once (barrier, busy-wait, CUDA
      events, as :func:`synced_time`) divided by L. With L shard copies that exceed L2 four times,
      each call reads its weight shard from HBM, and neither launches nor host gaps are timed: the
      decode engine's graph-captured step, per rank.
    * CPU (gloo): one pass over the copies in order, then :func:`synced_time` of a callable that
      calls the next copy each time (the CPU ``stream``: each copy's shard comes from DRAM).

    Raises:
        ValueError: no calls. GraphCaptureError: a call or collective cannot be captured (the row
        records it; on one rank the others then fail in their next collective alike).
    """
    from qbench.timing.stream import in_order, rotate

    if not calls:
        raise ValueError("synced_stream: needs at least one call")
    if ranks.device.type != "cuda":
        in_order(calls)()
        return synced_time(rotate(calls), settings, ranks)
    from qbench.timing._cuda import GraphCaptureError
    from qbench.timing.warm import capture_graph

    ranks.barrier()
    graph, problem = None, None
    try:
        graph = capture_graph(in_order(calls), 1, settings.warmup)
    except Exception as exc:  # agreed on below, so no rank waits in a replay's collective for this one
        problem = exc
    if ranks.max_float(1.0 if problem is not None else 0.0) > 0:
        if graph is not None:
            graph.reset()
        if isinstance(problem, GraphCaptureError):
            raise problem
        raise GraphCaptureError(f"{type(problem).__name__}: {problem}" if problem is not None
                                else "the capture failed on another rank")
    try:
        graph.replay()  # uploads the graph
        torch.cuda.synchronize()
        once = settings.model_copy(update={"warmup": 1})  # the calls were warmed up before the capture
        return _per_call(synced_time(graph.replay, once, ranks), len(calls))
    finally:
        graph.reset()
