"""The model-step job's views in the reader commands (``run``, ``report``, ``recommend``, ``model``, ``plot``,
``compare``), registered in the step record's ``views`` (:mod:`qbench.jobs`): ``(args, paths, docs) -> exit status``
(``run``'s: ``(doc, args) -> rows shown``; ``compare``'s: :data:`COMPARE`, what compare reads of step rows); a
refusal raises :class:`qbench.readers.common.Refused`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qbench import judge
from qbench.judge import decision_method
from qbench.readers.compare import CompareKind, why_untimed
from qbench.readers.common import (ACT_ON, Refused, Table, one_chart, check_baseline, incomplete_notes, one_machine,
                                   one_result, refuse_budgets, refuse_options, run_copies, show_table)
from qbench.render import narrow, prose, synthetic_warnings, wants_prose
from qbench.render.view import show
from qbench.render.safe import visible
from qbench.render.styles import OUTSIDE, plain, pyplot, save, scheme_styles
from qbench.row import kv_cache_kind
from qbench.results import ResultDoc
from qbench.step import view as step_view
from qbench.timing import registry

__all__ = ["COMPARE", "disagreements", "model_view", "plot_context", "plot_view", "recommend_view", "report_view", "run_view"]


def _one_kind(paths: list[str], docs: list[ResultDoc]) -> None:
    """Refuse model-step files given with files of another kind."""
    if any(doc.job != "step" for doc in docs):
        raise Refused("give per-layer files or model-step files, not both: "
                      + ", ".join(f"{p} ({d.job})" for p, d in zip(paths, docs)))


def _table(doc: ResultDoc, rows: list, args: argparse.Namespace) -> Table:
    """The step table of ``rows`` of ``doc`` with its lines and notes."""
    baseline, wide = getattr(args, "baseline", "bf16"), getattr(args, "wide", False)
    records = step_view.table_records(rows, baseline)
    return Table(step_view.table_view(rows, baseline), records, step_view.describe(doc),
                 step_view.table_notes(rows, records, not narrow(args.format, wide)))


def run_view(doc: ResultDoc, args: argparse.Namespace) -> int:
    """``qbench run``'s table of a model-step run; returns the rows shown."""
    return show_table(args, doc, _table(doc, doc.rows, args))


def report_view(args: argparse.Namespace, paths: list[str], docs: list[ResultDoc]) -> int:
    """``qbench report STEP.json``: the step table in file order (``--by-m``: by M and context)."""
    result = one_result(paths, docs)
    refuse_options(args, ("crossover", "sort", "method"), result.label + ": a model-step result; {flag} reads "
                   "per-layer results (qbench model shows the context sweep)")
    if isinstance(args.by_m, str):  # a column (a bare --by-m is the table by M)
        raise Refused(f"{result.label}: a model-step result; --by-m takes no column for it (the step table, by M)")
    rows = [r for r in result.doc.rows if args.status == "all" or r.status == "ok"]
    if args.by_m is not None:  # stable: file order within an (M, context)
        rows = sorted(rows, key=lambda r: (r.m, r.context))
    show_table(args, result.doc, _table(result.doc, rows, args), result.label)
    return 0


def recommend_view(args: argparse.Namespace, paths: list[str], docs: list[ResultDoc]) -> int:
    """``qbench recommend STEP.json --max-rel-err X``: per file, the :func:`qbench.step.view.recommend` picks and
    notes; several files: whether the picks hold. Returns 0 when some (M, context) has a pick, else 1."""
    _one_kind(paths, docs)
    refuse_budgets(args)
    refuse_options(args, ("summary", "by_format", "method"), "{flag} reads per-layer files; a model-step file has "
                   "one view (the fastest step per M and context)")
    if args.max_rel_err is None:
        raise Refused("--max-rel-err is required (e.g. 0.05: the step's logits error against the FP32 step)")
    records = []
    for path, doc in zip(paths, docs):
        if not any(r.scheme in (args.baseline, f"{args.baseline}+compiled") for r in doc.rows):
            raise Refused(f"{path}: --baseline {args.baseline}: no row is {args.baseline} or {args.baseline}+compiled "
                          f"(schemes: {', '.join(sorted({r.scheme for r in doc.rows}))})")
        rec = step_view.recommend(doc.rows, args.max_rel_err, args.baseline)
        records.append((path, doc, _with_stability(rec, doc.rows, args.max_rel_err, args.baseline)))
    status = 0 if any(r["pick"] for _, _, rec in records for r in rec) else 1
    if args.format == "json":
        out = [{"file": path, "model": doc.rows[0].model, "max_rel_err": args.max_rel_err, "by_m_context": rec}
               for path, doc, rec in records]
        print(json.dumps(out if len(out) > 1 else out[0], indent=2, ensure_ascii=False))
        return status
    wide, view = getattr(args, "wide", False), step_view.recommend_view(args.baseline)
    methods = ", else ".join(step_view.SHORT[m] for m in step_view.DECISION_ORDER)
    for i, (path, doc, rec) in enumerate(records):
        rows = doc.rows
        if len(records) > 1:
            print(("\n" if i else "") + visible(f"== {path}"))
        said = (f"{rows[0].title} ({rows[0].model}), decode step: the fastest step (or one tied with it within noise, "
                f"named under the table) whose logits error against the FP32 step is ≤ {args.max_rel_err:g} "
                f"(error.rel_fro), per M and context; step method: {methods}"
                .replace("(r-o)", "(r-o: torch.compile reduce-overhead in a decode loop)")
                + f"; ×{args.baseline} = {args.baseline} step / this step (a compiled scheme against "
                f"{args.baseline}+compiled); within: how many timed schemes are within the budget")
        show(rec, view.columns(args.format, wide), args.format, wide=wide,
             describe=[said, *step_view.kv_line(rows), *synthetic_warnings(rows, step=True)],
             notes=[*step_view.pick_notes(rec, rows), *_stability_line(rec)])
    if len(records) > 1 and wants_prose(args.format):
        print("\n" + prose(args.format, wide)(visible(_across_files(records))))
    return status


def _with_stability(rec: list[dict], rows: list, max_rel_err: float, baseline: str) -> list[dict]:
    """``rec`` with each pick's ``stability`` when the file holds ``qbench run --repeat`` runs: the pick of each run
    (every row at that run's medians, :func:`qbench.readers.common.run_copies`) by the same rule, ``{"runs",
    "picked", "others"}`` as the layer pick's; ``rec`` unchanged with fewer than two runs."""
    copies = {r.key: run_copies(r) for r in rows}
    runs = max((len(c) for c in copies.values()), default=1)
    if runs < 2:
        return rec
    picks: dict[tuple, list] = {}
    for i in range(runs):
        for r in step_view.recommend([c[min(i, len(c) - 1)] for c in copies.values()], max_rel_err, baseline):
            picks.setdefault((r["m"], r["context"]), []).append(r["pick"] or "none")
    for r in rec:
        won = picks.get((r["m"], r["context"]), [])
        if r["pick"]:
            r["stability"] = {"runs": len(won), "picked": won.count(r["pick"]),
                              "others": {s: won.count(s) for s in dict.fromkeys(won) if s != r["pick"]}}
    return rec


def _stability_line(rec: list[dict]) -> list[str]:
    """The line under a step pick table saying how often each pick won the file's runs (none without runs)."""
    said = [f"M={r['m']} ctx={r['context']}: {r['pick']} in {st['picked']} of {st['runs']}"
            + (f" ({', '.join(f'{s} in {n}' for s, n in st['others'].items())})" if st["others"] else "")
            for r in rec if (st := r.get("stability"))]
    return [f"picked per run (qbench run --repeat: each run's medians, the same rule): {'; '.join(said)}"] if said else []


#: What two step files of one model can differ in besides the schemes' speed: a name and each file's value.
_FILE_FACTS = (("machines", lambda d: d.machine),
               ("scheme sets", lambda d: frozenset(r.scheme for r in d.rows)),
               ("weights", lambda d: frozenset(f"checkpoint {r.checkpoint_id[:12]}" if r.checkpoint_id else r.weight_source
                                               for r in d.rows)),  # by content: one checkpoint under two paths is one
               ("LM heads", lambda d: frozenset(r.lm_head for r in d.rows)),
               ("KV caches", lambda d: frozenset(kv_cache_kind(r.kv_cache) for r in d.rows)),
               ("attention kernels", lambda d: frozenset(str((r.attention or {}).get("kernel") or "not recorded")
                                                         for r in d.rows)))


def differences(docs: list[ResultDoc]) -> dict[str, list]:
    """What the step files ``docs`` differ in (:data:`_FILE_FACTS`): name -> each file's value, only where they differ."""
    out = {}
    for what, key in _FILE_FACTS:
        values = [key(doc) for doc in docs]
        if len(set(values)) > 1:
            out[what] = values
    return out


def _across_files(records: list[tuple[str, ResultDoc, list[dict]]]) -> str:
    """The line under several step files: whether each pick holds (:func:`qbench.judge.pick_stability`); a change is
    run-to-run variation only for runs of one scenario, else the line names what differs."""
    paths = [Path(path).resolve() for path, _, _ in records]
    if len(set(paths)) < len(paths):
        return "picks across files: not compared, the same file is given more than once"
    models = sorted({r.model for _, doc, _ in records for r in doc.rows})
    if len(models) != 1:
        return f"picks across files: not compared, the files hold different models ({', '.join(models)})"
    differ = list(differences([doc for _, doc, _ in records]))
    stable, n = judge.pick_stability([rec for _, _, rec in records]), len(records)
    said = [f"M={s['m']} ctx={s['context']}: " + (f"{s['picks'][0] or 'none'} in {'both' if n == 2 else f'all {n}'}"
            if s["holds"] else "differ (" + ", ".join(f"{p or 'none'} in file {i + 1}"
                                                      for i, p in enumerate(s["picks"])) + ")") for s in stable]
    partial = sorted({(r["m"], r["context"]) for _, _, rec in records for r in rec}
                     - {(s["m"], s["context"]) for s in stable})
    moved = sum(not s["holds"] for s in stable)
    why = (f"; the files differ in {' and '.join(differ)}: a changed pick may come from that, not from run-to-run "
           "variation" if differ else f"; {moved} of {len(stable)} picks change between files: there the difference "
           "is within the step's run-to-run variation, whatever one file's p10–p90 says" if moved else "")
    return (f"picks across the {n} files of {models[0]}" + ("" if differ else " (runs of one scenario)") + ": "
            + "; ".join(said) + why
            + (f"; in only some files: {', '.join(f'M={m} ctx={c}' for m, c in partial)}" if partial else ""))


#: How much larger the measured pick's Σ linear must be than the least Σ linear before the two answers are said to
#: differ: the same kernels timed by two workers (bf16 eager and compiled) differ by a few tenths of a percent.
LINEAR_TIE = 0.02


def disagreements(records: list[dict]) -> list[dict]:
    """The (M, context) where the fastest step and the fastest Σ linear within the budget differ: ``{"m", "context",
    "step", "linear"}`` each; not where the step's pick has a Σ linear within :data:`LINEAR_TIE` of the least."""
    out = []
    for m, context in dict.fromkeys((r["m"], r["context"]) for r in records):
        both = [r for r in records if (r["m"], r["context"]) == (m, context) and not r.get("over_budget")
                and r["step_us"] is not None and r["linear_us"] is not None]
        if len(both) < 2:
            continue
        step = min(both, key=lambda r: r["step_us"])
        linear = min(both, key=lambda r: r["linear_us"])
        if step["linear_us"] > linear["linear_us"] * (1 + LINEAR_TIE):
            out.append({"m": m, "context": context, "step": step["scheme"], "linear": linear["scheme"]})
    return out


def model_view(args: argparse.Namespace, paths: list[str], docs: list[ResultDoc]) -> int:
    """``qbench model NAME STEP.json...``: the measured step beside Σ linear and the speed-up over ``--baseline``,
    then the context sweep. Returns 0 when some scheme has a step, else 1."""
    _one_kind(paths, docs)
    if args.method is not None:
        raise Refused("--method reads per-layer files; a model-step file's step methods are all shown")
    one_machine(paths, docs)
    rows = []
    for path, doc in zip(paths, docs):
        mine = [r for r in doc.rows if args.name in (r.model, r.title)]  # a config path's model by its title too
        if not mine:
            held = ", ".join(sorted({f"{r.model} (title {r.title})" if r.model.endswith(".json") else r.model
                                     for r in doc.rows}))
            raise Refused(f"{path}: a model-step result of {held}, not of {args.name}")
        rows += mine
    if (twice := step_view.repeated(paths, docs)):
        path, r, earlier = twice
        raise Refused(f"{path}: {r.scheme} at M={r.m}, context {r.context} is in {earlier} too: qbench model reads "
                      "one run per row; to compare runs of one scenario use qbench recommend A.json B.json")
    check_baseline(paths, {r.scheme.replace("+compiled", "") for r in rows}, args.baseline)
    notes_ = incomplete_notes(paths, docs, getattr(args, "allow_incomplete", False) and wants_prose(args.format))
    records = step_view.model_records(rows, args.baseline)
    row_of = {(r.scheme, r.m, r.context): r for r in reversed(rows)}  # a record's row (the first)
    for rec in records:
        rec["rel_fro"] = err = step_view.logits_error(row_of[rec["scheme"], rec["m"], rec["context"]])
        rec["over_budget"] = args.max_rel_err is not None and (err is None or err > args.max_rel_err)
    sweep, status = step_view.sweep(rows, args.baseline), 0 if any(r["step_us"] is not None for r in records) else 1
    if args.format == "json":
        print(json.dumps({"model": args.name, "baseline": args.baseline, "rows": records, "sweep": sweep,
                          "notes": notes_}, indent=2, ensure_ascii=False))
        return status
    wide = getattr(args, "wide", False)
    doubts = dict(zip(((r.scheme, r.m, r.context) for r in rows), step_view.doubtful(rows, args.baseline)))
    for rec in records:
        rec["_doubt"] = doubts[(rec["scheme"], rec["m"], rec["context"])]
    view = step_view.model_view(records, args.baseline, args.max_rel_err)
    b, methods = args.baseline, "/".join(step_view.SHORT[m] for m in step_view.DECISION_ORDER)
    describe = [f"{rows[0].title} ({args.name}): the measured decode step (qbench.step) beside the linear-only "
                "prediction", *step_view.kv_line(rows), *synthetic_warnings(rows, step=True)]
    disagree = disagreements(records)
    if disagree:
        first = disagree[0]
        describe.append(f"the measured step and Σ linear name different fastest schemes ({len(disagree)} of "
                        f"{len({(r['m'], r['context']) for r in records})} (M, context); M={first['m']} "
                        f"context={first['context']}: {first['step']} measured, {first['linear']} by Σ linear); "
                        + ACT_ON)
    wider = f"; --wide: tokens/s, Σ linear µs and ×{b} per step method" if narrow(args.format, wide) else ""
    describe.append(f"step = the {methods} step, first present (method); rest = (step - Σ linear) / step, Σ linear = "
                    f"the per-layer stream times of the same linear layers in the same run (what the layer view "
                    f"predicts); ×{b} = {b} step / this step by its method (a compiled scheme against {b}+compiled), "
                    f"×{b} Σ = as Σ linear predicts it; err = the logits' error against the FP32 step{wider}")
    notes = [*step_view.doubt_legend([r["_doubt"] for r in records]), "",
             f"context sweep: where each scheme stops beating {b} (its step no faster than {b}'s)",
             *(step_view.sweep_line(rec, b) for rec in sweep), *step_view.inductor_note(rows)]
    flags = step_view.flag_notes(rows)
    if flags:
        notes += ["", "flags (what could mislead a reader of a row): "
                  + step_view.flag_legend([name for r in rows for name in r.flag_names]), *flags]
    if negative := [r for r in rows if r.status == "ok" and r.other_us.get(decision_method(r), 0) < 0]:
        notes.append(f"note: other µs left out ({len(negative)} row(s), e.g. {negative[0].scheme} M={negative[0].m} "
                     f"context {negative[0].context}): Σ linear and the attention, each timed alone, add up to more "
                     "than the step (the file predates the split-above-step flag)")
    for scheme in sorted({r.scheme for r in rows if r.status == "ok" and decision_method(r) is None}):
        why = next((t.text for r in rows if r.scheme == scheme for t in r.latency_reasons.values()), "no step time")
        notes.append(f"note: {scheme} has no step time: {why[:160]}")
    show(records, view.columns(args.format, wide), args.format, wide=wide, describe=describe,
         notes=[*notes, *(f"note: {note}" for note in notes_)])
    return status


def plot_context(doc: ResultDoc, path: Path) -> Path:
    """Draw a model-step result into ``path``: per M, the step (decision method, ms) against the context per scheme,
    log-log, its Σ linear dashed (a compiled form: its eager colour, square markers, thicker). Returns ``path``."""
    plt = pyplot()
    rows = [r for r in doc.rows if r.status == "ok" and decision_method(r)]
    ms = sorted({r.m for r in rows})
    fig, axes = plt.subplots(1, max(1, len(ms)), figsize=(6.5 * max(1, len(ms)), 5.5), squeeze=False)
    schemes = list(dict.fromkeys(r.scheme for r in rows))
    compiled = {r.scheme: r.mode == "compiled" for r in rows}
    colours, _ = scheme_styles([s.replace("+compiled", "") for s in schemes], [])
    colour = {s: colours[s.replace("+compiled", "")] for s in schemes}  # x+compiled and x+compiled[opts] alike
    # (colour, marker) unique per scheme: a compiled form squares, then the next shape two schemes share
    style, used = {}, set()
    for scheme in schemes:
        shapes = ("s", "P", "X", "h", "*") if compiled[scheme] else ("o", "^", "v", "D", "<")
        style[scheme] = next((mk for mk in shapes if (colour[scheme], mk) not in used), shapes[0])
        used.add((colour[scheme], style[scheme]))
    for ax, m in zip(axes[0], ms):
        for scheme in schemes:
            pts = sorted((r.context, r.step_us(decision_method(r)) / 1000, (r.linear or {}).get("sum_us"))
                         for r in rows if r.m == m and r.scheme == scheme)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=style[scheme], ls="-", color=colour[scheme],
                    lw=2.2 if compiled[scheme] else 1.2, label=plain(scheme))
            linear = [p[2] for p in pts if p[2] is not None]
            if linear:
                ax.axhline(linear[0] / 1000, color=colour[scheme], ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set(yscale="log", xlabel="context (cached positions)", ylabel="step, ms (dashed: Σ linear, the layer view)",
               title=f"M = {m}")
        ax.grid(True, which="both", alpha=0.2)
    title = rows[0].title if rows else (doc.scenario.name or "")
    fig.suptitle(plain(f"{title}: the measured decode step against the context"))
    if rows:
        from matplotlib.lines import Line2D
        handles, _ = axes[0][-1].get_legend_handles_labels()
        handles.append(Line2D([], [], color="grey", ls="--", lw=0.8, label="dashed: Σ linear (the layer view)"))
        axes[0][-1].legend(handles=handles, **OUTSIDE)
    fig.tight_layout()
    return save(fig, path)


def plot_view(args: argparse.Namespace, paths: list[str], docs: list[ResultDoc]) -> int:
    """``qbench plot STEP.json -o FILE``: :func:`plot_context` of the one file (``--what`` and ``--method``, a
    per-layer result's options, refused)."""
    refuse_options(args, ("what", "method"), f"{paths[0]}: a model-step result has one chart (the step against the "
                   "context, each row by its own step method); {flag} applies to per-layer results")
    (doc,) = docs
    return one_chart(args, lambda out: plot_context(doc, out))


def _pair_method(a, b, _files: str) -> str | None:
    """The first step method of the decision order (compiled, graph, cpu, loop) both rows of a pair have, else the
    first either has, else the first either row names without a time (a capture that failed: the note says why, not
    'no step_compiled latency' of a method the row never ran), else None (failed rows with no reading at all)."""
    order = registry.decision_order("step")
    rows = [r for r in (a, b) if r is not None]
    both = next((m for m in order if all(r.stats(m) is not None for r in rows)), None)
    named = next((m for m in order if any(m in r.latency_us or m in r.latency_reasons for r in rows)), None)
    return both or next((m for r in rows if (m := decision_method(r))), named)


def _lost(a, b, pair: str | None) -> str | None:
    """``B: no step_compiled (why)`` when A had a step method earlier in the decision order than the pair's, which B
    has no time for (a compile or a capture that fails in B): the pair is read by a lesser method, and the table
    would not say why."""
    order = registry.decision_order("step")
    for m in order[:order.index(pair)] if pair in order else ():
        if a.stats(m) is not None and b.stats(m) is None:
            return f"B: no {m} ({why_untimed(b, m)})"
    return None


def _one_model(a: ResultDoc, b: ResultDoc) -> str | None:
    """A refusal when A's and B's steps are of different models (their steps compare models, not schemes); a side
    without rows (a run interrupted before its first) is of no model: compare says no row is in common. Models are
    told apart by the checkpoint's content identity where every row has one (one checkpoint under two relative
    paths is one model), else as written."""
    ids = [{r.checkpoint_id for r in doc.rows} for doc in (a, b)]
    if all(ids) and None not in ids[0] | ids[1]:
        return None if ids[0] == ids[1] else (
            f"A's steps are of checkpoint {', '.join(sorted(i[:12] for i in ids[0]))} and B's of "
            f"{', '.join(sorted(i[:12] for i in ids[1]))} (content identities): compare reads one model's steps on "
            "both sides")
    ma, mb = ({r.model for r in doc.rows} for doc in (a, b))
    if ma and mb and ma != mb:
        return (f"A's steps are of {', '.join(sorted(ma))} and B's of {', '.join(sorted(mb))}: compare reads one "
                "model's steps on both sides")
    return None


def _compare_notes(a: ResultDoc, b: ResultDoc) -> list[str]:
    """The line under a step compare naming what else the two files differ in (:func:`differences`; the machines are
    compare's own warnings, the scheme sets its 'only in' rows), each side's value: the speed-ups measure that as much
    as the schemes."""
    said = {k: v for k, v in differences([a, b]).items() if k not in ("machines", "scheme sets")}  # rows say those
    if not said:
        return []
    show = lambda v: ", ".join(sorted(map(str, v))) if isinstance(v, frozenset) else str(v)  # noqa: E731
    return ["A and B differ in " + "; ".join(f"{what} (A: {show(va)}; B: {show(vb)})" for what, (va, vb) in said.items())
            + ": the speed-ups measure that as much as the schemes"]


#: What ``qbench compare`` reads of model-step rows: matched by (scheme, M, context), each pair by the first step
#: method both rows have, the logits error against the FP32 step.
COMPARE = CompareKind(identity=lambda r: {"scheme": r.scheme, "m": r.m, "context": r.context}, method=_pair_method,
                      error=step_view.logits_error, where=lambda r: f"{r['scheme']} M={r['m']} ctx={r['context']}",
                      matched_by="scheme, M, context", error_name="logits err", per_row_method=True,
                      check=_one_model, notes=_compare_notes, lost=_lost)
