"""Measure one scheme at every M of a scenario, in the current process.

Called by :mod:`qbench.worker` (one worker process per scheme, so a crash, a CUDA error or a
broken CUDA graph capture only fails that scheme's rows). For each M: build inputs, run once and
compare with the float64 reference, then time with every method the device allows. On CUDA the
CUDA-graph method (``warm``) runs last, after every other method at every M, because a failed
capture can leave the process's CUDA state (its RNG among it) broken.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from qbench import formulas, inputs, ledger, metrics
from qbench.scenario import Scenario, SchemeEntry
from qbench.schemes import get as get_scheme
from qbench.schemes.base import Scheme

DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def base_row(scenario: Scenario, entry: SchemeEntry, scheme: Scheme, m: int, device: torch.device) -> dict:
    """The row's identity fields and every measured field preset to null."""
    k, n = scenario.layer.in_features, scenario.layer.out_features
    return {
        "scheme": entry.label, "base_scheme": scheme.name, "library": scheme.library,
        "mode": entry.options.mode, "options": entry.options.model_dump(exclude={"label", "mode"}),
        "m": m, "k": k, "n": n, "device": str(device),
        "weight_dtype": scheme.weight_dtype, "activation_dtype": dtype_name(scheme.activation_dtype),
        "output_dtype": None, "compute_dtype": scheme.compute_dtype,
        "status": "ok", "reason": None,
        "payload_bytes": None, "metadata_bytes": None, "bias_bytes": None, "stored_bytes": None,
        "nominal_bits": scheme.nominal_bits, "bits_per_weight": None, "ledger": None,
        "flops": formulas.flops(m, k, n), "min_bytes": None, "arithmetic_intensity": None,
        "roofline_us": None, "roofline_bound": None, "roofline_source": None,
        "roofline_reason": None,
        "latency_us": {}, "latency_reasons": {}, "launch_overhead_us": None,
        "roofline_fraction": None, "achieved_gbps": None, "achieved_tflops": None,
        "error": None, "dispatch": None, "gpu_state": None, "compile": None,
    }


def failed_rows(rows: list[dict], status: str, reason: str) -> list[dict]:
    """Mark every row ``status`` with ``reason`` (one line)."""
    for row in rows:
        row["status"], row["reason"] = status, reason.strip().splitlines()[-1][:300] if reason.strip() else status
    return rows


def measure_scheme(scenario: Scenario, entry_index: int, device: torch.device,
                   ceilings: Optional[dict] = None) -> list[dict]:
    """Rows (one per M) for ``scenario.schemes[entry_index]`` on ``device``.

    Never raises for a scheme's own failure: an unavailable scheme gives ``skipped`` rows, an
    exception while building or running gives ``failed`` rows with the exception's last line.
    """
    entry = scenario.schemes[entry_index]
    scheme = get_scheme(entry.name)
    rows = [base_row(scenario, entry, scheme, m, device) for m in scenario.m]
    reason = scheme.unavailable_reason(device, entry.options)
    if reason is None and entry.options.mode == "compiled" and device.type == "cpu" and not _have_compiler():
        reason = "torch.compile on CPU needs a C++ compiler (none found)"
    if reason:
        return failed_rows(rows, "skipped", reason)
    torch.manual_seed(scenario.seed)
    t0 = time.perf_counter()
    try:
        weight, bias = inputs.make_weight(scenario, device)
        module = scheme.build(weight, bias, entry.options)
        book = ledger.count(scheme.parts(module))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # the scheme could not be built here: a failed row, the run goes on
        return failed_rows(rows, "failed", f"build: {type(exc).__name__}: {exc}")
    built = time.perf_counter()
    with torch.inference_mode():
        runner = _Runner(scenario, entry, scheme, module, weight, bias, book, device, ceilings)
        for row in rows:
            runner.measure(row)
        if device.type == "cuda" and "warm" in scenario.timing.methods:
            runner.measure_warm(rows)
    for row in rows:
        finish_row(row, ceilings)
        row["worker_phases_s"] = {"build": built - t0, "measure": time.perf_counter() - built}
    return rows


def _have_compiler() -> bool:
    import shutil

    return any(shutil.which(cc) for cc in ("cc", "gcc", "g++", "clang", "c++"))


class _Runner:
    def __init__(self, scenario, entry, scheme, module, weight, bias, book, device, ceilings):
        self.scenario, self.entry, self.scheme = scenario, entry, scheme
        self.weight, self.bias, self.book, self.device = weight, bias, book, device
        self.module = module
        self.compiled = entry.options.mode == "compiled"
        if self.compiled:
            # One static-shape graph per M: keep Dynamo from falling back to eager after its
            # default limit of 8 recompilations (a sweep has 11 M values).
            import torch._dynamo

            limit = max(8, len(scenario.m) + 2)
            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))
            self.module = torch.compile(module, dynamic=False)
        self.settings = _settings(scenario)
        self.inputs: dict[int, torch.Tensor] = {}
        self.flusher = None

    def _fn(self, x: torch.Tensor) -> Callable[[], Any]:
        module = self.module
        return lambda: module(x)

    def measure(self, row: dict) -> None:
        m, k, n = row["m"], row["k"], row["n"]
        row.update(self.book.fields(k, n))
        try:
            x32 = inputs.make_activations(self.scenario, m, self.device)
            y_ref = inputs.reference(x32, self.weight, self.bias)
            x = x32.to(self.scheme.activation_dtype)
            self.inputs[m] = x
            graphs_before = _graph_count()
            t0 = time.perf_counter()
            y = self.module(x)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            first_call_s = time.perf_counter() - t0
            row["output_dtype"] = dtype_name(y.dtype)
            row["error"] = metrics.error_metrics(y, y_ref)
            row["error"].update(_input_stats(self.scenario, self.scheme, self.entry, x32))
            del y, y_ref
            if self.compiled:
                row["compile"] = {"first_call_s": first_call_s, "graphs_compiled": _graph_count() - graphs_before}
        except Exception as exc:
            failed_rows([row], "failed", f"run: {type(exc).__name__}: {exc}")
            return
        act, out = x.element_size(), torch.empty((), dtype=_dtype(row["output_dtype"])).element_size()
        row["min_bytes"] = formulas.min_bytes(m, k, n, weight_bytes=self.book.stored_bytes, act_itemsize=act, out_itemsize=out)
        row["arithmetic_intensity"] = formulas.arithmetic_intensity(row["flops"], row["min_bytes"])
        fn = self._fn(x)
        graphs_before_timing = _graph_count()
        if self.device.type == "cpu":
            self._time(row, "cpu", lambda: _timing().time_cpu(fn, self.settings))
            for method in self.scenario.timing.methods:
                row["latency_us"][method] = None
                row["latency_reasons"][method] = "CUDA method; this row ran on the CPU"
        else:
            self._measure_cuda(row, fn)
        if self.compiled:
            row["compile"]["recompilations_during_timing"] = _graph_count() - graphs_before_timing

    def _measure_cuda(self, row: dict, fn: Callable[[], Any]) -> None:
        timing = _timing()
        methods = self.scenario.timing.methods
        gpu = _gpu_state_module()
        index = self.device.index or 0
        before = gpu.read_gpu_state(index) if gpu else None
        if "cold" in methods:
            if self.flusher is None:
                self.flusher = timing.L2Flusher(self.device, self.settings.flush_multiple)
            self._time(row, "cold", lambda: timing.time_cold(fn, self.settings, self.flusher))
        if "eager" in methods:
            self._time(row, "eager", lambda: timing.time_eager(fn, self.settings))
        if "kernel" in methods:
            try:
                profile = timing.profile_kernels(fn, self.settings)
                prof = profile.to_dict()
                row["latency_us"]["kernel"] = prof.get("kernel_us")
                from qbench.dispatch import classify_dispatch

                kernels = prof.get("kernels", [])
                row["dispatch"] = {
                    "label": classify_dispatch([kk["name"] for kk in kernels], self.scheme.family),
                    "kernels": kernels, "host_sync": prof.get("host_sync"), "graph_capturable": None,
                }
            except Exception as exc:
                row["latency_us"]["kernel"] = None
                row["latency_reasons"]["kernel"] = f"profiler: {type(exc).__name__}: {exc}"
        after = gpu.read_gpu_state(index) if gpu else None
        if before is not None or after is not None:
            row["gpu_state"] = {"before": before, "after": after,
                                "clock_dropped": bool(before and after and gpu.clock_dropped(before, after))}

    def _time(self, row: dict, method: str, run: Callable[[], Any]) -> None:
        try:
            row["latency_us"][method] = run().to_dict()
        except Exception as exc:
            row["latency_us"][method] = None
            row["latency_reasons"][method] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    def measure_warm(self, rows: list[dict]) -> None:
        timing = _timing()
        failure = None
        for row in rows:
            if row["status"] != "ok":
                continue
            if failure is not None:
                row["latency_us"]["warm"] = None
                row["latency_reasons"]["warm"] = f"not attempted: {failure}"
            else:
                x = self.inputs[row["m"]]
                try:
                    row["latency_us"]["warm"] = timing.time_warm(self._fn(x), self.settings).to_dict()
                except timing.GraphCaptureError as exc:
                    failure = f"CUDA graph capture failed at M={row['m']}: {exc}"
                    row["latency_us"]["warm"] = None
                    row["latency_reasons"]["warm"] = failure
                except Exception as exc:
                    failure = f"M={row['m']}: {type(exc).__name__}: {exc}".splitlines()[0][:300]
                    row["latency_us"]["warm"] = None
                    row["latency_reasons"]["warm"] = failure
            if row["dispatch"] is not None:
                row["dispatch"]["graph_capturable"] = failure is None


def finish_row(row: dict, ceilings: Optional[dict]) -> None:
    """Derived fields: roofline (measured ceilings first, datasheet second), launch overhead,
    roofline fraction and attained GB/s and TFLOP/s from the cold median (µs)."""
    if row["status"] != "ok" or row["min_bytes"] is None:
        return
    peak, bandwidth, source, why = _ceiling(ceilings, row["compute_dtype"], row["device"])
    if peak and bandwidth:
        roof = formulas.roofline(row["flops"], row["min_bytes"], peak_tflops=peak, bandwidth_gbps=bandwidth)
        row.update(roofline_us=roof.time_us, roofline_bound=roof.bound, roofline_source=source)
    else:
        row["roofline_reason"] = why
    lat = row["latency_us"]
    eager, kernel = (lat.get("eager") or {}).get("median"), (lat.get("kernel") or {}).get("median")
    if eager is not None and kernel is not None:
        row["launch_overhead_us"] = eager - kernel
    cold = (lat.get("cold") or {}).get("median")
    if cold:
        if row["roofline_us"] is not None:
            row["roofline_fraction"] = row["roofline_us"] / cold
        row["achieved_gbps"], row["achieved_tflops"] = formulas.achieved(row["flops"], row["min_bytes"], cold)


def _ceiling(ceilings: Optional[dict], dtype: str, device: str) -> tuple[Optional[float], Optional[float], Optional[str], str]:
    if device == "cpu":
        return None, None, None, "no roofline on CPU: qbench has no CPU peak table"
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
    if scheme.compute_dtype == "fp8" or "float8" in scheme.weight_dtype:
        extra["fp8_saturated"] = inputs.count_over(x32, inputs.FP8_E4M3_MAX)
    threshold = getattr(entry.options, "threshold", None)
    if threshold is not None:
        extra["outlier_columns"] = inputs.count_outlier_columns(x32.to(scheme.activation_dtype).float(), threshold)
    return extra


def _settings(scenario: Scenario):
    t = scenario.timing
    return _timing().TimingSettings(warmup=t.warmup, min_reps=t.min_reps, max_reps=t.max_reps,
                                    target_rel_ci=t.target_rel_ci, budget_s=t.budget_s,
                                    graph_calls=t.graph_calls, flush_multiple=t.flush_multiple)


def _timing():
    import qbench.timing as timing

    return timing


def _gpu_state_module():
    try:
        import qbench.gpu_state as gpu_state
    except ImportError:
        return None
    return gpu_state


def _graph_count() -> int:
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"]["unique_graphs"])


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)

