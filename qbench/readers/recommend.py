"""``qbench recommend RESULT.json --max-rel-err 0.01``: which scheme to use at each M.

Per (M, K, N): the pick (the fastest ``ok`` scheme within the error budget with finite outputs, or one tied with it
within noise by :func:`qbench.judge.pick_within_noise`, whose rule docs/methodology.md states), every other scheme
with the reason it lost, and the Pareto front over (latency, rel_fro, stored bytes). ``--summary``: one line per
(file, M) against ``--baseline``; ``--by-format``: the fastest scheme of each storage format.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Optional

from qbench.judge import (DECISION_METHOD, HOST_CLOCK_METHOD, UNUSABLE, beyond, by_shape, capture_failure,
                          methods_present, pareto_front, pick_within_noise, resolve_method, row_caveats, row_verdict,
                          tie_note, unusable_note)
from qbench.readers.common import (Command, Refused, add_budgets, add_options, check_baseline, check_budgets,
                                   check_max_rel_err, group_results, job_view, open_results, refuse_budgets)
from qbench.readers.compare import why_untimed
from qbench.render import FORMATS, Column, fit, narrow, prose, render, synthetic_warnings, wants_prose
from qbench.render.columns import COLUMNS, DASH, entry, fmt_ratio, fmt_us
from qbench.render.kernels import short_kernel
from qbench.render.safe import visible
from qbench.render.view import View, show
from qbench.results import ResultDoc
from qbench.row import Row

__all__ = ["COMMAND", "DEFAULT_BUDGET", "add_stability", "by_format", "pick_lines", "stability_text", "main_kernel",
           "recommend", "render_by_format", "render_recommendation", "row_storage_format",
           "run_recommend", "summary_rows"]


def _eager_us(row: Row) -> float | None:
    stats = row.stats(HOST_CLOCK_METHOD)
    return stats.median if stats else None


def _lose_reason(row: Row, method: str, max_rel_err: float) -> str | None:
    """Why ``row`` cannot be picked at all, or None. A capture failure is quoted without its "not attempted: "
    prefix and chained "(then ...)" errors, at most 160 characters (the JSON record keeps the whole text)."""
    faults = [f.text for f in row.flags if f.name == "input-fault"]
    if faults and row.status == "ok":  # NaN/Inf or all-zero weight, activations that overflow: the input's error
        return f"the input's fault, not the scheme's (input-fault): {faults[0]}"
    uncaptured = capture_failure(row, method)
    if uncaptured:
        eager = _eager_us(row)
        why = uncaptured.removeprefix("not attempted: ").split(" (then ")[0]
        why = why if len(why) <= 160 else why[:159].rstrip() + "…"
        return f"{UNUSABLE} ({'no eager time' if eager is None else f'eager {fmt_us(eager)} µs'}): {why}"
    if row.stats(method) is None:  # not ok, or no time by the method
        return why_untimed(row, method)
    nonfinite = row.error.nonfinite if row.error is not None else None
    if nonfinite:
        return f"non-finite outputs ({nonfinite})"
    if row.rel_fro is None:
        return "no error measured"
    if row.rel_fro > max_rel_err:
        return f"over error budget (rel_fro {beyond(row.rel_fro, max_rel_err)} > {max_rel_err:g})"
    return None


def _versus(a: dict, b: dict, what: str = "") -> str:
    """``11.8 µs vs 8.78 µs (1.34×`` for points ``a`` against ``b`` (the caller closes it)."""
    us, them = a["latency_us"], b["latency_us"]
    return f"{fmt_us(us)} µs vs {fmt_us(them)} µs{what} ({us / them:.2f}×"


def recommend(doc: ResultDoc | dict, max_rel_err: float, method: str = DECISION_METHOD) -> dict:
    """The pick per (M, K, N) of ``doc`` within ``max_rel_err`` (``error.rel_fro``) by ``method``'s median (µs):
    ``{"method", "max_rel_err", "methods_present", "by_m"}``, ``by_m`` in ascending M, each ``{"m", "k", "n",
    "pick", "others", "unusable", "pareto"}``. ``pick``: None or the picked point with ``ties``,
    ``fastest_median``, ``kept_from_m`` and ``caveats``; ``others``: every other scheme's ``reason``;
    ``unusable``: the rows a CUDA graph cannot capture."""
    doc = ResultDoc.of(doc)
    by_m = []
    neighbour: dict[tuple, tuple] = {}  # (K, N, tp_size, split) -> (M, scheme picked) at the last M seen
    for (m, k, n, tp_size, split), rows in by_shape(doc.rows):
        row = {r.scheme: r for r in rows}
        reasons = [(r, _lose_reason(r, method, max_rel_err)) for r in rows]
        lost = [{"scheme": r.scheme, "reason": why} for r, why in reasons if why is not None]
        unusable = [{"scheme": r.scheme, "eager_us": _eager_us(r), "rel_fro": r.rel_fro, "reason": why}
                    for r in rows if (why := capture_failure(r, method))]
        points = [p for r in rows if (p := _point(r, method)) is not None]
        cands = sorted((_point(r, method) for r, why in reasons if why is None), key=lambda p: p["latency_us"])
        shape = (k, n, tp_size, split)
        prev_m, prev_scheme = neighbour.get(shape, (None, None))
        best, by_error, fastest, group = pick_within_noise(
            cands, time=lambda c: c["latency_us"], error=lambda c: c["rel_fro"], size=lambda c: c["stored_bytes"],
            same=lambda a, b: row_verdict(row[a["scheme"]], row[b["scheme"]], method) == "same",
            name=lambda c: c["scheme"], previous=prev_scheme)
        pick = None if best is None else dict(
            best, ties=[], fastest_median=fastest["scheme"] if best is not fastest else None,
            kept_from_m=prev_m if best is not by_error else None,
            caveats=row_caveats(row[best["scheme"]], row[best["scheme"]].stats(method)))
        neighbour[shape] = (m, pick["scheme"]) if pick else (None, None)
        for c in (c for c in cands if c is not best):
            mine, picked = row[c["scheme"]], row[pick["scheme"]]
            said = row_caveats(mine, mine.stats(method))
            caveat = f"; {c['scheme']}: {', '.join(said)}" if said else ""
            same_as_pick = row_verdict(picked, mine, method) == "same"
            if c in group:
                # tied with the fastest; when not with the pick, the comparison that made it a tie is the fastest's
                ref = picked if same_as_pick else row[fastest["scheme"]]
                between = tie_note(ref, mine, method)
                why = ("same speed within noise" if same_as_pick else f"same speed as the fastest, "
                       f"{fastest['scheme']}, within noise") + (f" ({between})" if between else "")
                if c["rel_fro"] > pick["rel_fro"]:
                    why += f", higher error (rel_fro {c['rel_fro']:.3g} vs {pick['rel_fro']:.3g})"
                elif pick["kept_from_m"] is not None:
                    why += f", {pick['scheme']} kept from M={pick['kept_from_m']}"
                versus = _versus(c, pick) if same_as_pick else _versus(c, fastest, ", the fastest")
                reason = f"{why}: {versus}, " + ("runs' medians overlap" if between else "p10–p90 overlap")
                pick["ties"].append(c["scheme"])
            elif same_as_pick:  # tied with the pick, not with the fastest: a tie is not transitive
                reason = (f"slower than the fastest, {fastest['scheme']}, beyond noise: {_versus(c, fastest)}; "
                          "the pick's own spread overlaps it")
            else:
                reason = f"slower: {_versus(c, pick)}"
            lost.append({"scheme": c["scheme"], "reason": f"{reason}{caveat})"})
        tp = {"tp_size": tp_size, "split": split} if tp_size is not None else {}
        by_m.append({"m": m, "k": k, "n": n, **tp, "pick": pick, "others": lost, "unusable": unusable,
                     "pareto": sorted(pareto_front(points), key=lambda p: p["latency_us"])})
    return {"method": method, "max_rel_err": max_rel_err, "methods_present": methods_present(doc.rows), "by_m": by_m}


def _point(row: Row, method: str) -> dict | None:
    """(latency, rel_fro, stored bytes) of an ``ok`` row with finite outputs, else None."""
    stats = row.stats(method)
    if not stats or (row.error is not None and row.error.nonfinite) or row.rel_fro is None:
        return None
    return {"scheme": row.scheme, "latency_us": stats.median, "rel_fro": row.rel_fro, "stored_bytes": row.stored_bytes}


def add_stability(rec: dict, run_recs: list[dict]) -> dict:
    """Add to every pick of ``rec`` how often it won in ``run_recs`` (:func:`recommend` of each independent run that
    has ``rec``'s method): ``pick["stability"] = {"runs", "picked", "others"}``."""
    def where(g: dict) -> tuple:
        return g["m"], g["k"], g["n"], g.get("tp_size"), g.get("split")

    run_recs = [r for r in run_recs if rec["method"] in r["methods_present"]]  # a run without the method: not one
    picks: dict[tuple, list[str]] = {}
    for run in run_recs:
        for g in run["by_m"]:
            picks.setdefault(where(g), []).append(g["pick"]["scheme"] if g["pick"] else "none")
    for g in rec["by_m"]:
        if g["pick"] is not None and len(run_recs) >= 2:
            won, mine = picks.get(where(g), []), g["pick"]["scheme"]
            g["pick"]["stability"] = {"runs": len(run_recs), "picked": won.count(mine),
                                      "others": dict(Counter(s for s in won if s != mine))}
    return rec


def stability_text(stability: dict | None) -> str:
    """``picked in 3 of 3 runs``, ``picked in 1 of 3 runs (int8-x in 2)``; ``""`` without runs."""
    if not stability:
        return ""
    others = ", ".join(f"{s} in {n}" for s, n in stability["others"].items())
    return f"picked in {stability['picked']} of {stability['runs']} runs" + (f" ({others})" if others else "")


#: The error budget ``qbench run`` answers with at its end (:func:`pick_lines`): rel_fro 1 %.
DEFAULT_BUDGET = 0.01


def pick_lines(doc: ResultDoc | dict, path: str, max_rel_err: float = DEFAULT_BUDGET) -> list[str]:
    """What ``qbench run`` prints under its table: the pick per M within ``max_rel_err`` (:func:`recommend`, the
    file's decision method), its ties and doubtful readings, and the ``qbench recommend`` command that says why;
    ``[]`` for a file without rows."""
    doc = ResultDoc.of(doc)
    if not doc.rows:
        return []
    method, _ = resolve_method(doc, None)
    rec = recommend(doc, max_rel_err, method)
    shapes = len({(g["k"], g["n"], g.get("tp_size"), g.get("split")) for g in rec["by_m"]})
    parts = []
    for g in rec["by_m"]:
        where = f"M={g['m']}" + (f" (K={g['k']}, N={g['n']})" if shapes > 1 else "")
        pick = g["pick"]
        if not pick:
            parts.append(f"{where} none within the budget")
            continue
        # a faster median among the tied is named, or the pick reads as a mistake beside the table
        fastest = pick.get("fastest_median")
        tie = ("; as fast within noise: " + ", ".join(s + (" (lowest median)" if s == fastest else "")
                                                      for s in pick["ties"]) if pick.get("ties") else "")
        doubt = [c for c in pick.get("caveats", []) if c.startswith(("noisy", "throttled", "cpu-busy"))]
        said = f" [{', '.join(doubt)}]" if doubt else ""
        parts.append(f"{where} {pick['scheme']} ({fmt_us(pick['latency_us'])} µs{said}{tie})")
    budget = f"{max_rel_err:g}"
    quoted = path if all(c.isalnum() or c in "/._-+" for c in path) else "'" + path.replace("'", "'\\''") + "'"
    rule = ("; among schemes as fast within noise the pick is the smaller M's, else the lowest error, then the fewest "
            "stored bytes" if any(g["pick"] and g["pick"].get("ties") for g in rec["by_m"]) else "")
    return [visible(f"pick within rel_fro <= {budget} ({method} median): " + ", ".join(parts) + rule),
            visible(f"why, and the other schemes: qbench recommend {quoted} --max-rel-err {budget}")]


#: Why each other scheme lost, under a pick (its reasons wrap in a terminal table).
OTHERS = View("recommend others", [entry("scheme", "scheme"), entry("reason", "why not")], wrap=("reason", 16))


def render_recommendation(rec: dict, fmt: str = "simple", note: str | None = None,
                          warning: str | None = None, wide: bool = False) -> str:
    """:func:`recommend`'s result in ``fmt``: per M the pick, the other schemes and why not (:data:`OTHERS`), the
    Pareto front; ``json`` the whole record. ``note`` and ``warning`` go under the budget line; the narrow
    default wraps to 120 characters."""
    if fmt == "json":
        return json.dumps(rec, indent=2, ensure_ascii=False)
    method, say = rec["method"], prose(fmt, wide)
    lines = [say(f"budget rel_fro <= {rec['max_rel_err']:g}; latency = {method} median"
                 + (f" ({note})" if note else ""))]
    lines += [say(visible(warning))] if warning else []
    if method not in rec["methods_present"]:
        lines.append(say(f"WARNING: no row has {method} latency; methods in this file: "
                         f"{', '.join(rec['methods_present']) or 'none'}"))
    pareto = [entry("scheme", "scheme"), entry("latency_us", f"{method} µs", "us"), entry("rel_fro", "rel err", ".3g"),
              entry("stored_mib", "stored MiB", ".2f", of="stored_bytes", scale=2**-20)]  # the same in every layout
    for g in rec["by_m"]:
        pick = g["pick"]
        tp = f", tp_size={g['tp_size']} {g['split']}" if g.get("tp_size") is not None else ""
        head = f"M={g['m']} (K={g['k']}, N={g['n']}{tp}): "
        head += (f"use {pick['scheme']} ({fmt_us(pick['latency_us'])} µs, rel_fro {pick['rel_fro']:.3g})"
                 + (f" [{', '.join(pick['caveats'])}]" if pick.get("caveats") else "")
                 + (f"; as fast within noise: {', '.join(pick['ties'])}" if pick["ties"] else "")
                 + (f" (kept from M={pick['kept_from_m']}: tied within noise, the pick does not flip)"
                    if pick.get("kept_from_m") is not None else "")
                 + (f"; {stability_text(pick['stability'])}" if pick.get("stability") else "")
                 if pick else f"{DASH} no scheme within the budget")
        lines.append("\n" + say(visible(head)))  # scheme names from the file: one line whatever they hold
        if g["others"]:
            lines.append(OTHERS.render(g["others"], fmt, wide))
        lines.append("Pareto front (latency, rel err, stored bytes; all minimised):")
        lines.append(render(g["pareto"], pareto, fmt) if g["pareto"] else f"  {DASH}")
    return "\n".join(lines)


def summary_rows(doc: ResultDoc | dict, rec: dict, baseline: str = "bf16") -> list[dict]:
    """One dict per M of ``rec``: the pick, its time and error, the ``baseline``'s median and the speed-up over it
    (None without one), the ties, ``kept_from_m`` and the unusable schemes."""
    doc = ResultDoc.of(doc)
    base = {r.shape: r.stats(rec["method"]) for r in doc.rows if r.scheme == baseline}
    out = []
    for g in rec["by_m"]:
        pick = g["pick"] or {}
        stats = base.get((g["m"], g["k"], g["n"], g.get("tp_size"), g.get("split")))
        base_us, lat = stats.median if stats else None, pick.get("latency_us")
        out.append({"scenario": doc.scenario.name, "m": g["m"], "k": g["k"], "n": g["n"], "pick": pick.get("scheme"),
                    "latency_us": lat, "rel_fro": pick.get("rel_fro"), "baseline_us": base_us,
                    "speedup": base_us / lat if base_us and lat else None, "ties": pick.get("ties") or [],
                    "kept_from_m": pick.get("kept_from_m"), "unusable": [u["scheme"] for u in g.get("unusable") or []],
                    **({"stability": stability_text(pick["stability"])} if pick.get("stability") else {})})
    return out


def summary_view(method: str, baseline: str, rows: list[dict]) -> View:
    """The ``--summary`` table over :func:`summary_rows` (with how often the pick won, when ``rows`` say); the narrow
    default without K, N and the baseline's time, the ties wrapped to fit 120 characters."""
    runs = any(r.get("stability") for r in rows)
    def pick(r: dict) -> str:
        return (r["pick"] or f"{DASH} none within budget") + (
            f" (kept from M={r['kept_from_m']})" if r.get("kept_from_m") is not None else "")

    cols = [entry("scenario", "scenario"), entry("m", "M", str, True), entry("k", "K", str, True),
            entry("n", "N", str, True), Column("pick", "pick", lambda r: r["pick"] or f"{DASH} none within budget",
                                                 cell_override=pick),
            entry("latency_us", f"{method} µs", "us"), entry("rel_fro", "rel err", ".3g"),
            entry("baseline_us", f"{baseline} µs", "us"),
            entry("speedup", f"speed-up vs {baseline} ({baseline} time / pick time)", "ratio",
                 cell_override=lambda r: fmt_ratio(r["speedup"]) + (
                     " (same within noise)" if r["speedup"] is not None and baseline in r["ties"] else "")),
            entry("speedup_narrow", f"×{baseline}", "ratio", of="speedup"),
            Column("ties", "as fast within noise", lambda r: ", ".join(r["ties"]) or DASH),
            Column("stability", "pick stability", lambda r: r.get("stability") or DASH),
            Column("runs_won", "runs won", lambda r: (r.get("stability") or DASH).removeprefix("picked in ")
                   .split(" runs")[0], numeric=True)]
    wide = ["scenario", "m", "k", "n", "pick", "latency_us", "rel_fro", "baseline_us", "speedup", "ties",
            *(["stability"] if runs else [])]
    return View("summary", cols, ["scenario", "m", "pick", "latency_us", "rel_fro", "speedup_narrow", "ties",
                                  *(["runs_won"] if runs else [])], wide,
                wrap=("ties", len("int8-weight-only+compiled,")), widths={"pick": 35})


def row_storage_format(row: Row) -> str:
    """The row's storage format (:data:`qbench.schemes.base.STORAGE_FORMATS`): its registered scheme's when the
    ``weight_dtype`` matches, else read from the row's ``weight_dtype``."""
    from qbench import schemes
    from qbench.schemes.base import storage_format_of

    wd = row.weight_dtype
    try:
        scheme = schemes.get(row.base_scheme) if row.base_scheme else None
    except schemes.UnknownSchemeError:
        scheme = None
    if scheme is not None and (wd is None or wd == scheme.weight_dtype):
        return scheme.storage_format
    return storage_format_of(wd)


def main_kernel(row: Row) -> str | None:
    """The short name of the longest kernel of one call (memory copies only without a kernel), or None."""
    kernels = row.dispatch.kernels if row.dispatch is not None else []
    real = [k for k in kernels if (k.kind if "kind" in k.model_fields_set else "kernel") == "kernel"] or kernels
    return short_kernel(str(max(real, key=lambda k: k.us or 0.0).name)) if real else None


def by_format(doc: ResultDoc | dict, method: str = DECISION_METHOD, max_rel_err: Optional[float] = None,
              baseline: str = "bf16") -> list[dict]:
    """The fastest scheme of each storage format per (M, K, N) of ``doc`` (candidates as in :func:`recommend`;
    ``max_rel_err`` optional): one record per (M, K, N) and format, with the pick, its library, longest kernel,
    time (µs), error, speed-up over ``baseline``, and the format's ``others``."""
    from qbench.schemes.base import STORAGE_FORMATS

    doc = ResultDoc.of(doc)
    budget = float("inf") if max_rel_err is None else max_rel_err
    order = {f: i for i, f in enumerate(STORAGE_FORMATS)}
    out = []
    for (m, k, n, tp_size, split), rows in by_shape(doc.rows):
        base_stats = next((r.stats(method) for r in rows if r.scheme == baseline), None)
        base_us = base_stats.median if base_stats else None
        by_fmt: dict[str, list[Row]] = {}
        for r in rows:
            by_fmt.setdefault(row_storage_format(r), []).append(r)
        for fmt in sorted(by_fmt, key=lambda f: (order.get(f, len(order)), f)):
            reasons = [(r, _lose_reason(r, method, budget)) for r in by_fmt[fmt]]
            cands = sorted((r for r, why in reasons if why is None), key=lambda r: r.stats(method).median)
            rec = {"scenario": doc.scenario.name, "m": m, "k": k, "n": n,
                   **({"tp_size": tp_size, "split": split} if tp_size is not None else {}), "format": fmt, "pick": None,
                   "library": None, "kernel": None, "latency_us": None, "rel_fro": None,
                   "baseline_us": base_us, "speedup": None, "others": []}
            if cands:
                best, lat = cands[0], cands[0].stats(method).median
                rec.update(pick=best.scheme, library=best.library, kernel=main_kernel(best), latency_us=lat,
                           rel_fro=best.rel_fro, speedup=base_us / lat if base_us else None)
                rec["others"] = [{"scheme": c.scheme, "ratio": c.stats(method).median / lat,
                                  "tie": row_verdict(best, c, method) == "same", "reason": None} for c in cands[1:]]
            rec["others"] += [{"scheme": r.scheme, "ratio": None, "tie": False, "reason": UNUSABLE if why.startswith(
                UNUSABLE) else r.status if r.status != "ok" else why} for r, why in reasons if why is not None]
            out.append(rec)
    return out


def _others_cell(others: list[dict]) -> str:
    """The timed others with their ratio, then the rest grouped by reason."""
    timed = [f"{o['scheme']} {fmt_us(o['ratio'])}×" + (" (tie)" if o["tie"] else "")
             for o in others if o["ratio"] is not None]
    why: dict[str, list[str]] = {}
    for o in others:
        if o["ratio"] is None:
            why.setdefault(o["reason"], []).append(o["scheme"])
    parts = [", ".join(timed)] if timed else []
    return "; ".join(parts + [f"{', '.join(names)}: {reason}" for reason, names in why.items()]) or DASH


def render_by_format(rows: list[dict], method: str, baseline: str, fmt: str = "simple",
                     several: bool = False, wide: bool = False) -> str:
    """:func:`by_format` records as one table in ``fmt`` (``several`` files: scenario and shape columns), ``json`` the
    records; the narrow default leaves the library and kernel to ``--wide`` and wraps the others to fit 120
    characters, one table per scenario with ``several`` files."""
    if fmt == "json":
        return json.dumps(rows, indent=2, ensure_ascii=False)
    cols = [entry("scenario", "scenario"), entry("k", "K", str, True), entry("n", "N", str, True),
            entry("m", "M", str, True), COLUMNS["tp_size"], COLUMNS["split"], entry("format", "format"),
            Column("pick", "fastest", lambda r: r["pick"] or f"{DASH} no candidate"),
            entry("library", "library"), entry("kernel", "longest kernel"),
            entry("latency_us", f"{method} µs", "us"), entry("rel_fro", "rel err", ".3g"),
            entry("speedup", f"speed-up vs {baseline} ({baseline} time / fastest's)", "ratio"),
            Column("others", "others of the format (their time / the fastest's)", lambda r: _others_cell(r["others"]))]
    head = ["scenario", "k", "n"] if several else []
    shard = ["tp_size", "split"] if any(r.get("tp_size") is not None for r in rows) else []
    tail = ["format", "pick", "latency_us", "rel_fro", "speedup", "others"]
    every = [*head, "m", *shard, "format", "pick", "library", "kernel", *tail[2:]]
    layout = View("by-format", cols, ["m", *shard, *tail], every, wrap=("others", 24),
                  short={"speedup": f"×{baseline}", "others": "others of the format"}).columns(fmt, wide, records=rows)
    if not (several and narrow(fmt, wide)):
        return render(rows, layout, fmt)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["k"], r["n"]), []).append(r)
    return "\n\n".join(visible(f"== {scenario} (K={k}, N={n})") + "\n" + render(part, layout, fmt)
                       for (scenario, k, n), part in groups.items())


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("result", nargs="+", help="result JSON written by qbench run (one or more)")
    add_budgets(p)
    add_options(p, max_rel_err="required, except with --by-format", method=None,
                format="any tabulate format, or json; csv with --summary or --by-format")
    p.add_argument("--summary", action="store_true",
                   help="one line per (file, M): pick, latency, error, speed-up over --baseline")
    p.add_argument("--by-format", action="store_true",
                   help="per M and storage format (8-bit float, 8-bit int, 4-bit int, 4-bit float; "
                        "16/32-bit float as references): the fastest scheme, its library and kernel, "
                        "and how far the others of the format are")
    add_options(p, baseline="--summary and --by-format",
                wide="every reason on one line, every --summary column (K, N, the baseline's time, the other runs' "
                     "picks), --by-format's library and longest kernel; a model-step file's --wide is its view's "
                     "every header",
                allow_incomplete="accept result files of interrupted runs (\"complete\": false); refused otherwise, "
                                 "since a missing scheme would silently change the pick")


def run_recommend(args: argparse.Namespace) -> int:
    """Run ``qbench recommend`` from parsed ``args``: exit status 0 (a pick) or 1.

    Raises:
        Refused: bad input (one line)."""
    summary_mode, format_mode = getattr(args, "summary", False), getattr(args, "by_format", False)
    if summary_mode and format_mode:
        raise Refused("--summary and --by-format are two views; pass one of them")
    if args.format not in FORMATS or (args.format == "csv" and not (summary_mode or format_mode)):
        allowed = sorted(f for f in FORMATS if f != "csv")
        raise Refused(f"unknown format {args.format!r}; allowed: {', '.join(allowed)}"
                      + ("" if args.format != "csv" else "; csv needs --summary or --by-format (one table)"))
    check_max_rel_err(args.max_rel_err)
    check_budgets(args)  # a bad value is refused before any file is read
    paths = [args.result] if isinstance(args.result, str) else list(args.result)
    docs = open_results(paths, incomplete="warn" if getattr(args, "allow_incomplete", False) else "refuse",
                        refusal="is incomplete (\"complete\": false): a scheme missing from it would change "
                                "the pick; pass --allow-incomplete to use it anyway", command="recommend")
    view = job_view(docs, "recommend")
    if view is not None:  # a job kind's own view (qbench.jobs); the quality kind's takes step files beside its own
        return view(args, paths, docs)
    refuse_budgets(args)
    if args.max_rel_err is None and not format_mode:
        raise Refused("--max-rel-err is required (e.g. 0.01), except with --by-format")
    baseline, wide = getattr(args, "baseline", "bf16"), getattr(args, "wide", False)
    notes: list[str] = []

    def method_of(path: str, doc: ResultDoc, one_table: bool) -> tuple[str, Optional[str]]:
        """The file's method and its fallback's note; ``one_table``: refused when no row has it."""
        method, note = resolve_method(doc, args.method)
        if note and note not in notes:
            notes.append(note)
        check_baseline(path, {r.scheme for r in doc.rows}, baseline, always=summary_mode)
        present = methods_present(doc.rows)
        if one_table and method not in present:
            raise Refused(f"{path}: no row has {method} latency; methods in this file: {', '.join(present) or 'none'}")
        return method, note

    if format_mode:  # one table (one JSON list) of the by_format records of every file
        records, methods = [], set()
        for path, doc in zip(paths, docs):
            methods.add(method := method_of(path, doc, True)[0])
            records += [dict(r, file=path) for r in by_format(doc, method, args.max_rel_err, baseline)]
        method = _one_method(methods, "--by-format", records, ("scenario", "m", "k", "n", "format"))
        if wants_prose(args.format):
            budget = "" if args.max_rel_err is None else f" within rel_fro <= {args.max_rel_err:g}"
            line = (f"latency = {method} median" + "".join(f" ({n})" for n in notes)
                    + f"; per M and storage format the fastest scheme{budget}, its library and longest "
                    "kernel; others: their median / the fastest's, '(tie)': p10–p90 overlaps the fastest's")
            if narrow(args.format, wide):  # the narrow table: what its short header means, what --wide adds
                line = fit(line.replace(", its library and longest kernel", "")
                           + f"; ×{baseline} = {baseline} time / the fastest's (> 1: faster); --wide: the library "
                           "and the longest kernel")
            print(line + "\n")
        print(render_by_format(records, method, baseline, args.format, several=len(paths) > 1, wide=wide))
        return 0 if any(r["pick"] for r in records) else 1
    picked, summary, methods, records, warnings = False, [], set(), [], []
    for result in group_results(paths, docs):  # files of one scenario and machine: one result
        path, doc = result.label, result.doc
        method, note = method_of(path, doc, summary_mode)
        rec = recommend(doc, args.max_rel_err, method)
        if len(result.paths) > 1:
            rec["files"] = list(result.paths)
        if len(result.runs) > 1:
            add_stability(rec, [recommend(run, args.max_rel_err, method) for run in result.runs])
        picked = picked or any(g["pick"] for g in rec["by_m"])
        found = synthetic_warnings(doc.rows, "" if len(paths) == 1 else path + ": ")
        warnings += found  # under the budget line or the summary's header
        if summary_mode:
            summary += [dict(row, file=path) for row in summary_rows(doc, rec, baseline)]
            methods.add(method)
        else:
            records.append((path, rec, note, found[0] if found else None))
    if not summary_mode:
        if args.format == "json" and len(records) > 1:  # one JSON document, not several
            print(json.dumps([{"file": path, **rec} for path, rec, _, _ in records], indent=2, ensure_ascii=False))
        for i, (path, rec, note, warning) in enumerate(records if args.format != "json" or len(records) == 1 else []):
            if len(records) > 1:
                print(("\n" if i else "") + visible(f"== {path}"))
            print(render_recommendation(rec, args.format, note, warning, wide=wide))
        return 0 if picked else 1
    method = _one_method(methods, "--summary", summary, ("scenario", "m", "k", "n"))
    if args.format == "json":
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0 if picked else 1
    rule = (f"budget rel_fro <= {args.max_rel_err:g}; latency = {method} median" + "".join(f" ({n})" for n in notes)
            + "; the pick: among the schemes within the budget as fast as the fastest within noise (p10–p90 overlap), "
            "the one picked at the next smaller M ('kept from M=...'), else the lowest error, then the fewest stored "
            f"bytes; speed-up = {baseline} time / pick time (> 1: the pick is faster)")
    unusable = unusable_note([(s, row["m"]) for row in summary for s in row["unusable"]], method)
    columns = summary_view(method, baseline, summary).columns(args.format, wide, records=summary)
    show(summary, columns, args.format, wide=wide,
         describe=[rule, *dict.fromkeys(warnings)], notes=[unusable] if unusable else [])
    return 0 if picked else 1


def _one_method(methods: set, view: str, records: list[dict], identity: tuple[str, ...]) -> str:
    """The one method of a one-table view (several refused); records of two files of one scenario get their file
    path as scenario."""
    if len(methods) > 1:
        raise Refused(f"{view} needs one timing method, these files give {sorted(methods)}; pass --method")
    if len({tuple(r[k] for k in identity) for r in records}) < len(records):
        for r in records:
            r["scenario"] = r["file"]
    (method,) = methods
    return method


COMMAND = Command(
    name="recommend", help="the fastest scheme within an error budget, per M", description=__doc__.split("\n\n")[0],
    exit_codes="0 some M got a pick; 1 no M did; 2 bad input (an incomplete file without --allow-incomplete)",
    add_arguments=_add_arguments, run=run_recommend)
