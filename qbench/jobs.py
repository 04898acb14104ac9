"""The one registry of job kinds: a job is one :class:`Job` record plus its own package.

A job kind says which scenario table selects it, which keys its scenarios take (its table model)
and how they are checked, summarized and fitted to the device's memory, how its rows are checked, how its worker starts
and measures, whether two of its workers may hold the device at once, and which reader views it
offers. Code outside a job's own package asks this registry (:func:`of_scenario`, :func:`of_rows`,
:func:`get`) instead of branching on the kind, as schemes (:mod:`qbench.schemes`) and timing
methods (:mod:`qbench.timing.registry`) are asked.

Torch-free: the functions a record names are ``"module:attribute"`` strings imported on first use
(:func:`load`), so scenario validation and the readers do not import torch or a job's measuring
code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional


@dataclass(frozen=True)
class Job:
    """One job kind.

    Attributes:
        name: the kind, as rows record it (``row["job"]``; a layer row has no ``job`` key).
        table: the scenario table whose presence selects this kind (``None``: the default kind).
        tables: ``"module:class"``, the kind's table model (a :class:`qbench.tables.Tables`): the
            scenario keys only this kind takes (``m`` and ``[layer]``, ``[model]``, ...), which
            :mod:`qbench.scenario` joins with the shared ones; any other key is refused.
        check: ``"module:function"`` ``(scenario) -> None``: the kind's rules across keys (shapes
            against schemes, the model's files), raising :class:`qbench.tables.ScenarioError`.
        describe: ``"module:function"`` ``(scenario) -> str``: what ``qbench check`` says of the
            scenario after its schemes (``M = [1]; K = 4096, N = 4096``).
        fits: ``"module:function"`` ``(scenario, device, free) -> None`` refusing (``ScenarioError``)
            a scenario that cannot fit in ``free`` bytes of ``device`` before a run starts; None: the
            kind's worker decides (a quality row whose model does not fit is skipped).
        at: the row keys saying where a row was measured, for the run's progress lines
            (``M=16``; a quality row has none).
        check_rows: ``"module:function"`` ``(rows: list[dict | row], source: str) -> list[row]``: the
            rows checked against the kind's row model (one line naming ``source``, the row index and
            key on a bad one: :class:`qbench.results.ResultsError`).
        blank_rows: ``"module:function"`` ``(scenario, entry, scheme, device) -> list[dict]``: one
            scheme's rows with their identity and nothing measured (the runner's failed and skipped
            rows start from them).
        input_digests: ``"module:function"`` ``(scenario) -> dict[str, str]``: the digests of inputs
            some of its rows record that a blank row lacks, by their dotted row key (a quality
            scenario's calibration text: ``calibration.text_sha256``), so ``--resume`` refuses kept
            rows measured on other bytes (:data:`qbench.lifecycle.INPUT_KEYS`); None: none.
        measure: ``"module:function"`` ``(scenario, entry_index, device, ceilings, shared_dir) ->
            list[dict]``: run in the scheme's worker process.
        launcher: ``"fork"`` (a worker forked from the runner's forkserver, :mod:`qbench.runner`) or
            ``"torchrun"`` (one process group per scheme, the kind's own runner ``run``).
        run: ``"module:function"`` replacing :func:`qbench.runner.run` for a ``torchrun`` kind.
        exclusive: a worker holds a whole model: never two workers on the device at once.
        emulates: a scheme with no kernel on the device still runs, emulated
            (:attr:`qbench.schemes.base.Scheme.emulate`), so the runner does not skip it up front.
        deterministic: its workers compute the same numbers on every run, so ``--repeat`` (which
            compares independent runs' medians) is refused for it.
        rows_per_scheme: each row is one scheme entry's (at one M, context ...), so a file's schemes
            can be counted against its scenario's; a search's rows are recipes it wrote.
        resumable: ``qbench run --resume`` keeps a file's rows and measures the schemes it lacks (a
            search is one pipeline: it is run again).
        views: reader command name -> ``"module:function"`` rendering that reader's view of a
            document of this kind (absent: the reader's own, layer, view). ``run`` is ``(doc, args)
            -> rows shown``; a reader's is ``(args, paths, docs) -> exit status``; ``budgets`` names the
            kind's budget options (:class:`qbench.judge.Budget`), which ``recommend`` takes.
        refusal: what a reader without a view of this kind says of its file, after ``<path>: ``
            (None: a line naming the kind and the readers that have a view).
        summary: one line for ``qbench list`` and errors.
    """

    name: str
    table: Optional[str]
    tables: str
    check: str
    describe: str
    check_rows: str
    blank_rows: str
    measure: str
    summary: str
    fits: Optional[str] = None
    input_digests: Optional[str] = None
    at: tuple[str, ...] = ("m",)
    launcher: str = "fork"
    run: Optional[str] = None
    exclusive: bool = False
    emulates: bool = False
    deterministic: bool = False
    rows_per_scheme: bool = True
    resumable: bool = True
    views: Mapping[str, str] = field(default_factory=dict)
    refusal: Optional[str] = None

    def view(self, command: str) -> Optional[Callable[..., Any]]:
        """The function rendering reader ``command``'s view of this kind, or None (the layer view)."""
        target = self.views.get(command)
        return None if target is None else load(target)

    def where(self, row: Mapping[str, Any]) -> str:
        """Where ``row`` was measured, for a progress line: `` M=16 context=128`` (``""`` when the
        kind's rows say nothing of it)."""
        return "".join(f" {'M' if key == 'm' else key}={row[key]}" for key in self.at if row.get(key) is not None)


#: Every job kind, in the order a scenario's tables are tried (the first whose table is present wins;
#: the default kind, without a table, last).
JOBS: dict[str, Job] = {j.name: j for j in (
    Job("search", table="search", run="qbench.search.pipeline:run", at=("m", "context"), rows_per_scheme=False,
        resumable=False,
        tables="qbench.search.spec:SearchTables", check="qbench.search.spec:check", describe="qbench.search.spec:describe",
        check_rows="qbench.search.row:check_rows", blank_rows="qbench.search.pipeline:blank_rows",
        measure="qbench.search.pipeline:measure", views={"run": "qbench.search.view:run_view",
                                                         "report": "qbench.search.view:report_view",
                                                         "recommend": "qbench.search.view:recommend_view",
                                                         "plot": "qbench.search.plot:plot_view"},
        summary="the fastest per-unit recipe under a KL-divergence budget, proven by the quality and step jobs"),
    Job("quality", table="quality", exclusive=True, emulates=True, deterministic=True, at=(),
        tables="qbench.quality.spec:QualityTables", check="qbench.quality.calibrate:check_scenario",
        describe="qbench.quality.spec:describe",
        check_rows="qbench.quality.row:check_rows", blank_rows="qbench.quality.measure:blank_rows",
        input_digests="qbench.quality.calibrate:input_digests",
        measure="qbench.quality.measure:measure_quality_scheme",
        views={"run": "qbench.quality.view:run_view", "report": "qbench.quality.view:report_view",
               "recommend": "qbench.decision:recommend_view", "model": "qbench.decision:model_view",
               "budgets": "qbench.quality.view:BUDGETS"},
        summary="a checkpoint's perplexity, KL divergence and same-top share over a text, per scheme"),
    Job("step", table="model", exclusive=True, at=("m", "context"),
        tables="qbench.step.spec:StepTables", check="qbench.step.spec:check_scenario",
        describe="qbench.step.spec:describe", fits="qbench.step.spec:fits",
        check_rows="qbench.step.row:check_rows", blank_rows="qbench.step.measure:blank_rows",
        measure="qbench.step.measure:measure_step_scheme",
        views={"run": "qbench.step.views:run_view", "report": "qbench.step.views:report_view",
               "recommend": "qbench.step.views:recommend_view", "model": "qbench.step.views:model_view",
               "plot": "qbench.step.views:plot_view", "compare": "qbench.step.views:COMPARE"},
        refusal="a model-step result (rows of job 'step'); this command reads per-layer results (qbench report, "
                "recommend, model, plot and compare read model-step files)",
        summary="a Llama model's whole decode step, per scheme, M and context"),
    Job("tp", table="tp", launcher="torchrun", run="qbench.tp.runner:run_tp",
        tables="qbench.tp.spec:TpTables", check="qbench.tp.spec:check", describe="qbench.tp.spec:describe",
        fits="qbench.layer.memory:fits",
        check_rows="qbench.results:check_rows", blank_rows="qbench.measure:blank_rows",
        measure="qbench.tp.measure:measure_tp",
        summary="one linear layer split over GPUs (tensor parallelism)"),
    Job("layer", table=None,
        tables="qbench.layer.tables:LayerTables", check="qbench.layer.tables:check",
        describe="qbench.layer.tables:describe", fits="qbench.layer.memory:fits",
        check_rows="qbench.results:check_rows", blank_rows="qbench.measure:blank_rows",
        measure="qbench.measure:measure_scheme",
        summary="one linear layer, per scheme and M"),
)}

#: The kind of a row without a ``job`` key.
DEFAULT = "layer"


def get(name: str) -> Job:
    """The job kind ``name``.

    Raises:
        KeyError: no such kind (the message lists the kinds)."""
    try:
        return JOBS[name]
    except KeyError:
        raise KeyError(f"no job kind {name!r} (kinds: {', '.join(JOBS)})") from None


def of_tables(tables: Mapping[str, Any] | Any) -> Job:
    """The job kind of a scenario given its top-level tables (a dict, or an object whose attributes
    are the tables, ``None`` when absent): the first kind whose table is present."""
    def present(key: str) -> bool:
        value = tables.get(key) if isinstance(tables, Mapping) else getattr(tables, key, None)
        return value is not None

    for job in JOBS.values():
        if job.table is None or present(job.table):
            return job
    return JOBS[DEFAULT]


def of_scenario(scenario: Any) -> Job:
    """The job kind of a :class:`qbench.scenario.Scenario` (its ``job``, the kind it was validated as)."""
    return JOBS[scenario.job]


def row_job(row: Any) -> str:
    """The kind of one row (a dict or a typed row): its ``job`` key, else :data:`DEFAULT`."""
    value = row.get("job") if isinstance(row, dict) else getattr(row, "job", None)
    return value if isinstance(value, str) and value in JOBS else DEFAULT


def of_rows(rows: list) -> Job:
    """The job kind of a result's rows: the kind some row names (a result holds one kind; the kind's
    :attr:`Job.check_rows` refuses a row of another), else :data:`DEFAULT`."""
    for row in rows:
        name = row_job(row)
        if name != DEFAULT:
            return JOBS[name]
    return JOBS[DEFAULT]


def load(target: str) -> Any:
    """The attribute a ``"module:attribute"`` string names (imported on first use)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
