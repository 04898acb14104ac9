"""Measured ceilings of the device: copy bandwidth and dense matmul peaks (CUDA and the CPU).

Run once per CUDA run (about 2-3 s on an H200). The roofline uses these measured
numbers first and the datasheet (:mod:`qbench.hardware`) as a fallback
(docs/results-schema.md, ``ceilings``). Method: a large device-to-device copy counting
bytes read plus written (bandwidth), and a large matrix product on random data (the
matrix rate; never zeros: a bf16 matrix product has been seen to run 13 % faster on
zeros on an H200).
"""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import torch

from qbench.hardware import lookup

MATMUL_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
#: Copy source size: 1 GiB (>= 16x the H200's 60 MiB L2, so the copy streams from HBM).
COPY_BYTES = 1 << 30
#: Square matmul size; 8192^3 fills an H200 (132 SMs) with 128x128 tiles many times over.
MATMUL_N = 8192
WARMUP = 3
REPS = 10
#: fp32 check: relative Frobenius error vs float64 below this means no TF32 (TF32 lands
#: near 3e-4, fp32 far under 1e-5 at K=1024; METHOD.md).
FP32_MAX_REL_ERR = 1e-5


def _median_ms(fn: Callable[[], object], warmup: int = WARMUP, reps: int = REPS) -> float:
    """Median CUDA-event time of fn in ms, after warm-up; events around each call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def measure_bandwidth_gbps(device: torch.device, nbytes: int = COPY_BYTES) -> float:
    """Device-to-device copy bandwidth, GB/s (1e9 B/s): 2 x nbytes / median copy time."""
    src = torch.rand(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _rel_err_vs_fp64(device: torch.device) -> float:
    """Relative Frobenius error of a 1024^3 fp32 GPU matmul vs float64 on the CPU."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(1024, 1024, generator=g)
    b = torch.randn(1024, 1024, generator=g)
    out = (a.to(device) @ b.to(device)).cpu().double()
    ref = a.double() @ b.double()
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def _matmul_fn(dtype: str, device: torch.device, n: int) -> Callable[[], object]:
    """A zero-argument n x n x n product for `dtype` on random operands."""
    if dtype in ("fp32", "tf32", "fp16", "bf16"):
        t = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        a = torch.randn(n, n, device=device, dtype=t)
        b = torch.randn(n, n, device=device, dtype=t)
        return lambda: torch.mm(a, b)
    if dtype == "fp8":
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.tensor(1.0, device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if dtype == "int8":
        a = torch.randint(-128, 128, (n, n), device=device, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, n), device=device, dtype=torch.int8).t()  # column-major
        return lambda: torch._int_mm(a, b)
    raise ValueError(f"unknown matmul dtype {dtype!r}")


def _measure_matmul(dtype: str, device: torch.device, n: int) -> tuple[float | None, str | None, str]:
    """(TFLOP/s or None, reason if None, method string) for one dtype."""
    method = f"median of {REPS} CUDA-event-timed {n}^3 products after {WARMUP} warm-ups, random operands"
    if dtype == "fp8":
        cc = torch.cuda.get_device_capability(device)
        if cc < (8, 9):
            return None, f"fp8 needs compute capability >= 8.9, device has {cc[0]}.{cc[1]}", method
        method = f"torch._scaled_mm e4m3 x e4m3 (second operand column-major), unit scales, out bf16; {method}"
    elif dtype == "int8":
        method = f"torch._int_mm int8 x int8 -> int32 (second operand column-major); {method}"
    else:
        method = f"torch.mm {dtype}; {method}"
    matmul = torch.backends.cuda.matmul  # the per-backend API: the legacy getters raise once it was used (torch >= 2.9)
    prev_precision = matmul.fp32_precision
    try:
        if dtype in ("fp32", "tf32"):
            matmul.fp32_precision = "ieee" if dtype == "fp32" else "tf32"
            err = _rel_err_vs_fp64(device)
            if dtype == "fp32" and err > FP32_MAX_REL_ERR:
                return None, f"TF32 still active with fp32_precision 'ieee' (rel err {err:.1e}; NVIDIA_TF32_OVERRIDE?)", method
            method += f"; cuda.matmul.fp32_precision={matmul.fp32_precision!r}, rel err vs fp64 {err:.1e}"
        fn = _matmul_fn(dtype, device, n)
        ms = _median_ms(fn)
        return 2 * n**3 / (ms * 1e-3) / 1e12, None, method
    except Exception as exc:  # noqa: BLE001 - becomes a null entry with its reason
        return None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}", method
    finally:
        matmul.fp32_precision = prev_precision
        torch.cuda.empty_cache()


def _matmul_by_dtype(dtypes: Sequence[str], measure, reasons: dict[str, str]) -> tuple[dict, dict]:
    """``({dtype: TFLOP/s or None}, {dtype: method text})`` of ``measure(dtype) -> (value, reason,
    method)`` for each distinct dtype in order; a reason goes to ``reasons[dtype]``."""
    tflops: dict[str, float | None] = {}
    by_dtype: dict[str, str] = {}
    for d in dict.fromkeys(dtypes):
        tflops[d], reason, by_dtype[d] = measure(d)
        if reason:
            reasons[d] = reason
    return tflops, by_dtype


def measure_ceilings(device: torch.device | str, dtypes: list[str], n: int = MATMUL_N) -> dict:
    """Measure copy bandwidth and the dense matmul peak of each requested dtype.

    Args:
        device: a CUDA device ("cuda", "cuda:0", torch.device), or ``"cpu"``
            (:func:`measure_cpu_ceilings`: a fraction of a second, no datasheet).
        dtypes: subset of MATMUL_DTYPES ("fp32" is measured with TF32 off and checked
            against a float64 product; "tf32" with torch.backends.cuda.matmul.fp32_precision "tf32").
        n: matmul size (n x n x n, 2*n^3 FLOPs); default 8192.

    Returns:
        ``{"measured": {"memory_gbps": float|None, "tflops": {dtype: float|None},
        "method": {"memory": str, "matmul": str, "matmul_by_dtype": {dtype: str}},
        "reasons": {key: str}}, "datasheet": {...} | None, "datasheet_reason"?: str}``.
        Units GB/s (1e9 B/s) and TFLOP/s (1e12/s; TOPS for int8). A dtype that cannot
        be measured is None with its reason under ``reasons``.

    Raises:
        ValueError: device is neither CUDA nor the CPU, or an unknown dtype (value in the message).
        RuntimeError: CUDA unavailable.
    """
    dev = torch.device(device)
    if dev.type == "cpu":
        return measure_cpu_ceilings(dtypes)
    if dev.type != "cuda":
        raise ValueError(f"measure_ceilings: device must be CUDA or the CPU, got {str(dev)!r}")
    bad = [d for d in dtypes if d not in MATMUL_DTYPES]
    if bad:
        raise ValueError(f"measure_ceilings: dtypes must be among {MATMUL_DTYPES}, got {bad[0]!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("measure_ceilings: torch.cuda.is_available() is False")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    reasons: dict[str, str] = {}
    with torch.cuda.device(dev):
        try:
            gbps: float | None = measure_bandwidth_gbps(dev)
        except Exception as exc:  # noqa: BLE001 - becomes a null entry with its reason
            gbps = None
            reasons["memory"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        tflops, by_dtype = _matmul_by_dtype(dtypes, lambda d: _measure_matmul(d, dev, n), reasons)
    measured = {
        "memory_gbps": gbps,
        "tflops": tflops,
        "method": {
            "memory": f"device-to-device copy of {COPY_BYTES} bytes (fp32 random), bytes read + written "
                      f"over the median of {REPS} CUDA-event-timed copies after {WARMUP} warm-ups",
            "matmul": f"{n}x{n}x{n} products, 2*n^3 FLOPs over the median CUDA-event time",
            "matmul_by_dtype": by_dtype,
        },
        "reasons": reasons,
    }
    name = torch.cuda.get_device_name(dev)
    spec = lookup(name)
    out: dict = {"measured": measured, "datasheet": spec.to_dict() if spec else None}
    if spec is None:
        out["datasheet_reason"] = f"no datasheet entry for {name!r} in qbench.hardware"
    return out


# ---- the CPU -----------------------------------------------------------------------------------

#: CPU copy size bounds (bytes): at least 4x the last-level cache so the copy streams from DRAM.
CPU_COPY_MIN, CPU_COPY_MAX = 64 << 20, 512 << 20
#: Seconds spent on each CPU measurement (the copy, each dtype's product) after its sizing call.
CPU_BUDGET_S = 0.05
#: One CPU product is sized to take about this long (s), n between CPU_N_MIN and CPU_N_MAX.
CPU_CALL_S = 0.01
CPU_N_MIN, CPU_N_MAX = 256, 2048
#: CPU compute dtypes a peak is measured for (tf32 has no CPU kernel).
CPU_DTYPES = ("fp32", "fp16", "bf16", "int8", "fp8")


#: Warm-up calls before CPU samples: oneDNN/MKL products of a new shape ran 50x slower for their
#: first 2-4 calls (fp32 and bf16 at 256^3 on an AVX-512 EPYC, torch 2.13).
CPU_WARMUP = 5


def _best_s(fn: Callable[[], object], budget_s: float = CPU_BUDGET_S, min_reps: int = 3, max_reps: int = 50,
            warmup: int = CPU_WARMUP) -> tuple[float, int]:
    """(fastest wall time of ``fn`` in s, samples taken) after ``warmup`` calls: samples until
    ``budget_s`` is spent (at least ``min_reps``). The fastest, not the median: on a CPU shared
    with other work a ceiling is what the hardware can do, and other work only slows a sample."""
    import time

    for _ in range(warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < min_reps or (spent < budget_s and len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return min(times), len(times)


def cpu_copy_bytes(llc_bytes: int | None) -> int:
    """The CPU copy's source size, bytes: 4x the last-level cache (so the copy streams from DRAM),
    at least :data:`CPU_COPY_MIN`, at most :data:`CPU_COPY_MAX`; ``CPU_COPY_MIN`` x 2 when the cache
    size is unknown. Rounded down to a multiple of 4 KiB."""
    want = 4 * llc_bytes if llc_bytes else 2 * CPU_COPY_MIN
    return max(CPU_COPY_MIN, min(CPU_COPY_MAX, want)) // 4096 * 4096


def _cpu_matmul_fn(dtype: str, n: int) -> Callable[[], object]:
    """A zero-argument n x n x n CPU product for ``dtype`` on random operands (int8:
    ``torch._int_mm``; fp8: ``torch._scaled_mm`` e4m3 with unit scales, where this torch has it)."""
    g = torch.Generator().manual_seed(0)
    if dtype in ("fp32", "fp16", "bf16"):
        t = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        a, b = torch.randn(n, n, generator=g).to(t), torch.randn(n, n, generator=g).to(t)
        return lambda: torch.mm(a, b)
    if dtype == "int8":
        a = torch.randint(-128, 128, (n, n), generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, n), generator=g, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)
    if dtype == "fp8":
        a = torch.randn(n, n, generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, generator=g).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    raise ValueError(f"no CPU product for dtype {dtype!r}")


def _threads_best(measure: Callable[[], tuple[float, str]]) -> tuple[float, str]:
    """``measure()`` (a rate and its method) with torch's thread count and, when that is more than
    one, again with one thread; the higher rate, its method naming the thread count. On a CPU
    shared with other work a parallel product waits for its slowest thread at every barrier (a
    descheduled thread costs a scheduler quantum: 2 threads on 2 busy cores read 2 GFLOP/s where
    one thread read 65); the single-thread rate is still a real measurement and bounds the
    ceiling from below."""
    threads = torch.get_num_threads()
    rate, method = measure()
    best = (rate, f"{method}, {threads} thread{'s' if threads > 1 else ''}")
    if threads > 1:
        torch.set_num_threads(1)
        try:
            one, method1 = measure()
        finally:
            torch.set_num_threads(threads)
        if one > rate:
            best = (one, f"{method1}, 1 thread (faster than {threads} threads here: {rate:.3g} against {one:.3g})")
    return best


def _cpu_matmul(dtype: str) -> tuple[float | None, str | None, str]:
    """(TFLOP/s or None, reason if None, method) of one CPU dtype: warmed-up 256^3 calls estimate the
    rate, then n is chosen so one call takes about :data:`CPU_CALL_S` (256..2048, a multiple of 64)."""
    import time

    op = {"int8": "torch._int_mm int8 x int8 -> int32", "fp8": "torch._scaled_mm e4m3, unit scales, out bf16"}.get(
        dtype, f"torch.mm {dtype}")

    def measure() -> tuple[float, str]:
        fn = _cpu_matmul_fn(dtype, CPU_N_MIN)
        best, _ = _best_s(fn, budget_s=0.0)  # warmed up: the rate of this dtype's kernel
        n = int((CPU_CALL_S * 2 * CPU_N_MIN**3 / max(best, 1e-9) / 2) ** (1 / 3)) // 64 * 64
        n = max(CPU_N_MIN, min(CPU_N_MAX, n))
        best, reps = _best_s(fn, warmup=0) if n == CPU_N_MIN else _best_s(_cpu_matmul_fn(dtype, n))
        return 2 * n**3 / best / 1e12, (f"{op}: fastest of {reps} wall-timed {n}^3 products after {CPU_WARMUP} "
                                        "warm-ups, random operands")

    try:
        tflops, method = _threads_best(measure)
    except Exception as exc:  # noqa: BLE001 - a dtype without a CPU kernel becomes a null entry with its reason
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {text}"[:300], f"{dtype}: not measured"
    return tflops, None, method


def measure_cpu_ceilings(dtypes: list[str], copy_bytes: int | None = None) -> dict:
    """Measure the CPU's DRAM copy bandwidth and the dense product peak of each requested dtype,
    with torch's current thread count (the threads the rows are timed with) and with one thread,
    keeping the higher (:func:`_threads_best`). Takes about 2 x :data:`CPU_BUDGET_S` plus the
    warm-ups per measurement (about a second for four dtypes).

    Args:
        dtypes: compute dtypes (of :data:`MATMUL_DTYPES`); ``tf32`` gets a null peak with its reason
            (no CPU kernel), as does a dtype this torch has no CPU product for.
        copy_bytes: the copy's source size; default :func:`cpu_copy_bytes` of the last-level cache.

    Returns:
        The shape :func:`measure_ceilings` returns, ``"device": "cpu"`` (CPU rows take only
        ceilings marked so), ``"datasheet": None`` (qbench has no CPU table) and ``datasheet_reason``. ``memory_gbps``: 2 x bytes (read + written) / the fastest
        copy, GB/s; ``tflops``: 2 n^3 / the fastest product, TFLOP/s (TOPS for int8). Fastest, not
        median: see :func:`_best_s`.

    Raises:
        ValueError: a dtype not in :data:`MATMUL_DTYPES`.
    """
    from qbench.timing.stream import last_level_cache_bytes

    bad = [d for d in dtypes if d not in MATMUL_DTYPES]
    if bad:
        raise ValueError(f"measure_cpu_ceilings: dtypes must be among {MATMUL_DTYPES}, got {bad[0]!r}")
    nbytes = copy_bytes or cpu_copy_bytes(last_level_cache_bytes())
    reasons: dict[str, str] = {}
    gbps: float | None = None
    memory_method = "not measured"
    try:
        src = torch.rand(nbytes // 4, dtype=torch.float32)
        dst = torch.empty_like(src)

        def copy_rate() -> tuple[float, str]:
            best, reps = _best_s(lambda: dst.copy_(src), warmup=1)
            return 2 * nbytes / best / 1e9, f"fastest of {reps} wall-timed copies after a warm-up"

        gbps, memory_method = _threads_best(copy_rate)
        del src, dst
    except Exception as exc:  # noqa: BLE001 - out of memory and the like: a null entry with its reason
        reasons["memory"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    tflops, by_dtype = _matmul_by_dtype(
        dtypes, lambda d: _cpu_matmul(d) if d in CPU_DTYPES else (None, f"{d} has no CPU kernel", f"{d}: not measured"),
        reasons)
    measured = {
        "memory_gbps": gbps,
        "tflops": tflops,
        "method": {
            "memory": f"CPU copy of {nbytes} bytes (fp32 random, >= 4x the last-level cache), bytes read + written "
                      f"over the {memory_method}",
            "matmul": f"square products sized to about {CPU_CALL_S * 1e3:g} ms each (from the warmed-up rate at "
                      f"{CPU_N_MIN}^3), 2*n^3 FLOPs over the fastest wall time",
            "matmul_by_dtype": by_dtype,
        },
        "reasons": reasons,
    }
    return {"device": "cpu", "measured": measured, "datasheet": None,
            "datasheet_reason": "qbench has no CPU datasheet table: the CPU's ceilings are measured only"}
