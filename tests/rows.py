"""Rows for tests, built through the row model (:mod:`qbench.row`), so a test that writes a key
no real row carries, or a value of the wrong type, fails where the row is made.

``make_row(**fields)`` checks a hand-built (partial) row with the reader's rules and returns it
unchanged; ``full_row()``, ``full_failed_row()`` and ``full_tp_row()`` are complete rows (every
field the producer writes, checked with the producer's rules), with every optional part filled,
for tests that must see every field at once (the column catalogue's).
"""

from __future__ import annotations

import copy

from qbench.row import Row, check_row, validate_row


def make_row(**fields) -> dict:
    """``fields`` as a row, checked against :class:`qbench.row.Row` (reading rules: every key a
    model field, every value of its type; absent fields stay absent)."""
    return check_row(fields)


def typed_row(**fields) -> Row:
    """``fields`` as a :class:`qbench.row.Row` (reading rules), as readers hold a row."""
    return validate_row(fields)


def stats(median: float, p10: float | None = None, p90: float | None = None, n: int = 20, **extra) -> dict:
    """A complete STATS record (p10 / p90 default to the median; mean = median, cv 0.01)."""
    return {"median": median, "p10": median if p10 is None else p10, "p90": median if p90 is None else p90,
            "mean": median, "cv": 0.01, "n": n, **extra}


_READING = {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "temp_c": 35.0, "power_w": 127.1,
            "throttle_reasons": []}

_FULL = {
    "scheme": "int8-weight-only+compiled", "base_scheme": "int8-weight-only", "library": "torchao",
    "mode": "compiled", "options": {}, "m": 1, "k": 4096, "n": 4096, "device": "cuda:0",
    "weight_source": "seeded Gaussian N(0, 1/K) (synthetic, seed 0)", "weight_dtype": "int8", "activation_dtype": "bfloat16", "output_dtype": "bfloat16", "compute_dtype": "bf16",
    "status": "ok", "reason": None,
    "payload_bytes": 16777216, "metadata_bytes": 16384, "bias_bytes": 0, "stored_bytes": 16793600,
    "nominal_bits": 8, "bits_per_weight": 8.0078125,
    "ledger": [{"name": "weight.qdata", "role": "payload", "dtype": "int8", "shape": [4096, 4096], "bytes": 16777216},
               {"name": "weight.scale", "role": "metadata", "dtype": "float32", "shape": [4096, 1], "bytes": 16384}],
    "flops": 33554432, "min_bytes": 16809984, "arithmetic_intensity": 33554432 / 16809984,
    "roofline_us": 3.96, "roofline_bound": "memory", "roofline_source": "measured", "roofline_reason": None,
    "latency_us": {
        "stream": stats(9.07, 9.02, 9.11, copies=15, copy_bytes=16793600, cache_bytes=62914560,
                        cache_multiple=4.004, bounded_by=None, how="deepcopy", recompilations=0),
        "cold": stats(12.9, 12.6, 13.8, n=45, launch="hidden"),
        "warm": stats(7.98, 7.97, 8.0),
        "eager": stats(139.5, 127.3, 174.6, n=1702),
        "kernel": stats(9.42, 9.15, 9.74),
    },
    "latency_reasons": {},
    "launch_overhead_us": 130.1, "hbm_floor_us": 3.96, "hbm_floor_fraction": 0.437, "roofline_fraction": 0.437,
    "achieved_gbps": 1854.0, "achieved_tflops": 3.7, "achieved_method": "stream",
    "error": {"rel_fro": 0.0093, "abs_fro": 0.60, "max_abs": 0.038, "sqnr_db": 40.6, "cosine": 0.99996,
              "nonfinite": 0, "exact": False},
    "dispatch": {"label": "fused-quantized", "host_sync": False, "graph_capturable": True,
                 "kernels": [{"name": "triton_red_fused__to_copy_mm_mul_t_view_0", "count": 1.0, "us": 9.46,
                              "kind": "kernel"}]},
    "gpu_state": {"before": _READING, "after": _READING, "by_method": {m: _READING for m in ("cold", "stream")},
                  "clock_dropped": False},
    "compile": {"first_call_s": 5.5, "graphs_compiled": 1, "graph_breaks": 0, "recompilations_during_timing": 0},
    "flags": [{"name": "above-ceiling", "text": "an example flag sentence"}],
    "cpu_load": {"load_avg_1min": 0.5, "free_cores": 1.5, "oversubscribed": False},
    "worker_wall_s": 9.0,
    "worker_phases_s": {"prepare": 5.3, "waited_for_go": 6.0, "build": 0.37, "copies": 0.02, "measure": 8.5,
                        "after_go": 8.9},
}

_TP = {
    "tp_size": 2, "split": "row", "collective": "all_reduce", "reduce_dtype": "float32",
    "shard": {"k": 2048, "n": 4096, "same_as_slice": True, "note": "K sliced"},
    "local_gemm_us": stats(6.0, 5.9, 6.1), "collective_us": stats(8.0, 7.9, 8.1), "end_to_end_us": stats(14.5, 14.2, 14.9),
    "per_rank_median_us": {"local_gemm": [6.0, 6.1], "collective": [8.0, 8.0], "end_to_end": [14.5, 14.4]},
    "collective_bytes": 16384, "collective_data_bytes": 8192, "collective_busbw_gbps": 2.0,
    "unsharded_error": {"rel_fro": 0.0093, "nonfinite": 0}, "sharded_vs_unsharded": {"rel_fro": 0.0001, "nonfinite": 0},
    "stored_bytes_all_ranks": 16793600, "speedup_vs_tp1": 1.25, "speedup_vs_tp1_method": "cold",
    "cpu_threads_per_rank": None,
}


def full_row(**overrides) -> dict:
    """A complete ``ok`` CUDA row with every part filled (checked with the producer's rules)."""
    return check_row({**copy.deepcopy(_FULL), **overrides}, writing=True)


def full_failed_row() -> dict:
    """A complete ``failed`` row: the measured fields null, ``reason`` set."""
    row = full_row(status="failed", reason="run: RuntimeError: an example failure")
    return row


def full_cpu_row() -> dict:
    """A complete ``ok`` CPU row: ``cpu`` and ``stream`` timed, the CUDA methods null with their reason."""
    cuda = ("cold", "warm", "eager", "kernel")
    return full_row(device="cpu", latency_us={"cpu": stats(61.0, 60.0, 63.0), "stream": stats(594.0, 590.0, 600.0,
                    copies=8, copy_bytes=16793600, cache_bytes=33554432, cache_multiple=4.004, bounded_by=None,
                    how="deepcopy", recompilations=0), **{m: None for m in cuda}},
                    latency_reasons={m: {"kind": "cuda-only", "text": "CUDA method; this row ran on the CPU"}
                                     for m in cuda},
                    dispatch=None, gpu_state=None, hbm_floor_us=None, hbm_floor_fraction=None, roofline_us=None,
                    roofline_bound=None, roofline_source=None, roofline_fraction=None,
                    roofline_reason="no roofline on CPU: qbench has no CPU peak table")


def full_tp_row(**overrides) -> dict:
    """A complete tensor-parallel row (every tp field set)."""
    return check_row({**copy.deepcopy(_FULL), **copy.deepcopy(_TP), **overrides}, writing=True)


#: Scheme labels a result file from elsewhere may carry (break review 2026-12-01, #16): terminal
#: escapes (OSC retitle, clear screen), a Markdown cell and row breaker, a spreadsheet formula.
HOSTILE_SCHEMES = ("\x1b]0;pwned\x07\x1b[2J", "a|b\nc", '=HYPERLINK("x")')
#: A device name with HTML and an SGR colour escape.
HOSTILE_DEVICE = "<img src=x onerror=alert(1)>\x1b[31m"


def hostile_doc() -> dict:
    """A complete CPU result document: bf16 (10 µs, rel_fro 0.001) and one ``ok`` row per
    :data:`HOSTILE_SCHEMES` (5, 6, 7 µs; rel_fro 0.01, 0.02, 0.03), all at M=1, K=256, N=128, on a
    device named :data:`HOSTILE_DEVICE`; the fastest within any budget >= 0.01 is the first hostile
    label."""
    def row(scheme, us, rel):
        return make_row(scheme=scheme, m=1, k=256, n=128, device="cpu", status="ok",
                        latency_us={"stream": stats(us, us * 0.99, us * 1.01)}, error={"rel_fro": rel})

    rows = [row("bf16", 10.0, 0.001)] + [row(s, 5.0 + i, 0.01 * (i + 1)) for i, s in enumerate(HOSTILE_SCHEMES)]
    return {"schema_version": 2, "complete": True, "scenario": {"name": "hostile"},
            "env": {"device": "cpu", "device_name": HOSTILE_DEVICE}, "rows": rows}
