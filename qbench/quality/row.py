"""The quality job's row: one scheme on one checkpoint over one text (torch-free).

Shares the row core's parts (:class:`qbench.row.Flag`, one flag vocabulary) and names what a reader
must know to trust it: where the weights come from, the reference it is compared with, the text and
its chunking, whether the scheme's own kernel ran (``emulated`` when not), and llama.cpp's
statistics with their uncertainties (:mod:`qbench.quality.stats`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from qbench.row import Flag

Status = Literal["ok", "skipped", "failed"]
#: A statistic as a file must hold it: a JSON number (a string such as "0.001" is refused, not read as one).
Num = Annotated[float, Field(strict=True)]
#: A KL divergence statistic: a number, never below 0 (D(ref ‖ scheme) ≥ 0) but for float rounding: the
#: per-token sums of a scheme that matches the reference come out a few 1e-9 either side of 0.
KldNum = Annotated[float, Field(strict=True, ge=-1e-6)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Kld(_Part):
    """KL divergence D(ref ‖ scheme) per scored token, nats: mean ± uncertainty and percentiles."""

    mean: KldNum
    unc: Num = Field(ge=0)
    p50: KldNum
    p90: KldNum
    p95: KldNum
    p99: KldNum
    p99_9: KldNum
    max: KldNum


class Dp(_Part):
    """Δp = p_scheme(token) - p_ref(token) of the token that follows (probability, -1..1)."""

    mean: Num
    unc: Num
    rms: Num
    rms_unc: Num
    p1: Num
    p5: Num
    p10: Num
    p50: Num
    p90: Num
    p95: Num
    p99: Num
    min: Num
    max: Num


class QualityStats(_Part):
    """llama.cpp's statistics over ``tokens`` scored tokens (:func:`qbench.quality.stats.summarize`)."""

    tokens: int = Field(gt=0)
    ppl: Num = Field(gt=0)
    ppl_unc: Num = Field(ge=0)
    ref_ppl: Num = Field(gt=0)
    ref_ppl_unc: Num = Field(ge=0)
    ln_ppl_ratio: Num
    ln_ppl_ratio_unc: Num = Field(ge=0)
    ppl_ratio: Num = Field(gt=0)
    ppl_ratio_unc: Num = Field(ge=0)
    nll_correlation: Optional[Num] = None
    kld: Kld
    same_top: Num = Field(ge=0, le=1)
    same_top_unc: Num = Field(ge=0)
    dp: Dp


class Reference(_Part):
    """What the scheme is compared with: the model in ``dtype`` (its linears in float), its
    log-probabilities shared by every worker of the run at ``logprobs`` precision."""

    dtype: str
    logprobs: str
    computed_s: Optional[float] = Field(None, description="seconds this worker spent computing it (None: read from "
                                                          "the run's shared file)")


class Sensitivity(_Part):
    """One part (a role of every block, one block, or one unit of one block or the LM head) quantized
    alone, the rest of the model the reference."""

    part: str
    block: Optional[int] = Field(None, ge=0, description="a unit's block (None: the LM head, or not a unit)")
    unit: Optional[str] = Field(None, description="a unit of qbench.model.recipe.UNITS, or lm_head")
    roles: Optional[list[str]] = Field(None, description="a unit's linears (transformers' names, or lm_head)")
    kld: KldNum
    kld_unc: Num = Field(ge=0)
    same_top: Num
    ppl_ratio: Num


class Span(_Part):
    """The chunks of the text a row scored: chunks ``first_chunk .. first_chunk + chunks - 1``
    (``tokens`` = chunks × chunk), so a calibration span and an evaluation span of one text are
    disjoint when their ranges are."""

    first_chunk: int = Field(ge=0)
    chunks: int = Field(gt=0)
    tokens: int = Field(gt=0)


class Calibration(_Part):
    """The calibration a calibrated scheme's values came from (:mod:`qbench.quality.calibrate`): the
    text, its sha256, the span of its tokens (``[start, end)``, ``chunks`` of ``chunk``), the tokens
    seen, the seconds spent collecting the activations and choosing the values, and per calibrated
    scheme what its solve says (:func:`qbench.quality.calibrate.diagnostics`)."""

    text: str
    text_sha256: str
    first_chunk: int = Field(ge=0)
    chunks: int = Field(gt=0)
    chunk: int = Field(gt=0)
    span: list[int]
    tokens: int = Field(gt=0)
    collect_s: Optional[float] = None
    solve_s: Optional[float] = None
    diagnostics: Optional[dict[str, dict[str, Union[int, float]]]] = Field(
        None, description="per calibrated scheme (its label): linears, AWQ's chosen alpha (min, mean, max) and its "
                          "error over RTN's, GPTQ's dead input channels; None in older files")


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
    tokenizer_sha256: Optional[str] = Field(None, description="sha256 of the tokenizer.json the text was tokenized with; None in older files")
    chunk: int = Field(gt=0)
    chunks: int = Field(gt=0)
    span: Optional[Span] = Field(None, description="the chunks of the text used; None in older files (from chunk 0)")
    scored_per_chunk: int = Field(gt=0)
    reference: Optional[Reference] = None
    stats: Optional[QualityStats] = None
    sensitivity: Optional[list[Sensitivity]] = None
    sensitivity_by: Optional[Literal["role", "block", "unit"]] = None
    lm_head: Literal["float", "scheme"] = "float"
    recipe: Optional[dict] = Field(None, description="a mixed recipe's scheme per role and kept blocks, and the "
                                                     "linears each scheme built (qbench.model.recipe.Plan.record)")
    kv_cache: Optional[dict] = Field(None, description="the chunks' KV cache when not the activation dtype (quality.kv_cache "
                                                       "= \"fp8\"): dtype, scale rule, how attention reads it, bytes per token")
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
    calibration: Optional[Calibration] = Field(None, description="the calibration span a calibrated scheme "
                                                                 "(GPTQ, AWQ) chose its values from; None otherwise")
    calibration_s: Optional[float] = Field(None, description="seconds spent beyond a round-to-nearest build: "
                                                             "collecting the calibration activations plus choosing "
                                                             "the calibrated values (HQQ: its search); None for "
                                                             "other schemes")

    @property
    def key(self) -> tuple:
        return (self.scheme, self.model, self.device, self.text_sha256, self.chunk)


def check_rows(rows: list, source: str) -> list[QualityRow]:
    """The rows of a quality result as :class:`QualityRow`, in order: unknown keys refused, every
    value of its type (statistics strict JSON numbers), an ``ok`` row with its statistics, one row per
    (scheme, model, device, text, chunk).

    Raises:
        qbench.results.ResultsError: one line naming ``source``, the row index, the key and the value.
    """
    from qbench.results import ResultsError, check_job_rows  # results reads rows through the job registry

    out = check_job_rows(rows, source, QualityRow, "quality", "a quality result holds only quality rows (job = 'quality')",
                         lambda r: f"(scheme {r.scheme!r}): one row per scheme, model, device and text")
    for i, r in enumerate(out):  # a producer's blank row has none yet; a finished ok row always has them
        if r.status == "ok" and r.stats is None:
            raise ResultsError(f"{source}: rows[{i}] (scheme {r.scheme!r}): an ok row must hold its statistics (stats); "
                               "a row without them is skipped or failed")
    return out
