"""``qbench recommend RESULT.json --max-rel-err 0.01``: which scheme to use at each M.

For each (M, K, N): the fastest ``ok`` scheme whose relative Frobenius error is within the budget
and whose output had no NaN/Inf; the Pareto front over (latency median, rel_fro, stored bytes),
all minimised; and for every other scheme the reason it lost, in this order of precedence:
``skipped: …``, ``failed: …``, ``no cold latency``, ``non-finite outputs (12)``,
``no error measured``, ``over error budget (rel_fro 0.092 > 0.01)``,
``slower: 23.1 µs vs 11.0 µs (2.10×)``.

Without ``--method`` the cold median is used, or the cpu median on a CPU result (said in the
output); an explicit ``--method`` is used as given, with no fallback.

Exit status: 0 when at least one M got a recommendation, 1 when none did, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from qbench.render import FORMATS, Column, render
from qbench.render.columns import DASH, fmt_num, fmt_us
from qbench.results import (
    ResultsError,
    latency_stats,
    methods_present,
    read_results,
    resolve_method,
)

__all__ = ["pareto_front", "recommend", "register", "render_recommendation", "run_recommend"]

PARETO_KEYS = ("latency_us", "rel_fro", "stored_bytes")


def pareto_front(points: Sequence[dict], keys: Sequence[str] = PARETO_KEYS) -> list[dict]:
    """The points no other point dominates, all ``keys`` minimised, in input order.

    ``a`` dominates ``b`` when ``a[k] <= b[k]`` for every key and ``<`` for at least one. Points
    with any key ``None`` are left out. Equal points are all kept.
    """
    pts = [p for p in points if all(p.get(k) is not None for k in keys)]

    def dominates(a: dict, b: dict) -> bool:
        return all(a[k] <= b[k] for k in keys) and any(a[k] < b[k] for k in keys)

    return [p for p in pts if not any(dominates(q, p) for q in pts if q is not p)]


def _lose_reason(row: dict, method: str, max_rel_err: float) -> str | None:
    """Why ``row`` cannot be picked at all (``None`` if it is a candidate)."""
    status = row.get("status")
    if status != "ok":
        return f"{status}: {row.get('reason') or 'no reason given'}"
    if latency_stats(row, method) is None:
        why = (row.get("latency_reasons") or {}).get(method)
        return f"no {method} latency" + (f" ({why})" if why else "")
    err = row.get("error") or {}
    if err.get("nonfinite"):
        return f"non-finite outputs ({err['nonfinite']})"
    rel = err.get("rel_fro")
    if rel is None:
        return "no error measured"
    if rel > max_rel_err:
        return f"over error budget (rel_fro {rel:.3g} > {max_rel_err:g})"
    return None


def recommend(doc: dict, max_rel_err: float, method: str = "cold") -> dict:
    """Recommend a scheme per (M, K, N) of result ``doc`` for an error budget.

    ``max_rel_err``: largest acceptable ``error.rel_fro`` (relative Frobenius error vs float64).
    ``method``: timing method whose median is compared (µs).

    Returns ``{"method", "max_rel_err", "methods_present", "by_m": [{"m", "k", "n",
    "pick": {"scheme", "latency_us", "rel_fro", "stored_bytes"} or None,
    "others": [{"scheme", "reason"}], "pareto": [{"scheme", "latency_us", "rel_fro",
    "stored_bytes"}]}]}`` with ``by_m`` in ascending M.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in doc.get("rows") or []:
        groups.setdefault((r.get("m"), r.get("k"), r.get("n")), []).append(r)
    by_m = []
    for (m, k, n), rows in sorted(groups.items(), key=lambda kv: tuple(x or 0 for x in kv[0])):
        lost, cands, points = [], [], []
        for r in rows:
            reason = _lose_reason(r, method, max_rel_err)
            point = _point(r, method)
            if point is not None:
                points.append(point)
            if reason is None:
                cands.append(point)
            else:
                lost.append({"scheme": r.get("scheme"), "reason": reason})
        cands.sort(key=lambda p: p["latency_us"])
        pick = cands[0] if cands else None
        for c in cands[1:]:
            ratio = c["latency_us"] / pick["latency_us"]
            lost.append({"scheme": c["scheme"], "reason": f"slower: {c['latency_us']:.1f} µs vs "
                                                          f"{pick['latency_us']:.1f} µs ({ratio:.2f}×)"})
        by_m.append({"m": m, "k": k, "n": n, "pick": pick, "others": lost,
                     "pareto": sorted(pareto_front(points), key=lambda p: p["latency_us"])})
    return {"method": method, "max_rel_err": max_rel_err,
            "methods_present": methods_present(doc.get("rows") or []), "by_m": by_m}


def _point(row: dict, method: str) -> dict | None:
    """(latency, rel_fro, stored bytes) of an ``ok`` row with finite outputs, else None."""
    stats = latency_stats(row, method)
    err = row.get("error") or {}
    if not stats or err.get("nonfinite") or err.get("rel_fro") is None:
        return None
    return {"scheme": row.get("scheme"), "latency_us": stats["median"],
            "rel_fro": err["rel_fro"], "stored_bytes": row.get("stored_bytes")}


_MIB = 2.0**-20


def render_recommendation(rec: dict, fmt: str = "simple", note: str | None = None) -> str:
    """Render :func:`recommend`'s result: per M a line with the pick, then a table of the other
    schemes with their reasons, and the Pareto front. ``fmt`` is any table format of
    :data:`qbench.render.FORMATS`; ``json`` gives the whole record instead."""
    if fmt == "json":
        import json
        return json.dumps(rec, indent=2, ensure_ascii=False)
    method = rec["method"]
    lines = [f"budget rel_fro <= {rec['max_rel_err']:g}; latency = {method} median"
             + (f" ({note})" if note else "")]
    if method not in rec["methods_present"]:
        lines.append(f"WARNING: no row has {method} latency; methods in this file: "
                     f"{', '.join(rec['methods_present']) or 'none'}")
    others_cols = [Column("scheme", "scheme", lambda r: r["scheme"]),
                   Column("reason", "why not", lambda r: r["reason"])]
    pareto_cols = [
        Column("scheme", "scheme", lambda p: p["scheme"]),
        Column("latency_us", f"{method} µs", lambda p: p["latency_us"], fmt_us, True),
        Column("rel_fro", "rel err", lambda p: p["rel_fro"], fmt_num(".3g"), True),
        Column("stored_mib", "stored MiB", lambda p: None if p["stored_bytes"] is None
               else p["stored_bytes"] * _MIB, fmt_num(".2f"), True),
    ]
    for g in rec["by_m"]:
        pick = g["pick"]
        head = f"\nM={g['m']} (K={g['k']}, N={g['n']}): "
        head += (f"use {pick['scheme']} ({pick['latency_us']:.1f} µs, rel_fro {pick['rel_fro']:.3g})"
                 if pick else f"{DASH} no scheme within the budget")
        lines.append(head)
        if g["others"]:
            lines.append(render(g["others"], others_cols, fmt))
        lines.append("Pareto front (latency, rel err, stored bytes; all minimised):")
        lines.append(render(g["pareto"], pareto_cols, fmt) if g["pareto"] else f"  {DASH}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``recommend`` subcommand to ``subparsers``; it sets ``func=run_recommend``."""
    p = subparsers.add_parser("recommend", help="the fastest scheme within an error budget, per M",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("result", help="result JSON written by qbench run")
    p.add_argument("--max-rel-err", type=float, required=True,
                   help="largest acceptable relative Frobenius error, e.g. 0.01")
    p.add_argument("--method", default=None,
                   help="timing method (default cold; cpu on a CPU result)")
    p.add_argument("--format", default="simple", help="table format, or json")
    p.set_defaults(func=run_recommend)
    return p


def run_recommend(args: argparse.Namespace) -> int:
    """Run ``qbench recommend`` from parsed ``args``; returns the exit status (0, 1 or 2)."""
    if args.format not in FORMATS or args.format == "csv":  # csv: no single table to write
        allowed = sorted(f for f in FORMATS if f != "csv")
        print(f"qbench recommend: unknown format {args.format!r}; allowed: {', '.join(allowed)}",
              file=sys.stderr)
        return 2
    if not args.max_rel_err >= 0:
        print(f"qbench recommend: --max-rel-err must be >= 0, got {args.max_rel_err}", file=sys.stderr)
        return 2
    try:
        doc = read_results(args.result)
    except ResultsError as exc:
        print(f"qbench recommend: {exc}", file=sys.stderr)
        return 2
    method, note = resolve_method(doc, args.method)
    rec = recommend(doc, args.max_rel_err, method)
    print(render_recommendation(rec, args.format, note))
    return 0 if any(g["pick"] for g in rec["by_m"]) else 1
