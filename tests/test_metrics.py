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
