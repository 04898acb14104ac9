"""quality/view: the quality table's narrow terminal default (fits 120 characters, the flags every
row shares said once) and its uncertainties to two significant digits."""

from pathlib import Path

from qbench import cli
from qbench.quality import view

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = str(ROOT / "results" / "cpu" / "quality_smollm2.json")


def test_uncertainty_has_two_significant_digits():
    assert view._pm(36.98, 3.964) == "36.98 ± 4.0"
    assert view._pm(0.00104, 4.03e-05, "{:.3g}") == "0.00104 ± 4.0e-05"
    assert view._pm(7.601, 0.08667) == "7.601 ± 0.087"
    assert view._pm(None, 1.0) == view.DASH and view._pm(2.0, None) == "2"


def test_narrow_table_fits_120_and_says_the_shared_flag_once(capsys):
    assert cli.main(["report", SMOLLM2]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120, max(out, key=len)
    assert sum(line.startswith("prequantized-weights (every row): dequantized from") for line in out) == 1
    row = {line.split()[0]: line for line in out if line.startswith(("fp32 ", "fp8-dynamic "))}
    assert row["fp32"].split()[-1] == view.DASH and row["fp8-dynamic"].split()[-1] == "emulated"
    assert not any("prequantized-weights" in line and line.startswith("bf16 ") for line in out)


def test_wide_and_markdown_keep_every_column(capsys):
    for argv in (["--wide"], ["--format", "github"]):
        assert cli.main(["report", SMOLLM2, *argv]) == 0
        out = capsys.readouterr().out
        assert "ln(PPL/PPL ref)" in out and "RMS Δp" in out and "model MiB" in out
        assert "emulated, prequantized-weights" in out


STEP = str(ROOT / "results" / "h200" / "step_tiny_trained.json")
TINY = str(ROOT / "results" / "h200" / "quality_tiny.json")


def test_model_and_recommend_on_both_halves_fit_120(capsys):
    """The narrow `model` view leaves the PPL ratio to --wide; `recommend`'s prose wraps."""
    assert cli.main(["model", "tiny-shakespeare-llama", STEP, TINY]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120 and not any("PPL ratio" in line for line in out)
    assert any(line.split()[:1] == ["scheme"] and "M=1/128" in line for line in out)
    assert cli.main(["model", "tiny-shakespeare-llama", STEP, TINY, "--wide"]) == 0
    assert "PPL ratio" in capsys.readouterr().out
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "0.002"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120 and out[0].startswith("tiny-shakespeare-llama")


def test_an_exact_zero_uncertainty_reads_zero():
    assert view._pm(0.0, 0.0) == "0 ± 0"


def test_ties_within_noise_are_broken_by_the_checkpoints_kld(monkeypatch):
    """When every step is tied within noise, the join picks the lowest mean KLD on the checkpoint, not
    the lowest logits error of the step (a user's CPU run picked int8 at 0.90x over bf16 that way)."""
    from qbench import judge
    from qbench.results import read_results
    from qbench.step import view as step_view

    steps = [r for r in read_results(STEP).rows if r.scheme in ("bf16", "int8-weight-only", "nf4-bnb")]
    quality = list(read_results(TINY).rows)
    monkeypatch.setattr(judge, "within_noise", lambda a, b, reading=None: True)
    backwards = {"bf16": 0.3, "int8-weight-only": 0.2, "nf4-bnb": 0.1}  # logits errors in the other order
    monkeypatch.setattr(step_view, "logits_error", lambda r: backwards[r.scheme])
    assert {r["pick"] for r in step_view.recommend(steps, 1.0)} == {"nf4-bnb"}  # the step's own tie-break
    kld = {q.scheme: q.stats.kld.mean for q in quality}
    assert kld["bf16"] < kld["int8-weight-only"] < kld["nf4-bnb"]
    picks = view.recommend_records(steps, quality, 1.0, None, None)
    assert {r["pick"] for r in picks} == {"bf16"}


def test_model_refuses_a_name_the_files_are_not_of(capsys):
    """`qbench model llama3-8b step.json quality.json` printed the tiny model's table; now one line."""
    assert cli.main(["model", "llama3-8b", STEP, TINY]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("a step result of tiny-shakespeare-llama (../data/checkpoints/tiny-shakespeare-llama), not of "
                         "llama3-8b")
    assert cli.main(["model", "../data/checkpoints/tiny-shakespeare-llama", STEP, TINY]) == 0  # its path names it too
