"""The search result's typed rows: one per recipe point (torch-free).

A row is a recipe the search predicted (a point of the time-vs-KLD front, or a pure candidate: every
unit one scheme), with what was measured of it when it was run as a recipe by the quality job
(the evaluation span) and the step job. The document's ``search`` key holds the problem (units,
candidates, per-unit times and damages, the fixed rest, where each half comes from), the rounds
(pick, measured, refit factor) and the pick (:func:`summary`).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from qbench.quality.row import KldNum
from qbench.row import Flag


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Measured(_Part):
    """A recipe as run: the quality job's statistics on the evaluation span and the step job's time."""

    label: str = Field(description="the recipe's row label in the job files")
    kld: KldNum = Field(description="mean KL divergence against the reference, nats/token")
    kld_unc: float = Field(ge=0, description="its uncertainty (llama.cpp's)")
    ppl_ratio: Optional[float] = None
    same_top: Optional[float] = None
    emulated: bool = False
    step_us: Optional[float] = Field(None, gt=0, description="the measured step, µs, by the search's method; None: "
                                                              "the step job had none (the reason in step_reason)")
    step_reason: Optional[str] = None

    @property
    def upper(self) -> float:
        """The measured KLD's upper bound, mean + uncertainty (nats/token): what proves a recipe within a budget."""
        return self.kld + self.kld_unc

    def within(self, max_kld: float) -> bool:
        """Whether the recipe is proven within ``max_kld`` (nats/token): its :attr:`upper` at most the budget."""
        return self.upper <= max_kld


class SearchRow(_Part):
    """One recipe point of a search.

    Attributes:
        scheme: the point's label (a pure candidate's own label, else ``r<round> front <i>``).
        kind: ``pure`` (one candidate everywhere) or ``front`` (a point of that round's front).
        round: the solve round the prediction is of (1 as measured; later rounds after a refit).
        predicted_us: fixed rest + Σ unit times (µs); predicted_kld: the rest's damage + Σ unit damages
            (nats/token; the units' scaled by the round's refit; files before the rest's damage was added
            have none: ``search.fixed_kld`` absent); predicted_kld_unc: Σ of their uncertainties (an upper
            bound: the units were scored on the same tokens).
        choice: per unit (the document's ``search.units``), the index of its candidate.
        counts: units per candidate label.
        recipe: the scheme entry as a scenario writes it (``name``, options, ``recipe`` with
            ``"<block>.<role>"`` keys): runnable by the quality and step jobs; None for front points
            not verified.
        measured: the recipe as run, or None (not verified).
        within_budget: the measured KLD's upper bound (mean + uncertainty) at most the budget.
        pick: the search's answer.
    """

    job: Literal["search"] = "search"
    scheme: str
    kind: Literal["pure", "front"]
    round: int = Field(ge=1)
    status: Literal["ok", "skipped", "failed"] = "ok"
    reason: Optional[str] = None
    m: int = Field(gt=0)
    context: int = Field(gt=0)
    predicted_us: float = Field(gt=0)
    predicted_kld: KldNum
    predicted_kld_unc: float = Field(ge=0)
    choice: list[int]
    counts: dict[str, int]
    recipe: Optional[dict] = None
    measured: Optional[Measured] = None
    within_budget: Optional[bool] = None
    pick: bool = False
    flags: list[Flag] = Field(default_factory=list)

    @property
    def key(self) -> tuple:
        return (self.scheme, self.round)

    @property
    def verified(self) -> bool:
        return self.measured is not None


def check_rows(rows: list, source: str) -> list[SearchRow]:
    """The rows of a search result as :class:`SearchRow` (the search record's row check).

    Raises:
        qbench.results.ResultsError: one line naming ``source``, the row index, the key and the value."""
    from qbench.results import check_job_rows

    return check_job_rows(rows, source, SearchRow, "search", "a search result holds only search rows (job = 'search')",
                          lambda r: f"(scheme {r.scheme!r}, round {r.round}): one row per point and round")
