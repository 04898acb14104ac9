"""What ``qbench run`` and ``qbench report`` show of a search result: its points (pure candidates,
front recipes) with predicted beside measured, the pick, and where each half comes from.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qbench.judge import incomplete_warning, pick_within_noise, verdict
from qbench.model.recipe import identity_key
from qbench.readers.common import DEFAULT_BASELINE, Refused, refuse_options
from qbench.render import DATA_FORMATS, Column, prose, render, wants_prose
from qbench.render.columns import DASH
from qbench.render.safe import visible


def _pm(value: Optional[float], unc: Optional[float]) -> str:
    return DASH if value is None else f"{value:.4g} ± {unc:.2g}"


def _measured(r, key: str) -> Any:
    return None if r.measured is None else getattr(r.measured, key)


def summary_of(doc) -> dict:
    """The ``search`` summary a search file holds beside its rows (``{}`` without one), unchecked (:func:`checked`)."""
    return (doc.model_extra or {}).get("search") or {}


class _Budget(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False)
    max_kld: float = Field(gt=0)


class Summary(BaseModel):
    """What the readers print of a search file's ``search`` summary (the rest is kept as written)."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    budget: _Budget
    m: int = Field(gt=0)
    context: int = Field(gt=0)
    method: str
    fixed_kld: Optional[float] = Field(default=None, ge=0)  # the rest's damage, in the 'predicted KLD' line


def checked(doc, path: str) -> dict:
    """``doc``'s ``search`` summary, refused (:class:`Refused`, one line naming ``path`` and the key) when what the
    readers print of it is missing or not a value of its kind, or when its pick row is not a pick the search proved:
    at most one row picked, and that one ok, run whole and within the budget by its measured KLD's upper bound."""
    s = summary_of(doc)
    try:
        Summary.model_validate(s)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        raise Refused(f"{path}: search.{where}: {e['msg']} (got {e.get('input')!r}); a search file's summary is "
                      "written by qbench run of a [search] scenario") from None
    picks = [r for r in doc.rows if r.pick]
    if len(picks) > 1:
        raise Refused(f"{path}: {len(picks)} rows are marked pick ({', '.join(r.scheme for r in picks)}): a search "
                      "picks one recipe; the file is damaged or edited")
    budget, pick = s["budget"]["max_kld"], picks[0] if picks else None
    m = pick.measured if pick is not None else None
    why = (None if pick is None else f"its status is {pick.status}" if pick.status != "ok" else
           "it was not run whole (no measured KLD)" if m is None else
           f"its measured KLD {m.kld:.4g} ± {m.kld_unc:.2g} is not within max mean KLD {budget:g}"
           if not (pick.within_budget and m.within(budget)) else None)
    if why:
        raise Refused(f"{path}: the pick row {pick.scheme!r} is not a pick the search proved ({why}); the file is "
                      "damaged or edited")
    return s


def _counts(r) -> str:
    return ", ".join(f"{k} {v}" for k, v in r.counts.items())


#: The search table's columns (a record is a :class:`qbench.search.row.SearchRow`).
COLUMNS = [
    Column("scheme", "recipe", lambda r: r.scheme + (" (pick)" if r.pick else "")),
    Column("kind", "kind", lambda r: r.kind),
    Column("round", "round", lambda r: r.round, numeric=True),
    Column("counts", "units per scheme", _counts, width=40),
    Column("predicted_us", "predicted µs", lambda r: r.predicted_us, ",.1f"),
    Column("step_us", "measured µs", lambda r: _measured(r, "step_us"), ",.1f"),
    Column("predicted_kld", "predicted KLD", lambda r: r.predicted_kld,
           cell_override=lambda r: _pm(r.predicted_kld, r.predicted_kld_unc)),
    Column("kld", "measured KLD", lambda r: _measured(r, "kld"),
           cell_override=lambda r: _pm(_measured(r, "kld"), _measured(r, "kld_unc"))),
    Column("within_budget", "within budget", lambda r: r.within_budget,
           cell_override=lambda r: DASH if r.within_budget is None else "yes" if r.within_budget else "no"),
]


def lines(doc) -> list[str]:
    """The prose under the table: the budget and the pick, the floor, the rounds, the sources."""
    s = summary_of(doc)
    out = []
    budget = (s.get("budget") or {}).get("max_kld")
    pick = next((r for r in doc.rows if r.pick), None)
    if pick is not None and pick.measured is not None:
        out.append(f"pick at max mean KLD {budget:g}, M = {s.get('m')}, context {s.get('context')}: {pick.scheme} "
                   f"({s.get('pick_by')}): measured {pick.measured.kld:.4g} ± {pick.measured.kld_unc:.2g} nats/token, "
                   f"step {pick.measured.step_us:,.1f} µs by {s.get('method')}"
                   if pick.measured.step_us is not None else
                   f"pick: {pick.scheme} ({s.get('pick_by')}; proven within the budget, its speed predicted: the "
                   "verified recipes' steps are timed by the proof step, and `qbench recommend SEARCH.json "
                   "PROOF_STEP.json` answers on them)")
        if (answer := measured_answer(doc)) is not None and answer.row is not pick:
            a = answer.row
            out.append(f"answer, on the measured steps: {a.scheme}, step {a.measured.step_us:,.1f} µs, measured "
                       f"{a.measured.kld:.4g} ± {a.measured.kld_unc:.2g} nats/token: {answer.why}")
    else:
        out.append(f"no recipe was proven within max mean KLD {budget:g}")
    floor = s.get("floor")
    if floor:
        out.append(f"noise floor: {floor['scheme']} measures {floor['kld']:.4g} ± {floor['kld_unc']:.2g} nats/token "
                   "against the reference")
    for rnd in s.get("rounds") or []:
        out.append(f"round {rnd['round']} (damages x{rnd['scale']:.3g}, front of {rnd['front']}): pick {rnd['pick']} "
                   f"predicted {rnd['predicted_kld']:.4g}, measured {rnd['measured_kld']:.4g} ± "
                   f"{rnd['measured_kld_unc']:.2g}: " + ("accepted" if rnd["accepted"] else
                                                       f"missed; refit x{rnd['refit']:.3g}" if rnd["refit"] else "missed"))
    missed = [f"{r.scheme} predicted {r.predicted_us:,.0f} µs, measured {r.measured.step_us:,.0f}" for r in doc.rows
              if r.kind == "pure" and r.measured is not None and r.measured.step_us
              and abs(r.predicted_us - r.measured.step_us) > 0.25 * r.measured.step_us]
    if missed:
        out.append("warning: the cost model (the sum of separate linears' stream times plus the base's rest) misses the "
                   "measured step of a pure scheme by more than 25 %: " + "; ".join(missed) + "; predicted times do "
                   "not rank recipes here, the measured step does")
    for key, text in (s.get("sources") or {}).items():
        out.append(f"{key}: {text}")
    for label, text in (s.get("notes") or {}).items():
        out.append(f"note: {label}: {text}")
    rest = "" if s.get("fixed_kld") is None else f"the rest's damage ({s['fixed_kld']:.3g}, fixed_kld above) plus "
    out.append(f"predicted KLD: {rest}the sum of each unit's KLD measured alone (parts do not add up exactly); "
               "measured: the recipe run whole on the evaluation span")
    return out


def run_view(doc, args: argparse.Namespace) -> int:
    """``qbench run``'s and ``report``'s output for a search result: the verified points and the
    pure candidates (``--wide``: the whole front), then the prose; returns the rows shown."""
    checked(doc, "this search result")
    rows = [r for r in doc.rows if getattr(args, "wide", False) or r.kind == "pure" or r.measured is not None or r.pick]
    rows.sort(key=lambda r: (r.predicted_us, r.predicted_kld))
    print(render(rows, COLUMNS, args.format))
    if wants_prose(args.format):
        shown = prose(args.format, getattr(args, "wide", False))
        hidden = len(doc.rows) - len(rows)
        said = ([f"{hidden} front points not verified are not shown (--wide shows them)"] if hidden else []) + \
            ([kept] if (kept := kept_line(doc)) else [])
        for line in lines(doc) + said:
            print(shown(line))
    return len(rows)


def plural(n: int, word: str) -> str:
    """``1 recipe``, ``96 recipes``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def front_points(doc) -> int:
    """The front's size every reader says: the points of the last front solved, pure points on it included (the
    count its round line says, ``front of N``); a file without rounds: its summary's ``front.points``, else its
    last round's front rows."""
    s = summary_of(doc)
    rounds = s.get("rounds") or []
    if rounds and isinstance(rounds[-1].get("front"), int):
        return rounds[-1]["front"]
    return (s.get("front") or {}).get("points", len(_front_rows(doc)))


def _front_rows(doc) -> list:
    """The file's rows of mixed recipes on the last front solved (its round's ``front`` rows; the recipes verified in
    earlier rounds that it does not hold carry their own round)."""
    rounds = summary_of(doc).get("rounds") or []
    last = rounds[-1]["round"] if rounds else max((r.round for r in doc.rows), default=1)
    return [r for r in doc.rows if r.kind == "front" and r.round == last]


def _pure_on_front(doc) -> list[str]:
    """The pure schemes that are points of the last front (each a pure row of the file, not a front row): the
    summary's ``front.pure``; for a file written before it said them, the front solved again from the unit matrices
    the file keeps, at the last round's scale (:func:`qbench.search.solve.front`); [] when they cannot be read."""
    s = summary_of(doc)
    front = s.get("front") or {}
    if isinstance(front.get("pure"), list):
        return [str(x) for x in front["pure"]]
    from qbench.search import solve
    from qbench.search.problem import Problem

    try:
        scale = (s.get("rounds") or [{}])[-1].get("scale", 1.0)
        problem = Problem(tuple(s["units"]), tuple(s["candidates"]), tuple(map(tuple, s["time_us"])),
                          tuple(tuple(v * scale for v in r) for r in s["damage"]), (), float(s["fixed_us"]))
        on = {p.choice for p in solve.front(problem)}
    except (KeyError, TypeError, ValueError, IndexError):
        return []
    return [label for c, label in enumerate(problem.candidates) if problem.pure(c) in on]


def _and(names: list[str]) -> str:
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1] if names else ""


def kept_line(doc) -> Optional[str]:
    """The line saying which of the front's points the file holds as rows (None when they are all front rows): the
    mixed recipes' rows and the pure schemes on the front, which are pure rows; when the file thinned the front, how
    many it keeps."""
    front = summary_of(doc).get("front") or {}
    points, recipes, pure = front_points(doc), len(_front_rows(doc)), _pure_on_front(doc)
    if recipes + len(pure) < points:
        on = f" ({plural(recipes, 'mixed recipe')}" + (f"; {_and(pure)} as pure rows)" if pure else ")")
        return (f"the file keeps {recipes + len(pure)} of the front's {points} points as rows{on}: "
                f"{front.get('kept', '')}")
    if not pure:
        return None
    rows = f"{_and(pure)}, kept as {'a pure row' if len(pure) == 1 else 'pure rows'}"
    if not recipes:
        return f"the front's {plural(points, 'point')} {'is' if points == 1 else 'are'} {rows}"
    return f"the front's {points} points are {plural(recipes, 'mixed recipe')} and {rows}"


def _name(doc) -> str:
    return str(getattr(doc.scenario, "name", None) or "")


def _proof_name(doc) -> str:
    """The scenario name of the proof step of search ``doc``: ``<search name>-proof-step``."""
    return f"{_name(doc)[:40]}-proof-step"


def with_proof_steps(paths: list[str], docs: list) -> list[tuple[str, Any]]:
    """The search files among ``docs``, each verified recipe's step filled from a step file given beside it that ran
    the search's proof step scenario (:func:`_proof_name`: the recipes timed where the speed file was), and each pure
    scheme's from it too where it ran them (proof steps written since pure candidates lead them: one run); source noted.

    Raises:
        Refused: a file neither a search nor a step file, or a step file that is no given search's proof step."""
    searches = [(p, d) for p, d in zip(paths, docs) if d.job == "search"]
    steps = [(p, d) for p, d in zip(paths, docs) if d.job == "step"]
    others = [p for p, d in zip(paths, docs) if d.job not in ("search", "step")]
    if others:
        raise Refused(f"{others[0]}: a search file is read alone or with the step file of its proof step scenario")
    out = []
    for path, doc in searches:
        mine = [(p, d) for p, d in steps if _name(d) == _proof_name(doc)]
        if not mine:
            out.append((path, doc))
            continue
        (spath, sdoc), s = mine[0], summary_of(doc)
        rows, spread = [], {}
        for r in doc.rows:
            m = r.measured
            ran = r.kind == "pure" and m is not None and any(x.scheme == m.label and x.m == r.m and x.context == r.context
                                                            and x.status == "ok" for x in sdoc.rows)
            if m is not None and (m.step_us is None or ran):  # a pure scheme the proof step ran: its time in that run
                st = next((x for x in sdoc.rows if x.scheme == m.label and x.m == r.m and x.context == r.context), None)
                if st is not None and _recipe_key(r.recipe, st.blocks) != identity_key(st.recipe):
                    raise Refused(f"{spath}: its row {m.label!r} ran another recipe than {path}'s {m.label!r}: not "
                                  "the proof step of this run of the search (labels are places on a front)")
                us = st.step_us(s.get("method")) if st is not None and st.status == "ok" else None
                m = m.model_copy(update={"step_us": us, "step_reason": None if us is not None else
                                         f"not in {spath}" if st is None else st.reason})
                stats = st.latency_us.get(s.get("method")) if us is not None else None
                spread[m.label] = ([stats.p10, stats.p90] if stats is not None and stats.p10 is not None
                                   and stats.p90 is not None else None)
            rows.append(r.model_copy(update={"measured": m}))
        extra = dict(doc.model_extra or {})
        extra["search"] = {**s, "sources": {**(s.get("sources") or {}), "proof step": f"{spath} ({sdoc.machine})"},
                           "step_spread": spread}  # the join's, read by measured_answer; never written
        out.append((path, doc.model_copy(update={"rows": rows, **extra})))
    used = {_proof_name(d) for _, d in searches}
    for p, d in steps:
        if _name(d) not in used:
            raise Refused(f"{p}: not the proof step of a search given here (its scenario is {_name(d)!r})")
    return out


def _recipe_key(entry: Optional[dict], blocks: int) -> Optional[str]:
    """A search row's scheme entry (``name``, options, ``recipe``) as :func:`qbench.model.recipe.identity_key` of the
    step row that ran it on a model of ``blocks`` blocks (None: a plain scheme)."""
    from qbench.model.recipe import Plan, RecipeError, _choice, parse

    if not entry:
        return None
    item = {k: v for k, v in entry.items() if k not in ("label", "mode")}
    try:
        recipe = parse(item, "recipe")  # takes the recipe keys out of item
        return identity_key(Plan(_choice(item, "recipe"), blocks, recipe).identity())
    except RecipeError as exc:
        raise Refused(f"a search row's recipe is not one a scenario can hold: {exc}") from None


@dataclass(frozen=True)
class Answer:
    """The answer on the measured steps (:func:`measured_answer`).

    Attributes:
        row: the answer: a verified recipe or a pure scheme.
        solver: the search's pick (the solver's, proven within the budget by its measured KLD).
        fastest: the fastest measured within the budget; group: those tied with it within noise (itself first).
        why: one line when the answer is not the solver's pick, or was chosen among ties; else None.
        points: the labels whose step has no spread here (a median alone, compared as a point).
    """

    row: Any
    solver: Any
    fastest: Any
    group: list
    why: Optional[str]
    points: list


#: Two steps timed in different runs (a pure scheme's from the speed file, a verified recipe's from the proof step)
#: tie when within this share of the faster one: p10-p90 is one run's noise, and run-to-run scatter is larger. Project
#: choice, from the committed SmolLM2 proof step: fronts 25 and 26, predicted 0.3 µs apart, measured 21 µs (0.7 %)
#: apart in one run; the step view's LINEAR_TIE (2 %) for the same kernels timed by two workers.
CROSS_RUN_TIE = 0.02


def _run_of(r, spread: dict) -> str:
    """Which run timed a row's measured step: the joined proof step's (``proof``), else the search's own: its pure
    schemes' cost step (``pure``) or its verification step (``front``)."""
    return "proof" if r.measured.label in spread else r.kind


def same_speed(a, b, spread: dict) -> bool:
    """Whether two rows' measured steps tie: within one run by :func:`qbench.judge.verdict` (p10-p90 overlap, a median
    alone as a point), across runs within :data:`CROSS_RUN_TIE`."""
    if _run_of(a, spread) == _run_of(b, spread):
        return verdict(_reading(a, spread), _reading(b, spread)) == "same"
    ta, tb = a.measured.step_us, b.measured.step_us
    return abs(ta - tb) <= CROSS_RUN_TIE * min(ta, tb)


def _tie_words(a, b, spread: dict) -> str:
    """How two tied rows tie: ``within noise (p10-p90)`` in one run, ``within 2 %, timed in different runs`` else."""
    if _run_of(a, spread) == _run_of(b, spread):
        return "within noise (p10-p90)"
    return f"within {CROSS_RUN_TIE * 100:g} %, timed in different runs"


def _reading(r, spread: dict) -> Any:
    """A row's measured step as :func:`qbench.judge.verdict` reads it: the median, and the p10-p90 a joined proof step
    gave (``spread``: label -> [p10, p90], or None for a proof step row without them)."""
    lo, hi = spread.get(r.measured.label) or (None, None)
    return SimpleNamespace(median=r.measured.step_us, p10=lo, p90=hi)


def measured_answer(doc) -> Optional[Answer]:
    """The answer of search ``doc`` decided on its measurements, by the project's tie rule
    (:func:`qbench.judge.pick_within_noise`): among the verified recipes and the pure schemes proven within the budget
    by the search's rule (measured KLD + its uncertainty: :meth:`qbench.search.row.Measured.within`) that have a
    measured step, the fastest, and among those tied with it (:func:`same_speed`: p10-p90 overlap in one run, the
    spread a proof step file joined by :func:`with_proof_steps` gives; within :data:`CROSS_RUN_TIE` across runs) the
    lowest measured KLD (a search row has no byte count: then the lower step). A step without spread (a pure scheme's: the search file keeps
    medians) is its median alone. None when the search has no pick or its pick's step was not measured (the proof
    step file not given): the solver's pick stands, a prediction until its step is measured."""
    s = summary_of(doc)
    budget = (s.get("budget") or {}).get("max_kld")
    solver = next((r for r in doc.rows if r.pick), None)
    if solver is None or budget is None or _measured(solver, "step_us") is None:
        return None
    spread = s.get("step_spread") or {}
    cands = [r for r in doc.rows if r.status == "ok" and r.measured is not None and r.measured.step_us is not None
             and r.measured.within(budget)]
    if solver not in cands:  # a damaged file is refused by checked(); the solver's pick is always a candidate
        cands.append(solver)

    best, _, fastest, group = pick_within_noise(cands, time=lambda r: r.measured.step_us,
                                                same=lambda a, b: same_speed(a, b, spread),
                                                error=lambda r: r.measured.kld, size=lambda r: None,
                                                name=lambda r: r.scheme)
    points = [r.scheme for r in cands if not spread.get(r.measured.label)]
    us = lambda r: f"{r.measured.step_us:,.1f} µs"  # noqa: E731
    kld = lambda r: f"{r.measured.kld:.4g}"  # noqa: E731
    why = None
    if best is not solver:
        lower = f"at a lower measured KLD ({kld(best)} against {kld(solver)})"
        if solver is fastest:
            why = (f"the solver's pick {solver.scheme} measured {us(solver)}, the fastest within the budget; "
                   f"{best.scheme} ({us(best)}) ties with it {_tie_words(best, solver, spread)}, {lower}")
        else:
            why = f"the solver's pick {solver.scheme} measured {us(solver)}, " + (
                f"tied {_tie_words(solver, fastest, spread)} with {fastest.scheme} at {us(fastest)}" if solver in group
                else f"slower than {fastest.scheme} at {us(fastest)} beyond "
                     f"{_tie_words(solver, fastest, spread).removeprefix('within ')}")
            why += (f", the fastest within the budget, {lower}" if best is fastest else
                    f", the fastest within the budget; {best.scheme} ({us(best)}) ties with it "
                    f"{_tie_words(best, fastest, spread)}, at the lowest measured KLD ({kld(best)})")
    elif len(group) > 1:
        others = _and([f"{r.scheme} at {us(r)} ({_tie_words(best, r, spread)})" for r in group if r is not best])
        why = f"{best.scheme} ties with {others}, at the lowest measured KLD of them"
    return Answer(best, solver, fastest, group, why, points)


def _points_note(doc, answer: Answer) -> Optional[str]:
    """One line naming the steps the answer compared by their medians alone (no p10-p90 spread), and why each has
    none; None when every step had one."""
    if not answer.points:
        return None
    spread = summary_of(doc).get("step_spread")
    if spread is None:
        return f"steps compared by their medians alone (the search file keeps no p10-p90 spread): {_and(answer.points)}"
    label = {r.scheme: r.measured.label for r in doc.rows if r.measured is not None}
    joined = [x for x in answer.points if label.get(x) in spread]
    kept = [x for x in answer.points if x not in joined]
    said = ([f"{_and(kept)} (the search file keeps {'its' if len(kept) == 1 else 'their'} speed file's "
             f"median{'' if len(kept) == 1 else 's'}, timed in another run than the proof step's)"] if kept else []) + \
        ([f"{_and(joined)} (the proof step file has no p10-p90 for {'it' if len(joined) == 1 else 'them'})"]
         if joined else [])
    return "steps compared by their medians alone, as points: " + "; ".join(said)


def recommend_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench recommend SEARCH.json [PROOF_STEP.json]``: per file, the search's pick at its budget (M, context),
    predicted beside measured, the front it came from; the answer on the measured steps (:func:`measured_answer`: the
    pick, or a faster verified recipe or pure scheme within the budget, and why); and the answer as a scenario entry
    and a torchao call a user pastes (:func:`qbench.search.snippet.pick_lines`); ``--format json``: the pick and
    answer rows as one document.
    Returns 0 when every file has a pick, else 1.

    Raises:
        Refused: an option the search's own budget cannot honour, a damaged file (:func:`checked`), a step file that
            is not this run's proof step (:func:`with_proof_steps`), a markup format."""
    from qbench.quality.view import BUDGETS
    from qbench.search.snippet import pick_lines

    joined = with_proof_steps(paths, docs)
    for path, doc in joined:
        budget = checked(doc, path)["budget"]["max_kld"]
        said = (f"{path}: a search result, picked under its own budget (max mean KLD {budget:g}, proven by running "
                "the pick whole)")
        refuse_options(args, ("summary", "by_format", "method", "max_rel_err",
                              *(b.name for b in BUDGETS if b.name != "max_kld")), said + "; {flag} does not apply")
        if getattr(args, "max_kld", None) not in (None, budget):
            raise Refused(f"{said}; --max-kld {args.max_kld:g} needs a search at that budget: set budget.max_kld in "
                          "its [search] table and run it")
        if getattr(args, "baseline", DEFAULT_BASELINE) != DEFAULT_BASELINE:
            raise Refused(said + "; --baseline does not apply (its pure candidates are its baselines)")
    if args.format == "json":
        keys = ("budget", "m", "context", "method", "pick_by", "front", "sources")
        out = []
        for path, doc in joined:
            answer = measured_answer(doc)
            out.append({"file": path, "search": {k: summary_of(doc).get(k) for k in keys},
                        "pick": next((r.model_dump(mode="json") for r in doc.rows if r.pick), None),
                        "answer": None if answer is None else answer.row.model_dump(mode="json"),
                        "answer_why": None if answer is None else answer.why})
        print(json.dumps(out if len(out) > 1 else out[0], indent=2, ensure_ascii=False))
        return 0 if all(o["pick"] for o in out) else 1
    if not wants_prose(args.format):
        raise Refused(f"{paths[0]}: a search's recommend is text or --format json, not {args.format}")
    status = 0
    for path, doc in joined:
        s = summary_of(doc)
        pure = sum(r.kind == "pure" for r in doc.rows)
        verified = [r for r in doc.rows if r.measured is not None]
        print(f"{path}: max mean KLD {(s.get('budget') or {}).get('max_kld', 0):g} at M = {s.get('m')}, context "
              f"{s.get('context')}: a front of {plural(front_points(doc), 'point')} (the last round's, pure schemes on "
              f"it included), {plural(pure, 'pure scheme')}, {len(verified)} run whole by the quality job")
        pick = next((r for r in doc.rows if r.pick), None)
        if pick is None:
            print("  no recipe was proven within the budget")
            status = 1
            continue
        m = pick.measured
        step = DASH if m is None or m.step_us is None else f"{m.step_us:,.1f} µs ({s.get('method')})"
        why = "" if m is None or m.step_us is not None else f"; step not measured here: {m.step_reason}"
        answer = measured_answer(doc)
        moved = answer is not None and answer.row is not pick
        head = "the search's pick" if moved else "pick"
        print(f"  {head}: {pick.scheme} ({_counts(pick)}), by {s.get('pick_by')}")
        print(f"  predicted {pick.predicted_us:,.1f} µs, KLD {_pm(pick.predicted_kld, pick.predicted_kld_unc)}; measured "
              f"step {step}, KLD {_pm(_measured(pick, 'kld'), _measured(pick, 'kld_unc'))}{why}")
        if (s.get("sources") or {}).get("proof step"):
            print(f"  the verified recipes' steps: {s['sources']['proof step']}")
        if answer is None and m is not None and m.step_us is None:
            print("  not an answer yet: its speed is predicted; the answer is decided on the measured steps, given the "
                  "proof step's file: qbench recommend SEARCH.json PROOF_STEP.json")
        if moved:
            a = answer.row
            print(f"  answer, on the measured steps: {a.scheme} ({_counts(a)}): measured step {a.measured.step_us:,.1f} "
                  f"µs, KLD {_pm(a.measured.kld, a.measured.kld_unc)} (predicted {a.predicted_us:,.1f} µs, KLD "
                  f"{_pm(a.predicted_kld, a.predicted_kld_unc)})")
        for said in (answer.why, _points_note(doc, answer)) if answer is not None else ():
            if said:
                print(f"  {'why' if said is answer.why else 'note'}: {said}")
        chosen = answer.row if answer is not None else pick
        if (line := _against_pure(doc, chosen, (s.get("budget") or {}).get("max_kld"))) is not None:
            print(line)
        for line in pick_lines(doc, chosen, "answer" if moved else "pick"):
            print(("  " + line) if line else "")
    return status


def _against_pure(doc, pick, max_kld: Optional[float]) -> Optional[str]:
    """The answer's measured step beside the fastest pure scheme measured within the budget (None without both, or
    when the answer is that scheme), and whether the two tie within noise (:func:`qbench.judge.verdict`)."""
    pures = [r for r in doc.rows if r.kind == "pure" and _measured(r, "step_us") and _measured(r, "kld") is not None
             and max_kld is not None and r.measured.within(max_kld)]  # the search's own rule
    if not pures or not _measured(pick, "step_us"):
        return None
    best = min(pures, key=lambda r: r.measured.step_us)
    if best is pick:
        return None
    spread = summary_of(doc).get("step_spread") or {}
    ratio = best.measured.step_us / pick.measured.step_us
    tie = same_speed(best, pick, spread)
    return (f"  the fastest pure scheme within the budget: {best.scheme}, measured step {best.measured.step_us:,.1f} "
            f"µs, KLD {_pm(_measured(best, 'kld'), _measured(best, 'kld_unc'))};\n  the {'pick' if pick.pick else 'answer'}"
            f" is {ratio:.3f}× its speed" + (f" (tied {_tie_words(best, pick, spread)})" if tie else ""))


def report_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench report SEARCH.json...``: :func:`run_view` of each file, under its path when there are several, a file
    of an interrupted run said on stderr (``recommend SEARCH.json PROOF_STEP.json`` joins a proof step file).

    Raises:
        Refused: a file of another kind, a per-layer option, several files in CSV or JSON (one document each)."""
    if (other := next((p for p, d in zip(paths, docs) if d.job != "search"), None)):
        raise Refused(f"{other}: give search files alone to report (a search's proof step: qbench recommend "
                      "SEARCH.json STEP.json)")
    refuse_options(args, ("crossover", "sort", "by_m", "method", "columns"), f"{paths[0]}: a search result; {{flag}} "
                   "reads per-layer results (--wide shows every point of the front)")
    if getattr(args, "status", "all") != "all" or getattr(args, "baseline", DEFAULT_BASELINE) != DEFAULT_BASELINE:
        raise Refused(f"{paths[0]}: a search result; --status and --baseline read per-layer results")
    if len(docs) > 1 and args.format in DATA_FORMATS:
        raise Refused(f"{args.format} holds one search result: report the files one at a time")
    for i, (path, doc) in enumerate(zip(paths, docs)):
        checked(doc, path)
        if (warning := incomplete_warning(doc, path)):
            print(warning, file=sys.stderr)
        if len(docs) > 1 and wants_prose(args.format):
            print(("\n" if i else "") + visible(f"== {path}"))
        run_view(doc, args)
    return 0


def pick_summary(paths: list[str]) -> list[str]:
    """The search's answer on both halves in two lines (the README's): the recipe (the answer on the measured steps,
    :func:`measured_answer`, where its steps were measured), its measured KLD beside the predicted one, its measured
    step beside bf16's; then how it was chosen, the front it came from and how many recipes ran whole. ``paths``: a
    search file and, optionally, its proof step file (:func:`with_proof_steps`)."""
    from qbench.results import read_results

    ((path, doc),) = with_proof_steps(paths, [read_results(p) for p in paths])
    s = checked(doc, path)
    pick = next(r for r in doc.rows if r.pick)
    answer = measured_answer(doc)
    row = answer.row if answer is not None else pick
    bf16 = next((r for r in doc.rows if r.kind == "pure" and r.scheme == "bf16"), None)
    m, front = row.measured, front_points(doc)
    step = (f"step {m.step_us:,.0f} µs" + (f" against bf16's {bf16.measured.step_us:,.0f} µs"
                                            if bf16 and bf16 is not row and bf16.measured and bf16.measured.step_us
                                            else "")
            if m.step_us is not None else f"step not measured ({m.step_reason})")
    timed = ", steps timed where the speed file was" if len(paths) > 1 else ""
    ran = sum(r.measured is not None for r in doc.rows)
    if answer is None:
        how = f"by the {s.get('pick_by')} from a front of {plural(front, 'point')}; {ran} recipes run whole on a held-out span"
    elif row is pick:
        how = (f"by the {s.get('pick_by')} from a front of {plural(front, 'point')}, the fastest measured within the "
               f"budget; {ran} recipes run whole on a held-out span")
    else:
        fastest, by = answer.fastest, f"{s.get('pick_by')}'s pick {pick.scheme}"
        words = _tie_words(row, fastest, summary_of(doc).get("step_spread") or {})
        said = (f"fastest measured within the budget ({by}: {pick.measured.step_us:,.0f} µs)" if row is fastest else
                f"tied with the {by}, the fastest measured within the budget ({fastest.measured.step_us:,.0f} µs, "
                f"{words}), at a lower KLD" if fastest is pick else
                f"tied with the fastest measured within the budget ({fastest.scheme}: {fastest.measured.step_us:,.0f} "
                f"µs, {words}) at a lower KLD ({by}: {pick.measured.step_us:,.0f} µs)")
        how = f"{said}; {ran} of a front of {plural(front, 'point')} run whole on held-out text"
    return [f"max mean KLD {s['budget']['max_kld']:g} at M = {s['m']}, context {s['context']}: **{row.scheme}** "
            f"({_counts(row)}): measured KLD {m.kld:.3g} ± {m.kld_unc:.1g} (predicted {row.predicted_kld:.3g}), "
            f"{step}", how + timed]
