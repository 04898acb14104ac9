"""The ``[search]`` table of a search scenario, and the job scenarios a search runs (torch-free but
for the activation-dtype check, which reads the scheme registry as a recipe's check does).

::

    [model]
    checkpoint = "DIR"             # as a quality scenario's (or name = a preset: seeded, quality meaningless)
    [search]
    max_kld = 0.002                # the budget: mean KL divergence (nats/token) against the reference
    m = 1                          # the deployment's M (rows = batch x tokens) ...
    context = 128                  # ... and KV-cache context: the point the step is timed at
    text = "wiki.test.raw"         # the text the damages and the verification are scored on
    chunk = 512                    # tokens per chunk
    calibration = { first_chunk = 0, chunks = 8 }   # the span each unit's damage is measured on
    evaluation = { first_chunk = 8, chunks = 32 }   # a held-out span of the same text: the proof
    # quantizer_calibration = { first_chunk = 40, chunks = 4 }  # what GPTQ / AWQ candidates learn from: a span
    #                                                           # neither of the two above holds, or text = "FILE"
    speed = "step"                 # run the step job; or a step result file (relative to the scenario)
    # method = "step_graph"        # the step method the fixed rest and the proof read (default: the decision's)
    # methods = ["step_graph"]     # the step job's methods (default: all that apply)
    verify = 2                     # front points verified besides the pick (>= 2)
    rounds = 3                     # solve, verify, refit: at most this many rounds
    lm_head = false                # the LM head is a unit too (the schemes build it)
    [[schemes]]                    # the candidates; the first is the base (its step gives the fixed rest)

Every error names the file, the key and the value; a key the search passes to a job it runs
(``quality.chunks``) is named as the search file writes it (``search.calibration.chunks``).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from qbench.model.source import ModelSource
from qbench.quality.spec import CalibrationSpec
from qbench.tables import Frozen, ScenarioError, Tables
from qbench.timing import registry


class Span(Frozen):
    """Chunks ``first_chunk .. first_chunk + chunks - 1`` of the text."""

    first_chunk: int = Field(default=0, ge=0, le=1 << 20)
    chunks: int = Field(gt=0, le=1 << 20)

    def overlaps(self, other: "Span") -> bool:
        return self.first_chunk < other.first_chunk + other.chunks and other.first_chunk < self.first_chunk + self.chunks


class SearchSpec(Frozen):
    """The validated ``[search]`` table (see the module docstring)."""

    max_kld: float = Field(gt=0, le=100)
    m: int = Field(gt=0, le=1 << 20)
    context: int = Field(gt=0, le=1 << 20)
    text: str = Field(min_length=1, max_length=4096)
    chunk: int = Field(default=512, ge=16, le=1 << 17)
    calibration: Span
    evaluation: Span
    quantizer_calibration: Optional[CalibrationSpec] = None
    tokenizer: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    reference: Literal["checkpoint", "float32", "float16", "bfloat16"] = "checkpoint"
    logprobs: Literal["float32", "float16"] = "float32"
    lm_head: bool = False
    speed: str = Field(default="step", min_length=1, max_length=4096)
    method: Optional[Literal[registry.STEP_METHODS]] = None
    methods: Optional[tuple[Literal[registry.STEP_METHODS], ...]] = Field(default=None, min_length=1)
    verify: int = Field(default=2, ge=2, le=16)
    rounds: int = Field(default=3, ge=1, le=3)

    @model_validator(mode="after")
    def _disjoint(self) -> "SearchSpec":
        if self.calibration.overlaps(self.evaluation):
            raise ValueError(f"calibration (chunks {self.calibration.first_chunk}..{self.calibration.first_chunk + self.calibration.chunks - 1}) "
                             f"and evaluation (chunks {self.evaluation.first_chunk}..{self.evaluation.first_chunk + self.evaluation.chunks - 1}) "
                             "overlap: the proof must be scored on a span the damages never saw")
        return self


class SearchTables(Tables):
    """A search scenario's own keys: ``[model]`` (its source) and ``[search]``."""

    REFUSED = {"m": "a search is for one deployment point: search.m",
               "quality": "the search runs its quality jobs itself: [search] text, chunk, calibration, evaluation",
               "model.context": "a search is for one deployment point: search.context"}
    MISSING = {"model": "a search scenario ([search]) names its model in a [model] table (checkpoint = a Hugging Face "
                        "folder), got none"}
    model: ModelSource
    search: SearchSpec

    @classmethod
    def prepare(cls, data: dict, source: str) -> dict:
        search = data.get("search")
        if isinstance(search, dict) and isinstance(search.get("methods"), list):
            data = {**data, "search": {**search, "methods": tuple(search["methods"])}}
        return data

    def tables_dict(self) -> dict:
        return {"model": self.model.to_dict(), "search": self.search.model_dump(mode="json")}


# ---- the job scenarios a search runs --------------------------------------------------------------

def _quality_table(s: SearchSpec, span: Span, sensitivity: str) -> dict:
    out = {"text": s.text, "chunk": s.chunk, "first_chunk": span.first_chunk, "chunks": span.chunks,
           "reference": s.reference, "logprobs": s.logprobs, "sensitivity": sensitivity, "lm_head": s.lm_head}
    if s.tokenizer is not None:
        out["tokenizer"] = s.tokenizer
    if s.quantizer_calibration is not None:  # the calibrated candidates' statistics, in the damage and proof jobs alike
        out["calibration"] = s.quantizer_calibration.model_dump(exclude_none=True)
    return out


def _shared(scenario: Any, suffix: str, entries: list[dict]) -> dict:
    return {"name": f"{scenario.name[:48]}-{suffix}", "description": f"{scenario.name}: {suffix}", "seed": scenario.seed,
            "device": scenario.device, "timing": scenario.timing.model_dump(mode="json", exclude_none=True),
            "schemes": entries}


def candidate_entries(scenario: Any) -> list[dict]:
    """The candidates as scenario scheme entries (name, options, label)."""
    return [{"name": e.name, **e.options.model_dump(exclude_none=True), "label": e.label} for e in scenario.schemes]


def _mapped(scenario: Any, span: str, build):
    """``build()`` (a job scenario), its :class:`ScenarioError` re-said with the search file's key."""
    try:
        return build()
    except ScenarioError as exc:
        key = exc.key
        for ours, theirs in (("search.quantizer_calibration", "quality.calibration"),
                             (f"search.{span}.chunks", "quality.chunks"), (f"search.{span}.first_chunk", "quality.first_chunk"),
                             ("search.m", "m"), ("search.context", "model.context"), ("search.methods", "model.methods"),
                             ("search.lm_head", "model.quantize_lm_head")):
            if key == theirs or key.startswith((theirs + "[", theirs + ".")):
                key = ours + key[len(theirs):]
                break
        else:
            if key.startswith("quality."):
                key = "search." + key.removeprefix("quality.")
        message = exc.message
        if key.startswith("search.quantizer_calibration"):
            c = scenario.search.quantizer_calibration
            if key.endswith(".text") and c is not None and c.text is None:  # no text written: its span is too long
                key = "search.quantizer_calibration.chunks"
            message += f" (in the {span} job: the tokens it scores are search.{span}'s)"
        raise ScenarioError(scenario.source, key, message) from None


def damage_scenario(scenario: Any):
    """The quality scenario measuring each unit alone under each candidate on the calibration span."""
    from qbench.scenario import from_dict

    s = scenario.search
    data = {**_shared(scenario, "damage", candidate_entries(scenario)), "model": scenario.model.to_dict(),
            "quality": _quality_table(s, s.calibration, "unit")}
    return _mapped(scenario, "calibration", lambda: from_dict(data, scenario.source))


def evaluation_scenario(scenario: Any, entries: list[dict], suffix: str = "evaluation"):
    """The quality scenario scoring ``entries`` (pure candidates, recipes) on the evaluation span."""
    from qbench.scenario import from_dict

    s = scenario.search
    data = {**_shared(scenario, suffix, entries), "model": scenario.model.to_dict(),
            "quality": _quality_table(s, s.evaluation, "none")}
    return _mapped(scenario, "evaluation", lambda: from_dict(data, scenario.source))


def step_scenario(scenario: Any, entries: list[dict], suffix: str = "step"):
    """The step scenario timing ``entries`` at the search's M and context, its linears' stream times too."""
    from qbench.scenario import from_dict

    s = scenario.search
    model = {**scenario.model.to_dict(), "context": [s.context], "quantize_lm_head": s.lm_head, "linear_sum": True}
    if s.methods is not None:
        model["methods"] = list(s.methods)
    data = {**_shared(scenario, suffix, entries), "m": [s.m], "model": model}
    return _mapped(scenario, "evaluation", lambda: from_dict(data, scenario.source))


def check(scenario: Any) -> None:
    """A search scenario's cross-key rules: at least two candidates, one mode and one activation
    dtype among them (a recipe mixes them in one model), and the job scenarios it runs valid
    (the model, the text, both spans within it, every linear of a shape each candidate takes).

    Raises:
        ScenarioError: the key at fault and why."""
    from qbench import schemes
    from qbench.model import recipe as recipes

    if len(scenario.schemes) < 2:
        raise ScenarioError(scenario.source, "schemes", f"a search chooses among at least two candidates, got "
                                                        f"{len(scenario.schemes)}")
    base, seen = scenario.schemes[0], {}
    for i, e in enumerate(scenario.schemes):
        if e.name in recipes.REFUSED:
            raise ScenarioError(scenario.source, f"schemes[{i}].name", f"{recipes.REFUSED[e.name]}: it cannot be a "
                                                                       f"candidate of a recipe, got {e.name!r}")
        if e.options.mode != base.options.mode:
            raise ScenarioError(scenario.source, f"schemes[{i}].mode", f"a recipe runs in one mode: the base "
                                                                       f"{base.label!r} is {base.options.mode}, got "
                                                                       f"{e.options.mode!r}")
        if e.recipe is not None:
            raise ScenarioError(scenario.source, f"schemes[{i}].recipe", "a candidate is one scheme: the search "
                                                                         "writes the recipes, got a recipe")
        want, got = recipes.activation_dtype(base.name), recipes.activation_dtype(e.name)
        if got != want:
            raise ScenarioError(scenario.source, f"schemes[{i}].name",
                                f"{e.name} runs at {got} activations, the base {base.name} at {want}: a recipe's "
                                f"linears share the model's hidden states, so the candidates must take one "
                                f"activation dtype, got {e.name!r}")
        label = recipes.Choice(e.name, e.options).label
        if (same := seen.setdefault(label, i)) != i:
            raise ScenarioError(scenario.source, f"schemes[{i}]", f"the same scheme as schemes[{same}] ({label}) under "
                                                                  f"another label: a search chooses among different "
                                                                  f"schemes, got {e.label!r}")
    calibrated = [e.label for e in scenario.schemes if schemes.get(e.name).needs_calibration]
    if calibrated and scenario.search.quantizer_calibration is None:
        raise ScenarioError(scenario.source, "search.quantizer_calibration",
                            f"{', '.join(calibrated)} choose their values from calibration activations: add [search] "
                            "quantizer_calibration = { first_chunk = N, chunks = M } (chunks of search.text that "
                            "neither calibration nor evaluation holds) or { text = \"FILE\", chunks = M }, got none")
    if scenario.search.speed != "step":
        from qbench.quality.spec import resolve_path

        path = resolve_path(scenario.search.speed, scenario.source)
        if not path.is_file():
            raise ScenarioError(scenario.source, "search.speed", f"\"step\" (run the step job) or a step result file; "
                                                                 f"no file {path}, got {scenario.search.speed!r}")
        speed = _check_speed(scenario, path)
    elif scenario.search.method and scenario.search.methods and scenario.search.method not in scenario.search.methods:
        raise ScenarioError(scenario.source, "search.method", f"the step job times only "
                                                              f"{', '.join(scenario.search.methods)} (search.methods): the "
                                                              f"method the rest is read by must be one of them, got "
                                                              f"{scenario.search.method!r}")
    damage_scenario(scenario)
    evaluation_scenario(scenario, candidate_entries(scenario))
    if scenario.search.speed == "step":
        step_scenario(scenario, candidate_entries(scenario))
    else:  # after damage_scenario: a checkpoint that cannot be opened is refused under its own key first
        _check_pairing(scenario, path, speed)


def _check_speed(scenario: Any, path) -> Any:
    """Refuse, before anything runs, a speed file that cannot give the candidates' costs: not a model-step result,
    models of several depths, or a candidate without an ok row and per-linear times at the search's M and context
    (:func:`qbench.search.problem.costs`, which the search applies to it after its damages are measured)."""
    from qbench.results import ResultsError, read_results
    from qbench.search.problem import ProblemError, costs, model_units

    s = scenario.search
    try:
        doc = read_results(path)
    except ResultsError as exc:
        raise ScenarioError(scenario.source, "search.speed", f"not a readable result file: {exc}") from None
    if doc.job != "step":
        raise ScenarioError(scenario.source, "search.speed", f"a model-step result file (qbench run of a [model] "
                                                             f"scenario), got a {doc.job} result, {path}")
    blocks = {r.blocks for r in doc.rows}
    if len(blocks) != 1:
        raise ScenarioError(scenario.source, "search.speed", f"one model's step rows, got models of "
                                                             f"{sorted(blocks)} blocks in {path}")
    try:
        costs(str(path), doc.rows, scenario.schemes, model_units(blocks.pop(), s.lm_head), s.m, s.context, s.method)
    except ProblemError as exc:
        raise ScenarioError(scenario.source, "search.speed", str(exc)) from None
    return doc


def _check_pairing(scenario: Any, path, doc) -> None:
    """Refuse, before anything runs, a speed file that is not a speed half of the search's checkpoint
    (:func:`qbench.decision.pairing`, which the search applies to it and its damage file once the damages are
    measured): the damage file's side of it is known from the scenario (:func:`_quality_half`)."""
    from qbench.decision import pairing

    why, _ = pairing([doc], [_quality_half(scenario)])
    if why:
        raise ScenarioError(scenario.source, "search.speed", f"{path}: checkpoint_id: {why}")


def _quality_half(scenario: Any) -> Any:
    """What :func:`qbench.decision.pairing` reads of the damage file the search would write, known before anything
    is measured: each row's ``checkpoint_id`` (the checkpoint's content identity, as
    :mod:`qbench.quality.measure` records it; None for seeded weights) and ``weights``, and the scenario's model."""
    from types import SimpleNamespace

    from qbench.model.checkpoint import of_model
    from qbench.model.config import ConfigError
    from qbench.quality.spec import weights_label

    try:
        ckpt = of_model(scenario.model, scenario.source)
    except ConfigError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None
    row = SimpleNamespace(checkpoint_id=None if ckpt is None else ckpt.identity, weights=weights_label(scenario, ckpt))
    return SimpleNamespace(rows=[row], scenario=SimpleNamespace(
        model_extra={"model": scenario.model.to_dict(), "source": scenario.source}))


def describe(scenario: Any) -> str:
    """The ``qbench check`` summary: the budget, the point, the spans and the speed source."""
    s = scenario.search
    speed = "the step job" if s.speed == "step" else s.speed
    c = s.quantizer_calibration
    quantizers = "" if c is None else (f"; calibrated candidates learn from chunks {c.first_chunk}.."
                                       f"{c.first_chunk + c.chunks - 1} of {c.chunk or s.chunk} tokens of {c.text or s.text}")
    return (f"max mean KLD {s.max_kld:g} at M = {s.m}, context {s.context}; damages on chunks {s.calibration.first_chunk}.."
            f"{s.calibration.first_chunk + s.calibration.chunks - 1}, proof on {s.evaluation.first_chunk}.."
            f"{s.evaluation.first_chunk + s.evaluation.chunks - 1} of {s.chunk} tokens of {s.text}{quantizers}; speed from "
            f"{speed}")
