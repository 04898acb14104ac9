"""qbench.judge: the decision rules readers share, on hand-built typed rows (known answers)."""

from __future__ import annotations

import pytest

from qbench.judge import (NOISY_CV, UNUSABLE, capture_failure, common_method, incomplete_warning, is_noisy,
                          methods_present, pareto_front, resolve_method, row_caveats, unusable_note,
                          verdict)
from qbench.results import ResultDoc, upgrade_prose_row
from qbench.row import Row, Stats, flag_record, reason_record


def _stats(median, lo=None, hi=None, cv=None) -> Stats:
    return Stats(median=median, p10=lo, p90=hi, cv=cv, n=20)


def _row(scheme="s", m=1, status="ok", **fields) -> Row:
    return Row.model_validate({"scheme": scheme, "m": m, "k": 64, "n": 32, "status": status, **fields})


def _doc(rows, **fields) -> ResultDoc:
    return ResultDoc(schema_version=2, rows=rows, **fields)


# ---- verdict -------------------------------------------------------------------------------------

def test_verdict_point_against_interval():
    """One side without p10/p90 is a point: same only inside the other's interval."""
    assert verdict(_stats(10.0, 9.0, 11.0), _stats(9.99)) == "same"
    assert verdict(_stats(10.0, 9.9, 10.1), _stats(9.0)) == "faster"
    assert verdict(_stats(10.0), _stats(10.01)) == "slower"


def test_interval_of_a_side_without_p10_or_p90():
    wide = _stats(10.0, 9.0, 11.0)
    assert verdict(wide, _stats(10.5, None, 12.0)) == "same"  # no p10: the point 10.5, inside [9, 11]
    assert verdict(wide, _stats(11.5, 11.2, None)) == "slower"  # no p90: the point 11.5, outside
    assert verdict(_stats(12.0), _stats(11.0)) == "faster"  # two points: the medians decide
    assert verdict(_stats(5.0, 6.0, 7.0), _stats(5.5, 5.4, 5.6)) == "same"  # A's interval widened to hold 5.0


# ---- capture failure -----------------------------------------------------------------------------

def test_capture_failure_reads_the_kind():
    text = "CUDA graph capture failed at M=1: host sync"
    why = {m: reason_record("capture-failed", text) for m in ("stream", "warm", "cold")}
    row = _row(latency_us={"stream": None, "warm": None, "cold": None}, latency_reasons=why)
    assert capture_failure(row, "stream") == text and capture_failure(row, "warm") == text
    assert capture_failure(row, "cold") is None  # cold needs no capture
    assert capture_failure(row, "bogus") is None  # an unknown method
    assert capture_failure(row.model_copy(update={"status": "failed"}), "stream") is None
    timed = row.model_copy(update={"latency_us": {"stream": _stats(3.0)}})
    assert capture_failure(timed, "stream") is None  # it has a time, whatever its reasons say
    for kind in ("capture-failed", "not-attempted", "host-sync"):
        r = _row(latency_us={"stream": None}, latency_reasons={"stream": reason_record(kind, "any words")})
        assert capture_failure(r, "stream") == "any words"
    for kind in ("cuda-only", "copies", "error", "not-timed", "other"):
        r = _row(latency_us={"stream": None}, latency_reasons={"stream": reason_record(kind, "capture failed")})
        assert capture_failure(r, "stream") is None  # the words do not decide, the kind does
    assert capture_failure(_row(latency_us={"stream": None}), "stream") is None  # no reason at all


def test_the_one_legacy_rule_maps_schema_1_words_to_kinds():
    """Schema 1 files said it in words; their reader is the only place that reads them."""
    for words, kind in (("cannot be captured here", "capture-failed"), ("HOST SYNC inside", "host-sync"),
                        ("not attempted: CUDA graph capture failed at M=1", "not-attempted"),
                        ("CUDA graph capture failed at M=1: x", "capture-failed"),
                        ("do not time stream yet (graph-captured call + collective)", "other"),
                        ("failed: not timed", "other"), ("", "other")):
        up = upgrade_prose_row({"latency_reasons": {"stream": words}})
        assert up["latency_reasons"] == {"stream": {"kind": kind, "text": words}}, words
    up = upgrade_prose_row({"flags": ["throttled: sw_power_cap active right after cold"], "m": 1})
    assert up == {"flags": [{"name": "throttled", "text": "sw_power_cap active right after cold"}], "m": 1}


def test_unusable_note_word_for_word():
    assert unusable_note([], "stream") is None
    pairs = [("int8-bnb", 16), ("w8a8-dynamic", 1), ("int8-bnb", 1), ("int8-bnb", 16), ("x", None), ("x", 4)]
    assert unusable_note(pairs, "warm") == (
        f"{UNUSABLE} (no warm time: the call cannot be captured in a CUDA graph, e.g. a host sync): "
        "int8-bnb (M=1,16), w8a8-dynamic (M=1), x (M=4,None)")


# ---- noise and caveats ---------------------------------------------------------------------------

def test_noise_and_caveats():
    row = _row(latency_us={"cold": _stats(1.0, cv=0.9)},
               flags=[flag_record("cpu-busy", "x"), flag_record("throttled", "y"), flag_record("cpu-busy", "z")])
    assert is_noisy(row, "cold") and not is_noisy(row, "stream")
    assert not is_noisy(_row(latency_us={"cold": _stats(1.0, cv=NOISY_CV)}), "cold")  # over, not at
    assert row_caveats(row, row.stats("cold")) == ["cpu-busy", "throttled", "noisy (cv 0.90)"]
    assert row_caveats(_row(), None) == []


# ---- which method, which machine -----------------------------------------------------------------

def test_methods_present_and_resolve_method():
    old = _doc([_row(latency_us={"cold": _stats(1.0), "warm": None})])
    assert methods_present(old.rows) == ["cold"]
    assert resolve_method(old, None) == ("cold", "no stream latency in this file: an older result, or stream "
                                                 "not timed; using cold times")
    assert resolve_method(old, "warm") == ("warm", None)  # asked: used as given
    new = _doc([_row(latency_us={"stream": _stats(1.0), "cold": _stats(2.0)})])
    assert resolve_method(new, None) == ("stream", None)
    assert resolve_method(_doc([]), None) == ("stream", None)
    assert common_method(old, new, None) == ("cold", "A has no stream latency; comparing cold times")
    cpu = _doc([_row(latency_us={"cpu": _stats(1.0)})])
    assert common_method(cpu, new, None) == ("stream", None)  # nothing to compare like with like


def test_incomplete_warning_and_machine():
    doc = _doc([_row("a"), _row("a", m=2), _row("b")], complete=False,
               env={"device": "cuda:0", "device_name": "NVIDIA H200"})
    assert incomplete_warning(doc, "x.json") == (
        'warning: x.json is incomplete ("complete": false, 3 rows of 2 schemes): the run was interrupted '
        "or is still going; schemes may be missing")
    assert incomplete_warning(_doc([], complete=True), "x.json") is None
    assert doc.machine == "cuda NVIDIA H200" and _doc([]).machine == "? ?"


def test_pareto_front():
    pts = [{"s": "a", "latency_us": 1.0, "rel_fro": 0.1, "stored_bytes": 100},
           {"s": "b", "latency_us": 2.0, "rel_fro": 0.01, "stored_bytes": 100},
           {"s": "c", "latency_us": 3.0, "rel_fro": 0.1, "stored_bytes": 100},  # dominated by a
           {"s": "d", "latency_us": 3.0, "rel_fro": 0.1, "stored_bytes": 99.5},  # within 1 %: no better than a
           {"s": "e", "latency_us": None, "rel_fro": 0.0, "stored_bytes": 1}]
    assert [p["s"] for p in pareto_front(pts)] == ["a", "b"]
    assert pytest.approx(pareto_front(pts, rtol={})[-1]["stored_bytes"]) == 99.5  # exact bytes: d is on it


def test_rows_by_shape_ascending():
    from qbench.judge import by_shape, shape_order

    rows = [_row("a", m=16), _row("a", m=1, tp_size=2, split="row"), _row("b", m=1), _row("a", m=1)]
    groups = by_shape(rows)
    assert [shape for shape, _ in groups] == [(1, 64, 32, None, None), (1, 64, 32, 2, "row"), (16, 64, 32, None, None)]
    assert [r.scheme for r in groups[0][1]] == ["b", "a"]  # file order inside a group
    assert shape_order((1, 64, 32, None, None)) == (1, 64, 32, 0, 0)


# ---- one library for every job kind: the model step's decisions ------------------------------------

def _step(scheme, *, graph=None, compiled=None, err=0.1, total=1000):
    from qbench.step.row import StepRow

    def reading(t):
        return None if t is None else {"median": t[0], "p10": t[1], "p90": t[2]}
    return StepRow(scheme=scheme, base_scheme=scheme, library="torch", mode="eager", model="m", title="M", m=1,
                   context=8, device="cuda:0", weight_dtype="x", activation_dtype="bfloat16", lm_head="float", blocks=1,
                   latency_us={"step_graph": reading(graph), "step_compiled": reading(compiled)},
                   error={"rel_fro": err}, bytes={"total": total})


def test_a_step_row_is_read_by_its_own_best_method():
    """The registry's step decision order: the compiled step in a graph before the eager one."""
    from qbench.judge import decision_method, decision_stats

    both, eager = _step("a", graph=(100.0, 99.0, 101.0), compiled=(80.0, 79.0, 81.0)), _step("b", graph=(90.0, 89.0, 91.0))
    assert decision_method(both) == "step_compiled" and decision_stats(both).median == 80.0
    assert decision_method(eager) == "step_graph" and decision_method(_step("c")) is None
    assert methods_present([eager]) == ["step_graph"]
    streamed = _row("x", latency_us={"stream": {"median": 5.0}})
    assert methods_present([both, streamed]) == ["stream", "step_graph", "step_compiled"]  # registry order


def test_ties_and_the_pick_within_noise_for_step_rows():
    """fast (80, p90 82) and close (81.5, p10 81.9): tied; far (p10 83): not. Among the tied the lower
    error is the pick, unless the previous pick is among them; unknown bytes rank last."""
    from qbench.judge import pick_within_noise, within_noise

    fast = _step("fast", graph=(80.0, 79.0, 82.0), err=0.3)
    close = _step("close", graph=(81.5, 81.9, 83.0), err=0.1)
    far = _step("far", graph=(84.0, 83.0, 85.0), err=0.01)
    assert within_noise(fast, close) and within_noise(close, fast) and not within_noise(fast, far)

    def pick(cands, previous=None, size=lambda r: r.bytes["total"]):
        return pick_within_noise(cands, time=lambda r: r.latency_us["step_graph"].median, same=within_noise,
                                 error=lambda r: r.error["rel_fro"], size=size, name=lambda r: r.scheme,
                                 previous=previous)
    best, by_rank, fastest, group = pick([far, close, fast])
    assert (best.scheme, by_rank.scheme, fastest.scheme, [r.scheme for r in group]) == ("close", "close", "fast",
                                                                                       ["fast", "close"])
    assert pick([far, close, fast], previous="fast")[0].scheme == "fast"  # kept: tied with the fastest
    assert pick([far, close, fast], previous="far")[0].scheme == "close"  # not tied: no
    twin = _step("twin", graph=(80.0, 79.0, 82.0), err=0.1)
    assert pick([twin, close], size=lambda r: None if r is close else 1)[0].scheme == "twin"  # equal error: bytes
    assert pick([]) == (None, None, None, [])


def test_a_step_rows_runs_widen_its_tie_as_a_layer_rows_do():
    """far (84, p10 83) is apart from fast (80, p90 82) in one run; with its three runs' medians 81.5, 84 and 86
    (qbench run --repeat) its interval reaches 81.5, inside fast's: tied, in either order (row_verdict's rule)."""
    from qbench.judge import within_noise
    from qbench.row import Repeats

    fast = _step("fast", graph=(80.0, 79.0, 82.0))
    far = _step("far", graph=(84.0, 83.0, 85.0))
    assert not within_noise(fast, far)
    runs = Repeats(runs=3, ok_runs=3, medians={"step_graph": [81.5, 84.0, 86.0]}, spread={"step_graph": 4.5 / 84.0})
    far = far.model_copy(update={"repeats": runs})
    assert within_noise(fast, far) and within_noise(far, fast)
    slow_runs = runs.model_copy(update={"medians": {"step_graph": [83.5, 84.0, 86.0]}})
    assert not within_noise(fast, far.model_copy(update={"repeats": slow_runs}))  # runs that stay apart: apart


def test_pick_stability_of_any_keys():
    from qbench.judge import pick_stability

    a = [{"m": 1, "k": 8, "pick": "x"}, {"m": 2, "k": 8, "pick": "y"}]
    b = [{"m": 1, "k": 8, "pick": "x"}, {"m": 2, "k": 8, "pick": None}, {"m": 4, "k": 8, "pick": "x"}]
    assert pick_stability([a, b], keys=("m", "k")) == [
        {"m": 1, "k": 8, "picks": ["x", "x"], "holds": True}, {"m": 2, "k": 8, "picks": ["y", None], "holds": False}]


def test_a_declared_budget_states_checks_and_misses_in_its_own_words():
    """One Budget record gives the option, the check of its value, the budget line and a row's miss."""
    from qbench.judge import Budget, budget_flags

    share = Budget("min_same_top", "same top", "0..1", lambda r: r["top"], upper=False, most=1.0, scale=100,
                   unit=" %", fmt=".2f")
    kld = Budget("max_kld", "mean KLD", "nats", lambda r: r["kld"])
    assert share.flag == "--min-same-top" and budget_flags([kld, share]) == "--max-kld and --min-same-top"
    assert share.text(0.99) == "same top ≥ 99 %" and kld.text(0.01) == "mean KLD ≤ 0.01"
    assert share.misses({"top": 0.985}, 0.99) == "same top 98.50 % < 99 %" and share.misses({"top": 0.995}, 0.99) is None
    assert kld.misses({"kld": 0.0121}, 0.01) == "mean KLD 0.0121 > 0.01" and kld.misses({"kld": None}, 1) == "no mean KLD measured"
    assert share.check(1.5) == "--min-same-top: must be a number >= 0 and <= 1, got 1.5"
    assert kld.check(float("nan")) == "--max-kld: must be a number >= 0, got nan" and kld.check(2.0) is None
    # a value just beyond its budget is said with the digits that show it (a newcomer read "0.002 > 0.002")
    assert kld.misses({"kld": 0.0020004}, 0.002) == "mean KLD 0.0020004 > 0.002"
    assert share.misses({"top": 0.98996}, 0.99) == "same top 98.996 % < 99 %"


def test_beyond_adds_digits_only_while_the_value_would_print_as_its_limit():
    from qbench.judge import beyond

    assert beyond(0.10020, 0.1) == "0.1002" and beyond(0.114, 0.1) == "0.114" and beyond(0.1000001, 0.1) == "0.1"
    assert beyond(0.0121, 0.01) == "0.0121" and beyond(98.996, 99.0, ".2f") == "98.996"
