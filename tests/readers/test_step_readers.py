"""The readers on model-step result files (issue 23 item 6): ``qbench model`` shows the measured
step beside Σ linear with the end-to-end speed-up over bf16 per method and a context sweep;
``recommend`` picks the fastest step within a logits-error budget per M and context; ``report``
prints the step table; ``plot`` draws the step against the context; ``compare`` refuses a step file
with one line. Known figures
from the committed ``results/h200/step_llama31_8b.json`` (Llama-3.1-8B, H200)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from qbench import SCHEMA_VERSION, judge
from qbench.readers import compare, model, plot, recommend, report
from qbench.results import ResultDoc, read_results, upgrade_prose_row, write_results
from qbench.step import view, views
from qbench.row import FLAG_MEANINGS
from qbench.step.row import StepRow
from tests.conftest import committed_results, edited_copy, run_subcommand

ROOT = Path(__file__).resolve().parents[2]
STEP_8B = str(ROOT / "results" / "h200" / "step_llama31_8b.json")
STEP_70B = str(ROOT / "results" / "h200" / "step_llama31_70b.json")
LAYER = str(ROOT / "results" / "h200" / "llama3_8b_q_o.json")


def _json(capsys, module, name, *argv) -> tuple[int, object]:
    code = run_subcommand(module, name, *argv, "--format", "json")
    return code, json.loads(capsys.readouterr().out)


# ---- the typed document ------------------------------------------------------------------------------

def test_a_step_file_holds_its_rows_as_step_rows():
    doc = read_results(STEP_8B)
    raw = json.loads(Path(STEP_8B).read_text())
    assert doc.job == "step" and all(isinstance(r, StepRow) for r in doc.rows)
    assert len(doc.rows) == len(raw["rows"]) == 78 and raw["complete"] is True and doc.machine == "cuda NVIDIA H200"
    assert read_results(LAYER).job == "layer"


def test_a_step_file_written_back_reads_the_same(tmp_path):
    doc = read_results(STEP_70B)
    write_results(tmp_path / "s.json", doc)
    again = read_results(tmp_path / "s.json")
    raw = json.loads(Path(STEP_70B).read_text())
    assert raw["schema_version"] < 3 and again.schema_version == SCHEMA_VERSION == 3
    # a schema 2 step file's sentences (reasons, flags) are written back structured, nothing else changes
    assert again.rows == doc.rows and again.to_json()["rows"] == [upgrade_prose_row(r) for r in raw["rows"]]
    assert any(r["flags"] for r in raw["rows"]) and all(isinstance(f, dict) for r in again.to_json()["rows"]
                                                         for f in r["flags"])
    assert ResultDoc.of(doc.to_json()).rows == doc.rows


# ---- qbench model ------------------------------------------------------------------------------------

def test_model_shows_the_measured_step_beside_sigma_linear(capsys):
    code, out = _json(capsys, model, "model", "llama3.1-8b", STEP_8B)
    assert code == 0 and out["baseline"] == "bf16"
    rec = {(r["scheme"], r["m"], r["context"]): r for r in out["rows"]}
    int4c = rec[("int4-weight-only+compiled", 1, 128)]
    # step_compiled: bf16+compiled 5442 µs / int4-weight-only+compiled 3469 µs
    assert int4c["method"] == "step_compiled" and round(int4c["step_us"]) == 3469
    assert int4c["speedup"]["step_compiled"] == pytest.approx(1.569, abs=0.0005)
    assert int4c["linear_speedup"] == pytest.approx(1.67, abs=0.005)  # what Σ linear predicts
    assert round(int4c["linear_us"]) == 2713
    assert int4c["speedup"]["step_graph"] == pytest.approx(1.32, abs=0.005)
    int4 = rec[("int4-weight-only", 16, 128)]
    assert int4["method"] == "step_graph" and int4["speedup"]["step_graph"] == pytest.approx(0.65, abs=0.005)
    assert [r["m"] for r in out["rows"]] == sorted(r["m"] for r in out["rows"])


def test_model_context_sweep(capsys):
    code, out = _json(capsys, model, "model", "llama3.1-8b", STEP_8B)
    sweep = {(s["scheme"], s["m"]): s for s in out["sweep"]}
    assert sweep[("int4-weight-only", 16)]["breakeven"] == 128
    assert sweep[("int4-weight-only", 1)]["breakeven"] is None  # faster at 128, 4096 and 32768
    assert sweep[("nf4-bnb", 1)]["breakeven"] is None
    assert sweep[("fp8-weight-only", 1)]["breakeven"] == 128  # torch's eager fp8 weight-only: 140 µs a layer
    assert not any(s["scheme"] in ("bf16", "bf16+compiled") for s in out["sweep"])
    assert run_subcommand(model, "model", "llama3.1-8b", STEP_8B) == 0
    text = capsys.readouterr().out
    assert "- int4-weight-only M=16: never faster than bf16 at the contexts measured (128, 4096, 32768)" in text
    assert "- nf4-bnb M=1: faster than bf16 at every context measured (128, 4096, 32768)" in text
    assert "- int4-weight-only+compiled M=1: faster than bf16 at every context measured (128, 4096, 32768)" in text
    assert "- fp8-weight-only M=1: never faster than bf16 at the contexts measured (128, 4096, 32768)" in text


def test_model_70b_extrapolated_file(capsys):
    code, out = _json(capsys, model, "model", "llama3.1-70b", STEP_70B)
    rec = {(r["scheme"], r["m"]): r for r in out["rows"]}
    assert code == 0 and rec[("int4-weight-only", 1)]["speedup"]["step_graph"] == pytest.approx(1.45, abs=0.005)
    assert rec[("int4-weight-only", 1)]["linear_speedup"] == pytest.approx(1.66, abs=0.005)


def test_model_refuses_another_model_and_mixed_files(capsys):
    assert run_subcommand(model, "model", "llama3-8b", STEP_8B) == 2
    assert capsys.readouterr().err.strip() == (f"qbench model: {STEP_8B}: a model-step result of llama3.1-8b, "
                                               "not of llama3-8b")
    assert run_subcommand(model, "model", "llama3.1-8b", STEP_8B, LAYER) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not both" in err[0]


def test_model_budget_marks_the_schemes_over_it(capsys):
    assert run_subcommand(model, "model", "llama3.1-8b", STEP_8B, "--max-rel-err", "0.05", "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(",linear_speedup,rel_fro,budget")
    # bf16, fp16, int8-weight-only, bf16+compiled and int8-weight-only+compiled at every M and context (5 x 6)
    assert sum(1 for line in lines[1:] if line.endswith(",ok")) == 30


# ---- qbench recommend --------------------------------------------------------------------------------

def test_recommend_fastest_step_within_the_logits_budget(capsys):
    code, out = _json(capsys, recommend, "recommend", STEP_8B, "--max-rel-err", "0.5")
    assert code == 0 and out["model"] == "llama3.1-8b"
    by = {(r["m"], r["context"]): r for r in out["by_m_context"]}
    assert len(by) == 6
    # at 128 positions compiled fp8 weight-only and int4 tie within noise (3472 and 3469 µs, p10-p90
    # overlapping): the pick is the lower logits error (0.080 against 0.297)
    pick = by[(1, 128)]
    assert (pick["pick"], pick["method"], pick["ties"]) == ("fp8-weight-only+compiled", "step_compiled",
                                                            ["int4-weight-only+compiled"])
    assert pick["speedup"] == pytest.approx(1.567, abs=0.0005) and pick["within"] == pick["timed"] == 13
    assert pick["rel_fro"] == pytest.approx(0.080, abs=0.0005)
    # at 4096 int4 is faster beyond noise (5151 against 5595 µs): the smaller context's pick is not kept
    assert [(by[(1, c)]["pick"], by[(1, c)]["ties"]) for c in (4096, 32768)] == [("int4-weight-only+compiled", [])] * 2
    assert by[(16, 128)]["pick"] == "bf16+compiled"  # int4 loses at M=16
    assert all(r["untimed"] == [] for r in by.values())
    # a budget int4 and fp8 weight-only miss: compiled int8 at M = 1, compiled bf16 at M = 16
    code, out = _json(capsys, recommend, "recommend", STEP_8B, "--max-rel-err", "0.05")
    by = {(r["m"], r["context"]): r for r in out["by_m_context"]}
    assert {c: by[(1, c)]["pick"] for c in (128, 4096, 32768)} == dict.fromkeys((128, 4096, 32768), "int8-weight-only+compiled")
    assert {by[(16, c)]["pick"] for c in (128, 4096, 32768)} == {"bf16+compiled"}
    # bf16, fp16, int8-weight-only, bf16+compiled, int8-weight-only+compiled
    assert all(r["within"] == 5 for r in out["by_m_context"])


def test_recommend_names_the_ties_under_the_table(capsys):
    assert run_subcommand(recommend, "recommend", STEP_8B, "--max-rel-err", "0.5") == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "tied with the fastest within noise (p10–p90 overlap)" in flat
    # (the file flagged its loop noisy by p90/p10 1.58; its cv, 0.19, is within the one noise rule)
    assert ("M=1 ctx=128: fp8-weight-only+compiled picked from fp8-weight-only+compiled [throttled], "
            "int4-weight-only+compiled (fastest median)") in flat


def test_recommend_nothing_within_the_budget_is_exit_1(capsys):
    assert run_subcommand(recommend, "recommend", STEP_8B, "--max-rel-err", "0.001", "--wide") == 1
    out = capsys.readouterr().out
    assert "fastest step within the budget" in out and " none " in out


def test_recommend_table_names_the_method(capsys):
    assert run_subcommand(recommend, "recommend", STEP_8B, "--max-rel-err", "0.5") == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.split()[:2] == ["1", "128"])
    assert row.split()[2:6] == ["fp8-weight-only+compiled", "compiled", "3472", "288"]


@pytest.mark.parametrize("flag", [["--summary"], ["--by-format"], ["--method", "stream"]])
def test_recommend_refuses_layer_views_on_a_step_file(capsys, flag):
    assert run_subcommand(recommend, "recommend", STEP_70B, "--max-rel-err", "0.5", *flag) == 2  # a complete file
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"qbench recommend: {flag[0]} reads per-layer files")


# ---- qbench report, compare, plot --------------------------------------------------------------------

def test_report_prints_the_step_table(capsys):
    assert run_subcommand(report, "report", STEP_8B) == 0
    out = capsys.readouterr().out
    assert out.startswith("model step: Llama-3.1-8B; weights: seeded Gaussian")
    # the table and its notes, wrapped at 120 characters
    assert out.rstrip("\n").endswith(view.step_table(read_results(STEP_8B).rows))
    header = next(line for line in out.splitlines() if line.startswith("scheme "))
    assert "Σ lin" not in header and max(map(len, out.splitlines())) <= 120  # Σ linear in µs: --wide, in a terminal
    assert "Σ linear µs" in view.step_table(read_results(STEP_8B).rows, wide=True).splitlines()[0]


def test_report_by_m_is_the_step_table_sorted_by_m(capsys):
    assert run_subcommand(report, "report", STEP_8B, "--by-m", "--format", "csv") == 0
    records = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    ms = [(int(r["m"]), int(r["context"])) for r in records]
    assert len(ms) == 78 and ms == sorted(ms)
    assert [r["scheme"] for r in records[:10]] == ["bf16", "fp16", "int4-weight-only", "int8-weight-only",
                                                   "fp8-weight-only", "fp8-dynamic", "fp8-dynamic[kernel_preference=mslk]",
                                                   "nf4-bnb", "bf16+compiled", "int4-weight-only+compiled"]


def test_report_refuses_crossover_on_a_step_file(capsys):
    assert run_subcommand(report, "report", STEP_8B, "--crossover") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--crossover reads per-layer results" in err[0]


TINY = ROOT / "results" / "h200" / "step_tiny_trained.json"


def _scaled(reading: dict, factor: float) -> dict:
    return {**reading, **{k: reading[k] * factor for k in ("median", "p10", "p90", "mean")}}


def _b_side(doc: dict) -> None:
    """bf16 at M=1, context 128 20 % slower; int8 at M=1, context 128 gone; fp32 at M=1, context 128 with a
    compiled step that A's row lacks (the pair is read by the graph step both have)."""
    rows = []
    for r in doc["rows"]:
        at = (r["scheme"], r["m"], r["context"])
        if at == ("int8-weight-only", 1, 128):
            continue
        if at == ("bf16", 1, 128):
            r["latency_us"]["step_graph"] = _scaled(r["latency_us"]["step_graph"], 1.2)
        if at == ("fp32", 1, 128):
            r["latency_us"]["step_compiled"] = _scaled(r["latency_us"]["step_graph"], 0.5)
        rows.append(r)
    doc["rows"] = rows


def test_compare_reads_two_step_files_pair_by_pair(tmp_path, capsys):
    """Step rows match by (scheme, M, context) and each pair is read by the first step method both rows have: bf16
    20 % slower in B is 'slower' (regression, exit 1) at speed-up 1/1.2; int8 missing from B fails; fp32's compiled
    step in B alone leaves the pair on the graph step, same; every other pair is the same reading: same."""
    b = edited_copy(tmp_path, TINY, "b.json", _b_side)
    code, out = _json(capsys, compare, "compare", str(TINY), b)
    recs = {(r["scheme"], r["m"], r["context"]): r for r in out}
    bf16 = recs[("bf16", 1, 128)]
    assert code == 1 and bf16["method"] == "step_graph" and bf16["verdict"] == "slower"
    assert bf16["speedup"] == pytest.approx(1 / 1.2) and bf16["b_us"] == pytest.approx(1.2 * bf16["a_us"])
    assert bf16["rel_fro_diff"] == 0.0
    assert recs[("int8-weight-only", 1, 128)]["verdict"] == "only in A"
    assert recs[("fp32", 1, 128)]["method"] == "step_graph" and recs[("fp32", 1, 128)]["verdict"] == "same"
    others = {k: r["verdict"] for k, r in recs.items() if k not in {("bf16", 1, 128), ("int8-weight-only", 1, 128)}}
    assert {v for k, v in others.items() if k[0] != "w8a8-dynamic"} == {"same"}
    assert {v for k, v in others.items() if k[0] == "w8a8-dynamic"} == {"not comparable"}  # timed on neither side
    assert run_subcommand(compare, "compare", str(TINY), b) == 1
    flat = " ".join(capsys.readouterr().out.split())
    assert "each pair by the first step method both rows have (compiled, graph, cpu, loop)" in flat
    assert "REGRESSION: 1 row(s) slower than A by more than 1.05× its time (speed-up below 0.952×): bf16 M=1 " \
           "ctx=128 (speed-up 0.83×)" in flat
    assert "FAILED: 1 row(s): int8-weight-only M=1 ctx=128 (missing from B)" in flat
    assert run_subcommand(compare, "compare", str(TINY), str(TINY)) == 0  # a file against itself


def test_compare_names_the_method_a_pair_has_or_none(tmp_path, capsys):
    """A pair no method times is read by the method its rows name, not the decision order's first: w8a8 on the tiny
    H200 file has only a step_graph entry (its capture failed), so the note says it is unusable in a graph, not 'no
    step_compiled latency'; a row failed in B with no latency at all has no method (not step_compiled, which its
    scheme never ran)."""
    def fail_bf16(doc):
        for r in doc["rows"]:
            if (r["scheme"], r["m"], r["context"]) == ("bf16", 1, 128):
                r.update(status="failed", reason="run: OutOfMemoryError: CUDA out of memory", latency_us={},
                         latency_reasons={}, tokens_per_s={}, floor_fraction={})
    b = edited_copy(tmp_path, TINY, "b.json", fail_bf16)
    code, out = _json(capsys, compare, "compare", str(TINY), b)
    recs = {(r["scheme"], r["m"], r["context"]): r for r in out}
    w8a8 = recs[("w8a8-dynamic", 1, 128)]
    assert w8a8["method"] == "step_graph" and w8a8["note"] == "both unusable in a graph-captured decode loop"
    bf16 = recs[("bf16", 1, 128)]
    assert code == 1 and bf16["method"] == "step_graph" and bf16["verdict"] == "not comparable"
    b_only = edited_copy(tmp_path, b, "a.json", lambda doc: doc.update(rows=[r for r in doc["rows"] if r["status"] != "ok"]))
    _, out = _json(capsys, compare, "compare", b_only, b)
    failed = [r for r in out if r["verdict"] == "not comparable"]
    assert [(r["scheme"], r["method"], r["note"]) for r in failed] == [
        ("bf16", None, "both failed: run: OutOfMemoryError: CUDA out of memory")]


def test_compare_of_a_step_file_without_rows_says_so_not_another_model(tmp_path, capsys):
    """A step file interrupted before its first row (rows: []) was refused as steps of another model ("B's of :");
    it has no row in common with A, as a layer file without rows."""
    empty = edited_copy(tmp_path, TINY, "empty.json", lambda doc: doc.update(rows=[], complete=False))
    assert run_subcommand(compare, "compare", str(TINY), empty) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"qbench compare: no row in common between A ({TINY}) and B ({empty}) (rows match by scheme, "
                       "M, context)"), err


def test_compare_refuses_step_files_it_cannot_compare_with_one_line(capsys):
    """A step file beside a layer file, steps of two models, and --method (a layer option) each refused in one line."""
    for argv, said in (([STEP_8B, LAYER], "give files of one kind on both sides (each kind compares its own rows): "
                        f"{STEP_8B} (step), {LAYER} (layer)"),
                       ([str(TINY), STEP_8B], "A's steps are of ../data/checkpoints/tiny-shakespeare-llama and B's of "
                        "llama3.1-8b: compare reads one model's steps on both sides"),
                       ([str(TINY), str(TINY), "--method", "stream"], "--method reads per-layer files; a step compare "
                        "reads each pair by the first method both rows have, in the decision order")):
        assert run_subcommand(compare, "compare", *argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"qbench compare: {said}"], err


def test_plot_draws_the_step_against_the_context(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="plot needs matplotlib (pip install -e '.[plot]')")
    out = tmp_path / "ctx.png"
    assert run_subcommand(plot, "plot", STEP_8B, "-o", str(out)) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.strip() == str(out)
    assert run_subcommand(plot, "plot", STEP_8B, "-o", str(out)) == 2  # never overwritten without --force
    assert "already exists" in capsys.readouterr().err
    for extra in (["--what", "pareto"], ["--method", "cold"]):  # a per-layer result's options: said, not ignored
        assert run_subcommand(plot, "plot", STEP_8B, "-o", str(tmp_path / "x.png"), *extra) == 2
        assert "a model-step result has one chart" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_step_plot_lines_are_told_apart(monkeypatch, tmp_path):
    """13 schemes on one panel: no two step lines share colour and marker (the 10-colour cycle did:
    int4-weight-only and fp8-weight-only+compiled were one green), and a compiled form has its
    eager scheme's colour with square markers."""
    pytest.importorskip("matplotlib", reason="plot needs matplotlib (pip install -e '.[plot]')")
    from matplotlib.figure import Figure

    seen = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: seen.append(fig))
    views.plot_context(read_results(STEP_8B), tmp_path / "x.png")
    (fig,) = seen
    for ax in fig.axes:
        lines = {ln.get_label(): (ln.get_color(), ln.get_marker()) for ln in ax.get_lines() if ln.get_linestyle() == "-"}
        assert len(lines) == 13 and len(set(lines.values())) == 13
        assert lines["int8-weight-only+compiled"] == (lines["int8-weight-only"][0], "s")
        assert lines["int4-weight-only"][1] == "o"


def test_step_plot_tells_apart_option_variants_of_one_scheme(monkeypatch, tmp_path):
    """Two option variants of one scheme share a colour (the charts' rule); their markers differ, and
    ``x+compiled[opts]`` takes x's colour, not a hashed one."""
    pytest.importorskip("matplotlib", reason="plot needs matplotlib (pip install -e '.[plot]')")
    from matplotlib.figure import Figure

    doc = read_results(STEP_8B)
    keep = [r for r in doc.rows if r.scheme in ("fp8-dynamic", "fp8-dynamic[kernel_preference=mslk]",
                                                     "fp8-dynamic+compiled")]
    extra = [r.model_copy(update={"scheme": "fp8-dynamic+compiled[kernel_preference=mslk]"})
             for r in keep if r.scheme == "fp8-dynamic+compiled"]
    doc = doc.model_copy(update={"rows": keep + extra})
    seen = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: seen.append(fig))
    views.plot_context(doc, tmp_path / "x.png")
    lines = {ln.get_label(): (ln.get_color(), ln.get_marker()) for ln in seen[0].axes[0].get_lines()
             if ln.get_linestyle() == "-"}
    assert len(set(lines.values())) == 4
    assert lines["fp8-dynamic+compiled[kernel_preference=mslk]"][0] == lines["fp8-dynamic[kernel_preference=mslk]"][0]


# ---- recommend: what could mislead a reader of a step pick (new-user trial 2026-12-02) ------------------

BENCH = str(ROOT / "results" / "h200" / "step_llama3_8b.json")
BENCH_RUN2 = str(ROOT / "tests" / "fixtures" / "real" / "h200_step_llama3_8b_run2.json")  # the benchmark's second run (linear.by_role dropped: tree budget)


def test_recommend_records_the_flags_of_the_pick_and_of_its_baseline(capsys):
    code, out = _json(capsys, recommend, "recommend", BENCH, "--max-rel-err", "0.5")
    by = {(r["m"], r["context"]): r for r in out["by_m_context"]}
    far = by[(1, 4096)]  # int4+compiled and its bf16+compiled baseline were both read right after a power cap
    assert far["pick"] == "int4-weight-only+compiled"
    assert far["pick_flags"] == ["throttled", "reduce-overhead-slower"]
    assert far["baseline_flags"] == {"bf16+compiled": ["throttled", "reduce-overhead-slower"]}
    assert by[(16, 128)]["pick"] == "bf16+compiled" and by[(16, 128)]["baseline_flags"] == {}  # the pick is the baseline
    raw = {(r["scheme"], r["m"], r["context"]): r for r in json.loads(Path(BENCH).read_text())["rows"]}
    assert [f.split(":")[0] for f in raw[("int4-weight-only+compiled", 1, 4096)]["flags"]] == far["pick_flags"]


def test_recommend_prints_the_flags_the_synthetic_weights_and_whether_picks_hold_across_files(capsys):
    assert run_subcommand(recommend, "recommend", BENCH, BENCH_RUN2, "--max-rel-err", "0.5") == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert flat.count("warning: logits errors come from synthetic weights") == 2
    assert ("M=1 ctx=4096: int4-weight-only+compiled [throttled, reduce-overhead-slower], bf16+compiled (baseline) "
            "[throttled, reduce-overhead-slower]") in flat
    assert "[throttled]: the GPU limited its clocks" in flat and flat.count("[throttled]: ") == 2  # one legend per file
    # 3528 µs int4 against 4010 µs fp8 in one run, 3561 against 3479 in the other: each beyond its file's noise
    assert ("picks across the 2 files of llama3-8b (runs of one scenario): M=1 ctx=128: differ (int4-weight-only+compiled "
            "in file 1, fp8-weight-only+compiled in file 2); M=1 ctx=4096: int4-weight-only+compiled in both") in flat
    assert "1 of 4 picks change between files" in flat


def test_pick_stability_by_hand():
    a = [{"m": 1, "context": 128, "pick": "x"}, {"m": 1, "context": 4096, "pick": "y"}, {"m": 16, "context": 128, "pick": None}]
    b = [{"m": 1, "context": 128, "pick": "z"}, {"m": 1, "context": 4096, "pick": "y"}]
    assert judge.pick_stability([a, b]) == [{"m": 1, "context": 128, "picks": ["x", "z"], "holds": False},
                                           {"m": 1, "context": 4096, "picks": ["y", "y"], "holds": True}]
    assert judge.pick_stability([]) == []


def test_every_flag_in_the_committed_step_files_has_a_meaning():
    files = committed_results("step_*.json")
    names = {name for f in files for r in read_results(f).rows for name in r.flag_names}
    assert {"throttled", "reduce-overhead-slower", "linear-above-step"} <= names  # the flags the H200 files carry
    assert names <= set(FLAG_MEANINGS), names - set(FLAG_MEANINGS)
    # and every flag the step job writes (the throttle reading is every producer's: qbench.gpu_state)
    source = "".join((ROOT / "qbench" / f).read_text() for f in ("step/measure.py", "gpu_state.py"))
    written = set(re.findall(r'flag_record\("([a-z-]+)"', source))
    assert len(written) == 14 and written <= set(FLAG_MEANINGS), written - set(FLAG_MEANINGS)


def test_model_lists_the_flags_and_warns_of_synthetic_weights(capsys):
    assert run_subcommand(model, "model", "llama3-8b", BENCH) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "warning: logits errors come from synthetic weights" in flat
    assert "[linear-above-step]: Σ linear exceeds the measured step" in flat
    assert "int8-weight-only+compiled: linear-above-step (M=16 ctx=128, M=16 ctx=4096)" in out.splitlines()
    assert "int4-weight-only+compiled: throttled (M=1 ctx=4096)" in out.splitlines()


def test_picks_across_files_are_compared_only_for_runs_of_one_scenario(tmp_path, capsys):
    """Break review 2026-12-02: the same file twice, files of two models, files that differ in their
    schemes: none is put down to run-to-run variation."""
    def last(*files):
        assert run_subcommand(recommend, "recommend", *files, "--max-rel-err", "0.5") == 0
        return " ".join(capsys.readouterr().out.split())

    assert "picks across files: not compared, the same file is given more than once" in last(BENCH, BENCH)
    assert "not compared, the files hold different models (llama3-8b, llama3.1-8b)" in last(BENCH, STEP_8B)
    doc = json.loads(Path(BENCH_RUN2).read_text())
    doc["rows"] = [r for r in doc["rows"] if r["scheme"] != "fp8-weight-only+compiled" and r["context"] == 128]
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps(doc))
    out = last(BENCH, str(fewer))
    assert ("picks across the 2 files of llama3-8b: M=1 ctx=128: int4-weight-only+compiled in both; M=16 ctx=128: "
            "bf16+compiled in both; the files differ in scheme sets: a changed pick may come from that") in out
    assert "in only some files: M=1 ctx=4096, M=16 ctx=4096" in out and "run-to-run variation," not in out
    # the same schemes with another KV cache and attention kernel (break trial 2026-12-06): named, not put down to
    # run-to-run variation
    doc = json.loads(Path(BENCH_RUN2).read_text())
    for r in doc["rows"]:
        r["kv_cache"], r["attention"] = {"dtype": "float8_e4m3fn"}, {"kernel": "split-kv"}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    out = last(BENCH, str(other))
    assert "(runs of one scenario)" not in out
    assert "the files differ in KV caches and attention kernels: a changed pick may come from that" in out


def test_step_recommend_names_rows_not_measured_and_refuses_an_absent_baseline(tmp_path, capsys):
    doc = json.loads(Path(BENCH).read_text())
    for r in doc["rows"]:
        if r["scheme"] == "nf4-bnb":
            r.update(status="failed", reason="build: out of memory", latency_us={}, tokens_per_s={}, error=None)
    path = tmp_path / "f.json"
    path.write_text(json.dumps(doc))
    assert run_subcommand(recommend, "recommend", str(path), "--max-rel-err", "0.5") == 0
    assert "not measured (no ok row, not considered): nf4-bnb: failed: build: out of memory" in \
        " ".join(capsys.readouterr().out.split())
    assert run_subcommand(recommend, "recommend", BENCH, "--max-rel-err", "0.5", "--baseline", "fp32") == 2
    assert "--baseline fp32: no row is fp32 or fp32+compiled" in capsys.readouterr().err


def test_model_refuses_two_runs_of_one_row_and_takes_the_legend_from_the_rows(tmp_path, capsys):
    assert run_subcommand(model, "model", "llama3-8b", BENCH, BENCH_RUN2) == 2
    err = capsys.readouterr().err  # the first repeated row in file order, and the file that had it first
    assert f"{BENCH_RUN2}: bf16 at M=1, context 128 is in {BENCH} too: qbench model reads one run per row" in err
    doc = json.loads(Path(BENCH).read_text())
    doc["rows"] = [r for r in doc["rows"] if r["scheme"] in ("bf16", "int4-weight-only")]
    for r in doc["rows"]:
        r["flags"] = []
        if r["scheme"] == "int4-weight-only":
            r["scheme"] = "int4: noisy (x"
            r["flags"] = ["throttled: sw_power_cap active right after step_graph"]
    path = tmp_path / "colon.json"
    path.write_text(json.dumps(doc))
    assert run_subcommand(model, "model", "llama3-8b", str(path)) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "[throttled]: the GPU limited its clocks" in flat and "[noisy]:" not in flat


def test_model_says_once_which_answer_decides_where_step_and_sigma_linear_disagree(capsys):
    assert run_subcommand(model, "model", "llama3.1-8b", STEP_8B, "--wide") == 0
    out = capsys.readouterr().out
    assert out.count(model.ACT_ON) == 1
    line = next(x for x in out.splitlines() if model.ACT_ON in x)
    assert line.startswith("the measured step and Σ linear name different fastest schemes (")
    records = [{"m": 1, "context": 128, "scheme": s, "step_us": st, "linear_us": li, "over_budget": ob}
               for s, st, li, ob in (("a", 10, 5, False), ("b", 12, 4, False), ("c", 1, 1, True))]
    assert views.disagreements(records) == [{"m": 1, "context": 128, "step": "a", "linear": "b"}]
    records[1]["linear_us"] = 6  # the same scheme is fastest both ways: nothing to say
    assert views.disagreements(records) == []
    records[1]["linear_us"] = 4.95  # a, the step's pick, within 2 % of the least Σ linear: the same answer by noise
    assert views.disagreements(records) == []  # (the H200 split-KV file: bf16 4,543 µs against compiled's 4,551)


def test_model_takes_a_config_path_models_title_and_refuses_a_baseline_typo(tmp_path, capsys):
    """A step file of a config.json is named by the config path; the title the run printed
    (the checkpoint folder's name) names it too."""
    doc = json.loads(Path(STEP_8B).read_text())
    for r in doc["rows"]:
        r["model"], r["title"] = "../ckpt/tinyllama/config.json", "tinyllama"
    path = tmp_path / "mine_step.json"
    path.write_text(json.dumps(doc))
    assert run_subcommand(model, "model", "tinyllama", str(path), "--format", "json") == 0
    assert run_subcommand(model, "model", "../ckpt/tinyllama/config.json", str(path), "--format", "json") == 0
    capsys.readouterr()
    assert run_subcommand(model, "model", "llama3-8b", str(path)) == 2
    assert "a model-step result of ../ckpt/tinyllama/config.json (title tinyllama), not of llama3-8b" in capsys.readouterr().err
    assert run_subcommand(model, "model", "llama3.1-8b", STEP_8B, "--baseline", "bf-16") == 2
    assert "--baseline 'bf-16' is not a scheme of this file" in capsys.readouterr().err


def test_report_takes_columns_for_a_step_table(capsys):
    """--columns was refused for step files ("the step table has fixed columns")."""
    assert run_subcommand(report, "report", STEP_8B, "--columns", "scheme,m,context,compiled,speedup,err",
                          "--format", "csv") == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert list(rows[0]) == ["scheme", "m", "context", "compiled", "speedup", "err"] and len(rows) == 78
    assert run_subcommand(report, "report", STEP_8B, "--columns", "scheme,linear,kl", "--format", "github") == 0
    assert [c.strip() for c in capsys.readouterr().out.splitlines()[0].split("|")[1:-1]] == ["scheme", "Σ linear µs", "KL"]
    assert run_subcommand(report, "report", STEP_8B, "--columns", "scheme,bogus") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown column 'bogus' for a model-step table; allowed: scheme, m," in err


@pytest.mark.parametrize("argv", [["report", STEP_8B], ["recommend", STEP_8B, "--max-rel-err", "0.1"],
                                  ["model", "llama3.1-8b", STEP_8B], ["report", LAYER],
                                  ["recommend", LAYER, "--max-rel-err", "0.01"],
                                  ["model", "llama3-8b", *(LAYER.replace("q_o", s) for s in ("q_o", "k_v", "gate_up", "down"))]])
def test_a_markdown_table_is_alone_on_stdout(argv, capsys):
    """--format github printed 3-6 prose lines (and a flags paragraph) around the table: the table is
    now paste-ready on stdout, the prose on stderr."""
    from qbench import cli

    cli.main([*argv, "--format", "github"])
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert lines and all(line.startswith("|") or line == "" for line in lines), cap.out[:300]
    assert cap.err.strip()


def test_step_plot_legend_names_the_dashed_sigma_linear_lines(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib", reason="plot needs matplotlib (pip install -e '.[plot]')")
    from matplotlib.figure import Figure

    seen = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: seen.append(fig))
    views.plot_context(read_results(STEP_8B), tmp_path / "x.png")
    (fig,) = seen
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "dashed: Σ linear (the layer view)" in labels and len(labels) == 14


def test_the_tie_line_explains_only_the_flags_its_tied_rows_carry(capsys):
    """The H200 step file's ties at a 0.5 budget carry [throttled] and no [noisy]: only throttled is explained."""
    from qbench import cli

    assert cli.main(["recommend", str(ROOT / "results/h200/step_llama31_8b.json"), "--max-rel-err", "0.5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    tie = out[out.index("tied with the fastest within noise"):out.index("flags on the picks")]
    assert "fp8-weight-only+compiled [throttled]" in tie and "[noisy]" not in tie
    assert "; [throttled]: the GPU limited its clocks (power or thermal cap) right after the reading" in tie


def test_model_says_why_a_negative_rest_is_left_out(capsys):
    """The H100 bf16-tuned file's compiled step at M=1, context 128 holds other µs = -49 (written before
    split-above-step): qbench model shows no value there and one note saying why."""
    path = str(ROOT / "results" / "h100" / "step_llama31_8b_bf16_tuned.json")
    assert run_subcommand(model, "model", "llama3.1-8b", path, "--allow-incomplete") == 0
    out = capsys.readouterr().out
    assert "-49.2" not in out and "-0.65" not in out
    assert ("note: other µs left out (2 row(s), e.g. bf16+compiled M=1 context 128): Σ linear and the attention, each "
            "timed alone,\n  add up to more than the step (the file predates the split-above-step flag)") in out


def test_every_step_view_names_the_kv_cache_and_its_attention(capsys):
    """An fp8-cache file read by report, model and recommend says the cache's dtype, its scale rule and the kernel
    that read it (break trial 7: 'fp8' appeared in none of the three); a file without kv_cache records says nothing."""
    path = str(ROOT / "results" / "h100" / "step_llama31_8b_kv_fp8.json")
    for argv in (("report", path), ("model", "llama3.1-8b", path, "--allow-incomplete"),
                 ("recommend", path, "--max-rel-err", "0.05", "--allow-incomplete")):
        run_subcommand({"report": report, "model": model, "recommend": recommend}[argv[0]], *argv)
        out = " ".join(capsys.readouterr().out.split())
        assert "KV cache: float8_e4m3fn (e4m3, static scale per (block, KV head) = absmax / 448" in out, argv
        assert "attention: split-kv, the cache read in kernel" in out, argv
    assert view.kv_line(read_results(ROOT / "results" / "h200" / "step_llama31_8b.json").rows) == []


def test_step_recommend_says_how_often_each_pick_won_the_files_runs(tmp_path, capsys):
    """A step file of qbench run --repeat: the layer pick said 'picked in N of M runs', the step pick nothing (newcomer
    trial 2026-12-06). The committed tiny H200 file with fp32 at M=1, context 128 run three times, its second run's
    median 270 µs (p10-p90 scaled with it: 269.7-273.3), beyond bf16's 283.4-287.1: that run picks fp32, the others
    bf16. The file's own pick: fp32's runs (270-291 µs) overlap bf16's p10-p90, so the two tie (the between-run
    spread widens a tie, as for layer rows) and the lower logits error picks fp32: fp32 in 1 of 3 (bf16 in 2)."""
    doc = json.loads((ROOT / "results" / "h200" / "step_tiny_trained.json").read_text())
    for r in doc["rows"]:
        if (r["scheme"], r["m"], r["context"]) == ("fp32", 1, 128):
            r["repeats"] = {"runs": 3, "ok_runs": 3, "medians": {"step_graph": [290.5440032482147, 270.0, 291.0]},
                            "spread": {"step_graph": 0.07}}
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(doc))
    code, out = _json(capsys, recommend, "recommend", str(path), "--max-rel-err", "0.05")
    first = next(r for r in out["by_m_context"] if (r["m"], r["context"]) == (1, 128))
    assert code == 0 and first["pick"] == "fp32" and "bf16" in first["ties"]
    assert first["stability"] == {"runs": 3, "picked": 1, "others": {"bf16": 2}}
    assert run_subcommand(recommend, "recommend", str(path), "--max-rel-err", "0.05") == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert ("picked per run (qbench run --repeat: each run's medians, the same rule): M=1 ctx=128: fp32 in 1 of 3 "
            "(bf16 in 2); M=1 ctx=512: bf16 in 3 of 3") in flat
    assert "M=1 ctx=128: fp32 picked from fp32, bf16 (fastest median)" in flat
    # a file without runs says nothing of them
    assert run_subcommand(recommend, "recommend", str(ROOT / "results" / "h200" / "step_tiny_trained.json"),
                          "--max-rel-err", "0.05") == 0
    assert "picked per run" not in capsys.readouterr().out


def test_compare_names_what_else_two_step_files_differ_in(tmp_path, capsys):
    """A (the tiny H200 file, attention not recorded, the cache at the activation dtype) against a copy whose rows
    ran split-KV attention over an fp8 cache: the speed-ups measure those too, and a line under the table says so."""
    def other_engine(doc):
        for r in doc["rows"]:
            r["attention"], r["kv_cache"] = {"kernel": "split-kv"}, {"dtype": "float8_e4m3fn"}
    b = edited_copy(tmp_path, TINY, "b.json", other_engine)
    assert run_subcommand(compare, "compare", str(TINY), b) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert ("A and B differ in KV caches (A: activation-dtype; B: fp8); attention kernels (A: not recorded; B: "
            "split-kv): the speed-ups measure that as much as the schemes") in flat
    assert run_subcommand(compare, "compare", str(TINY), str(TINY)) == 0
    assert "differ in" not in capsys.readouterr().out


def test_compare_tells_models_apart_by_checkpoint_identity_where_rows_have_one(tmp_path, capsys):
    """One checkpoint written under two relative paths is one model (same checkpoint_id); two ids are two models,
    whatever the paths say."""
    def same(ident, model):
        return lambda doc: [r.update(checkpoint_id=ident, model=model) for r in doc["rows"]]
    a = edited_copy(tmp_path, TINY, "a.json", same("a" * 64, "../data/checkpoints/tiny-shakespeare-llama"))
    moved = "../../data/checkpoints/tiny-shakespeare-llama"
    b = edited_copy(tmp_path, TINY, "b.json", lambda doc: [r.update(checkpoint_id="a" * 64, model=moved,
                                                                   weight_source=f"checkpoint {moved} (float32)")
                                                          for r in doc["rows"]])
    assert run_subcommand(compare, "compare", a, b) == 0
    assert "differ in" not in capsys.readouterr().out  # the weights too are one checkpoint's
    c = edited_copy(tmp_path, TINY, "c.json", same("b" * 64, "../data/checkpoints/tiny-shakespeare-llama"))
    assert run_subcommand(compare, "compare", a, c) == 2
    assert capsys.readouterr().err.strip() == (f"qbench compare: A's steps are of checkpoint {'a' * 12} and B's of "
                                               f"{'b' * 12} (content identities): compare reads one model's steps on "
                                               "both sides")


def test_compare_says_what_b_lost_and_fails_a_step_b_no_longer_times(tmp_path, capsys):
    """B lost bf16's compiled step (its compile failed) and fp32's graph step (capture failed, its only method):
    bf16's pair is read by the graph step with a note naming what B lacks; fp32's is 'untimed in B', a failure
    (exit 1), not a quiet 'not comparable'. fp32's logits error is 0 on both sides: no growth is judged from 0."""
    def a_side(doc):
        for r in doc["rows"]:
            if (r["scheme"], r["m"], r["context"]) == ("bf16", 1, 128):
                r["latency_us"]["step_compiled"] = _scaled(r["latency_us"]["step_graph"], 0.9)

    def b_side(doc):
        for r in doc["rows"]:
            at = (r["scheme"], r["m"], r["context"])
            if at == ("bf16", 1, 128):
                r["latency_reasons"]["step_compiled"] = {"kind": "error", "text": "compile: BackendCompilerFailed"}
            if at == ("fp32", 1, 128):
                r["latency_us"]["step_graph"] = None
                r["latency_reasons"]["step_graph"] = {"kind": "error", "text": "capture: cudaErrorStreamCapture"}
                r["error"]["rel_fro"] = 1e-7
    a, b = edited_copy(tmp_path, TINY, "a.json", a_side), edited_copy(tmp_path, TINY, "b.json", b_side)
    code, out = _json(capsys, compare, "compare", a, b)
    recs = {(r["scheme"], r["m"], r["context"]): r for r in out}
    bf16, fp32 = recs[("bf16", 1, 128)], recs[("fp32", 1, 128)]
    assert code == 1 and bf16["method"] == "step_graph" and bf16["verdict"] == "same"
    assert bf16["note"].startswith("B: no step_compiled (no step_compiled latency (compile: BackendCompilerFailed))")
    assert fp32["verdict"] == "not comparable"
    assert run_subcommand(compare, "compare", a, b) == 1
    flat = " ".join(capsys.readouterr().out.split())
    assert "FAILED: 1 row(s): fp32 M=1 ctx=128 (untimed in B (no step_graph latency (capture: " in flat
    assert "error grew" not in flat

