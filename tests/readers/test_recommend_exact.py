"""recommend and summary_rows on hand-built documents: TP groups, tie-breaks, the unusable entry,
the summary's baseline and scenario (mutation testing, docs/testing.md)."""

from __future__ import annotations

from qbench.readers.recommend import recommend, render_recommendation, summary_rows, summary_view
from qbench.row import reason_record
from tests.rows import make_row


def _s(median, spread=0.01):
    return {"median": median, "p10": median * (1 - spread), "p90": median * (1 + spread), "n": 20}


def _row(scheme, stream, rel=0.001, stored=1000, m=1, eager=None, reasons=None, **extra):
    return make_row(scheme=scheme, m=m, k=64, n=32, status="ok", stored_bytes=stored,
                    error={"rel_fro": rel, "nonfinite": 0},
                    latency_us={"stream": stream, "eager": eager}, latency_reasons=reasons or {}, **extra)


def test_tensor_parallel_groups_are_apart_and_ordered():
    doc = {"rows": [_row("a", _s(4.0), tp_size=4, split="row"), _row("a", _s(9.0)),
                    _row("a", _s(5.0), tp_size=2, split="row"), _row("b", _s(3.0), tp_size=2, split="row"),
                    _row("b", _s(8.0), tp_size=2, split="column")]}
    by_m = recommend(doc, 0.01, "stream")["by_m"]
    keys = [(g.get("tp_size"), g.get("split")) for g in by_m]
    assert keys == [(None, None), (2, "column"), (2, "row"), (4, "row")]
    assert "tp_size" not in by_m[0] and "split" not in by_m[0]
    assert [g["pick"]["scheme"] for g in by_m] == ["a", "b", "b", "a"]
    assert [g["pick"]["latency_us"] for g in by_m] == [9.0, 8.0, 3.0, 4.0]


def test_ties_go_to_lower_error_then_fewer_bytes_and_name_the_fastest():
    doc = {"rows": [_row("fast", _s(10.0, 0.05), rel=0.004, stored=2000),
                    _row("exact", _s(10.2, 0.05), rel=0.001, stored=3000),
                    _row("small", _s(10.3, 0.05), rel=0.001, stored=1000)]}
    (g,) = recommend(doc, 0.01, "stream")["by_m"]
    assert g["pick"]["scheme"] == "small" and g["pick"]["fastest_median"] == "fast"
    assert g["pick"]["ties"] == ["fast", "exact"] and g["pick"]["rel_fro"] == 0.001
    alone = {"rows": [_row("fast", _s(10.0)), _row("slow", _s(20.0))]}
    (g,) = recommend(alone, 0.01, "stream")["by_m"]
    assert g["pick"]["scheme"] == "fast" and g["pick"]["fastest_median"] is None and g["pick"]["ties"] == []


def test_unusable_entry_word_for_word():
    why = "CUDA graph capture failed at M=1: host sync"
    doc = {"rows": [_row("ok", _s(10.0)),
                    _row("sync", None, rel=0.002, eager=_s(150.0),
                         reasons={"stream": reason_record("capture-failed", why)})]}
    (g,) = recommend(doc, 0.01, "stream")["by_m"]
    assert g["unusable"] == [{"scheme": "sync", "eager_us": 150.0, "rel_fro": 0.002, "reason": why}]


def test_summary_rows_default_baseline_scenario_and_tp():
    doc = {"scenario": {"name": "decode"},
           "rows": [_row("bf16", _s(12.0)), _row("x", _s(6.0), rel=0.002),
                    _row("bf16", _s(8.0), tp_size=2, split="row"), _row("x", _s(2.0), tp_size=2, split="row")]}
    plain, tp = summary_rows(doc, recommend(doc, 0.01, "stream"))  # the baseline is bf16 by default
    assert plain == {"scenario": "decode", "m": 1, "k": 64, "n": 32, "pick": "x", "latency_us": 6.0,
                     "rel_fro": 0.002, "baseline_us": 12.0, "speedup": 2.0, "ties": [], "kept_from_m": None,
                     "unusable": []}
    assert (tp["baseline_us"], tp["speedup"]) == (8.0, 4.0)  # against bf16 at the same sharding


def test_why_a_row_cannot_be_picked_word_for_word():
    doc = {"rows": [{**_row("gone", None), "status": "failed", "reason": None},
                    {**_row("noerr", _s(5.0)), "error": {"rel_fro": None, "nonfinite": 0}},
                    _row("over", _s(4.0), rel=0.5)]}
    (g,) = recommend(doc, 0.01, "stream")["by_m"]
    assert g["pick"] is None  # nothing qualifies
    assert g["others"] == [{"scheme": "gone", "reason": "failed: no reason given"},
                           {"scheme": "noerr", "reason": "no error measured"},
                           {"scheme": "over", "reason": "over error budget (rel_fro 0.5 > 0.01)"}]


def test_plain_rows_sort_before_tp_size_1():
    doc = {"rows": [_row("a", _s(2.0), tp_size=1, split="none"), _row("a", _s(3.0))]}
    assert [(g.get("tp_size"), g.get("split")) for g in recommend(doc, 0.01, "stream")["by_m"]] == [
        (None, None), (1, "none")]


def _iv(median, p10, p90):
    return {"median": median, "p10": p10, "p90": p90, "n": 20}


def test_pick_does_not_flip_between_schemes_tied_within_noise_across_m():
    """bf16 (rel_fro 0.003) against fp16 (0.0004), the same kernels: bf16 faster beyond noise at M = 1,
    the two tied within noise at M = 2 and 4 (fp16's median lower, and its error lower), fp16 faster
    beyond noise at M = 8, tied again at M = 16. The pick is kept from the neighbouring M while it is
    among the tied: bf16, bf16, bf16, then fp16 twice; without the rule M = 2 and 4 would flip to fp16."""
    rows = []
    for m, bf16, fp16 in ((1, _iv(10.0, 9.9, 10.1), _iv(10.5, 10.4, 10.6)),   # [9.9, 10.1] < [10.4, 10.6]
                          (2, _iv(10.2, 10.0, 10.4), _iv(10.1, 9.9, 10.3)),   # overlap: tied
                          (4, _iv(10.3, 10.1, 10.5), _iv(10.2, 10.0, 10.4)),  # overlap: tied
                          (8, _iv(10.0, 9.9, 10.1), _iv(9.0, 8.9, 9.1)),      # fp16 wholly below
                          (16, _iv(9.9, 9.7, 10.1), _iv(10.0, 9.8, 10.2))):   # overlap: tied
        rows += [_row("bf16", bf16, rel=0.003, stored=2000, m=m), _row("fp16", fp16, rel=0.0004, stored=2000, m=m)]
    # another shape (K = 128) tied at M = 2 has no neighbour: the lower error decides there
    rows += [{**_row("bf16", _iv(5.0, 4.9, 5.1), rel=0.003, m=2), "k": 128},
             {**_row("fp16", _iv(5.05, 4.95, 5.15), rel=0.0004, m=2), "k": 128}]
    rec = recommend({"scenario": {"name": "sweep"}, "rows": rows}, 0.01, "stream")
    got = [(g["m"], g["k"], g["pick"]["scheme"], g["pick"]["kept_from_m"], g["pick"]["fastest_median"])
           for g in rec["by_m"]]
    assert got == [(1, 64, "bf16", None, None),
                   (2, 64, "bf16", 1, "fp16"), (2, 128, "fp16", None, "bf16"),
                   (4, 64, "bf16", 2, "fp16"),
                   (8, 64, "fp16", None, None),
                   (16, 64, "fp16", None, "bf16")]  # kept from M = 8, which the lower error also gives
    m2 = rec["by_m"][1]
    assert m2["pick"]["ties"] == ["fp16"]
    assert m2["others"] == [{"scheme": "fp16", "reason": "same speed within noise, bf16 kept from M=1: "
                                                         "10.1 µs vs 10.2 µs (0.99×, p10–p90 overlap)"}]
    assert m2["pareto"][0]["scheme"] == "fp16"  # the front does not change: fp16 is faster and more exact
    text = render_recommendation(rec, wide=True)  # each prose line whole (the default wraps at 120 characters)
    assert ("M=2 (K=64, N=32): use bf16 (10.2 µs, rel_fro 0.003); as fast within noise: fp16 "
            "(kept from M=1: tied within noise, the pick does not flip)") in text
    doc = {"scenario": {"name": "sweep"}, "rows": rows}
    summary = summary_rows(doc, rec)
    assert [(r["m"], r["pick"], r["kept_from_m"], r["speedup"]) for r in summary if r["k"] == 64] == [
        (1, "bf16", None, 1.0), (2, "bf16", 1, 1.0), (4, "bf16", 2, 1.0), (8, "fp16", None, 10.0 / 9.0),
        (16, "fp16", None, 9.9 / 10.0)]
    view = summary_view("stream", "bf16", summary)
    table = view.render(summary, "simple")
    assert "bf16 (kept from M=1)" in table and "bf16 (kept from M=2)" in table
    assert "×bf16" in table  # the narrow default's header; --wide (wide=True) the full one
    assert "speed-up vs bf16 (bf16 time / pick time)" in view.render(summary, "simple", True)
