"""recommend and summary_rows on hand-built documents: TP groups, tie-breaks, the unusable entry,
the summary's baseline and scenario (mutation testing, docs/testing.md)."""

from __future__ import annotations

from qbench.recommend import recommend, summary_rows


def _s(median, spread=0.01):
    return {"median": median, "p10": median * (1 - spread), "p90": median * (1 + spread), "n": 20}


def _row(scheme, stream, rel=0.001, stored=1000, m=1, eager=None, reasons=None, **extra):
    return {"scheme": scheme, "m": m, "k": 64, "n": 32, "status": "ok", "stored_bytes": stored,
            "error": {"rel_fro": rel, "nonfinite": 0},
            "latency_us": {"stream": stream, "eager": eager}, "latency_reasons": reasons or {}, **extra}


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
                    _row("sync", None, rel=0.002, eager=_s(150.0), reasons={"stream": why})]}
    (g,) = recommend(doc, 0.01, "stream")["by_m"]
    assert g["unusable"] == [{"scheme": "sync", "eager_us": 150.0, "rel_fro": 0.002, "reason": why}]


def test_summary_rows_default_baseline_scenario_and_tp():
    doc = {"scenario": {"name": "decode"},
           "rows": [_row("bf16", _s(12.0)), _row("x", _s(6.0), rel=0.002),
                    _row("bf16", _s(8.0), tp_size=2, split="row"), _row("x", _s(2.0), tp_size=2, split="row")]}
    plain, tp = summary_rows(doc, recommend(doc, 0.01, "stream"))  # the baseline is bf16 by default
    assert plain == {"scenario": "decode", "m": 1, "k": 64, "n": 32, "pick": "x", "latency_us": 6.0,
                     "rel_fro": 0.002, "baseline_us": 12.0, "speedup": 2.0, "ties": [], "unusable": []}
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
