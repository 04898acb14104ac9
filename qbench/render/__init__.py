"""Render result rows: one renderer per output format over the same list of row dicts.

``render(rows, columns, fmt)`` looks ``fmt`` up in :data:`FORMATS` (format name -> renderer);
every tabulate format is a table format, plus ``markdown``/``md`` (aliases of ``pipe``), ``csv``
and ``json``. Columns come from :mod:`qbench.render.columns`. ``render_header(doc)`` says what
the numbers are: device, library versions, and which timing methods (CPU or CUDA).

Strings from result files are made harmless on the way out (:mod:`qbench.render.safe`): control
characters escaped in tables, headers and CSV, ``|`` escaped in Markdown tables, CSV formula cells
neutralised; JSON escapes them itself.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Callable, Iterable, Optional, Sequence

from tabulate import tabulate_formats

from qbench.render.columns import (COLUMNS, DASH, NARROW_HEADERS, Column, UnknownColumnError, default_columns,
                                   resolve_columns)
from qbench.render.csv import render_csv
from qbench.render.json import render_json
from qbench.render.safe import visible
from qbench.render.table import render_table
from qbench.judge import CPU_METHOD, DECISION_METHOD, methods_present
from qbench.results import Env, ResultDoc
from qbench.row import Row
from qbench.timing import registry

__all__ = ["COLUMNS", "DASH", "FORMATS", "MARKDOWN_FORMATS", "MARKUP_FORMATS", "TABLE_WIDTH", "Column",
           "UnknownColumnError", "UnknownFormatError", "check_format", "default_columns", "fit", "prose", "narrow",
           "render", "render_header", "synthetic_step_warning", "synthetic_weights", "weight_sources", "wants_prose"]

Renderer = Callable[[Sequence[Any], Sequence[Column]], str]

#: Aliases accepted for tabulate formats.
_ALIASES = {"markdown": "pipe", "md": "pipe"}

#: format name -> renderer(rows, columns) -> str
FORMATS: dict[str, Renderer] = {
    **{f: partial(render_table, tablefmt=f) for f in tabulate_formats},
    **{alias: partial(render_table, tablefmt=f) for alias, f in _ALIASES.items()},
    "csv": render_csv,
    "json": render_json,
}

#: Formats that are data, not tables: they carry the ``reason`` column by default instead of
#: the table's footnotes, and take no header.
DATA_FORMATS = frozenset({"csv", "json"})

#: Table formats meant to be parsed or pasted into another document (LaTeX, HTML, wikis, TSV):
#: the commands print the table alone, without the prose lines (device header, notes, summaries)
#: they print around a table in the terminal formats.
MARKUP_FORMATS = frozenset({"tsv", "html", "unsafehtml", "latex", "latex_raw", "latex_booktabs",
                            "latex_longtable", "mediawiki", "moinmoin", "jira", "textile",
                            "asciidoc", "youtrack"})


#: Markdown table formats: documents are generated from them (``scripts/gen_docs.py``), so the
#: reader views that narrow a terminal table (:func:`narrow`) keep every column there.
MARKDOWN_FORMATS = frozenset({"github", "pipe", "markdown", "md"})

#: The width (characters) a default terminal view fits: its tables and prose lines.
TABLE_WIDTH = 120


def narrow(fmt: str, wide: bool = False) -> bool:
    """Whether a reader view shows its narrow default, which fits :data:`TABLE_WIDTH` characters:
    a terminal table format (:func:`wants_prose`, not :data:`MARKDOWN_FORMATS`) without ``--wide``.
    CSV and JSON keep every column, Markdown too (the documents' tables)."""
    return not wide and wants_prose(fmt) and fmt not in MARKDOWN_FORMATS


def fit(lines: str | Iterable[str], width: int = TABLE_WIDTH) -> str:
    """Prose ``lines`` (one string, or several) wrapped at word boundaries to ``width`` characters,
    each continuation indented two spaces more than its line; a line that fits, or a word longer
    than ``width``, stays as it is. Returns the lines joined by newlines."""
    import textwrap

    out = []
    for line in ([lines] if isinstance(lines, str) else lines):
        for part in line.split("\n"):
            if len(part) <= width:
                out.append(part)
                continue
            indent = " " * (len(part) - len(part.lstrip(" ")))
            out += textwrap.wrap(part.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False)
    return "\n".join(out)


def prose(fmt: str, wide: bool = False) -> Callable[[str], str]:
    """How a reader view prints a prose line in format ``fmt``: wrapped by :func:`fit` in the narrow
    default (:func:`narrow`: a terminal table without ``wide``), else as it is."""
    return fit if narrow(fmt, wide) else _as_is


def _as_is(line: str) -> str:
    return line


def split_markdown(text: str) -> tuple[str, str]:
    """``text`` (a command's output in a Markdown format) as ``(tables, prose)``: the table lines
    (those starting with ``|``), each table separated from the next by a blank line, and every
    other line. A Markdown table on stdout is then paste-ready, its prose (headers, legends,
    warnings, notes) going to stderr. Each part ends with a newline unless empty."""
    tables, prose, block = [], [], []
    for line in text.splitlines():
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            tables.append("\n".join(block))
            block = []
        if line.strip():
            prose.append(line)
    if block:
        tables.append("\n".join(block))
    return ("\n\n".join(tables) + "\n" if tables else ""), ("\n".join(prose) + "\n" if prose else "")


def wants_prose(fmt: str) -> bool:
    """Whether a command may print text lines around a table in format ``fmt``: not for data
    formats (:data:`DATA_FORMATS`) nor markup formats (:data:`MARKUP_FORMATS`)."""
    return fmt not in DATA_FORMATS and fmt not in MARKUP_FORMATS


class UnknownFormatError(ValueError):
    """An output format that is not in :data:`FORMATS`; the message lists the allowed ones."""


def check_format(fmt: str) -> None:
    """Raise :class:`UnknownFormatError` (naming ``fmt`` and the allowed formats) unless ``fmt``
    is in :data:`FORMATS`."""
    if fmt not in FORMATS:
        raise UnknownFormatError(f"unknown format {fmt!r}; allowed: {', '.join(sorted(FORMATS))}")


def render(
    rows: Sequence[Row],
    columns: Iterable[str | Column] | None = None,
    fmt: str = "simple",
    wide: bool = False,
) -> str:
    """Render result ``rows`` (:class:`qbench.row.Row`; or records a reader made, with
    :class:`Column` objects that read them) in format ``fmt``.

    ``columns``: column keys (see :data:`COLUMNS`) or :class:`Column` objects; ``None`` gives
    :func:`default_columns`: in a table the narrow set that fits 120 characters unless ``wide``
    (``--wide``), in csv/json every default column plus ``reason``. A terminal table without
    ``wide`` (:func:`narrow`) wraps its footnotes at :data:`TABLE_WIDTH`. Returns text without a
    trailing newline. Raises :class:`UnknownFormatError` or :class:`UnknownColumnError` (one line, naming
    the bad value and the allowed ones).
    """
    check_format(fmt)
    renderer = FORMATS[fmt]
    rows = list(rows)
    short = columns is None and fmt not in DATA_FORMATS and not wide  # the narrow default's short headers
    if columns is None:
        columns = [*default_columns(rows), "reason"] if fmt in DATA_FORMATS else default_columns(rows, wide=wide)
    resolved = resolve_columns(columns, rows)
    if short:
        resolved = [replace(c, header=NARROW_HEADERS.get(c.key, c.header)) for c in resolved]
    # a terminal table without --wide: its footnotes (skip and fail reasons, flags) wrap at 120 too
    text = renderer(rows, resolved, notes_width=TABLE_WIDTH) if narrow(fmt, wide) else renderer(rows, resolved)
    if fmt.startswith("latex") and fmt != "latex_raw":
        # tabulate escapes % and _ but leaves µ and the em dash of an empty cell as raw UTF-8, which
        # pdflatex without inputenc rejects; the footnotes under a table become LaTeX comments
        text = text.replace("µ", r"\textmu{}").replace("—", "---")
        head, sep, tail = text.partition("\\end{tabular}")
        if sep and tail.strip():
            tail = "\n".join(("% " + line) if line.strip() else line for line in tail.splitlines())
        text = head + sep + tail
    return text


def _versions(env: Env) -> str:
    parts = [f"{name} {getattr(env, name) or 'not installed'}" for name in ("torch", "torchao", "bitsandbytes")]
    return ", ".join(parts)


#: How the header names ``stream`` (the decision method) on each kind of device.
_STREAM_GLOSS = {"cuda": "graph over weight copies > L2", "cpu": "copies > LLC"}


def _times_line(rows: list[Row], env: Env) -> str:
    """The ``times: ...`` line: the methods the rows have, in the registry's order, saying which
    are CUDA timings; ``stream`` is glossed (on CUDA a graph over L weight copies that overflow
    L2, on CPU copies that overflow the last-level cache: not a CUDA timing there)."""
    methods = methods_present(rows)
    if not methods:
        return "times: none measured"
    devices = [str(r.device or "") for r in rows] + [str(env.device or "")]
    cuda_only = [m for m in methods if registry.METHODS.get(m) and not registry.METHODS[m].cpu]
    on_cuda = bool(cuda_only) or any(d.startswith("cuda") for d in devices)
    parts = []
    if DECISION_METHOD in methods:
        parts.append(f"{DECISION_METHOD} ({_STREAM_GLOSS['cuda' if on_cuda else 'cpu']})")
    if cuda_only:
        parts.append(f"CUDA {', '.join(cuda_only)}")
    if CPU_METHOD in methods:
        parts.append(CPU_METHOD if DECISION_METHOD in methods or cuda_only else
                     "CPU wall clock (method cpu; no CUDA timings)")
    parts += [m for m in methods if m not in registry.METHODS]  # a newer qbench's method
    tail = "; CPU run, no CUDA timings" if not on_cuda and DECISION_METHOD in methods else ""
    return f"times: {' + '.join(parts)}{tail}; µs per call, median"


#: What :func:`weight_sources` says for a row without ``weight_source`` (an older file, written when
#: every weight was qbench's seeded Gaussian).
OLD_WEIGHT = "seeded Gaussian N(0, 1/K) (synthetic; a file written before rows said their weight)"


def weight_sources(rows: Sequence[Row]) -> list[str]:
    """The rows' ``weight_source`` values, each once in row order; a row without one (an older
    file) is :data:`OLD_WEIGHT`."""
    return list(dict.fromkeys(r.weight_source or OLD_WEIGHT for r in rows))


def synthetic_weights(rows: Sequence[Row]) -> list[str]:
    """The :func:`weight_sources` that qbench drew itself (they say ``synthetic``): errors measured
    on them are not a trained layer's."""
    return [w for w in weight_sources(rows) if "synthetic" in w]


def synthetic_step_warning(rows: Sequence) -> Optional[str]:
    """The warning line over a model-step reader's output when the steps' weights are qbench's own
    (:func:`synthetic_weights` of the step rows, which carry ``weight_source`` too), else None."""
    sources = synthetic_weights(rows)
    if not sources:
        return None
    return (f"warning: logits errors come from synthetic weights ({'; '.join(sources)}): a trained model's "
            "outliers can raise them several-fold")


def render_header(doc: ResultDoc | dict) -> str:
    """The lines that say what a result document's numbers are: the device and library versions,
    which timing methods and units, the weight (:func:`weight_sources`), and a warning when it says
    ``complete: false``. The file's strings are shown with control characters escaped
    (:func:`qbench.render.safe.visible`)."""
    doc = ResultDoc.of(doc)
    env = doc.env
    device = env.device or DASH
    name = env.device_name or (env.cpu if str(device).startswith("cpu") else None)
    where = f"{name} ({device}" if name else f"{device} ("
    cc = env.compute_capability
    where += f", sm {cc[0]}.{cc[1]})" if cc else ")"
    where = where.replace(" ()", "")
    lines = [f"{where} | {_versions(env)}", _times_line(doc.rows, env)]
    if doc.rows:
        lines.append(f"weight: {'; '.join(weight_sources(doc.rows))}")
    if doc.complete is False:
        lines.append("WARNING: incomplete result (complete: false): the run was interrupted or "
                     "is in progress; rows may be missing")
    return "\n".join(visible(line) for line in lines)
