"""Measure one scheme at every M of a scenario, in the current process.

Called by :mod:`qbench.worker` (one worker process per scheme, so a crash, a CUDA error or a
broken CUDA graph capture only fails that scheme's rows). For each M: build inputs, run once and
compare with the float64 reference, then time with the planned methods
(:func:`qbench.timing.registry.plan`: the scenario's ``timing.methods`` that run on the device, and
those every row of the device has). Methods of the graph phase run last, after every plain method
at every M, because a failed capture can leave the process's CUDA state (its RNG among it)
broken; after one failed capture no other is attempted. This module names no method: what a
method needs (copies, an L2 flusher, the host-sync probe, a CPU-load sample) is in its ``needs``.

A method that needs copies gets L distinct copies of the built layer (:func:`make_copies`): deep
copies of the module, or the scheme built again from the same FP32 weight when a deep copy shares
storage.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from qbench import compile_info, formulas, inputs, metrics
from qbench.row import (Row, check_row, describe_exception, dtype_name, failed_rows, first_and_last_line,  # noqa: F401
                        flag_record, reason_record)  # (describe_exception, first_and_last_line, failed_rows re-exported)
from qbench.layer.weight import weight_source
from qbench.scenario import Scenario, SchemeEntry
from qbench.schemes import ledger, tuning_cache
from qbench.schemes.base import Scheme
from qbench.timing import registry
from qbench.timing._cuda import GraphCaptureError, syncs_host
from qbench.timing.method import Call, TimingMethod


def base_row(scenario: Scenario, entry: SchemeEntry, scheme: Scheme, m: int, device: torch.device) -> dict:
    """The row's identity fields and every measured field preset to null (:meth:`qbench.row.Row.preset`,
    checked with the producer's rules: every field a row always carries)."""
    k, n = scenario.layer.in_features, scenario.layer.out_features
    return Row.preset(
        scheme=entry.label, base_scheme=scheme.name, library=scheme.library, mode=entry.options.mode,
        options=entry.options.model_dump(exclude={"label", "mode"}), m=m, k=k, n=n, device=str(device),
        weight_dtype=scheme.weight_dtype, activation_dtype=dtype_name(scheme.activation_dtype),
        compute_dtype=scheme.compute_dtype, nominal_bits=scheme.nominal_bits, flops=formulas.flops(m, k, n),
        weight_source=weight_source(scenario))


def blank_rows(scenario: Scenario, entry: SchemeEntry, scheme: Scheme, device: torch.device) -> list[dict]:
    """One layer row per M of the scenario, identity filled, nothing measured (:func:`base_row`)."""
    return [base_row(scenario, entry, scheme, m, device) for m in scenario.m]


def unavailable_reason(scheme: Scheme, entry: SchemeEntry, device: torch.device) -> Optional[str]:
    """Why ``entry`` (a scheme entry of ``scheme``) cannot run on ``device`` at all, or None: the
    scheme's own reason (:meth:`qbench.schemes.base.Scheme.unavailable_reason`: a missing package, a
    CUDA-only kernel), or a compiled entry on the CPU without a C++ compiler. Imports no scheme
    package and touches no device, so the runner asks it too before it starts a CPU worker."""
    return (scheme.unavailable_reason(device, entry.options)
            or compile_info.cpu_compile_reason(entry.options.mode, device.type))


def import_ahead(scheme, entry, device, ms=()) -> list[str]:
    """Import what measuring ``entry`` at the M values ``ms`` will import, before the go (the worker
    calls it while it prepares: hidden behind the measuring worker when it runs ahead); returns the
    modules imported.

    The scheme's packages, only where it can run: a skipped scheme's package may not even import
    here (gemlite reads the CUDA device's properties at import), and measure_scheme gives its
    skipped rows without it; nothing when every M is skipped (``Scheme.m_check``: compiled
    w8a8-dynamic at M = 1 on CUDA). For a compiled scheme, Inductor: ``torch.compile()`` imports
    ``torch._inductor.compile_fx`` (and Triton) when called, about 2 s on the H200 host that a
    compiled scheme paid after its go (``docs/speed.md``).
    """
    import importlib
    import importlib.util

    if scheme.unavailable_reason(device, entry.options) is not None:
        return []
    if ms and all(scheme.m_reason(m, device, entry.options) for m in ms):
        return []
    names = [p for p in scheme.packages if importlib.util.find_spec(p) is not None]
    if entry.options.mode == "compiled":
        compile_info.single_compile_thread()
        names.append("torch._inductor.compile_fx")
    for name in names:
        importlib.import_module(name)
    return names


def checked(rows: list[dict]) -> list[dict]:
    """``rows``, each checked against :class:`qbench.row.Row` with the producer's rules (no unknown
    key, every value of its field's type, every always-written field present, no legacy field).

    Raises:
        qbench.row.RowError: a row that does not fit (a bug in the producer: the worker fails loudly
            instead of writing a row that readers would misread).
    """
    for row in rows:
        check_row(row, writing=True)
    return rows


def measure_scheme(scenario: Scenario, entry_index: int, device: torch.device,
                   ceilings: Optional[dict] = None, shared_dir: Optional[str] = None) -> list[dict]:
    """Rows (one per M) for ``scenario.schemes[entry_index]`` on ``device``.

    Never raises for a scheme's own failure: an unavailable scheme gives ``skipped`` rows, an
    exception while building or running gives ``failed`` rows with the exception's last line.
    Every row is checked against :class:`qbench.row.Row` before it is returned (:func:`checked`).
    """
    entry = scenario.schemes[entry_index]
    scheme = entry.scheme
    rows = [base_row(scenario, entry, scheme, m, device) for m in scenario.m]
    reason = unavailable_reason(scheme, entry, device)
    if reason:
        return checked(failed_rows(rows, "skipped", reason))
    for row in rows:  # a kernel that cannot take this M: that row is skipped, the others run
        m_reason = scheme.m_reason(row["m"], device, entry.options)
        if m_reason:
            failed_rows([row], "skipped", m_reason)
    if all(row["status"] == "skipped" for row in rows):
        return checked(rows)
    torch.manual_seed(scenario.seed)
    t0 = time.perf_counter()
    tuning = tuning_cache.Session(scheme.tuning_cache, device)
    try:
        tuning.open()
        weight, bias = inputs.make_weight(scenario, device)
        module = scheme.build(weight, bias, entry.options)
        book = ledger.count(scheme.parts(module))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # the scheme could not be built here: a failed row, the run goes on
        return checked(failed_rows(rows, "failed", f"build: {describe_exception(exc)}"))
    built = time.perf_counter()
    plan = registry.plan(scenario.timing.methods, device.type)
    copies, copies_why = None, None
    wants_copies = [m.name for m in plan if m.needs.copies]
    if wants_copies:
        try:
            copies = make_copies(module, scheme, weight, bias, entry, book.stored_bytes, device)
        except Exception as exc:  # no copies for this scheme; every other method still runs
            copies_why = f"copies for {wants_copies[0]}: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    copied = time.perf_counter()
    with torch.inference_mode():
        runner = _Runner(scenario, entry, scheme, module, weight, bias, book, device, plan)
        runner.copies, runner.copies_why = copies, copies_why
        for row in rows:
            if row["status"] == "ok":
                runner.measure(row)
        runner.measure_graphs(rows)
    measured = time.perf_counter()
    record = tuning.close()
    for row in rows:
        finish_row(row, ceilings)
        row["worker_phases_s"] = {"build": built - t0, "copies": copied - built,
                                  "measure": measured - copied, "by_method": dict(runner.spent)}
        if record is not None:
            row["tuning_cache"] = dict(record)
    return checked(rows)


class Copies:
    """The L distinct copies of one built layer that a method needing copies (``stream``) calls in order.

    Attributes:
        modules: the eager modules, the original first (L of them).
        plan: the :class:`~qbench.timing.stream.StreamPlan` (copy count and what it covers).
        how: ``"deepcopy"`` or ``"rebuilt"`` (the scheme built again from the FP32 weight).
    """

    def __init__(self, modules: list, plan, how: str) -> None:
        self.modules, self.plan, self.how = modules, plan, how


def _storage_ptrs(scheme: Scheme, module: torch.nn.Module) -> set[int]:
    return {part.tensor.untyped_storage().data_ptr() for part in scheme.parts(module)}


def make_copies(module: torch.nn.Module, scheme: Scheme, weight: torch.Tensor, bias: Optional[torch.Tensor],
                entry: SchemeEntry, stored_bytes: int, device: torch.device) -> Copies:
    """L distinct copies of ``module`` (:func:`qbench.timing.stream.plan_copies`).

    L x stored_bytes >= 4 x the cache (L2 on CUDA, the CPU's last-level cache), at least 4, at
    most half the free memory. Each copy is ``copy.deepcopy(module)``; when that raises or the copy
    shares a storage with the original (the ledger's parts), the scheme is built again from the
    same FP32 ``weight`` (identical quantized values, new storage).

    Raises:
        StreamPlanError: fewer than 4 copies fit in memory (the reason goes on the rows).
        RuntimeError: no cache size is readable, or a rebuilt copy still shares storage.
    """
    import copy

    from qbench.memory import free_bytes
    from qbench.timing import stream

    if device.type == "cuda":
        cache = int(torch.cuda.get_device_properties(device).L2_cache_size)
    else:
        cache = stream.last_level_cache_bytes()
    if not cache:
        raise RuntimeError(f"no cache size readable for {device}")
    plan = stream.plan_copies(stored_bytes, cache, free_bytes(device))
    original = _storage_ptrs(scheme, module)
    modules, how = [module], "deepcopy"
    for _ in range(plan.copies - 1):
        dup = None
        if how == "deepcopy":
            try:
                dup = copy.deepcopy(module)
                if _storage_ptrs(scheme, dup) & original:
                    dup, how = None, "rebuilt"
            except Exception:  # a tensor subclass without deepcopy support: build again
                dup, how = None, "rebuilt"
        if dup is None:
            dup = scheme.build(weight, bias, entry.options)
            if _storage_ptrs(scheme, dup) & original:
                raise RuntimeError("a rebuilt copy shares storage with the original layer")
        modules.append(dup)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return Copies(modules, plan, how)


class _Runner:
    """Times one built scheme with the planned methods: :meth:`measure` per row (the first call, the
    error metrics, the plain phase), then :meth:`measure_graphs` over every row (the graph phase).
    Every method goes through :meth:`_run`, the one path that writes a reading or a reason."""

    def __init__(self, scenario, entry, scheme, module, weight, bias, book, device, plan: list[TimingMethod]):
        self.scenario, self.entry, self.scheme = scenario, entry, scheme
        self.weight, self.bias, self.book, self.device = weight, bias, book, device
        self.module = module
        self.compiled = entry.options.mode == "compiled"
        if self.compiled:
            compile_info.allow_recompiles(max(8, len(scenario.m) + 2))  # one static-shape graph per M
            compile_info.single_compile_thread()  # done already where the worker imported Inductor ahead of its go
            compile_info.tune_like_torchao()  # bf16+compiled is compiled as the torchao schemes are
            self.module = torch.compile(module, dynamic=False)
        self.eager_module = module
        self.weight_faults = inputs.input_faults(weight)  # NaN/Inf or all-zero weight: flagged on every row
        self.graphs_total = 0
        self._repacked: Optional[str] = None
        self.settings = scenario.timing  # a TimingSettings (scenario.TimingSpec extends it)
        kind = device.type
        self.plain = [m for m in plan if m.phase_on(kind) == "plain"]
        self.graph = [m for m in plan if m.phase_on(kind) == "graph"]
        planned = {m.name for m in plan}
        self.absent = [registry.METHODS[n] for n in scenario.timing.methods if n not in planned]
        self.inputs: dict[int, torch.Tensor] = {}
        self.flusher = None
        self.copies: Optional[Copies] = None
        self.copies_why: Optional[str] = None
        self._copy_modules: Optional[list] = None
        self.spent: dict[str, float] = {}  # seconds per timing method, summed over M (worker_phases_s.by_method)

    def _fn(self, x: torch.Tensor) -> Callable[[], Any]:
        module = self.module
        return lambda: module(x)

    def measure(self, row: dict) -> None:
        """The first call (output dtype, error metrics, the ledger as timed, compile counters), then
        the plain phase; a method that does not run on this device gets its reason."""
        m, k, n = row["m"], row["k"], row["n"]
        try:
            x32 = inputs.make_activations(self.scenario, m, self.device)
            y_ref = inputs.reference(x32, self.weight, self.bias)
            x = x32.to(self.scheme.activation_dtype)
            self.inputs[m] = x
            row["flags"].extend(flag_record("input-fault", f.removeprefix("input-fault: "))
                                for f in self.weight_faults + inputs.input_faults(None, x32, x))  # the input's faults, not the scheme's
            graphs_before = compile_info.graph_count()
            breaks_before, caches_before = compile_info.graph_break_count(), compile_info.cache_counters()
            t0 = time.perf_counter()
            y = self.module(x)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            first_call_s = time.perf_counter() - t0
            self._recount_ledger(row)
            row["output_dtype"] = dtype_name(y.dtype)
            row["error"] = metrics.error_metrics(y, y_ref)
            row["error"].update(_input_stats(self.scenario, self.scheme, self.entry, x32))
            del y, y_ref
            if self.compiled:
                graphs = compile_info.graph_count() - graphs_before
                self.graphs_total += graphs
                caches = {key: n - caches_before.get(key, 0) for key, n in compile_info.cache_counters().items()}
                row["compile"] = {"first_call_s": first_call_s, "graphs_compiled": graphs,
                                  "graph_breaks": compile_info.graph_break_count() - breaks_before,
                                  "cache_counters": {key: n for key, n in caches.items() if n},
                                  "compile_threads": compile_info.compile_threads(),
                                  "inductor": compile_info.inductor_settings()}
                if self.graphs_total == 0:
                    row["flags"].append(flag_record("not-compiled", "torch.compile compiled no graph for this scheme; "
                                                             "the call ran eagerly"))
                if row["compile"]["graph_breaks"]:
                    row["flags"].append(flag_record("graph-breaks", f"{row['compile']['graph_breaks']} graph break(s) "
                                                             "in the compiled call (parts of it ran eagerly)"))
        except Exception as exc:
            failed_rows([row], "failed", f"run: {describe_exception(exc)}")
            return
        act, out = x.element_size(), torch.empty((), dtype=_dtype(row["output_dtype"])).element_size()
        row["min_bytes"] = formulas.min_bytes(m, k, n, weight_bytes=self.book.stored_bytes, act_itemsize=act, out_itemsize=out)
        row["arithmetic_intensity"] = formulas.arithmetic_intensity(row["flops"], row["min_bytes"])
        graphs_before_timing = compile_info.graph_count()
        gpu = _gpu_state_module() if self.device.type == "cuda" else None
        index = self.device.index or 0
        before = gpu.read_gpu_state(index) if gpu else None
        for method in self.plain:
            self._run(row, method, x, graph=False)
        for method in self.absent:
            row["latency_us"][method.name] = None
            row["latency_reasons"][method.name] = reason_record(
                "cuda-only" if self.device.type != "cuda" else "cpu-only", method.unavailable(self.device.type))
        after = gpu.read_gpu_state(index) if gpu else None
        if before is not None or after is not None:
            row["gpu_state"] = {**(row.get("gpu_state") or {}), "before": before, "after": after,
                                "clock_dropped": bool(before and after and gpu.clock_dropped(before, after))}
        if self.compiled:
            row["compile"]["recompilations_during_timing"] = compile_info.graph_count() - graphs_before_timing

    def measure_graphs(self, rows: list[dict]) -> None:
        """The graph phase, last: its methods in order at every M of the ok rows. The first failed
        capture (or error) ends all capturing in this process; later ones say "not attempted"."""
        if not self.graph:
            return
        failure = None
        for row in rows:
            if row["status"] != "ok":
                continue
            x = self.inputs[row["m"]]
            for method in self.graph:
                if failure is not None:
                    row["latency_us"][method.name] = None
                    row["latency_reasons"][method.name] = reason_record("not-attempted", f"not attempted: {failure}")
                    continue
                failure = self._run(row, method, x, graph=True)
            if row["dispatch"] is not None:
                row["dispatch"]["graph_capturable"] = failure is None

    def _run(self, row: dict, method: TimingMethod, x: torch.Tensor, graph: bool) -> Optional[str]:
        """Run ``method`` on this row's input: its reading (and dispatch record) or its reason under
        ``latency_us`` / ``latency_reasons``, then the GPU reading (not after a failed graph
        method), the seconds spent, and the CPU-load sample where ``needs`` asks. Returns the
        failure that ends the graph phase (graph methods only), else None."""
        name, failure = method.name, None
        t0 = time.perf_counter()
        kind = "copies" if method.needs.copies else "error"  # what a failure before the method runs is
        try:
            call = self._call(method, x)
            if isinstance(call, str):  # a need that cannot be met: the method's reason, not a failure
                row["latency_us"][name], row["latency_reasons"][name] = None, reason_record("copies", call)
            else:
                kind = "error"
                reading = method.run(call, self.settings)
                row["latency_us"][name] = reading.record
                if reading.dispatch is not None:
                    from qbench.dispatch import classify_dispatch

                    label = classify_dispatch([k["name"] for k in reading.dispatch["kernels"]], self.scheme.family)
                    row["dispatch"] = {"label": label, **reading.dispatch}
        except GraphCaptureError as exc:
            failure = f"CUDA graph capture failed at M={row['m']}: {exc}"
            row["latency_us"][name], row["latency_reasons"][name] = None, reason_record("capture-failed", failure)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            why = (f"M={row['m']}: {text}" if graph else f"{method.error_prefix}{text}").splitlines()[0][:300]
            failure = why if graph else None
            row["latency_us"][name], row["latency_reasons"][name] = None, reason_record(kind, why)
        if not (graph and failure):
            self._reading(row, name)
        self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0
        if method.needs.cpu_load:
            self._cpu_load_flag(row)
        return failure

    def _call(self, method: TimingMethod, x: torch.Tensor) -> Call | str:
        """The :class:`~qbench.timing.method.Call` for ``method`` on input ``x``, with what its
        ``needs`` asks for (the flusher and the host-sync probe on CUDA only); or the reason it
        cannot have it (no copies were built)."""
        needs, cuda = method.needs, self.device.type == "cuda"
        calls = None
        if needs.copies:
            if self.copies is None:
                return self.copies_why or "no copies were built"
            calls = self._calls(x)
        if cuda and needs.flusher and self.flusher is None:
            from qbench.timing.flush import L2Flusher

            self.flusher = L2Flusher(self.device, self.settings.flush_multiple)
        fn = self._fn(x)
        return Call(fn=fn, device=self.device, calls=calls, copies=self.copies if needs.copies else None,
                    stored_bytes=self.book.stored_bytes, flusher=self.flusher if cuda and needs.flusher else None,
                    host_sync=bool(cuda and needs.host_sync and syncs_host(fn)),
                    graphs=compile_info.graph_count if self.compiled else None)

    def _cpu_load_flag(self, row: dict) -> None:
        """``cpu-busy`` when other work leaves fewer free cores than torch's threads
        (:func:`qbench.env.cpu_load`): the cores busy over 0.1 s right after the method, while this
        worker sleeps (``/proc/stat``), or, where that cannot be read, the 1-minute load average
        minus this worker's threads. The CPU times shared cores with other work."""
        from qbench.env import cpu_busy

        row["cpu_load"], text = cpu_busy(torch.get_num_threads())
        if text:
            row["flags"].append(flag_record("cpu-busy", text))

    def _reading(self, row: dict, method: str) -> None:
        gpu = _gpu_state_module()
        if gpu is not None:
            gpu.record_reading(row, method, self.device)

    def _recount_ledger(self, row: dict) -> None:
        """Count the ledger again after the first call: the timed state. A library that repacks its
        weight on the first call (bitsandbytes' 4-bit layer on the CPU: absmax to bf16, double
        quantization undone) changes the bytes; the row then carries the new ledger and a flag."""
        k, n = row["k"], row["n"]
        now = ledger.count(self.scheme.parts(self.eager_module))
        if now.stored_bytes != self.book.stored_bytes:
            row["flags"].append(flag_record("repacked", f"the weight changed on the first call ({self.book.stored_bytes} -> "
                                                 f"{now.stored_bytes} stored bytes); the ledger is the timed, repacked "
                                                 "state"))
            self.book = now
        elif self._repacked:
            row["flags"].append(self._repacked)
        if row["flags"] and row["flags"][-1]["name"] == "repacked":
            self._repacked = row["flags"][-1]
        row.update(self.book.fields(k, n))

    def _calls(self, x: torch.Tensor) -> list:
        """One zero-argument call per copy on input ``x``; compiled schemes compile every copy with
        the same options (Dynamo reuses the compiled code: recompilations are recorded)."""
        if self._copy_modules is None:
            mods = self.copies.modules
            if self.compiled:
                mods = [self.module] + [torch.compile(mod, dynamic=False) for mod in mods[1:]]
            self._copy_modules = mods
        return [(lambda mod=mod: mod(x)) for mod in self._copy_modules]


def finish_row(row: dict, ceilings: Optional[dict]) -> None:
    """Derived fields: roofline (measured ceilings first, datasheet second), the HBM floor, launch
    overhead, and the roofline fraction and attained GB/s and TFLOP/s.

    ``hbm_floor_us`` = stored bytes / memory bandwidth (the same ceiling as the roofline): no call
    that reads its weight from HBM can be faster. ``hbm_floor_fraction`` = hbm_floor_us / stream
    median (1.0 = at the floor). ``roofline_fraction``, ``achieved_gbps`` and ``achieved_tflops``
    use the ``stream`` median when the row has one, else ``cold`` (``achieved_method`` says which).
    """
    if row["status"] != "ok" or row["min_bytes"] is None:
        return
    peak, bandwidth, source, why = _ceiling(ceilings, row["compute_dtype"], row["device"])
    if peak and bandwidth:
        roof = formulas.roofline(row["flops"], row["min_bytes"], peak_tflops=peak, bandwidth_gbps=bandwidth)
        row.update(roofline_us=roof.time_us, roofline_bound=roof.bound, roofline_source=source)
        if row.get("stored_bytes"):
            row["hbm_floor_us"] = formulas.hbm_floor_us(row["stored_bytes"], bandwidth)
    else:
        row["roofline_reason"] = why
    lat = row["latency_us"]

    def median(method: str) -> Optional[float]:
        return (lat.get(method) or {}).get("median")

    host, kernels = (median(method) for method in registry.LAUNCH_OVERHEAD)
    if host is not None and kernels is not None:
        row["launch_overhead_us"] = host - kernels
    decision = median(registry.DECISION_METHOD)
    if decision and row["hbm_floor_us"] is not None:
        row["hbm_floor_fraction"] = row["hbm_floor_us"] / decision
    method = registry.DECISION_METHOD if decision else registry.FALLBACK_METHODS[0]
    time_us = median(method)
    if time_us:
        if row["roofline_us"] is not None:
            row["roofline_fraction"] = row["roofline_us"] / time_us
            if row["roofline_fraction"] > 1.0:
                row.setdefault("flags", []).append(flag_record(
                    "above-ceiling", f"{method} {time_us:.3g} µs is faster than the {row['roofline_source']} roofline "
                    f"allows ({row['roofline_us']:.3g} µs): that ceiling underestimates this device, so roofline % "
                    "overstates how close the row is to the hardware"))
        row["achieved_gbps"], row["achieved_tflops"] = formulas.achieved(row["flops"], row["min_bytes"], time_us)
        row["achieved_method"] = method


def _ceiling(ceilings: Optional[dict], dtype: str, device: str) -> tuple[Optional[float], Optional[float], Optional[str], str]:
    if device == "cpu" and (ceilings or {}).get("device") != "cpu":  # a GPU's ceilings never bound a CPU row
        return None, None, None, "no CPU ceilings measured (a file from before 2026-12-01)"
    if not ceilings:
        return None, None, None, "no ceilings for this GPU (not in the datasheet table, not measured)"
    for source in ("measured", "datasheet"):
        table = ceilings.get(source) or {}
        peak = (table.get("tflops") or {}).get(dtype)
        bandwidth = table.get("memory_gbps")
        if peak and bandwidth:
            return peak, bandwidth, source, ""
    return None, None, None, f"no {dtype} peak measured or in the datasheet table"


def _input_stats(scenario: Scenario, scheme: Scheme, entry: SchemeEntry, x32: torch.Tensor) -> dict:
    extra = {}
    if scheme.compute_dtype == "fp8":
        # Activations cast to e4m3 (dynamic schemes only; weight-only rows keep bf16 activations).
        # The dynamic per-row/per-tensor scale maps them into range, so nothing is clamped: this
        # counts the elements a static (calibrated) scale of 1 would have clamped at 448.
        extra["activations_over_fp8_max"] = inputs.count_over(x32, inputs.FP8_E4M3_MAX)
    threshold = getattr(entry.options, "threshold", None)
    if threshold is not None:
        extra["outlier_columns"] = inputs.count_outlier_columns(x32.to(scheme.activation_dtype).float(), threshold)
    return extra


def _gpu_state_module():
    try:
        import qbench.gpu_state as gpu_state
    except ImportError:
        return None
    return gpu_state


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)

