"""The column catalogue: what a result row can show, with units in every header. A :class:`Column` has a ``key``
(what ``--columns`` takes), a ``header``, a pure ``value(row)`` (the raw value: CSV, JSON) and ``cell(row)`` (a
table's text). Units: sizes MiB (2**20 bytes), times µs (median of the method's samples), rates GB/s (1e9 B/s) and
TFLOP/s (1e12 FLOP/s), arithmetic intensity FLOP/byte. A value not measured is ``—``; a row with non-finite outputs
shows ``NaN/Inf×<count>`` as its error. ``hbm_floor_us`` and ``floor_pct`` put ``stream`` against the HBM floor."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from qbench.judge import CPU_METHOD, NOISY_CV, is_noisy, methods_present
from qbench.render.kernels import short_kernel
from qbench.row import Row
from qbench.timing import registry

__all__ = ["COLUMNS", "Column", "DASH", "UnknownColumnError", "entry", "fmt_num", "fmt_us", "fmt_ratio", "field_at",
           "shown", "default_columns", "resolve_columns"]

#: What a table shows for a value that was not measured.
DASH = "—"

#: A column's getter: a result row (:class:`qbench.row.Row`) or any record a reader renders -> value.
Getter = Callable[[Any], Any]


class UnknownColumnError(ValueError):
    """A column key that is not in the catalogue; the message lists the allowed keys."""


def fmt_num(fmt: str) -> Callable[[Any], str]:
    """A formatter: ``format(v, fmt)``, or :data:`DASH` for None or a non-finite float."""
    return lambda v: DASH if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def shown(value: Any, template: str = "{:.3g}") -> str:
    """``value`` through the ``str.format`` ``template`` (``"{:.2f}×"``), or :data:`DASH` for None."""
    return DASH if value is None else template.format(value)


def fmt_ratio(v: Any) -> str:
    """A speed-up (baseline time / this time): ``1.23×``, or :data:`DASH`."""
    return shown(v, "{:.2f}×")


def _text(v: Any) -> str:
    return DASH if v is None or v == "" else str(v)


def fmt_us(v: Any) -> str:
    """µs with about three significant digits: 1.23, 11.0, 123, 1234."""
    if v is None:
        return DASH
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"


#: The format hints a column's ``show`` may name instead of a function (``pct``: a share already in per cent,
#: ``42 %``); any other string is ``format(v, hint)``.
HINTS: dict[str, Callable[[Any], str]] = {"us": fmt_us, "ratio": fmt_ratio, "pct": lambda v: shown(v, "{:.0f} %")}


@dataclass(frozen=True)
class Column:
    """One column: ``key``, ``header`` (with units), ``value`` (raw getter), ``show`` (a raw value's cell: a function
    or a hint, :data:`HINTS` or a ``format`` spec such as ``".3g"``), ``numeric`` (right-aligned; default: a hint),
    ``help``, ``cell_override`` (the cell from the row) and ``width`` (a longer cell wraps)."""

    key: str
    header: str
    value: Getter
    show: Callable[[Any], str] | str = _text
    numeric: Optional[bool] = None
    help: str = ""
    cell_override: Getter | None = field(default=None, compare=False)
    width: int | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.numeric is None:
            object.__setattr__(self, "numeric", isinstance(self.show, str))
        if isinstance(self.show, str):
            object.__setattr__(self, "show", HINTS.get(self.show) or fmt_num(self.show))

    def cell(self, row: Any) -> str:
        """The text a table shows for ``row``."""
        return self.cell_override(row) if self.cell_override is not None else self.show(self.value(row))


def entry(key: str, header: str, show: Callable[[Any], str] | str = _text, numeric: Optional[bool] = None, *,
          of: str = "", scale: Optional[float] = None, **kw) -> Column:
    """A column of a reader's dict record: its ``of`` (default ``key``) entry, times ``scale`` when given."""
    return Column(key, header, field_at(of or key, scale=scale), show, numeric, **kw)


def field_at(*path: str, scale: Optional[float] = None) -> Getter:
    """The getter of the field at ``path`` of a Row or a dict record (times ``scale`` when given); None where a part
    on the way is null (an attribute the model lacks raises AttributeError: a column no row can fill)."""
    def get(row: Any) -> Any:
        cur: Any = row
        for p in path:
            if cur is None:
                return None
            cur = cur.get(p) if isinstance(cur, dict) else getattr(cur, p)
        return cur if scale is None or cur is None else cur * scale
    return get


def _latency(method: str, stat: str = "median") -> Getter:
    return lambda row: getattr(row.latency_us.get(method), stat, None)


def _latency_cell(method: str) -> Getter:
    """A latency cell: the median, ``*`` when noisy (:func:`qbench.judge.is_noisy`)."""
    def cell(row: Row) -> str:
        text = fmt_us(_latency(method)(row))
        return text + "*" if text != DASH and is_noisy(row, method) else text
    return cell


def _meta_pct(row: Row) -> Any:
    meta, stored = row.metadata_bytes, row.stored_bytes
    return None if meta is None or not stored else 100.0 * meta / stored


def _rel_err_cell(row: Row) -> str:
    bad = (row.error.nonfinite if row.error is not None else None) or 0
    return f"NaN/Inf×{bad}" if bad else fmt_num(".2e")(field_at("error", "rel_fro")(row))


def _kernels(row: Row, most: Optional[int] = None) -> Any:
    """The kernels of one call, ``×count`` when it is set and not 1: every one by full name (CSV, JSON; None for
    none), or the ``most`` longest-running by short name (a table cell)."""
    kernels = row.dispatch.kernels if row.dispatch is not None else None
    if not kernels:
        return None if most is None else DASH
    name = str if most is None else short_kernel
    names = [name(str(k.name)) + (f"×{k.count:g}" if "count" in k.model_fields_set and k.count != 1 else "")
             for k in kernels[:most]]
    return ", ".join(names) + (f" (+{len(kernels) - most} more)" if most is not None and len(kernels) > most else "")


def _num(key: str, header: str, value: Getter, fmt: str, help: str = "", **kw) -> Column:
    """A right-aligned number column in the format hint ``fmt`` (:class:`Column`)."""
    return Column(key, header, value, fmt, True, help, **kw)


#: MiB per byte: a size column's scale.
_MIB = 1.0 / 2**20
_RATES = "median of achieved_method (stream; cold on rows without stream)"

_CATALOGUE: list[Column] = [
    *[Column(key, key.replace("_", " "), field_at(key))
      for key in ("scheme", "base_scheme", "library", "mode", "device")],
    _num("m", "M", field_at("m"), "d", "rows (batch x tokens)"),
    _num("k", "K", field_at("k"), "d", "in_features"),
    _num("n", "N", field_at("n"), "d", "out_features"),
    *[Column(f"{of}_dtype", f"{short} dtype", field_at(f"{of}_dtype"))
      for of, short in (("weight", "weight"), ("activation", "act"), ("output", "out"), ("compute", "compute"))],
    _num("stored_mib", "stored MiB", field_at("stored_bytes", scale=_MIB), ".2f", "payload + metadata + bias"),
    _num("shard_mib", "stored MiB per rank", field_at("stored_bytes", scale=_MIB), ".2f",
         "tensor-parallel rows: one rank's shard (rank 0's), payload + metadata + bias"),
    _num("payload_mib", "payload MiB", field_at("payload_bytes", scale=_MIB), ".2f"),
    _num("meta_mib", "meta MiB", field_at("metadata_bytes", scale=_MIB), ".3f"),
    _num("meta_pct", "meta %", _meta_pct, ".1f", "metadata / stored bytes"),
    _num("bits_per_weight", "bits/w", field_at("bits_per_weight"), ".2f", "8 x stored bytes / (K*N), measured"),
    _num("nominal_bits", "nominal bits", field_at("nominal_bits"), "g", "the format's nominal width, a label"),
    _num("gflop", "GFLOP", field_at("flops", scale=1e-9), ".3f", "2*M*K*N"),
    _num("min_mib", "min MiB", field_at("min_bytes", scale=_MIB), ".2f", "minimum bytes moved"),
    _num("ai", "AI FLOP/B", field_at("arithmetic_intensity"), ".1f", "arithmetic intensity"),
    _num("roofline_us", "roofline µs", field_at("roofline_us"), "us"),
    Column("bound", "bound", field_at("roofline_bound"), help="memory or compute"),
    Column("roofline_source", "ceilings", field_at("roofline_source"), help="measured or datasheet"),
    *[_num(m, f"{m} µs", _latency(m), "us", f"median of latency_us.{m}: {info.includes}; * = noisy "
           f"(cv > {NOISY_CV:.0%})", cell_override=_latency_cell(m))
      for m, info in registry.METHODS.items() if info.job == "layer"],
    *[_num(f"{m}_cv", f"{m} cv %", field_at("latency_us", m, "cv", scale=100.0), ".1f", f"stdev/mean of latency_us.{m}")
      for m in registry.LAYER_METHODS],
    *[_num(f"{m}_{p}", f"{m} {p} µs", _latency(m, p), "us") for m in registry.LAYER_METHODS for p in ("p10", "p90")],
    *[_num(f"{m}_copies", f"{m} copies", _latency(m, "copies"), "d",
           f"L: distinct weight copies the {m} graph (CPU: loop) calls in order (latency_us.{m}.copies)")
      for m, info in registry.METHODS.items() if "copies" in info.extras],
    _num("hbm_floor_us", "HBM floor µs", field_at("hbm_floor_us"), "us",
         "stored bytes / measured memory bandwidth: no call that reads its weight from HBM is faster"),
    _num("floor_pct", "floor %", field_at("hbm_floor_fraction", scale=100.0), ".0f",
         "HBM floor / stream median (100 = at the floor)"),
    _num("launch_us", "launch µs", field_at("launch_overhead_us"), "us", "eager median - kernel median"),
    _num("roofline_pct", "roofline %", field_at("roofline_fraction", scale=100.0), ".0f", f"roofline / {_RATES}"),
    _num("gbps", "GB/s", field_at("achieved_gbps"), ".0f", f"min bytes / {_RATES}"),
    _num("tflops", "TFLOP/s", field_at("achieved_tflops"), ".1f", f"FLOPs / {_RATES}"),
    Column("achieved_method", "rates from", field_at("achieved_method"),
           help="the method roofline %, GB/s and TFLOP/s divide by"),
    _num("rel_err", "rel err", field_at("error", "rel_fro"), ".3g", "relative Frobenius error vs float64",
         cell_override=_rel_err_cell),
    _num("max_abs", "max abs err", field_at("error", "max_abs"), ".3g"),
    _num("sqnr", "SQNR dB", field_at("error", "sqnr_db"), ".1f"),
    _num("cosine", "cosine", field_at("error", "cosine"), ".6f"),
    _num("nonfinite", "NaN/Inf", field_at("error", "nonfinite"), "d"),
    Column("status", "status", field_at("status")),
    Column("reason", "reason", field_at("reason")),
    Column("dispatch", "dispatch", field_at("dispatch", "label")),
    Column("kernels", "kernels", _kernels, help="GPU kernels of one call; tables: the 3 longest, short names",
           cell_override=lambda row: _kernels(row, 3)),
    Column("host_sync", "host sync", field_at("dispatch", "host_sync")),
    Column("graph_ok", "graph ok", field_at("dispatch", "graph_capturable")),
    Column("clock_dropped", "clock dropped", field_at("gpu_state", "clock_dropped")),
    _num("compile_s", "compile s", field_at("compile", "first_call_s"), ".1f",
         "first call of a compiled scheme: compile + run (compile.first_call_s)"),
    _num("graphs", "graphs", field_at("compile", "graphs_compiled"), "d", "Dynamo graphs compiled by this row's first "
         "call (compile.graphs_compiled; 0 on every row: nothing ran compiled)"),
    _num("graph_breaks", "graph breaks", field_at("compile", "graph_breaks"), "d",
         "Dynamo graph breaks during the row's first call (compile.graph_breaks)"),
    _num("tp_size", "tp", field_at("tp_size"), "d", "tensor-parallel ranks the layer is sharded over (tensor-parallel "
         "rows only)"),
    Column("split", "split", field_at("split"), help="column (N sharded, all-gather) or row (K sharded, all-reduce)"),
    Column("collective", "collective", field_at("collective"), help="the collective after the local GEMM"),
    _num("local_us", "local GEMM µs", field_at("local_gemm_us", "median"), "us",
         "median of local_gemm_us: the sharded GEMM on one rank"),
    _num("collective_us", "collective µs", field_at("collective_us", "median"), "us",
         "median of collective_us: the all-gather or all-reduce alone"),
    _num("end_to_end_us", "end-to-end µs", field_at("end_to_end_us", "median"), "us",
         "median of end_to_end_us: local GEMM + collective"),
    _num("tp_speedup", "speed-up vs tp 1 (tp1 time / this)", field_at("speedup_vs_tp1"), ".2f",
         "the tp_size 1 row's time / this row's, and the method it compares (speedup_vs_tp1: stream when both "
         "rows have it, else end-to-end cold or cpu)",
         cell_override=lambda row: DASH if row.speedup_vs_tp1 is None
         else f"{row.speedup_vs_tp1:.2f}× {row.speedup_vs_tp1_method or ''}".rstrip()),
    _num("collective_bytes", "coll. bytes", field_at("collective_bytes"), "d",
         "bus bytes each rank sends and receives in the collective (nccl-tests' definition)"),
    _num("vs_unsharded", "rel err vs unsharded", field_at("sharded_vs_unsharded", "rel_fro"), ".3g",
         "rel_fro of the sharded output with the unsharded layer's output (same scheme) as reference"),
    _num("busbw_gbps", "bus GB/s", field_at("collective_busbw_gbps"), ".1f",
         "collective bus bandwidth (nccl-tests' definition)"),
    Column("flags", "flags", lambda row: "; ".join(f.name for f in row.flags) or None,
           help="what could mislead a reader (repacked, not-compiled, graph-breaks): the row's flags list, "
                "names only (the JSON has each flag's sentence)"),
]

#: key -> Column, in catalogue order.
COLUMNS: dict[str, Column] = {c.key: c for c in _CATALOGUE}

_COMMON_HEAD = ["scheme", "m", "stored_mib", "meta_pct", "bits_per_weight", "ai", "roofline_us"]

#: The columns a terminal table leaves out unless ``--wide``: the rest fits 120 characters with
#: qbench's longest scheme labels (35 characters).
WIDE_ONLY = ("stored_mib", "meta_pct", "ai", "roofline_us", "hbm_floor_us")

#: How many timing methods a table shows unless ``--wide``: the decision method and the next one.
NARROW_METHODS = 2

#: The columns of a tensor-parallel terminal table unless ``--wide`` (``times``: the rows' first method).
TP_NARROW = ("scheme", "m", "tp_size", "split", "end_to_end_us", "times", "tp_speedup", "rel_err", "status")

#: Shorter headers of the narrow default table (:func:`qbench.render.render` without ``wide``).
NARROW_HEADERS = {"tp_speedup": "vs tp 1"}


def default_columns(rows: Sequence[Row], wide: bool = True) -> list[str]:
    """Default column keys of ``run``'s and ``report``'s table: the common head, the rows' timing methods (CUDA ones on
    CUDA, ``stream`` and ``cpu`` on CPU), the HBM floor (CUDA), error and status (no rows: every default); sharding
    for tensor-parallel rows. Without ``wide``: :data:`NARROW_METHODS` methods, no :data:`WIDE_ONLY`; or TP_NARROW."""
    rows = list(rows)
    present = methods_present(rows)
    cuda = any(m in present for m, info in registry.METHODS.items() if info.cuda and not info.cpu) \
        or any(str(r.device).startswith("cuda") for r in rows)
    cpu = CPU_METHOD in present or (not cuda and bool(rows))
    times: list[str] = []
    for m, info in registry.METHODS.items():
        known = any(m in r.latency_us or m in r.latency_reasons for r in rows)  # timed with m at all
        if not info.shown_by_default or ((rows or info.job != registry.LAYER) and not known):
            continue
        if ((cuda or not rows) and info.cuda) or (cpu and info.cpu):
            times.append(m)
    floor = ["hbm_floor_us", "floor_pct"] if not rows or (cuda and any(r.has("hbm_floor_us") for r in rows)) else []
    if any(r.tp_size is not None for r in rows):
        if not wide:
            return [c for key in TP_NARROW for c in (times[:1] if key == "times" else [key])]
        head = ["shard_mib" if c == "stored_mib" else c for c in _COMMON_HEAD if c not in ("scheme", "m")]
        return ["scheme", "m", "tp_size", "split", "collective", *head, "local_us", "collective_us",
                "end_to_end_us", *times, "tp_speedup", "rel_err", "status"]
    if not wide:
        return [c for c in [*_COMMON_HEAD, *times[:NARROW_METHODS], *floor, "rel_err", "status"]
                if c not in WIDE_ONLY]
    return [*_COMMON_HEAD, *times, *floor, "rel_err", "status"]


def resolve_columns(columns: Iterable[str | Column] | None, rows: Sequence[Any]) -> list[Column]:
    """``columns`` (keys, Columns, or None for :func:`default_columns`) as Columns; :class:`UnknownColumnError`
    naming a bad key and the close or allowed ones."""
    out: list[Column] = []
    for c in default_columns(rows) if columns is None else columns:
        if isinstance(c, Column):
            out.append(c)
            continue
        if c not in COLUMNS:
            close = difflib.get_close_matches(c, list(COLUMNS), n=3, cutoff=0.7)
            raise UnknownColumnError(f"unknown column {c!r}; " + (
                f"did you mean {', '.join(close)}? (--help-columns lists all {len(COLUMNS)})" if close
                else f"allowed: {', '.join(COLUMNS)}"))
        out.append(COLUMNS[c])
    return out
