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

import sys

from qbench.judge import DECISION_METHOD, UNUSABLE, capture_failure, common_method, row_caveats, verdict
from qbench.readers.common import Command, Refused, add_format, add_method, open_results
from qbench.render import Column, check_format, render, wants_prose
from qbench.render.columns import COLUMNS, DASH, fmt_num, fmt_us
from qbench.results import ResultDoc
from qbench.row import Row, Stats

__all__ = ["COMMAND", "caveats", "compare_docs", "render_compare", "run_compare"]


def compare_docs(a: ResultDoc | dict, b: ResultDoc | dict, method: str = DECISION_METHOD,
                 threshold: float = 1.05) -> list[dict]:
    """Compare result documents ``a`` (before) and ``b`` (after) row by row.

    Returns one record per (scheme, m, k, n) in either file, A's order first then B-only rows:
    ``{"scheme", "m", "k", "n", "a_us", "b_us" (medians, µs, or None), "speedup" (a/b: > 1 when B
    is faster; or None),
    "a_rel_fro", "b_rel_fro", "rel_fro_diff" (b - a or None), "verdict" ("faster" | "slower" |
    "same" | "only in A" | "only in B" | "not comparable"), "note" (why not comparable; for a
    compared pair :func:`caveats`: flags and noise; or None),
    "regression" (verdict slower and b > threshold × a, i.e. speedup < 1/threshold)}``.
    """
    a, b = ResultDoc.of(a), ResultDoc.of(b)
    rows_a = {r.key: r for r in a.rows}
    rows_b = {r.key: r for r in b.rows}
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    out = []
    for key in keys:
        ra, rb = rows_a.get(key), rows_b.get(key)
        sa = ra.stats(method) if ra else None
        sb = rb.stats(method) if rb else None
        rec = {"scheme": key[0], "m": key[1], "k": key[2], "n": key[3],
               **({"tp_size": key[4], "split": key[5]} if key[4] is not None else {}),
               "a_us": sa.median if sa else None, "b_us": sb.median if sb else None,
               "speedup": None, "a_rel_fro": ra.rel_fro if ra else None, "b_rel_fro": rb.rel_fro if rb else None,
               "rel_fro_diff": None,
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
            rec["speedup"] = sa.median / sb.median
            rec["verdict"] = verdict(sa, sb)
            rec["note"] = caveats(ra, rb, sa, sb)
            # compared as times, not through 1/speedup: B at exactly threshold x A is no regression
            rec["regression"] = rec["verdict"] == "slower" and sb.median > threshold * sa.median
        out.append(rec)
    return out


def caveats(ra: Row, rb: Row, sa: Stats, sb: Stats) -> str | None:
    """What could mislead a reader of one compared pair, or None: each side's row flags (their
    names: ``cpu-busy``, ``throttled``, ``repacked``, ...) and a noisy reading (cv over
    :data:`~qbench.judge.NOISY_CV`), e.g. ``"B: cpu-busy, noisy (cv 0.90)"``. A row that
    reads slower only because its machine was busy says so next to its verdict."""
    parts = []
    for side, row, stats in (("A", ra, sa), ("B", rb, sb)):
        said = row_caveats(row, stats)
        if said:
            parts.append(f"{side}: {', '.join(said)}")
    return "; ".join(parts) or None


def _why(row: Row, method: str) -> str:
    if row.status != "ok":
        return f"{row.status}: {row.reason or 'no reason given'}"
    if capture_failure(row, method):
        return UNUSABLE
    reason = row.reason_for(method)
    return f"no {method} latency" + (f" ({reason.text})" if reason else "")


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


def _add_arguments(p) -> None:
    p.add_argument("a", help="result JSON, before")
    p.add_argument("b", help="result JSON, after")
    add_method(p)
    p.add_argument("--threshold", type=float, default=1.05,
                   help="a 'slower' row whose B median is more than this factor times A's (a speed-up "
                        "below 1/THRESHOLD) fails the compare (exit 1); default 1.05")
    add_format(p)


def run_compare(args) -> int:
    """Run ``qbench compare`` from parsed ``args``; returns the exit status (0 or 1; raises
    :class:`~qbench.readers.common.Refused` on bad input)."""
    if not args.threshold > 0:  # NaN too: a factor on A's time, a speed-up of 1/threshold
        raise Refused(f"--threshold must be > 0 (a factor on A's time, e.g. 1.05), got {args.threshold}")
    try:
        check_format(args.format)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    a, b = open_results([args.a, args.b])
    method, note = common_method(a, b, args.method)
    if a.machine != b.machine:
        print(f"warning: A ({args.a}) ran on {a.machine}, B ({args.b}) on {b.machine}: the speed-ups compare "
              "machines as much as schemes", file=sys.stderr)
    records = compare_docs(a, b, method, args.threshold)
    if wants_prose(args.format):
        print(f"A = {args.a} ({a.machine}); B = {args.b} ({b.machine})")
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


COMMAND = Command(
    name="compare", help="compare two result JSON files row by row", description=__doc__.split("\n\n")[0],
    exit_codes="0 no regression; 1 a row got slower than --threshold; 2 bad input",
    add_arguments=_add_arguments, run=run_compare)
