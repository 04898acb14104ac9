"""The search job: measure, solve, prove. ``qbench run SEARCH.toml`` (the search record of
:mod:`qbench.jobs` replaces the runner with :func:`run`, as tensor parallelism does).

1. **Floor**: the pure candidates (and bf16, when not one) by the quality job on the evaluation
   span; a budget below bf16's measured KLD (the noise floor: bf16 against the reference) is refused.
2. **Damage**: the quality job with unit sensitivity on the calibration span (each unit of the
   model quantized alone by each candidate inside the reference model).
3. **Cost**: the step job of the pure candidates at the search's M and context (their linears'
   stream times and the step), or a step result file the scenario names.
4. **Solve** the exact front (:mod:`qbench.search.solve`), pick the fastest recipe predicted within
   the budget.
5. **Prove**: the pick and ``verify`` other front points run as recipes by the quality job
   (evaluation span) and the step job; a pick is accepted only if its measured KLD's upper bound
   meets the budget. Otherwise the damages are scaled by measured / predicted and the front
   re-solved, ``rounds`` rounds at most; then the fastest verified recipe measured within the
   budget, if any, is the pick, and the file says so.

The job files live in a temporary folder; the one result file holds what the search read of them.
Progress (phases, units measured, time left) goes to the ``progress`` callback (stderr).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from qbench.model.recipe import Choice
from qbench.search import recipes, solve, spec
from qbench.search.problem import Problem, ProblemError, build
from qbench.search.row import Measured, SearchRow

#: The scheme whose measured KLD against the reference is the noise floor of a budget.
FLOOR_SCHEME = "bf16"


class Search:
    """One search's state between its phases (see the module docstring)."""

    def __init__(self, scenario: Any, device: str, work: Path, say: Callable[[str], None]):
        self.scenario, self.device, self.work, self.say = scenario, device, work, say
        self.s = scenario.search
        self.candidates = list(scenario.schemes)
        self.measured: dict[tuple, Measured] = {}  # choice -> the recipe as run
        self.round_of: dict[tuple, int] = {}  # choice -> the round that verified it
        self.walls: dict[str, float] = {}
        self.started = time.perf_counter()
        self.per_scheme_s: Optional[float] = None  # a quality + step scheme's seconds, for the time left
        self.elsewhere: Optional[str] = None  # why the proof's step half cannot run here (set by cost())
        self.step_doc: Any = None
        self.proof_entries: list[dict] = []  # the verified recipes the step job must run where the speed file ran

    # -- running the jobs -------------------------------------------------------------------------
    def _job(self, sub: Any, tag: str):
        from qbench import runner
        from qbench.results import ResultDoc

        path = self.work / f"{tag}.json"
        t0 = time.perf_counter()
        outcome = runner.run(sub, device=self.device, out=str(path), force=True,
                             per_scheme=lambda line: self.say(f"search {tag}: {line}"))
        self.walls[tag] = time.perf_counter() - t0
        return str(path), ResultDoc.of(outcome.doc)

    def _left(self, recipes_left: int) -> str:
        if self.per_scheme_s is None:
            return ""
        return f"; about {recipes_left * self.per_scheme_s:.0f} s left ({recipes_left} recipes to run by both jobs)"

    # -- phases -----------------------------------------------------------------------------------
    def floor(self) -> tuple[dict, list]:
        """The pure candidates (and bf16) on the evaluation span; refuses a budget below bf16's KLD."""
        from qbench.lifecycle import RunError

        entries = spec.candidate_entries(self.scenario)
        if not any(e.name == FLOOR_SCHEME and not Choice(e.name, e.options).changed() for e in self.candidates):
            entries.append({"name": FLOOR_SCHEME, "label": f"{FLOOR_SCHEME} (noise floor)"})
        self.say(f"search: [1/4] evaluation span: {len(entries)} pure schemes, chunks {self.s.evaluation.first_chunk}.."
                 f"{self.s.evaluation.first_chunk + self.s.evaluation.chunks - 1}")
        t0 = time.perf_counter()
        path, doc = self._job(spec.evaluation_scenario(self.scenario, entries), "evaluation")
        floor_row = next((r for r in doc.rows if r.base_scheme == FLOOR_SCHEME and not r.recipe), None)
        if floor_row is None or floor_row.status != "ok":
            raise RunError(f"{self.scenario.source}: search.max_kld: the noise floor ({FLOOR_SCHEME} against the reference) "
                           f"was not measured: {getattr(floor_row, 'reason', None) or 'no row'}")
        kld, unc = floor_row.stats.kld.mean, floor_row.stats.kld.unc
        if self.s.max_kld < kld + unc:  # a recipe is proven by its measured KLD's upper bound, as bf16 would be
            raise RunError(f"{self.scenario.source}: search.max_kld: below the noise floor: {FLOOR_SCHEME} alone measures "
                           f"{kld:.4g} ± {unc:.2g} nats/token against the reference on the evaluation span, and a "
                           f"recipe is proven within the budget by its upper bound (mean + uncertainty): none can be "
                           f"under {self.s.max_kld:g}")
        self.per_scheme_s = (time.perf_counter() - t0) / max(len(entries), 1)
        floor = {"scheme": floor_row.scheme, "kld": kld, "kld_unc": unc}
        return floor, [path, doc]

    def damage(self):
        units = 4 * self._blocks() + (1 if self.s.lm_head else 0)
        n = len(self.candidates)
        self.say(f"search: [2/4] damage: {n} candidates x {units} units = {n * units} units to measure alone on chunks "
                 f"{self.s.calibration.first_chunk}..{self.s.calibration.first_chunk + self.s.calibration.chunks - 1}")
        t0 = time.perf_counter()
        got = self._job(spec.damage_scenario(self.scenario), "damage")
        self.say(f"search: {n * units} of {n * units} units measured in {time.perf_counter() - t0:.0f} s"
                 + self._left(1 + self.s.verify))
        return got

    def cost(self):
        from qbench.quality.spec import resolve_path
        from qbench.results import read_results

        if self.s.speed != "step":
            path = str(resolve_path(self.s.speed, self.scenario.source))
            self.say(f"search: [3/4] cost: read {path}")
            doc = read_results(path)
            self.step_doc, self.elsewhere = doc, _elsewhere(doc, self.device, path)
            if self.elsewhere:
                self.say(f"search: {self.elsewhere}")
            return path, doc
        self.say(f"search: [3/4] cost: the step job of {len(self.candidates)} candidates at M = {self.s.m}, "
                 f"context {self.s.context}")
        return self._job(spec.step_scenario(self.scenario, spec.candidate_entries(self.scenario)), "step")

    def _blocks(self) -> int:
        from qbench.quality.spec import quality_model

        return quality_model(spec.damage_scenario(self.scenario)).blocks

    # -- proof ------------------------------------------------------------------------------------
    def record_pure(self, problem: Problem, eval_doc, step_doc, method: str) -> None:
        """The pure candidates' measurements: the evaluation run and the cost step."""
        for c, label in enumerate(problem.candidates):
            self.measured[problem.pure(c)] = _measured(label, eval_doc, step_doc, self.s, method)

    def verify(self, problem: Problem, points: list, rnd: int, method: str) -> None:
        """Run ``points`` (choices not measured yet) as recipes by both jobs."""
        todo = [(i, p) for i, p in points if p.choice not in self.measured]
        if not todo:
            return
        entries = [recipes.entry(problem, self.candidates, p.choice, _label(rnd, i)) for i, p in todo]
        self.say(f"search: [4/4] round {rnd}: {len(entries)} recipes by the quality job (evaluation span) and the step "
                 f"job" + self._left(len(entries)))
        t0 = time.perf_counter()
        _, q = self._job(spec.evaluation_scenario(self.scenario, entries, f"verify-r{rnd}"), f"verify-r{rnd}-quality")
        if self.elsewhere:  # a step time is a time on the speed file's machine: the recipes run there, later
            st = None
            self.proof_entries += entries
        else:
            _, st = self._job(spec.step_scenario(self.scenario, entries, f"verify-r{rnd}-step"), f"verify-r{rnd}-step")
        self.per_scheme_s = (time.perf_counter() - t0) / len(entries)
        for (i, p), e in zip(todo, entries):
            self.measured[p.choice] = _measured(e["label"], q, st, self.s, method, self.elsewhere)
            self.round_of[p.choice] = rnd


def _label(rnd: int, i: int) -> str:
    return f"r{rnd} front {i}"


def _elsewhere(step_doc, device: str, path: str) -> Optional[str]:
    """Why the proof's step half cannot run on ``device``: the speed file ``path`` was timed on
    another device type (a CUDA file read by a CPU search), else None."""
    theirs = {str(r.device).split(":")[0] for r in step_doc.rows}
    ours = str(device).split(":")[0]
    if not theirs or theirs == {ours}:
        return None
    return (f"the speed file {path} was timed on {step_doc.machine}, this search runs on {ours}: the verified recipes' "
            f"step times are measured there, by the proof step scenario this search writes beside its result")


def _measured(label: str, quality_doc, step_doc, s, method: str, elsewhere: Optional[str] = None) -> Measured:
    q = next((r for r in quality_doc.rows if r.scheme == label), None)
    st = None if step_doc is None else next((r for r in step_doc.rows
                                             if r.scheme == label and r.m == s.m and r.context == s.context), None)
    if q is None or q.status != "ok":
        raise ProblemError(f"the quality job did not measure {label!r}: {getattr(q, 'reason', None) or 'no row'}")
    step = st.step_us(method) if st is not None and st.status == "ok" else None
    reason = None if step is not None else (elsewhere if step_doc is None else
                                            getattr(st, "reason", None) or f"no {method} time")
    return Measured(label=label, kld=q.stats.kld.mean, kld_unc=q.stats.kld.unc, ppl_ratio=q.stats.ppl_ratio,
                    same_top=q.stats.same_top, emulated=q.emulated, step_us=step, step_reason=reason)


def _unc(problem: Problem, choice) -> float:
    return problem.fixed_kld_unc + sum(problem.damage_unc[u][c] for u, c in enumerate(choice))


def others(front: list, at: int, n: int) -> list[int]:
    """``n`` front indices besides ``at`` to verify: the nearest on each side in turn (the next
    faster recipe, which the prediction puts just over the budget, then the next safer one, ...)."""
    out, step = [], 1
    while len(out) < n and (at - step >= 0 or at + step < len(front)):
        for j in (at - step, at + step):
            if 0 <= j < len(front) and len(out) < n:
                out.append(j)
        step += 1
    return out


def search(scenario: Any, device: str, work: Path, say: Callable[[str], None]) -> tuple[list[dict], dict, bool]:
    """Run the whole search; returns its rows (dicts of :class:`SearchRow`), the document's
    ``search`` summary and whether a pick was accepted.

    Raises:
        RunError: a budget below the noise floor, or no recipe predicted within it (one line each).
        ProblemError: the measured files do not make a problem (one line: file, key, value)."""
    from qbench.lifecycle import RunError

    s = scenario.search
    job = Search(scenario, device, work, say)
    floor, (eval_path, eval_doc) = job.floor()
    damage_path, damage_doc = job.damage()
    step_path, step_doc = job.cost()
    # the job files live in a temporary folder: the problem names the jobs (a speed file given keeps its path)
    damage_name = f"the damage job ({scenario.name}-damage: quality, unit sensitivity)"
    step_name = step_path if s.speed != "step" else f"the step job ({scenario.name}-step)"
    problem = build(damage_name, damage_doc, step_name, step_doc, job.candidates, s.m, s.context, s.method)
    method = problem.method
    job.record_pure(problem, eval_doc, step_doc, method)
    measured_problem = problem
    rounds, rows, accepted, stopped, earlier, on_front = [], [], None, None, None, {"points": 0, "pure": []}
    for rnd in range(1, s.rounds + 1):
        points = solve.front(problem)
        try:
            chosen = solve.pick(points, s.max_kld)
        except solve.Infeasible as exc:
            if earlier is None:  # nothing verified yet: the budget is out of the candidates' reach
                raise RunError(f"{scenario.source}: {exc}") from None
            # a refit scaled every damage up: what was verified is kept, and the file says why the rounds stopped
            stopped = (f"round {rnd}: after the refit (damages x{problem.scale:.3g}) {str(exc).split(': ', 1)[-1]}; "
                       f"the search stopped and keeps round {rnd - 1}'s front and the recipes verified so far")
            say(f"search: {stopped}")
            problem = earlier[0]
            rows, on_front = _rows(*earlier, job, rnd - 1, None, s), _on_front(*earlier)
            break
        at = points.index(chosen)
        verify = [(at, chosen)] + [(j, points[j]) for j in others(points, at, s.verify)]
        job.verify(problem, verify, rnd, method)
        m = job.measured[chosen.choice]
        ok = m.within(s.max_kld)
        factor = None if ok else solve.refit_factor(chosen.kld, m.kld, m.kld_unc, problem.fixed_kld)
        rounds.append({"round": rnd, "scale": problem.scale, "front": len(points), "pick": _point_label(problem, chosen, at, rnd),
                       "predicted_kld": chosen.kld, "measured_kld": m.kld, "measured_kld_unc": m.kld_unc,
                       "accepted": ok, "refit": factor})
        say(f"search: round {rnd}: pick {rounds[-1]['pick']} predicted {chosen.kld:.4g}, measured {m.kld:.4g} ± "
            f"{m.kld_unc:.2g} nats/token: " + ("accepted" if ok else f"its upper bound misses {s.max_kld:g}"
                                                + (f"; damages scaled by {factor:.3g}" if factor and rnd < s.rounds else "")))
        last = rnd == s.rounds or ok or factor is None
        if last:
            rows, on_front = _rows(problem, points, job, rnd, at if ok else None, s), _on_front(problem, points)
        if ok:
            accepted = chosen.choice
            break
        if factor is None:
            break
        earlier = (problem, points)
        problem = solve.refit(problem, factor)
    rows += _earlier(problem, job, rows, s)
    fallback = None
    if accepted is None:  # the fastest recipe measured within the budget, if any
        within = [(m.step_us, c) for c, m in job.measured.items()
                  if m.within(s.max_kld) and m.step_us is not None]
        if within:
            fallback = min(within)[1]
            for r in rows:
                r["pick"] = tuple(r["choice"]) == fallback
    summary = {
        "budget": {"max_kld": s.max_kld}, "m": s.m, "context": s.context, "method": method,
        "floor": floor, "units": [u.name for u in measured_problem.units], "candidates": list(problem.candidates),
        "time_us": [list(r) for r in measured_problem.time_us], "damage": [list(r) for r in measured_problem.damage],
        "damage_unc": [list(r) for r in measured_problem.damage_unc], "fixed_us": measured_problem.fixed_us,
        "fixed_kld": measured_problem.fixed_kld,
        "sources": measured_problem.sources, "rounds": rounds,
        "notes": {**measured_problem.notes, **({"rounds stopped": stopped} if stopped else {})},
        "pick": next((r["scheme"] for r in rows if r["pick"]), None),
        "pick_by": "solver" if accepted is not None else "fastest verified recipe measured within the budget"
                   if fallback is not None else None,
        "jobs_wall_s": job.walls,
        "front": on_front,  # the last front solved: its points, pure ones too (its round line's count), and those pure
    }
    if job.proof_entries:  # the pure candidates first: their steps in the recipes' run, compared by p10-p90
        pure = [recipes.entry(problem, job.candidates, problem.pure(c), label)
                for c, label in enumerate(problem.candidates)]
        summary["proof_step"] = {"why": job.elsewhere, "scenario": proof_step_scenario(scenario, job.step_doc,
                                                                                      pure + job.proof_entries, method)}
    return rows, summary, accepted is not None or fallback is not None


def _on_front(problem: Problem, points: list) -> dict:
    """The summary's ``front``: the last front's point count (its round line's, pure points included) and the pure
    candidates among its points (rows of the file as pure rows, not as front rows)."""
    return {"points": len(points), "pure": [problem.candidates[c] for c in range(len(problem.candidates))
                                            if problem.pure(c) in {p.choice for p in points}]}


def _point_label(problem: Problem, point, at: int, rnd: int) -> str:
    pure = next((problem.candidates[c] for c in range(len(problem.candidates)) if point.choice == problem.pure(c)), None)
    return pure or _label(rnd, at)


def _row(problem: Problem, choice, job: Search, rnd: int, kind: str, label: str, s, pick: bool,
         recipe: Optional[dict] = None) -> dict:
    from qbench.row import Flag

    t, d = solve.predict(problem, choice)
    m = job.measured.get(tuple(choice))
    used = recipes.counts(problem, choice)
    flags = [Flag(name="emulated", text=f"{name} ran emulated in the damage job (its dequantized weights, not its "
                                        f"kernel){'' if m is None or not m.emulated else ' and in the proof'}")
             for name in problem.emulated if name in used]
    flags += [Flag(name="few-calibration-tokens", text=f"{name} in the damage job: {text}")
              for name, text in problem.few_tokens.items() if name in used]
    entry = recipe if recipe is not None else (recipes.entry(problem, job.candidates, choice, m.label if m else label)
                                               if m is not None or pick else None)
    row = SearchRow(scheme=label, kind=kind, round=rnd, m=s.m, context=s.context, predicted_us=t, predicted_kld=d,
                    predicted_kld_unc=_unc(problem, choice), choice=list(choice), counts=recipes.counts(problem, choice),
                    recipe=entry, measured=m, within_budget=None if m is None else m.within(s.max_kld),
                    pick=pick, flags=flags)
    return row.model_dump(mode="json")


def _rows(problem: Problem, points: list, job: Search, rnd: int, pick_at: Optional[int], s) -> list[dict]:
    out = []
    for c, label in enumerate(problem.candidates):
        out.append(_row(problem, problem.pure(c), job, rnd, "pure", label, s, False))
    for i, p in enumerate(points):
        label = _point_label(problem, p, i, rnd)
        if p.choice in [problem.pure(c) for c in range(len(problem.candidates))]:
            if i == pick_at:
                next(r for r in out if r["scheme"] == label)["pick"] = True
            continue
        out.append(_row(problem, p.choice, job, rnd, "front", label, s, i == pick_at))
    return out


def _earlier(problem: Problem, job: Search, rows: list[dict], s) -> list[dict]:
    """Recipes verified in earlier rounds that the last front does not hold (their predictions at
    the last round's scale): every measurement stays in the file."""
    shown = {tuple(r["choice"]) for r in rows}
    return [_row(problem, c, job, job.round_of[c], "front", m.label, s, False)
            for c, m in job.measured.items() if c not in shown and c in job.round_of]


def run(scenario: Any, *, device: Optional[str] = None, out: Optional[str] = None, force: bool = False,
        progress: Optional[Callable[[str], None]] = None, show_bar: bool = False, resume: bool = False, **_: Any):
    """:func:`qbench.runner.run` for a search scenario: claims the output as every run does, runs
    :func:`search`, writes the one result file (:func:`qbench.lifecycle.finish`). Exit code 1 when
    no pick was accepted. A refusal (the budget below the noise floor, no feasible recipe, files
    that do not make a problem) writes nothing: one line, exit 2.

    Raises:
        RunError: ``--resume`` (a search is one pipeline: re-run it), and the refusals above."""
    from qbench.lifecycle import RunError, RunOutcome, finish, prepare

    if resume:
        raise RunError("--resume: a search runs its jobs as one pipeline and keeps no partial rows; run it again")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    dev, output, doc = prepare(scenario, device, out, force)
    work = Path(tempfile.mkdtemp(prefix="qbench-search-"))
    try:
        rows, summary, picked = search(scenario, str(dev), work, say)
    except ProblemError as exc:
        _discard(output)
        raise RunError(str(exc)) from None
    except BaseException:
        _discard(output)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = thin(rows, FRONT_ROWS)
    summary["front"].update(rows=sum(r["kind"] == "front" for r in rows), kept=THINNED)
    doc["rows"], doc["search"] = rows, summary
    outcome = finish(doc, output, started, force=force)
    if "proof_step" in summary:
        written = write_proof_step(summary["proof_step"]["scenario"], Path(outcome.path))
        say(f"search: the verified recipes' step times are not measured here: run `python -m qbench run {written}` "
            f"where {scenario.search.speed} was timed")
    if not picked:
        return RunOutcome(outcome.doc, outcome.path, 1, f"no recipe was proven within search.max_kld = "
                                                        f"{scenario.search.max_kld:g} in {len(summary['rounds'])} rounds")
    return outcome


def proof_step_scenario(scenario: Any, step_doc: Any, entries: list[dict], method: str) -> dict:
    """The step scenario of ``entries`` (the pure candidates, then the verified recipes) as the speed file ran its
    candidates, so the answer compares them within one run: its model
    table (a config.json or preset: seeded weights of the same shapes time the same), M, context,
    timing and the method the search reads; paths relative to the repository root (the speed file's
    ``scenario.source`` names its scenario from there)."""
    import os

    theirs = dict(step_doc.scenario or {})
    model = {k: v for k, v in (theirs.get("model") or {}).items() if v is not None}
    base = os.path.dirname(str(theirs.get("source") or ""))
    for key in ("config", "checkpoint"):
        if isinstance(model.get(key), str) and not os.path.isabs(model[key]) and (base or model[key].startswith(".")):
            model[key] = os.path.normpath(os.path.join(base, model[key]))
    s = scenario.search
    model.update({"context": [s.context], "methods": [method], "linear_sum": True})
    return {"name": f"{scenario.name[:40]}-proof-step", "description": f"{scenario.name}: the verified recipes' step "
            f"times, on the machine of its speed file", "seed": theirs["seed"] if "seed" in theirs else scenario.seed, "device": "auto",
            "m": [s.m], "model": model, "timing": {k: v for k, v in (theirs.get("timing") or {}).items() if v is not None},
            "schemes": entries}


def write_proof_step(data: dict, result: Path) -> Path:
    """Writes :func:`proof_step_scenario`'s table as ``<result stem>.proof-step.toml`` beside the
    result, its relative paths rebased from the repository root to that folder; returns the path."""
    import os

    from qbench.search.snippet import toml_entry, toml_key, toml_value

    model = dict(data["model"])
    for key in ("config", "checkpoint"):
        if isinstance(model.get(key), str) and not os.path.isabs(model[key]):
            model[key] = os.path.relpath(os.path.abspath(model[key]), result.parent.resolve())
    path = result.with_name(result.stem + ".proof-step.toml")
    lines = ["# Written by the search " + result.name + ": run it where its speed file was timed.",
             *(f"{toml_key(k)} = {toml_value(data[k])}" for k in ("name", "description", "seed", "device", "m")), "",
             "[model]", *(f"{toml_key(k)} = {toml_value(v)}" for k, v in model.items()), "",
             "[timing]", *(f"{toml_key(k)} = {toml_value(v)}" for k, v in data["timing"].items())]
    for entry in data["schemes"]:
        lines += ["", toml_entry(entry).rstrip()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


#: Front points a search file keeps as rows besides the pure, verified and picked ones: an 8B-shaped
#: front holds ~10^4 points (7.5 MB of rows); the file keeps the unit matrices, from which
#: :func:`qbench.search.solve.front` gives every point again.
FRONT_ROWS = 200
THINNED = (f"every pure, verified and picked row; of the other front points at most {FRONT_ROWS}, evenly spaced by "
           "predicted time (the document's unit matrices give the whole front again)")


def thin(rows: list[dict], keep: int) -> list[dict]:
    """``rows`` with every pure, measured or picked row, and at most ``keep`` of the other front
    rows, evenly spaced in predicted time (first and last kept); order preserved."""
    rest = sorted((i for i, r in enumerate(rows) if r["kind"] == "front" and r.get("measured") is None
                   and not r.get("pick")), key=lambda i: rows[i]["predicted_us"])
    if len(rest) <= keep:
        return rows
    chosen = {rest[round(j * (len(rest) - 1) / (keep - 1))] for j in range(keep)}
    return [r for i, r in enumerate(rows) if i in chosen or i not in set(rest)]


def _discard(output) -> None:
    """Nothing written: the partial file the run's start wrote removed, the output released."""
    try:
        output.partial.unlink()
    except FileNotFoundError:
        pass
    output.release()


def blank_rows(scenario: Any, entry: Any, scheme: Any, device: Any) -> list[dict]:
    """A search has no rows per scheme entry (its rows are recipes the pipeline writes): none."""
    return []


def measure(scenario: Any, entry_index: int, device: Any, ceilings: Any, shared_dir: Any) -> list[dict]:
    """A search is never measured scheme by scheme in a worker: :func:`run` replaces the runner and
    runs the quality and step jobs, whose workers measure."""
    raise RuntimeError("a search scenario runs through qbench.search.pipeline.run, not a scheme worker")
