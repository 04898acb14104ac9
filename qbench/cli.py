"""Command line: ``qbench run | check | list | report | compare | recommend | model | plot``.

``python -m qbench run scenarios/decode.toml`` is the main job. Bad input gets one line on stderr
naming the file, key and value, and exit status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

#: What the exit status of ``run`` and ``list`` means (printed under their --help); each reader
#: command carries its own (:class:`qbench.readers.common.Command`).
EXIT_CODES = {
    "run": "0 at least one row ok; 1 every row skipped or failed; 2 bad input (nothing measured or written), "
           "another run on the same --out, or a write that failed mid-run (the message names the partial file "
           "holding the rows so far); 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP (the message names "
           "the partial file holding the rows so far, <out>.partial.json; --resume measures the rest)",
    "check": "0 every scenario is valid; 2 one is not (one line per bad file naming the file, key and value)",
    "list": "0; 2 bad --device",
}


def _validated(path: str, schemes: Optional[list[str]] = None):
    """The scenario at ``path`` (read once: a pipe such as ``<(...)`` too), validated without
    importing torch, narrowed to ``--schemes``."""
    from qbench import scenario

    loaded = scenario.loads(scenario.read_bytes(path), path)
    return loaded if schemes is None else scenario.only_schemes(loaded, schemes)


def _cmd_check(args: argparse.Namespace) -> int:
    """Each scenario file checked in turn: its summary line, or its one error line (as :func:`main`
    says any user error); exit 2 if any failed."""
    status = 0
    for path in args.scenario:
        try:
            _check_one(path, args.schemes)
        except Exception as exc:
            status = _user_error(exc, args.debug)
    return status


def _check_one(path: str, schemes: Optional[list[str]]) -> int:
    from qbench import jobs

    loaded = _validated(path, schemes)
    labels = ", ".join(e.label for e in loaded.schemes)
    shape = jobs.load(jobs.of_scenario(loaded).describe)(loaded)  # the kind's own line (torch-free)
    print(f"{path}: ok: {len(loaded.schemes)} scheme{'s' if len(loaded.schemes) != 1 else ''} ({labels}); "
          f"{shape}; device {loaded.device}")
    return 0


def runner_error(message: str) -> Exception:
    """A bad command-line value, refused before anything runs (one line, exit 2)."""
    from qbench.lifecycle import RunError

    return RunError(message)


def _cmd_run(args: argparse.Namespace) -> int:
    from qbench import forkserver, jobs, render

    loaded = _validated(args.scenario, args.schemes)  # a typo is answered before any torch import
    kind = jobs.of_scenario(loaded)
    if not 1 <= args.repeat <= 20:
        raise runner_error(f"--repeat: must be an integer in 1..20 (independent runs per scheme), got {args.repeat}")
    if args.repeat > 1 and kind.deterministic:  # nothing to compare between runs
        raise runner_error(f"--repeat: a {loaded.job} scenario's statistics are the same on every run (its workers "
                           f"compute the same numbers), so repeats compare nothing; run it once, got {args.repeat}")
    render.check_format(args.format)  # a bad --format is refused before anything is measured
    if args.columns:  # so is an unknown --columns key (UnknownColumnError: one line, exit 2)
        render.resolve_columns([c.strip() for c in args.columns.split(",") if c.strip()], [])
    from qbench import lifecycle  # torch-free: its checks of the output come before torch and the forkserver

    named = args.out or loaded.output
    if args.resume and not kind.resumable:
        raise runner_error(f"--resume: a {kind.name} scenario runs its jobs as one pipeline and keeps no partial "
                           "rows; run it again (--force replaces its file)")
    if named:  # an existing result or partial file is refused at once, with no forkserver left behind
        lifecycle.refuse_early(Path(named), args.force, args.resume, kind.resumable)
    # Then, before this process imports torch: the forkserver's own imports (torch, qbench._preload)
    # overlap this process's.
    forkserver.start_early(loaded, args.device)
    from qbench import runner

    say = None if args.quiet else _say
    terminal = sys.stderr.isatty()
    with lifecycle.stop_signals():  # SIGTERM and SIGHUP stop a run as Ctrl-C does; a second signal waits
        try:
            outcome = runner.run(loaded, device=args.device, out=args.out, force=args.force, progress=say,
                                 show_bar=not args.quiet and terminal, per_scheme=say if not terminal else None,
                                 resume=args.resume, repeat=args.repeat)
        except lifecycle.RunInterrupted as exc:
            print(f"qbench: {exc.message()}", file=sys.stderr)
            return exc.exit_code
    from qbench import jobs
    from qbench.results import ResultDoc

    # a Markdown table is paste-ready on stdout: its prose goes to stderr too (_table)
    machine = not render.wants_prose(args.format) or args.format in render.MARKDOWN_FORMATS
    # a document meant to be parsed (csv, json, tsv, latex, html, wiki markup) is alone on stdout; the rest
    # goes to stderr
    doc = ResultDoc.of(outcome.doc)
    job_view = jobs.get(doc.job).view("run")
    if job_view is not None:  # the job kind's own table (qbench.jobs), paste-ready in Markdown too
        _paste_ready(args.format, lambda: job_view(doc, args))  # a view may show fewer rows than the file holds
    else:
        print(render.render_header(doc), file=sys.stderr if machine else sys.stdout)
        from qbench.layer import weight

        if weight.weight_is_synthetic(loaded):  # the errors below are not a trained layer's
            print(f"warning: errors come from a synthetic weight ({weight.weight_source(loaded)}), not a trained "
                  "layer; [weight] source = 'hf-checkpoint' or 'safetensors' measures a real one",
                  file=sys.stderr if machine else sys.stdout)
        else:  # a real weight, but the activations are still qbench's own
            print(f"note: {_activations_note(loaded)}", file=sys.stderr if machine else sys.stdout)
        columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
        _table(render.render(doc.rows, columns, fmt=args.format, wide=args.wide), args.format)
    n = len(doc.rows)
    print(f"\nwrote {outcome.path} ({n} row{'' if n == 1 else 's'}, {outcome.doc['wall_s']:.1f} s)",
          file=sys.stderr if machine else sys.stdout)
    if job_view is None and not machine:  # the answer to the README's question, and where to read why
        from qbench.readers.recommend import pick_lines

        for line in pick_lines(doc, str(outcome.path)):
            print(line)
    if outcome.exit_code:
        print(f"qbench: {outcome.message}", file=sys.stderr)
    return outcome.exit_code


def _say(line: str) -> None:
    """A run's progress line on stderr; once the reader of a pipe has left (``qbench run ... 2>&1 |
    head``), stderr is pointed at the null device and the run goes on: its rows are measured and
    its result file written, the lines nobody reads discarded."""
    try:
        print(line, file=sys.stderr, flush=True)
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())


def _activations_note(loaded) -> str:
    """What a row's error means when its weight is a real one: the activations are seeded N(0, 1)
    (with the ``[inputs]`` outlier columns, if any), not the model's own hidden states."""
    inputs = loaded.inputs
    outliers = (f", {inputs.outlier_fraction:g} of the K columns scaled to {inputs.outlier_magnitude:g}"
                if inputs.outlier_fraction else "")
    return (f"the weight is real ({loaded.weight.source}), the activations are not: seeded N(0, 1){outliers} "
            "([inputs]); each error is this weight's on synthetic inputs, not the model's on real text")


def _table(text: str, fmt: str) -> None:
    """Print a run's table: in a Markdown format the table lines alone on stdout and the notes
    under it on stderr (:func:`_paste_ready`), else as it is."""
    _paste_ready(fmt, lambda: print(text))


def _paste_ready(fmt: str, show):
    """Run ``show`` (which prints); in a Markdown format its table lines go alone to stdout and
    every other line to stderr (:func:`qbench.render.split_markdown`). Returns what ``show`` returns."""
    import contextlib
    import io

    from qbench import render

    if fmt not in render.MARKDOWN_FORMATS:
        return show()
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        result = show()
    tables, prose = render.split_markdown(buffer.getvalue())
    sys.stderr.write(prose)
    sys.stdout.write(tables)
    return result


def _cmd_list(args: argparse.Namespace) -> int:
    import torch
    from tabulate import tabulate

    from qbench import env as envmod
    from qbench import schemes

    device = envmod.resolve_device(args.device)  # a bad --device is one line (ValueError "device ...")
    rows = []
    for s in schemes.all_schemes():
        reason = s.unavailable_reason(device, s.options_model())
        rows.append([s.name, s.library, s.weight_dtype, s.activation_name,
                     s.compute_dtype, s.nominal_bits, "yes" if reason is None else "no",
                     (reason or s.summary) + ("; needs calibration activations ([quality] calibration)"
                                              if s.needs_calibration and reason else "")])
    headers = ["scheme", "library", "weight", "activations", "compute", "nominal bits", "runs here",
               "why not / what it is"]
    if args.format == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        return 0
    if args.format == "json":
        import json

        print(json.dumps([dict(zip(headers, r)) for r in rows], indent=2, ensure_ascii=False))
        return 0
    from tabulate import tabulate_formats

    from qbench.render import TABLE_WIDTH, narrow

    if args.format not in tabulate_formats:
        print(f"qbench: list: unknown format {args.format!r}; allowed: csv, json, {', '.join(tabulate_formats)}",
              file=sys.stderr)
        return 2
    widths = None
    if narrow(args.format, args.wide):  # a terminal table fits 120 characters: the last column wraps in its cell
        keep = [0, 1, 5, 6, 7]  # scheme, library, nominal bits, runs here, why not / what it is
        rows, headers = [[r[i] for i in keep] for r in rows], ["scheme", "library", "bits", "runs here",
                                                               "why not / what it is"]
        widths = [None] * (len(headers) - 1) + [max(len(r[-1]) for r in rows)]
    text = tabulate(rows, headers=headers, tablefmt=args.format)
    while widths and max(map(len, text.splitlines())) > TABLE_WIDTH and widths[-1] > 24:  # the last column narrows
        widths[-1] -= max(map(len, text.splitlines())) - TABLE_WIDTH
        text = tabulate(rows, headers=headers, tablefmt=args.format, maxcolwidths=widths, break_on_hyphens=False)
    print(f"schemes on {device} (torch {torch.__version__}):")
    print(text)
    if widths:
        print("--wide: every column (weight, activation and compute dtypes), one line per scheme")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="qbench", description="Compare quantization schemes for an LLM's linear layers: per layer, per decode step, "
                                     "and their quality on a real checkpoint.")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks instead of one-line errors (anywhere on the command line)")
    from qbench import __version__

    parser.add_argument("--version", action="version", version=f"qbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a TOML scenario and write a result JSON")
    p.add_argument("scenario", help="scenario file, e.g. scenarios/decode.toml")
    p.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N (default: the scenario's, else auto)")
    p.add_argument("-o", "--out", default=None,
                   help="result JSON path (default: results/runs/<name>-<device>-<time>.json)")
    p.add_argument("--force", action="store_true", help="overwrite an existing result file (never a partial file)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows of <out>.partial.json (else of <out>) and measure only the schemes it lacks, "
                        "then write one complete file (without --out: the newest partial file of this scenario "
                        "and device under results/runs)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure each scheme in N independent worker processes (new compilation and autotuning "
                        "each time) and record the spread between their medians beside each run's p10-p90 "
                        "(default 1)")
    p.add_argument("--format", default="simple", help="table format: any tabulate format, or csv / json")
    p.add_argument("--columns", default=None, help="comma-separated column keys of the table (qbench report "
                                                   "--help-columns lists them)")
    p.add_argument("--wide", action="store_true", help="every default column (without it the table fits 120 "
                                                       "characters)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress bar, per-scheme lines or warnings (anywhere on the command line)")
    p.add_argument("--schemes", default=None, action="append", metavar="LABEL[,LABEL...]",
                   help="run only these schemes of the scenario, by row label (e.g. int4-weight-only+compiled); "
                        "repeatable; a value that is itself a label is taken whole (labels may hold commas: "
                        "int4-weight-only[activation_dtype=fp16,group_size=64]); the result file's scenario "
                        "lists only them")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("check", help="validate TOML scenarios without running them (no torch import: instant)")
    p.add_argument("scenario", nargs="+", help="scenario files, e.g. scenarios/*.toml")
    p.add_argument("--schemes", default=None, action="append", metavar="LABEL[,LABEL...]",
                   help="check that these row labels are in the scenario (as run --schemes would)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("list", help="list every scheme and whether it can run here")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--format", default="simple", help="any tabulate format, or csv / json")
    p.add_argument("--wide", action="store_true", help="every column, one line per scheme (without it a terminal "
                                                       "table fits 120 characters)")
    p.set_defaults(func=_cmd_list)

    for name, subparser in sub.choices.items():
        subparser.epilog = f"exit status: {EXIT_CODES[name]}"
    from qbench.readers import COMMANDS

    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of ``qbench`` and ``python -m qbench``; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    head = argv[: argv.index("--")] if "--" in argv else argv
    debug = "--debug" in head
    quiet = "--quiet" in head or "-q" in head
    # --debug and --quiet/-q are accepted anywhere (before or after the subcommand), as users type them
    argv = [a for a in argv if a not in ("--debug", "--quiet", "-q")]
    args = parser.parse_args(argv)
    args.debug = debug
    if quiet:
        args.quiet = True
    try:
        return args.func(args)
    except BrokenPipeError:  # `qbench report ... | head`: the reader left; not an error of ours (a run's
        import os  # progress lines never raise it: _say; its file is written before its table is shown)

        for stream in (sys.stdout, sys.stderr):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        return 0
    except KeyboardInterrupt as exc:
        said = exc.message() if hasattr(exc, "message") else "interrupted; an existing result file was left as it was"
        print(f"qbench: {said}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except Exception as exc:
        return _user_error(exc, args.debug)


def _user_error(exc: Exception, debug: bool) -> int:
    """Say a user error (:func:`_is_user_error`) in one line and return exit status 2; re-raise
    anything else, and everything under ``--debug``. Call it from an ``except`` block."""
    if debug or not _is_user_error(exc):
        raise exc
    print(f"qbench: {exc}", file=sys.stderr)
    return 2


def _is_user_error(exc: Exception) -> bool:
    from qbench.schemes import PluginError
    from qbench.tables import ScenarioError

    user: tuple = (ScenarioError, PluginError)
    lifecycle = sys.modules.get("qbench.lifecycle")  # imported only by a run: `check` imports less
    if lifecycle is not None:
        user += (lifecycle.RunError,)
    try:
        from qbench.results import ResultsError

        user += (ResultsError,)
    except ImportError:
        pass
    try:
        from qbench.render import UnknownFormatError
        from qbench.render.columns import UnknownColumnError

        user += (UnknownFormatError, UnknownColumnError)
    except ImportError:
        pass
    return isinstance(exc, user) or (isinstance(exc, ValueError) and str(exc).startswith("device "))
