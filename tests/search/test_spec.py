"""A search scenario's bad inputs: one line naming the file, the key and the value, exit 2, nothing run."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from qbench import cli, jobs, scenario

ROOT = Path(__file__).resolve().parents[2]
BASE = (ROOT / "scenarios" / "search_tiny.toml").read_text(encoding="utf-8")


def load(text: str):
    return scenario.from_dict(tomllib.loads(text), str(ROOT / "scenarios" / "x.toml"))


def refusal(text: str) -> str:
    with pytest.raises(scenario.ScenarioError) as info:
        load(text)
    assert "\n" not in str(info.value)
    return str(info.value).split(": ", 1)[1]


def test_a_search_table_selects_the_search_kind():
    assert jobs.of_tables(tomllib.loads(BASE)).name == "search"


def test_overlapping_spans_are_refused():
    got = refusal(BASE.replace("first_chunk = 4, chunks = 12", "first_chunk = 2, chunks = 12"))
    assert got.startswith("search: calibration (chunks 0..3) and evaluation (chunks 2..13) overlap")


def test_one_candidate_is_refused():
    text = BASE.split("[[schemes]]")[0] + '[[schemes]]\nname = "bf16"\n'
    assert refusal(text) == "schemes: a search chooses among at least two candidates, got 1"


def test_candidates_of_two_activation_dtypes_are_refused():
    got = refusal(BASE + '[[schemes]]\nname = "fp32"\n')
    assert got == ("schemes[3].name: fp32 runs at float32 activations, the base bf16 at bfloat16: a recipe's linears "
                   "share the model's hidden states, so the candidates must take one activation dtype, got 'fp32'")


def test_candidates_of_two_modes_are_refused():
    got = refusal(BASE + '[[schemes]]\nname = "int8-weight-only"\nmode = "compiled"\n')
    assert got.startswith("schemes[3].mode: a recipe runs in one mode: the base 'bf16' is eager, got 'compiled'")


def test_a_budget_of_zero_is_refused():
    assert refusal(BASE.replace("max_kld = 0.003", "max_kld = 0")).startswith("search.max_kld:")


def test_a_quality_table_is_refused_naming_the_search_keys():
    got = refusal(BASE + '\n[quality]\ntext = "x"\n')
    assert got.startswith("quality:") and "search" in got


def test_a_speed_file_that_is_not_there_is_refused(tmp_path):
    got = refusal(BASE.replace('methods = ["step_cpu", "step_graph"]', 'speed = "nowhere.json"'))
    assert got.startswith("search.speed: \"step\" (run the step job) or a step result file; no file") and \
        got.endswith("got 'nowhere.json'")


def test_check_says_the_budget_the_point_and_the_spans(capsys):
    assert cli.main(["check", str(ROOT / "scenarios" / "search_tiny.toml")]) == 0
    out = capsys.readouterr().out
    assert "max mean KLD 0.003 at M = 1, context 128; damages on chunks 0..3, proof on 4..15" in out


def test_a_speed_file_that_cannot_give_the_costs_is_refused_before_anything_runs():
    """A quality file, a step file of another model or point, or a step file without the candidates' rows passed
    qbench check and failed after the floor and damage jobs had run, naming the temporary job files."""
    results = "../results"
    cases = ((f"{results}/cpu/quality_tiny.json", "a model-step result file (qbench run of a [model] scenario), got "
                                                  "a quality result"),
             (f"{results}/h200/step_llama31_8b.json", "candidate 'int4-intx' has no cost: no step row at M=1, "
                                                      "context=128"),
             (f"{results}/cpu/search_tiny.json", "got a search result"))
    for path, said in cases:
        got = refusal(BASE.replace('methods = ["step_cpu", "step_graph"]', f'speed = "{path}"'))
        assert got.startswith("search.speed: ") and said in got, (path, got)


def test_a_method_the_step_job_does_not_time_is_refused():
    got = refusal(BASE.replace('methods = ["step_cpu", "step_graph"]', 'methods = ["step_cpu"]\nmethod = "step_graph"'))
    assert got == ("search.method: the step job times only step_cpu (search.methods): the method the rest is read by "
                   "must be one of them, got 'step_graph'")


def test_an_existing_search_output_is_refused_without_offering_resume(tmp_path, capsys):
    """The refusal of an existing file offered --resume, which a search refuses (it is one pipeline)."""
    out = tmp_path / "s.json"
    out.write_text("{}")
    scenario_path = str(ROOT / "scenarios" / "search_tiny.toml")
    assert cli.main(["run", scenario_path, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists; pass --force to overwrite it, or --out to choose another file" in err
    assert cli.main(["run", scenario_path, "-o", str(out), "--resume"]) == 2
    assert "--resume: a search scenario runs its jobs as one pipeline and keeps no partial rows" in \
        capsys.readouterr().err
    assert out.read_text() == "{}"


def test_one_scheme_under_two_labels_is_refused():
    got = refusal(BASE + '[[schemes]]\nname = "int8-weight-only"\nlabel = "int8 again"\n')
    assert got == ("schemes[3]: the same scheme as schemes[1] (int8-weight-only) under another label: a search chooses "
                   "among different schemes, got 'int8 again'")


def test_a_speed_file_of_another_checkpoint_is_refused_by_check_before_anything_runs(tmp_path, capsys, monkeypatch):
    """A speed file whose rows carry no checkpoint_id (results/h200/step_tiny_trained.json, an older file) passed qbench
    check; qbench run then measured the evaluation span and every unit's damage and refused at the pairing, exit 2,
    nothing kept. The pairing (qbench.decision.pairing) is now checked with the checkpoint's content identity, known
    before anything is measured: check refuses, and run refuses without measuring. The same file stamped with the
    checkpoint's own identity passes; with another's it is refused."""
    import json

    from qbench.model.checkpoint import identity
    from qbench.search import pipeline

    speed = ROOT / "results" / "h200" / "step_tiny_trained.json"
    text = BASE.replace('methods = ["step_cpu", "step_graph"]', f'speed = "{speed}"')
    text = text.replace('[[schemes]]\nname = "int4-intx"\n', "")  # the H200 file has no int4-intx row
    got = refusal(text)
    assert got.startswith(f"search.speed: {speed}: checkpoint_id: the step files carry no checkpoint_id") and \
        got.endswith("re-run the step scenario on this checkpoint"), got

    path = tmp_path / "s.toml"
    path.write_text(text.replace('"../data/', f'"{ROOT}/data/'))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "search.speed:" in err and "carry no checkpoint_id" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setattr(pipeline.Search, "floor", lambda self: pytest.fail("measured before the refusal"))
    assert cli.main(["run", str(path), "-o", str(tmp_path / "out.json")]) == 2
    assert "carry no checkpoint_id" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [path]

    doc = json.loads(speed.read_text())
    own = identity(ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama")
    for stamp, refused in ((own, False), ("0" * 64, True)):
        for r in doc["rows"]:
            r["checkpoint_id"] = stamp
        stamped = tmp_path / f"step_{stamp[:4]}.json"
        stamped.write_text(json.dumps(doc))
        other = text.replace(f'speed = "{speed}"', f'speed = "{stamped}"')
        if refused:
            assert refusal(other).startswith(f"search.speed: {stamped}: checkpoint_id: the step files' checkpoint "
                                             "(sha256 000000000000) is not the quality files'")
        else:
            load(other)


def test_a_quantizer_calibration_span_is_refused_in_the_searchs_own_terms():
    """int4-gptq among the candidates: its span overlapping the damage span (chunks 0..3) is refused under
    search.quantizer_calibration.first_chunk, saying which job's tokens it overlaps; a span past the text's end,
    with no text written, under .chunks (the quality job names .text, a key this file does not have)."""
    gptq = BASE.replace('name = "int4-intx"', 'name = "int4-gptq"')
    overlap = refusal(gptq.replace("evaluation = { first_chunk = 4, chunks = 12 }",
                                   "evaluation = { first_chunk = 4, chunks = 12 }\n"
                                   "quantizer_calibration = { first_chunk = 2, chunks = 2 }"))
    assert overlap.startswith("search.quantizer_calibration.first_chunk: the calibration span, tokens [1024, 2048)")
    assert overlap.endswith("(in the calibration job: the tokens it scores are search.calibration's)")
    long = refusal(gptq.replace("evaluation = { first_chunk = 4, chunks = 12 }",
                                "evaluation = { first_chunk = 4, chunks = 12 }\n"
                                "quantizer_calibration = { first_chunk = 100000, chunks = 2 }"))
    assert long.startswith("search.quantizer_calibration.chunks: ") and "fewer than the calibration span needs" in long
    ok = load(gptq.replace("evaluation = { first_chunk = 4, chunks = 12 }",
                           "evaluation = { first_chunk = 4, chunks = 12 }\n"
                           "quantizer_calibration = { first_chunk = 16, chunks = 2 }"))
    assert ok.search.quantizer_calibration.first_chunk == 16
