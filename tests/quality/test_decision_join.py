"""The joined decision (``qbench recommend STEP.json QUALITY.json``, ``qbench model NAME STEP.json QUALITY.json``):
what each half did with the LM head, the budget's upper bounds, where the step ran, and the committed halves that
join from the repository root (qbench/decision.py)."""

import json
from pathlib import Path

from qbench import cli
from tests.conftest import edited_copy as _edited

ROOT = Path(__file__).resolve().parents[2]
STEP = str(ROOT / "results" / "h200" / "step_tiny_trained.json")
TINY = str(ROOT / "results" / "h200" / "quality_tiny.json")


def _rows(**values):
    """An edit setting ``values`` on every row (a value None: the key removed, as in an older file)."""
    def edit(doc):
        for row in doc["rows"]:
            for key, value in values.items():
                row.pop(key) if value is None else row.update({key: value})
    return edit


def test_halves_that_treated_the_lm_head_differently_are_refused(tmp_path, capsys):
    """A step file whose scenario quantized the LM head (quantize_lm_head = true, every row lm_head 'scheme') beside
    a quality file whose head stayed float joined silently: the KLD missed the head's damage the speed included.
    Refused in one line naming what each half did, by both views; the reverse and a headless step too."""
    quantized = _edited(tmp_path, STEP, "step_head.json", _rows(lm_head="scheme"))
    said = ("the step files quantized the LM head with each scheme (lm_head 'scheme'), the quality files kept the LM "
            "head float (lm_head 'float'): a model decision takes both halves of one configuration (the mean KLD "
            "would miss the quantized head's damage that the speed includes); give a step file whose scenario's "
            "[model] quantize_lm_head matches the quality scenario's [quality] lm_head")
    for argv in (["recommend", quantized, TINY, "--max-kld", "0.002"], ["model", "tiny-shakespeare-llama", quantized, TINY]):
        assert cli.main(argv) == 2
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [f"qbench {argv[0]}: {said}"] and captured.out == ""
    head_quality = _edited(tmp_path, TINY, "quality_head.json", _rows(lm_head="scheme"))
    assert cli.main(["recommend", STEP, head_quality, "--max-kld", "0.002"]) == 2
    assert ("the step files kept the LM head float (lm_head 'float'), the quality files quantized the LM head with "
            "each scheme (lm_head 'scheme')") in capsys.readouterr().err
    headless = _edited(tmp_path, STEP, "step_none.json", _rows(lm_head="none"))
    assert cli.main(["recommend", headless, TINY, "--max-kld", "0.002"]) == 2
    assert "the speed would leave out the LM head's time that the quality rows ran" in capsys.readouterr().err
    # both halves quantized the head: one configuration, joined
    assert cli.main(["recommend", quantized, head_quality, "--max-kld", "0.002"]) == 0


def test_quality_rows_without_an_lm_head_record_are_not_refused_but_said(tmp_path, capsys):
    """An older quality file without ``lm_head`` (read as 'float' by the row model) is not refused beside a quantized
    head: what it did is unknown, and a note says it was not compared."""
    older = _edited(tmp_path, TINY, "older.json", _rows(lm_head=None))
    quantized = _edited(tmp_path, STEP, "step_head.json", _rows(lm_head="scheme"))
    assert cli.main(["recommend", quantized, older, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    n = len(json.loads(Path(TINY).read_text())["rows"])
    assert (f"{n} quality row(s) of older files do not record what they did with the LM head: not compared with the "
            "step rows' (lm_head 'scheme')") in out
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "0.002"]) == 0  # the committed pair: no such note
    assert "do not record what they did with the LM head" not in capsys.readouterr().out


def test_two_lm_head_treatments_in_one_half_are_refused(tmp_path, capsys):
    """Two quality files, one per LM head treatment: rows would pair across treatments; refused."""
    head_quality = _edited(tmp_path, TINY, "quality_head.json", _rows(lm_head="scheme"))
    assert cli.main(["recommend", STEP, TINY, head_quality, "--max-kld", "0.002"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "qbench recommend: the quality files hold rows that kept the LM head float (lm_head 'float') and rows that "
        "quantized the LM head with each scheme (lm_head 'scheme'): a model decision reads one LM head treatment at a "
        "time; give the step and quality files of one"]


def _kld(values):
    """An edit setting ``stats.kld`` ``(mean, unc)`` of the schemes in ``values``."""
    def edit(doc):
        for row in doc["rows"]:
            if row["scheme"] in values:
                row["stats"]["kld"]["mean"], row["stats"]["kld"]["unc"] = values[row["scheme"]]
    return edit


def test_a_pick_within_the_budget_by_its_mean_only_is_said(tmp_path, capsys):
    """At --max-kld 0.0000471 bf16's 4.7e-05 ± 5.9e-07 was accepted with no note, though its upper bound (4.76e-05,
    what the search job requires within the budget) is over. The rule stays the mean's (bf16 is still the pick); a
    note under the table names it; int8-weight-only, within by its bound too, and fp32 (0 ± 0) are not named."""
    quality = _edited(tmp_path, TINY, "quality.json", _kld({"bf16": (4.7e-05, 5.9e-07),
                                                              "int8-weight-only": (4.0e-05, 1e-07)}))
    said = ("within the budget by the mean (as llama.cpp's users read it), not by mean ± uncertainty (what the search "
            "job requires): bf16 (picked): mean KLD 4.7e-05 ± 5.9e-07 is within the budget by its mean; its upper "
            "bound 4.76e-05 is over 4.71e-05")
    assert cli.main(["recommend", STEP, quality, "--max-kld", "0.0000471"]) == 0
    out = capsys.readouterr().out
    assert {line.split()[2] for line in out.splitlines() if line.split()[:1] in (["1"], ["16"])} == {"bf16"}
    assert said in " ".join(out.split())
    # a quality file alone: the same note under its within-budget table (no pick there)
    assert cli.main(["recommend", quality, "--max-kld", "0.0000471"]) == 0
    assert said.replace(" (picked)", "") in " ".join(capsys.readouterr().out.split())
    # a budget the bound meets too: no note
    assert cli.main(["recommend", STEP, quality, "--max-kld", "0.00005"]) == 0
    assert "within the budget by the mean" not in capsys.readouterr().out


def test_a_lower_budget_names_its_lower_bound():
    """same top ≥ 99 %: 99.06 % ± 0.08 % meets it by its value, and by its lower bound (98.98 %) does not."""
    from qbench.quality.view import BUDGETS
    from qbench.results import read_results

    row = next(r for r in read_results(TINY).rows if r.scheme == "bf16")
    same_top = next(b for b in BUDGETS if b.name == "min_same_top")
    assert same_top.bound_over(row, 0.99) == ("same top 99.06 ± 0.075 % is within the budget by its mean; its lower "
                                             "bound 98.99 % is under 99 %")
    assert same_top.bound_over(row, 0.98) is None and same_top.bound_over(row, 0.995) is None  # met by both, missed
    p99 = next(b for b in BUDGETS if b.name == "max_kld_p99")
    assert p99.unc is None and p99.bound_over(row, 1.0) is None  # a percentile has no uncertainty: never said


def _on_cpu(doc):
    """A step file's copy as if timed on a CPU (env and rows)."""
    doc["env"].update(device="cpu", device_name=None, cpu="AMD EPYC", compute_capability=None)
    for row in doc["rows"]:
        row["device"] = "cpu"


def test_the_joined_views_say_where_the_step_ran(tmp_path, capsys):
    """qbench model printed 'fp32 0.98×' with no device; now a line names the step files' machine. A CPU step's line
    says its speed-ups do not carry to a GPU, in model and in the joined recommend (whose own line names the machine
    already: not said twice)."""
    caveat = ("a CPU's speed-ups do not carry to a GPU (other kernels, other limits): time the step on the GPU that will "
              "serve the model")
    assert cli.main(["model", "tiny-shakespeare-llama", STEP, TINY]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "speed-ups (M=m/context): decode steps measured on cuda NVIDIA H200" in out and caveat not in " ".join(out)
    cpu = _edited(tmp_path, STEP, "step_cpu.json", _on_cpu)
    assert cli.main(["model", "tiny-shakespeare-llama", cpu, TINY]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"speed-ups (M=m/context): decode steps measured on cpu AMD EPYC: {caveat}" in out
    assert cli.main(["recommend", cpu, TINY, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the fastest decode step measured on cpu AMD EPYC (step_graph)" in out and out.count("AMD EPYC") == 1
    assert caveat in out.split("M ctx")[0]  # above the table
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "measured on cuda NVIDIA H200 (step_graph)" in out and caveat not in out


SMOLLM2_STEP = str(ROOT / "results" / "h100" / "step_smollm2_shapes.json")
SMOLLM2_UNITS = str(ROOT / "results" / "cpu" / "quality_smollm2_units.json")  # LM head quantized, as the step's


def test_the_committed_smollm2_halves_join_from_the_root_and_from_elsewhere(tmp_path, monkeypatch, capsys):
    """step_smollm2_shapes.json (seeded weights of data/configs/smollm2-135m/config.json) beside a SmolLM2 quality
    file said 'a config not readable from here': the quality checkpoint lives outside the repository
    (../smollm2-135m-hf, data/README.md) and a clone without it could not read its config; from another working
    directory the step's own config (named relative to the recorded source, scenarios/...) was not found either. Now
    the scenario is found from the result file's folder, and a checkpoint not here is compared by its rows'
    parameter counts: the halves join (the quantized-head ones) or meet the LM head refusal (the float-head ones)."""
    for cwd, prefix in ((ROOT, ""), (tmp_path, str(ROOT) + "/")):
        monkeypatch.chdir(cwd)
        assert cli.main(["recommend", prefix + "results/h100/step_smollm2_shapes.json",
                         prefix + "results/cpu/quality_smollm2_units.json", "--max-kld", "0.03"]) == 0, capsys.readouterr()
        out = " ".join(capsys.readouterr().out.split())
        assert "speed measured on seeded weights of" in out and "hidden 576, heads 9, kv_heads 3, head_dim 64" in out
        assert cli.main(["recommend", prefix + "results/h100/step_smollm2_shapes.json",
                         prefix + "results/cpu/quality_smollm2.json", "--max-kld", "0.03"]) == 2
        assert capsys.readouterr().err.startswith("qbench recommend: the step files quantized the LM head")


def test_a_checkpoint_not_here_is_compared_by_its_rows_counts(tmp_path, capsys):
    """Its checkpoint moved away, the quality file's rows still carry their sizes: SmolLM2's linear weights
    (30 × 3,538,944) and LM head (49,152 × 576) are the step config's: joined, and the note says how. The seeded
    Llama-3-8B step beside it is refused, and so is a copy whose linear count is off."""
    def away(doc):
        doc["scenario"]["model"]["checkpoint"] = str(tmp_path / "not-here")
    quality = _edited(tmp_path, SMOLLM2_UNITS, "units.json", away)
    assert cli.main(["recommend", SMOLLM2_STEP, quality, "--max-kld", "0.03"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("speed measured on seeded weights of hidden 576, heads 9, kv_heads 3, head_dim 64, ffn 1536, vocab 49152, "
            "blocks 30; the quality rows' weights (checkpoint /work/smollm2-135m-hf (bfloat16)) are not here to read "
            "their config, and their counts are the config's (linear weights 106,168,320, LM head 28,311,552; counts "
            "cannot tell heads × head_dim apart)") in out
    llama = str(ROOT / "results" / "h200" / "step_llama3_8b.json")
    assert cli.main(["recommend", llama, quality, "--max-kld", "0.03"]) == 2
    assert ("of a config not readable from here (its checkpoint is not here, and its rows' parameter counts do not "
            "show the step config's): a seeded speed half must have the quality checkpoint's config"
            ) in capsys.readouterr().err

    def off(doc):
        away(doc)
        doc["rows"][0]["linear_params"] += 576
    assert cli.main(["recommend", SMOLLM2_STEP, _edited(tmp_path, SMOLLM2_UNITS, "off.json", off), "--max-kld",
                     "0.03"]) == 2
    assert "parameter counts do not show the step config's" in capsys.readouterr().err


def test_a_float_head_checkpoint_not_here_is_compared_by_its_stored_bytes(tmp_path, monkeypatch, capsys):
    """A float LM head is not in the linear count: the rows' stored bytes beyond their linears (embedding, norms:
    2 bytes each of 28,346,688) cover it."""
    monkeypatch.chdir(ROOT)  # the step copy's scenario (scenarios/...) is found from the working directory
    step = _edited(tmp_path, SMOLLM2_STEP, "step.json", _rows(lm_head="float"))
    def away(doc):
        doc["scenario"]["model"]["checkpoint"] = str(tmp_path / "not-here")
    quality = _edited(tmp_path, str(ROOT / "results" / "cpu" / "quality_smollm2.json"), "q.json", away)
    assert cli.main(["recommend", step, quality, "--max-kld", "0.03"]) == 0
    assert "(linear weights 106,168,320, the rest 28,346,688;" in " ".join(capsys.readouterr().out.split())
