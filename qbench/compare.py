"""``qbench compare A.json B.json``: did B get faster or slower than A, row by row?

Rows are matched by (scheme, M, K, N). For each pair: B's speed-up over A, A's median / B's of
the chosen method (> 1: B is faster; qbench's one ratio convention, speed-up = baseline time /
scheme time, with A as the baseline), the change in relative Frobenius error (B - A), and a
verdict. Like NVBench's compare, the runs' own noise is the threshold: when the [p10, p90]
intervals of A and B overlap the verdict is ``same``; otherwise ``faster`` or ``slower`` by the
medians. Rows in only one file are listed as ``only in A`` / ``only in B``; rows not timed in
either file get ``not comparable``.

Without ``--method`` both files are read by ``stream`` (the decision method); a file without any
stream time (written before it existed) falls back to ``cold`` (or ``cpu``), and when the two
files then resolve to different methods the first of stream, cold, cpu that both have is used,
said in the output.

Exit status: 1 when some row is ``slower`` and B's median exceeds A's by more than the factor
``--threshold`` (default 1.05: B takes over 1.05× A's time, a speed-up below 1/1.05 = 0.952×),
else 0; 2 on bad input (unreadable file, unknown format, a ``--threshold`` not > 0).
"""

from __future__ import annotations

import argparse
import sys

from qbench.render import Column, check_format, render, wants_prose
from qbench.render.columns import COLUMNS, DASH, fmt_num, fmt_us, row_caveats
from qbench.results import (
    DECISION_METHOD,
    FALLBACK_METHODS,
    METHOD_CHOICES,
    ResultsError,
    latency_stats,
    machine_of,
    methods_present,
    incomplete_warning,
    read_results,
    resolve_method,
    row_key,
)
from qbench.timing import registry

__all__ = ["UNUSABLE", "capture_failure", "compare_docs", "register", "render_compare", "run_compare",
           "unusable_note", "verdict"]

#: What a scheme is called whose ``ok`` row has no time for a graph-captured method because its
#: call cannot be captured in a CUDA graph (a host sync: ``.item()``, a device-to-host copy).
UNUSABLE = "unusable in a graph-captured decode loop"

#: Words of ``latency_reasons.<method>`` that say the call was not captured: the capture failed
#: (qbench.measure writes "CUDA graph capture failed at M=...") or was not attempted after an
#: earlier failure of the same worker ("not attempted: ..."), or the call syncs with the host.
#: Not a bare "capture": tensor-parallel rows say "do not time stream yet (graph-captured call +
#: collective)", which is not the scheme's fault.
_CAPTURE_WORDS = ("capture failed", "cannot be captured", "host sync", "not attempted")

Key = tuple


def _key(row: dict) -> Key:
    """The row's identity in its file (:func:`qbench.results.row_key`: scheme, M, K, N, tp_size, split)."""
    return row_key(row)


def _rel(row: dict | None) -> float | None:
    return ((row or {}).get("error") or {}).get("rel_fro")


def _interval(stats: dict) -> tuple[float, float]:
    """[p10, p90] of STATS, widened to hold the median; the median alone when p10 or p90 is missing."""
    med, lo, hi = stats["median"], stats.get("p10"), stats.get("p90")
    if lo is None or hi is None:
        return med, med
    return min(lo, med), max(hi, med)


def verdict(a: dict, b: dict) -> str:
    """``same`` when the [p10, p90] intervals of STATS ``a`` and ``b`` overlap, else ``faster`` (B's
    median below A's) or ``slower``. A side without p10 or p90 is its median alone (a point), so
    it is ``same`` only when that point lies inside the other side's interval; with neither side
    having an interval the medians decide."""
    lo_a, hi_a = _interval(a)
    lo_b, hi_b = _interval(b)
    if lo_b <= hi_a and lo_a <= hi_b:
        return "same"
    return "faster" if b["median"] < a["median"] else "slower"


def capture_failure(row: dict, method: str) -> str | None:
    """Why ``row`` has no ``method`` time when the reason is that its call cannot be captured in a
    CUDA graph, else ``None``.

    That is: the row is ``ok``, ``method`` needs a capture (``stream`` and ``warm``, the
    registry's ``needs_capture``), its STATS are null and ``latency_reasons[method]`` says the
    capture failed or cannot be done, mentions a host sync, or says "not attempted". Such a scheme cannot run in a decode engine's
    graph-captured step at all (:data:`UNUSABLE`); its eager time is what it costs outside one.
    """
    info = registry.METHODS.get(method)
    if info is None or not info.needs_capture or row.get("status") != "ok":
        return None
    if latency_stats(row, method) is not None:
        return None
    why = (row.get("latency_reasons") or {}).get(method) or ""
    return why if any(word in why.lower() for word in _CAPTURE_WORDS) else None


def unusable_note(pairs: list[tuple[str, int]], method: str) -> str | None:
    """One line naming the schemes (with their M values) that :func:`capture_failure` found, from
    ``(scheme, M)`` pairs in first-seen order; ``None`` when there are none."""
    by_scheme: dict[str, list] = {}
    for scheme, m in pairs:
        ms = by_scheme.setdefault(scheme, [])
        if m not in ms:
            ms.append(m)
    if not by_scheme:
        return None
    names = ", ".join(f"{s} (M={','.join(str(m) for m in sorted(ms, key=lambda v: (v is None, v)))})"
                      for s, ms in by_scheme.items())
    return (f"{UNUSABLE} (no {method} time: the call cannot be captured in a CUDA graph, "
            f"e.g. a host sync): {names}")


def compare_docs(a: dict, b: dict, method: str = DECISION_METHOD, threshold: float = 1.05) -> list[dict]:
    """Compare result documents ``a`` (before) and ``b`` (after) row by row.

    Returns one record per (scheme, m, k, n) in either file, A's order first then B-only rows:
    ``{"scheme", "m", "k", "n", "a_us", "b_us" (medians, µs, or None), "speedup" (a/b: > 1 when B
    is faster; or None),
    "a_rel_fro", "b_rel_fro", "rel_fro_diff" (b - a or None), "verdict" ("faster" | "slower" |
    "same" | "only in A" | "only in B" | "not comparable"), "note" (why not comparable; for a
    compared pair :func:`caveats`: flags and noise; or None),
    "regression" (verdict slower and b > threshold × a, i.e. speedup < 1/threshold)}``.
    """
    rows_a = {_key(r): r for r in a.get("rows") or []}
    rows_b = {_key(r): r for r in b.get("rows") or []}
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    out = []
    for key in keys:
        ra, rb = rows_a.get(key), rows_b.get(key)
        sa = latency_stats(ra, method) if ra else None
        sb = latency_stats(rb, method) if rb else None
        rec = {"scheme": key[0], "m": key[1], "k": key[2], "n": key[3],
               **({"tp_size": key[4], "split": key[5]} if key[4] is not None else {}),
               "a_us": sa["median"] if sa else None, "b_us": sb["median"] if sb else None,
               "speedup": None, "a_rel_fro": _rel(ra), "b_rel_fro": _rel(rb), "rel_fro_diff": None,
               "verdict": None, "note": None, "regression": False}
        if rec["a_rel_fro"] is not None and rec["b_rel_fro"] is not None:
            rec["rel_fro_diff"] = rec["b_rel_fro"] - rec["a_rel_fro"]
        if ra is None or rb is None:
            rec["verdict"] = "only in B" if ra is None else "only in A"
        elif sa is None or sb is None:
            rec["verdict"] = "not comparable"
            why = {side: _why(r, method) for side, r, s in (("A", ra, sa), ("B", rb, sb)) if s is None}
            same = len(why) == 2 and why["A"] == why["B"]
            rec["note"] = f"both {why['A']}" if same else "; ".join(f"{k}: {v}" for k, v in why.items())
        else:
            rec["speedup"] = sa["median"] / sb["median"]
            rec["verdict"] = verdict(sa, sb)
            rec["note"] = caveats(ra, rb, sa, sb)
            # compared as times, not through 1/speedup: B at exactly threshold x A is no regression
            rec["regression"] = rec["verdict"] == "slower" and sb["median"] > threshold * sa["median"]
        out.append(rec)
    return out


def caveats(ra: dict, rb: dict, sa: dict, sb: dict) -> str | None:
    """What could mislead a reader of one compared pair, or None: each side's row flags (their
    names: ``cpu-busy``, ``throttled``, ``repacked``, ...) and a noisy reading (cv over
    :data:`~qbench.render.columns.NOISY_CV`), e.g. ``"B: cpu-busy, noisy (cv 0.90)"``. A row that
    reads slower only because its machine was busy says so next to its verdict."""
    parts = []
    for side, row, stats in (("A", ra, sa), ("B", rb, sb)):
        said = row_caveats(row, stats)
        if said:
            parts.append(f"{side}: {', '.join(said)}")
    return "; ".join(parts) or None


def _why(row: dict, method: str) -> str:
    if row.get("status") != "ok":
        return f"{row.get('status')}: {row.get('reason') or 'no reason given'}"
    if capture_failure(row, method):
        return UNUSABLE
    reason = (row.get("latency_reasons") or {}).get(method)
    return f"no {method} latency" + (f" ({reason})" if reason else "")


def _columns(method: str) -> list[Column]:
    def speedup_show(v):
        return DASH if v is None else f"{v:.3f}×"

    def diff_show(v):
        return DASH if v is None else f"{v:+.2g}"

    def verdict_cell(r):
        v = r["verdict"]
        return f"{v} !" if r["regression"] else v

    return [
        Column("scheme", "scheme", lambda r: r["scheme"]),
        Column("m", "M", lambda r: r["m"], fmt_num("d"), True),
        Column("a_us", f"A {method} µs", lambda r: r["a_us"], fmt_us, True),
        Column("b_us", f"B {method} µs", lambda r: r["b_us"], fmt_us, True),
        Column("speedup", "speed-up vs A (A/B)", lambda r: r["speedup"], speedup_show, True),
        Column("rel_fro_diff", "Δ rel err", lambda r: r["rel_fro_diff"], diff_show, True),
        Column("verdict", "verdict", lambda r: r["verdict"], cell_override=verdict_cell),
        Column("note", "note", lambda r: r["note"]),
    ]


def render_compare(records: list[dict], method: str, fmt: str = "simple") -> str:
    """Render :func:`compare_docs`'s records in any :data:`qbench.render.FORMATS` format; a
    regression's verdict is marked ``slower !`` in tables. CSV and JSON carry the ``method`` on
    every record (their headers are keys, which do not name it)."""
    cols = _columns(method)
    if any(r.get("tp_size") is not None for r in records):  # tensor-parallel rows: which sharding
        cols[2:2] = [COLUMNS["tp_size"], COLUMNS["split"]]
    if fmt in ("csv", "json"):
        cols.insert(2, Column("method", "method", lambda r: method))
    return render(records, cols, fmt)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to ``subparsers``; it sets ``func=run_compare``."""
    p = subparsers.add_parser("compare", help="compare two result JSON files row by row",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="result JSON, before")
    p.add_argument("b", help="result JSON, after")
    p.add_argument("--method", default=None, choices=METHOD_CHOICES,
                   help=f"timing method (default {DECISION_METHOD}; files without it: cold, or cpu on CPU results)")
    p.add_argument("--threshold", type=float, default=1.05,
                   help="a 'slower' row whose B median is more than this factor times A's (a speed-up "
                        "below 1/THRESHOLD) fails the compare (exit 1); default 1.05")
    p.add_argument("--format", default="simple", help="output format (as qbench report)")
    p.set_defaults(func=run_compare)
    return p


def run_compare(args: argparse.Namespace) -> int:
    """Run ``qbench compare`` from parsed ``args``; returns the exit status (0, 1 or 2)."""
    if not args.threshold > 0:  # NaN too: a factor on A's time, a speed-up of 1/threshold
        print(f"qbench compare: --threshold must be > 0 (a factor on A's time, e.g. 1.05), got {args.threshold}",
              file=sys.stderr)
        return 2
    try:
        check_format(args.format)
        a, b = read_results(args.a), read_results(args.b)
        for path, doc in ((args.a, a), (args.b, b)):
            if incomplete_warning(doc, path):
                print(incomplete_warning(doc, path), file=sys.stderr)
    except (ValueError, ResultsError) as exc:
        print(f"qbench compare: {exc}", file=sys.stderr)
        return 2
    method, note_a = resolve_method(a, args.method)
    method_b, note_b = resolve_method(b, args.method)
    note = note_a or note_b
    if method != method_b:  # e.g. an old file (no stream) and a new one: a method both files have
        have_a, have_b = methods_present(a["rows"]), methods_present(b["rows"])
        common = next((m for m in (DECISION_METHOD, *FALLBACK_METHODS) if m in have_a and m in have_b), None)
        if common is None:  # one CPU file, one CUDA file: nothing to compare like with like
            method, note = DECISION_METHOD, None
        else:
            lacks = " and ".join(side for side, have in (("A", have_a), ("B", have_b)) if DECISION_METHOD not in have)
            verb = "has" if len(lacks) == 1 else "have"
            method, note = common, f"{lacks} {verb} no {DECISION_METHOD} latency; comparing {common} times"
    machine_a, machine_b = machine_of(a), machine_of(b)
    if machine_a != machine_b:
        print(f"warning: A ({args.a}) ran on {machine_a}, B ({args.b}) on {machine_b}: the speed-ups compare "
              "machines as much as schemes", file=sys.stderr)
    records = compare_docs(a, b, method, args.threshold)
    if wants_prose(args.format):
        print(f"A = {args.a} ({machine_a}); B = {args.b} ({machine_b})")
    print(render_compare(records, method, args.format))
    bad = [r for r in records if r["regression"]]
    if wants_prose(args.format):
        counts = {}
        for r in records:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        summary = ", ".join(f"{n} {v}" for v, n in counts.items())
        print(f"\n{method} median; speed-up = A time / B time (> 1: B is faster); [p10, p90] overlap "
              f"= same. {summary}." + (f" ({note})" if note else ""))
        if bad:
            print(f"REGRESSION: {len(bad)} row(s) slower than A by more than {args.threshold:g}× its time "
                  f"(speed-up below {1 / args.threshold:.3f}×): "
                  + ", ".join(f"{r['scheme']} M={r['m']} (speed-up {r['speedup']:.2f}×"
                              + (f"; {r['note']}" if r["note"] else "") + ")" for r in bad))
    return 1 if bad else 0
