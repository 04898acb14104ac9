"""``qbench report RESULT.json``: show a result file as a table, CSV or JSON.

    qbench report results/h200/decode.json --format github --columns scheme,m,cold,rel_err
    qbench report RESULT.json --sort cold --status ok      (--sort=-cold: descending)
    qbench report RESULT.json --crossover --baseline bf16
    qbench report RESULT.json --by-m           (a sweep as a grid: scheme x M, stream times)
    qbench report RESULT.json --by-m rel_err   (the grid of any column)

``--crossover`` gives each scheme's verdict against the baseline at every M (faster, same within
noise, slower: :func:`qbench.timing.stats.verdict`), the wins as ranges over the sweep's M values.
"""

from __future__ import annotations

import argparse
from itertools import groupby
from typing import Sequence

from qbench.judge import (DECISION_METHOD, METHOD_CHOICES, capture_failure, methods_present,
                          resolve_method, row_verdict, unusable_note)
from qbench.readers.common import Command, Refused, add_options, job_view, one_result, open_results, print_table
from qbench.render import COLUMNS, TABLE_WIDTH, Column, check_format, narrow, render, render_header, wants_prose
from qbench.render.columns import DASH, entry, resolve_columns
from qbench.render.view import View, column_keys
from qbench.results import ResultDoc
from qbench.row import Row

__all__ = ["COMMAND", "by_m", "crossover", "m_ranges", "render_by_m", "render_crossover", "run_report",
           "sort_rows"]


def sort_rows(rows: list[Row], key: str) -> list[Row]:
    """Rows sorted by column ``key`` (``-key`` descending), rows without a value last.

    Raises:
        UnknownColumnError: an unknown key."""
    col = resolve_columns([key.lstrip("-")], rows)[0]
    have = [r for r in rows if col.value(r) is not None]
    return sorted(have, key=col.value, reverse=key.startswith("-")) + [r for r in rows if col.value(r) is None]


def m_ranges(wins: Sequence[int], sweep: Sequence[int]) -> str:
    """``wins`` as ranges of consecutive ``sweep`` values: ``m_ranges([1, 16, 512], [1, 16, 64, 512]) == "1–16,
    512"``; ``""`` for none."""
    runs = [list(run) for won, run in groupby(sorted(set(sweep)), key=set(wins).__contains__) if won]
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in runs)


def crossover(doc: ResultDoc | dict, baseline: str = "bf16", method: str = DECISION_METHOD) -> list[dict]:
    """Per scheme other than ``baseline`` and per (K, N) (tensor-parallel rows: per tp_size and split), the M where
    its ``method`` time ``wins`` / ``ties`` / ``losses`` against the baseline's (:func:`qbench.judge.row_verdict`) or
    is ``untimed`` (``unusable``: a CUDA graph cannot capture it), ``ranges`` (:func:`m_ranges` of the wins) and
    ``best_speedup`` (baseline median / scheme median).

    Raises:
        ValueError: (one line) the baseline has no rows or no ``method`` time."""
    rows = ResultDoc.of(doc).rows
    base_rows = {r.shape: r for r in rows if r.scheme == baseline}
    base = {shape: r.stats(method) for shape, r in base_rows.items()}
    if not base:
        schemes = sorted({r.scheme for r in rows})
        raise ValueError(f"--baseline {baseline!r} is not a scheme of this file; schemes: "
                         f"{', '.join(schemes) or 'none (the file has no rows)'}")
    if all(v is None for v in base.values()):
        states = sorted({r.status for r in rows if r.scheme == baseline})
        raise ValueError(f"--baseline {baseline!r} has no {method} latency at any M in this file "
                         f"(its rows: {', '.join(states)}); choose another --baseline or --method")
    out: dict[tuple, dict] = {}
    for r in rows:
        if r.scheme == baseline:
            continue
        tp = {"tp_size": r.tp_size, "split": r.split} if r.tp_size is not None else {}
        rec = out.setdefault((r.scheme, r.k, r.n, r.tp_size, r.split),
                             {"scheme": r.scheme, "k": r.k, "n": r.n, **tp, "wins": [], "ties": [], "losses": [],
                              "untimed": [], "unusable": [], "best_speedup": None, "_sweep": []})
        rec["_sweep"].append(r.m)
        mine, theirs = r.stats(method), base.get(r.shape)
        if mine is None or theirs is None:
            rec["untimed"].append(r.m)
            if capture_failure(r, method):
                rec["unusable"].append(r.m)
            continue
        said = row_verdict(base_rows[r.shape], r, method)  # the runs' spread too (--repeat, several files)
        rec["wins" if said == "faster" else "losses" if said == "slower" else "ties"].append(r.m)
        speedup = theirs.median / mine.median
        rec["best_speedup"] = speedup if rec["best_speedup"] is None else max(rec["best_speedup"], speedup)
    for rec in out.values():
        rec["ranges"] = m_ranges(rec["wins"], rec.pop("_sweep"))  # an untimed M between two wins splits it
    return list(out.values())


def render_crossover(records: list[dict], baseline: str, method: str, fmt: str = "simple", wide: bool = False) -> str:
    """:func:`crossover`'s records in ``fmt``: per scheme (and K×N with several shapes) the M where it is faster than
    ``baseline``, the same, slower or not timed, and its best speed-up; the narrow default leaves slower and untimed
    to ``--wide`` and wraps the faster and same M at 24 and 28 characters."""
    ms = lambda v: ", ".join(map(str, v)) or DASH  # noqa: E731
    cols = [entry("scheme", "scheme"), Column("kn", "K×N", lambda r: f"{r['k']}×{r['n']}"), entry("k", "K"),
            entry("n", "N"), Column("baseline", "baseline", lambda r: baseline),
            Column("method", "method", lambda r: method), entry("wins", "wins"),
            Column("ranges", f"faster than {baseline} at M", lambda r: r["ranges"] or None),
            entry("ties", "same at M (p10–p90 overlap)", ms), entry("losses", "slower at M", ms),
            entry("untimed", "not timed at M", ms),
            entry("best_speedup", f"best speed-up vs {baseline} ({baseline}/scheme, {method})", "ratio"),
            entry("unusable", "unusable in a graph at M")]
    head = ["scheme", "kn"] if len({(r["k"], r["n"]) for r in records}) > 1 else ["scheme"]
    view = View("crossover", cols, [*head, "ranges", "ties", "best_speedup"],
                [*head, "ranges", "ties", "losses", "untimed", "best_speedup"],
                ["scheme", "k", "n", "baseline", "method", "wins", "ranges", "ties", "losses", "untimed",
                 "best_speedup", "unusable"], short={"best_speedup": f"best ×{baseline}"},
                widths={"ranges": 24, "ties": 28})
    return view.render(records, fmt, wide)


def by_m(doc: ResultDoc | dict, column: str) -> tuple[list[dict], list[int]]:
    """A sweep as a grid: ``(records, ms)``, one record ``{"scheme", "k", "n", "cells": {M: text}, "values": {M: raw
    value}}`` per (scheme, K, N) in first-seen order, and the sorted M values; a cell is ``column``'s (not ``ok``: the
    row's status).

    Raises:
        UnknownColumnError: an unknown column key."""
    doc = ResultDoc.of(doc)
    (col,) = resolve_columns([column], doc.rows)
    out: dict[tuple, dict] = {}
    for r in doc.rows:
        rec = out.setdefault((r.scheme, r.k, r.n), {"scheme": r.scheme, "k": r.k, "n": r.n, "cells": {},
                                                     "values": {}})
        ok = r.status == "ok"
        rec["cells"][r.m] = col.cell(r) if ok else r.status
        rec["values"][r.m] = col.value(r) if ok else r.status
    return list(out.values()), sorted({r.m for r in doc.rows})


def render_by_m(records: list[dict], ms: list[int], header: str, fmt: str = "simple",
                numeric: bool = True, wide: bool = False) -> str:
    """:func:`by_m`'s grid: ``scheme`` (and K×N with several shapes), then one column per M of ``header`` values, a
    dash where the file lacks the row. The narrow default cuts a table wider than 120 characters into as few, as
    even, blocks of consecutive M columns as fit, so every M stays in view."""
    fixed = [Column("scheme", "scheme", lambda r: r["scheme"])]
    if len({(r["k"], r["n"]) for r in records}) > 1:
        fixed.append(Column("kn", "K×N", lambda r: f"{r['k']}×{r['n']}"))
    grid = [Column(f"m{m}", f"M={m}", lambda r, m=m: r["values"].get(m), str, numeric,
                   cell_override=lambda r, m=m: r["cells"].get(m) or DASH) for m in ms]
    blocks = [render(records, fixed + grid, fmt)]
    if not wants_prose(fmt):
        return blocks[0]
    if narrow(fmt, wide):
        for k in range(1, len(grid) + 1):
            size, extra = divmod(len(grid), k)  # k blocks of consecutive M, the first ``extra`` one wider
            bounds = [i * size + min(i, extra) for i in range(k + 1)]
            blocks = [render(records, fixed + grid[a:b], fmt) for a, b in zip(bounds, bounds[1:])]
            if all(len(line) <= TABLE_WIDTH for block in blocks for line in block.splitlines()):
                break
    said = "" if len(blocks) == 1 else \
        f" (in {len(blocks)} tables of M columns, to fit 120 characters; --wide: one table)"
    return f"{header}, by M{said}\n\n" + "\n\n".join(blocks)


#: What ``--by-m`` given without a column stands for: the timing method (``--method`` or the default).
_BY_M_METHOD = object()


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("result", nargs="*", help="result JSON written by qbench run; several files of one scenario "
                                             "and machine (a run completed by --schemes or --resume) are one result")
    add_options(p, format=None)
    p.add_argument("--columns", help="comma-separated column keys; see the list in --help-columns")
    add_options(p, wide="every default column (stored MiB, meta %%, AI, roofline and HBM floor, every timing method; "
                        "--crossover: the M where a scheme is slower or not timed; --by-m: one table of every M, not "
                        "several blocks; tensor-parallel rows also the collective, bits/w, the local GEMM and "
                        "collective times)")
    p.add_argument("--help-columns", action="store_true", help="list the column keys and exit")
    p.add_argument("--sort", help="column key to sort by, ascending; --sort=-cold for descending")
    p.add_argument("--status", choices=("ok", "all"), default="all",
                   help="ok: only rows that ran; all (default): skipped and failed rows too")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--crossover", action="store_true",
                      help="instead of rows: for each scheme, the M where it beats --baseline")
    view.add_argument("--by-m", metavar="COLUMN", nargs="?", const=_BY_M_METHOD,
                      help="instead of rows: one line per scheme, one column per M, cells from COLUMN "
                           f"(e.g. stream, cold, rel_err, roofline_pct); without COLUMN the --method "
                           f"times (default {DECISION_METHOD})")
    add_options(p, baseline="--crossover", method="timing method of --crossover and a bare --by-m")


def _unusable(rows: Sequence[Row], method: str) -> str | None:
    """The note naming the schemes a CUDA graph cannot capture, so without a ``method`` time."""
    return unusable_note([(r.scheme, r.m) for r in rows if capture_failure(r, method)], method)


def run_report(args: argparse.Namespace) -> int:
    """Run ``qbench report`` from parsed ``args``; returns the exit status.

    Raises:
        Refused, UnknownFormatError, UnknownColumnError: bad input (one line)."""
    if getattr(args, "help_columns", False):
        for c in COLUMNS.values():
            print(f"{c.key:18} {c.header:16} {c.help}")
        return 0
    paths = [args.result] if isinstance(args.result, str) else list(args.result or [])
    if not paths:
        raise Refused("give a result JSON file (qbench report RESULT.json); --help-columns needs none")
    check_format(args.format)
    docs = open_results(paths, incomplete="keep", command="report")  # the header says so
    if len({doc.job for doc in docs}) > 1:  # each kind's table reads its own rows
        raise Refused("give files of one kind (each kind has its own table): "
                      + ", ".join(f"{p} ({d.job})" for p, d in zip(paths, docs)) + "; run report once per kind")
    view = job_view(docs, "report")
    if view is not None:  # a job kind's own view (qbench.jobs)
        return view(args, paths, docs)
    result = one_result(paths, docs)
    doc, args.result = result.doc, result.label  # messages name every file
    rows = [r for r in doc.rows if args.status == "all" or r.status == "ok"]
    if args.crossover:
        return _show_crossover(args, doc)
    if args.by_m is not None:
        return _show_by_m(args, doc, rows)
    if args.sort:
        rows = sort_rows(rows, args.sort)
    text = render(rows, column_keys(args.columns) if args.columns else None, args.format, wide=args.wide)
    return print_table(args, text, render_header(doc).splitlines())


def _show_crossover(args: argparse.Namespace, doc: ResultDoc) -> int:
    method, note = resolve_method(doc, args.method)
    try:
        records = crossover(doc, args.baseline, method)
    except ValueError as exc:
        raise Refused(f"{args.result}: {exc}") from None
    said = (f"crossover vs {args.baseline}, {method} median" + (f" ({note})" if note else "")
            + f"; speed-up = {args.baseline} time / scheme time (> 1: the scheme is faster)")
    text = render_crossover(records, args.baseline, method, args.format, wide=args.wide)
    return print_table(args, text, [*render_header(doc).splitlines(), said], [_unusable(doc.rows, method)])


def _show_by_m(args: argparse.Namespace, doc: ResultDoc, rows: list[Row]) -> int:
    if args.columns or args.sort:
        raise Refused("--columns and --sort do not apply to --by-m (its columns are the M values)")
    column, note = args.by_m, None
    if column is _BY_M_METHOD:
        column, note = resolve_method(doc, args.method)
    elif args.method is not None:
        raise Refused(f"--method does not apply to --by-m {column} (the column says what it shows); "
                      f"--by-m --method {args.method} shows that method's times")
    if column not in COLUMNS:
        raise Refused(f"--by-m: unknown column {column!r}; allowed: {', '.join(COLUMNS)}")
    present = methods_present(doc.rows)
    if column in METHOD_CHOICES and column not in present:
        raise Refused(f"--by-m {column}: no row of {args.result} has {column} latency; "
                      f"methods in this file: {', '.join(present) or 'none'}")
    kept = doc.model_copy(update={"rows": rows})  # --status's rows
    records, ms = by_m(kept, column)
    col = COLUMNS[column]
    text = render_by_m(records, ms, col.header, args.format, col.numeric, wide=args.wide)
    return print_table(args, text, [*render_header(doc).splitlines(), *filter(None, [note])],
                       [_unusable(kept.rows, column) if column in METHOD_CHOICES else None])


COMMAND = Command(
    name="report", help="show a result JSON as a table, CSV or JSON", description=__doc__.split("\n\n")[0],
    exit_codes="0; 2 bad input", add_arguments=_add_arguments, run=run_report)
