"""What the readers show of a quality result, and the one pick on speed and quality together.

``qbench run`` and ``qbench report`` print the quality table (llama.cpp's statistics per scheme),
and the quality budgets are declared here (:data:`BUDGETS`); the pick on speed and quality together
(``recommend STEP.json QUALITY.json``, ``model``) is :mod:`qbench.decision`, above both jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Callable, Optional, Sequence

from qbench.judge import Budget, incomplete_warning
from qbench.readers.common import Refused, refuse_options
from qbench.quality.row import QualityRow
from qbench.render import DATA_FORMATS, Column, narrow, prose, render, wants_prose
from qbench.render.columns import DASH, fmt_num, select



def pm(value: Optional[float], unc: Optional[float], fmt: str = "{:.4g}") -> str:
    """``value ± unc``, the uncertainty to two significant digits (more would be noise)."""
    if value is None:
        return DASH
    return fmt.format(value) + ("" if unc is None else " ± 0" if unc == 0 else f" ± {unc:#.2g}".removesuffix("."))


def pct(value: Optional[float], unc: Optional[float] = None) -> str:
    if value is None:
        return DASH
    return f"{100 * value:.2f}" + ("" if unc is None else f" ± {100 * unc:.2f}") + " %"


def mib(n: Optional[int]) -> str:
    return DASH if n is None else f"{n / 2**20:.2f}"


def stat(row: QualityRow, *path: str):
    cur = row.stats
    for p in path:
        cur = None if cur is None else getattr(cur, p)
    return cur


def _stat(*path: str) -> Callable[[QualityRow], object]:
    return lambda r: stat(r, *path)


def _pm_cell(value: str, unc: str, fmt: str = "{:.4g}") -> Callable[[QualityRow], str]:
    return lambda r: pm(stat(r, *value.split(".")), stat(r, *unc.split(".")), fmt)


#: The quality table's column catalogue (a record is a :class:`QualityRow`): each ``value`` is the
#: raw number that CSV and JSON carry, each cell the text a table shows (a value ± its uncertainty);
#: the ``*_unc`` columns, ``status`` and ``reason`` are data columns (a table says them in its cells
#: and the notes under it). ``--columns`` takes these keys.
CATALOGUE = [
    Column("scheme", "scheme", lambda r: r.scheme),
    Column("state", "status", lambda r: r.status + (" (emulated)" if r.emulated else "")),
    Column("ppl", "PPL", _stat("ppl"), cell_override=_pm_cell("ppl", "ppl_unc")),
    Column("ln_ppl_ratio", "ln(PPL/PPL ref)", _stat("ln_ppl_ratio"),
           cell_override=_pm_cell("ln_ppl_ratio", "ln_ppl_ratio_unc", "{:.3g}")),
    Column("kld", "mean KLD", _stat("kld", "mean"), cell_override=_pm_cell("kld.mean", "kld.unc", "{:.3g}")),
    Column("kld99", "KLD 99 %", _stat("kld", "p99"), fmt_num(".3g"), True),
    Column("same_top", "same top", _stat("same_top"),
           cell_override=lambda r: pct(stat(r, "same_top"), stat(r, "same_top_unc"))),
    Column("dp_rms", "RMS Δp", _stat("dp", "rms"), cell_override=lambda r: pct(stat(r, "dp", "rms"))),
    Column("stored", "model MiB", lambda r: None if r.model_stored_bytes is None else r.model_stored_bytes / 2**20,
           fmt_num(".2f"), True),
    Column("flags", "flags", lambda r: ", ".join(f.name for f in r.flags) or None),
    Column("status", "status", lambda r: r.status),
    Column("emulated", "emulated", lambda r: r.emulated),
    Column("ppl_unc", "PPL ±", _stat("ppl_unc"), numeric=True),
    Column("ln_ppl_ratio_unc", "ln(PPL/PPL ref) ±", _stat("ln_ppl_ratio_unc"), numeric=True),
    Column("kld_unc", "mean KLD ±", _stat("kld", "unc"), numeric=True),
    Column("same_top_unc", "same top ±", _stat("same_top_unc"), numeric=True),
    Column("reason", "reason", lambda r: r.reason),
]
COLUMNS_BY_KEY = {c.key: c for c in CATALOGUE}
#: The table's columns (``--wide``, Markdown); CSV and JSON carry :data:`DATA` instead.
COLUMNS = [c for c in CATALOGUE if c.key in ("scheme", "state", "ppl", "ln_ppl_ratio", "kld", "kld99", "same_top",
                                              "dp_rms", "stored", "flags")]
#: The columns of CSV and JSON: every number raw, its uncertainty in a column of its own.
DATA = ("scheme", "status", "emulated", "ppl", "ppl_unc", "ln_ppl_ratio", "ln_ppl_ratio_unc", "kld", "kld_unc", "kld99",
        "same_top", "same_top_unc", "dp_rms", "stored", "flags", "reason")
#: The narrow default of a terminal table (:func:`qbench.render.narrow`): fits 120 characters, a
#: row's status and flags in one column ("skipped", "emulated"; an ok row without flags: "—"), the
#: flags every row shares left to the notes under it ("(every row)"). ``--wide`` (and every Markdown or data format) shows all.
NARROW = ("scheme", "ppl", "kld", "kld99", "same_top", "stored")


def columns_of(keys: Sequence[str]) -> list[Column]:
    """The catalogue's columns of the ``--columns`` ``keys``, in their order.

    Raises:
        ValueError: an unknown key (one line naming it and the allowed ones)."""
    return select(keys, COLUMNS_BY_KEY, "quality")


def shared_flags(rows: Sequence[QualityRow]) -> list[str]:
    """The flag names every row carries (a checkpoint's provenance, such as ``prequantized-weights``)."""
    names = [{f.name for f in r.flags} for r in rows]
    return sorted(set.intersection(*names)) if names else []


def quality_table(rows: Sequence[QualityRow], fmt: str = "simple", narrow_view: bool = False,
                  columns: Optional[Sequence[str]] = None) -> str:
    """The quality table, one line per scheme (skipped and failed rows name their reason under it);
    ``narrow_view``: the :data:`NARROW` columns, the flags every row shares left out of the cells;
    CSV and JSON: the :data:`DATA` columns; ``columns``: those ``--columns`` keys alone, in every format."""
    if columns:
        return render(list(rows), columns_of(columns), fmt)
    if fmt in DATA_FORMATS:
        return render(list(rows), columns_of(DATA), fmt)
    if not narrow_view:
        return render(list(rows), COLUMNS, fmt)
    shared = set(shared_flags(rows))

    def status_flags(r: QualityRow) -> str:
        return ", ".join([*([r.status] if r.status != "ok" else []), *(f.name for f in r.flags if f.name not in shared)])

    columns_ = [dataclasses.replace(c, header="MiB") if c.key == "stored" else c for c in COLUMNS if c.key in NARROW]
    return render(list(rows), [*columns_, Column("flags", "flags", lambda r: status_flags(r) or DASH)], fmt)


def describe(rows: Sequence[QualityRow]) -> list[str]:
    """The lines above the table: the model and its weights, the text and its chunks, the reference."""
    if not rows:
        return ["quality: no rows"]
    r = rows[0]
    ref = next((x.reference for x in rows if x.reference is not None), None)
    lines = [f"quality of {r.title} ({r.model}); weights: {r.weights}",
             f"text {r.text} (sha256 {r.text_sha256[:12]}): {r.chunks} chunks of {r.chunk} tokens, the second half of each "
             f"scored ({r.scored_per_chunk} tokens a chunk: every scored token has at least half a chunk of context, "
             "llama.cpp's convention)"]
    if ref is not None:
        lines.append(f"reference: the model with float linears in {ref.dtype}; its log-probabilities shared by every "
                     f"scheme at {ref.logprobs} precision (each scheme's rounded the same way); KLD = D(ref ‖ scheme), nats")
    return lines


def notes(rows: Sequence[QualityRow]) -> list[str]:
    """The lines under the table: why rows did not run, and each flag once with its text."""
    out = [f"{r.scheme}: {r.status}: {r.reason}" for r in rows if r.status != "ok"]
    shared = set(shared_flags(rows)) if len(rows) > 1 else set()
    seen: dict[str, str] = {}
    for r in rows:
        for f in r.flags:
            seen.setdefault(f.name, f"{f.name} ({'every row' if f.name in shared else r.scheme}): {f.text}")
    return out + list(seen.values())


#: Flags that say where a row's weights come from: a budget read off such rows says so.
WEIGHT_FLAGS = ("synthetic-weights", "prequantized-weights")


def weight_notes(rows: Sequence[QualityRow]) -> list[str]:
    """Each weight-provenance flag of ``rows`` once (``name: text``): what a pick on these rows
    cannot be taken for (seeded weights; weights already on a quantization grid)."""
    seen: dict[str, str] = {}
    for r in rows:
        for f in r.flags:
            if f.name in WEIGHT_FLAGS:
                seen.setdefault(f.name, f"{f.name}: {f.text}")
    return list(seen.values())


#: Parts a sensitivity line names; the rest are counted (a unit run has 4 per block: 121 on a 30-block model).
SENSITIVITY_SHOWN = 12


def sensitivity_lines(rows: Sequence[QualityRow]) -> list[str]:
    """Per scheme with a sensitivity run: its parts ranked by KL divergence (the first
    :data:`SENSITIVITY_SHOWN`, then how many more the file holds), one line."""
    out = []
    for r in rows:
        if r.sensitivity:
            ranked = ", ".join(f"{s.part} {s.kld:.3g}" for s in r.sensitivity[:SENSITIVITY_SHOWN])
            more = len(r.sensitivity) - SENSITIVITY_SHOWN
            ranked += f" ... and {more} more (the file's sensitivity holds each)" if more > 0 else ""
            out.append(f"{r.scheme}: one {r.sensitivity_by} quantized at a time, mean KLD (largest first): {ranked}")
    return out


def run_view(doc, args: argparse.Namespace, label: Optional[str] = None) -> int:
    """``qbench run``'s and ``report``'s output for a quality result; returns the row count.
    ``label``: the file's name in the warning over an incomplete document (``report``)."""
    rows = list(doc.rows)
    wide = getattr(args, "wide", False)
    shown = prose(args.format, wide)
    keys = [c.strip() for c in (getattr(args, "columns", None) or "").split(",") if c.strip()]
    table = quality_table(rows, args.format, narrow_view=narrow(args.format, wide), columns=keys)
    if wants_prose(args.format):
        for line in describe(rows):
            print(shown(line))
        if (warning := incomplete_warning(doc, label or "this result")):
            print(shown(warning.removeprefix("warning: ")))
    print(table)
    if wants_prose(args.format):  # a flag every row carries is said once, "(every row)", by notes()
        for line in notes(rows) + sensitivity_lines(rows):
            print(shown(line))
    return len(rows)


def sayer(args: argparse.Namespace) -> Callable[[str], None]:
    """How ``recommend`` and ``model`` on quality files print a prose line: on stdout, wrapped in the
    narrow view (:func:`qbench.render.prose`); on stderr as it is when the format is data or
    Markdown, so stdout holds the table alone."""
    if not wants_prose(args.format):
        return lambda line: print(line, file=sys.stderr)
    shown = prose(args.format, getattr(args, "wide", False))
    return lambda line: print(shown(line))


def report_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench report QUALITY.json``: the quality table of each file; ``--columns`` picks the
    catalogue's columns (:data:`CATALOGUE`); the layer table's options that read other rows are refused."""
    refuse_options(args, ("crossover", "sort", "method", "by_m"), paths[0] + ": a quality result; {flag} reads "
                   "per-layer results")
    keys = [c.strip() for c in (getattr(args, "columns", None) or "").split(",") if c.strip()]
    try:
        columns_of(keys)
    except ValueError as exc:
        raise Refused(f"{paths[0]}: {exc}") from None
    for path, doc in zip(paths, docs):
        run_view(doc, args, label=path)
    return 0


# ---- one pick on both halves ----------------------------------------------------------------------

#: The quality job's budget options (:class:`qbench.judge.Budget`), in the order the command line,
#: the budget line and the JSON list them: ``qbench recommend`` takes each as ``--<name>``.
BUDGETS = (
    Budget("max_kld", "mean KLD", "mean KL divergence, nats", lambda r: stat(r, "kld", "mean"),
           help="quality budget: mean KL divergence against the reference, nats (a quality file beside model-step "
                "files: one pick on both halves)"),
    Budget("max_ppl_ratio", "PPL ratio", "PPL(Q)/PPL(ref)", lambda r: stat(r, "ppl_ratio"), fmt=".4g",
           help="quality budget: PPL(scheme) / PPL(reference)"),
    Budget("min_same_top", "same top", "0..1", lambda r: stat(r, "same_top"), upper=False, most=1.0, scale=100,
           unit=" %", fmt=".2f", help="quality budget: the share of tokens whose top token is the reference's (0..1)"),
    Budget("max_kld_p99", "99th-percentile KLD", "the KL divergence 99 % of scored tokens stay under, nats",
           lambda r: stat(r, "kld", "p99"), help="quality budget: the 99th percentile of the per-token KL divergence, "
           "nats (the tail a mean hides: a few tokens badly off)"),
)

#: A budget with its limit, as given on the command line.
Limits = Sequence[tuple[Budget, float]]


def limits_of(args: argparse.Namespace) -> list[tuple[Budget, float]]:
    """The :data:`BUDGETS` given in ``args`` with their limits, in declaration order."""
    return [(b, v) for b in BUDGETS if (v := getattr(args, b.name, None)) is not None]


def meets(row: QualityRow, limits: Limits) -> Optional[str]:
    """Why ``row`` misses the budget ``limits`` (one phrase, the first budget it misses), or None when
    it meets every one. A row without statistics misses it."""
    if row.status != "ok" or row.stats is None:
        return f"no quality measured ({row.status})"
    return next((why for b, limit in limits if (why := b.misses(row, limit))), None)
