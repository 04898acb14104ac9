"""Crossover: at which M does a scheme beat a baseline (default ``bf16``)?

For each scheme and each M of the sweep, the verdict of :func:`qbench.compare.verdict` against the
baseline at the same (M, K, N): ``faster`` when the scheme's [p10, p90] interval lies wholly below
the baseline's, ``slower`` when wholly above, ``same`` when the two overlap (the difference is
within the runs' own noise; NVBench's compare draws the same line). Without the ``same`` class a
sweep of two equal-speed schemes (fp16 against bf16: the same cuBLAS kernels) reads as a random
pattern of wins and losses. The wins are summarised as ranges over the M values the sweep
measured (with M = 1, 16, 64, 512 and wins at 1, 16 and 64 the range is ``1–64``; a gap in the
sweep's M values starts a new range).
"""

from __future__ import annotations

from typing import Sequence

from qbench.compare import capture_failure, verdict
from qbench.render import Column, render, wants_prose
from qbench.render.columns import DASH, resolve_columns
from qbench.results import DECISION_METHOD, latency_stats

__all__ = ["by_m", "crossover", "m_ranges", "render_by_m", "render_crossover"]


def _stats(row: dict, method: str) -> dict | None:
    stats = latency_stats(row, method)
    return stats if stats and stats.get("median") is not None else None


def m_ranges(wins: Sequence[int], sweep: Sequence[int]) -> str:
    """Summarise ``wins`` (a subset of ``sweep``) as ranges of consecutive sweep values:
    ``m_ranges([1, 16, 512], [1, 16, 64, 512]) == "1–16, 512"``; ``""`` when there are none."""
    order = sorted(set(sweep))
    won = set(wins)
    parts, start, prev = [], None, None
    for m in order + [None]:
        if m is not None and m in won:
            start = m if start is None else start
            prev = m
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}–{prev}")
            start = None
    return ", ".join(parts)


def crossover(doc: dict, baseline: str = "bf16", method: str = DECISION_METHOD) -> list[dict]:
    """For each scheme other than ``baseline`` (first-seen order), compare its ``method`` timing
    with the baseline's at every (M, K, N) where both are ``ok`` and timed.

    Returns ``[{"scheme", "k", "n", "wins": [M...], "ties": [M...], "losses": [M...],
    "untimed": [M...], "unusable": [M...], "ranges": "1–64", "best_speedup": the largest speed-up
    over the baseline, baseline median / scheme median (> 1: the scheme is faster), over the timed
    M values, or None}]``: ``wins`` / ``losses`` are the M values where the [p10, p90] intervals do
    not overlap and the scheme's median is below / above the baseline's, ``ties`` those where they
    overlap (a row without p10/p90 compares by its median alone), ``untimed`` those where either
    side has no time, and ``unusable`` the part of ``untimed`` where the scheme's call cannot be
    captured in a CUDA graph (:func:`qbench.compare.capture_failure`), so it has no ``stream``
    time. ``ranges`` summarises ``wins`` over the sweep's M values (an M that is a tie, a loss or
    untimed splits a range). Raises ``ValueError`` (one line) when the file has no rows for
    ``baseline`` or none of them has ``method`` latency.
    """
    rows = doc.get("rows") or []
    # tensor-parallel rows compare with the baseline at the same tp_size and split
    base = {(r["m"], r["k"], r["n"], r.get("tp_size"), r.get("split")): _stats(r, method)
            for r in rows if r.get("scheme") == baseline}
    if not base:
        schemes = sorted({r.get("scheme") for r in rows})
        raise ValueError(f"--baseline {baseline!r} is not a scheme of this file; schemes: "
                         f"{', '.join(schemes) or 'none (the file has no rows)'}")
    if all(v is None for v in base.values()):
        states = sorted({r.get("status") for r in rows if r.get("scheme") == baseline})
        raise ValueError(f"--baseline {baseline!r} has no {method} latency at any M in this file "
                         f"(its rows: {', '.join(states)}); choose another --baseline or --method")
    out: dict[tuple, dict] = {}
    for r in rows:
        if r.get("scheme") == baseline:
            continue
        key = (r["scheme"], r["k"], r["n"], r.get("tp_size"), r.get("split"))
        tp = {"tp_size": r["tp_size"], "split": r.get("split")} if r.get("tp_size") is not None else {}
        rec = out.setdefault(key, {"scheme": r["scheme"], "k": r["k"], "n": r["n"], **tp, "wins": [],
                                   "ties": [], "losses": [], "untimed": [], "unusable": [], "best_speedup": None,
                                   "_sweep": []})
        rec["_sweep"].append(r["m"])
        mine, theirs = _stats(r, method), base.get((r["m"], r["k"], r["n"], r.get("tp_size"), r.get("split")))
        if mine is None or theirs is None:
            rec["untimed"].append(r["m"])
            if capture_failure(r, method):
                rec["unusable"].append(r["m"])
            continue
        said = verdict(theirs, mine)
        rec["wins" if said == "faster" else "losses" if said == "slower" else "ties"].append(r["m"])
        speedup = theirs["median"] / mine["median"]
        rec["best_speedup"] = speedup if rec["best_speedup"] is None else max(rec["best_speedup"], speedup)
    for rec in out.values():
        sweep = rec.pop("_sweep")
        rec["ranges"] = m_ranges(rec["wins"], sweep)  # an untimed M between two wins splits the range
    return list(out.values())


def _cols(baseline: str, method: str, shapes: int = 1) -> list[Column]:
    ms = lambda v: ", ".join(map(str, v)) or DASH  # noqa: E731
    return [
        Column("scheme", "scheme", lambda r: r["scheme"]),
        *([Column("kn", "K×N", lambda r: f"{r['k']}×{r['n']}")] if shapes > 1 else []),
        Column("ranges", f"faster than {baseline} at M", lambda r: r["ranges"] or None),
        Column("ties", "same at M (p10–p90 overlap)", lambda r: r["ties"], ms),
        Column("losses", "slower at M", lambda r: r["losses"], ms),
        Column("untimed", "not timed at M", lambda r: r["untimed"], ms),
        Column("best_speedup", f"best speed-up vs {baseline} ({baseline}/scheme, {method})",
               lambda r: r["best_speedup"], lambda v: DASH if v is None else f"{v:.2f}×", True),
    ]


def render_crossover(records: list[dict], baseline: str, method: str, fmt: str = "simple") -> str:
    """Render :func:`crossover`'s records in any :data:`qbench.render.FORMATS` format. A file with
    several K×N shapes gets a K×N column; CSV and JSON also carry ``k``, ``n``, ``wins``,
    ``baseline`` and ``method`` on every record, so a script needs no header line."""
    cols = _cols(baseline, method, len({(r["k"], r["n"]) for r in records}))
    if fmt in ("csv", "json"):
        cols = [cols[0],
                Column("k", "K", lambda r: r["k"]), Column("n", "N", lambda r: r["n"]),
                Column("baseline", "baseline", lambda r: baseline), Column("method", "method", lambda r: method),
                Column("wins", "wins", lambda r: r["wins"]),
                *[c for c in cols[1:] if c.key != "kn"],
                Column("unusable", "unusable in a graph at M", lambda r: r["unusable"])]
    return render(records, cols, fmt)


def by_m(doc: dict, column: str) -> tuple[list[dict], list[int]]:
    """A sweep as a grid: one record per (scheme, K, N) in first-seen order, one cell per M, each
    cell the text that ``qbench report``'s column ``column`` shows for that row (``stream`` gives
    the stream median with its ``*`` noisy mark, ``rel_err`` the error, ``dispatch`` the label...).

    Returns ``(records, ms)``: records ``{"scheme", "k", "n", "cells": {M: text}, "values": {M:
    raw value}}`` and the sorted M values of the file. Tables show ``cells``; CSV and JSON carry
    ``values`` (unformatted, as ``qbench report --format csv`` does; a row that is not ``ok``
    gives its status). A (scheme, M) the file lacks is a dash in a table and null in CSV/JSON.
    Raises ``ValueError`` (one line) for an unknown column key.
    """
    rows = doc.get("rows") or []
    (col,) = resolve_columns([column], rows)
    out: dict[tuple, dict] = {}
    for r in rows:
        rec = out.setdefault((r.get("scheme"), r.get("k"), r.get("n")),
                             {"scheme": r.get("scheme"), "k": r.get("k"), "n": r.get("n"), "cells": {},
                              "values": {}})
        ok = r.get("status") == "ok"
        rec["cells"][r.get("m")] = col.cell(r) if ok else r.get("status")
        rec["values"][r.get("m")] = col.value(r) if ok else r.get("status")
    ms = sorted({r.get("m") for r in rows if r.get("m") is not None})
    return list(out.values()), ms


def render_by_m(records: list[dict], ms: list[int], header: str, fmt: str = "simple",
                numeric: bool = True) -> str:
    """Render :func:`by_m`'s grid: a ``scheme`` column, then ``M=1``, ``M=2``... whose cells are
    ``header`` values (the column's header names the unit); ``numeric`` right-aligns them."""
    cols = [Column("scheme", "scheme", lambda r: r["scheme"])]
    if len({(r["k"], r["n"]) for r in records}) > 1:
        cols.append(Column("kn", "K×N", lambda r: f"{r['k']}×{r['n']}"))
    cols += [Column(f"m{m}", f"M={m}", lambda r, m=m: r["values"].get(m), str, numeric,
                    cell_override=lambda r, m=m: r["cells"].get(m) or DASH) for m in ms]
    return f"{header}, by M\n\n" + render(records, cols, fmt) if wants_prose(fmt) else render(records, cols, fmt)
