"""The decisions readers make about rows, for every job kind: the timing method of a file or a row, whether two
readings differ beyond their noise, the pick among schemes tied within noise and whether it holds across runs, why
a scheme has no graph-captured time, what could mislead a reader of a row, and the budget options a job declares.
Pure functions over the typed result; readers and renderers decide nothing on their own."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Optional, Sequence, TypeVar

from qbench import jobs
from qbench.results import ResultDoc
from qbench.row import NOISY_CV, Row, Stats, combine_repeats, is_noisy_cv  # noqa: F401  (NOISY_CV: readers import it)
from qbench.timing import registry
from qbench.timing.stats import verdict  # noqa: F401  (the rule lives with the statistics; readers import it here)

__all__ = ["CAPTURE_KINDS", "beyond", "CPU_METHOD", "DECISION_METHOD", "FALLBACK_METHODS", "METHOD_CHOICES", "NOISY_CV",
           "PARETO_KEYS", "STORED_BYTES_RTOL", "UNUSABLE", "Budget", "budget_flags", "capture_failure", "combine_rows",
           "common_method", "decision_method", "decision_stats", "incomplete_warning", "is_noisy", "methods_present",
           "pareto_front", "pick_stability", "pick_within_noise", "resolve_method", "row_caveats", "shape_order",
           "HOST_CLOCK_METHOD", "by_shape", "unusable_note", "verdict", "within_noise"]

T = TypeVar("T")

#: The CPU method every CPU row has (CPU rows may also have ``stream``).
CPU_METHOD = registry.CPU_METHOD
#: The method decisions read by default (``stream``: weights from HBM, graph-captured).
DECISION_METHOD = registry.DECISION_METHOD
#: The host-clock reading of one call (``eager``): what an uncapturable scheme costs per call.
HOST_CLOCK_METHOD = registry.HOST_CLOCK_METHOD
#: The values a ``--method`` option accepts on layer files: every layer method of the registry.
METHOD_CHOICES = registry.LAYER_METHODS
#: What a file without ``stream`` falls back to, in order: ``cold`` (CUDA), ``cpu`` (CPU).
FALLBACK_METHODS = registry.FALLBACK_METHODS

#: What a scheme is called whose ``ok`` row has no graph-captured time because its call cannot be
#: captured in a CUDA graph (a host sync: ``.item()``, a device-to-host copy).
UNUSABLE = "unusable in a graph-captured decode loop"
#: The reason kinds (:data:`qbench.row.REASON_KINDS`) that say the call was not captured.
CAPTURE_KINDS = frozenset({"capture-failed", "not-attempted", "host-sync"})


# ---- which method --------------------------------------------------------------------------------

def methods_present(rows: Sequence[Row]) -> list[str]:
    """Timing methods with a median in some row, in the registry's order, unknown names last."""
    seen = {m for r in rows for m, s in r.latency_us.items() if s is not None and s.median is not None}
    order = list(registry.METHODS)
    return [m for m in order if m in seen] + sorted(seen - set(order))


def resolve_method(doc: ResultDoc, requested: Optional[str]) -> tuple[str, Optional[str]]:
    """``(method, note)``: ``requested`` as given; else :data:`DECISION_METHOD` when some row has it, else the first
    of :data:`FALLBACK_METHODS` the file has, with a note saying so; else ``(DECISION_METHOD, None)``."""
    if requested is not None:
        return requested, None
    present = methods_present(doc.rows)
    fallback = next((m for m in FALLBACK_METHODS if m in present and m != DECISION_METHOD), None)
    if DECISION_METHOD in present or fallback is None:
        return DECISION_METHOD, None
    return fallback, (f"no {DECISION_METHOD} latency in this file: an older result, or {DECISION_METHOD} not "
                      f"timed; using {fallback} times")


def decision_method(row: Any) -> Optional[str]:
    """The first method of :func:`qbench.timing.registry.decision_order` for ``row.job`` with a median, or None."""
    order = registry.decision_order(getattr(row, "job", None) or jobs.DEFAULT)
    return next((m for m in order if (s := row.latency_us.get(m)) is not None and s.median is not None), None)


def decision_stats(row: Any) -> Optional[Stats]:
    """The row's STATS by its :func:`decision_method`, or None."""
    method = decision_method(row)
    return row.latency_us.get(method) if method else None


def common_method(a: ResultDoc, b: ResultDoc, requested: Optional[str]) -> tuple[str, Optional[str]]:
    """``(method, note or None)`` two files are compared by: :func:`resolve_method` of each; when they differ, the
    first of ``stream``, ``cold``, ``cpu`` both have (the note names the side without ``stream``), else ``stream``."""
    method, note_a = resolve_method(a, requested)
    method_b, note_b = resolve_method(b, requested)
    if method == method_b:
        return method, note_a or note_b
    have_a, have_b = methods_present(a.rows), methods_present(b.rows)
    common = next((m for m in (DECISION_METHOD, *FALLBACK_METHODS) if m in have_a and m in have_b), None)
    if common is None:
        return DECISION_METHOD, None
    lacks = " and ".join(side for side, have in (("A", have_a), ("B", have_b)) if DECISION_METHOD not in have)
    verb = "has" if len(lacks) == 1 else "have"
    return common, f"{lacks} {verb} no {DECISION_METHOD} latency; comparing {common} times"


# ---- the file ------------------------------------------------------------------------------------

def incomplete_warning(doc: ResultDoc, path: str | os.PathLike) -> Optional[str]:
    """One line when ``doc`` says ``"complete": false`` (schemes may be missing), else None."""
    if doc.complete is not False:
        return None
    schemes = len({r.scheme for r in doc.rows})
    asked = len((doc.scenario.model_extra or {}).get("schemes") or [])
    of = f"{schemes} of the {asked} schemes its scenario lists" if asked > schemes else f"{schemes} schemes"
    return (f"warning: {path} is incomplete (\"complete\": false, {len(doc.rows)} rows of {of}): "
            "the run was interrupted or is still going; schemes may be missing")


# ---- two readings --------------------------------------------------------------------------------

def row_verdict(ra: Row, rb: Row, method: str) -> str:
    """:func:`verdict` of two rows' ``method`` STATS with their runs' medians (µs, ``repeats.medians``): ties use
    the wider of the within-run and the between-run spread."""
    runs = [list(r.repeats.medians.get(method) or []) if r.repeats is not None else [] for r in (ra, rb)]
    return verdict(ra.stats(method), rb.stats(method), *runs)


def tie_note(ra: Row, rb: Row, method: str) -> Optional[str]:
    """``"between-run spread X%"`` (the wider :func:`tie_band`) when two rows tie only through their runs' spread."""
    if verdict(ra.stats(method), rb.stats(method)) == "same" or row_verdict(ra, rb, method) != "same":
        return None
    bands = [tie_band(r.stats(method), r.repeats, method) for r in (ra, rb)]
    band = max((b for b in bands if b is not None), default=None)
    return f"between-run spread {band:.0%}" if band is not None else "between-run spread"


def within_noise(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` both have a :func:`decision_stats` (each row by its own :func:`decision_method`) and
    :func:`verdict` finds them the same: p10-p90 overlap, each side widened by its runs' medians
    (``repeats.medians``, ``qbench run --repeat``), as :func:`row_verdict` for layer rows."""
    mine, theirs = decision_stats(a), decision_stats(b)
    if mine is None or theirs is None:
        return False
    runs = [list(r.repeats.medians.get(decision_method(r)) or []) if r.repeats is not None else [] for r in (a, b)]
    return verdict(mine, theirs, *runs) == "same"


def pick_within_noise(candidates: Sequence[T], *, time: Callable[[T], float],
                      same: Callable[[T, T], bool], error: Callable[[T], Optional[float]],
                      size: Callable[[T], Optional[float]], name: Callable[[T], str],
                      previous: Optional[str] = None) -> tuple[Optional[T], Optional[T], Optional[T], list[T]]:
    """The pick among ``candidates`` (each within the error budget): the fastest by ``time`` (µs, first wins on
    equal times), the group ``same`` as it within noise, and in that group the one named ``previous`` (the
    neighbouring problem's pick: a deployment stores one weight format, so a pick does not flip inside noise), else
    the lowest ``error``, then the fewest ``size`` bytes, then the lowest ``time`` (None ranks last).

    Returns ``(pick, by_rank, fastest, group)``: ``by_rank`` is the group's best by error / bytes / time; all None
    and ``[]`` without candidates."""
    if not candidates:
        return None, None, None, []
    fastest = min(candidates, key=time)
    group = [fastest, *(c for c in candidates if c is not fastest and same(fastest, c))]
    inf = float("inf")
    by_rank = min(group, key=lambda c: (inf if error(c) is None else error(c), inf if size(c) is None else size(c),
                                        time(c)))
    best = next((c for c in group if name(c) == previous), by_rank)
    return best, by_rank, fastest, group


def pick_stability(records: Sequence[Sequence[Mapping[str, Any]]],
                   keys: tuple[str, ...] = ("m", "context")) -> list[dict]:
    """Across several files' pick records (each a mapping with ``keys`` and ``pick``): per value of ``keys`` present
    in every file, ascending, ``{**keys, "picks": [pick per file], "holds": all equal}``."""
    by_file: list[dict[tuple, Optional[str]]] = [{tuple(r[k] for k in keys): r["pick"] for r in rec}
                                                 for rec in records]
    common: list[Hashable] = sorted(set.intersection(*(set(f) for f in by_file))) if by_file else []
    return [{**dict(zip(keys, where)), "picks": [f[where] for f in by_file],
             "holds": len({f[where] for f in by_file}) == 1} for where in common]


# ---- one row -------------------------------------------------------------------------------------

def capture_failure(row: Row, method: str) -> Optional[str]:
    """The reason's text when ``row`` is ``ok`` but has no time for ``method``, a method that needs a CUDA graph
    capture, for a reason of :data:`CAPTURE_KINDS` (the scheme is :data:`UNUSABLE`); else None."""
    info = registry.METHODS.get(method)
    if info is None or not info.needs_capture or row.status != "ok" or row.stats(method) is not None:
        return None
    why = row.reason_for(method)
    return why.text if why is not None and why.kind in CAPTURE_KINDS else None


def unusable_note(pairs: Sequence[tuple[str, Optional[int]]], method: str) -> Optional[str]:
    """One line naming the schemes of ``(scheme, M)`` pairs (:func:`capture_failure`) with their Ms; None without."""
    by_scheme: dict[str, dict] = {}  # scheme -> its M values, each once, first-seen order
    for scheme, m in pairs:
        by_scheme.setdefault(scheme, {})[m] = None
    if not by_scheme:
        return None
    names = ", ".join(f"{s} (M={','.join(str(m) for m in sorted(ms, key=lambda v: (v is None, v)))})"
                      for s, ms in by_scheme.items())
    return f"{UNUSABLE} (no {method} time: the call cannot be captured in a CUDA graph, e.g. a host sync): {names}"


def is_noisy(row: Row, method: str) -> bool:
    """True when ``latency_us[method].cv`` exceeds :data:`qbench.row.NOISY_CV`."""
    stats = row.latency_us.get(method)
    return is_noisy_cv(stats.cv if stats is not None else None)


def row_caveats(row: Row, stats: Optional[Stats]) -> list[str]:
    """The row's flag names and ``noisy (cv X)`` when ``stats``' cv exceeds :data:`NOISY_CV`."""
    said = row.flag_names
    cv = stats.cv if stats is not None else None
    if is_noisy_cv(cv):
        said.append(f"noisy (cv {cv:.2f})")
    return said


# ---- many rows -----------------------------------------------------------------------------------

def shape_order(shape: tuple) -> tuple:
    """Sort key of a row shape (M, K, N, tp_size, split): ascending, no tp_size before 1, splits by name."""
    return tuple(str(x) if isinstance(x, str) else (x or 0) for x in shape)


def by_shape(rows: Sequence[Row]) -> list[tuple[tuple, list[Row]]]:
    """``[(shape, [Row...]), ...]``: ``rows`` grouped by ``Row.shape`` in :func:`shape_order`, each in file order."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.shape, []).append(r)
    return sorted(groups.items(), key=lambda kv: shape_order(kv[0]))


#: The axes of the Pareto front ``qbench recommend`` reports and ``qbench plot`` rings, all minimised.
PARETO_KEYS = ("latency_us", "rel_fro", "stored_bytes")

#: Relative resolution of the stored-bytes axis of the Pareto front: sizes within 1 % are equal, so a scheme storing
#: a few KiB less metadata on a 16 MiB weight is not kept on the front however slow.
STORED_BYTES_RTOL = 0.01


def pareto_front(points: Sequence[dict], keys: Sequence[str] = PARETO_KEYS, rtol: Optional[dict] = None) -> list[dict]:
    """The points no other point dominates (no worse on every key, better on one; all ``keys`` minimised), in input
    order; equal points all kept, points with a key None left out. ``rtol`` (key -> relative tolerance; default
    ``{"stored_bytes": STORED_BYTES_RTOL}``) makes values of that key within the tolerance equal."""
    tol = {"stored_bytes": STORED_BYTES_RTOL} if rtol is None else rtol
    pts = [p for p in points if all(p.get(k) is not None for k in keys)]

    def cmp(x: float, y: float, t: float) -> int:  # -1 better, 0 equal, 1 worse
        return 0 if abs(x - y) <= t * max(abs(x), abs(y)) else -1 if x < y else 1

    def dominates(a: dict, b: dict) -> bool:
        c = [cmp(a[k], b[k], tol.get(k, 0.0)) for k in keys]
        return all(v <= 0 for v in c) and any(v < 0 for v in c)

    return [p for p in pts if not any(dominates(q, p) for q in pts if q is not p)]


def tie_band(stats, repeats, method: str) -> Optional[float]:
    """The wider of the within-run spread ((p90 - p10) / median of ``stats``) and the between-run spread of
    ``repeats`` for ``method``; None when the row has neither."""
    bands = []
    if stats is not None and stats.median and stats.p10 is not None and stats.p90 is not None:
        bands.append((stats.p90 - stats.p10) / stats.median)
    between = repeats.spread.get(method) if repeats is not None else None
    if between is not None:
        bands.append(between)
    return max(bands) if bands else None


# ---- runs of one row: several files --------------------------------------------------------------

def combine_rows(rows: Sequence[T]) -> T:
    """The base row of :func:`qbench.row.combine_repeats` with its ``repeats``; a single row as it is."""
    if len(rows) == 1:
        return rows[0]
    base, repeats = combine_repeats(rows)
    return rows[base].model_copy(update={"repeats": repeats})


# ---- budgets -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """One budget option a job kind declares: ``--<name>`` bounds the row statistic ``value`` from above (``upper``)
    or below; the option, its check, its sentence, a row's miss and the JSON key all come from this record.

    Attributes:
        name: the option's destination and JSON key (``max_kld``; the option is ``--max-kld``).
        what, terms: the statistic as a table names it (``mean KLD``) and in the field's terms, for a refusal
            (``mean KL divergence, nats``).
        value: the row -> the statistic (None: not measured; the row misses the budget); ``help``: its ``--help``.
        upper: True: a row meets it with ``value <= limit``; False: ``value >= limit``.
        most: the largest limit accepted (a share: 1), None: any limit >= 0.
        scale, unit, fmt: how a value and a limit are said (a share as a percentage: 100, `` %``; a row's value in a
            miss: ``.3g``).
        unc: the row -> the statistic's uncertainty (None: the statistic has none, or it was not measured): a row
            meets a budget by its value (as llama.cpp's users read the mean); :meth:`bound_over` says when the
            value's far bound (value ± uncertainty) does not."""

    name: str
    what: str
    terms: str
    value: Callable[[Any], Optional[float]]
    help: str = ""
    upper: bool = True
    most: Optional[float] = None
    scale: float = 1.0
    unit: str = ""
    fmt: str = ".3g"
    unc: Optional[Callable[[Any], Optional[float]]] = None

    @property
    def flag(self) -> str:
        """The command-line option, ``--max-kld``."""
        return "--" + self.name.replace("_", "-")

    def check(self, limit: float) -> Optional[str]:
        """Why ``limit`` is not a budget of this option (one line; NaN too), or None."""
        if limit >= 0 and (self.most is None or limit <= self.most):
            return None
        most = "" if self.most is None else f" and <= {self.most:g}"
        return f"{self.flag}: must be a number >= 0{most}, got {limit}"

    def text(self, limit: float) -> str:
        """The budget in words: ``mean KLD ≤ 0.01``, ``same top ≥ 99 %``."""
        return f"{self.what} {'≤' if self.upper else '≥'} {self.scale * limit:g}{self.unit}"

    def misses(self, row: Any, limit: float) -> Optional[str]:
        """Why ``row`` misses ``limit`` (``mean KLD 0.0121 > 0.01``), or None when it meets it."""
        v = self.value(row)
        if v is None:
            return f"no {self.what} measured"
        if (v > limit) if self.upper else (v < limit):
            return (f"{self.what} {beyond(self.scale * v, self.scale * limit, self.fmt)}{self.unit} "
                    f"{'>' if self.upper else '<'} {self.scale * limit:g}{self.unit}")
        return None

    def bound_over(self, row: Any, limit: float) -> Optional[str]:
        """Why ``row`` meets ``limit`` by its value but not by its far bound (value + uncertainty above an upper
        budget, value - uncertainty below a lower one): ``mean KLD 4.7e-05 ± 5.9e-07 is within the budget by its mean;
        its upper bound 4.76e-05 is over 4.71e-05``; None when it misses anyway, meets by the bound too, or has no
        uncertainty. The search job proves a recipe by the bound; this says where the two rules part."""
        value, unc = self.value(row), self.unc(row) if self.unc is not None else None
        if value is None or unc is None or self.misses(row, limit) is not None:
            return None
        bound = value + unc if self.upper else value - unc
        if (bound <= limit) if self.upper else (bound >= limit):
            return None
        return (f"{self.what} {format(self.scale * value, self.fmt)} ± {self.scale * unc:.2g}{self.unit} is within "
                f"the budget by its mean; its {'upper' if self.upper else 'lower'} bound "
                f"{beyond(self.scale * bound, self.scale * limit, self.fmt)}{self.unit} is "
                f"{'over' if self.upper else 'under'} {self.scale * limit:g}{self.unit}")


def beyond(value: float, limit: float, fmt: str = ".3g") -> str:
    """``value`` in ``fmt``, more digits (up to 6) while it prints as ``limit``: ``0.1002 > 0.1``, not ``0.1 > 0.1``."""
    text = format(value, fmt)
    for digits in range(3, 7):
        if float(text) != float(f"{limit:g}"):
            break
        text = format(value, f".{digits}g")
    return text


def budget_flags(budgets: Sequence[Budget]) -> str:
    """The options of ``budgets`` in a sentence: ``--max-kld, --max-ppl-ratio and --min-same-top``."""
    flags = [b.flag for b in budgets]
    return ", ".join(flags[:-1]) + (" and " if len(flags) > 1 else "") + flags[-1] if flags else ""
