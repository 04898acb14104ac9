"""quality/view: the quality table's narrow terminal default (fits 120 characters, the flags every
row shares said once) and its uncertainties to two significant digits."""

import json
from pathlib import Path

from qbench import cli
from qbench import decision
from qbench.quality import view

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = str(ROOT / "results" / "cpu" / "quality_smollm2.json")


def test_uncertainty_has_two_significant_digits():
    assert view.pm(36.98, 3.964) == "36.98 ± 4.0"
    assert view.pm(0.00104, 4.03e-05, "{:.3g}") == "0.00104 ± 4.0e-05"
    assert view.pm(7.601, 0.08667) == "7.601 ± 0.087"
    assert view.pm(None, 1.0) == view.DASH and view.pm(2.0, None) == "2"


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


def test_model_names_why_a_quality_scheme_has_no_step_speed_up(tmp_path, capsys):
    """A scheme with a quality row and no ok step row: its dashes are explained, with the step's reason."""
    doc = json.loads(Path(STEP).read_text())
    doc["rows"] = [r for r in doc["rows"] if r["scheme"] != "int8-weight-only"]
    for r in doc["rows"]:
        if r["scheme"] == "nf4-bnb":
            r.update(status="failed", reason="out of memory")
    step = tmp_path / "step.json"
    step.write_text(json.dumps(doc))
    assert cli.main(["model", "tiny-shakespeare-llama", str(step), TINY]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "— under M=: no ok step of the scheme there: " in out
    assert "nf4-bnb (failed: out of memory)" in out and "int8-weight-only (no step row)" in out
    for r in doc["rows"]:  # the baseline missing at one point: the others' cells there say so
        if r["scheme"] == "bf16" and (r["m"], r["context"]) == (1, 128):
            r.update(status="failed", reason="out of memory")
    step.write_text(json.dumps(doc))
    assert cli.main(["model", "tiny-shakespeare-llama", str(step), TINY]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fp32 (no ok bf16 step at M=1/128)" in out


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
    assert view.pm(0.0, 0.0) == "0 ± 0"


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
    picks = decision.recommend_records(steps, quality, [(view.BUDGETS[0], 1.0)])
    assert {r["pick"] for r in picks} == {"bf16"}


def test_model_refuses_a_name_the_files_are_not_of(capsys):
    """`qbench model llama3-8b step.json quality.json` printed the tiny model's table; now one line."""
    assert cli.main(["model", "llama3-8b", STEP, TINY]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("a step result of tiny-shakespeare-llama (../data/checkpoints/tiny-shakespeare-llama), not of "
                         "llama3-8b")
    assert cli.main(["model", "../data/checkpoints/tiny-shakespeare-llama", STEP, TINY]) == 0  # its path names it too


def _copy(tmp_path, src, name, **row_updates):
    """A copy of result file ``src`` under ``tmp_path`` with every row's keys updated (a value that is
    a function gets the row and gives the value)."""
    import json

    doc = json.loads(Path(src).read_text())
    for row in doc["rows"]:
        row.update({k: v(row) if callable(v) else v for k, v in row_updates.items()})
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_same_checkpoint_joins_by_its_identity_from_two_working_directories(tmp_path, capsys):
    """Friction 1: the same folder typed from two working directories was refused as different weights."""
    digest = "ab" * 32
    step = _copy(tmp_path, STEP, "step.json", weight_source="checkpoint my/my-llama (float32)", checkpoint_id=digest)
    quality = _copy(tmp_path, TINY, "quality.json", weights="checkpoint my-llama (float32)", checkpoint_id=digest)
    assert cli.main(["recommend", step, quality, "--max-kld", "0.002"]) == 0
    assert cli.main(["model", "tiny-shakespeare-llama", step, quality]) == 0
    other = _copy(tmp_path, TINY, "other.json", checkpoint_id="cd" * 32)
    capsys.readouterr()
    assert cli.main(["recommend", step, other, "--max-kld", "0.002"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint (sha256 abababababab) is not the quality files' (sha256 cdcdcdcdcdcd)" in err


def test_without_an_identity_the_paths_are_compared_normalized(tmp_path, capsys):
    """Older files (no checkpoint_id): `data/x/../x` and `data/x` are one folder; another is named."""
    step = _copy(tmp_path, STEP, "step.json", weight_source="checkpoint data/../data/ckpt (float32)")
    quality = _copy(tmp_path, TINY, "quality.json", weights="checkpoint data/ckpt (float32)")
    assert cli.main(["recommend", step, quality, "--max-kld", "0.002"]) == 0
    other = _copy(tmp_path, TINY, "other.json", weights="checkpoint elsewhere/ckpt (float32)")
    capsys.readouterr()
    assert cli.main(["recommend", step, other, "--max-kld", "0.002"]) == 2
    err = capsys.readouterr().err
    assert "(checkpoint data/ckpt (float32)) are not the quality files' (checkpoint elsewhere/ckpt (float32)): the paths " \
           "differ" in err and "no checkpoint_id" in err


SEEDED_STEP = str(ROOT / "results" / "h200" / "step_llama3_8b.json")
SEEDED_QUALITY = str(ROOT / "results" / "h200" / "quality_llama3_8b_seeded.json")


def test_a_seeded_step_of_the_same_config_is_a_speed_half_and_says_so(capsys):
    assert cli.main(["recommend", SEEDED_STEP, SEEDED_QUALITY, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "speed measured on seeded weights of the same config (hidden 4096, heads 32, kv_heads 8" in out
    # a seeded step of another model's config is refused, saying so
    assert cli.main(["recommend", SEEDED_STEP, TINY, "--max-kld", "0.002"]) == 2
    assert "a seeded speed half must have the quality checkpoint's config" in capsys.readouterr().err


def test_the_joined_recommend_says_what_the_step_one_says(capsys):
    """Frictions 2, 3 and 8: the tie rule, the pick's flags, what was not timed, and every scheme the
    join leaves out (a quality row without a step row was dropped silently)."""
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("among them the pick is the smaller context's, else the lower mean KLD on this checkpoint, then fewer bytes: "
            "M=1 ctx=128: bf16 picked from bf16 (fastest median), nf4-bnb") in out
    assert "not timed (no step time, not considered): w8a8-dynamic" in out
    assert "no step row (quality only, never picked): tf32, fp16, int4-intx" in out
    assert cli.main(["recommend", SEEDED_STEP, SEEDED_QUALITY, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "flags on the picks and on the baselines" in out and "M=1 ctx=4096: int8-weight-only+compiled [noisy" in out


def test_a_layer_file_is_not_a_speed_half(capsys):
    """Friction 5: `recommend LAYER.json QUALITY.json` ignored the layer file (exit 0)."""
    layer = str(ROOT / "results" / "h200" / "decode.json")
    for argv in (["recommend", layer, TINY, "--max-kld", "0.01"], ["model", "tiny-shakespeare-llama", layer, TINY]):
        assert cli.main(argv) == 2
        assert "decode.json: a layer result cannot be the speed half of a model decision" in capsys.readouterr().err


def test_model_marks_a_speedup_of_a_flagged_step(tmp_path, capsys):
    """Friction 4: `qbench model` printed a noisy step's 51.99× bare."""
    def throttle(r):  # NVML's reading after step_graph says so too: the mark follows the reading the ratio uses
        if not (r["scheme"].startswith("nf4-bnb") and r["m"] == 1):
            return r.get("gpu_state")
        state = r.get("gpu_state") or {}
        state.setdefault("by_method", {}).setdefault("step_graph", {})["throttle_reasons"] = ["sw_power_cap"]
        return state

    step = _copy(tmp_path, STEP, "step.json", gpu_state=throttle,
                 flags=lambda r: [{"name": "throttled", "text": "sw_power_cap active right after step_graph"}]
                 if r["scheme"].startswith("nf4-bnb") and r["m"] == 1 else [])
    assert cli.main(["model", "tiny-shakespeare-llama", step, TINY]) == 0
    out = capsys.readouterr().out
    nf4 = next(line for line in out.splitlines() if line.startswith("nf4-bnb "))
    assert nf4.split()[-4:] == ["0.99×*", "0.99×*", "0.72×", "0.72×"]
    assert "*: a speed-up whose step or bf16 step is flagged" in out and "nf4-bnb M=1/128 [throttled]" in out


def test_the_kld_tail_is_a_budget(capsys):
    """--max-kld-p99 bounds the 99th percentile of the per-token KLD: nf4-bnb meets a mean KLD of 0.002
    (0.00163) but its tail (0.0150) misses 0.01, so it is no longer tied with the pick."""
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "0.002"]) == 0
    assert "nf4-bnb" in capsys.readouterr().out.split("outside the budget")[0]
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "0.002", "--max-kld-p99", "0.01", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "meets mean KLD ≤ 0.002, 99th-percentile KLD ≤ 0.01 on this checkpoint" in " ".join(out.split())
    assert "nf4-bnb (99th-percentile KLD 0.015 > 0.01)" in out.split("outside the budget")[1]
    assert cli.main(["recommend", STEP, TINY, "--max-kld-p99", "-1"]) == 2
    assert "--max-kld-p99: must be a number >= 0, got -1.0" in capsys.readouterr().err


def test_a_report_of_rows_of_two_texts_says_each(tmp_path, capsys):
    """A file whose rows scored two texts printed the first row's text as every row's header."""
    import json

    doc = json.loads(Path(SMOLLM2).read_text())
    doc["rows"][1]["text"], doc["rows"][1]["text_sha256"] = "other.txt", "ab" * 32
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    first, second = doc["rows"][0], doc["rows"][1]
    assert out.startswith("the rows differ: 2 models or texts, each said with its schemes\n")
    assert f"text other.txt (sha256 abababababab)" in out and f"(sha256 {first['text_sha256'][:12]})" in out
    assert f"(schemes: {second['scheme']})" in " ".join(out.split())


def test_a_negative_zero_budget_reads_zero(capsys):
    assert cli.main(["recommend", STEP, TINY, "--max-kld", "-0"]) in (0, 1)
    out = capsys.readouterr().out
    assert "mean KLD ≤ 0 " in out and "≤ -0" not in out and "> -0)" not in out


def test_rms_dp_is_a_budget(capsys):
    """--max-dp-rms bounds RMS Δp (bf16's 0.0021 on the trained model misses 0.002, fp32's 0 meets it)."""
    assert cli.main(["recommend", STEP, TINY, "--max-dp-rms", "0.002", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "meets RMS Δp ≤ 0.2 % on this checkpoint" in " ".join(out.split())
    assert "bf16 (RMS Δp 0.21 % > 0.2 %)" in out.split("outside the budget")[1]
    assert cli.main(["recommend", STEP, TINY, "--max-dp-rms", "2"]) == 2
    assert "--max-dp-rms: must be a number >= 0 and <= 1, got 2.0" in capsys.readouterr().err


CALIBRATED = ROOT / "results" / "cpu" / "quality_tiny_calibrated.json"


def test_a_report_says_what_each_calibrated_row_was_calibrated_on(tmp_path, capsys):
    """The committed calibrated file: one line for its one span, naming the four calibrated rows. A
    copy whose AWQ rows were calibrated on another span says two lines, each with its schemes; a
    file without calibrated rows says none."""
    assert cli.main(["report", str(CALIBRATED)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("calibration of int4-gptq, int4-awq, int4-gptq[group_size=64], int4-awq[group_size=64]: text "
            "scenarios/../data/text/hamlet.txt (sha256 bbe5635616c6), 16 chunks × 512 tokens from chunk 64 "
            "(tokens [32768, 40960)) reference:") in out
    doc = json.loads(CALIBRATED.read_text())
    for r in doc["rows"]:
        if r["base_scheme"] == "int4-awq":
            r["calibration"].update(first_chunk=80, chunks=1, span=[40960, 41472], tokens=512)
    path = tmp_path / "awq_elsewhere.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("calibration of int4-gptq, int4-gptq[group_size=64]: text scenarios/../data/text/hamlet.txt (sha256 "
            "bbe5635616c6), 16 chunks × 512 tokens from chunk 64 (tokens [32768, 40960)) calibration of int4-awq, "
            "int4-awq[group_size=64]: text scenarios/../data/text/hamlet.txt (sha256 bbe5635616c6), 1 chunk × 512 "
            "tokens from chunk 80 (tokens [40960, 41472)) reference:") in out
    assert cli.main(["report", SMOLLM2]) == 0
    assert "calibration" not in capsys.readouterr().out


def test_a_flag_shared_by_name_says_each_of_its_texts_with_its_schemes(tmp_path, capsys):
    """RTN, GPTQ and AWQ rows all carry ``emulated``, each with its own scheme's text: the footnote said the
    first row's text for 'every row'. Now each text with its schemes; 'every row' only for one text."""
    doc = json.loads(CALIBRATED.read_text())
    doc["rows"] = [r for r in doc["rows"] if r["scheme"] in ("int4-weight-only", "int4-gptq", "int4-awq")]
    path = tmp_path / "rtn_gptq_awq.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(every row)" not in out
    for name in ("int4-weight-only", "int4-gptq", "int4-awq"):
        assert f"emulated ({name}): no {name} kernel on cpu ({name} has no CPU kernel: needs CUDA)" in out
    for r in doc["rows"]:  # one text on every row: said once, for every row
        next(f for f in r["flags"] if f["name"] == "emulated")["text"] = "the same text"
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("emulated (every row): the same text") == 1 and out.count("the same text") == 1
