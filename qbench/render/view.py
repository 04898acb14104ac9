"""A job kind's table, declared once (:class:`View`), and the one layout every job's table is printed in
(:func:`show`). A new statistic is one :class:`Column` in a catalogue and its key in the layouts that show it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence

from qbench.render import DATA_FORMATS, TABLE_WIDTH, narrow, prose, render, wants_prose
from qbench.render.columns import Column
from qbench.render.safe import visible
from qbench.render.table import rest_width

__all__ = ["View", "column_keys", "show"]


@dataclass(frozen=True)
class View:
    """A job kind's table: ``catalogue`` (every column in table order; ``--columns`` keys) and each layout's keys:
    ``narrow`` (a terminal table without ``--wide``; headers ``short[key]``, cells wrapped at ``widths[key]``
    characters; default every key), ``wide`` (``--wide``, Markdown, markup; default ``narrow``), ``data`` (CSV,
    JSON; default ``wide``). ``kind`` names the table in a refusal. ``wrap``: ``(key, least)``, the narrow column
    that wraps within what the others leave of :data:`qbench.render.TABLE_WIDTH` (less 3 spare: µ, × and Δ are two
    bytes each), at least ``least`` characters."""

    kind: str
    catalogue: Sequence[Column]
    narrow: Sequence[str] = ()
    wide: Sequence[str] = ()
    data: Sequence[str] = ()
    short: Mapping[str, str] = field(default_factory=dict)
    wrap: Optional[tuple[str, int]] = None
    widths: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        narrow = self.narrow or [c.key for c in self.catalogue]
        object.__setattr__(self, "narrow", narrow)
        object.__setattr__(self, "wide", self.wide or narrow)
        object.__setattr__(self, "data", self.data or self.wide)

    def select(self, keys: Sequence[str]) -> list[Column]:
        """The catalogue's columns of ``keys``, in order; ValueError naming an unknown key and the allowed ones."""
        known = {c.key: c for c in self.catalogue}
        if (bad := next((k for k in keys if k not in known), None)) is not None:
            raise ValueError(f"unknown column {bad!r} for a {self.kind} table; allowed: {', '.join(known)}")
        return [known[k] for k in keys]

    def columns(self, fmt: str, wide: bool = False, keys: Optional[Sequence[str]] = None,
                records: Sequence[Any] = ()) -> list[Column]:
        """The columns shown in ``fmt``: ``keys`` (``--columns``), else ``fmt``'s layout (``wrap`` fits ``records``)."""
        if keys:
            return self.select(keys)
        if fmt in DATA_FORMATS:
            return self.select(self.data)
        if not narrow(fmt, wide):
            return self.select(self.wide)
        cols = [replace(c, header=self.short.get(c.key, c.header), width=self.widths.get(c.key, c.width))
                for c in self.select(self.narrow)]
        if self.wrap is None:
            return cols
        key, least = self.wrap
        width = rest_width(records, cols, key, TABLE_WIDTH - 3, least)
        return [replace(c, width=width) if c.key == key else c for c in cols]

    def render(self, records: Sequence[Any], fmt: str, wide: bool = False, keys: Optional[Sequence[str]] = None) -> str:
        """``records`` as this table in ``fmt`` (:meth:`columns`), without a trailing newline."""
        return render(list(records), self.columns(fmt, wide, keys, records), fmt)


def column_keys(text: Optional[str]) -> list[str]:
    """The keys of a ``--columns`` value (``"scheme, ppl"`` -> ``["scheme", "ppl"]``; None: none)."""
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def show(records: Sequence[Any], columns: Sequence[Column], fmt: str, *, wide: bool = False,
         describe: Sequence[str] = (), warning: Optional[str] = None, notes: Sequence[str] = (),
         table: Optional[str] = None) -> None:
    """Print a table in the one layout: ``describe`` and ``warning``, a blank line, the table of ``records`` in
    ``columns`` (or ``table``, already rendered), a blank line and ``notes``. Prose wraps in the narrow default;
    in a data or markup format the prose goes to stderr. File strings :func:`visible`."""
    out = sys.stdout
    terminal = wants_prose(fmt)
    say = prose(fmt, wide)  # str unless a narrow terminal table
    err = out if terminal else sys.stderr
    for line in [*describe, *([warning] if warning else [])]:
        print(say(visible(line)), file=err)
    if terminal and (describe or warning):
        print(file=out)
    table = render(list(records), columns, fmt) if table is None else table
    print(table, end="" if table.endswith("\n") else "\n", file=out)
    if notes and terminal:
        print(file=out)
    for line in notes:
        print(say(visible(line)), file=err)
