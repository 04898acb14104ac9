"""The quality job's row: one scheme on one checkpoint over one text (torch-free).

Shares the row core's parts (:class:`qbench.row.Flag`, one flag vocabulary) and names what a reader
must know to trust it: where the weights come from, the reference it is compared with, the text and
its chunking, whether the scheme's own kernel ran (``emulated`` when not), and llama.cpp's
statistics with their uncertainties (:mod:`qbench.quality.stats`).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from qbench.row import Flag

Status = Literal["ok", "skipped", "failed"]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Kld(_Part):
    """KL divergence D(ref ‖ scheme) per scored token, nats: mean ± uncertainty and percentiles."""

    mean: float
    unc: float
    p50: float
    p90: float
    p95: float
    p99: float
    p99_9: float
    max: float


class Dp(_Part):
    """Δp = p_scheme(token) - p_ref(token) of the token that follows (probability, -1..1)."""

    mean: float
    unc: float
    rms: float
    rms_unc: float
    p1: float
    p5: float
    p10: float
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float


class QualityStats(_Part):
    """llama.cpp's statistics over ``tokens`` scored tokens (:func:`qbench.quality.stats.summarize`)."""

    tokens: int = Field(gt=0)
    ppl: float = Field(gt=0)
    ppl_unc: float = Field(ge=0)
    ref_ppl: float = Field(gt=0)
    ref_ppl_unc: float = Field(ge=0)
    ln_ppl_ratio: float
    ln_ppl_ratio_unc: float = Field(ge=0)
    ppl_ratio: float = Field(gt=0)
    ppl_ratio_unc: float = Field(ge=0)
    nll_correlation: Optional[float] = None
    kld: Kld
    same_top: float = Field(ge=0, le=1)
    same_top_unc: float = Field(ge=0)
    dp: Dp


class Reference(_Part):
    """What the scheme is compared with: the model in ``dtype`` (its linears in float), its
    log-probabilities shared by every worker of the run at ``logprobs`` precision."""

    dtype: str
    logprobs: str
    computed_s: Optional[float] = Field(None, description="seconds this worker spent computing it (None: read from "
                                                          "the run's shared file)")


class Sensitivity(_Part):
    """One part (a role of every block, or one block) quantized alone, the rest of the model the reference."""

    part: str
    kld: float
    kld_unc: float
    same_top: float
    ppl_ratio: float


class QualityRow(_Part):
    """One scheme on one checkpoint over one text."""

    job: Literal["quality"] = "quality"
    scheme: str
    base_scheme: str
    library: str
    mode: str = "eager"
    options: dict = Field(default_factory=dict)
    model: str = Field(description="the checkpoint folder, or the preset's name")
    title: str
    weights: str = Field(description="where the weights come from: the checkpoint and its dtype, or seeded")
    checkpoint_id: Optional[str] = Field(None, description="sha256 of the checkpoint's config, tensor headers and tensor bytes (qbench.model.checkpoint.identity); None for seeded weights or older files")
    device: str
    weight_dtype: str
    activation_dtype: str
    status: Status = "ok"
    reason: Optional[str] = None
    emulated: bool = False
    text: str = Field(description="the text file")
    text_sha256: str
    chunk: int = Field(gt=0)
    chunks: int = Field(gt=0)
    scored_per_chunk: int = Field(gt=0)
    reference: Optional[Reference] = None
    stats: Optional[QualityStats] = None
    sensitivity: Optional[list[Sensitivity]] = None
    sensitivity_by: Optional[str] = None
    lm_head: Literal["float", "scheme"] = "float"
    recipe: Optional[dict] = Field(None, description="a mixed recipe's scheme per role and kept blocks, and the "
                                                     "linears each scheme built (qbench.step.recipe.Plan.record)")
    linear_params: int = Field(ge=0, description="weights of the linears the scheme built")
    linear_stored_bytes: Optional[int] = Field(None, description="their bytes as the scheme stores them (the "
                                                                 "ledger); None when emulated")
    model_stored_bytes: Optional[int] = Field(None, description="the whole model's bytes as run (linears, "
                                                                "embedding, norms, LM head); None when emulated")
    peak_memory_bytes: Optional[int] = None
    peak_memory_source: Optional[str] = None
    flags: list[Flag] = Field(default_factory=list)
    wall_s: dict[str, float] = Field(default_factory=dict)
    worker_phases_s: dict[str, float] = Field(default_factory=dict)
    worker_wall_s: Optional[float] = None
    repeats: Optional[dict] = None

    @property
    def key(self) -> tuple:
        return (self.scheme, self.model, self.device, self.text_sha256, self.chunk)


def check_rows(rows: list, source: str) -> list[QualityRow]:
    """The rows of a quality result as :class:`QualityRow`, in order: unknown keys refused, every
    value of its type, one row per (scheme, model, device, text, chunk).

    Raises:
        qbench.results.ResultsError: one line naming ``source``, the row index, the key and the value.
    """
    from qbench.results import check_job_rows  # results reads rows through the job registry: imported on use

    return check_job_rows(rows, source, QualityRow, "quality", "a quality result holds only quality rows (job = 'quality')",
                          lambda r: f"(scheme {r.scheme!r}): one row per scheme, model, device and text")
