"""What the readers show of a quality result: the quality table of ``qbench run`` and ``report`` (llama.cpp's
statistics per scheme) and the quality budgets (:data:`BUDGETS`).
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional, Sequence

from qbench.judge import Budget
from qbench.readers.common import Table, refuse_options, show_table
from qbench.quality.row import QualityRow
from qbench.render import Column
from qbench.render.columns import DASH, field_at
from qbench.render.view import View


def pm(value: Optional[float], unc: Optional[float], fmt: str = "{:.4g}") -> str:
    """``value ± unc``, the uncertainty to two significant digits."""
    if value is None:
        return DASH
    return fmt.format(value) + ("" if unc is None else " ± 0" if unc == 0 else f" ± {unc:#.2g}".removesuffix("."))


def pct(value: Optional[float], unc: Optional[float] = None) -> str:
    if value is None:
        return DASH
    return f"{100 * value:.2f}" + ("" if unc is None else f" ± {100 * unc:.2f}") + " %"


def mib(n: Optional[int]) -> str:
    return DASH if n is None else f"{n / 2**20:.2f}"


def _stat(*path: str) -> Callable[[QualityRow], object]:
    return field_at("stats", *path)


def stat(row: QualityRow, *path: str):
    return _stat(*path)(row)


def _pm_cell(value: str, unc: str, fmt: str = "{:.4g}") -> Callable[[QualityRow], str]:
    return lambda r: pm(stat(r, *value.split(".")), stat(r, *unc.split(".")), fmt)


#: The quality table's columns over :class:`QualityRow` (``--columns`` keys): raw values for CSV and JSON, cells with
#: their uncertainty for a table (the ``*_unc``, ``status`` and ``reason`` columns are data columns).
CATALOGUE = [
    Column("scheme", "scheme", lambda r: r.scheme),
    Column("state", "status", lambda r: r.status + (" (emulated)" if r.emulated else "")),
    Column("ppl", "PPL", _stat("ppl"), cell_override=_pm_cell("ppl", "ppl_unc")),
    Column("ln_ppl_ratio", "ln(PPL/PPL ref)", _stat("ln_ppl_ratio"),
           cell_override=_pm_cell("ln_ppl_ratio", "ln_ppl_ratio_unc", "{:.3g}")),
    Column("kld", "mean KLD", _stat("kld", "mean"), cell_override=_pm_cell("kld.mean", "kld.unc", "{:.3g}")),
    Column("kld99", "KLD 99 %", _stat("kld", "p99"), ".3g"),
    Column("same_top", "same top", _stat("same_top"),
           cell_override=lambda r: pct(stat(r, "same_top"), stat(r, "same_top_unc"))),
    Column("dp_rms", "RMS Δp", _stat("dp", "rms"), cell_override=lambda r: pct(stat(r, "dp", "rms"))),
    Column("stored", "model MiB", field_at("model_stored_bytes", scale=2**-20), ".2f"),
    Column("flags", "flags", lambda r: ", ".join(f.name for f in r.flags) or None),
    Column("status", "status", lambda r: r.status),
    Column("emulated", "emulated", lambda r: r.emulated),
    Column("ppl_unc", "PPL ±", _stat("ppl_unc"), numeric=True),
    Column("ln_ppl_ratio_unc", "ln(PPL/PPL ref) ±", _stat("ln_ppl_ratio_unc"), numeric=True),
    Column("kld_unc", "mean KLD ±", _stat("kld", "unc"), numeric=True),
    Column("same_top_unc", "same top ±", _stat("same_top_unc"), numeric=True),
    Column("reason", "reason", lambda r: r.reason),
]
#: The table's columns (``--wide``, Markdown); CSV and JSON carry :data:`DATA` instead.
WIDE = ("scheme", "state", "ppl", "ln_ppl_ratio", "kld", "kld99", "same_top", "dp_rms", "stored", "flags")
#: The columns of CSV and JSON: every number raw, its uncertainty in a column of its own.
DATA = ("scheme", "status", "emulated", "ppl", "ppl_unc", "ln_ppl_ratio", "ln_ppl_ratio_unc", "kld", "kld_unc", "kld99",
        "same_top", "same_top_unc", "dp_rms", "stored", "flags", "reason")
#: The narrow default of a terminal table (fits 120 characters): a row's status and the flags not
#: every row shares in one column (``status_flags``), the shared ones left to the notes.
NARROW = ("scheme", "ppl", "kld", "kld99", "same_top", "stored", "status_flags")


def quality_view(rows: Sequence[QualityRow]) -> View:
    """The quality table of ``rows``: :data:`CATALOGUE` and its ``status_flags`` column."""
    shared = set(shared_flags(rows))
    status_flags = Column("status_flags", "flags", lambda r: ", ".join(
        [*([r.status] if r.status != "ok" else []), *(f.name for f in r.flags if f.name not in shared)]) or None)
    return View("quality", [*CATALOGUE, status_flags], narrow=NARROW, wide=WIDE, data=DATA, short={"stored": "MiB"})


def shared_flags(rows: Sequence[QualityRow]) -> list[str]:
    """The flag names every row carries (a checkpoint's provenance, such as ``prequantized-weights``)."""
    names = [{f.name for f in r.flags} for r in rows]
    return sorted(set.intersection(*names)) if names else []


def calibration_lines(rows: Sequence[QualityRow]) -> list[str]:
    """One line per calibration the rows' calibrated schemes (GPTQ, AWQ) chose their values from, naming
    its schemes: the text, its sha256, the span (chunks × chunk tokens from ``first_chunk``). Two files of
    one scenario calibrated on different spans read differently; rows without a ``calibration`` record
    (other schemes, older files) add nothing."""
    spans: dict[tuple, list[str]] = {}
    for r in rows:
        c = r.calibration
        if c is not None:
            spans.setdefault((c.text, c.text_sha256, c.chunks, c.chunk, c.first_chunk, tuple(c.span)), []).append(r.scheme)
    return [f"calibration of {', '.join(schemes)}: text {text} (sha256 {sha[:12]}), {chunks} chunk"
            f"{'' if chunks == 1 else 's'} × {chunk} tokens from chunk {first} (tokens [{span[0]}, {span[1]}))"
            for (text, sha, chunks, chunk, first, span), schemes in spans.items()]


def describe(rows: Sequence[QualityRow]) -> list[str]:
    """The lines above the table: the model and weights, the text and chunks, the KV cache, the calibration
    spans (:func:`calibration_lines`), the reference; rows of different models, texts or caches said per group."""
    if not rows:
        return ["quality: no rows"]
    groups: dict[tuple, list[QualityRow]] = {}
    for r in rows:
        kv = (r.kv_cache or {}).get("dtype")
        groups.setdefault((r.title, r.model, r.weights, r.text, r.text_sha256, r.chunks, r.chunk, kv), []).append(r)
    lines = [] if len(groups) == 1 else [f"the rows differ: {len(groups)} models or texts, each said with its schemes"]
    for group in groups.values():
        r = group[0]
        which = "" if len(groups) == 1 else f" (schemes: {', '.join(x.scheme for x in group)})"
        lines += [f"quality of {r.title} ({r.model}); weights: {r.weights}{which}",
                  f"text {r.text} (sha256 {r.text_sha256[:12]}): {r.chunks} chunk{'' if r.chunks == 1 else 's'} of "
                  f"{r.chunk} tokens, the second half of each scored ({r.scored_per_chunk} tokens a chunk: every "
                  "scored token has at least half a chunk of context, llama.cpp's convention)"]
        if r.kv_cache:  # the cache's own damage is in every statistic of these rows
            lines.append(f"KV cache: {r.kv_cache.get('dtype')} (each chunk runs through it): "
                         f"scale {r.kv_cache.get('scale')}")
        lines += calibration_lines(group)
    ref = next((x.reference for x in rows if x.reference is not None), None)
    if ref is not None:
        lines.append(f"reference: the model with float linears in {ref.dtype}; its log-probabilities shared by every "
                     f"scheme at {ref.logprobs} precision (each scheme's rounded the same way); "
                     "KLD = D(ref ‖ scheme), nats")
    return lines


def _first_flags(rows: Sequence[QualityRow]) -> list[tuple]:
    """Each flag of ``rows`` once, with the first row carrying it: ``(row, flag)`` in order of appearance."""
    seen: dict[str, tuple] = {}
    for r in rows:
        for f in r.flags:
            seen.setdefault(f.name, (r, f))
    return list(seen.values())


def _flag_texts(rows: Sequence[QualityRow]) -> list[tuple[str, str, list[str]]]:
    """Each distinct (flag name, text) of ``rows`` once with the schemes carrying it, in order of appearance."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        for f in r.flags:
            seen.setdefault((f.name, f.text), []).append(r.scheme)
    return [(name, text, schemes) for (name, text), schemes in seen.items()]


def notes(rows: Sequence[QualityRow]) -> list[str]:
    """The lines under the table: why rows did not run, and each flag's text once with the schemes it
    is theirs (``every row`` only when every row carries that very text: rows sharing a flag's name,
    such as ``emulated``, often say different things under it)."""
    return [f"{r.scheme}: {r.status}: {r.reason}" for r in rows if r.status != "ok"] + \
        [f"{name} ({'every row' if len(rows) > 1 and len(schemes) == len(rows) else ', '.join(schemes)}): {text}"
         for name, text, schemes in _flag_texts(rows)]


#: Flags that say where a row's weights come from: a budget read off such rows says so.
WEIGHT_FLAGS = ("synthetic-weights", "prequantized-weights")


def weight_notes(rows: Sequence[QualityRow]) -> list[str]:
    """Each weight-provenance flag of ``rows`` once (``name: text``)."""
    return [f"{f.name}: {f.text}" for _, f in _first_flags(rows) if f.name in WEIGHT_FLAGS]


#: Parts a sensitivity line names; the rest are counted.
SENSITIVITY_SHOWN = 12


def sensitivity_lines(rows: Sequence[QualityRow]) -> list[str]:
    """One line per scheme with a sensitivity run: its first :data:`SENSITIVITY_SHOWN` parts by KL divergence."""
    out = []
    for r in rows:
        if r.sensitivity:
            ranked = ", ".join(f"{s.part} {s.kld:.3g}" for s in r.sensitivity[:SENSITIVITY_SHOWN])
            more = len(r.sensitivity) - SENSITIVITY_SHOWN
            ranked += f" ... and {more} more (the file's sensitivity holds each)" if more > 0 else ""
            out.append(f"{r.scheme}: one {r.sensitivity_by} quantized at a time, mean KLD (largest first): {ranked}")
    return out


def _table(doc) -> Table:
    rows = list(doc.rows)
    return Table(quality_view(rows), rows, describe(rows), notes(rows) + sensitivity_lines(rows))


def run_view(doc, args: argparse.Namespace) -> int:
    """``qbench run``'s table of a quality result; returns the row count."""
    return show_table(args, doc, _table(doc))


def report_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench report QUALITY.json``: the quality table of each file; layer-only options are refused."""
    refuse_options(args, ("crossover", "sort", "method", "by_m"), paths[0] + ": a quality result; {flag} reads "
                   "per-layer results")
    for path, doc in zip(paths, docs):
        show_table(args, doc, _table(doc), path)
    return 0


#: The quality job's budget options (:class:`qbench.judge.Budget`), in the order they are listed.
BUDGETS = (
    Budget("max_kld", "mean KLD", "mean KL divergence, nats", lambda r: stat(r, "kld", "mean"),
           unc=lambda r: stat(r, "kld", "unc"),
           help="quality budget: mean KL divergence against the reference, nats (a quality file beside model-step "
                "files: one pick on both halves)"),
    Budget("max_ppl_ratio", "PPL ratio", "PPL(Q)/PPL(ref)", lambda r: stat(r, "ppl_ratio"), fmt=".4g",
           unc=lambda r: stat(r, "ppl_ratio_unc"),
           help="quality budget: PPL(scheme) / PPL(reference)"),
    Budget("min_same_top", "same top", "0..1", lambda r: stat(r, "same_top"), upper=False, most=1.0, scale=100,
           unit=" %", fmt=".2f", unc=lambda r: stat(r, "same_top_unc"), help="quality budget: the share of tokens whose top token is the reference's (0..1)"),
    Budget("max_kld_p99", "99th-percentile KLD", "the KL divergence 99 % of scored tokens stay under, nats",
           lambda r: stat(r, "kld", "p99"), help="quality budget: the 99th percentile of the per-token KL divergence, "
           "nats (the tail a mean hides: a few tokens badly off)"),
    Budget("max_dp_rms", "RMS Δp",
           "the root mean square of the change in the probability of the text's next token, 0..1",
           lambda r: stat(r, "dp", "rms"), most=1.0, scale=100, unit=" %", fmt=".2f", unc=lambda r: stat(r, "dp", "rms_unc"),
           help="quality budget: RMS Δp, the root mean square of the change in the probability the model gives the "
                "text's next token (0..1; llama.cpp's statistic)"),
)

#: A budget with its limit, as given on the command line.
Limits = Sequence[tuple[Budget, float]]


def limits_of(args: argparse.Namespace) -> list[tuple[Budget, float]]:
    """The :data:`BUDGETS` given in ``args`` with their limits, in declaration order."""
    return [(b, v) for b in BUDGETS if (v := getattr(args, b.name, None)) is not None]


def bound_notes(rows: Sequence[QualityRow], limits: Limits, picked: Sequence[str] = ()) -> list[str]:
    """One line naming the ``rows`` that meet ``limits`` by their values but whose uncertainty's far bound does not
    (:meth:`qbench.judge.Budget.bound_over`; ``picked``: schemes said as picks), or none. The pick reads the value
    (the mean, as llama.cpp's users do); the search job proves a recipe by mean + uncertainty, and a reader of a pick
    this close to the budget should know it is not proven within it."""
    said = [f"{r.scheme}{' (picked)' if r.scheme in picked else ''}: {why}" for r in rows if meets(r, limits) is None
            for b, limit in limits if (why := b.bound_over(r, limit))]
    return [("within the budget by the mean (as llama.cpp's users read it), not by mean ± uncertainty (what the "
             "search job requires): " + "; ".join(said))] if said else []


def meets(row: QualityRow, limits: Limits) -> Optional[str]:
    """Why ``row`` misses ``limits`` (the first budget it misses; no statistics: all), or None."""
    if row.status != "ok" or row.stats is None:
        return f"no quality measured ({row.status})"
    return next((why for b, limit in limits if (why := b.misses(row, limit))), None)
