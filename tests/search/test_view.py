"""The search result's readers on the committed H100 file (results/h100/search_llama31_8b_cost.json):
``recommend`` prints the pick predicted beside measured and the pick as a scenario entry and a
torchao call; ``report`` the verified points and the pure schemes."""

from __future__ import annotations

from pathlib import Path

from qbench.cli import main

FILE = Path(__file__).resolve().parents[2] / "results" / "h100" / "search_llama31_8b_cost.json"


def test_recommend_prints_the_pick_on_both_halves_and_what_a_user_pastes(capsys):
    assert main(["recommend", str(FILE)]) == 0
    out = capsys.readouterr().out
    assert "max mean KLD 0.5 at M = 1, context 4096: a front of 11549 recipes" in out
    assert "pick: int4-weight-only (int4-weight-only 129), by solver" in out
    assert "measured step 5,476.6 µs (step_graph), KLD 0.0914 ± 7e-05" in out  # the file's own numbers
    assert "[[schemes]]" in out and 'name = "int4-weight-only"' in out
    assert "quantize_(model, FqnToConfig({" in out and '"lm_head": int4_weight_only' in out


def test_report_shows_the_verified_points_and_hides_the_rest_of_the_front(capsys):
    assert main(["report", str(FILE)]) == 0
    out = capsys.readouterr().out
    assert "r1 front 1" in out and "r1 front 2" in out and "int8-weight-only" in out
    assert "11547 front points not verified are not shown (--wide shows them)" in out
