"""``qbench run --repeat N``: runs combined with known medians and spreads; a real repeated run."""

from __future__ import annotations

import pytest

from qbench.judge import tie_band
from qbench.lifecycle import combine_runs


def _row(m, median, status="ok", p10=None, p90=None):
    stats = {"median": median, "p10": p10 or median * 0.99, "p90": p90 or median * 1.01}
    return {"scheme": "s", "m": m, "k": 8, "n": 8, "status": status, "latency_us": {"stream": stats if status == "ok" else None}}


def test_combine_known_medians_and_spread():
    runs = [[_row(1, 10.0), _row(16, 20.0)], [_row(1, 12.0), _row(16, 20.0)], [_row(1, 8.0), _row(16, 22.0)]]
    out = combine_runs(runs)
    assert [r["m"] for r in out] == [1, 16]
    assert out[0]["latency_us"]["stream"]["median"] == 10.0  # the first run's row is the base
    assert out[0]["repeats"] == {"runs": 3, "ok_runs": 3, "medians": {"stream": [10.0, 12.0, 8.0]},
                                 "spread": {"stream": pytest.approx(0.4)}}  # (12 - 8) / 10
    assert out[1]["repeats"]["spread"]["stream"] == pytest.approx(0.1)  # (22 - 20) / 20


def test_a_failed_run_is_counted_and_a_later_ok_row_is_the_base():
    out = combine_runs([[_row(1, 0, status="failed")], [_row(1, 9.0)]])
    assert out[0]["status"] == "ok" and out[0]["latency_us"]["stream"]["median"] == 9.0
    assert out[0]["repeats"]["runs"] == 2 and out[0]["repeats"]["ok_runs"] == 1
    assert out[0]["repeats"]["spread"] == {}


def test_one_run_is_unchanged_and_none_is_refused():
    rows = [_row(1, 5.0)]
    assert combine_runs([rows]) == rows
    with pytest.raises(ValueError):
        combine_runs([])


def test_tie_band_is_the_wider_spread():
    from qbench.row import Repeats, Stats

    stats = Stats(median=10.0, p10=9.5, p90=10.5, mean=10.0, cv=0.03, n=20)  # within run: 10 %
    assert tie_band(stats, None, "stream") == pytest.approx(0.1)
    runs = Repeats(runs=3, ok_runs=3, medians={"stream": [10.0, 12.8, 10.0]}, spread={"stream": 0.28})
    assert tie_band(stats, runs, "stream") == pytest.approx(0.28)
    assert tie_band(None, None, "stream") is None


def test_repeated_run_writes_repeats(tmp_path):
    from qbench import runner
    from qbench.results import read_results
    from qbench.scenario import from_dict

    s = from_dict({"name": "rep", "device": "cpu", "m": [1], "layer": {"in_features": 64, "out_features": 64},
                   "timing": {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.05, "methods": ["stream"],
                              "scheme_timeout_s": 60},
                   "schemes": [{"name": "fp32"}]}, "<test>")
    outcome = runner.run(s, device="cpu", out=str(tmp_path / "r.json"), repeat=2)
    assert outcome.exit_code == 0
    doc = read_results(tmp_path / "r.json")
    row = doc["rows"][0] if isinstance(doc, dict) else doc.rows[0].model_dump()
    assert row["repeats"]["runs"] == 2 and row["repeats"]["ok_runs"] == 2
    assert len(row["repeats"]["medians"]["cpu"]) == 2
    assert doc["workers"]["repeat"] == 2 if isinstance(doc, dict) else True


def _step(median, status="ok", compiled=None):
    lat = {"step_graph": {"median": median, "p10": median * 0.99, "p90": median * 1.01} if status == "ok" else None}
    if compiled is not None:
        lat["step_compiled"] = {"median": compiled, "p10": compiled * 0.99, "p90": compiled * 1.01}
    return {"job": "step", "scheme": "s", "base_scheme": "s", "library": "torch", "mode": "eager", "model": "m",
            "title": "M", "m": 1, "context": 8, "device": "cuda:0", "weight_dtype": "bfloat16",
            "activation_dtype": "bfloat16", "lm_head": "scheme", "blocks": 1, "status": status, "latency_us": lat}


def test_one_combination_for_step_rows_and_for_several_files():
    """run --repeat on model-step rows and readers given several files combine alike (judge.combine_repeats):
    runs 100, 110 and a failed one -> 3 runs, 2 ok, spread (110 - 100) / 105."""
    from qbench.judge import combine_rows
    from qbench.step.row import StepRow

    (out,) = combine_runs([[_step(100.0)], [_step(110.0)], [_step(0, status="failed")]])
    assert out["latency_us"]["step_graph"]["median"] == 100.0
    assert out["repeats"] == {"runs": 3, "ok_runs": 2, "medians": {"step_graph": [100.0, 110.0]},
                              "spread": {"step_graph": pytest.approx(10 / 105)}}
    typed = combine_rows([StepRow.model_validate(r) for r in (_step(100.0), _step(110.0), _step(0, status="failed"))])
    assert typed.repeats.model_dump() == out["repeats"] and typed.step_us("step_graph") == 100.0
    again = combine_rows([typed, StepRow.model_validate(_step(90.0))])  # a combined row brings all of its runs
    assert again.repeats.runs == 4 and again.repeats.medians == {"step_graph": [100.0, 110.0, 90.0]}


def test_the_base_is_the_first_ok_run_timed_by_the_most_methods():
    """A run whose compiled step also ran is the base over an earlier one with the eager step alone."""
    (out,) = combine_runs([[_step(100.0)], [_step(101.0, compiled=80.0)], [_step(102.0, compiled=81.0)]])
    assert out["latency_us"]["step_compiled"]["median"] == 80.0 and out["repeats"]["runs"] == 3
    assert out["repeats"]["medians"] == {"step_graph": [100.0, 101.0, 102.0], "step_compiled": [80.0, 81.0]}
