"""Tests for qbench.render: every format over the same rows, csv round trip, header."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from qbench.render import COLUMNS, FORMATS, UnknownFormatError, render, render_header
from qbench.results import read_results

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CUDA = read_results(FIXTURES / "cuda_run1.json")
CPU = read_results(FIXTURES / "cpu.json")

COLUMN_SETS = [None, ["scheme", "m", "cold", "rel_err"], list(COLUMNS)]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("columns", COLUMN_SETS, ids=["default", "few", "all"])
def test_every_format_and_column_set(fmt, columns):
    text = render(CUDA.rows, columns, fmt)
    assert text and not text.endswith("\n")
    assert "bf16" in text and "nf4-bnb" in text
    if fmt not in ("csv", "json", "tsv"):
        assert "int4-weight-only" in text


def test_markdown_is_pipe():
    assert render(CUDA.rows, fmt="markdown") == render(CUDA.rows, fmt="pipe")


def test_table_shows_reasons_as_footnotes_after_a_blank_line():
    text = render(CUDA.rows, fmt="github")
    table, notes = text.split("\n\n")
    assert "fbgemm" not in table
    assert "int4-weight-only (M=1,16,512) skipped: torchao Int4WeightOnlyConfig" in notes
    assert "w8a8-dynamic (M=1) failed: RuntimeError" in notes
    assert "NaN/Inf×12" in table


def test_reason_column_replaces_footnotes():
    text = render(CUDA.rows, ["scheme", "m", "status", "reason"], "simple")
    assert "\n\n" not in text and "fbgemm" in text


def test_csv_round_trips():
    """Every column of the CSV as a number or text worked out by hand from the row's inputs (bf16,
    M = 1, 4096 x 4096, the fixture's cold median 11.0 µs and rel_fro 0.0023; 4,310 GB/s measured),
    and a skipped row with only its identity filled."""
    text = render(CUDA.rows, list(COLUMNS), "csv")
    back = list(csv.DictReader(io.StringIO(text)))
    assert len(back) == len(CUDA.rows) and all(list(rec) == list(COLUMNS) for rec in back)
    by_key = {(rec["scheme"], rec["m"]): rec for rec in back}
    bf16 = by_key[("bf16", "1")]
    assert float(bf16["stored_mib"]) == 32.0  # 33,554,432 B / 2^20
    assert float(bf16["bits_per_weight"]) == 16.0 and bf16["nominal_bits"] == "16"
    assert float(bf16["gflop"]) == 0.033554432  # 2 x 4096 x 4096 / 1e9
    assert float(bf16["min_mib"]) == 32.015625  # (4096 x 2 + 33,554,432 + 4096 x 2) / 2^20
    assert float(bf16["ai"]) == pytest.approx(33_554_432 / 33_570_816, rel=1e-15)
    assert float(bf16["roofline_us"]) == pytest.approx(33_570_816 / 4310e3, rel=1e-12)  # bytes / (GB/s x 1e3) = µs
    assert bf16["bound"] == "memory" and bf16["status"] == "ok" and bf16["reason"] == ""
    assert float(bf16["cold"]) == 11.0 and float(bf16["rel_err"]) == 0.0023
    assert float(bf16["sqnr"]) == pytest.approx(-20 * math.log10(0.0023), rel=1e-12)
    assert bf16["stream"] == "" and bf16["cpu"] == ""  # a file written before stream; a CUDA row
    assert (bf16["host_sync"], bf16["graph_ok"]) == ("False", "True")
    skipped = by_key[("int4-weight-only", "1")]
    assert {k for k, v in skipped.items() if v} == {
        "scheme", "base_scheme", "library", "mode", "device", "m", "k", "n", "weight_dtype", "activation_dtype",
        "compute_dtype", "nominal_bits", "gflop", "status", "reason"}
    assert skipped["status"] == "skipped" and "fbgemm" in skipped["reason"]


def test_csv_and_json_carry_reason_by_default():
    assert render(CUDA.rows, fmt="csv").splitlines()[0].endswith(",status,reason")
    records = json.loads(render(CUDA.rows, fmt="json"))
    skipped = [r for r in records if r["status"] == "skipped"]
    assert len(skipped) == 3 and all("fbgemm" in r["reason"] for r in skipped)
    bad = next(r for r in records if r["scheme"] == "fp16" and r["m"] == 512)
    assert bad["rel_err"] is None


def test_cpu_table_has_cpu_column_only():
    text = render(CPU.rows)
    header = text.splitlines()[0]
    assert "cpu µs" in header
    assert "cold" not in header and "warm" not in header and "eager" not in header


def test_unknown_format():
    with pytest.raises(UnknownFormatError) as exc:
        render(CUDA.rows, fmt="excel")
    assert "'excel'" in str(exc.value) and "github" in str(exc.value) and "csv" in str(exc.value)


def test_empty_rows():
    assert "scheme" in render([], fmt="simple")
    assert render([], fmt="json") == "[]"


def test_header_cuda_cpu_and_incomplete():
    h = render_header(CUDA)
    assert "NVIDIA H200" in h and "torch 2.11.0+cu130" in h and "torchao 0.18.0" in h
    assert "bitsandbytes 0.50.2" in h and "CUDA cold, warm, eager, kernel" in h
    assert len(h.splitlines()) == 3  # the third: where the weight came from (issue 24)
    assert h.splitlines()[2] == "weight: seeded Gaussian N(0, 1/K) (synthetic; a file written before rows said their weight)"
    c = render_header(CPU)
    assert "CPU" in c and "no CUDA" in c and "bitsandbytes not installed" in c
    partial = dict(CUDA, complete=False)
    lines = render_header(partial).splitlines()
    assert len(lines) == 4 and "WARNING" in lines[3] and "complete: false" in lines[3]


def test_header_names_stream_per_device():
    stream = read_results(FIXTURES / "cuda_stream.json")
    cpu_stream = read_results(FIXTURES / "cpu_stream.json")
    assert render_header(stream).splitlines()[1] == (
        "times: stream (graph over weight copies > L2) + CUDA cold, warm, eager, kernel; µs per call, median")
    line = render_header(cpu_stream).splitlines()[1]
    assert line == "times: stream (copies > LLC) + cpu; CPU run, no CUDA timings; µs per call, median"
    assert "CUDA stream" not in line
    assert render_header({"rows": []}).splitlines()[1] == "times: none measured"


def test_a_wrapped_cell_never_cuts_a_scheme_label():
    """A wrapping column broke a long label mid-word (``fp8-dynamic[kernel_preferenc`` / ``e=mslk]``):
    it now breaks before ``[`` and after ``,``, and widens only for a word longer than its width."""
    from qbench.render.columns import Column
    from qbench.render.table import render_table

    col = Column("others", "others", lambda r: r["others"], width=24)
    text = render_table([{"others": "fp8-dynamic[kernel_preference=mslk] 1.24×, fp8-dynamic 2.01×"}], [col])
    lines = [line.strip() for line in text.splitlines()[2:]]
    assert lines[:2] == ["fp8-dynamic", "[kernel_preference=mslk]"] and max(map(len, text.splitlines())) <= 24
    assert "fp8-dynamic 2.01×" in " ".join(lines)
    short = render_table([{"others": "int8-bnb 1.2×"}], [col])
    assert short.splitlines()[2].strip() == "int8-bnb 1.2×"  # a cell that fits is shown as it is
