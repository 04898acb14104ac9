"""Knobs shared by every timing method (:mod:`qbench.timing`): the one model, with its bounds.

A scenario's ``[timing]`` table is this model plus the methods and the worker timeout
(:class:`qbench.scenario.TimingSpec` extends it), so a scenario's settings are what the methods
read; nothing is copied field by field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class TimingSettings(BaseModel):
    """How long and how often to time one (scheme, M) row with one method (frozen).

    Attributes:
        warmup: untimed calls before timing (module load, autotuning, handle creation), 0..10,000.
        min_reps: fewest samples kept, whatever the CI says, 3..100,000.
        max_reps: most samples kept, >= min_reps, at most 1,000,000.
        target_rel_ci: stop once the median's ~95 % CI half-width / median is below this
            (:func:`qbench.timing.stats.median_ci_rel`), in (0, 1).
        budget_s: host wall-clock seconds per method per row after warm-up; the loop stops
            when spent (but never before min_reps), in (0, 600].
        graph_calls: calls of fn captured in one CUDA graph by ``warm``, 1..10,000.
        flush_multiple: the L2 flush buffer is this many times the L2 size, 1..64.

    Defaults are this project's choice (not from a library): 1 % CI and 2 s are enough to
    separate schemes whose medians differ by a few percent on an idle GPU. Tests of the loop's
    edges (one sample, a CI target that is always met) build values outside the bounds with
    ``model_construct``.

    Raises:
        pydantic.ValidationError (a ValueError): on construction, for a value out of range or of the
            wrong type (the field and the value in the message); ``max_reps`` < ``min_reps``.
    """

    # allow_inf_nan=False: TOML has ``inf`` and ``nan`` floats; no knob may be either.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    warmup: int = Field(default=10, ge=0, le=10_000)
    min_reps: int = Field(default=20, ge=3, le=100_000)
    max_reps: int = Field(default=2000, ge=3, le=1_000_000)
    target_rel_ci: float = Field(default=0.01, gt=0, lt=1)
    budget_s: float = Field(default=2.0, gt=0, le=600)
    graph_calls: int = Field(default=20, ge=1, le=10_000)
    flush_multiple: int = Field(default=4, ge=1, le=64)

    @field_validator("max_reps")
    @classmethod
    def _max_reps(cls, value: int, info: ValidationInfo) -> int:
        least = info.data.get("min_reps")
        if least is not None and value < least:
            raise ValueError(f"must be >= min_reps={least}")
        return value
