"""Render result rows: one renderer per output format over the same list of row dicts.

``render(rows, columns, fmt)`` looks ``fmt`` up in :data:`FORMATS` (format name -> renderer);
every tabulate format is a table format, plus ``markdown``/``md`` (aliases of ``pipe``), ``csv``
and ``json``. Columns come from :mod:`qbench.render.columns`. ``render_header(doc)`` says what
the numbers are: device, library versions, and which timing methods (CPU or CUDA).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterable, Sequence

from tabulate import tabulate_formats

from qbench.render.columns import (
    COLUMNS,
    DASH,
    Column,
    UnknownColumnError,
    default_columns,
    resolve_columns,
)
from qbench.render.csv import render_csv
from qbench.render.json import render_json
from qbench.render.table import render_table
from qbench.results import CPU_METHOD, CUDA_METHODS, methods_present

__all__ = [
    "COLUMNS",
    "DASH",
    "FORMATS",
    "MARKUP_FORMATS",
    "Column",
    "UnknownColumnError",
    "UnknownFormatError",
    "check_format",
    "default_columns",
    "render",
    "render_header",
    "wants_prose",
]

Renderer = Callable[[Sequence[dict], Sequence[Column]], str]

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
    rows: Sequence[dict],
    columns: Iterable[str | Column] | None = None,
    fmt: str = "simple",
) -> str:
    """Render result ``rows`` (``docs/results-schema.md`` ROWs) in format ``fmt``.

    ``columns``: column keys (see :data:`COLUMNS`) or :class:`Column` objects; ``None`` gives
    :func:`default_columns` (plus ``reason`` for csv/json). Returns text without a trailing
    newline. Raises :class:`UnknownFormatError` or :class:`UnknownColumnError` (one line, naming
    the bad value and the allowed ones).
    """
    check_format(fmt)
    renderer = FORMATS[fmt]
    rows = list(rows)
    if columns is None and fmt in DATA_FORMATS:
        columns = [*default_columns(rows), "reason"]
    return renderer(rows, resolve_columns(columns, rows))


def _versions(env: dict) -> str:
    parts = [f"{name} {env.get(name) or 'not installed'}" for name in ("torch", "torchao", "bitsandbytes")]
    return ", ".join(parts)


def render_header(doc: dict) -> str:
    """One or two lines describing a result document, plus a warning line when the document
    says ``complete: false``:

    ``NVIDIA H200 (cuda:0, sm 9.0) | torch 2.11.0+cu130, torchao 0.18.0, bitsandbytes 0.50.2``
    ``times: CUDA cold, warm, eager, kernel (µs, median per call)``
    """
    env = doc.get("env") or {}
    device = env.get("device") or DASH
    name = env.get("device_name") or (env.get("cpu") if str(device).startswith("cpu") else None)
    where = f"{name} ({device}" if name else f"{device} ("
    cc = env.get("compute_capability")
    where += f", sm {cc[0]}.{cc[1]})" if cc else ")"
    where = where.replace(" ()", "")
    lines = [f"{where} | {_versions(env)}"]

    methods = methods_present(doc.get("rows") or [])
    cuda = [m for m in methods if m in CUDA_METHODS]
    times = []
    if cuda:
        times.append(f"CUDA {', '.join(cuda)}")
    if CPU_METHOD in methods:
        times.append("CPU wall clock (method cpu; no CUDA timings)" if not cuda else "CPU cpu")
    lines.append(
        f"times: {' + '.join(times)}; µs per call, median" if times else "times: none measured"
    )
    if doc.get("complete") is False:
        lines.append("WARNING: incomplete result (complete: false): the run was interrupted or "
                     "is in progress; rows may be missing")
    return "\n".join(lines)
