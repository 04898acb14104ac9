"""The quality readers' defects found by the break review, each on its repro: data formats carry
numbers (not a row's repr), a step and a quality file in one report are refused in one line, the
baseline never takes a budget's pick, two rows of one scheme are refused, prose stays off a JSON
stdout, --columns is honoured, hand-edited statistics are refused and an incomplete file is said so."""

import csv
import io
import json
from pathlib import Path

import pytest

from qbench import cli
from tests.conftest import edited_copy as _edited

ROOT = Path(__file__).resolve().parents[2]
STEP = str(ROOT / "results" / "h200" / "step_tiny_trained.json")
CPU_TINY = str(ROOT / "results" / "cpu" / "quality_tiny.json")
H200_TINY = str(ROOT / "results" / "h200" / "quality_tiny.json")


def test_d1_json_of_a_quality_report_and_model_holds_numbers(capsys):
    assert cli.main(["report", CPU_TINY, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    fp16 = next(r for r in records if r["scheme"] == "fp16")
    assert fp16["kld"] == pytest.approx(7.27e-07, rel=1e-2) and fp16["kld_unc"] > 0 and fp16["status"] == "ok"
    assert records[0]["scheme"] == "fp32" and records[0]["ppl"] == pytest.approx(7.5914, rel=1e-4)
    assert records[0]["stored"] == pytest.approx(3413504 / 2**20) and records[0]["flags"] is None
    assert cli.main(["model", "tiny-shakespeare-llama", STEP, H200_TINY, "--format", "json"]) == 0
    model = json.loads(capsys.readouterr().out)
    bf16 = next(r for r in model if r["scheme"] == "bf16")
    assert isinstance(bf16["kld"], float) and bf16["M=1/128"] == pytest.approx(1.0)


def test_d2_csv_cells_hold_numbers_not_a_rows_repr(capsys):
    assert cli.main(["report", CPU_TINY, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["scheme"] == "fp32" and float(rows[0]["ppl"]) == pytest.approx(7.5914, rel=1e-4)
    assert all("job=" not in cell for row in rows for cell in row.values())
    assert cli.main(["model", "tiny-shakespeare-llama", STEP, H200_TINY, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "QualityRow" not in out and "{'scheme'" not in out
    bf16 = next(r for r in csv.DictReader(io.StringIO(out)) if r["scheme"] == "bf16")
    assert float(bf16["M=1/128"]) == pytest.approx(1.0)


def test_d3_a_step_and_a_quality_file_in_one_report_are_refused_in_one_line(capsys):
    assert cli.main(["report", STEP, CPU_TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(step)" in err and "(quality)" in err and "Traceback" not in err


@pytest.mark.parametrize("budget", ["4.7e-5", "1e-8", "0"])
def test_d5_fp32_meets_a_budget_bf16_misses_and_is_picked(capsys, budget):
    """bf16 (KLD 4.72e-05) just outside, fp32 (KLD 0) inside: fp32 is the pick, never "none"."""
    assert cli.main(["recommend", STEP, CPU_TINY, "--max-kld", budget, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)["by_m_context"]
    assert records and {r["pick"] for r in records} == {"fp32"}


def test_d17_two_quality_rows_of_one_scheme_the_first_files_is_used_and_said(capsys):
    """The CPU and H200 files of one checkpoint: each scheme once (the first file's row), and a line says so."""
    assert cli.main(["recommend", STEP, CPU_TINY, H200_TINY, "--max-kld", "0.002"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"have a quality row in more than one file (fp32: {CPU_TINY}, {H200_TINY};" in out
    assert "the first file's row is used" in out
    outside = out.split("outside the budget: ")[1].split(" not timed")[0]
    assert outside.count("fp4-bnb (") == 1 and "int4-intx (" not in outside  # CPU's int4-intx: 0.00200, inside
    assert cli.main(["recommend", STEP, CPU_TINY, H200_TINY, "--max-kld", "0.002", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["by_m_context"] and "more than one file" in captured.err


def test_d22_recommend_on_a_quality_file_alone_prints_json_alone(capsys):
    assert cli.main(["recommend", CPU_TINY, "--max-kld", "0.002", "--format", "json"]) == 0
    captured = capsys.readouterr()
    within = {r["scheme"]: r["meets"] for r in json.loads(captured.out)}
    assert within["fp32"] == "yes" and within["fp8-int4"].startswith("no: mean KLD")
    assert "quality budget: mean KLD ≤ 0.002" in captured.err


def test_d23_report_columns_are_honoured_or_refused(capsys):
    assert cli.main(["report", CPU_TINY, "--columns", "bogus,ppl"]) == 2
    assert "unknown column 'bogus' for a quality table" in capsys.readouterr().err
    assert cli.main(["report", CPU_TINY, "--columns", "scheme,ppl", "--format", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "scheme,ppl" and out[1].startswith("fp32,7.59")


@pytest.mark.parametrize("edit, words", [
    (lambda row: row["stats"]["kld"].update(mean=-0.5), "stats.kld.mean: Input should be greater than or equal to -0.000001 (got -0.5)"),
    (lambda row: row.update(stats=None), "an ok row must hold its statistics"),
    (lambda row: row["stats"]["kld"].update(mean="0.001"), "valid number"),
])
def test_d24_hand_edited_statistics_are_refused(tmp_path, capsys, edit, words):
    path = _edited(tmp_path, CPU_TINY, "q.json", lambda doc: edit(doc["rows"][1]))
    for argv in (["report", path], ["recommend", STEP, path, "--max-kld", "0.002"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and "q.json" in err


def test_d25_report_of_an_incomplete_quality_file_says_so(tmp_path, capsys):
    path = _edited(tmp_path, CPU_TINY, "q.json", lambda doc: doc.update(complete=False))
    assert cli.main(["report", path]) == 0
    assert f"{path} is incomplete (\"complete\": false" in " ".join(capsys.readouterr().out.split())


def test_one_chunk_is_said_in_the_singular(tmp_path, capsys):
    def one(doc):
        for r in doc["rows"]:
            r["chunks"] = 1
    path = _edited(tmp_path, CPU_TINY, "q.json", one)
    assert cli.main(["report", path]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ": 1 chunk of 512 tokens, the second half" in out and "1 chunks" not in out


def test_d1_run_of_a_quality_scenario_prints_json_and_csv(capsys):
    """`qbench run QUALITY.toml --format json|csv` prints its rows through the same view as report."""
    import argparse

    from qbench.quality import view
    from qbench.results import read_results

    doc = read_results(CPU_TINY)
    assert view.run_view(doc, argparse.Namespace(format="json", wide=False)) == len(doc.rows)
    assert [r["scheme"] for r in json.loads(capsys.readouterr().out)] == [r.scheme for r in doc.rows]
    view.run_view(doc, argparse.Namespace(format="csv", wide=False))
    out = capsys.readouterr().out
    assert out.startswith("scheme,status,emulated,ppl,") and "job=" not in out


# --- the second break trial: joins by content, never by a path string alone -----------------------------

def _with_id(doc, checkpoint_id, weights=None):
    for r in doc["rows"]:
        r["checkpoint_id"] = checkpoint_id
        if weights is not None:
            r["weights" if r.get("job") == "quality" else "weight_source"] = weights


def test_an_older_step_file_does_not_join_a_quality_file_that_carries_an_identity(tmp_path, capsys):
    """The step file predates checkpoint_id; its relative path, read from the reader's working
    directory, may name any folder (a zero-weight model joined that way): refused, re-run named."""
    quality = _edited(tmp_path, CPU_TINY, "q.json", lambda d: _with_id(d, "a" * 64))
    assert cli.main(["recommend", STEP, quality, "--max-kld", "0.002"]) == 2
    err = capsys.readouterr().err
    assert "the step files carry no checkpoint_id" in err and "re-run the step scenario" in err


def test_quality_files_of_one_path_and_two_contents_are_refused(tmp_path, capsys):
    a = _edited(tmp_path, CPU_TINY, "a.json", lambda d: _with_id(d, "a" * 64))
    b = _edited(tmp_path, CPU_TINY, "b.json", lambda d: (_with_id(d, "b" * 64), d.update(rows=d["rows"][:2])))
    assert cli.main(["recommend", a, b, "--max-kld", "1e-4"]) == 2
    err = capsys.readouterr().err
    assert "2 different weights" in err and "sha256 aaaaaaaaaaaa" in err and "sha256 bbbbbbbbbbbb" in err


def test_one_checkpoint_copied_to_two_folders_joins_by_content(tmp_path, capsys):
    a = _edited(tmp_path, CPU_TINY, "a.json", lambda d: _with_id(d, "c" * 64, "checkpoint /x/one (float32)"))
    b = _edited(tmp_path, CPU_TINY, "b.json", lambda d: _with_id(d, "c" * 64, "checkpoint /y/two (float32)"))
    assert cli.main(["recommend", a, b, "--max-kld", "1e-4"]) == 0


def test_quality_files_cut_two_ways_are_refused(tmp_path, capsys):
    b = _edited(tmp_path, CPU_TINY, "b.json", lambda d: [r.update(chunk=256, chunks=1) for r in d["rows"]])
    assert cli.main(["recommend", CPU_TINY, b, "--max-kld", "1e-4"]) == 2
    assert "cut the text 2 ways" in capsys.readouterr().err


def test_data_formats_name_each_number_by_what_it_is(capsys):
    """The report's ln(PPL/PPL ref) column is keyed ln_ppl_ratio (it held the log under the key
    ppl_ratio), and the model table's PPL ratio is keyed ppl_ratio (it was keyed ppl)."""
    stats = {r["scheme"]: r["stats"] for r in json.loads(Path(CPU_TINY).read_text())["rows"] if r.get("stats")}
    assert cli.main(["report", CPU_TINY, "--format", "csv"]) == 0
    rows = {r["scheme"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert "ppl_ratio" not in rows["bf16"]
    assert float(rows["bf16"]["ln_ppl_ratio"]) == pytest.approx(stats["bf16"]["ln_ppl_ratio"])
    assert cli.main(["model", "tiny-shakespeare-llama", STEP, H200_TINY, "--format", "json"]) == 0
    model = {r["scheme"]: r for r in json.loads(capsys.readouterr().out)}
    h200 = {r["scheme"]: r["stats"] for r in json.loads(Path(H200_TINY).read_text())["rows"] if r.get("stats")}
    assert "ppl" not in model["bf16"] and model["bf16"]["ppl_ratio"] == pytest.approx(h200["bf16"]["ppl_ratio"])
