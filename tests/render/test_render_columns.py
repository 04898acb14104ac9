"""Tests for qbench.render.columns: getters over ok, skipped, failed and non-finite rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from qbench.render.columns import COLUMNS, DASH, UnknownColumnError, default_columns, resolve_columns
from qbench.results import read_results

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def cuda():
    return read_results(FIXTURES / "cuda_run1.json")


@pytest.fixture(scope="module")
def cpu():
    return read_results(FIXTURES / "cpu.json")


def _row(doc, scheme, m):
    return next(r for r in doc["rows"] if r["scheme"] == scheme and r["m"] == m)


def test_every_column_has_units_or_is_a_label_and_handles_every_fixture_row(cuda, cpu):
    for col in COLUMNS.values():
        assert col.header and col.key
        for row in cuda["rows"] + cpu["rows"]:
            assert isinstance(col.cell(row), str)
            col.value(row)  # never raises


@pytest.mark.parametrize("key", list(COLUMNS))
def test_empty_row_shows_dash(key):
    assert COLUMNS[key].cell({}) == DASH


def test_known_values(cuda):
    bf16 = _row(cuda, "bf16", 1)
    assert COLUMNS["stored_mib"].cell(bf16) == "32.00"
    assert COLUMNS["bits_per_weight"].cell(bf16) == "16.00"
    assert COLUMNS["cold"].cell(bf16) == "11.0"
    assert COLUMNS["cold"].value(bf16) == 11.0
    assert COLUMNS["rel_err"].cell(bf16) == "2.30e-03"
    assert COLUMNS["sqnr"].cell(bf16) == "52.8"  # -20 log10(0.0023)
    assert COLUMNS["gflop"].value(bf16) == pytest.approx(2 * 4096 * 4096 * 1e-9)
    nf4 = _row(cuda, "nf4-bnb", 1)
    assert COLUMNS["meta_pct"].value(nf4) == pytest.approx(100 * 267268 / (8388608 + 267268))
    assert COLUMNS["kernels"].cell(nf4) == "kgemm_4bit_inference_naive, kDequantizeBlockwise"
    assert COLUMNS["cold_cv"].value(nf4) == pytest.approx(100 * nf4["latency_us"]["cold"]["cv"])


def test_skipped_failed_and_nonfinite_rows(cuda):
    skipped = _row(cuda, "int4-weight-only", 1)
    assert COLUMNS["cold"].cell(skipped) == DASH
    assert COLUMNS["stored_mib"].cell(skipped) == DASH
    assert COLUMNS["status"].cell(skipped) == "skipped"
    assert "fbgemm" in COLUMNS["reason"].cell(skipped)
    failed = _row(cuda, "w8a8-dynamic", 1)
    assert COLUMNS["cold"].cell(failed) == DASH and COLUMNS["status"].cell(failed) == "failed"
    bad = _row(cuda, "fp16", 512)
    assert COLUMNS["rel_err"].cell(bad) == "NaN/Inf×12"
    assert COLUMNS["rel_err"].value(bad) is None
    assert COLUMNS["nonfinite"].value(bad) == 12


def test_default_columns_cuda_vs_cpu(cuda, cpu):
    cols = default_columns(cuda["rows"])
    assert cols == ["scheme", "m", "stored_mib", "meta_pct", "bits_per_weight", "ai", "roofline_us",
                    "cold", "warm", "eager", "rel_err", "status"]
    cpu_cols = default_columns(cpu["rows"])
    assert "cpu" in cpu_cols
    assert not {"cold", "warm", "eager", "kernel"} & set(cpu_cols)


def test_cpu_time_never_under_a_cuda_header(cpu):
    row = _row(cpu, "fp32", 1)
    assert all(COLUMNS[m].value(row) is None for m in ("cold", "warm", "eager", "kernel"))
    assert COLUMNS["cpu"].value(row) == 95.0 and COLUMNS["cpu"].header == "cpu µs"


def test_unknown_column_names_bad_and_allowed():
    with pytest.raises(UnknownColumnError) as exc:
        resolve_columns(["scheme", "latency"], [])
    msg = str(exc.value)
    assert "'latency'" in msg and "cold" in msg and "\n" not in msg
