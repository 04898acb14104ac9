"""Tests for qbench.render.columns: getters over ok, skipped, failed and non-finite rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from qbench.render.columns import COLUMNS, DASH, UnknownColumnError, default_columns, resolve_columns
from qbench.results import read_results
from tests.rows import typed_row

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def cuda():
    return read_results(FIXTURES / "cuda_run1.json")


@pytest.fixture(scope="module")
def cpu():
    return read_results(FIXTURES / "cpu.json")


def _row(doc, scheme, m):
    return next(r for r in doc.rows if r.scheme == scheme and r.m == m)


#: What a row knows before it is built (qbench.measure.base_row): the only columns a skipped row fills.
IDENTITY = {"scheme", "base_scheme", "library", "mode", "device", "m", "k", "n", "weight_dtype", "activation_dtype",
            "compute_dtype", "nominal_bits", "gflop", "status", "reason"}


def test_every_column_handles_every_fixture_row(cuda, cpu):
    """A missing value is a dash and a dash is a missing value, in every column of every row, except
    the error columns of a row with non-finite outputs, which count them (``NaN/Inf×12``)."""
    for col in COLUMNS.values():
        assert col.header and col.key
        for row in cuda.rows + cpu.rows:
            value, cell = col.value(row), col.cell(row)
            if (col.key, row.scheme, row.m) == ("rel_err", "fp16", 512):
                assert value is None and cell == "NaN/Inf×12"
                continue
            assert (value is None) == (cell == DASH), (col.key, row.scheme, row.m, value, cell)


def test_a_skipped_row_fills_only_the_identity_columns(cuda, cpu):
    for doc in (cuda, cpu):
        for row in (r for r in doc.rows if r.status == "skipped"):
            filled = {key for key, col in COLUMNS.items() if col.value(row) is not None}
            assert filled == IDENTITY, row.scheme


@pytest.mark.parametrize("key", [k for k in COLUMNS if k not in ("scheme", "m", "k", "n", "status")])
def test_a_row_with_only_its_identity_shows_dash(key):
    assert COLUMNS[key].cell(typed_row(scheme="x", m=1, k=8, n=8, status="skipped")) == DASH


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
    # nf4 at 4096 x 4096 (results/h200/decode.json): absmax 262,144 B + code 64 + offset 4 + state2 absmax 4,096 + code 1,024
    assert COLUMNS["meta_pct"].value(nf4) == pytest.approx(100 * 267332 / (8388608 + 267332))
    assert COLUMNS["kernels"].cell(nf4) == "kgemm_4bit_inference_naive, kDequantizeBlockwise"
    assert COLUMNS["cold_cv"].value(nf4) == pytest.approx(100 * nf4.latency_us["cold"].cv)


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
    cols = default_columns(cuda.rows)
    assert cols == ["scheme", "m", "stored_mib", "meta_pct", "bits_per_weight", "ai", "roofline_us",
                    "cold", "warm", "eager", "rel_err", "status"]
    cpu_cols = default_columns(cpu.rows)
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


# ---- stream and the HBM floor ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def stream():
    return read_results(FIXTURES / "cuda_stream.json")


@pytest.fixture(scope="module")
def cpu_stream():
    return read_results(FIXTURES / "cpu_stream.json")


def test_method_columns_come_from_the_registry():
    from qbench.timing import registry

    for name in registry.LAYER_METHODS:
        info = registry.METHODS[name]
        for key in (name, f"{name}_cv", f"{name}_p10", f"{name}_p90"):
            assert key in COLUMNS, key
        assert COLUMNS[name].header == f"{name} µs" and info.includes in COLUMNS[name].help
    for name in registry.STEP_METHODS:  # a model step's methods are the step table's (qbench.step.view)
        assert not {name, f"{name}_cv", f"{name}_p10", f"{name}_p90"} & set(COLUMNS), name


def test_default_columns_with_stream(stream, cpu_stream):
    tail = lambda cols: cols[cols.index("roofline_us") + 1:]  # noqa: E731
    assert tail(default_columns(stream.rows)) == ["stream", "cold", "warm", "eager", "hbm_floor_us", "floor_pct",
                                                     "rel_err", "status"]
    assert tail(default_columns(cpu_stream.rows)) == ["stream", "cpu", "rel_err", "status"]
    assert tail(default_columns([])) == ["stream", "cold", "warm", "eager", "hbm_floor_us", "floor_pct",
                                         "rel_err", "status"]


def test_stream_and_floor_values(stream, cpu_stream):
    bf16 = _row(stream, "bf16", 1)
    floor = 32 * 2**20 / 4310e3  # stored bytes over the fixture's measured 4310 GB/s, in µs
    assert COLUMNS["stream"].cell(bf16) == "9.40" and COLUMNS["stream"].value(bf16) == 9.4
    assert COLUMNS["hbm_floor_us"].value(bf16) == pytest.approx(floor)
    assert COLUMNS["hbm_floor_us"].header == "HBM floor µs" and COLUMNS["floor_pct"].header == "floor %"
    assert COLUMNS["floor_pct"].value(bf16) == pytest.approx(100 * floor / 9.4)
    assert COLUMNS["stream_copies"].value(bf16) == 8  # 4 x 60 MiB of L2 over 32 MiB copies: 7.5 -> 8
    assert COLUMNS["achieved_method"].value(bf16) == "stream"
    sync = _row(stream, "w8a8-dynamic", 1)
    assert COLUMNS["stream"].cell(sync) == DASH and COLUMNS["floor_pct"].cell(sync) == DASH
    assert COLUMNS["achieved_method"].value(sync) == "cold"
    assert COLUMNS["compile_s"].value(_row(stream, "int8-weight-only+compiled", 1)) == 14.2
    cpu_fp32 = _row(cpu_stream, "fp32", 1)
    assert COLUMNS["stream"].value(cpu_fp32) == 251.0 and COLUMNS["cpu"].value(cpu_fp32) == 60.9
    assert COLUMNS["hbm_floor_us"].cell(cpu_fp32) == DASH
    assert COLUMNS["stream_copies"].value(cpu_fp32) == 32  # 4 x 32 MiB of LLC over 4 MiB copies


def test_noisy_stream_cell_is_marked():
    from qbench.render import render

    row = typed_row(scheme="bf16", m=1, k=8, n=8, status="ok",
                    latency_us={"stream": {"median": 9.4, "p10": 5.0, "p90": 15.0, "cv": 0.4}})
    assert COLUMNS["stream"].cell(row) == "9.40*"
    assert "* noisy" in render([row], ["scheme", "stream", "status"], "simple")
