"""formulas: hand-computed values from the seed page (fp16, K = N = 4096)."""

import pytest

from qbench import formulas

K = N = 4096
FP16_WEIGHT = K * N * 2  # 33,554,432 bytes


@pytest.mark.parametrize("m, want_ai", [(1, 0.99951), (16, 15.876), (512, 409.6)])
def test_fp16_arithmetic_intensity_matches_seed_page(m, want_ai):
    f = formulas.flops(m, K, N)
    b = formulas.min_bytes(m, K, N, weight_bytes=FP16_WEIGHT, act_itemsize=2, out_itemsize=2)
    assert b == (m * K + K * N + m * N) * 2  # the seed page's Q_min with s = 2
    assert formulas.arithmetic_intensity(f, b) == pytest.approx(want_ai, rel=1e-4)


def test_flops_and_min_bytes_exact():
    assert formulas.flops(1, 4096, 4096) == 33_554_432
    assert formulas.flops(512, 4096, 4096) == 17_179_869_184
    # int8 weight-only at M=1: bf16 activations and output, 16 MiB + 16 KiB of row scales
    assert formulas.min_bytes(1, 4096, 4096, weight_bytes=16_777_216 + 16_384, act_itemsize=2,
                              out_itemsize=2) == 8192 + 16_793_600 + 8192


def test_roofline_memory_and_compute_bound():
    # fp16 M=1 on an H200 datasheet (989.4 TFLOP/s, 4800 GB/s): memory-bound, 33.57 MB / 4.8 TB/s
    b = formulas.min_bytes(1, K, N, weight_bytes=FP16_WEIGHT, act_itemsize=2, out_itemsize=2)
    r = formulas.roofline(formulas.flops(1, K, N), b, peak_tflops=989.4, bandwidth_gbps=4800)
    assert r.bound == "memory"
    assert r.time_us == pytest.approx(33_570_816 / 4.8e12 * 1e6)
    assert r.ridge_intensity == pytest.approx(989.4e12 / 4.8e12)
    # M=512: AI 409.6 > ridge 206: compute-bound
    b = formulas.min_bytes(512, K, N, weight_bytes=FP16_WEIGHT, act_itemsize=2, out_itemsize=2)
    r = formulas.roofline(formulas.flops(512, K, N), b, peak_tflops=989.4, bandwidth_gbps=4800)
    assert r.bound == "compute"
    assert r.time_us == pytest.approx(17_179_869_184 / 989.4e12 * 1e6)


def test_bits_per_weight_and_achieved():
    assert formulas.bits_per_weight(FP16_WEIGHT, K, N) == 16.0
    gbps, tflops = formulas.achieved(33_554_432, 33_570_816, 10.0)
    assert gbps == pytest.approx(3357.0816)
    assert tflops == pytest.approx(3.3554432)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_bad_dimensions_raise(bad):
    with pytest.raises(ValueError):
        formulas.flops(bad, 4, 4)


def test_bad_rates_raise():
    with pytest.raises(ValueError):
        formulas.roofline(1, 1, peak_tflops=0, bandwidth_gbps=1)
    with pytest.raises(ValueError):
        formulas.arithmetic_intensity(1, 0)
    with pytest.raises(ValueError):
        formulas.achieved(1, 1, 0)


def test_hbm_floor_hand_computed():
    # 4096 x 4096 bf16 = 33,554,432 B at 4000 GB/s: 33,554,432 / 4e12 s = 8.388608 µs
    assert formulas.hbm_floor_us(33_554_432, 4000) == pytest.approx(8.388608, rel=1e-12)
    # the H200 datasheet's 4.8 TB/s: 6.990507 µs; int4 tinygemm (8.5 MiB) at 4.8 TB/s: 1.856853 µs
    assert formulas.hbm_floor_us(33_554_432, 4800) == pytest.approx(6.990506666, rel=1e-9)
    assert formulas.hbm_floor_us(8_912_896, 4800) == pytest.approx(1.856853333, rel=1e-9)
    assert formulas.hbm_floor_us(0, 4000) == 0.0


def test_hbm_floor_is_below_the_memory_roofline():
    """The floor counts the stored weight only; min_bytes adds activations and output."""
    b = formulas.min_bytes(1, K, N, weight_bytes=FP16_WEIGHT, act_itemsize=2, out_itemsize=2)
    r = formulas.roofline(formulas.flops(1, K, N), b, peak_tflops=989.4, bandwidth_gbps=4800)
    floor = formulas.hbm_floor_us(FP16_WEIGHT, 4800)
    assert floor < r.memory_us == pytest.approx(floor * b / FP16_WEIGHT)


@pytest.mark.parametrize("stored, bandwidth", [(-1, 4000), (1, 0), (1, -4000), (1, float("nan"))])
def test_hbm_floor_rejects(stored, bandwidth):
    with pytest.raises(ValueError):
        formulas.hbm_floor_us(stored, bandwidth)


# ---- exact answers and boundaries (mutation testing, docs/testing.md) ---------------------------

@pytest.mark.parametrize("call, names", [
    (lambda **d: formulas.flops(d["m"], d["k"], d["n"]), ("m", "k", "n")),
    (lambda **d: formulas.min_bytes(d["m"], d["k"], d["n"], weight_bytes=0, act_itemsize=d["act_itemsize"],
                                    out_itemsize=d["out_itemsize"]), ("m", "k", "n", "act_itemsize", "out_itemsize")),
    (lambda **d: formulas.bits_per_weight(8, d["k"], d["n"]), ("k", "n")),
])
def test_every_dimension_is_checked_by_name(call, names):
    good = {"m": 1, "k": 2, "n": 3, "act_itemsize": 2, "out_itemsize": 2}
    call(**good)
    for name in names:
        with pytest.raises(ValueError, match=f"^{name} must be a positive integer, got 0$"):
            call(**{**good, name: 0})


def test_min_bytes_weight_bytes_boundary():
    # a zero-byte weight is allowed (the activation and output terms remain): 1*2*2 + 0 + 1*3*4
    assert formulas.min_bytes(1, 2, 3, weight_bytes=0, act_itemsize=2, out_itemsize=4) == 4 + 12
    with pytest.raises(ValueError, match="^weight_bytes must be >= 0, got -1$"):
        formulas.min_bytes(1, 2, 3, weight_bytes=-1, act_itemsize=2, out_itemsize=4)


def test_rate_boundaries_and_messages():
    assert formulas.arithmetic_intensity(3, 1) == 3.0  # one byte is a valid count
    with pytest.raises(ValueError, match="^byte_count must be > 0, got 0$"):
        formulas.arithmetic_intensity(3, 0)
    r = formulas.roofline(10**12, 10**9, peak_tflops=0.5, bandwidth_gbps=0.5)  # rates below 1 are valid
    assert (r.compute_us, r.memory_us) == (2e6, 2e6)
    for peak, bw in ((0, 1), (1, 0), (-1, 1), (1, -1)):
        with pytest.raises(ValueError, match=f"^peak_tflops and bandwidth_gbps must be > 0, got {peak}, {bw}$"):
            formulas.roofline(1, 1, peak_tflops=peak, bandwidth_gbps=bw)
    assert formulas.hbm_floor_us(1000, 0.5) == pytest.approx(2.0, rel=1e-15)
    with pytest.raises(ValueError, match="^stored_bytes must be >= 0 and bandwidth_gbps > 0, got 1, 0$"):
        formulas.hbm_floor_us(1, 0)
    assert formulas.achieved(10**6, 2000, 0.5) == pytest.approx((4.0, 2.0), rel=1e-15)
    with pytest.raises(ValueError, match="^latency_us must be > 0, got 0$"):
        formulas.achieved(1, 1, 0)


def test_roofline_exact_terms_and_tie():
    # 2e12 FLOP at 1 TFLOP/s = 2 s; 4e9 B at 1 GB/s = 4 s; ridge 1e12 / 1e9 = 1000 FLOP/B
    r = formulas.roofline(2 * 10**12, 4 * 10**9, peak_tflops=1.0, bandwidth_gbps=1.0)
    assert r == formulas.Roofline(time_us=4e6, compute_us=2e6, memory_us=4e6, bound="memory", ridge_intensity=1000.0)
    r = formulas.roofline(4 * 10**12, 2 * 10**9, peak_tflops=1.0, bandwidth_gbps=1.0)
    assert r == formulas.Roofline(time_us=4e6, compute_us=4e6, memory_us=2e6, bound="compute", ridge_intensity=1000.0)
    # equal terms: "memory" (compute-bound only when the compute term is strictly larger)
    assert formulas.roofline(10**12, 10**9, peak_tflops=1.0, bandwidth_gbps=1.0).bound == "memory"


def test_bits_per_weight_exact():
    assert formulas.bits_per_weight(16_797_696, 4096, 4096) == 8.009765625  # int8-weight-only's real ledger
    assert formulas.bits_per_weight(1, 2, 4) == 1.0
