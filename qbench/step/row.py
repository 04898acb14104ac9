"""The typed row of a model-step result: one per (scheme, M, context). Torch-free.

The producer (:mod:`qbench.step.measure`) fills a :class:`StepRow` and the readers use the same
type (:func:`check_rows`, the step record's row check). Units: µs for times, bytes, tokens/s;
``latency_us`` holds one STATS object per step method (``median``, ``p10``, ``p90``, ``mean``,
``cv``, ``n``, ``stop``, plus the method's extras), ``None`` with a reason in ``latency_reasons``
when the method did not run.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from qbench.results import check_job_rows
from qbench.row import Stats

#: What ``weight_source`` says for generated weights (the layer job's N(0, 1/K)).
SEEDED = "seeded Gaussian: linear weights N(0, 1/K), embedding N(0, 1), norms 1 (synthetic: errors are not a trained model's)"


#: A step method's p90 / p10 above which the worker flags its reading ``noisy`` (project choice).
SCATTER = 1.25


class StepRow(BaseModel):
    """One measured decode step.

    Attributes (beyond the identity: ``scheme``, ``m``, ``context``, ``model``, ``device``):
        blocks: the model's block count; ``blocks_built``: how many were built (fewer: the step is
            extrapolated, see ``extrapolated``).
        latency_us: step µs per method (STATS + extras); ``latency_reasons``: why a method has none.
        tokens_per_s: M / step per method.
        bytes: one step's bytes by part (:func:`qbench.step.floor.step_bytes`).
        hbm_floor_us: ``bytes.total`` / the measured bandwidth; ``floor_fraction``: floor / step per
            method (1.0 = at the floor).
        linear: the per-layer ``stream`` times of the model's own linear layers (``by_role``: K, N,
            count per step, STATS) and their sum over one step (``sum_us``, every block and the LM
            head), measured in the same worker.
        remainder_us / remainder_share: step - Σ linear, and its share of the step, per method.
        peak_memory_bytes: the worker's peak device memory while measuring this row.
        error: the step's logits against the FP32 step on the same tokens and cache: ``rel_fro``
            (relative Frobenius error of the logits), ``kl_div`` (mean over the batch of
            KL(p_fp32 || p_scheme), nats), ``top1_agree`` (share of the M sequences whose argmax
            matches), ``compared`` (``logits``, or ``hidden`` without an LM head).
        extrapolated: when fewer blocks were built: ``{"blocks": [n_small, n_large], "readings":
            {method: [median_small, median_large]}}``.
        compile: a compiled scheme's torch.compile record (None for eager): ``first_call_s``, a list
            of seconds, one per compiled step method in the order timed (``step_compiled``, then
            ``step_reduce_overhead``), compilation included; ``compile_threads`` (Inductor's, in the
            measuring worker: on CUDA the CPUs it may use, :func:`qbench.compile_info.compile_in_parallel`;
            absent in files before 2026-12-02's fourth session); ``graphs_compiled``, ``graph_breaks``,
            ``cudagraph_skips`` and Inductor's cache counters summed over those calls.
        flags: ``name: text`` lines a reader must see (:data:`qbench.step.view.FLAG_MEANINGS`).
        recipe: a mixed recipe's scheme per role and kept blocks, and the linears each scheme built
            (:meth:`qbench.step.recipe.Plan.record`); None for one scheme everywhere.
    """

    model_config = ConfigDict(extra="forbid")
    job: Literal["step"] = "step"
    scheme: str
    base_scheme: str
    library: str
    mode: str
    options: dict[str, Any] = Field(default_factory=dict)
    model: str
    title: str
    m: int = Field(gt=0)
    context: int = Field(gt=0)
    device: str
    weight_dtype: str
    activation_dtype: str
    lm_head: Literal["scheme", "float", "none"]
    weight_source: str = SEEDED
    recipe: Optional[dict[str, Any]] = None
    status: Literal["ok", "skipped", "failed"] = "ok"
    reason: Optional[str] = None
    blocks: int = Field(gt=0)
    blocks_built: Optional[int] = None
    latency_us: dict[str, Optional[dict[str, Any]]] = Field(default_factory=dict)
    latency_reasons: dict[str, str] = Field(default_factory=dict)
    tokens_per_s: dict[str, float] = Field(default_factory=dict)
    bytes: Optional[dict[str, int]] = None
    hbm_floor_us: Optional[float] = None
    floor_fraction: dict[str, float] = Field(default_factory=dict)
    linear: Optional[dict[str, Any]] = None
    remainder_us: dict[str, float] = Field(default_factory=dict)
    remainder_share: dict[str, float] = Field(default_factory=dict)
    peak_memory_bytes: Optional[int] = None
    error: Optional[dict[str, Any]] = None
    extrapolated: Optional[dict[str, Any]] = None
    compile: Optional[dict[str, Any]] = None
    gpu_state: Optional[dict[str, Any]] = None
    flags: list[str] = Field(default_factory=list)
    worker_phases_s: dict[str, Any] = Field(default_factory=dict)
    worker_wall_s: Optional[float] = None
    repeats: Optional[dict[str, Any]] = None

    @property
    def key(self) -> tuple:
        """The row's identity: (scheme, M, context, model, device)."""
        return (self.scheme, self.m, self.context, self.model, self.device)

    def stats(self, method: str) -> Optional[Stats]:
        """The ``method`` reading (median, p10, p90; µs) when the row is ``ok`` and has a median there,
        else None: :meth:`qbench.row.Row.stats` for a step row."""
        got = self.latency_us.get(method) if self.status == "ok" else None
        if not got or got.get("median") is None:
            return None
        return Stats(median=got["median"], p10=got.get("p10"), p90=got.get("p90"))

    def step_us(self, method: str) -> Optional[float]:
        """The median step (µs) by ``method``, or None."""
        stats = self.latency_us.get(method)
        return None if not stats else stats.get("median")

    @property
    def flag_names(self) -> list[str]:
        """The flags' names, in order (a step flag is one line, ``name: text``, as the producer
        writes it; the step file's flags stay text in every schema version)."""
        return [flag.split(":", 1)[0] for flag in self.flags]

    def best_method(self, order: tuple[str, ...]) -> Optional[str]:
        """The first method of ``order`` this row has a step time for."""
        return next((m for m in order if self.step_us(m) is not None), None)


def check_rows(rows: list, source: str) -> list[StepRow]:
    """Check the rows of a model-step result against :class:`StepRow` (unknown keys refused, every
    value of its field's type), one row per (scheme, M, context, model, device); return them as
    :class:`StepRow`, in order (the step record's ``check_rows``, :mod:`qbench.jobs`).

    Raises:
        qbench.results.ResultsError: one line naming ``source``, the row's index and key path, the bad
            value, or a row that is not a step row (a step result holds only step rows).
    """
    return check_job_rows(rows, source, StepRow, "step", "a model-step result holds only step rows (job = 'step')",
                          lambda r: f"(scheme {r.scheme!r}, M={r.m}, context={r.context}): one row per scheme, M and context")

