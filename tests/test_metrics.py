"""metrics: error metrics on inputs whose error is known."""

import math

import pytest
import torch

from qbench.metrics import error_metrics


def test_known_relative_error_sqnr_cosine():
    ref = torch.tensor([[3.0, 4.0]], dtype=torch.float64)  # ||ref|| = 5
    y = torch.tensor([[3.0, 4.5]])  # error (0, 0.5): ||e|| = 0.5
    e = error_metrics(y, ref)
    assert e["rel_fro"] == pytest.approx(0.1)
    assert e["max_abs"] == pytest.approx(0.5)
    assert e["sqnr_db"] == pytest.approx(20.0)  # 10 log10(25 / 0.25)
    assert e["cosine"] == pytest.approx((9 + 18) / (5 * math.hypot(3, 4.5)))
    assert e["nonfinite"] == 0 and not e["exact"]


def test_exact_output():
    ref = torch.randn(4, 8, dtype=torch.float64)
    e = error_metrics(ref.clone(), ref)
    assert e["rel_fro"] == 0 and e["exact"] and e["sqnr_db"] is None and e["cosine"] == pytest.approx(1.0)


def test_uniform_relative_scaling_error():
    ref = torch.randn(16, 32, dtype=torch.float64)
    e = error_metrics(ref * 1.01, ref)
    assert e["rel_fro"] == pytest.approx(0.01)
    assert e["sqnr_db"] == pytest.approx(40.0)


def test_nonfinite_counted_not_averaged():
    ref = torch.ones(2, 3, dtype=torch.float64)
    y = torch.ones(2, 3)
    y[0, 0], y[1, 2] = float("nan"), float("inf")
    e = error_metrics(y, ref)
    assert e["nonfinite"] == 2
    assert e["rel_fro"] is None and e["cosine"] is None and e["max_abs"] is None


def test_shape_mismatch():
    with pytest.raises(ValueError):
        error_metrics(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))


# ---- exact answers for every branch (mutation testing, docs/testing.md) -------------------------

def test_shape_mismatch_message():
    with pytest.raises(ValueError, match=r"^output shape \(1, 2\) != reference shape \(2, 1\)$"):
        error_metrics(torch.zeros(1, 2), torch.zeros(2, 1, dtype=torch.float64))


def test_low_precision_output_is_upcast_before_the_norms():
    """bf16 [2, 3, 6] against [2, 3, 6.5]: cosine 52 / (7 sqrt(55.25)); a norm taken in bf16 would be
    off by about 0.3 %."""
    e = error_metrics(torch.tensor([[2.0, 3.0, 6.0]], dtype=torch.bfloat16),
                      torch.tensor([[2.0, 3.0, 6.5]], dtype=torch.float64))
    assert e["cosine"] == pytest.approx(52 / (7 * math.sqrt(55.25)), rel=1e-12)
    assert e["rel_fro"] == pytest.approx(0.5 / math.sqrt(55.25), rel=1e-12) and e["abs_fro"] == 0.5


def test_float32_reference_is_upcast():
    e = error_metrics(torch.full((1, 3), 1.5), torch.ones(1, 3))  # error 0.5 each: rel 0.5 exactly
    assert e["rel_fro"] == pytest.approx(0.5, rel=1e-14) and "rel_fro_note" not in e


def test_nonfinite_notes_name_the_side():
    ref = torch.ones(2, 2, dtype=torch.float64)
    e = error_metrics(torch.tensor([[float("nan"), 1.0], [float("inf"), 1.0]]), ref)
    assert e["rel_fro_note"] == "2 non-finite output elements: no error figure" and "reference_nonfinite" not in e
    bad_ref = ref.clone()
    bad_ref[0, 0] = float("nan")
    e = error_metrics(torch.tensor([[float("nan"), 1.0], [1.0, 1.0]]), bad_ref)  # both: the output's count first
    assert e["rel_fro_note"] == "1 non-finite output elements: no error figure" and e["reference_nonfinite"] == 1
    e = error_metrics(torch.ones(2, 2), bad_ref)
    assert e["rel_fro_note"] == ("1 non-finite reference elements (non-finite weight or inputs): no error figure")


def test_relative_error_overflow_note():
    ref = torch.tensor([[5e-324, 0.0]], dtype=torch.float64)  # the smallest subnormal
    e = error_metrics(torch.tensor([[1e30, 0.0]], dtype=torch.float64), ref)
    assert e["rel_fro"] is None and e["abs_fro"] == pytest.approx(1e30)
    assert e["rel_fro_note"] == "relative error overflows a float64 (reference tiny against the error); see abs_fro"


def test_zero_reference_note_at_an_error_of_exactly_one():
    e = error_metrics(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2, dtype=torch.float64))
    assert e["abs_fro"] == 1.0 and e["rel_fro"] is None and e["cosine"] == 0.0
    assert e["rel_fro_note"] == "reference is all zeros: relative error undefined, see abs_fro"


def test_cosine_is_clamped_to_plus_minus_one():
    ref = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)  # its unit vector's self-product is 1 + 4 ulp
    assert error_metrics(ref.clone(), ref)["cosine"] == 1.0
    assert error_metrics(-ref, ref)["cosine"] == -1.0
