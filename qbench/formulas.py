"""The seed page's formulas, as pure functions (no torch, no device).

Source: the project's seed page ("GEMM, GEMV, dtype and arithmetic intensity"):

* a linear layer flattens batch and tokens into ``M = B x T`` rows; ``Y[M, N] = X[M, K] @ W[N, K]^T``;
* one multiply-add is 2 FLOPs, so ``FLOPs = 2 * M * K * N``;
* the minimum traffic reads X and W once and writes Y once: ``Q_min = (M*K + K*N + M*N) * s``
  for one element size ``s``. qbench generalises the weight term to the bytes the quantized
  weight really occupies (payload + metadata, from :mod:`qbench.schemes.ledger`) and lets the activation
  and output element sizes differ;
* arithmetic intensity ``AI = FLOPs / Q_min`` (FLOP/byte);
* roofline bound ``t >= max(FLOPs / peak_FLOP/s, Q_min / bandwidth)``.

For FP16, K = N = 4096 these give AI ~ 0.9995 at M = 1, ~ 15.88 at M = 16 and 409.6 at M = 512,
the seed page's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


def flops(m: int, k: int, n: int) -> int:
    """FLOPs of ``Y[m, n] = X[m, k] @ W[n, k]^T``: ``2 * m * k * n`` (one multiply-add = 2 FLOPs).

    The bias add (``m * n`` adds) is left out, as in the seed page and cuBLAS's own accounting.

    Raises:
        ValueError: if any dimension is not a positive integer.
    """
    _check_dims(m=m, k=k, n=n)
    return 2 * m * k * n


def min_bytes(m: int, k: int, n: int, *, weight_bytes: int, act_itemsize: int, out_itemsize: int) -> int:
    """Minimum device-memory traffic (bytes): X read once, the stored weight read once, Y written once.

    ``m * k * act_itemsize + weight_bytes + m * n * out_itemsize``; ``weight_bytes`` is the
    layer's ``stored_bytes`` (payload + metadata + bias). With every element of size ``s`` and
    ``weight_bytes = k * n * s`` this is the seed page's ``(M*K + K*N + M*N) * s``.

    It is an algorithmic lower bound, not the DRAM traffic a profiler measures (workspace, layout
    conversions, dequantized copies and re-reads add to it).

    Raises:
        ValueError: on a non-positive dimension or item size, or a negative ``weight_bytes``.
    """
    _check_dims(m=m, k=k, n=n, act_itemsize=act_itemsize, out_itemsize=out_itemsize)
    if weight_bytes < 0:
        raise ValueError(f"weight_bytes must be >= 0, got {weight_bytes}")
    return m * k * act_itemsize + weight_bytes + m * n * out_itemsize


def arithmetic_intensity(flop_count: int, byte_count: int) -> float:
    """Arithmetic intensity in FLOP/byte: ``flop_count / byte_count``.

    Raises:
        ValueError: if ``byte_count`` is not positive.
    """
    if byte_count <= 0:
        raise ValueError(f"byte_count must be > 0, got {byte_count}")
    return flop_count / byte_count


@dataclass(frozen=True)
class Roofline:
    """A roofline bound for one row.

    Attributes:
        time_us: ``max(compute_us, memory_us)`` in µs.
        compute_us: ``flops / peak`` in µs.
        memory_us: ``bytes / bandwidth`` in µs.
        bound: ``"memory"`` or ``"compute"``, whichever term is larger.
        ridge_intensity: ``peak / bandwidth`` (FLOP/byte): below it a kernel is memory-bound.
    """

    time_us: float
    compute_us: float
    memory_us: float
    bound: str
    ridge_intensity: float


def roofline(flop_count: int, byte_count: int, *, peak_tflops: float, bandwidth_gbps: float) -> Roofline:
    """Roofline lower bound on the time of one call.

    ``t = max(flop_count / (peak_tflops * 1e12), byte_count / (bandwidth_gbps * 1e9))``, in µs.

    Args:
        flop_count: FLOPs of the call (:func:`flops`).
        byte_count: minimum bytes (:func:`min_bytes`).
        peak_tflops: peak of the compute dtype in TFLOP/s (1e12 FLOP/s; TOPS for int8).
        bandwidth_gbps: memory bandwidth in GB/s (1e9 bytes/s).

    Raises:
        ValueError: if a peak or bandwidth is not positive.
    """
    if peak_tflops <= 0 or bandwidth_gbps <= 0:
        raise ValueError(f"peak_tflops and bandwidth_gbps must be > 0, got {peak_tflops}, {bandwidth_gbps}")
    compute_us = flop_count / (peak_tflops * 1e12) * 1e6
    memory_us = byte_count / (bandwidth_gbps * 1e9) * 1e6
    bound = "compute" if compute_us > memory_us else "memory"
    ridge = (peak_tflops * 1e12) / (bandwidth_gbps * 1e9)
    return Roofline(max(compute_us, memory_us), compute_us, memory_us, bound, ridge)


def hbm_floor_us(stored_bytes: int, bandwidth_gbps: float) -> float:
    """HBM floor of one call, µs: ``stored_bytes / (bandwidth_gbps * 1e9) * 1e6``.

    The time to read the layer's stored weight (payload + metadata + bias, bytes) once from device
    memory at ``bandwidth_gbps`` (GB/s, 1e9 bytes/s): a call that streams its weight from HBM, as
    in a decode step, cannot be faster (the activation and output terms of :func:`min_bytes` are
    left out: in decode they are small and L2-resident). E.g. 33,554,432 B at 4,000 GB/s: 8.389 µs.

    Raises:
        ValueError: stored_bytes < 0 or bandwidth_gbps <= 0.
    """
    if stored_bytes < 0 or not bandwidth_gbps > 0:
        raise ValueError(f"stored_bytes must be >= 0 and bandwidth_gbps > 0, got {stored_bytes}, {bandwidth_gbps}")
    return stored_bytes / (bandwidth_gbps * 1e9) * 1e6


def bits_per_weight(stored_bytes: int, k: int, n: int) -> float:
    """Stored bits per weight element: ``8 * stored_bytes / (k * n)`` (metadata included)."""
    _check_dims(k=k, n=n)
    return 8.0 * stored_bytes / (k * n)


def achieved(flop_count: int, byte_count: int, latency_us: float) -> tuple[float, float]:
    """Attained rates for a measured call: ``(GB/s of min_bytes, TFLOP/s)``.

    Raises:
        ValueError: if ``latency_us`` is not positive.
    """
    if latency_us <= 0:
        raise ValueError(f"latency_us must be > 0, got {latency_us}")
    seconds = latency_us * 1e-6
    return byte_count / seconds / 1e9, flop_count / seconds / 1e12


def _check_dims(**dims: int) -> None:
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
