"""JSON: a list of objects ``{column key: raw value}``, strict (non-finite floats become null).

This is a view of selected columns, not the result file itself (that is ``qbench.results``).
"""

from __future__ import annotations

import json
from typing import Sequence

from qbench.render.columns import Column
from qbench.results import finite_or_none

__all__ = ["render_json"]


def render_json(rows: Sequence[dict], columns: Sequence[Column]) -> str:
    """Render ``rows`` as a JSON array of objects keyed by column key."""
    records = [{c.key: c.value(r) for c in columns} for r in rows]
    return json.dumps(finite_or_none(records), indent=2, allow_nan=False, ensure_ascii=False)
