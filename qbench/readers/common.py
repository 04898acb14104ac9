"""What every reader command shares: the :class:`Command` record, the options declared once,
:func:`open_results` and :func:`fail`.

A reader is a module of :mod:`qbench.readers` with one ``COMMAND = Command(...)``; the command
line (:mod:`qbench.cli`) adds every command of :data:`qbench.readers.COMMANDS`. A reader's
``run(args)`` raises :class:`Refused` for bad input; the command prints it as one line,
``qbench <name>: <message>``, and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from qbench.judge import DECISION_METHOD, METHOD_CHOICES, incomplete_warning
from qbench.results import ResultDoc, ResultsError, read_results

__all__ = ["Command", "Refused", "add_allow_incomplete", "add_baseline", "add_format", "add_max_rel_err",
           "add_method", "fail", "open_results"]


class Refused(Exception):
    """Bad input to a reader: the message is the one line the user sees (after ``qbench <name>: ``)."""


def fail(command: str, msg: str) -> int:
    """Print ``qbench <command>: <msg>`` on stderr and return the exit status of bad input, 2."""
    print(f"qbench {command}: {msg}", file=sys.stderr)
    return 2


@dataclass(frozen=True)
class Command:
    """One reader subcommand.

    Attributes:
        name: the subcommand (``qbench <name>``).
        help: one line for ``qbench --help``.
        description: the first paragraph ``qbench <name> --help`` shows.
        exit_codes: what each exit status means (printed under ``--help``).
        add_arguments: adds the command's options to its parser.
        run: runs the command from parsed arguments; returns the exit status, or raises
            :class:`Refused` (exit 2).
    """

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
        """Run the command; a :class:`Refused` becomes one line on stderr and exit status 2."""
        try:
            return self.run(args)
        except Refused as exc:
            return fail(self.name, str(exc))


# ---- the options, declared once ----------------------------------------------------------------

def add_method(p: argparse.ArgumentParser, what: str = "timing method") -> None:
    """``--method``: one of the registry's methods; default none (each file's own, see
    :func:`qbench.judge.resolve_method`)."""
    p.add_argument("--method", default=None, choices=METHOD_CHOICES,
                   help=f"{what} (default {DECISION_METHOD}; a file without it: cold, or cpu on a CPU result)")


def add_format(p: argparse.ArgumentParser, allowed: str = "any tabulate format, markdown, csv, json") -> None:
    """``--format``: the output format, default ``simple``."""
    p.add_argument("--format", default="simple", help=f"output format: {allowed}; default simple")


def add_baseline(p: argparse.ArgumentParser, what: str) -> None:
    """``--baseline``: the scheme speed-ups are against, default ``bf16``."""
    p.add_argument("--baseline", default="bf16", help=f"baseline scheme of {what} (default bf16)")


def add_max_rel_err(p: argparse.ArgumentParser, what: str) -> None:
    """``--max-rel-err``: an error budget on the relative Frobenius error (a float >= 0)."""
    p.add_argument("--max-rel-err", type=float, default=None,
                   help=f"largest acceptable relative Frobenius error, e.g. 0.01: {what}")


def add_allow_incomplete(p: argparse.ArgumentParser, help: str) -> None:
    """``--allow-incomplete``: what the command does with result files of interrupted runs
    (``"complete": false``), said by ``help``."""
    p.add_argument("--allow-incomplete", action="store_true", help=help)


def check_max_rel_err(value: Optional[float]) -> None:
    """Raise :class:`Refused` unless ``value`` is None or a number >= 0 (NaN too is refused)."""
    if value is not None and not value >= 0:
        raise Refused(f"--max-rel-err must be >= 0, got {value}")


# ---- the files ---------------------------------------------------------------------------------

def open_results(paths: Sequence[str | os.PathLike], *, incomplete: str = "warn",
                 refusal: str = "", steps: bool = False) -> list[ResultDoc]:
    """Read every file of ``paths`` (:func:`qbench.results.read_results`), in order.

    A model-step result (:attr:`qbench.results.ResultDoc.job` ``"step"``) is refused unless
    ``steps`` (a reader that reads :attr:`~qbench.results.ResultDoc.step_rows`): one line naming
    the file and the readers that take it.

    ``incomplete`` says what happens to a file marked ``"complete": false``, after every file was
    read: ``warn`` prints :func:`qbench.judge.incomplete_warning` on stderr, ``refuse`` raises
    :class:`Refused` with ``"<path> <refusal>"`` (files before it have been warned about), ``keep``
    says nothing (the reader does).

    Raises:
        Refused: a file cannot be read or is not a qbench result (the message names it), a
            model-step result without ``steps``, or an incomplete file with ``incomplete="refuse"``.
    """
    try:
        docs = [read_results(path) for path in paths]
    except ResultsError as exc:
        raise Refused(str(exc)) from None
    for path, doc in zip(paths, docs):
        if doc.job == "step" and not steps:
            raise Refused(f"{path}: a model-step result (rows of job 'step'); this command reads per-layer "
                          f"results (qbench report, recommend and model read model-step files)")
    if incomplete != "keep":
        for path, doc in zip(paths, docs):
            warning = incomplete_warning(doc, path)
            if warning and incomplete == "refuse":
                raise Refused(f"{path} {refusal}")
            if warning:
                print(warning, file=sys.stderr)
    return docs
