"""What every reader command shares: the :class:`Command` record, the options declared once, :func:`open_results`,
several files read as one :class:`Result`, and :func:`show_table`. A reader's ``run(args)`` raises
:class:`Refused` for bad input: one line, ``qbench <name>: <message>``, exit 2."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from qbench import jobs
from qbench.judge import DECISION_METHOD, METHOD_CHOICES, budget_flags, combine_rows, incomplete_warning
from qbench.hardware import machine_differences
from qbench.render import MARKDOWN_FORMATS, UnknownColumnError, UnknownFormatError, split_markdown, wants_prose
from qbench.render.safe import TerminalStream
from qbench.render.view import View, column_keys, show
from qbench.results import ResultDoc, ResultsError, read_results
from qbench.row import Row

__all__ = ["ACT_ON", "Command", "DEFAULT_BASELINE", "Refused", "Result", "SHARED_OPTIONS", "add_budgets",
           "add_options", "blocking_differences", "chart_folder", "check_baseline", "check_budgets", "declared_budgets",
           "group_results", "incomplete_notes", "job_view", "merge_docs", "one_chart", "one_machine", "one_result",
           "open_results", "print_table", "refuse_budgets", "refuse_options", "run_copies", "show_table", "split_runs",
           "Table",
           "timing_differences", "warn_machine_differences"]


class Refused(Exception):
    """Bad input to a reader: the message is the one line the user sees (after ``qbench <name>: ``)."""


@dataclass(frozen=True)
class Command:
    """One reader subcommand: ``name``, ``help``, ``description``, ``exit_codes``, ``add_arguments(parser)`` and
    ``run(args)`` (the exit status; raises :class:`Refused`, or an unknown format or column: exit 2)."""

    name: str
    help: str
    description: str
    exit_codes: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

    def register(self, subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
        """Add the subcommand to ``subparsers``; the parsed arguments' ``func`` runs it."""
        p = subparsers.add_parser(self.name, help=self.help, description=self.description,
                                  epilog=f"exit status: {self.exit_codes}")
        self.add_arguments(p)
        p.set_defaults(func=self)
        return p

    def __call__(self, args: argparse.Namespace) -> int:
        """Run the command; a :class:`Refused` (or :class:`qbench.render.UnknownFormatError`,
        :class:`qbench.render.UnknownColumnError`) becomes one line on stderr and exit status 2. Output goes through
        :class:`qbench.render.safe.TerminalStream`; a Markdown table is alone on stdout, its prose on stderr."""
        out, err = sys.stdout, sys.stderr
        buffer = io.StringIO() if getattr(args, "format", None) in MARKDOWN_FORMATS else None
        sys.stdout, sys.stderr = TerminalStream(buffer or out), TerminalStream(err)
        try:
            return self.run(args)
        except (Refused, UnknownFormatError, UnknownColumnError) as exc:
            print(f"qbench {self.name}: {exc}", file=sys.stderr)
            return 2
        finally:
            sys.stdout, sys.stderr = out, err
            if buffer is not None:
                tables, prose = split_markdown(buffer.getvalue())
                TerminalStream(err).write(prose)
                TerminalStream(out).write(tables)


#: ``--baseline``'s default.
DEFAULT_BASELINE = "bf16"


def limit(text: str) -> float:
    """A budget option's value: the float ``text``, ``-0`` read as 0."""
    return float(text) + 0.0


#: The options several readers take, by destination: argparse's keywords and the help, ``{}`` for what the reader
#: says of it. ``--method``: one of the registry's, default none (:func:`qbench.judge.resolve_method`);
#: ``--max-rel-err``: a budget on the relative Frobenius error (a float >= 0).
SHARED_OPTIONS = {
    "method": ({"default": None, "choices": METHOD_CHOICES},
               f"{{}} (default {DECISION_METHOD}; a file without it: cold, or cpu on a CPU result)"),
    "format": ({"default": "simple"}, "output format: {}; default simple"),
    "baseline": ({"default": DEFAULT_BASELINE}, "baseline scheme of {} (default bf16)"),
    "max_rel_err": ({"type": limit, "default": None}, "largest acceptable relative Frobenius error, e.g. 0.01: {}"),
    "wide": ({"action": "store_true"}, "{}; without it a table fits 120 characters"),
    "allow_incomplete": ({"action": "store_true"}, "{}"),
}
#: What ``--method`` and ``--format`` say when the reader says nothing (None).
_UNSAID = {"method": "timing method", "format": "any tabulate format, markdown, csv, json"}


def add_options(p: argparse.ArgumentParser, **said: Optional[str]) -> None:
    """Add the :data:`SHARED_OPTIONS` named, in order, each help saying ``said[dest]`` (None: the default words)."""
    for dest, what in said.items():
        kw, help = SHARED_OPTIONS[dest]
        p.add_argument("--" + dest.replace("_", "-"), **kw, help=help.format(what or _UNSAID[dest]))


def check_baseline(paths: str | Sequence[str], schemes, baseline: str, *, always: bool = False) -> None:
    """Raise :class:`Refused` (naming the files, the baseline and their schemes) for a ``--baseline`` that names none
    of ``schemes``; the default only with ``always`` (a view that divides by it): a file without bf16 keeps the rest."""
    schemes = set(schemes)
    if not (always or baseline != DEFAULT_BASELINE) or baseline in schemes:
        return
    paths = [paths] if isinstance(paths, str) else list(paths)
    raise Refused(f"{', '.join(paths)}: --baseline {baseline!r} is not a scheme of "
                  f"{'this file' if len(paths) == 1 else 'these files'}; schemes: {', '.join(sorted(schemes))}")


def check_max_rel_err(value: Optional[float]) -> None:
    """Raise :class:`Refused` unless ``value`` is None or a number >= 0 (not NaN)."""
    if value is not None and not value >= 0:
        raise Refused(f"--max-rel-err must be >= 0, got {value}")


def open_results(paths: Sequence[str | os.PathLike], *, incomplete: str = "warn",
                 refusal: str = "", command: str = "") -> list[ResultDoc]:
    """Read every file of ``paths`` (:func:`qbench.results.read_results`). A file marked ``"complete": false``:
    ``incomplete="warn"`` prints :func:`qbench.judge.incomplete_warning` on stderr, ``"refuse"`` refuses
    ``"<path> <refusal>"``, ``"keep"`` says nothing. Raises :class:`Refused` for an unreadable file, a job kind
    other than the layer's without a view for ``command``, an incomplete file with ``"refuse"``."""
    try:
        docs = [read_results(path) for path in paths]
    except ResultsError as exc:
        raise Refused(str(exc)) from None
    for path, doc in zip(paths, docs):
        kind = jobs.get(doc.job)
        if kind.name != jobs.DEFAULT and command not in kind.views:
            offered = ", ".join(f"qbench {c}" for c in kind.views if c not in ("run", "budgets"))
            raise Refused(f"{path}: " + (kind.refusal or f"a {kind.name} result (rows of job {kind.name!r}); this "
                                         f"command does not read it ({offered or 'no reader'} does)"))
    for path, doc in zip(paths, docs):
        if incomplete != "keep" and (warning := incomplete_warning(doc, path)):
            if incomplete == "refuse":
                raise Refused(f"{path} {refusal}")
            print(warning, file=sys.stderr)
    return docs


def declared_budgets() -> list:
    """Every job kind's budget options (:class:`qbench.judge.Budget`), in registry order."""
    return [b for kind in jobs.JOBS.values() if "budgets" in kind.views for b in kind.view("budgets")]


def add_budgets(p: argparse.ArgumentParser) -> None:
    """One option per :func:`declared_budgets` entry (a float, its ``help``)."""
    for b in declared_budgets():
        p.add_argument(b.flag, type=limit, help=b.help)


def check_budgets(args: argparse.Namespace) -> list:
    """The :func:`declared_budgets` given in ``args``; :class:`Refused` for a value that is no budget (its check)."""
    given = [b for b in declared_budgets() if getattr(args, b.name, None) is not None]
    for b in given:
        if (why := b.check(getattr(args, b.name))):
            raise Refused(why)
    return given


def refuse_budgets(args: argparse.Namespace) -> None:
    """Refuse quality budgets (:func:`check_budgets`) given without a quality file."""
    if check_budgets(args):
        raise Refused(f"{budget_flags(declared_budgets())} are budgets on a quality result (qbench run of a "
                      "[quality] scenario): give its file beside the step file")


def job_view(docs: Sequence[ResultDoc], command: str) -> Optional[Callable[..., int]]:
    """The view ``command`` takes for ``docs``: their first job kind (registry order) that offers one, else None."""
    present = {doc.job for doc in docs}
    return next((kind.view(command) for kind in jobs.JOBS.values() if kind.name in present and command in kind.views),
                None)


@dataclass
class Result:
    """Several result files of one scenario and machine read as one: ``paths`` as given, ``doc`` their rows as one
    document (:func:`merge_docs`), ``runs`` the independent runs they hold (:func:`split_runs`)."""

    paths: list[str]
    doc: ResultDoc
    runs: list[ResultDoc]

    @property
    def label(self) -> str:
        """The files, joined by `` + ``."""
        return " + ".join(str(p) for p in self.paths)


def merge_docs(docs: Sequence[ResultDoc]) -> ResultDoc:
    """The rows of ``docs`` (files of one scenario) as one document: the first file's fields, rows in first-seen
    order, a row in several files combined (:func:`qbench.judge.combine_rows`); ``complete`` False if any says so."""
    if len(docs) == 1:
        return docs[0]
    by_key: dict[tuple, list[Row]] = {}
    for doc in docs:
        for row in doc.rows:
            by_key.setdefault(row.key, []).append(row)
    complete = False if any(d.complete is False for d in docs) else docs[0].complete
    return docs[0].model_copy(update={"rows": [combine_rows(rows) for rows in by_key.values()], "complete": complete})


def run_copies(row: Row) -> list[Row]:
    """A row as the runs it holds: one copy per run of ``repeats``, its stats scaled to that run's median."""
    rep = row.repeats
    if rep is None or not rep.medians:
        return [row]
    out = []
    for i in range(max(len(v) for v in rep.medians.values())):
        lat = {}
        for method, stats in row.latency_us.items():
            meds = rep.medians.get(method) or []
            if stats is not None and stats.median is not None and i < len(meds):
                f = meds[i] / stats.median
                stats = stats.model_copy(update={k: getattr(stats, k) * f for k in ("median", "p10", "p90", "mean")
                                                 if getattr(stats, k) is not None})
            lat[method] = stats
        out.append(row.model_copy(update={"latency_us": lat, "repeats": None}))
    return out


def split_runs(docs: Sequence[ResultDoc]) -> list[ResultDoc]:
    """The independent runs ``docs`` (files of one scenario) hold, one document each: a file sharing a row identity
    with another is a run of its own rows (rows with ``repeats``: a run per median), completed by the rows of the
    other files; ``[merge_docs(docs)]`` when there is one run."""
    counts = Counter(row.key for doc in docs for row in doc.rows)
    merged = merge_docs(docs)
    runs: list[dict[tuple, Row]] = []
    completing = []
    for doc in docs:
        if not any(counts[r.key] > 1 or r.repeats is not None for r in doc.rows):
            completing += doc.rows  # a completion file: its rows are in every run
            continue
        copies = {r.key: run_copies(r) for r in doc.rows}
        for i in range(max(len(v) for v in copies.values())):
            runs.append({key: v[min(i, len(v) - 1)] for key, v in copies.items()})
    if len(runs) < 2:
        return [merged]
    for run in runs:
        run.update({r.key: r for r in completing if r.key not in run})
    return [merged.model_copy(update={"rows": [run[r.key] for r in merged.rows if r.key in run]}) for run in runs]


def group_results(paths: Sequence[str], docs: Sequence[ResultDoc]) -> list[Result]:
    """Layer files of one scenario and one machine (no :func:`blocking_differences`) grouped into one
    :class:`Result` each, in order of their first file; a file named twice counts once."""
    groups: list[tuple[tuple, list[int]]] = []
    seen: set[str] = set()
    for i, doc in enumerate(docs):
        real = os.path.realpath(paths[i])
        if real in seen:
            continue
        seen.add(real)
        key = (doc.job, doc.scenario.name, doc.machine) if doc.job == "layer" and doc.scenario.name else (i,)
        for gkey, members in groups:
            if gkey == key and not blocking_differences(timing_differences(docs[members[0]], doc)):
                members.append(i)
                break
        else:
            groups.append((key, [i]))
    return [Result([paths[i] for i in members], merge_docs([docs[i] for i in members]),
                   split_runs([docs[i] for i in members])) for _, members in groups]


def one_result(paths: Sequence[str], docs: Sequence[ResultDoc], side: str = "") -> Result:
    """The one :class:`Result` the files are (:func:`group_results`); several: :class:`Refused` after ``side``."""
    results = group_results(paths, docs)
    if len(results) > 1:
        raise Refused(f"{side}the files are not one result (one scenario on one machine): "
                      + "; ".join(f"{r.label} ({r.doc.scenario.name or r.doc.job}, {r.doc.machine})" for r in results))
    return results[0]


#: The :func:`qbench.hardware.machine_differences` lines that make two files two machines (the kernels
#: that run differ): device, GPU, compute capability, CPU capability and instruction set.
BLOCKING_PREFIXES = ("device:", "GPU:", "compute capability:", "CPU capability", "CPU instruction set:")

#: The lines that bear on CUDA timings (two CUDA runs: the host's CPU facts are left out).
GPU_PREFIXES = ("device:", "GPU", "compute capability:", "SM count:")


def blocking_differences(differences: Sequence[str]) -> list[str]:
    """The lines of ``differences`` that start with one of :data:`BLOCKING_PREFIXES`."""
    return [d for d in differences if d.startswith(BLOCKING_PREFIXES)]


def timing_differences(a: ResultDoc, b: ResultDoc) -> list[str]:
    """:func:`qbench.hardware.machine_differences` of two documents' ``env`` that can change their timings: only the
    :data:`GPU_PREFIXES` lines when both are CUDA runs."""
    lines = machine_differences(a.env.model_dump(mode="json"), b.env.model_dump(mode="json"))
    if str(a.env.device or "").startswith("cuda") and str(b.env.device or "").startswith("cuda"):
        lines = [line for line in lines if line.startswith(GPU_PREFIXES)]
    return lines


#: Which of qbench's three answers decides what, said once by each view of ``qbench model``.
ACT_ON = ("which answer to act on: the measured step decides a model (a [model] scenario: it includes attention, "
          "the KV cache and the gaps between kernels); the layer view (qbench recommend on one layer's file) decides "
          "a kernel for that layer; Σ linear, the sum of per-layer times, only predicts the step")


def one_machine(paths: Sequence[str], docs: Sequence[ResultDoc], why: str = "") -> None:
    """Refuse files of different machines (``why``: what the view adds up), then :func:`warn_machine_differences`."""
    if len({doc.machine for doc in docs}) > 1:
        raise Refused("the files were measured on different machines ("
                      + "; ".join(f"{p}: {d.machine}" for p, d in zip(paths, docs)) + ")" + why)
    warn_machine_differences(list(paths), list(docs))


def warn_machine_differences(paths: list[str], docs: list[ResultDoc]) -> list[str]:
    """Print on stderr, and return, a ``warning:`` per :func:`timing_differences` line of the first file and another."""
    out = [f"warning: {paths[0]} (A) and {path} (B) may come from different machines: {line}"
           for path, doc in zip(paths[1:], docs[1:]) for line in timing_differences(docs[0], doc)]
    for line in dict.fromkeys(out):
        print(line, file=sys.stderr)
    return out


def incomplete_notes(paths: Sequence[str], docs: Sequence[ResultDoc], noted: bool) -> list[str]:
    """A note per incomplete file when ``noted`` (``--allow-incomplete``, room for notes); else a stderr warning."""
    notes = []
    for path, doc in zip(paths, docs):
        warning = incomplete_warning(doc, path)
        if warning and noted:
            notes.append(f"{path}: incomplete (\"complete\": false, {len(doc.rows)} rows), "
                         "read with --allow-incomplete")
        elif warning:
            print(warning, file=sys.stderr)
    return notes


@dataclass(frozen=True)
class Table:
    """A job kind's table of one result: the declared ``view``, its ``records``, ``describe`` and ``notes`` lines."""

    view: View
    records: Sequence
    describe: Sequence[str] = ()
    notes: Sequence[str] = ()


def show_table(args: argparse.Namespace, doc: ResultDoc, table: Table, label: Optional[str] = None) -> int:
    """Print ``table`` of ``doc`` (:func:`qbench.render.view.show`): ``report``'s (``label``: the file; ``--columns``
    picks keys, an unknown one: :class:`Refused`) or ``run``'s (no label). Returns the records shown."""
    wide = getattr(args, "wide", False)
    try:
        columns = table.view.columns(args.format, wide, column_keys(getattr(args, "columns", None)) if label else None)
    except ValueError as exc:
        raise Refused(f"{label}: {exc}") from None
    warning = incomplete_warning(doc, label or "this result")
    show(table.records, columns, args.format, wide=wide, describe=table.describe,
         warning=warning.removeprefix("warning: ") if warning else None, notes=table.notes)
    return len(table.records)


def print_table(args: argparse.Namespace, text: str, describe: Sequence[str], notes: Sequence = ()) -> int:
    """Print ``text``, a rendered table, in the one layout with ``describe`` above and the true ``notes`` under it,
    the prose only around a terminal table. Returns 0."""
    prose = wants_prose(args.format)
    show((), (), args.format, wide=getattr(args, "wide", False), describe=describe if prose else (),
         notes=[n for n in notes if n] if prose else (), table=text)
    return 0


def refuse_options(args: argparse.Namespace, names: Sequence[str], why: str) -> None:
    """Refuse the first option of ``names`` given in ``args``: ``why`` with ``{flag}`` replaced (a path may hold {})."""
    for name in names:
        if getattr(args, name, None):
            raise Refused(why.replace("{flag}", "--" + name.replace("_", "-")))


def chart_folder(out: Path, targets: Sequence[Path], force: bool) -> None:
    """Refuse an ``out`` not ending .png, .svg or .pdf, or existing ``targets`` without ``force``; make its folder."""
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise Refused(f"-o must name a .png, .svg or .pdf file, got {out}")
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:
        raise Refused(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
                      "pass --force to overwrite")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Refused(f"cannot write {out}: {exc.strerror or exc}") from None


def write_chart(path: Path, draw: Callable[[], Path]) -> None:
    """Print the path ``draw()`` writes; one that cannot be written is refused in one line."""
    try:
        print(draw())
    except OSError as exc:
        raise Refused(f"cannot write {path}: {exc.strerror or exc}") from None


def one_chart(args: argparse.Namespace, draw: Callable[[Path], Path]) -> int:
    """``qbench plot FILE -o OUT`` for a kind with one chart: :func:`chart_folder`, then ``draw(OUT)``. Returns 0."""
    out = Path(args.output)
    chart_folder(out, [out], getattr(args, "force", False))
    write_chart(out, lambda: draw(out))
    return 0
