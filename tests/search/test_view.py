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
    assert "200 front points not verified are not shown (--wide shows them)" in out
    assert "the file keeps 202 of the front's 11549 points as rows" in out  # thinned: the tree's size budget


def test_a_proof_step_file_given_beside_fills_the_verified_recipes_steps(tmp_path, capsys):
    # a search that ran where its speed file was not: its verified recipes' steps are None until the proof step
    # scenario's file (run on the speed file's machine) is given beside it; a step file of another run is refused
    import json

    doc = json.loads(FILE.read_text())
    for r in doc["rows"]:
        if r.get("measured") and r["kind"] == "front" or r.get("pick"):
            r["measured"]["step_us"], r["measured"]["step_reason"] = None, "timed elsewhere"
    search = tmp_path / "search.json"
    search.write_text(json.dumps(doc))
    step = json.loads((FILE.parent / "step_smollm2_shapes.json").read_text())
    step["scenario"]["name"] = "search_llama31_8b_cost-proof-step"
    template = step["rows"][0]
    step["rows"] = [{**template, "scheme": label, "m": 1, "context": 4096,
                     "latency_us": {"step_graph": {**template["latency_us"]["step_graph"], "median": us}}}
                    for label, us in (("int4-weight-only", 1111.0), ("r1 front 1", 2222.0))]
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(step))
    assert main(["recommend", str(search)]) == 0
    assert "step not measured here: timed elsewhere" in capsys.readouterr().out
    assert main(["recommend", str(search), str(proof)]) == 0
    out = capsys.readouterr().out
    assert "measured step 1,111.0 µs (step_graph)" in out and "not measured here" not in out
    assert f"the verified recipes' steps: {proof} (cuda NVIDIA H100" in out
    step["scenario"]["name"] = "another-run"
    proof.write_text(json.dumps(step))
    assert main(["recommend", str(search), str(proof)]) == 2
    assert "not the proof step of a search given here" in capsys.readouterr().err


def test_a_mix_no_faster_than_a_pure_scheme_within_the_budget_says_so(capsys):
    """The committed SmolLM2 search picked a recipe whose measured step (2,883.1 µs) is no faster than pure bf16's
    (2,878.2 µs), which meets the budget too: recommend says so (a newcomer read the pick as a speed-up). A pick
    that is itself the fastest pure scheme gets no such line."""
    root = FILE.parents[1]
    assert main(["recommend", str(root / "cpu" / "search_smollm2.json"),
                 str(root / "h100" / "search_smollm2_proof_step.json")]) == 0
    out = capsys.readouterr().out
    assert ("the fastest pure scheme within the budget: bf16, measured step 2,878.2 µs, KLD 0.000907 ± 3.3e-05;\n"
            "  the pick is 0.998× its speed (not faster: the mix buys no time here)") in out
    assert main(["recommend", str(FILE)]) == 0
    assert "the fastest pure scheme" not in capsys.readouterr().out
