"""The typed model of one result row: every field a row carries, its type, unit and meaning.

:class:`Row` (pydantic) is the one definition of a row of a qbench result file
(``docs/results-schema.md``; its ROW tables are generated from this module by
``scripts/gen_docs.py``). The producers (:mod:`qbench.measure`,
:mod:`qbench.tp.measure`) build rows as plain dicts and check them here before they leave the
process that measured them (producer rules, below); :func:`qbench.results.write_results` checks
every row again before a file is written and :func:`qbench.results.read_results` every row it
reads (reading rules: an old file copied through qbench keeps its legacy keys). The
readers (:mod:`qbench.readers`, :mod:`qbench.render`, :mod:`qbench.judge`) hold rows as
:class:`Row` (:class:`qbench.results.ResultDoc`) and read them through its attributes and helpers
(:attr:`Row.key`, :attr:`Row.shape`, :meth:`Row.stats`, :meth:`Row.reason_for`,
:attr:`Row.flag_names`).

Why a method has no time and what could mislead a reader are structured: ``latency_reasons.<method>``
is a :class:`Reason` (``kind``, ``text``) and ``flags`` a list of :class:`Flag` (``name``,
``text``), on layer rows since schema 2 and on model-step rows (:mod:`qbench.step.row`,
built on the same parts) since schema 3; producers build them with :func:`reason_record` and
:func:`flag_record`. Older files' sentences are upgraded on reading
(:func:`qbench.results.upgrade_prose_row`).

Two strengths of check (:func:`validate_row`):

* **reading** (``writing=False``): every key must be a field of the model (at every depth: a
  typo or an invented key is an error), every value must have the field's type, and the
  identity (scheme, M, K, N) and ``status`` must be present. Other fields may be absent: files
  written by older versions lack the fields added since (:data:`ADDED_SINCE`), and tests build
  partial rows.
* **writing** (``writing=True``): additionally every field marked *always* (the fields
  :func:`qbench.measure.base_row` sets, the six STATS numbers, ...) must be present, and no
  legacy field (:data:`LEGACY`) may be written.

Legacy fields, read but never written (:data:`LEGACY`): ``error.fp8_saturated`` (files before
2026-11-30: activation elements above 448 counted on every fp8 row, weight-only rows included;
now ``error.activations_over_fp8_max`` on rows that cast activations to fp8). Readers do not use
it.

Units: times µs, sizes bytes, rates GB/s (1e9 B/s) and TFLOP/s (1e12 FLOP/s), seconds where a
name ends in ``_s``. JSON ``null`` means "not measured"; a sibling ``reason`` / ``*_reason`` /
``latency_reasons`` entry says why.
"""

from __future__ import annotations

import statistics
import types
import typing
from typing import Annotated, Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator, field_validator, model_validator

from qbench.timing import registry
from qbench.timing.adaptive import STOP_REASONS

__all__ = [
    "ADDED_SINCE",
    "FLAG_MEANINGS",
    "FLAG_NAMES",
    "Flag",
    "REASON_KINDS",
    "Reason",
    "IDENTITY",
    "LEGACY",
    "NOISY_CV",
    "Row",
    "RowError",
    "Stats",
    "TP_ROW_FIELDS",
    "check_row",
    "check_extras",
    "dtype_name",
    "failed_rows",
    "field_paths",
    "is_noisy_cv",
    "flag_record",
    "known_methods",
    "reason_record",
    "row_key",
    "schema_markdown",
    "validate_row",
]

#: The fields that tell two rows of one file apart (:func:`row_key`): scheme label, M, K, N and,
#: on tensor-parallel rows, tp_size and split. Every row of a file has the same ``device``.
IDENTITY = ("scheme", "m", "k", "n", "tp_size", "split")

#: Fields a reader accepts in older files and the producer never writes: dotted path -> why.
LEGACY: dict[str, str] = {
    "error.fp8_saturated": "files written before 2026-11-30: activation elements with |x| > 448 counted on every "
                           "fp8 row (weight-only rows too, whose activations are never cast); now "
                           "error.activations_over_fp8_max, on rows that cast activations to fp8 only",
}

#: Fields the producer always writes that files of older versions lack: dotted path -> since when.
ADDED_SINCE: dict[str, str] = {
    "hbm_floor_us": "2026-11-29",  # with the stream method
    "hbm_floor_fraction": "2026-11-29",
    "achieved_method": "2026-11-29",
    "flags": "2026-11-30",
    "compile.graph_breaks": "2026-11-30",
    "weight_source": "2026-12-01",
}


def _keep_int(value: Any, handler) -> Any:
    """Validate ``value`` as a float (strict: an int is accepted, with the field's bounds) and give
    back an int as it came."""
    out = handler(value)
    return value if type(value) is int else out


#: A number as the file holds it: a float field given an int keeps the int (``"nominal_bits": 16``
#: reads and renders as 16, not 16.0); errors and bounds are the float's. The schema tables call it float.
Num = Annotated[float, WrapValidator(_keep_int)]


class Repeats(BaseModel):
    """``qbench run --repeat N``: one scheme measured in N independent worker processes."""

    model_config = ConfigDict(extra="forbid", strict=True)
    runs: int = Field(ge=1, description="runs (worker processes) of this scheme")
    ok_runs: int = Field(ge=0, description="runs whose row is ok")
    medians: dict[str, list[float]] = Field(description="per method, each ok run's median, µs, in run order")
    spread: dict[str, float] = Field(description="per method, (max - min) / median of the medians")


# ---- runs of one row: run --repeat writes them, readers combine several files alike --------------

def _row_medians(row: Any) -> tuple[int, int, dict[str, list[float]]]:
    """(runs, ok runs, {method: medians}) of one row: its ``repeats``, or the row as one run."""
    if row.repeats is not None:
        rep = row.repeats if isinstance(row.repeats, Repeats) else Repeats.model_validate(row.repeats)
        return rep.runs, rep.ok_runs, {m: list(v) for m, v in rep.medians.items()}
    ok = row.status == "ok"
    latency = getattr(row, "latency_us", None) or {}  # a job without timing methods (quality): no medians
    medians = {m: [s.median] for m, s in latency.items() if ok and s is not None and s.median is not None}
    return 1, int(ok), medians


def combine_repeats(rows: Sequence[Any]) -> tuple[int, Repeats]:
    """The runs of one row identity (``rows`` of any job kind, in run or file order) as one: the index
    of the base row (the first ``ok`` row timed by the most methods, else the first) and the
    :class:`Repeats` of all of them (run counts summed, medians in µs; ``spread`` = (max - min) /
    median of the medians, per method with two or more).

    Raises:
        ValueError: no rows."""
    if not rows:
        raise ValueError("combine_repeats: needs at least one row")
    ok = [i for i, r in enumerate(rows) if r.status == "ok"]
    timed = [sum(1 for st in (getattr(rows[i], "latency_us", None) or {}).values()
                 if st is not None and st.median is not None) for i in ok]
    base = ok[timed.index(max(timed))] if ok else 0
    runs = ok_runs = 0
    medians: dict[str, list[float]] = {}
    for r in rows:
        n, n_ok, meds = _row_medians(r)
        runs, ok_runs = runs + n, ok_runs + n_ok
        for m, v in meds.items():
            medians.setdefault(m, []).extend(v)
    spread = {m: (max(v) - min(v)) / statistics.median(v) for m, v in medians.items() if len(v) >= 2}
    return base, Repeats(runs=runs, ok_runs=ok_runs, medians=medians, spread=spread)


def kv_cache_kind(kv_cache: Optional[dict]) -> str:
    """A step or quality row's KV cache, ``fp8`` or ``activation-dtype``, from its ``kv_cache`` record's ``dtype``
    (None: the cache at the activation dtype, or a file written before rows recorded it)."""
    return "fp8" if "float8" in str((kv_cache or {}).get("dtype")) else "activation-dtype"


class RowError(ValueError):
    """A row does not fit the model; the message is one line: the key path, what is wrong, the value."""


def _always(**extra: Any) -> dict:
    return {"always": True, **extra}


class _Part(BaseModel):
    """Base of every part of a row: unknown keys are errors, types are strict (an int is accepted
    for a float and kept as an int, :data:`Num`; nothing else is converted); writing checks presence and legacy fields."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _writing_rules(cls, data: Any, info) -> Any:
        if not (info.context or {}).get("writing") or not isinstance(data, dict):
            return data
        for name, f in cls.model_fields.items():
            extra = f.json_schema_extra or {}
            if extra.get("always") and name not in data:
                raise ValueError(f"{name}: missing (the producer writes it on every row)")
            if extra.get("legacy") and name in data:
                raise ValueError(f"{name}: a legacy field, read from old files but never written ({extra['legacy']})")
        return data


# ---- parts ----------------------------------------------------------------------------------------

class Stats(_Part):
    """STATS: the samples of one timing method, µs per call. Stream and cold records carry extra keys."""

    median: Optional[Num] = Field(None, gt=0, description="median, µs per call", json_schema_extra=_always())
    p10: Optional[Num] = Field(None, ge=0, description="10th percentile (linear interpolation), µs",
                                 json_schema_extra=_always())
    p90: Optional[Num] = Field(None, ge=0, description="90th percentile, µs", json_schema_extra=_always())
    mean: Optional[Num] = Field(None, ge=0, description="mean, µs", json_schema_extra=_always())
    cv: Optional[Num] = Field(None, ge=0, description="coefficient of variation: sample standard deviation "
                                "(n - 1) / mean, dimensionless; 0 when n = 1", json_schema_extra=_always())
    n: Optional[int] = Field(None, ge=1, description="number of samples", json_schema_extra=_always())
    stop: Optional[Literal[tuple(STOP_REASONS)]] = Field(
        None, description="why the adaptive loop stopped: `ci-target` (the median's 95 % CI half-width fell under "
        "target_rel_ci), `budget` (budget_s ran out first, after at least min_reps samples), `max-reps`; absent "
        "on kernel readings and on files written before it was recorded")
    # stream only
    copies: Optional[int] = Field(None, ge=1, description="stream: L, the distinct copies of the built layer "
                                  "the graph calls in order (bf16 4096 x 4096: 8)")
    copy_bytes: Optional[int] = Field(None, ge=0, description="stream: stored bytes of one copy (after a repack: "
                                      "the repacked bytes)")
    planned_copy_bytes: Optional[int] = Field(None, ge=0, description="stream: the stored bytes the copies were "
                                              "planned for, when the weight was repacked on its first call")
    cache_bytes: Optional[int] = Field(None, ge=0, description="stream: the cache the copies must overflow, bytes "
                                       "(L2 on CUDA, the last-level cache on CPU)")
    cache_multiple: Optional[Num] = Field(None, ge=0, description="stream: copies x copy_bytes / cache_bytes "
                                            "(>= 4 unless a bound cut L)")
    bounded_by: Optional[Literal["memory", "max_copies"]] = Field(
        None, description="stream: what cut L below the 4 x cache target: `memory` (half the free memory), "
        "`max_copies` (512), null when nothing did")
    how: Optional[Literal["deepcopy", "rebuilt"]] = Field(
        None, description="stream: `deepcopy` (copy.deepcopy of the built module) or `rebuilt` (the scheme "
        "built again from the same FP32 weight)")
    recompilations: Optional[int] = Field(None, ge=0, description="stream, compiled rows: Dynamo graphs compiled "
                                          "while stream ran (0 expected)")
    # cold only
    launch: Optional[str] = Field(None, description="cold: `hidden` (a busy GPU hides the host launch) or "
                                  "`exposed (host sync inside the call)`")
    # step_reduce_overhead only (model-step rows)
    loop_steps: Optional[int] = Field(None, ge=1, description="step_reduce_overhead: decode steps per sample")
    host_us: Optional[Num] = Field(None, ge=0, description="step_reduce_overhead: the median host time of one call "
                                   "(until it returns, GPU work not waited for), µs")
    synced_us: Optional[Num] = Field(None, ge=0, description="step_reduce_overhead: the median of one call plus a "
                                     "synchronize from an idle GPU, µs")


#: STATS key -> the method whose records alone carry it (each method's ``extras``, :mod:`qbench.timing.registry`),
#: of every job.
EXTRAS_OWNER: dict[str, str] = {**registry.extras_owner(registry.LAYER), **registry.extras_owner(registry.STEP)}


def check_extras(latency: dict[str, Optional["Stats"]]) -> None:
    """Raise ValueError when a STATS record of ``latency`` (method -> STATS) carries another method's
    extra key (:data:`EXTRAS_OWNER`)."""
    for method, stats in latency.items():
        if stats is None:
            continue
        for key, owner in EXTRAS_OWNER.items():
            if owner != method and getattr(stats, key) is not None:
                raise ValueError(f"latency_us.{method}.{key}: a {owner} key on a {method} record")


class LedgerPart(_Part):
    """One tensor the layer stores, as counted by :mod:`qbench.schemes.ledger`."""

    name: Optional[str] = Field(None, description="the tensor's name in the module", json_schema_extra=_always())
    role: Optional[Literal["payload", "metadata", "bias"]] = Field(None, description="what the bytes are for",
                                                                   json_schema_extra=_always())
    dtype: Optional[str] = Field(None, description="torch dtype without the `torch.` prefix",
                                 json_schema_extra=_always())
    shape: Optional[list[int]] = Field(None, description="the tensor's shape", json_schema_extra=_always())
    bytes: Optional[int] = Field(None, ge=0, description="numel x element size, bytes", json_schema_extra=_always())


class ErrorMetrics(_Part):
    """The output against the float64 reference (:func:`qbench.metrics.error_metrics`). With any
    non-finite output every figure but ``nonfinite`` is null."""

    rel_fro: Optional[Num] = Field(None, ge=0, description="relative Frobenius error ||Y - Y_ref|| / ||Y_ref||",
                                     json_schema_extra=_always())
    abs_fro: Optional[Num] = Field(None, ge=0, description="||Y - Y_ref||, Frobenius")
    max_abs: Optional[Num] = Field(None, ge=0, description="largest |Y - Y_ref| element")
    sqnr_db: Optional[Num] = Field(None, description="signal-to-quantization-noise ratio, dB (null when exact)")
    cosine: Optional[Num] = Field(None, description="cosine similarity of Y and Y_ref, flattened")
    nonfinite: Optional[int] = Field(None, ge=0, description="non-finite output elements",
                                     json_schema_extra=_always())
    exact: Optional[bool] = Field(None, description="Y equals Y_ref exactly")
    rel_fro_note: Optional[str] = Field(None, description="why rel_fro is null or undefined (non-finite output, "
                                        "all-zero reference, overflow)")
    reference_nonfinite: Optional[int] = Field(None, ge=0, description="non-finite reference elements")
    activations_over_fp8_max: Optional[int] = Field(
        None, ge=0, description="rows that cast activations to e4m3 (fp8-dynamic): activation elements with "
        "|x| > 448 (e4m3 max) before the dynamic scale (nothing is clamped: the scale maps each row into range; "
        "a static scale of 1 would clamp these)")
    outlier_columns: Optional[int] = Field(None, ge=0, description="int8-bnb rows: activation columns with any "
                                           "|x| > the LLM.int8 threshold")
    fp8_saturated: Optional[int] = Field(None, ge=0, description="legacy: " + LEGACY["error.fp8_saturated"],
                                         json_schema_extra={"legacy": LEGACY["error.fp8_saturated"]})


class Kernel(_Part):
    """One GPU work item of one call (the ``kernel`` profile, L2 flushed)."""

    name: Optional[str] = Field(None, description="the kernel's (demangled) name, or `Memcpy ...` / `Memset ...`",
                                json_schema_extra=_always())
    count: Optional[Num] = Field(None, ge=0, description="mean launches per call", json_schema_extra=_always())
    us: Optional[Num] = Field(None, ge=0, description="total µs per call", json_schema_extra=_always())
    kind: Optional[Literal["kernel", "memcpy", "memset"]] = Field(None, description="work kind",
                                                                  json_schema_extra=_always())


class Dispatch(_Part):
    """The GPU work of one call, from the ``kernel`` profile."""

    label: Optional[str] = Field(None, description="`fused-quantized`, `dequantize+gemm`, `float-gemm` or "
                                 "`unknown` (qbench.dispatch.classify_dispatch)", json_schema_extra=_always())
    kernels: list[Kernel] = Field(default_factory=list, description="the work items, longest first",
                                  json_schema_extra=_always())
    host_sync: Optional[bool] = Field(None, description="a device-to-host copy or a host-blocking call happened "
                                      "inside the call", json_schema_extra=_always())
    graph_capturable: Optional[bool] = Field(None, description="false after a failed CUDA graph capture, null "
                                             "when neither warm nor stream ran", json_schema_extra=_always())

    @field_validator("label")
    @classmethod
    def _known_label(cls, v: Optional[str]) -> Optional[str]:
        from qbench.dispatch import LABELS

        if v is not None and v not in LABELS:
            raise ValueError(f"dispatch label {v!r} is not one of {', '.join(LABELS)}")
        return v


class GpuReading(_Part):
    """One NVML reading (:func:`qbench.gpu_state.read_gpu_state`)."""

    sm_clock_mhz: Optional[Num] = Field(None, description="SM clock, MHz")
    mem_clock_mhz: Optional[Num] = Field(None, description="memory clock, MHz")
    temp_c: Optional[Num] = Field(None, description="GPU temperature, °C")
    power_w: Optional[Num] = Field(None, description="board power draw, W")
    throttle_reasons: Optional[list[str]] = Field(None, description="active NVML slow-down reasons "
                                                  "(e.g. `sw_power_cap`); null when unreadable")
    reasons: Optional[dict[str, str]] = Field(None, description="reading -> why NVML could not give it")


class GpuState(_Part):
    """NVML readings around and during the row's timing (null on CPU)."""

    before: Optional[GpuReading] = Field(None, description="before the first method")
    after: Optional[GpuReading] = Field(None, description="after cold, eager and kernel")
    by_method: dict[str, GpuReading] = Field(default_factory=dict, description="method -> a fresh reading right "
                                             "after its last sample")
    clock_dropped: Optional[bool] = Field(None, description="the SM clock fell between before and after")

    @field_validator("by_method")
    @classmethod
    def _methods(cls, v: dict) -> dict:
        return known_methods(v, tuple(registry.METHODS))


class CompileInfo(_Part):
    """torch.compile counters of a compiled row's first call (null for eager rows)."""

    first_call_s: Optional[Num] = Field(None, ge=0, description="the first call, compilation included, s",
                                          json_schema_extra=_always())
    graphs_compiled: Optional[int] = Field(None, ge=0, description="Dynamo graphs compiled by the first call",
                                           json_schema_extra=_always())
    graph_breaks: Optional[int] = Field(None, ge=0, description="Dynamo graph breaks during the first call",
                                        json_schema_extra=_always())
    recompilations_during_timing: Optional[int] = Field(None, ge=0, description="graphs compiled while timing "
                                                        "(0 expected)")
    cache_counters: Optional[dict[str, int]] = Field(None, description="Inductor's cache counters during the first "
                                                     "call (`fxgraph_cache_hit` / `_miss` / `_bypass`, "
                                                     "`async_compile_cache_hit` / `_miss`, ...; zero counts left "
                                                     "out): whether the compile time was paid here or read from the "
                                                     "on-disk caches of an earlier run")
    compile_threads: Optional[int] = Field(None, ge=1, description="Inductor's compile_threads in the worker: 1 "
                                           "(kernels compiled in the worker itself, no pool of compile processes) "
                                           "unless TORCHINDUCTOR_COMPILE_THREADS says otherwise (absent before "
                                           "2026-12-01, third session)")
    inductor: Optional[dict[str, bool]] = Field(None, description="Inductor's tuning settings in the worker when it "
                                                "compiled (`coordinate_descent_tuning`, ...: torchao's configs switch "
                                                "coordinate descent on process-wide when the scheme is built), so a "
                                                "compiled row and its compiled baseline may differ here (absent before "
                                                "2026-12-06, fourth session)")


class TuningCacheInfo(_Part):
    """A library's autotune configs kept between runs (:mod:`qbench.schemes.tuning_cache`; gemlite rows)."""

    file: Optional[str] = Field(None, description="the cache file (per library and compiler version and GPU); "
                                "null when none was used")
    loaded: int = Field(ge=0, description="tuned configs the library held after reading the file before the build "
                        "(0: none, every kernel was tuned in this run)")
    saved: int = Field(ge=0, description="tuned configs written to the file after measuring")
    note: Optional[str] = Field(None, description="why nothing was read or written (`QBENCH_TUNING_CACHE=0`, an "
                                "unreadable file), else null")


class CpuLoad(_Part):
    """The CPU left for timing when a CPU row was timed (:func:`qbench.env.cpu_load`)."""

    load_avg_1min: Optional[Num] = Field(None, ge=0, description="1-minute load average")
    free_cores: Optional[Num] = Field(None, description="cores not busy with other work")
    oversubscribed: Optional[bool] = Field(None, description="torch's threads exceed the free cores")
    busy_cores_now: Optional[Num] = Field(None, ge=0, description="cores busy with other work over 0.1 s right "
                                            "after the timing, from /proc/stat (absent in files before 2026-12-01; "
                                            "null where /proc/stat cannot be read)")


class WorkerPhases(_Part):
    """Seconds inside the worker process, by phase."""

    prepare: Optional[Num] = Field(None, ge=0, description="imports and CUDA context, s")
    waited_for_go: Optional[Num] = Field(None, ge=0, description="waiting for the previous worker to exit, s")
    build: Optional[Num] = Field(None, ge=0, description="building the layer, s")
    copies: Optional[Num] = Field(None, ge=0, description="building the L weight copies for stream, s")
    measure: Optional[Num] = Field(None, ge=0, description="measuring every M, s")
    after_go: Optional[Num] = Field(None, ge=0, description="everything after go, s")
    by_method: Optional[dict[str, Num]] = Field(None, description="seconds in each timing method (its set-up, "
                                                  "warm-up, samples and GPU readings), summed over every M")


class Shard(_Part):
    """The shape of one rank's shard (tensor-parallel rows)."""

    k: Optional[int] = Field(None, gt=0, description="the shard's in_features", json_schema_extra=_always())
    n: Optional[int] = Field(None, gt=0, description="the shard's out_features", json_schema_extra=_always())
    same_as_slice: Optional[bool] = Field(None, description="the shard is the plain slice of the weight (no padding "
                                          "or regrouping)", json_schema_extra=_always())
    note: Optional[str] = Field(None, description="how the shard was cut, or `unsharded`")


def known_methods(v: dict, known: tuple[str, ...] = ()) -> dict:
    """``v`` (method -> anything) when every key is a method of ``known`` (default: the layer job's)."""
    known = known or registry.LAYER_METHODS
    unknown = [m for m in v if m not in known]
    if unknown:
        raise ValueError(f"unknown timing method {unknown[0]!r} (known: {', '.join(known)})")
    return v


OptionValue = Union[bool, int, float, str, None]


#: Why a method's latency is null (``latency_reasons.<method>.kind``):
#: ``capture-failed`` (the call could not be captured in a CUDA graph), ``not-attempted`` (a capture
#: was skipped after an earlier capture of the same scheme failed), ``host-sync`` (the call syncs
#: with the host, so it cannot be captured), ``cuda-only`` (a CUDA method on a CPU row), ``cpu-only``
#: (a CPU method on a CUDA row), ``copies``
#: (the weight copies for stream could not be built), ``error`` (the method raised), ``not-timed``
#: (the job does not time this method, e.g. tensor-parallel rows), ``other`` (an older file's sentence
#: that says none of these).
REASON_KINDS = ("capture-failed", "not-attempted", "host-sync", "cuda-only", "cpu-only", "copies", "error", "not-timed",
                "other")
ReasonKind = Literal["capture-failed", "not-attempted", "host-sync", "cuda-only", "cpu-only", "copies", "error",
                     "not-timed", "other"]

#: Coefficient of variation (stdev / mean of a method's samples) above which a reading is noisy: its
#: spread is then too wide for the median alone to rank schemes. The one noise rule of every job kind
#: (project choice): layer tables mark such a cell ``*``, :mod:`qbench.judge` names it beside a pick,
#: the model-step worker flags the row ``noisy``.
NOISY_CV = 0.25


def is_noisy_cv(cv: Optional[float]) -> bool:
    """True when the coefficient of variation ``cv`` of a reading (``Stats.cv``; None: not known)
    exceeds :data:`NOISY_CV`."""
    return cv is not None and cv > NOISY_CV

#: What can mislead a reader about an ``ok`` row (``flags[].name``), one meaning each, in the words a
#: reader of a table needs (the flag's own ``text`` has the figures). One vocabulary for every job
#: kind: a name means the same on a layer, model-step or quality row.
FLAG_MEANINGS: dict[str, str] = {
    "repacked": "the library changed the stored weight on the first call; the ledger is the timed state",
    "not-compiled": "torch.compile compiled no graph: the 'compiled' layer or step ran eagerly",
    "graph-breaks": "the compiled call has graph breaks: part of it runs eagerly between graphs",
    "throttled": "the GPU limited its clocks (power or thermal cap) right after the reading",
    "above-ceiling": "faster than the roofline of the ceilings used (a layer), or a step's attention faster than its "
                     "HBM floor: the ceiling underestimates the device, or the data was read from caches",
    "cpu-busy": "CPU threads exceed the free cores",
    "input-fault": "a NaN/Inf or all-zero weight, or activations that overflow the activation dtype when cast: the "
                   "input's fault, not the scheme's",
    "noisy": f"a reading's cv (stdev/mean) is over {NOISY_CV:.0%}: its spread is too wide for the median alone",
    "reduce-overhead-slower": "the reduce-overhead decode loop is slower than the hand-captured compiled step "
                              "beyond noise (its host work is not hidden)",
    "linear-above-step": "Σ linear exceeds the measured step: the layer view overstates this scheme's linear time",
    "attention-above-step": "the attention timed alone exceeds the measured step: one of the readings is wrong (a "
                            "busy CPU, a disturbed GPU); the step's three-way split is left out",
    "split-above-step": "Σ linear and the attention, each timed alone, add up to more than the measured step: a "
                        "part's reading is high or the parts overlap in the step; the step's rest is left out",
    "below-floor": "a step reads under its HBM floor: the timing is wrong or the bytes are miscounted",
    "extrapolated": "too few blocks fit: the step is extrapolated linearly from two block counts",
    "extrapolated-from-one": "only one block fits: the step is scaled from it, not measured at two block counts",
    "cudagraphs-skipped": "reduce-overhead skipped CUDA graphs: its loop time includes launches",
    "emulated": "no kernel of the scheme on this device: its quantized weights dequantized and run in a float matmul",
    "uncalibrated": "a calibrated scheme (GPTQ, AWQ) timed without calibration data: round-to-nearest values in its "
                    "format and kernel, whose speed depends on the shapes, not the values",
    "few-calibration-tokens": "a calibrated scheme (GPTQ, AWQ) saw fewer calibration tokens than a linear's inputs "
                              "(K): its XᵀX is rank-deficient, so its values fit only the directions those tokens "
                              "span",
    "restarted": "a tensor-parallel job's processes failed once and torchrun restarted them (--max-restarts): the "
                 "rows come from the second launch; the text quotes the first one's failure",
    "synthetic-weights": "seeded weights, not a trained model's: quality numbers say nothing of a real model",
    "prequantized-weights": "the checkpoint's weights already sit on a quantization grid: errors of schemes on that "
                            "grid are biased low",
}
FLAG_NAMES = tuple(FLAG_MEANINGS)
FlagName = Literal[FLAG_NAMES]


class Reason(_Part):
    """Why one timing method has no STATS on a row: `capture-failed` (the call could not be captured
    in a CUDA graph), `not-attempted` (a capture skipped after an earlier capture of the same scheme
    failed), `host-sync` (the call syncs with the host), `cuda-only` (a CUDA method on a CPU row),
    `cpu-only` (a CPU method on a CUDA row), `copies` (the weight copies for stream could not be
    built), `error` (the method raised), `not-timed` (the job does not time it: tensor-parallel
    rows), `other` (an older file's sentence that says none of these)."""

    kind: ReasonKind = Field(description="what kind of reason (see REASON_KINDS in qbench/row.py)",
                             json_schema_extra=_always())
    text: str = Field(description="the reason as a sentence, e.g. `CUDA graph capture failed at M=1: ...`, "
                      "`not attempted: ...`, `CUDA method; this row ran on the CPU`", json_schema_extra=_always())


class Flag(_Part):
    """One thing that could mislead a reader about an `ok` row."""

    name: FlagName = Field(description=", ".join(f"`{n}` ({meaning})" for n, meaning in FLAG_MEANINGS.items()),
                           json_schema_extra=_always())
    text: str = Field(description="what happened, one sentence (tables print `name: text` under the table)",
                      json_schema_extra=_always())

    @property
    def line(self) -> str:
        """``name: text``, the flag as tables list it."""
        return f"{self.name}: {self.text}"


def reason_record(kind: str, text: str) -> dict:
    """A ``latency_reasons`` entry as a producer writes it: ``{"kind": kind, "text": text}``.

    Raises:
        RowError: ``kind`` is not one of :data:`REASON_KINDS`.
    """
    if kind not in REASON_KINDS:
        raise RowError(f"latency_reasons: kind {kind!r} is not one of {', '.join(REASON_KINDS)}")
    return {"kind": kind, "text": text}


def flag_record(name: str, text: str) -> dict:
    """A ``flags`` entry as a producer writes it: ``{"name": name, "text": text}``.

    Raises:
        RowError: ``name`` is not one of :data:`FLAG_NAMES`.
    """
    if name not in FLAG_NAMES:
        raise RowError(f"flags: name {name!r} is not one of {', '.join(FLAG_NAMES)}")
    return {"name": name, "text": text}




# ---- the row --------------------------------------------------------------------------------------

class Row(_Part):
    """One result row: one scheme at one M (and, for tensor-parallel rows, one tp_size and split)."""

    # identity
    scheme: str = Field(min_length=1, description="row label: registry name plus variant, e.g. "
                        "`int8-weight-only+compiled`, `fp8-dynamic[kernel_preference=mslk]`",
                        json_schema_extra=_always(identity=True))
    base_scheme: Optional[str] = Field(None, description="registry name (`qbench list`)", json_schema_extra=_always())
    library: Optional[str] = Field(None, description="`torch`, `torchao`, `bitsandbytes`, `gemlite`",
                                   json_schema_extra=_always())
    mode: Optional[Literal["eager", "compiled"]] = Field(None, description="`eager` or `compiled` (torch.compile)",
                                                         json_schema_extra=_always())
    options: dict[str, OptionValue] = Field(default_factory=dict, description="the scheme's validated options "
                                            "(group_size, threshold, `kernel_preference`, ...)",
                                            json_schema_extra=_always())
    m: int = Field(gt=0, description="M, rows of X: batch x tokens", json_schema_extra=_always(identity=True))
    k: int = Field(gt=0, description="K, in_features", json_schema_extra=_always(identity=True))
    n: int = Field(gt=0, description="N, out_features", json_schema_extra=_always(identity=True))
    device: Optional[str] = Field(None, description="`cpu` or `cuda:N`", json_schema_extra=_always())
    weight_source: Optional[str] = Field(None, description="where the FP32 weight came from: `seeded Gaussian N(0, "
                                         "1/K) (synthetic, seed 0)`, `Student-t (df=3) ...`, `outlier channels: ...` "
                                         "(synthetic: its errors are not a trained layer's), `safetensors <file>:<tensor>`, "
                                         "`HF checkpoint <folder>:<tensor>`", json_schema_extra=_always())
    weight_dtype: Optional[str] = Field(None, description="storage dtype of the weight values, e.g. `int4 (in int8)`",
                                        json_schema_extra=_always())
    activation_dtype: Optional[str] = Field(None, description="dtype fed to the layer, e.g. `bfloat16`",
                                            json_schema_extra=_always())
    output_dtype: Optional[str] = Field(None, description="dtype the layer returns (null until it ran)",
                                        json_schema_extra=_always())
    compute_dtype: Optional[str] = Field(None, description="dtype whose peak bounds the math: `fp32`, `tf32`, "
                                         "`fp16`, `bf16`, `fp8`, `int8`", json_schema_extra=_always())
    status: Literal["ok", "skipped", "failed"] = Field(description="`ok`, `skipped` (cannot run here; not an error), "
                                                       "`failed` (an error; `reason` says which)",
                                                       json_schema_extra=_always())
    reason: Optional[str] = Field(None, description="one line, for skipped and failed rows (a failure: the "
                                  "exception's type, first and last line)", json_schema_extra=_always())
    # bytes
    payload_bytes: Optional[int] = Field(None, ge=0, description="bytes of the weight values as stored, counted "
                                         "from the module's tensors", json_schema_extra=_always())
    metadata_bytes: Optional[int] = Field(None, ge=0, description="bytes of scales, zero points, absmax, code "
                                          "tables, double-quantization statistics", json_schema_extra=_always())
    bias_bytes: Optional[int] = Field(None, ge=0, description="bytes of the bias, if any", json_schema_extra=_always())
    stored_bytes: Optional[int] = Field(None, ge=0, description="payload + metadata + bias, bytes",
                                        json_schema_extra=_always())
    nominal_bits: Optional[Num] = Field(None, description="the format's nominal bit width (a label, not a "
                                          "measurement)", json_schema_extra=_always())
    bits_per_weight: Optional[Num] = Field(None, ge=0, description="8 x stored_bytes / (K x N), measured",
                                             json_schema_extra=_always())
    ledger: Optional[list[LedgerPart]] = Field(None, description="the tensors counted (after the first call: "
                                               "the timed state)", json_schema_extra=_always())
    # work and roofline
    flops: Optional[int] = Field(None, ge=0, description="2 x M x K x N, FLOP", json_schema_extra=_always())
    min_bytes: Optional[int] = Field(None, ge=0, description="M x K x activation itemsize + stored_bytes + M x N x "
                                     "output itemsize, bytes", json_schema_extra=_always())
    arithmetic_intensity: Optional[Num] = Field(None, ge=0, description="flops / min_bytes, FLOP/byte",
                                                  json_schema_extra=_always())
    roofline_us: Optional[Num] = Field(None, ge=0, description="max(flops / peak(compute_dtype), min_bytes / "
                                         "bandwidth), µs", json_schema_extra=_always())
    roofline_bound: Optional[Literal["memory", "compute"]] = Field(None, description="which term of roofline_us "
                                                                   "is larger", json_schema_extra=_always())
    roofline_source: Optional[Literal["measured", "datasheet"]] = Field(None, description="the ceilings used",
                                                                        json_schema_extra=_always())
    roofline_reason: Optional[str] = Field(None, description="why roofline_us is null", json_schema_extra=_always())
    # timing
    latency_us: dict[str, Optional[Stats]] = Field(default_factory=dict, description="method -> STATS (µs per "
                                                   "call) or null, one key per method the scenario's "
                                                   "`timing.methods` lists (CPU rows: `cpu` and `stream`)",
                                                   json_schema_extra=_always())
    latency_reasons: dict[str, Reason] = Field(default_factory=dict, description="method -> why its latency is "
                                               "null: a kind and a sentence (REASON)",
                                               json_schema_extra=_always())
    launch_overhead_us: Optional[Num] = Field(None, description="eager median - kernel median, µs",
                                                json_schema_extra=_always())
    roofline_fraction: Optional[Num] = Field(None, ge=0, description="roofline_us / the achieved_method median",
                                               json_schema_extra=_always())
    achieved_gbps: Optional[Num] = Field(None, ge=0, description="min_bytes / the achieved_method median, GB/s",
                                           json_schema_extra=_always())
    achieved_tflops: Optional[Num] = Field(None, ge=0, description="flops / the achieved_method median, TFLOP/s",
                                             json_schema_extra=_always())
    achieved_method: Optional[str] = Field(None, description="the method the three fields above divide by: "
                                           "`stream` when the row has it, else `cold`", json_schema_extra=_always())
    hbm_floor_us: Optional[Num] = Field(None, ge=0, description="stored_bytes / the roofline's memory bandwidth: "
                                          "the time to read the weight once from HBM (CPU rows: from DRAM, at the measured copy bandwidth), µs",
                                          json_schema_extra=_always())
    hbm_floor_fraction: Optional[Num] = Field(None, ge=0, description="hbm_floor_us / stream median (1.0 = at "
                                                "the floor)", json_schema_extra=_always())
    # what ran
    error: Optional[ErrorMetrics] = Field(None, description="the output against the float64 reference",
                                          json_schema_extra=_always())
    dispatch: Optional[Dispatch] = Field(None, description="the GPU work of one call; null on CPU",
                                         json_schema_extra=_always())
    gpu_state: Optional[GpuState] = Field(None, description="NVML readings; null on CPU or without nvidia-ml-py",
                                          json_schema_extra=_always())
    tuning_cache: Optional[TuningCacheInfo] = Field(None, description="schemes whose library autotunes on the "
                                                    "first call (gemlite): the configs read from and saved to the "
                                                    "cache kept between runs")
    compile: Optional[CompileInfo] = Field(None, description="compiled rows: torch.compile counters",
                                           json_schema_extra=_always())
    flags: list[Flag] = Field(default_factory=list, description="what could mislead a reader about an `ok` row: "
                              "a name and a sentence each (FLAG); tables list them under the table",
                              json_schema_extra=_always())
    cpu_load: Optional[CpuLoad] = Field(None, description="CPU rows that were timed: the CPU left for timing")
    worker_wall_s: Optional[Num] = Field(None, ge=0, description="host wall time of the scheme's worker (all its "
                                           "M), seen by the runner, s (stamped when the runner records the rows)")
    worker_phases_s: Optional[WorkerPhases] = Field(None, description="seconds inside the worker, by phase")
    repeats: Optional[Repeats] = Field(None, description="`qbench run --repeat N`: the N independent runs' medians "
                                       "and their spread (:func:`qbench.lifecycle.combine_runs`)")
    # tensor parallel (rows of a scenario with a [tp] table)
    tp_size: Optional[int] = Field(None, ge=1, description="tensor-parallel: ranks the layer is sharded over",
                                   json_schema_extra={"identity": True, "tp": True})
    split: Optional[Literal["column", "row", "none"]] = Field(
        None, description="tensor-parallel: `column` (N sharded, all-gather), `row` (K sharded, all-reduce), "
        "`none` (tp_size 1)", json_schema_extra={"identity": True, "tp": True})
    collective: Optional[Literal["all_gather", "all_reduce", "none"]] = Field(
        None, description="tensor-parallel: the collective after the local GEMM", json_schema_extra={"tp": True})
    reduce_dtype: Optional[str] = Field(None, description="tensor-parallel, all_reduce rows: the dtype summed",
                                        json_schema_extra={"tp": True})
    shard: Optional[Shard] = Field(None, description="tensor-parallel: one rank's shard",
                                   json_schema_extra={"tp": True})
    local_gemm_us: Optional[Stats] = Field(None, description="tensor-parallel: the rank's own layer call, STATS µs",
                                           json_schema_extra={"tp": True})
    collective_us: Optional[Stats] = Field(None, description="tensor-parallel: the collective alone, STATS µs",
                                           json_schema_extra={"tp": True})
    end_to_end_us: Optional[Stats] = Field(None, description="tensor-parallel: the call and the collective, STATS "
                                           "µs (also latency_us.cold, or .cpu)", json_schema_extra={"tp": True})
    per_rank_median_us: Optional[dict[str, list[Optional[Num]]]] = Field(
        None, description="tensor-parallel: `local_gemm`, `collective`, `end_to_end`, `stream` -> each rank's median, µs",
        json_schema_extra={"tp": True})
    collective_bytes: Optional[int] = Field(None, ge=0, description="tensor-parallel: bus bytes of the collective",
                                            json_schema_extra={"tp": True})
    collective_data_bytes: Optional[int] = Field(None, ge=0, description="tensor-parallel: data bytes of the "
                                                 "collective", json_schema_extra={"tp": True})
    collective_busbw_gbps: Optional[Num] = Field(None, ge=0, description="tensor-parallel: bus bandwidth "
                                                   "(nccl-tests' definition), GB/s", json_schema_extra={"tp": True})
    unsharded_error: Optional[ErrorMetrics] = Field(None, description="tensor-parallel: the unsharded layer of the "
                                                    "same scheme against the float64 reference",
                                                    json_schema_extra={"tp": True})
    sharded_vs_unsharded: Optional[ErrorMetrics] = Field(None, description="tensor-parallel: the sharded output "
                                                         "against the unsharded one", json_schema_extra={"tp": True})
    stored_bytes_all_ranks: Optional[int] = Field(None, ge=0, description="tensor-parallel: stored bytes summed "
                                                  "over the ranks", json_schema_extra={"tp": True})
    speedup_vs_tp1: Optional[Num] = Field(None, gt=0, description="tensor-parallel: the tp_size 1 row's time / "
                                            "this row's (same scheme, M, K, N; > 1: sharding is faster), by "
                                            "`speedup_vs_tp1_method`; null on tp_size 1 rows and when either is "
                                            "missing", json_schema_extra={"tp": True})
    speedup_vs_tp1_method: Optional[Literal[registry.COMPARISON_ORDER]] = Field(
        None, description="tensor-parallel: the time `speedup_vs_tp1` compares: `stream` when both rows have it, "
        "else the end-to-end time (`cold` on CUDA, `cpu` on the CPU)", json_schema_extra={"tp": True})
    cpu_threads_per_rank: Optional[int] = Field(None, ge=1, description="tensor-parallel CPU rows: intra-op "
                                                "threads of each rank", json_schema_extra={"tp": True})

    @model_validator(mode="before")
    @classmethod
    def _tp_fields_together(cls, data: Any, info) -> Any:
        if (info.context or {}).get("writing") and isinstance(data, dict) and "tp_size" in data:
            missing = [f for f in TP_ROW_FIELDS if f not in data]
            if missing:
                raise ValueError(f"{missing[0]}: missing (every tensor-parallel row carries all of "
                                 f"{', '.join(TP_ROW_FIELDS)})")
        return data

    @field_validator("latency_us", "latency_reasons")
    @classmethod
    def _methods(cls, v: dict) -> dict:
        return known_methods(v)

    @model_validator(mode="after")
    def _method_extras(self) -> "Row":
        check_extras(self.latency_us)
        return self


    # ---- producing ----------------------------------------------------------------------------

    @classmethod
    def preset(cls, **fields: Any) -> dict:
        """A new row as a producer starts it: every field the producer always writes at its empty
        value (null, ``{}`` or ``[]``; ``status`` ``"ok"``), in the model's order, then ``fields``
        (the identity, dtypes, options, FLOPs, ...) over them. Returns the dict the producer fills,
        checked with the producer's rules.

        Raises:
            RowError: a key of ``fields`` that is no field of the row, or a value of the wrong type.
        """
        row: dict[str, Any] = {}
        for name, f in cls.model_fields.items():
            if (f.json_schema_extra or {}).get("always"):
                row[name] = f.default_factory() if f.default_factory is not None else None
        row["status"] = "ok"
        row.update(fields)
        return check_row(row, writing=True)

    # ---- reading ------------------------------------------------------------------------------

    @property
    def key(self) -> tuple:
        """The row's identity in its file: the values of :data:`IDENTITY` (scheme, M, K, N, tp_size,
        split; None where absent)."""
        return tuple(getattr(self, f) for f in IDENTITY)

    @property
    def shape(self) -> tuple:
        """Where the row sits in a sweep, whatever the scheme: (M, K, N, tp_size, split). Two rows of
        one file with the same shape are two schemes measured on the same problem."""
        return self.m, self.k, self.n, self.tp_size, self.split

    def stats(self, method: str) -> Optional[Stats]:
        """The STATS (µs) of ``method`` when the row is ``ok`` and has a median there, else ``None``
        (skipped, failed, or not timed by that method)."""
        if self.status != "ok":
            return None
        got = self.latency_us.get(method)
        return got if got is not None and got.median is not None else None

    def reason_for(self, method: str) -> Optional[Reason]:
        """Why ``method`` has no STATS on this row (``latency_reasons[method]``), or ``None``. (The
        field ``reason`` is why a skipped or failed row has no reading at all.)"""
        return self.latency_reasons.get(method)

    @property
    def flag_names(self) -> list[str]:
        """The names of the row's flags, each once, in the order the row lists them."""
        return list(dict.fromkeys(f.name for f in self.flags))

    @property
    def rel_fro(self) -> Optional[float]:
        """``error.rel_fro`` (relative Frobenius error), or ``None`` when not measured."""
        return self.error.rel_fro if self.error is not None else None

    def has(self, name: str) -> bool:
        """Whether the row's JSON carries the top-level field ``name`` at all (even as null): files
        written before a field existed lack it (:data:`ADDED_SINCE`)."""
        return name in self.model_fields_set


#: The fields only tensor-parallel rows carry, in the model's order (all of them on every such row).
TP_ROW_FIELDS: tuple[str, ...] = tuple(name for name, f in Row.model_fields.items()
                                       if (f.json_schema_extra or {}).get("tp"))


# ---- checking -------------------------------------------------------------------------------------

def validate_row(row: Any, *, writing: bool = False) -> Row:
    """Check ``row`` (a dict) against :class:`Row` and return the model.

    Args:
        row: the row as a dict (JSON types).
        writing: the producer's check: every *always* field present, no legacy field (see the
            module docstring); reading only checks keys and types.

    Raises:
        RowError: one line: ``<key path>: <what is wrong> (got <value>)``.
    """
    if not isinstance(row, dict):
        raise RowError(f"a row is an object, got {type(row).__name__}")
    try:
        return Row.model_validate(row, context={"writing": writing})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        got = "missing" if err["type"] == "missing" else f"got {err.get('input')!r}"
        msg = err["msg"].removeprefix("Value error, ")
        text = f"{loc}: {msg} ({got})" if loc else msg
        raise RowError(text[:400]) from None


def check_row(row: dict, *, writing: bool = False) -> dict:
    """:func:`validate_row`, returning ``row`` itself (unchanged) so a producer or a test can write
    ``rows.append(check_row({...}))``."""
    validate_row(row, writing=writing)
    return row


def row_key(row: dict) -> tuple:
    """The identity of a row in its file: the values of :data:`IDENTITY` (None where absent)."""
    return tuple(row.get(f) for f in IDENTITY)


# ---- introspection --------------------------------------------------------------------------------

def _models_in(annotation: Any) -> list[tuple[str, type]]:
    """(suffix, model) pairs inside a field annotation: ``""`` for a model field, ``".*"`` for a
    dict of models, ``"[]"`` for a list of models."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if origin in (Union, types.UnionType):
        return [pair for a in args for pair in _models_in(a)]
    if origin is dict:
        return [(".*" + s, m) for s, m in _models_in(args[1])]
    if origin is list:
        return [("[]" + s, m) for s, m in _models_in(args[0])]
    return []


def _is_mapping(annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return any(_is_mapping(a) for a in args)
    return origin is dict


def field_paths(model: type[BaseModel] = Row, prefix: str = "") -> frozenset[str]:
    """Every dotted key path a row can carry: ``scheme``, ``latency_us``, ``latency_us.*``,
    ``latency_us.*.median``, ``dispatch.kernels[].name``, ... (``*``: a key named by data, such
    as a method; ``[]``: the elements of a list)."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        out.add(path)
        if _is_mapping(f.annotation):
            out.add(path + ".*")
        for suffix, sub in _models_in(f.annotation):
            out |= field_paths(sub, f"{path}{suffix}.")
    return frozenset(out)


def _type_text(annotation: Any) -> str:
    if typing.get_origin(annotation) is Annotated:  # Num: a float
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        parts = [a for a in args if a is not type(None)]
        if annotation == OptionValue:
            return "bool, int, float, str or null"
        text = " or ".join(_type_text(a) for a in parts)
        return f"{text} or null" if type(None) in args else text
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is dict:
        return f"{{str: {_type_text(args[1])}}}"
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "STATS" if annotation is Stats else annotation.__name__
    return {int: "int", float: "float", str: "str", bool: "bool"}.get(annotation, str(annotation))


def _table(model: type[BaseModel], prefix: str = "") -> list[str]:
    lines = ["| field | type | written | meaning |", "|---|---|---|---|"]
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra or {}
        path = f"{prefix}{name}"
        if extra.get("legacy"):
            written = "never (legacy)"
        elif extra.get("tp"):
            written = "tensor-parallel rows"
        elif extra.get("always"):
            written = "always"
        else:
            written = "when known"
        since = ADDED_SINCE.get(path)
        meaning = (f.description or "").replace("|", "\\|")
        if extra.get("identity"):
            meaning += "; part of the row identity"
        if since:
            meaning += f"; absent in files written before {since}"
        lines.append(f"| `{name}` | {_type_text(f.annotation)} | {written} | {meaning} |")
    return lines


#: The parts of a row, in the order the schema shows them: (model, the key paths where it appears).
_PARTS: tuple[tuple[type[BaseModel], str], ...] = (
    (Stats, "latency_us.<method>, local_gemm_us, collective_us, end_to_end_us"),
    (Reason, "latency_reasons.<method>"),
    (Flag, "flags[]"),
    (ErrorMetrics, "error, unsharded_error, sharded_vs_unsharded"),
    (LedgerPart, "ledger[]"),
    (Dispatch, "dispatch"),
    (Kernel, "dispatch.kernels[]"),
    (GpuState, "gpu_state"),
    (GpuReading, "gpu_state.before, gpu_state.after, gpu_state.by_method.<method>"),
    (CompileInfo, "compile"),
    (TuningCacheInfo, "tuning_cache"),
    (CpuLoad, "cpu_load"),
    (WorkerPhases, "worker_phases_s"),
    (Repeats, "repeats"),
    (Shard, "shard"),
)


def schema_markdown() -> str:
    """The ROW tables of ``docs/results-schema.md``: :class:`Row` and each of its parts, one
    Markdown table each (field, type, when it is written, meaning with units)."""
    prefixes = {ErrorMetrics: "error.", CompileInfo: "compile."}
    out = ["### ROW", "", *_table(Row)]
    for model, where in _PARTS:
        name = "STATS" if model is Stats else model.__name__
        out += ["", f"### {name}", "", f"At `{where}`. {model.__doc__.strip()}", "",
                *_table(model, prefixes.get(model, ""))]
    out += ["", "Legacy fields (read, never written):", ""]
    out += [f"- `{path}`: {why}" for path, why in LEGACY.items()]
    return "\n".join(out)


# ---- what every job kind's producer writes into its rows: a reason from an exception, a failed row --

def first_and_last_line(text: str) -> str:
    """The first and the last non-blank line of ``text`` joined by " … " (one line when there is
    one; "" when there is none)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " … ".join([lines[0], lines[-1]] if len(lines) > 1 else lines)


def describe_exception(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line … last line`` of an exception's message, at most ``limit`` characters.

    Libraries often end a message with a pointer ("See https://...opcheck") and put the assertion on
    the first line; a row keeps both.
    """
    message = first_and_last_line(str(exc))
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failed_rows(rows: list[dict], status: str, reason: str) -> list[dict]:
    """Mark every row of ``rows`` (row dicts of any job kind) ``status`` (``skipped`` or ``failed``)
    with ``reason`` (one line: its first and last line, at most 400 characters); returns ``rows``."""
    text = first_and_last_line(reason) or status
    for row in rows:
        row["status"], row["reason"] = status, text[:400]
    return rows


def dtype_name(dtype: Any) -> str:
    """A torch dtype as rows name it: ``torch.bfloat16`` -> ``"bfloat16"`` (torch-free: its ``str``)."""
    return str(dtype).removeprefix("torch.")
