"""Regenerate the generated blocks of README.md and docs/*.md from the committed result files.

    python scripts/gen_docs.py            # rewrite every block (and every chart with --images)
    python scripts/gen_docs.py --check    # exit 1 with a diff when a block is out of date

A generated block is the output of the command named in its opening marker::

    ```sh
    qbench report results/h200/decode.json --format github
    ```
    <!-- BEGIN: qbench report results/h200/decode.json --format github -->
    ...what the command prints...
    <!-- END -->

The fenced block right above the marker must show the same command (so a reader sees how the
table was made); a block whose command does not say ``--format github`` (plain-text output such
as ``qbench recommend``) is pasted inside a ```` ```text ```` fence. Commands run in-process from
the repository root: ``qbench ARGS`` through :func:`qbench.cli.main`, ``python scripts/NAME.py
ARGS`` through that script's ``main(argv)``; stdout is captured, and a command that exits non-zero
(``qbench recommend`` may exit 1 when no M got a pick) or writes to stderr fails the run.

Charts: a line ``<!-- IMAGE: qbench plot RESULT.json -o docs/img/NAME.png ... -->`` names the
command that draws the PNGs below it. ``--images`` reruns those commands; ``--check`` only checks
that the PNGs exist (their bytes depend on the matplotlib version and fonts).

Without FILES it also rewrites (``--check``: checks) ``results/<machine>/INDEX.md``
(``scripts/results_index.py``), whose "claims it backs" come from these pages.

Exit status: 0, 1 (``--check`` found a difference or a missing chart), 2 (a command failed or a
marker is malformed).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import io
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_BLOCK = re.compile(r"<!-- BEGIN: (?P<cmd>.+?) -->\n(?P<body>.*?)<!-- END -->", re.DOTALL)
_IMAGE = re.compile(r"<!-- IMAGE: (?P<cmd>.+?) -->")
_FENCE_ABOVE = re.compile(r"```(?:sh|bash|console)?\n(?P<cmd>[^\n]+)\n```\n*$")


class DocsError(RuntimeError):
    """A command failed or a marker is malformed; the message names the file and the command."""


def run_command(command: str) -> str:
    """Run ``command`` in-process from the repository root and return its stdout.

    Raises:
        DocsError: unknown command form, non-zero exit, or anything written to stderr.
    """
    argv = shlex.split(command)
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if argv[0] == "qbench":
                from qbench import cli

                status = cli.main(argv[1:])
            elif argv[0] == "python" and len(argv) > 1 and argv[1].startswith("scripts/") and argv[1].endswith(".py"):
                status = _load_script(argv[1]).main(argv[2:])
            else:
                raise DocsError(f"cannot run {command!r}: a block's command is 'qbench ...' or 'python scripts/NAME.py ...'")
    except SystemExit as exc:  # argparse errors
        status = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(cwd)
    markdown = any(f"--format {f}" in command for f in ("github", "markdown", "md", "pipe"))
    # a Markdown table's prose goes to stderr (the table alone on stdout): only there is stderr expected
    if status not in (0, None) or (err.getvalue().strip() and not markdown):
        raise DocsError(f"{command!r} exited {status}: {err.getvalue().strip()[:500]}")
    return out.getvalue()


def _load_script(relpath: str):
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(f"_docs_script_{path.stem}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise DocsError(f"no script {relpath}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block_body(command: str, output: str) -> str:
    """What goes between the markers: Markdown output as is, plain text inside a ```text fence."""
    text = output.rstrip("\n")
    markdown = "--format github" in command or command.startswith("python scripts/docs_tables.py")
    return (text if markdown else f"```text\n{text}\n```") + "\n"


def regenerate(text: str, source: str = "<doc>") -> str:
    """``text`` with every generated block replaced by its command's current output.

    Raises:
        DocsError: a command failed, or the fenced block above a marker does not show its command.
    """
    pieces, last = [], 0
    for match in _BLOCK.finditer(text):
        command = match.group("cmd").strip()
        above = _FENCE_ABOVE.search(text[: match.start()])
        if above is None or above.group("cmd").strip() != command:
            line = text.count("\n", 0, match.start()) + 1
            raise DocsError(f"{source}:{line}: the fenced block above the marker must show the command {command!r}")
        pieces.append(text[last: match.start("body")])
        pieces.append(block_body(command, run_command(command)))
        last = match.end("body")
    pieces.append(text[last:])
    return "".join(pieces)


def image_commands(text: str) -> list[str]:
    """The chart commands (``<!-- IMAGE: ... -->``) of a document."""
    return [m.group("cmd").strip() for m in _IMAGE.finditer(text)]


def image_outputs(command: str) -> list[Path]:
    """The PNGs a ``qbench plot`` command writes: ``-o FILE.png`` and, unless ``--what roofline``,
    ``FILE-pareto.png``; of a model-step result, ``FILE.png`` alone."""
    argv = shlex.split(command)
    out = Path(argv[argv.index("-o") + 1]) if "-o" in argv else None
    if out is None:
        raise DocsError(f"image command without -o: {command!r}")
    what = argv[argv.index("--what") + 1] if "--what" in argv else "both"
    source = next((ROOT / a for a in argv[2:] if a.endswith(".json")), None)
    if source is not None and source.is_file() and '"job": "step"' in source.read_text(encoding="utf-8"):
        return [ROOT / out]  # a model-step file: one chart, the step against the context
    files = [] if what == "pareto" else [out]
    if what in ("pareto", "both"):
        files.append(out.with_name(f"{out.stem}-pareto.png"))
    return [ROOT / f for f in files]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 with a diff when out of date")
    parser.add_argument("--images", action="store_true", help="also redraw the charts (qbench plot)")
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: docs/*.md)")
    args = parser.parse_args(argv)
    files = args.files or [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    stale = 0
    try:
        for path in files:
            old = path.read_text(encoding="utf-8")
            new = regenerate(old, str(path))
            for command in image_commands(old):
                if args.images and not args.check:
                    run_command(command)
                missing = [str(p.relative_to(ROOT)) for p in image_outputs(command) if not p.is_file()]
                if missing:
                    stale += 1
                    print(f"{path}: chart missing: {', '.join(missing)} (run: {command})")
            if new == old:
                continue
            if args.check:
                stale += 1
                sys.stdout.writelines(difflib.unified_diff(
                    old.splitlines(keepends=True), new.splitlines(keepends=True),
                    fromfile=f"{path} (committed)", tofile=f"{path} (regenerated)"))
            else:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path}")
    except DocsError as exc:
        print(f"gen_docs: {exc}", file=sys.stderr)
        return 2
    if not args.files:
        status = _load_script("scripts/results_index.py").main(["--check"] if args.check else [])
        if status == 2:
            return 2
        stale += status
    if stale and args.check:
        print(f"\ngen_docs: {stale} out of date; run: python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
