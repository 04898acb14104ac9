"""``qbench run --repeat N``: one scheme measured by N independent worker processes, combined.

Each run is a new process (new CUDA context, new ``torch.compile`` compilation, new autotuning where
a library autotunes), so the spread between the runs' medians shows what the within-run p10-p90
cannot: a compiled or autotuned kernel that differs between compilations (the gemlite int8 kernel
read 7.87 µs in one committed H200 decode file and 10.1 µs in another of the same day, far outside
either file's p10-p90; ``../shared/reviews/break-2026-12-01.md``). Torch-free.

A combined row is the first run's row (its STATS, ledger, error, dispatch), with ``repeats``:

    {"runs": N, "ok_runs": k, "medians": {method: [median of run 1, ..., run N]},
     "spread": {method: (max - min) / median of the medians}}

Decisions (ties, picks) use the wider of the two spreads (:func:`tie_band`).
"""

from __future__ import annotations

import statistics
from typing import Optional, Sequence


def _identity(row: dict) -> tuple:
    return (row.get("m"), row.get("context"), row.get("k"), row.get("n"), row.get("tp_size"), row.get("split"))


def combine_runs(runs: Sequence[list[dict]]) -> list[dict]:
    """The rows of one scheme from ``runs`` (the rows of each of N runs, in run order), combined.

    The first ``ok`` row of each identity (M, and context for a model step) is the base; rows the
    first run failed but a later run measured take that later run's row. ``repeats.medians[method]``
    lists the median of every run that has one, in run order; ``spread`` is defined when at least two
    do. With one run the rows are returned unchanged.

    Raises:
        ValueError: no runs.
    """
    if not runs:
        raise ValueError("combine_runs: needs at least one run")
    if len(runs) == 1:
        return list(runs[0])
    by_key: dict[tuple, list[dict]] = {}
    order: list[tuple] = []
    for rows in runs:
        for row in rows:
            key = _identity(row)
            if key not in by_key:
                order.append(key)
            by_key.setdefault(key, []).append(row)
    out = []
    for key in order:
        rows = by_key[key]
        ok = [r for r in rows if r.get("status") == "ok"]
        base = dict(ok[0] if ok else rows[0])
        medians: dict[str, list[float]] = {}
        for r in ok:
            for method, stats in (r.get("latency_us") or {}).items():
                if isinstance(stats, dict) and stats.get("median") is not None:
                    medians.setdefault(method, []).append(float(stats["median"]))
        spread = {m: (max(v) - min(v)) / statistics.median(v) for m, v in medians.items() if len(v) >= 2}
        base["repeats"] = {"runs": len(rows), "ok_runs": len(ok), "medians": medians, "spread": spread}
        out.append(base)
    return out


def tie_band(stats: Optional[dict], repeats: Optional[dict], method: str) -> Optional[float]:
    """The relative band within which two rows' medians are tied: the wider of the within-run
    spread ((p90 - p10) / median) and the between-run spread (:func:`combine_runs`); None when the
    row has neither."""
    bands = []
    if stats and stats.get("median") and stats.get("p10") is not None and stats.get("p90") is not None:
        bands.append((stats["p90"] - stats["p10"]) / stats["median"])
    between = ((repeats or {}).get("spread") or {}).get(method)
    if between is not None:
        bands.append(between)
    return max(bands) if bands else None
