"""``qbench report RESULT.json``: show a result file as a table, CSV or JSON.

    qbench report results/h200/decode.json --format github --columns scheme,m,cold,rel_err
    qbench report RESULT.json --sort cold --status ok      (--sort=-cold: descending)
    qbench report RESULT.json --crossover --baseline bf16
    qbench report RESULT.json --by-m           (a sweep as a grid: scheme x M, stream times)
    qbench report RESULT.json --by-m rel_err   (the grid of any column)

``--crossover`` and ``--by-m`` without a column read ``stream`` (or ``--method``); a file without
any stream time (written before it existed) falls back to ``cold``, or ``cpu`` on a CPU result,
with a one-line note.

Exit status: 0 on success, 2 on bad input (unreadable file, unknown column/format/sort key,
unknown baseline), with one line on stderr naming the bad value.
"""

from __future__ import annotations

import argparse
import sys

from qbench.compare import capture_failure, unusable_note
from qbench.render import COLUMNS, check_format, render, render_header, wants_prose
from qbench.render.columns import resolve_columns
from qbench.results import (
    DECISION_METHOD,
    METHOD_CHOICES,
    ResultsError,
    methods_present,
    read_results,
    resolve_method,
)

__all__ = ["register", "run_report", "sort_rows"]


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``report`` subcommand to ``subparsers``; it sets ``func=run_report``."""
    p = subparsers.add_parser("report", help="show a result JSON as a table, CSV or JSON",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("result", nargs="?", help="result JSON written by qbench run")
    p.add_argument("--format", default="simple",
                   help="table format (any tabulate format, markdown, csv, json); default simple")
    p.add_argument("--columns", help="comma-separated column keys; see the list in --help-columns")
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
    p.add_argument("--baseline", default="bf16", help="baseline scheme for --crossover")
    p.add_argument("--method", default=None, choices=METHOD_CHOICES,
                   help=f"timing method for --crossover and a bare --by-m (default {DECISION_METHOD}; "
                        "a file without it: cold, or cpu on a CPU result)")
    p.set_defaults(func=run_report)
    return p


#: What ``--by-m`` given without a column stands for: the timing method (``--method`` or the default).
_BY_M_METHOD = object()


def _fail(msg: str) -> int:
    print(f"qbench report: {msg}", file=sys.stderr)
    return 2


def sort_rows(rows: list[dict], key: str) -> list[dict]:
    """Sort rows by column ``key`` (``-key`` descending); rows without a value go last.
    Raises ``ValueError`` for an unknown key."""
    desc = key.startswith("-")
    col = resolve_columns([key.lstrip("-")], rows)[0]
    have = [r for r in rows if col.value(r) is not None]
    missing = [r for r in rows if col.value(r) is None]
    return sorted(have, key=col.value, reverse=desc) + missing


def _unusable(rows: list[dict], method: str) -> str | None:
    """The one-line note naming the schemes without a ``method`` time because their call cannot be
    captured in a CUDA graph, or ``None``."""
    return unusable_note([(r.get("scheme"), r.get("m")) for r in rows if capture_failure(r, method)], method)


def run_report(args: argparse.Namespace) -> int:
    """Run ``qbench report`` from parsed ``args``; returns the exit status."""
    if getattr(args, "help_columns", False):
        for c in COLUMNS.values():
            print(f"{c.key:18} {c.header:16} {c.help}")
        return 0
    if args.result is None:
        return _fail("give a result JSON file (qbench report RESULT.json); --help-columns needs none")
    try:
        check_format(args.format)
        doc = read_results(args.result)
    except (ValueError, ResultsError) as exc:
        return _fail(str(exc))
    table = wants_prose(args.format)  # prose lines (device header) only around terminal tables
    if args.crossover:
        from qbench.sweep_report import crossover, render_crossover

        method, note = resolve_method(doc, args.method)
        try:
            records = crossover(doc, args.baseline, method)
        except ValueError as exc:
            return _fail(f"{args.result}: {exc}")
        if table:
            print(render_header(doc))
            print(f"crossover vs {args.baseline}, {method} median" + (f" ({note})" if note else "")
                  + f"; speed-up = {args.baseline} time / scheme time (> 1: the scheme is faster)")
            print()
        print(render_crossover(records, args.baseline, method, args.format))
        unusable = _unusable(doc["rows"], method)
        if table and unusable:
            print(f"\n{unusable}")
        return 0

    if args.by_m is not None:
        from qbench.sweep_report import by_m, render_by_m

        if args.columns or args.sort:
            return _fail("--columns and --sort do not apply to --by-m (its columns are the M values)")
        note = None
        if args.by_m is _BY_M_METHOD:
            args.by_m, note = resolve_method(doc, args.method)
        elif args.method is not None:
            return _fail(f"--method does not apply to --by-m {args.by_m} (the column says what it shows); "
                         f"--by-m --method {args.method} shows that method's times")
        if args.by_m not in COLUMNS:
            return _fail(f"--by-m: unknown column {args.by_m!r}; allowed: {', '.join(COLUMNS)}")
        if args.by_m in METHOD_CHOICES and args.by_m not in methods_present(doc["rows"]):
            present = ", ".join(methods_present(doc["rows"])) or "none"
            return _fail(f"--by-m {args.by_m}: no row of {args.result} has {args.by_m} latency; "
                         f"methods in this file: {present}")
        kept = dict(doc, rows=[r for r in doc["rows"] if args.status == "all" or r.get("status") == "ok"])
        records, ms = by_m(kept, args.by_m)
        col = COLUMNS[args.by_m]
        if table:
            print(render_header(doc))
            if note:
                print(note)
            print()
        print(render_by_m(records, ms, col.header, args.format, col.numeric))
        unusable = _unusable(kept["rows"], args.by_m) if args.by_m in METHOD_CHOICES else None
        if table and unusable:
            print(f"\n{unusable}")
        return 0

    rows = list(doc["rows"])
    if args.status == "ok":
        rows = [r for r in rows if r.get("status") == "ok"]
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    try:
        if args.sort:
            rows = sort_rows(rows, args.sort)
        text = render(rows, columns, args.format)
    except ValueError as exc:
        return _fail(str(exc))
    if table:
        print(render_header(doc))
        print()  # Markdown: a table right under a text line would not start a new block
    print(text)
    return 0
