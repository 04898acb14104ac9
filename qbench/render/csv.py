"""CSV: one header line of column keys, then one line per row with the raw values.

Raw means unformatted: floats at full precision (``repr``), ``null`` as an empty field, lists as
``;``-separated values, so the file reads back into the same numbers. A text cell is made harmless
(:func:`qbench.render.safe.csv_text`): one that begins with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return gets a leading ``'`` (a spreadsheet would run it as a formula), and control
characters are shown escaped; numbers are never changed (``-1.5`` stays a number). Headers are the column keys (``stored_mib``, ``cold``) rather
than the table's display headers; units are those of the catalogue (MiB, µs, %).
"""

from __future__ import annotations

import csv
import io
from typing import Sequence

from qbench.render.columns import Column
from qbench.render.safe import csv_text

__all__ = ["render_csv"]


def _field(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):  # e.g. the M values of a crossover record: "1;16;512"
        return ";".join(_field(x) for x in v)
    if isinstance(v, str):
        return csv_text(v)
    return str(v)


def render_csv(rows: Sequence[dict], columns: Sequence[Column]) -> str:
    """Render ``rows`` as CSV (RFC 4180 quoting, ``\\n`` line ends) over ``columns``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c.key for c in columns])
    for r in rows:
        w.writerow([_field(c.value(r)) for c in columns])
    return buf.getvalue().rstrip("\n")
