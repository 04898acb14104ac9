"""compare on hand-built documents: every field of every record kind, the notes word for word
(mutation testing, docs/testing.md). The rules it applies (verdict, capture failure, the unusable
line) are tested in tests/test_judge.py."""

from __future__ import annotations

import pytest

from qbench.judge import UNUSABLE
from qbench.readers.compare import compare_docs, render_compare
from qbench.row import reason_record
from tests.rows import make_row


def _stats(median, lo=None, hi=None):
    s = {"median": median, "n": 20}
    if lo is not None:
        s["p10"] = lo
    if hi is not None:
        s["p90"] = hi
    return s


def _row(scheme, m=1, stream=None, status="ok", reason=None, rel=0.01, reasons=None, **extra):
    return make_row(**{"scheme": scheme, "m": m, "k": 64, "n": 32, "status": status, "reason": reason,
                       "error": {"rel_fro": rel} if rel is not None else None,
                       "latency_us": {"stream": stream}, "latency_reasons": reasons or {}, **extra})


def test_every_record_kind_field_by_field():
    a = {"rows": [_row("fast", stream=_stats(10.0, 9.9, 10.1), rel=0.01),
                  _row("slow", stream=_stats(10.0, 9.9, 10.1), rel=0.02),
                  _row("same", stream=_stats(10.0, 9.0, 11.0)),
                  _row("gone"),
                  _row("both-failed", stream=None, status="failed", reason="RuntimeError: x"),
                  _row("one-untimed", stream=_stats(5.0, 4.9, 5.1))]}
    b = {"rows": [_row("fast", stream=_stats(5.0, 4.9, 5.1), rel=0.015),
                  _row("slow", stream=_stats(10.6, 10.5, 10.7), rel=0.01),
                  _row("same", stream=_stats(10.5, 10.2, 12.0), rel=None),
                  _row("both-failed", stream=None, status="failed", reason="RuntimeError: x"),
                  _row("one-untimed", stream=None, status="skipped", reason=None),
                  _row("new", m=16, stream=_stats(1.0))]}
    recs = {r["scheme"]: r for r in compare_docs(a, b, "stream")}  # the default threshold, 1.05
    assert [r["scheme"] for r in compare_docs(a, b, "stream")] == [
        "fast", "slow", "same", "gone", "both-failed", "one-untimed", "new"]
    assert recs["fast"] == {"scheme": "fast", "m": 1, "k": 64, "n": 32, "method": "stream", "a_us": 10.0, "b_us": 5.0, "speedup": 2.0,
                            "a_rel_fro": 0.01, "b_rel_fro": 0.015, "rel_fro_diff": pytest.approx(0.005, rel=1e-12),
                            "verdict": "faster", "note": None, "regression": False, "fails": []}
    assert recs["slow"]["verdict"] == "slower" and recs["slow"]["speedup"] == pytest.approx(10.0 / 10.6)
    assert recs["slow"]["regression"] is True and recs["slow"]["rel_fro_diff"] == pytest.approx(-0.01)
    assert recs["same"]["verdict"] == "same" and recs["same"]["rel_fro_diff"] is None
    assert recs["same"]["b_rel_fro"] is None and recs["same"]["regression"] is False
    assert recs["gone"]["verdict"] == "only in A" and recs["gone"]["b_us"] is None
    assert recs["new"] == {"scheme": "new", "m": 16, "k": 64, "n": 32, "method": "stream", "a_us": None, "b_us": 1.0, "speedup": None,
                           "a_rel_fro": None, "b_rel_fro": 0.01, "rel_fro_diff": None, "verdict": "only in B",
                           "note": None, "regression": False, "fails": []}
    assert recs["gone"]["fails"] == ["missing from B"] and recs["one-untimed"]["fails"] == ["skipped in B"]
    assert recs["slow"]["fails"] == [] and recs["both-failed"]["fails"] == []  # failed in A too: not B's doing
    assert recs["both-failed"]["verdict"] == "not comparable"
    assert recs["both-failed"]["note"] == "both failed: RuntimeError: x"
    assert recs["one-untimed"]["note"] == "B: skipped: no reason given" and recs["one-untimed"]["a_us"] == 5.0


def test_not_comparable_notes_word_for_word():
    a = {"rows": [_row("x", stream=None, reasons={"stream": reason_record("other", "not timed on this device")}),
                  _row("y", stream=None)]}
    b = {"rows": [_row("x", stream=None, status="failed", reason="boom"), _row("y", stream=None)]}
    x, y = compare_docs(a, b, "stream")
    assert x["note"] == "A: no stream latency (not timed on this device); B: failed: boom"
    assert y["note"] == "both no stream latency"
    host = {"rows": [_row("h", stream=None,
                          reasons={"stream": reason_record("not-attempted", "not attempted: host sync")})]}
    (h,) = compare_docs(host, host, "stream")
    assert h["note"] == f"both {UNUSABLE}"


def test_threshold_default_and_boundary():
    a = {"rows": [_row("x", stream=_stats(1.0, 0.99, 1.01))]}
    for median, regression in ((1.05, False), (1.051, True)):
        b = {"rows": [_row("x", stream=_stats(median, median - 0.01, median + 0.01))]}
        (rec,) = compare_docs(a, b, "stream")
        assert rec["verdict"] == "slower" and rec["regression"] is regression


def test_tensor_parallel_rows_carry_their_sharding():
    a = {"rows": [_row("x", stream=_stats(1.0), tp_size=2, split="row"), _row("x", stream=_stats(1.0))]}
    recs = compare_docs(a, a, "stream")
    assert recs[0]["tp_size"] == 2 and recs[0]["split"] == "row" and recs[0]["verdict"] == "same"
    assert "tp_size" not in recs[1] and "split" not in recs[1]


# ---- run_compare: method resolution, the summary line, warnings ---------------------------------

def _cli(*argv):
    from qbench.readers import compare
    from tests.conftest import run_subcommand

    return run_subcommand(compare, "compare", *argv)


FIX = __import__("pathlib").Path(__file__).parents[1] / "fixtures"


def test_summary_line_counts_by_hand(capsys):
    """run3 against run1 (tests/fixtures/make_fixtures.py): int8-weight-only 1.45x slower at 3 M,
    nf4-bnb 1.3x faster at 3, tf32 only in A (3), int8-weight-only+compiled only in B (3),
    int4-weight-only skipped in both (3) and w8a8-dynamic failed at M=1 in both: 4 not comparable;
    the other 14 of run1's 27 rows the same."""
    # --wide: each prose line whole (the default view wraps them at 120 characters)
    assert _cli(str(FIX / "cuda_run1.json"), str(FIX / "cuda_run3_slower.json"), "--wide") == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines.pop() == ("FAILED: 3 row(s): tf32 M=1 (missing from B), tf32 M=16 (missing from B), "
                           "tf32 M=512 (missing from B)")  # ok in A, gone from B: fails the compare (issue 24)
    assert lines[-2] == ("cold median; speed-up = A time / B time (> 1: B is faster); [p10, p90] overlap = same. "
                         "14 same, 3 only in A, 3 slower, "
                         "4 not comparable, 3 faster, 3 only in B. (no stream latency in this file: an older "
                         "result, or stream not timed; using cold times)")
    # 1.45x A's time is a speed-up of 1 / 1.45 = 0.69; the threshold 1.05 is a speed-up of 1 / 1.05 = 0.952
    assert lines[-1].startswith("REGRESSION: 3 row(s) slower than A by more than 1.05× its time (speed-up below "
                                "0.952×): int8-weight-only M=1 (speed-up 0.6")
    assert ", int8-weight-only M=16 (speed-up 0.6" in lines[-1] and ", int8-weight-only M=512 (speed-up 0.6" in lines[-1]
    assert err == ""


@pytest.mark.parametrize("a, b, lacks", [("cuda_run1.json", "cuda_stream.json", "A has"),
                                         ("cuda_stream.json", "cuda_run1.json", "B has")])
def test_one_file_without_stream_compares_cold(capsys, a, b, lacks):
    _cli(str(FIX / a), str(FIX / b), "--wide")  # the summary line whole
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cold median; speed-up")]
    assert len(summary) == 1 and summary[0].endswith(f"({lacks} no stream latency; comparing cold times)")


def test_both_files_without_stream_name_both(tmp_path, capsys):
    from qbench.results import write_results

    cold_cpu = {"median": 5.0, "p10": 4.9, "p90": 5.1, "mean": 5.0, "cv": 0.01, "n": 20}
    row = {"scheme": "x", "m": 1, "k": 8, "n": 8, "status": "ok", "error": {"rel_fro": 0.01}}
    doc_a = {"schema_version": 1, "complete": True, "rows": [{**row, "latency_us": {"cold": cold_cpu, "cpu": cold_cpu}}]}
    doc_b = {"schema_version": 1, "complete": False, "rows": [{**row, "latency_us": {"cpu": cold_cpu}}]}
    write_results(tmp_path / "a.json", doc_a, force=True)
    write_results(tmp_path / "b.json", doc_b, force=True)
    assert _cli(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--wide") == 0  # the summary line whole
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == ("cpu median; speed-up = A time / B time (> 1: B is faster); [p10, p90] overlap = same. 1 same. "
                                    "(A and B have no stream latency; comparing cpu times)")
    assert err == (f"warning: {tmp_path / 'b.json'} is incomplete (\"complete\": false, 1 rows of 1 schemes): "
                   "the run was interrupted or is still going; schemes may be missing\n")


def test_a_file_compared_with_itself_has_no_note(capsys):
    """cuda_stream.json: 8 schemes x 2 M; w8a8-dynamic and int8-bnb sync with the host (no stream
    time): 4 not comparable, the other 12 the same; both files have stream, so no note."""
    assert _cli(str(FIX / "cuda_stream.json"), str(FIX / "cuda_stream.json")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "stream median; speed-up = A time / B time (> 1: B is faster); [p10, p90] overlap = same. 12 same, "
        "4 not comparable.")


def test_a_cpu_file_and_a_cuda_file_share_no_method(capsys):
    """cpu.json (5 schemes x 2 M, 1024 x 1024) and cuda_run1.json (27 rows, 4096 x 4096): no row in
    common and no method both have. Issue 24: another device is refused; with --allow-other-machine,
    no row in common is exit 2 too (a CI gate on it must not pass silently)."""
    a, b = str(FIX / "cpu.json"), str(FIX / "cuda_run1.json")
    assert _cli(a, b) == 2
    assert "ran on different machines (device: cpu (A) vs cuda (B))" in capsys.readouterr().err
    assert _cli(a, b, "--allow-other-machine") == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"qbench compare: no row in common between A ({a}) and B ({b}) (rows match by "
                                 "scheme, M, K, N)\n")


def test_a_tensor_parallel_row_without_a_split():
    (rec,) = compare_docs({"rows": [_row("x", stream=_stats(1.0), tp_size=1)]},
                          {"rows": [_row("x", stream=_stats(1.0), tp_size=1)]}, "stream")
    assert rec["tp_size"] == 1 and rec["split"] is None


def test_speed_up_column_and_a_threshold_not_above_zero(tmp_path, capsys):
    """The table's ratio is the speed-up A/B, labelled so; --threshold is a factor on A's time and
    must be > 0 (its speed-up, 1/threshold, is printed with a regression)."""
    from qbench.readers.compare import render_compare
    from qbench.results import write_results

    a = {"rows": [_row("x", stream=_stats(10.0, 9.9, 10.1))]}
    b = {"rows": [_row("x", stream=_stats(8.0, 7.9, 8.1))]}
    (rec,) = compare_docs(a, b, "stream")
    assert rec["speedup"] == 10.0 / 8.0 and rec["verdict"] == "faster"
    table = render_compare([rec], "stream", wide=True)
    assert "speed-up vs A (A/B)" in table and "1.250×" in table and "B/A" not in table
    narrow_table = render_compare([rec], "stream")  # a terminal table without --wide: the short header
    assert narrow_table.splitlines()[0].split()[:9] == ["scheme", "M", "A", "µs", "B", "µs", "speed-up", "Δ", "err"]
    assert "1.250×" in narrow_table
    write_results(tmp_path / "a.json", {"schema_version": 1, "complete": True, **a}, force=True)
    for bad in ("0", "-1", "nan"):
        assert _cli(str(tmp_path / "a.json"), str(tmp_path / "a.json"), "--threshold", bad) == 2
        err = capsys.readouterr().err
        assert err.startswith("qbench compare: --threshold must be > 0") and err.count("\n") == 1


def test_a_sweep_compare_shows_each_rows_shape():
    """Two shapes at one scheme and M (a sweep file) were two rows the table could not tell apart: K and N are shown
    when the records hold more than one shape, and not otherwise."""
    a = {"rows": [_row("x", stream=_stats(10.0, 9.9, 10.1)), _row("x", stream=_stats(20.0, 19.9, 20.1), k=128)]}
    records = compare_docs(a, a, "stream")
    table = render_compare(records, "stream")
    header = table.splitlines()[0].split()
    assert header[:4] == ["scheme", "M", "K", "N"] and {r["k"] for r in records} == {64, 128}
    assert "K" not in render_compare(records[:1], "stream").splitlines()[0].split()
    # the REGRESSION and FAILED lines name each row's shape too, and only where there are several
    from qbench.readers.compare import LAYER, _where

    assert [_where(LAYER, records)(r) for r in records] == ["x M=1 64×32", "x M=1 128×32"]
    assert _where(LAYER, records[:1])(records[0]) == "x M=1"
