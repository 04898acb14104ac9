"""Tensor-parallel rows keep their identity (scheme, M, K, N, tp_size, split) in every reader:
compare, recommend, crossover and the tables (issue 12 item 1)."""

from __future__ import annotations

from qbench.readers import compare, recommend
from qbench.readers import report
from qbench.render import render
from qbench.render.columns import default_columns
from qbench.results import ResultDoc
from tests.rows import make_row


def _row(scheme, m, tp, split, median, rel=0.003):
    stats = {"median": median, "p10": median * 0.99, "p90": median * 1.01, "mean": median, "cv": 0.01, "n": 20}
    return make_row(**{"scheme": scheme, "base_scheme": scheme, "m": m, "k": 4096, "n": 4096, "device": "cpu",
            "status": "ok", "reason": None, "tp_size": tp, "split": split,
            "collective": {"column": "all_gather", "row": "all_reduce"}.get(split),
            "latency_us": {"cpu": stats}, "latency_reasons": {}, "local_gemm_us": stats, "collective_us": None,
            "end_to_end_us": stats, "error": {"rel_fro": rel, "nonfinite": 0}, "stored_bytes": 33554432 // tp})


ROWS = [_row("bf16", 1, 1, "none", 100.0), _row("bf16", 1, 2, "column", 60.0), _row("bf16", 1, 2, "row", 70.0),
        _row("fp32", 1, 1, "none", 180.0, 1e-7), _row("fp32", 1, 2, "column", 95.0, 1e-7),
        _row("fp32", 1, 2, "row", 140.0, 1e-7)]
DOC = {"schema_version": 2, "rows": ROWS, "env": {}, "scenario": {"name": "tp"}}


def test_compare_of_a_tp_file_with_itself_keeps_every_row():
    out = compare.compare_docs(DOC, DOC, method="cpu")
    assert len(out) == len(ROWS)
    assert {(r["scheme"], r["tp_size"], r["split"]) for r in out} == {(r["scheme"], r["tp_size"], r["split"])
                                                                      for r in ROWS}
    assert all(r["verdict"] == "same" for r in out)


def test_recommend_picks_per_tp_size_and_split():
    rec = recommend.recommend(DOC, max_rel_err=0.01, method="cpu")
    picks = {(g["tp_size"], g["split"]): (g["pick"]["scheme"], g["pick"]["latency_us"]) for g in rec["by_m"]}
    # within each sharding, the fastest under the budget: bf16 everywhere except column, where fp32 is
    # slower (95 vs 60); hand-read from ROWS
    assert picks == {(1, "none"): ("bf16", 100.0), (2, "column"): ("bf16", 60.0), (2, "row"): ("bf16", 70.0)}


def test_crossover_compares_with_the_baseline_at_the_same_sharding():
    out = report.crossover(DOC, baseline="bf16", method="cpu")
    by = {(r["tp_size"], r["split"]): r for r in out}
    assert set(by) == {(1, "none"), (2, "column"), (2, "row")}
    assert by[(2, "column")]["best_speedup"] == 60.0 / 95.0  # not 100 / 95 (the unsharded bf16)


def test_tables_show_the_sharding():
    rows = ResultDoc.of(DOC).rows
    cols = default_columns(rows)
    assert cols[:5] == ["scheme", "m", "tp_size", "split", "collective"]
    text = render(rows, columns=["scheme", "tp_size", "split"])
    assert "column" in text and "row" in text and "none" in text


def test_compare_and_by_format_show_the_sharding():
    """Three rows of one scheme at tp 1, tp 2 column and tp 2 row: compare and recommend --by-format
    print tp and split, so the three lines do not read alike."""
    from qbench.readers.compare import compare_docs, render_compare
    from qbench.readers.recommend import by_format, render_by_format
    from tests.rows import make_row, stats

    def row(tp, split, us):
        return make_row(scheme="int8-weight-only", m=1, k=64, n=64, status="ok", tp_size=tp, split=split,
                        weight_dtype="int8", library="torchao", error={"rel_fro": 0.01, "nonfinite": 0},
                        latency_us={"stream": stats(us)}, dispatch=None)

    doc = {"scenario": {"name": "t"}, "rows": [row(1, "none", 40.0), row(2, "column", 500.0), row(2, "row", 590.0)]}
    lines = render_compare(compare_docs(doc, doc, "stream", 1.05), "stream").splitlines()
    assert lines[0].split()[:4] == ["scheme", "M", "tp", "split"]
    assert [l.split()[2:4] for l in lines[2:]] == [["1", "none"], ["2", "column"], ["2", "row"]]
    table = render_by_format(by_format(doc, "stream"), "stream", "bf16").splitlines()
    assert table[0].split()[:3] == ["M", "tp", "split"]
    assert sorted(tuple(l.split()[1:3]) for l in table[2:]) == [("1", "none"), ("2", "column"), ("2", "row")]
