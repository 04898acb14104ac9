"""Numerical traps of the error metrics: no number that lies.

NaN / Inf are counted, never averaged away; an all-zero or zero-row reference gives finite,
documented values (never NaN); huge and tiny magnitudes neither overflow nor underflow.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from qbench.metrics import error_metrics
from qbench.results import finite_or_none

_FLOAT_KEYS = ("rel_fro", "abs_fro", "max_abs", "sqnr_db", "cosine")


def _assert_json_honest(e: dict) -> None:
    """Every float is finite or None: nothing becomes null silently in the result file."""
    for key in _FLOAT_KEYS:
        value = e[key]
        assert value is None or (isinstance(value, float) and math.isfinite(value)), (key, value)
    assert finite_or_none(e) == e
    json.dumps(e, allow_nan=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_one_nonfinite_output_is_counted_and_blanks_every_figure(bad):
    ref = torch.randn(64, 32, dtype=torch.float64)
    y = ref.float().clone()
    y[3, 7] = bad
    e = error_metrics(y, ref)
    assert e["nonfinite"] == 1 and e["exact"] is False
    assert all(e[k] is None for k in _FLOAT_KEYS)  # not a mean over the 2047 good elements
    assert "non-finite" in e["rel_fro_note"]
    _assert_json_honest(e)


def test_fp16_overflow_is_counted():
    ref = torch.full((2, 4), 1e5, dtype=torch.float64)
    y = ref.to(torch.float16)  # 1e5 > 65504: inf in fp16
    e = error_metrics(y, ref)
    assert e["nonfinite"] == 8 and e["rel_fro"] is None


def test_nonfinite_reference_is_counted_not_averaged():
    ref = torch.ones(3, 3, dtype=torch.float64)
    ref[1, 1] = float("nan")
    e = error_metrics(torch.ones(3, 3), ref)
    assert e["nonfinite"] == 0 and e["reference_nonfinite"] == 1
    assert all(e[k] is None for k in _FLOAT_KEYS) and "reference" in e["rel_fro_note"]
    _assert_json_honest(e)


def test_all_zero_reference_exact_zero_output():
    ref = torch.zeros(4, 8, dtype=torch.float64)
    e = error_metrics(torch.zeros(4, 8), ref)
    assert e["rel_fro"] == 0.0 and e["cosine"] == 1.0 and e["exact"] and e["abs_fro"] == 0.0
    assert e["sqnr_db"] is None
    _assert_json_honest(e)


def test_all_zero_reference_nonzero_output():
    ref = torch.zeros(4, 8, dtype=torch.float64)
    y = torch.zeros(4, 8)
    y[0, 0] = 3.0
    y[1, 1] = 4.0
    e = error_metrics(y, ref)
    assert e["rel_fro"] is None and "reference is all zeros" in e["rel_fro_note"]
    assert e["abs_fro"] == pytest.approx(5.0) and e["max_abs"] == pytest.approx(4.0)
    assert e["cosine"] == 0.0 and not e["exact"]
    _assert_json_honest(e)


def test_zero_output_nonzero_reference():
    ref = torch.ones(2, 2, dtype=torch.float64)
    e = error_metrics(torch.zeros(2, 2), ref)
    assert e["rel_fro"] == pytest.approx(1.0) and e["cosine"] == 0.0 and e["sqnr_db"] == pytest.approx(0.0)
    _assert_json_honest(e)


def test_reference_with_zero_rows_inside():
    """Zero rows (an all-zero activation row) only add their error to the norms."""
    ref = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[3.0, 4.0], [0.0, 0.5]])
    e = error_metrics(y, ref)
    assert e["rel_fro"] == pytest.approx(0.1) and e["sqnr_db"] == pytest.approx(20.0)
    assert e["cosine"] == pytest.approx(25 / (5 * math.hypot(5, 0.5)))
    _assert_json_honest(e)


def test_reference_with_no_rows():
    """M = 0: an empty [0, N] output against an empty reference is exact, not NaN."""
    e = error_metrics(torch.empty(0, 16), torch.empty(0, 16, dtype=torch.float64))
    assert e["nonfinite"] == 0 and e["rel_fro"] == 0.0 and e["cosine"] == 1.0 and e["max_abs"] == 0.0
    _assert_json_honest(e)


def test_opposite_output_has_cosine_minus_one():
    ref = torch.randn(8, 8, dtype=torch.float64)
    e = error_metrics(-ref.float(), ref)
    assert e["cosine"] == pytest.approx(-1.0, abs=1e-7) and e["rel_fro"] == pytest.approx(2.0, rel=1e-6)


def test_cosine_never_past_one():
    ref = torch.randn(257, 129, dtype=torch.float64) * 1e3
    e = error_metrics(ref.clone(), ref)
    assert -1.0 <= e["cosine"] <= 1.0


def test_huge_magnitudes_do_not_overflow():
    """Squares of 1e200 overflow float64; the scaled norms do not (rel_fro 1 %, SQNR 40 dB)."""
    ref = torch.full((4, 4), 1e200, dtype=torch.float64)
    e = error_metrics(ref * 1.01, ref)
    assert e["rel_fro"] == pytest.approx(0.01) and e["sqnr_db"] == pytest.approx(40.0)
    assert e["cosine"] == pytest.approx(1.0)
    _assert_json_honest(e)


def test_tiny_magnitudes_do_not_underflow():
    """Squares of 1e-200 underflow to 0; an error of 1 % must not read as exact or as NaN."""
    ref = torch.full((4, 4), 1e-200, dtype=torch.float64)
    e = error_metrics(ref * 1.01, ref)
    assert not e["exact"] and e["rel_fro"] == pytest.approx(0.01) and e["sqnr_db"] == pytest.approx(40.0)
    assert e["cosine"] == pytest.approx(1.0)
    _assert_json_honest(e)
