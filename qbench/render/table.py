"""Text tables through :mod:`tabulate`, in any of its formats: cells pre-formatted by the columns (no number
parsing), numbers right-aligned; without a ``reason`` column the skip/fail reasons and the flags are footnotes.
Cells and footnotes are made harmless."""

from __future__ import annotations

import html
from typing import Any, Sequence

from tabulate import tabulate

from qbench.judge import NOISY_CV
from qbench.render.columns import Column
from qbench.render.safe import MARKDOWN_FORMATS, markdown_cell, visible
from qbench.row import Row
from qbench.timing import registry

__all__ = ["render_table", "footnotes", "rest_width"]


def footnotes(rows: Sequence[Row]) -> list[str]:
    """One line per distinct (scheme, status, reason) of the rows not ``ok``, then per flag name its first row's
    text and one line naming the other schemes that carry it."""
    def at(ms: list) -> str:
        return f"(M={','.join(str(m) for m in ms)})"
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.status != "ok":
            groups.setdefault((r.scheme, r.status, r.reason or "no reason given"), []).append(r.m)
    out = [f"{scheme} {at(ms)} {status}: {reason}" for (scheme, status, reason), ms in groups.items()]
    flagged: dict[str, dict[tuple, list]] = {}  # flag name -> (scheme, line) -> Ms, in the rows' order
    for r in rows:  # what could mislead a reader about an ok row
        for flag in r.flags:
            flagged.setdefault(flag.name, {}).setdefault((r.scheme, flag.line), []).append(r.m)
    for name, items in flagged.items():
        ((scheme, line), ms), *rest = items.items()
        out.append(f"{scheme} {at(ms)} flag: {line}")
        if rest:  # one flag on many rows: named once, the others listed (each row's own text in the JSON)
            others = dict.fromkeys(f"{s} {at(ms)}" for (s, _), ms in rest)
            out.append(f"flag {name} also on: {', '.join(others)} (each row's figures: --format json)")
    wide: dict[tuple, list] = {}  # a 4-bit scheme holding one value per byte stores 8+ bits: its name misleads
    for r in rows:
        if r.status == "ok" and r.nominal_bits and r.bits_per_weight and r.bits_per_weight > WIDER * r.nominal_bits:
            wide.setdefault((r.scheme, r.nominal_bits, r.bits_per_weight, r.weight_dtype), []).append(r.m)
    out += [f"{scheme} {at(ms)}: stores {bits:.3g} bits per weight for a {nominal:g}-bit format (weight dtype: "
            f"{dtype}): the footprint of {round(bits)}-bit weights"
            for (scheme, nominal, bits, dtype), ms in wide.items()]
    return out


#: Stored bits per weight above this multiple of the nominal bits get a footnote (metadata alone adds < 1.5×:
#: an int4 group size of 32 with bf16 scale and zero adds 1 bit, 1.25×).
WIDER = 1.5


def rest_width(rows: Sequence[Any], columns: Sequence[Column], key: str, width: int, least: int = 16) -> int:
    """The width left to column ``key`` for the ``simple`` table of ``rows`` to fit ``width`` characters (every
    other column's widest cell, or header plus 2, and two spaces between); at least ``least``."""
    used = 2 * (len(columns) - 1)
    for c in columns:
        if c.key != key:
            used += max([len(c.header) + 2, *(len(line) for r in rows for line in c.cell(r).splitlines())])
    return max(width - used, least)


def _breakable(cell: str, width: int | None) -> str:
    """``cell`` with break points before ``[`` and after ``,`` in words longer than ``width``."""
    if not width or len(cell) <= width:
        return cell
    return " ".join(w.replace("[", " [").replace(",", ", ") if len(w) > width else w for w in cell.split(" "))


def _unbroken_width(column: Column, body: Sequence[Sequence[str]], index: int) -> int | None:
    """``column``'s wrap width widened to its longest word (None: the column does not wrap)."""
    if not column.width:
        return None
    return max([column.width, *(len(w) for row in body for w in str(row[index]).split())])


def render_table(rows: Sequence[Any], columns: Sequence[Column], tablefmt: str = "simple",
                 notes_width: int | None = None) -> str:
    """``rows`` as a table in tabulate format ``tablefmt``, without a trailing newline; a cell longer than its
    column's ``width`` wraps, footnotes wrap at ``notes_width`` (None: one line each)."""
    safe = markdown_cell if tablefmt in MARKDOWN_FORMATS else visible
    body = [[_breakable(safe(c.cell(r)), c.width) for c in columns] for r in rows]
    # a column with a width wraps its longer cells between words, never inside a scheme name at its hyphens
    wrap = ({"maxcolwidths": [_unbroken_width(c, body, i) for i, c in enumerate(columns)], "break_on_hyphens": False}
            if any(c.width for c in columns) else {})
    text = tabulate(body, headers=[safe(c.header) for c in columns], tablefmt=tablefmt, disable_numparse=True,
                    colalign=["right" if c.numeric else "left" for c in columns], **wrap)
    keys = {c.key for c in columns}
    if "reason" in keys or "status" not in keys or not all(hasattr(r, "m") for r in rows):  # per-M rows only
        return text
    notes = [visible(n) for n in footnotes(rows)]
    if any(c.cell(r).endswith("*") for c in columns if c.key in registry.METHODS for r in rows):  # latency: noisy
        notes.append(f"* noisy: the method's cv (stdev/mean) is over {NOISY_CV:.0%}; compare with care")
    if not notes:
        return text
    if tablefmt in ("html", "unsafehtml"):
        return text + "\n<p>" + "<br>\n".join(html.escape(n) for n in notes) + "</p>"
    lines = [f"  {n}" for n in notes]
    if notes_width is not None:
        from qbench.render import fit  # the package imports this module
        lines = [fit(line, notes_width) for line in lines]
    # A blank line first: Markdown would read a line right under a pipe table as another row.
    return text + "\n\n" + "\n".join(lines)
