"""A job kind's table, declared once, and the one layout every job's table is printed in.

A :class:`View` is a column catalogue (:class:`qbench.render.columns.Column`: key, header with units,
raw value, table cell) and which keys each layout shows: the terminal's narrow default (fits
:data:`qbench.render.TABLE_WIDTH`, under ``short`` headers), the wide table (``--wide``, Markdown and
the other markup formats), and CSV/JSON (every number raw, keyed by column key). ``--columns`` takes
any catalogue key. :func:`show` prints a view's records: the lines that say what the table is, a
warning (an incomplete file), a blank line, the table, the notes; in a data or markup format the
table alone on stdout and the prose on stderr.

A job declaring its view: ``View("model-step", catalogue, narrow=(...), wide=(...), data=(...))``,
then ``show(records, view.columns(fmt, wide, keys), fmt, wide=..., describe=..., notes=...)``. A new
statistic is one :class:`Column` in the catalogue and its key in the layouts that show it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence

from qbench.render import DATA_FORMATS, narrow, prose, render, wants_prose
from qbench.render.columns import Column, select
from qbench.render.safe import visible

__all__ = ["View", "column_keys", "show"]


@dataclass(frozen=True)
class View:
    """A job kind's table: ``catalogue`` (every column, in table order; ``--columns`` takes these keys)
    and the keys of each layout, in catalogue order: ``narrow`` (a terminal table without ``--wide``,
    fitting 120 characters; its headers ``short[key]`` where given), ``wide`` (``--wide``, Markdown,
    markup) and ``data`` (CSV, JSON). ``kind`` names the table in a refusal (``model-step``)."""

    kind: str
    catalogue: Sequence[Column]
    narrow: Sequence[str]
    wide: Sequence[str]
    data: Sequence[str]
    short: Mapping[str, str] = field(default_factory=dict)

    def select(self, keys: Sequence[str]) -> list[Column]:
        """The catalogue's columns of ``--columns`` ``keys``, in their order.

        Raises:
            ValueError: an unknown key (one line naming it, the table and the allowed keys)."""
        return select(keys, {c.key: c for c in self.catalogue}, self.kind)

    def columns(self, fmt: str, wide: bool = False, keys: Optional[Sequence[str]] = None) -> list[Column]:
        """The columns shown in format ``fmt``: ``keys`` (``--columns``) alone when given, else the
        layout of ``fmt`` (:data:`qbench.render.DATA_FORMATS`: ``data``; a terminal table without
        ``wide``, :func:`qbench.render.narrow`: ``narrow`` under its short headers; else ``wide``)."""
        if keys:
            return self.select(keys)
        if fmt in DATA_FORMATS:
            return self.select(self.data)
        if not narrow(fmt, wide):
            return self.select(self.wide)
        return [replace(c, header=self.short[c.key]) if c.key in self.short else c for c in self.select(self.narrow)]


def column_keys(text: Optional[str]) -> list[str]:
    """The keys of a ``--columns`` value (``"scheme, ppl"`` -> ``["scheme", "ppl"]``; None: none)."""
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def show(records: Sequence[Any], columns: Sequence[Column], fmt: str, *, wide: bool = False,
         describe: Sequence[str] = (), warning: Optional[str] = None, notes: Sequence[str] = (),
         file: Any = None) -> None:
    """Print a job's table in the one layout: ``describe`` (what the table is), ``warning`` (an
    incomplete file), a blank line, the table of ``records`` in ``columns``, then ``notes`` (after a
    blank line). Prose is wrapped at :data:`qbench.render.TABLE_WIDTH` in a terminal table without
    ``wide``; in a data or markup format (:func:`qbench.render.wants_prose` false) the table is alone
    on stdout and the prose goes to stderr as it is. Strings from the file are shown with control
    characters escaped."""
    out = file or sys.stdout
    terminal = wants_prose(fmt)
    say = prose(fmt, wide)
    err = out if terminal else sys.stderr
    for line in [*describe, *([warning] if warning else [])]:
        print(say(visible(line)), file=err)
    if terminal and (describe or warning):
        print(file=out)
    table = render(list(records), columns, fmt)
    print(table, end="" if table.endswith("\n") else "\n", file=out)
    if notes:
        if terminal:
            print(file=out)
        for line in notes:
            print(say(visible(line)) if terminal else visible(line), file=err)

