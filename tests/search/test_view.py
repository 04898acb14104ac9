"""The search result's readers on the committed H100 file (results/h100/search_llama31_8b_cost.json):
``recommend`` prints the pick predicted beside measured and the pick as a scenario entry and a
torchao call; ``report`` the verified points and the pure schemes."""

from __future__ import annotations

import re
from pathlib import Path

from qbench.cli import main

FILE = Path(__file__).resolve().parents[2] / "results" / "h100" / "search_llama31_8b_cost.json"


def test_recommend_prints_the_pick_on_both_halves_and_what_a_user_pastes(capsys):
    assert main(["recommend", str(FILE)]) == 0
    out = capsys.readouterr().out
    assert "max mean KLD 0.5 at M = 1, context 4096: a front of 11551 points" in out
    assert "pick: int4-weight-only (int4-weight-only 129), by solver" in out
    assert "measured step 5,476.6 µs (step_graph), KLD 0.0914 ± 7e-05" in out  # the file's own numbers
    assert "[[schemes]]" in out and 'name = "int4-weight-only"' in out
    assert "quantize_(model, FqnToConfig({" in out and '"lm_head": int4_weight_only' in out


def test_report_shows_the_verified_points_and_hides_the_rest_of_the_front(capsys):
    assert main(["report", str(FILE)]) == 0
    out = capsys.readouterr().out
    assert "r1 front 1" in out and "r1 front 2" in out and "int8-weight-only" in out
    assert "200 front points not verified are not shown (--wide shows them)" in out
    assert ("the file keeps 204 of the front's 11551 points as rows (202 mixed recipes; bf16 and int4-weight-only as "
            "pure rows)") in out  # thinned: the tree's size budget


def test_a_proof_step_file_given_beside_fills_the_verified_recipes_steps(tmp_path, capsys):
    # a search that ran where its speed file was not: its verified recipes' steps are None until the proof step
    # scenario's file (run on the speed file's machine) is given beside it; a step file of another run is refused
    import json

    from qbench.model import recipe

    doc = json.loads(FILE.read_text())
    for r in doc["rows"]:
        if r.get("measured") and r["kind"] == "front" or r.get("pick"):
            r["measured"]["step_us"], r["measured"]["step_reason"] = None, "timed elsewhere"
    search = tmp_path / "search.json"
    search.write_text(json.dumps(doc))
    step = json.loads((FILE.parent / "step_smollm2_shapes.json").read_text())
    step["scenario"]["name"] = "search_llama31_8b_cost-proof-step"
    template = step["rows"][0]

    def record(label):  # the step row's recipe record of the search row labelled ``label``
        entry = dict(next(r for r in doc["rows"] if r["scheme"] == label)["recipe"])
        entry.pop("label", None)
        return recipe.Plan(recipe._choice({"name": entry.pop("name")}, "x"), template["blocks"],
                           recipe.parse(entry, "x")).record(head=True)

    step["rows"] = [{**template, "scheme": label, "m": 1, "context": 4096, "recipe": rec,
                     "latency_us": {"step_graph": {**template["latency_us"]["step_graph"], "median": us}}}
                    for label, us, rec in (("int4-weight-only", 1111.0, None),
                                           ("r1 front 1", 2222.0, record("r1 front 1")))]
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(step))
    assert main(["recommend", str(search)]) == 0
    assert "step not measured here: timed elsewhere" in capsys.readouterr().out
    assert main(["recommend", str(search), str(proof)]) == 0
    out = capsys.readouterr().out
    assert "measured step 1,111.0 µs (step_graph)" in out and "not measured here" not in out
    assert f"the verified recipes' steps: {proof} (cuda NVIDIA H100" in out
    step["rows"][1]["recipe"] = record("r1 front 2")  # the label of another run's front: another recipe
    proof.write_text(json.dumps(step))
    assert main(["recommend", str(search), str(proof)]) == 2
    assert "its row 'r1 front 1' ran another recipe than" in capsys.readouterr().err
    step["scenario"]["name"] = "another-run"
    proof.write_text(json.dumps(step))
    assert main(["recommend", str(search), str(proof)]) == 2
    assert "not the proof step of a search given here" in capsys.readouterr().err


SMOL = FILE.parents[1] / "cpu" / "search_smollm2.json"
PROOF = FILE.parents[1] / "h100" / "search_smollm2_proof_step.json"


def _proof(tmp_path, name, edit):
    """The committed SmolLM2 proof step file, its rows (by label) edited by ``edit``."""
    import json

    doc = json.loads(PROOF.read_text())
    edit({r["scheme"]: r["latency_us"]["step_graph"] for r in doc["rows"]})
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_answer_is_decided_on_the_measured_steps_by_the_tie_rule(tmp_path, capsys):
    """The committed SmolLM2 search's pick, r1 front 25, measured 2,883.1 µs in its proof step, no faster than pure
    bf16 (2,878.2 µs), and recommend still printed its 27-entry recipe and torchao call as the answer. With the proof
    step joined, the answer is decided on the measurements by the tie rule (qbench.judge.pick_within_noise) over the
    verified recipes and pure schemes proven within the budget: the fastest, and among those tied with it the lowest
    measured KLD; steps of one run tie by p10-p90, steps of two runs within CROSS_RUN_TIE (2 %)."""
    from qbench.search.view import CROSS_RUN_TIE, pick_summary

    assert CROSS_RUN_TIE == 0.02
    # the committed files: r1 front 26 measured 2,862.4 µs (p10-p90 2,860.2-2,869.4), beyond the pick's 2,880.1-2,889.2
    # in the proof step's run; bf16's 2,878.2 µs is the speed file's median (another run), 0.55 % above it: tied, and
    # bf16 measures the lowest KLD (0.000907 against front 26's 0.02192): the answer is bf16, no quantization call
    assert main(["recommend", str(SMOL), str(PROOF)]) == 0
    out = capsys.readouterr().out
    assert "  the search's pick: r1 front 25 (bf16 94, int4-weight-only[group_size=64] 27), by solver\n" in out
    assert "  answer, on the measured steps: bf16 (bf16 121): measured step 2,878.2 µs, KLD 0.000907 ± 3.3e-05" in out
    assert ("  why: the solver's pick r1 front 25 measured 2,883.1 µs, slower than r1 front 26 at 2,862.4 µs beyond "
            "noise (p10-p90), the fastest within the budget; bf16 (2,878.2 µs) ties with it within 2 %, timed in "
            "different runs, at the lowest measured KLD (0.000907)\n") in out
    assert ("note: steps compared by their medians alone, as points: bf16 and int8-weight-only (the search file keeps "
            "their speed file's medians, timed in another run than the proof step's)\n") in out
    assert "no quantization call: keep the model in bf16" in out and "FqnToConfig" not in out
    assert "the fastest pure scheme within the budget" not in out  # the answer is that scheme
    assert pick_summary([str(SMOL), str(PROOF)]) == [
        "max mean KLD 0.03 at M = 1, context 512: **bf16** (bf16 121): measured KLD 0.000907 ± 3e-05 (predicted "
        "0.000446), step 2,878 µs",
        "tied with the fastest measured within the budget (r1 front 26: 2,862 µs, within 2 %, timed in different runs) "
        "at a lower KLD (solver's pick r1 front 25: 2,883 µs); 6 of a front of 96 points run whole on held-out text, "
        "steps timed where the speed file was"]

    # r1 front 26 6 % under bf16 (beyond 2 % across runs): the fastest, at a lower KLD than the solver's pick
    def faster(rows):
        rows["r1 front 26"].update(median=2700.0, p10=2690.0, p90=2710.0)

    assert main(["recommend", str(SMOL), _proof(tmp_path, "faster.json", faster)]) == 0
    out = capsys.readouterr().out
    assert "  answer, on the measured steps: r1 front 26 (bf16 95, int4-weight-only[group_size=64] 26): measured " \
           "step 2,700.0 µs, KLD 0.02192 ± 0.0012" in out
    assert ("  why: the solver's pick r1 front 25 measured 2,883.1 µs, slower than r1 front 26 at 2,700.0 µs beyond "
            "noise (p10-p90), the fastest within the budget, at a lower measured KLD (0.02192 against 0.02549)\n") in out
    assert 'label = "r1 front 26"' in out and 'label = "r1 front 25"' not in out
    assert '"model.layers.1.mlp.down_proj"' in out and '"model.layers.0.mlp.down_proj"' not in out  # front 26's call
    assert "the answer is 1.066× its speed" in out  # beside bf16, not tied

    # no spread in the proof step: its medians decide within its run, and the output says so
    def medians(rows):
        for r in rows.values():
            r.update(p10=None, p90=None)

    assert main(["recommend", str(SMOL), _proof(tmp_path, "medians.json", medians)]) == 0
    out = capsys.readouterr().out
    assert "answer, on the measured steps: bf16" in out
    assert ("note: steps compared by their medians alone, as points: bf16 and int8-weight-only (the search file keeps "
            "their speed file's medians, timed in another run than the proof step's); r1 front 25 and r1 front 26 (the "
            "proof step file has no p10-p90 for them)\n") in out

    # the 8B search, steps measured by the search itself: pure schemes by its cost step, the verified recipes by its
    # verification step (two runs); r1 front 2, 5,480.0 µs against int4-weight-only's 5,476.6 (0.06 %), ties with it
    # at a lower KLD; int4-weight-only[group_size=64] (5,575.9 µs) is the cost step's too: a point 1.8 % apart, not tied
    assert main(["recommend", str(FILE)]) == 0
    out = capsys.readouterr().out
    assert "  the search's pick: int4-weight-only (int4-weight-only 129), by solver\n" in out
    assert ("  why: the solver's pick int4-weight-only measured 5,476.6 µs, the fastest within the budget; r1 front 2 "
            "(5,480.0 µs) ties with it within 2 %, timed in different runs, at a lower measured KLD (0.08975 against "
            "0.0914)\n") in out
    assert "the answer is 0.999× its speed (tied within 2 %, timed in different runs)" in out

def test_every_reader_says_one_front_size(tmp_path, capsys):
    """The SmolLM2 search's report said 'front of 96' (its round line), recommend 'a front of 95 recipes' (its front
    rows: bf16 sits on the front as a pure row); the 8B file 'front of 11551' against '11549' (its count without the
    pure points on the front, written before the count held them); the tiny file 'a front of 1 recipes'. Every reader
    now says the last front solved, its round line's count, pure points on it included."""
    root = FILE.parents[1]
    for path, points in ((root / "cpu" / "search_smollm2.json", 96), (FILE, 11551), (TINY, 1)):
        assert main(["report", str(path)]) == 0
        report = capsys.readouterr().out
        assert main(["recommend", str(path)]) == 0
        recommend = capsys.readouterr().out
        counted = "1 point" if points == 1 else f"{points} points"
        assert f"front of {points})" in report and f"a front of {counted} (the last round's" in recommend, path
        assert "recipes between" not in recommend
        said = {int(n) for n in re.findall(r"front(?: of|'s) (\d+)", report + recommend)}
        assert said == {points}, (path, said)
        from qbench.search.view import pick_summary

        assert f"a front of {counted}" in pick_summary([str(path)])[1]


TINY = FILE.parents[1] / "cpu" / "search_tiny.json"  # budget 0.003, pick bf16 (measured 4.879e-05 ± 2e-06)


def _edited(tmp_path, edit, name="edited.json"):
    import json

    doc = json.loads(TINY.read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_recommend_on_a_search_refuses_what_it_cannot_honour(capsys):
    """A search picked under its own budget: another --max-kld, a quality budget, a layer view or a baseline is refused
    in one line (it printed the file's pick at 0.003 for --max-kld 0.001, exit 0); the file's own budget is taken,
    and --format json gives the pick as one document."""
    import json

    for extra, said in ((["--max-kld", "0.001"], "--max-kld 0.001 needs a search at that budget"),
                        (["--min-same-top", "0.9"], "--min-same-top does not apply"),
                        (["--max-rel-err", "0.01"], "--max-rel-err does not apply"),
                        (["--summary"], "--summary does not apply"), (["--by-format"], "--by-format does not apply"),
                        (["--baseline", "fp16"], "--baseline does not apply"),
                        (["--format", "html"], "a search's recommend is text or --format json, not html")):
        assert main(["recommend", str(TINY), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, (extra, err)
    assert main(["recommend", str(TINY), "--max-kld", "0.003"]) == 0
    assert "pick: bf16" in capsys.readouterr().out
    assert main(["recommend", str(TINY), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pick"]["scheme"] == "bf16" and out["search"]["budget"] == {"max_kld": 0.003}


def test_a_damaged_search_file_is_refused_not_printed(tmp_path, capsys):
    """A summary without a usable budget raised TypeError; a pick row the search did not prove (failed, not run
    whole, over the budget, two picks) was printed as the pick with exit 0; a negative step time gave a negative
    speed-up; a rest's damage (search.fixed_kld) not a number >= 0 raised ValueError in report. Each is one line,
    exit 2, in every reader."""
    def pick(**kw):
        return lambda d: d["rows"][0].update(kw)

    def measured(**kw):
        return lambda d: d["rows"][0]["measured"].update(kw)

    cases = [(lambda d: d["search"]["budget"].update(max_kld=None), "search.budget.max_kld"),
             (lambda d: d["search"]["budget"].update(max_kld="0.03"), "search.budget.max_kld"),
             (lambda d: d["search"].pop("m"), "search.m"),
             (pick(status="failed"), "is not a pick the search proved (its status is failed)"),
             (pick(measured=None), "(it was not run whole"),
             (measured(kld=0.5), "measured KLD 0.5 ± 2e-06 is not within max mean KLD 0.003"),
             (lambda d: d["rows"][1].update(pick=True), "2 rows are marked pick (bf16, int8-weight-only)"),
             (measured(step_us=-575.0), "rows[0].measured.step_us"),
             (lambda d: d["search"].update(fixed_kld="0.0003"), "search.fixed_kld"),  # was a ValueError traceback
             (lambda d: d["search"].update(fixed_kld=-0.5), "search.fixed_kld")]
    for i, (edit, said) in enumerate(cases):
        path = _edited(tmp_path, edit, f"e{i}.json")
        for command in (["recommend", path], ["report", path], ["plot", path, "-o", str(tmp_path / f"e{i}.png")]):
            assert main(command) == 2, (said, command)
            err = capsys.readouterr().err
            assert said in err and len(err.strip().splitlines()) == 1, (said, command, err)
        assert not (tmp_path / f"e{i}.png").exists()


def test_report_of_search_files_names_each_file_and_says_an_interrupted_run(tmp_path, capsys):
    """Two search files printed two tables with nothing between them, and two JSON arrays back to back; an interrupted
    run's file was reported without a word; per-layer options were ignored."""
    partial = _edited(tmp_path, lambda d: d.update(complete=False))
    assert main(["report", str(TINY), partial]) == 0
    captured = capsys.readouterr()
    assert f"== {TINY}" in captured.out and f"== {partial}" in captured.out
    assert "incomplete" in captured.err and partial in captured.err
    assert main(["report", str(TINY), partial, "--format", "json"]) == 2
    assert "json holds one search result: report the files one at a time" in capsys.readouterr().err
    for extra in (["--sort", "step_us"], ["--crossover"], ["--by-m"], ["--columns", "scheme"], ["--status", "ok"]):
        assert main(["report", str(TINY), *extra]) == 2, extra
        assert "a search result;" in capsys.readouterr().err


def test_a_search_file_without_rows_is_a_search_file(tmp_path, capsys):
    """With rows: [] the kind came from the rows alone: a search file read as a per-layer result (a layer table,
    roofline charts, '--max-rel-err is required'). The scenario's [search] table says what it is."""
    from qbench.results import read_results

    path = _edited(tmp_path, lambda d: d.update(rows=[]))
    assert read_results(path).job == "search"
    assert main(["recommend", path]) == 1
    assert "no recipe was proven within the budget" in capsys.readouterr().out


def test_a_pure_scheme_is_within_the_budget_by_the_searchs_own_rule(tmp_path, capsys):
    """'The fastest pure scheme within the budget' read the mean alone; the search proves by mean + uncertainty.
    int8 made faster than the pick (half its step): the answer at 0.0029 ± 0.00005, not at 0.0029 ± 0.0002 (budget
    0.003)."""
    def faster_int8(unc):
        return lambda d: d["rows"][1]["measured"].update(step_us=0.5 * d["rows"][0]["measured"]["step_us"], kld=0.0029,
                                                         kld_unc=unc)

    assert main(["recommend", _edited(tmp_path, faster_int8(0.00005), "a.json")]) == 0
    assert "answer, on the measured steps: int8-weight-only" in capsys.readouterr().out
    assert main(["recommend", _edited(tmp_path, faster_int8(0.0002), "b.json")]) == 0
    out = capsys.readouterr().out
    assert "answer, on the" not in out and "pick: bf16" in out


def test_a_verified_row_whose_recipe_cannot_be_read_is_refused_beside_a_proof_step(tmp_path, capsys):
    """The proof-step join reads each verified row's recipe: a malformed one is one line, not a RecipeError."""
    import json

    doc = json.loads(FILE.read_text())
    row = next(r for r in doc["rows"] if r["scheme"] == "r1 front 1")
    row["measured"]["step_us"] = None
    row["recipe"] = {"name": "bf16", "recipe": {"no-such-role": "int8-weight-only"}}
    search = tmp_path / "search.json"
    search.write_text(json.dumps(doc))
    step = json.loads((FILE.parent / "step_smollm2_shapes.json").read_text())
    step["scenario"]["name"] = "search_llama31_8b_cost-proof-step"
    step["rows"] = [{**step["rows"][0], "scheme": "r1 front 1", "m": 1, "context": 4096}]
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(step))
    assert main(["recommend", str(search), str(proof)]) == 2
    err = capsys.readouterr().err
    assert "a search row's recipe is not one a scenario can hold: recipe.recipe.no-such-role: unknown role" in err
    assert len(err.strip().splitlines()) == 1


def test_the_line_on_the_fronts_rows_counts_its_pure_points(tmp_path, capsys):
    """A fresh search_tiny run said 'the file keeps 0 of the front's 1 points as rows' (its summary front {points: 1,
    rows: 0}): the front's only point is pure bf16, which the file keeps as a pure row. The pipeline now records the
    pure points on the front (front.pure) and report names them; a file written before (no front.pure) has them from
    its front solved again from its unit matrices."""
    from qbench.search.pipeline import THINNED

    said = "the front's 1 point is bf16, kept as a pure row"
    fresh = {"points": 1, "rows": 0, "kept": THINNED}  # what the pipeline wrote before front.pure
    for name, front in (("committed", None), ("fresh", fresh), ("recorded", {**fresh, "pure": ["bf16"]})):
        path = TINY if front is None else _edited(tmp_path, lambda d: d["search"].update(front=front), f"{name}.json")
        assert main(["report", str(path)]) == 0
        out = capsys.readouterr().out
        assert said in out and "keeps 0" not in out, (name, out)
    assert main(["report", str(FILE.parents[1] / "cpu" / "search_smollm2.json")]) == 0
    assert "the front's 96 points are 95 mixed recipes and bf16, kept as a pure row" in capsys.readouterr().out


def _proof_with_bf16(tmp_path, name, median, p10, p90):
    """The committed SmolLM2 proof step file with a bf16 row of the given step (µs): a proof step written since the
    pure candidates lead it (search.pipeline.proof_step_scenario), bf16 timed in the recipes' run."""
    import copy
    import json

    doc = json.loads(PROOF.read_text())
    row = copy.deepcopy(next(r for r in doc["rows"] if r["scheme"] == "r1 front 26"))
    row.update(scheme="bf16", recipe=None, base_scheme="bf16")
    row["latency_us"]["step_graph"].update(median=median, p10=p10, p90=p90)
    doc["rows"].append(row)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_pure_scheme_the_proof_step_ran_is_compared_in_that_run(tmp_path, capsys):
    """bf16 in the proof step's own run: its time there (not the speed file's median) is compared by p10-p90 with the
    recipes'. At 2,870 µs (2,865-2,875) it overlaps r1 front 26 (2,860.2-2,869.4): tied within noise, bf16 the lower
    KLD; at 2,950 µs (2,945-2,955) r1 front 26 is faster beyond noise and is the answer."""
    assert main(["recommend", str(SMOL), _proof_with_bf16(tmp_path, "tied.json", 2870.0, 2865.0, 2875.0)]) == 0
    out = capsys.readouterr().out
    assert "  answer, on the measured steps: bf16 (bf16 121): measured step 2,870.0 µs" in out
    assert "bf16 (2,870.0 µs) ties with it within noise (p10-p90), at the lowest measured KLD (0.000907)" in out
    assert "as points: int8-weight-only (the search file keeps its speed file's median" in out  # bf16 is no point now

    assert main(["recommend", str(SMOL), _proof_with_bf16(tmp_path, "slower.json", 2950.0, 2945.0, 2955.0)]) == 0
    out = capsys.readouterr().out
    assert "  answer, on the measured steps: r1 front 26 (bf16 95, int4-weight-only[group_size=64] 26)" in out
    assert "the fastest pure scheme within the budget: bf16, measured step 2,950.0 µs" in out
    assert "the answer is 1.031× its speed\n" in out  # not tied: one run, p10-p90 apart
