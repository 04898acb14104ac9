"""Knobs shared by every timing method (:mod:`qbench.timing`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingSettings:
    """How long and how often to time one (scheme, M) row with one method.

    Attributes:
        warmup: untimed calls before timing (module load, autotuning, handle creation).
        min_reps: fewest samples kept, whatever the CI says.
        max_reps: most samples kept.
        target_rel_ci: stop once the median's ~95 % CI half-width / median is below this
            (:func:`qbench.timing.stats.median_ci_rel`).
        budget_s: host wall-clock seconds per method per row after warm-up; the loop stops
            when spent (but never before min_reps).
        graph_calls: calls of fn captured in one CUDA graph by ``time_warm``.
        flush_multiple: the L2 flush buffer is this many times the L2 size.

    Defaults are this project's choice (not from a library): 1 % CI and 2 s are enough to
    separate schemes whose medians differ by a few percent on an idle GPU.

    Raises:
        ValueError: on construction, for a value out of range (named in the message).
    """

    warmup: int = 10
    min_reps: int = 20
    max_reps: int = 2000
    target_rel_ci: float = 0.01
    budget_s: float = 2.0
    graph_calls: int = 20
    flush_multiple: int = 4

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"TimingSettings.warmup: must be >= 0, got {self.warmup}")
        if self.min_reps < 1:
            raise ValueError(f"TimingSettings.min_reps: must be >= 1, got {self.min_reps}")
        if self.max_reps < self.min_reps:
            raise ValueError(
                f"TimingSettings.max_reps: must be >= min_reps={self.min_reps}, got {self.max_reps}"
            )
        if not self.target_rel_ci > 0:
            raise ValueError(
                f"TimingSettings.target_rel_ci: must be > 0, got {self.target_rel_ci}"
            )
        if not self.budget_s > 0:
            raise ValueError(f"TimingSettings.budget_s: must be > 0, got {self.budget_s}")
        if self.graph_calls < 1:
            raise ValueError(
                f"TimingSettings.graph_calls: must be >= 1, got {self.graph_calls}"
            )
        if self.flush_multiple < 1:
            raise ValueError(
                f"TimingSettings.flush_multiple: must be >= 1, got {self.flush_multiple}"
            )
