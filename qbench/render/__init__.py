"""Render result rows: one renderer per output format over the same records. :data:`FORMATS` maps a format name to
its renderer: every tabulate format (``markdown``/``md`` are ``pipe``), ``csv`` (column keys, raw values) and
``json``; file strings are made harmless on the way out."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from dataclasses import replace
from functools import partial
from itertools import groupby
from typing import Any, Callable, Iterable, Sequence

from tabulate import tabulate_formats

from qbench.render.columns import (COLUMNS, DASH, NARROW_HEADERS, Column, UnknownColumnError, default_columns,
                                   resolve_columns)
from qbench.render.safe import MARKDOWN_FORMATS, csv_text, visible
from qbench.render.table import render_table
from qbench.judge import CPU_METHOD, DECISION_METHOD, methods_present
from qbench.results import Env, ResultDoc, finite_or_none
from qbench.row import Row
from qbench.timing import registry

__all__ = ["COLUMNS", "DASH", "FORMATS", "MARKDOWN_FORMATS", "MARKUP_FORMATS", "TABLE_WIDTH", "Column",
           "UnknownColumnError", "UnknownFormatError", "check_format", "default_columns", "fit", "prose", "narrow",
           "render", "render_header", "synthetic_warnings", "weight_sources", "wants_prose"]


def _csv_field(v) -> str:
    """Unformatted: a float at full precision, null empty, a list ``;``-separated, text made harmless."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):  # e.g. the M values of a crossover record: "1;16;512"
        return ";".join(_csv_field(x) for x in v)
    return csv_text(v) if isinstance(v, str) else str(v)


def render_csv(rows: Sequence[Any], columns: Sequence[Column]) -> str:
    """CSV (RFC 4180 quoting, ``\\n`` line ends): a header of column keys, then each row's raw values (units of the
    catalogue: MiB, µs, %), so the file reads back into the same numbers."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c.key for c in columns])
    for r in rows:
        w.writerow([_csv_field(c.value(r)) for c in columns])
    return buf.getvalue().rstrip("\n")


def render_json(rows: Sequence[Any], columns: Sequence[Column]) -> str:
    """A JSON array of objects ``{column key: raw value}``, strict (a non-finite float is null)."""
    records = [{c.key: c.value(r) for c in columns} for r in rows]
    return json.dumps(finite_or_none(records), indent=2, allow_nan=False, ensure_ascii=False)


#: format name -> renderer(rows, columns) -> str
FORMATS: dict[str, Callable[..., str]] = {
    **{f: partial(render_table, tablefmt=f) for f in tabulate_formats},
    **{alias: partial(render_table, tablefmt="pipe") for alias in ("markdown", "md")},
    "csv": render_csv,
    "json": render_json,
}

#: Formats that are data, not tables: they carry the ``reason`` column instead of footnotes, and no header.
DATA_FORMATS = frozenset({"csv", "json"})

#: Table formats meant to be parsed or pasted elsewhere (LaTeX, HTML, wikis, TSV): printed without the prose lines
#: (header, notes, summaries) a terminal table has around it.
MARKUP_FORMATS = frozenset({"tsv", "html", "unsafehtml", "latex", "latex_raw", "latex_booktabs", "latex_longtable",
                            "mediawiki", "moinmoin", "jira", "textile", "asciidoc", "youtrack"})

#: The width (characters) a default terminal view fits: its tables and prose lines.
TABLE_WIDTH = 120


def narrow(fmt: str, wide: bool = False) -> bool:
    """Whether a view shows its narrow default (fits :data:`TABLE_WIDTH`): a terminal table without ``--wide``."""
    return not wide and wants_prose(fmt) and fmt not in MARKDOWN_FORMATS


def fit(lines: str | Iterable[str], width: int = TABLE_WIDTH) -> str:
    """Prose ``lines`` (a string or several) wrapped at word boundaries to ``width`` characters, each continuation
    indented two spaces more (a longer word stays whole); joined by newlines."""
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
    """How a view prints a prose line: wrapped by :func:`fit` in the narrow default, else as it is."""
    return fit if narrow(fmt, wide) else str


def split_markdown(text: str) -> tuple[str, str]:
    """A command's Markdown output as ``(tables, prose)``: the lines starting with ``|`` (a blank line between
    tables) and every other non-blank line; each ends with a newline unless empty."""
    tables, prose = [], []
    for is_table, lines in groupby(text.splitlines(), key=lambda line: line.startswith("|")):
        if is_table:
            tables.append("\n".join(lines))
        else:
            prose += [line for line in lines if line.strip()]
    return ("\n\n".join(tables) + "\n" if tables else ""), ("\n".join(prose) + "\n" if prose else "")


def wants_prose(fmt: str) -> bool:
    """Whether text lines may go around a table in format ``fmt``: not data nor markup formats."""
    return fmt not in DATA_FORMATS and fmt not in MARKUP_FORMATS


class UnknownFormatError(ValueError):
    """An output format that is not in :data:`FORMATS`; the message lists the allowed ones."""


def check_format(fmt: str) -> None:
    """Raise :class:`UnknownFormatError` (naming ``fmt`` and the allowed formats) unless ``fmt`` is known."""
    if fmt not in FORMATS:
        raise UnknownFormatError(f"unknown format {fmt!r}; allowed: {', '.join(sorted(FORMATS))}")


def render(rows: Sequence[Row], columns: Iterable[str | Column] | None = None, fmt: str = "simple",
           wide: bool = False) -> str:
    """``rows`` (or records read by :class:`Column` objects) in format ``fmt``, without a trailing newline.
    ``columns``: keys of :data:`COLUMNS` or Columns; None: :func:`default_columns` (a table's narrow set under short
    headers unless ``wide``; csv/json every default and ``reason``). Raises :class:`UnknownFormatError`,
    :class:`UnknownColumnError`: one line naming the bad value and the allowed ones."""
    check_format(fmt)
    rows = list(rows)
    short = columns is None and fmt not in DATA_FORMATS and not wide
    if columns is None:
        columns = [*default_columns(rows), "reason"] if fmt in DATA_FORMATS else default_columns(rows, wide=wide)
    resolved = resolve_columns(columns, rows)
    if short:
        resolved = [replace(c, header=NARROW_HEADERS.get(c.key, c.header)) for c in resolved]
    text = FORMATS[fmt](rows, resolved, **({"notes_width": TABLE_WIDTH} if narrow(fmt, wide) else {}))
    if fmt.startswith("latex") and fmt != "latex_raw":
        # pdflatex without inputenc rejects raw µ and an empty cell's em dash; footnotes become comments
        text = text.replace("µ", r"\textmu{}").replace("—", "---")
        head, sep, tail = text.partition("\\end{tabular}")
        if sep and tail.strip():
            tail = "\n".join(("% " + line) if line.strip() else line for line in tail.splitlines())
        text = head + sep + tail
    return text


#: How the header names ``stream`` (the decision method) on each kind of device.
_STREAM_GLOSS = {"cuda": "graph over weight copies > L2", "cpu": "copies > LLC"}


def _times_line(rows: list[Row], env: Env) -> str:
    """``times: ...``: the rows' methods in registry order, CUDA ones named, ``stream`` glossed."""
    methods = methods_present(rows)
    if not methods:
        return "times: none measured"
    cuda_only = [m for m in methods if registry.METHODS.get(m) and not registry.METHODS[m].cpu]
    on_cuda = bool(cuda_only) or any(str(d or "").startswith("cuda") for d in [*(r.device for r in rows), env.device])
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


#: What :func:`weight_sources` says for a row without ``weight_source`` (an older file: qbench's Gaussian).
OLD_WEIGHT = "seeded Gaussian N(0, 1/K) (synthetic; a file written before rows said their weight)"


def weight_sources(rows: Sequence[Row]) -> list[str]:
    """The rows' ``weight_source`` values, each once in row order (:data:`OLD_WEIGHT` for none)."""
    return list(dict.fromkeys(r.weight_source or OLD_WEIGHT for r in rows))


def synthetic_warnings(rows: Sequence, where: str = "", step: bool = False) -> list[str]:
    """The warning over a reader's output when some :func:`weight_sources` are synthetic (qbench drew them; a layer's
    errors, after ``where``; ``step``: a model step's logits errors); none otherwise."""
    sources = "; ".join(w for w in weight_sources(rows) if "synthetic" in w)
    if not sources:
        return []
    if step:
        return [f"warning: logits errors come from synthetic weights ({sources}): a trained model's outliers can "
                "raise them several-fold"]
    return [f"warning: {where}errors come from a synthetic weight ({sources}), not a trained layer: a trained "
            "layer's outliers can raise them several-fold"]


def render_header(doc: ResultDoc | dict) -> str:
    """What a result's numbers are: device and library versions, timing methods and units, the weight, a warning for
    ``complete: false``; file strings :func:`visible`."""
    doc = ResultDoc.of(doc)
    env = doc.env
    device = env.device or DASH
    name = env.device_name or (env.cpu if str(device).startswith("cpu") else None)
    where = f"{name} ({device}" if name else f"{device} ("
    cc = env.compute_capability
    where += f", sm {cc[0]}.{cc[1]})" if cc else ")"
    versions = ", ".join(f"{n} {getattr(env, n) or 'not installed'}" for n in ("torch", "torchao", "bitsandbytes"))
    lines = [f"{where.replace(' ()', '')} | {versions}", _times_line(doc.rows, env)]
    if doc.rows:
        lines.append(f"weight: {'; '.join(weight_sources(doc.rows))}")
    if doc.complete is False:
        lines.append("WARNING: incomplete result (complete: false): the run was interrupted or "
                     "is in progress; rows may be missing")
    return "\n".join(visible(line) for line in lines)
