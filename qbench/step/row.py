"""The typed row of a model-step result: one per (scheme, M, context). Torch-free.

The producer (:mod:`qbench.step.measure`) fills a :class:`StepRow` and the readers use the same
type (:func:`check_rows`, the step record's row check). Units: µs for times, bytes, tokens/s;
``latency_us`` holds one STATS object per step method (``median``, ``p10``, ``p90``, ``mean``,
``cv``, ``n``, ``stop``, plus the method's extras), ``None`` with a reason in ``latency_reasons``
when the method did not run.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from qbench.results import check_job_rows
from qbench.row import Flag, GpuState, Reason, Repeats, Stats, check_extras, known_methods
from qbench.timing import registry

#: What ``weight_source`` says for generated weights (the layer job's N(0, 1/K)).
SEEDED = "seeded Gaussian: linear weights N(0, 1/K), embedding N(0, 1), norms 1 (synthetic: errors are not a trained model's)"


class StepRow(BaseModel):
    """One measured decode step.

    Attributes (beyond the identity: ``scheme``, ``m``, ``context``, ``model``, ``device``):
        blocks: the model's block count; ``blocks_built``: how many were built (fewer: the step is
            extrapolated, see ``extrapolated``).
        latency_us: step µs per method (:class:`qbench.row.Stats`: STATS + the method's extras);
            ``latency_reasons``: why a method has none (:class:`qbench.row.Reason`).
        tokens_per_s: M / step per method.
        bytes: one step's bytes by part (:func:`qbench.step.floor.step_bytes`).
        hbm_floor_us: ``bytes.total`` / the measured bandwidth; ``floor_fraction``: floor / step per
            method (1.0 = at the floor).
        linear: the per-layer ``stream`` times of the model's own linear layers (``by_role``: K, N,
            count per step, STATS) and their sum over one step (``sum_us``, every block and the LM
            head), measured in the same worker.
        remainder_us / remainder_share: step - Σ linear, and its share of the step, per method.
        attention: the decode attention that ran: ``kernel`` (``split-kv`` or ``sdpa``), ``chosen``
            (``scenario``, or ``auto: ...`` with why), ``splits`` (split-KV's slices per sequence and
            KV head), ``kv_read`` (``in kernel``: an fp8 cache dequantized inside the attention
            kernel; ``before``: converted to the activation dtype before SDPA; ``as stored``: a float
            cache); and, timed on its own at the row's shapes (``method``: ``stream``, one graph
            over every built block's cache), ``per_layer`` (STATS, µs), ``us`` (per layer × blocks,
            one step's), ``bytes`` (one step's: K, V, scales, query and output), ``floor_us`` and
            ``floor_fraction``. None in files before the attention choice.
        kv_cache: the KV cache's dtype and ledger: ``dtype``, ``itemsize``, ``scale`` (the fp8 scale
            rule, None for a float cache), ``per_token`` (bytes of one position of one sequence, every
            block), ``per_context`` (one sequence's ``context + 1`` positions), ``scales``, ``total``
            (M sequences). None in older files.
        other_us / other_share: step - Σ linear - attention, and its share of the step, per method
            (the step split three ways: linear, attention, the rest).
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
            absent in older files); ``graphs_compiled``, ``graph_breaks``, ``cudagraph_skips`` and
            Inductor's cache counters summed over those calls; ``inductor``: its tuning settings
            (:func:`qbench.compile_info.inductor_settings`; absent in older files).
        gpu_state: NVML readings right after each method (:class:`qbench.row.GpuState`, CUDA only).
        flags: what a reader must see (:class:`qbench.row.Flag`; :data:`qbench.row.FLAG_MEANINGS`).
        repeats: ``qbench run --repeat`` (:class:`qbench.row.Repeats`).
        recipe: a mixed recipe's scheme per role and kept blocks, and the linears each scheme built
            (:meth:`qbench.model.recipe.Plan.record`); None for one scheme everywhere.
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
    checkpoint_id: Optional[str] = Field(None, description="sha256 of the checkpoint's config, tensor headers and tensor bytes (qbench.model.checkpoint.identity); None for seeded weights or older files")
    recipe: Optional[dict[str, Any]] = None
    status: Literal["ok", "skipped", "failed"] = "ok"
    reason: Optional[str] = None
    blocks: int = Field(gt=0)
    blocks_built: Optional[int] = None
    latency_us: dict[str, Optional[Stats]] = Field(default_factory=dict)
    latency_reasons: dict[str, Reason] = Field(default_factory=dict)
    tokens_per_s: dict[str, float] = Field(default_factory=dict)
    bytes: Optional[dict[str, int]] = None
    hbm_floor_us: Optional[float] = None
    floor_fraction: dict[str, float] = Field(default_factory=dict)
    linear: Optional[dict[str, Any]] = None
    remainder_us: dict[str, float] = Field(default_factory=dict)
    remainder_share: dict[str, float] = Field(default_factory=dict)
    attention: Optional[dict[str, Any]] = None
    kv_cache: Optional[dict[str, Any]] = None
    other_us: dict[str, float] = Field(default_factory=dict)
    other_share: dict[str, float] = Field(default_factory=dict)
    peak_memory_bytes: Optional[int] = None
    error: Optional[dict[str, Any]] = None
    extrapolated: Optional[dict[str, Any]] = None
    compile: Optional[dict[str, Any]] = None
    gpu_state: Optional[GpuState] = None
    flags: list[Flag] = Field(default_factory=list)
    worker_phases_s: dict[str, Any] = Field(default_factory=dict)
    worker_wall_s: Optional[float] = None
    repeats: Optional[Repeats] = None

    @field_validator("latency_us", "latency_reasons")
    @classmethod
    def _step_methods(cls, v: dict) -> dict:
        return known_methods(v, registry.STEP_METHODS)

    @model_validator(mode="after")
    def _method_extras(self) -> "StepRow":
        check_extras(self.latency_us)
        return self

    @property
    def key(self) -> tuple:
        """The row's identity: (scheme, M, context, model, device)."""
        return (self.scheme, self.m, self.context, self.model, self.device)

    def stats(self, method: str) -> Optional[Stats]:
        """The STATS (µs) of ``method`` when the row is ``ok`` and has a median there, else None (as
        :meth:`qbench.row.Row.stats`)."""
        got = self.latency_us.get(method) if self.status == "ok" else None
        return got if got is not None and got.median is not None else None

    def step_us(self, method: str) -> Optional[float]:
        """The median step (µs) by ``method``, or None."""
        stats = self.latency_us.get(method)
        return None if stats is None else stats.median

    def reason_for(self, method: str) -> Optional[Reason]:
        """Why ``method`` has no STATS on this row, or None (as :meth:`qbench.row.Row.reason_for`)."""
        return self.latency_reasons.get(method)

    @property
    def flag_names(self) -> list[str]:
        """The names of the row's flags, each once, in the order the row lists them (as
        :attr:`qbench.row.Row.flag_names`)."""
        return list(dict.fromkeys(f.name for f in self.flags))

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

