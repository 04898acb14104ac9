"""The model step's decisions (qbench.judge's rules, through qbench.step.view.recommend) on hand-made
step rows: ties within noise and the pick among them."""

from __future__ import annotations

from pathlib import Path

import pytest

from qbench.row import Flag
from qbench.step.row import StepRow
from qbench.judge import within_noise
from qbench.step.view import recommend

ROOT = Path(__file__).resolve().parents[2]


def _row(scheme, context, median, p10, p90, err, total_bytes=1000):
    return StepRow(scheme=scheme, base_scheme=scheme, library="torch", mode="eager", model="m", title="M", m=1,
                   context=context, device="cuda:0", weight_dtype="x", activation_dtype="bfloat16", lm_head="float",
                   blocks=2, latency_us={"step_graph": {"median": median, "p10": p10, "p90": p90}},
                   error={"compared": "logits", "rel_fro": err}, bytes={"total": total_bytes})


def test_overlapping_p10_p90_is_a_tie_and_disjoint_is_not():
    best = _row("a", 128, 100.0, 99.0, 101.0, 0.3)
    touching = _row("b", 128, 101.5, 100.9, 102.0, 0.1)  # p10 100.9 <= best's p90 101.0
    apart = _row("c", 128, 102.0, 101.1, 103.0, 0.1)  # p10 101.1 > 101.0
    assert within_noise(best, touching) and not within_noise(best, apart)


def test_among_tied_steps_the_lower_logits_error_is_the_pick():
    rows = [_row("bf16", 128, 200.0, 199.0, 201.0, 0.01),
            _row("int4", 128, 100.0, 99.0, 101.0, 0.30), _row("fp8", 128, 100.5, 100.0, 102.0, 0.08)]
    (rec,) = recommend(rows, max_rel_err=0.5)
    assert rec["pick"] == "fp8" and rec["ties"] == ["int4"] and rec["speedup"] == 200.0 / 100.5
    # over the budget, the tied scheme is not a candidate: no tie
    (rec,) = recommend(rows, max_rel_err=0.05)
    assert rec["pick"] == "bf16" and rec["ties"] == []


def test_equal_error_falls_to_fewer_bytes_then_a_clear_win_is_not_a_tie():
    rows = [_row("big", 128, 100.0, 99.0, 101.0, 0.1, total_bytes=2000),
            _row("small", 128, 100.4, 99.5, 101.5, 0.1, total_bytes=1000)]
    assert recommend(rows, max_rel_err=0.5)[0]["pick"] == "small"
    rows[1] = _row("small", 128, 110.0, 109.0, 111.0, 0.1, total_bytes=1000)
    assert recommend(rows, max_rel_err=0.5)[0]["pick"] == "big"


def test_the_pick_of_the_smaller_context_is_kept_inside_noise():
    """At 128 fp8 wins outright; at 4096 int4 is faster by its median but tied within noise with fp8,
    which has the higher error: the pick stays fp8 (one weight format for every context)."""
    rows = [_row("int4", 128, 110.0, 109.0, 111.0, 0.05), _row("fp8", 128, 100.0, 99.0, 101.0, 0.08),
            _row("int4", 4096, 200.0, 198.0, 202.0, 0.05), _row("fp8", 4096, 201.0, 199.0, 203.0, 0.08)]
    recs = recommend(rows, max_rel_err=0.5)
    assert [(r["context"], r["pick"], r["ties"]) for r in recs] == [(128, "fp8", []), (4096, "fp8", ["int4"])]


def test_a_context_without_a_pick_passes_the_last_pick_on():
    """At 4096 nothing is within the budget; at 32768 the tie is still broken toward 128's pick."""
    rows = [_row("fp8", 128, 100.0, 99.0, 101.0, 0.08), _row("int4", 128, 110.0, 109.0, 111.0, 0.05),
            _row("fp8", 4096, 150.0, 149.0, 151.0, 0.9), _row("int4", 4096, 160.0, 159.0, 161.0, 0.9),
            _row("int4", 32768, 200.0, 198.0, 202.0, 0.05), _row("fp8", 32768, 201.0, 199.0, 203.0, 0.08)]
    recs = recommend(rows, max_rel_err=0.5)
    assert [(r["context"], r["pick"]) for r in recs] == [(128, "fp8"), (4096, None), (32768, "fp8")]
    assert recs[2]["fastest"] == "int4" and recs[2]["ties"] == ["int4"]


def test_tied_rows_carry_their_timing_flags():
    a, b = _row("a", 128, 100.0, 99.0, 101.0, 0.1), _row("b", 128, 100.5, 100.0, 102.0, 0.2)
    b.flags.extend([Flag(name="throttled", text="sw_power_cap active right after step_graph"),
                    Flag(name="throttled", text="again"), Flag(name="noisy", text="x")])
    (rec,) = recommend([a, b], max_rel_err=0.5)
    assert rec["timing_flags"] == {"b": ["throttled", "noisy"]}


def test_qbench_runs_step_view_fits_120_like_report(capsys):
    """`qbench run` of a step scenario printed the 'Σ linear: ...' legend as one 222-character line
    while `qbench report` wrapped it: both wrap at 120 now (--wide keeps it whole)."""
    import argparse
    from pathlib import Path

    from qbench.results import read_results
    from qbench.step import views

    doc = read_results(Path(__file__).resolve().parents[2] / "results" / "h200" / "step_tiny_trained.json")
    views.run_view(doc, argparse.Namespace(format="simple", wide=False))
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120 and any(line.startswith("  Σ linear: the per-layer stream times") for line in out)
    views.run_view(doc, argparse.Namespace(format="simple", wide=True))
    assert max(map(len, capsys.readouterr().out.splitlines())) > 120


def test_the_legend_says_when_linear_sum_was_off(tmp_path):
    """A step run with ``linear_sum = false`` shows "—" under Σ linear and rest: the legend says why."""
    import json
    from pathlib import Path

    from qbench.results import read_results
    from qbench.step.view import describe

    path = Path(__file__).resolve().parents[2] / "results" / "h200" / "step_tiny_trained.json"
    doc = json.loads(path.read_text())
    assert any("Σ linear: the per-layer" in line for line in describe(read_results(path)))
    for row in doc["rows"]:
        row["linear"] = None
    off = tmp_path / "off.json"
    off.write_text(json.dumps(doc))
    lines = describe(read_results(off))
    assert "  Σ linear, rest % and the speed-up Σ linear predicts: not measured ([model] linear_sum = false)" in lines
    assert any(line.startswith("  err: relative Frobenius error of the logits") for line in lines)


def test_a_step_below_its_linear_sum_and_a_noisy_speedup_are_marked_not_printed_bare():
    """A CPU step table printed `rest -6547 %` and `×bf16 Σ 0.00×` as if they were readings: a step
    below Σ linear shows '—' there, a noisy step's speed-up a '*', and a line under the table says why."""
    from qbench.step.view import step_table

    def row(scheme, step, linear, cv):
        return StepRow(scheme=scheme, base_scheme=scheme, library="torch", mode="eager", model="m", title="M", m=16,
                       context=128, device="cpu", weight_dtype="x", activation_dtype="float32", lm_head="float",
                       blocks=2, latency_us={"step_cpu": {"median": step, "p10": step * 0.9, "p90": step * 1.1, "cv": cv}},
                       linear={"sum_us": linear}, remainder_share={"step_cpu": (step - linear) / step},
                       error={"compared": "logits", "rel_fro": 0.002})

    rows = [row("bf16", 2910.0, 193_400.0, 0.05), row("int8", 404_000.0, 1000.0, 0.6)]
    text = step_table(rows)
    bf16, int8 = (next(line for line in text.splitlines() if line.startswith(s + " ")) for s in ("bf16", "int8"))
    assert "-6546 %" not in text and bf16.split()[5:7] == ["—", "1.00×"]  # rest '—', the measured ×bf16 kept
    assert "0.00×" not in text
    assert int8.split()[5:8] == ["100", "%", "0.01×*"] and int8.split()[-2] == "—"  # noisy: '*'; bf16's Σ: '—'
    assert "Σ linear exceeds the step" in text and "step is noisy (cv over 25%)" in text


def test_a_throttled_or_cpu_busy_step_marks_its_speedup_as_a_noisy_one_does():
    """The step table marked '*' only for noisy steps while the joined `qbench model STEP QUALITY` also for throttled
    and cpu-busy ones: one rule now, and the line under the table names the flag the marked rows carry."""
    from qbench.row import GpuReading, GpuState
    from qbench.step.view import step_table

    def row(scheme, step, flags=()):
        return StepRow(scheme=scheme, base_scheme=scheme, library="torch", mode="eager", model="m", title="M", m=1,
                       context=128, device="cuda:0", weight_dtype="x", activation_dtype="bfloat16", lm_head="float",
                       blocks=2, latency_us={"step_graph": {"median": step, "p10": step, "p90": step, "cv": 0.01}},
                       error={"compared": "logits", "rel_fro": 0.002},
                       flags=[{"name": f, "text": f"{f} here"} for f in flags])

    clean = step_table([row("bf16", 2000.0), row("int8", 1000.0)])
    assert "2.00×*" not in clean and "2.00×" in clean and "'*'" not in clean
    throttled = step_table([row("bf16", 2000.0, ["throttled"]), row("int8", 1000.0)])
    assert "2.00×*" in throttled and "step is throttled (the GPU limited its clocks)" in throttled
    busy = step_table([row("bf16", 2000.0), row("int8", 1000.0, ["cpu-busy"])])
    assert "2.00×*" in busy and "step is timed beside other CPU work (cpu-busy)" in busy and "throttled" not in busy
    # by the reading the ratio uses: a throttle NVML saw after another method does not mark it
    other = row("bf16", 2000.0, ["throttled"])
    other.gpu_state = GpuState(by_method={"step_graph": GpuReading(throttle_reasons=[]),
                                          "step_compiled": GpuReading(throttle_reasons=["sw_power_cap"])})
    assert "2.00×*" not in step_table([other, row("int8", 1000.0)])
    # no speed-up shown (no baseline at this point), so neither '*' nor the line under the table
    alone = step_table([row("int8", 1000.0, ["throttled"])])
    assert "*" not in alone and "'*'" not in alone


def test_recommend_marks_a_pick_whose_baseline_reading_was_throttled(tmp_path, capsys):
    """`recommend STEP` printed the pick's ×bf16 bare while `report` and `model` marked the same ratio '*'."""
    import json
    from pathlib import Path

    from qbench import cli

    doc = json.loads((Path(__file__).resolve().parents[2] / "results" / "h200" / "step_tiny_trained.json").read_text())
    for row in doc["rows"]:
        if row["scheme"] == "bf16" and row["status"] == "ok":  # NVML saw a power cap after every bf16 reading
            row["gpu_state"] = {"by_method": {m: {"throttle_reasons": ["sw_power_cap"]} for m in row["latency_us"]}}
            row["flags"] = [*row.get("flags", []), {"name": "throttled", "text": "sw_power_cap active right after x"}]
        if row["scheme"] == "int8-weight-only" and row["status"] == "ok":  # three times faster: the pick
            for stats in filter(None, row["latency_us"].values()):
                stats.update({k: stats[k] / 3 for k in ("median", "p10", "p90", "mean") if stats.get(k)})
    path = tmp_path / "step.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["recommend", str(path), "--max-rel-err", "0.5"]) == 0
    out = capsys.readouterr().out
    picks = [line.split() for line in out.splitlines() if line[:3].strip().isdigit()]
    assert picks and all(p[2] == "int8-weight-only" and p[6].endswith("×*") for p in picks), picks
    assert "step is throttled (the GPU limited its clocks)" in " ".join(out.split())


def test_qbench_model_marks_the_same_artefacts_as_the_step_table(tmp_path, capsys):
    """`qbench model NAME STEP.json` shows the remainder and the Σ speed-up of a step below its Σ linear
    as '—' and a noisy step's speed-up with '*', saying why under the table (friction 13)."""
    import json
    from pathlib import Path

    from qbench import cli

    src = Path(__file__).resolve().parents[2] / "results" / "h200" / "step_tiny_trained.json"
    doc = json.loads(src.read_text())
    for row in doc["rows"]:
        if (row["m"], row["context"]) != (16, 128) or row["status"] != "ok":
            continue
        if row["scheme"] == "bf16":  # Σ linear 100 times the step: rest -9900 %, every ×Σ at this point an artefact
            step = row["latency_us"]["step_graph"]["median"]
            row["linear"]["sum_us"] = 100 * step
            row["remainder_share"]["step_graph"] = -99.0
        if row["scheme"] == "int8-weight-only":
            row["latency_us"]["step_graph"]["cv"] = 0.6
    path = tmp_path / "step.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["model", "tiny-shakespeare-llama", str(path)]) == 0
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:3]): line.split() for line in out.splitlines() if line[:3].strip().isdigit()}
    assert "-9900 %" not in out and rows[("16", "128", "bf16")][5] == "—"
    assert rows[("16", "128", "int8-weight-only")][7:9] == ["0.68×*", "—"]
    assert "Σ linear exceeds the step" in out and "step is noisy (cv over 25%)" in out


def test_model_view_splits_the_step_three_ways_where_the_attention_was_timed():
    # results/h100/step_llama31_8b.json: bf16 compiled at M = 1, 32,768 positions; other = step - Σ linear -
    # attention, by the row's own numbers; files without the attention record keep their columns
    from qbench.results import read_results
    from qbench.step.view import model_records, model_view

    rows = read_results(ROOT / "results/h100/step_llama31_8b.json").rows
    rec = next(r for r in model_records(rows) if r["scheme"] == "bf16+compiled" and r["m"] == 1 and r["context"] == 32768)
    row = next(r for r in rows if r.scheme == "bf16+compiled" and r.m == 1 and r.context == 32768)
    assert rec["attention_us"] == row.attention["us"] and rec["attention_floor"] == row.attention["floor_fraction"]
    assert rec["other_us"] == pytest.approx(row.step_us(rec["method"]) - row.linear["sum_us"] - row.attention["us"])
    view = model_view([dict(r, _doubt=(False, False, False)) for r in model_records(rows)])
    assert "attention_us" in view.narrow and "other_us" in view.wide
    old = read_results(ROOT / "results/h200/step_llama31_8b.json").rows
    view = model_view([dict(r, _doubt=(False, False, False)) for r in model_records(old)])
    assert "attention_us" not in view.narrow and "attention_us" not in view.wide


def _docs_text(name: str) -> str:
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


def _h100_bf16_compiled(name: str, m: int, context: int):
    """The bf16+compiled row at (M, context) of the committed H100 file ``name``."""
    from qbench.results import read_results

    rows = read_results(ROOT / "results" / "h100" / name).rows
    return next(r for r in rows if r.scheme == "bf16+compiled" and r.m == m and r.context == context)


def test_docs_step_figures_are_the_h100_files():
    """docs/step.md's (and the README's) split-KV and fp8-cache figures, read from the committed H100 files."""
    text, row = _docs_text("docs/step.md"), _h100_bf16_compiled
    bf16, fp8 = row("step_llama31_8b.json", 1, 32768), row("step_llama31_8b_kv_fp8.json", 1, 32768)
    t, f = bf16.step_us("step_compiled"), bf16.hbm_floor_us
    assert (f"takes {t / 1e3:.2f} ms against its {f / 1e3:.2f} ms HBM floor ({t / f:.2f}×;" in text)
    assert f"the attention alone is {bf16.attention['us'] / 1e3:.2f} ms per step at " \
           f"{100 * bf16.attention['floor_fraction']:.0f} % of its floor" in text
    t8 = fp8.step_us("step_compiled")
    assert f"takes {t8 / 1e3:.2f} ms at 32,768 positions and M = 1 ({t / t8:.2f}× the bf16 cache's; its attention " \
           f"{fp8.attention['us'] / 1e3:.2f} ms, {100 * fp8.attention['floor_fraction']:.0f} % of its floor)" in text
    for m, words in ((1, "at M = 1 ({:.2f}×)"), (16, "at M = 16 ({:.2f}×)")):
        a, b = row("step_llama31_8b.json", m, 4096), row("step_llama31_8b_kv_fp8.json", m, 4096)
        ta, tb = a.step_us("step_compiled"), b.step_us("step_compiled")
        assert f"{tb / 1e3:.2f} ms " + words.format(ta / tb) in text


def test_docs_and_readme_h200_split_kv_figures_are_the_h200_files():
    """docs/step.md's and the README's H200 split-KV and fp8-cache figures, read from the committed H200 files: bf16
    compiled at 32,768 positions and M = 1 against its HBM floor and the SDPA step, its attention's floor share; the
    fp8 cache's CUDA-graph step against the bf16 cache's at 4,096 and 32,768 positions."""
    from qbench.results import read_results

    def row(name, scheme, m, context):  # the split-KV bf16 run is evidence beside the SDPA file of its scenario
        folder = ROOT / "results" / "h200" / ("evidence/2026-12-06" if name.endswith("splitkv.json") else "")
        rows = read_results(folder / name).rows
        return next(r for r in rows if r.scheme == scheme and r.m == m and r.context == context)

    text, readme = _docs_text("docs/step.md"), _docs_text("README.md")
    split = row("step_llama31_8b_splitkv.json", "bf16+compiled", 1, 32768)
    t, f = split.step_us("step_compiled"), split.hbm_floor_us
    sdpa = row("step_llama31_8b.json", "bf16+compiled", 1, 32768).step_us("step_compiled")
    assert f"32,768 positions, M = 1, is {t / 1e3:.2f} ms, {t / f:.2f}× its HBM floor" in readme
    assert (f"takes {t / 1e3:.2f} ms against its {f / 1e3:.2f} ms HBM floor ({t / f:.2f}×; SDPA took "
            f"{sdpa / 1e3:.2f} ms, `results/h200/step_llama31_8b.json`), the attention alone "
            f"{split.attention['us'] / 1e3:.2f} ms per step at {100 * split.attention['floor_fraction']:.0f} % of its "
            "floor") in text
    ratios = []
    for context, m in ((4096, 1), (4096, 16), (32768, 1), (32768, 16)):
        b = row("step_llama31_8b_splitkv.json", "bf16", m, context).step_us("step_graph")
        e = row("step_llama31_8b_kv_fp8.json", "bf16", m, context).step_us("step_graph")
        ratios.append(f"{e / 1e3:.2f} ms" + (f" at {context:,} positions and M = 1" if (context, m) == (4096, 1) else
                                              f" at M = {m}") + f" ({b / e:.2f}×")
    assert all(r in text for r in ratios), [r for r in ratios if r not in text]
    fp8 = row("step_llama31_8b_kv_fp8.json", "bf16", 1, 32768).attention["floor_fraction"]
    bf16 = row("step_llama31_8b_splitkv.json", "bf16", 1, 32768).attention["floor_fraction"]
    assert f"reads its cache at {100 * fp8:.0f} % of its floor (bf16: {100 * bf16:.0f} %)" in text


def _compiled(scheme, step, tuned=None, library="torch", recipe=None, mode="compiled"):
    return StepRow(scheme=scheme, base_scheme=scheme.split("+")[0].split(",")[0], library=library, mode=mode,
                   model="m", title="M", m=1, context=128, device="cuda:0", weight_dtype="x",
                   activation_dtype="bfloat16", lm_head="float", blocks=2, recipe=recipe,
                   error={"compared": "logits", "nonfinite": 0, "rel_fro": 0.01},
                   latency_us={"step_compiled": {"median": step, "p10": step, "p90": step, "cv": 0.01}},
                   compile={"first_call_s": [60.0], **({} if tuned is None else
                                                       {"inductor": {"coordinate_descent_tuning": tuned}})})


def test_compiled_rows_compiled_with_different_inductor_tuning_are_named_under_the_table():
    """torchao's configs switch Inductor's coordinate-descent tuning on in their worker; before every compiled worker
    got those settings a bf16 worker compiled without it: the table says which compiled rows had it when both kinds
    are present (recorded, or read from the scheme's build where the file has no record), and nothing otherwise."""
    from qbench.step.view import inductor_note, inductor_sides, pick_notes, step_table

    said = ("compiled with Inductor's coordinate-descent tuning: int8-weight-only+compiled (their torchao configs "
            "switch it on); without: bf16+compiled: a compiled speed-up over the latter includes that tuning "
            "(docs/step.md measures it)")
    recorded = [_compiled("bf16+compiled", 2000.0, False), _compiled("int8-weight-only+compiled", 1000.0, True)]
    assert inductor_note(recorded) == [said]
    assert said in " ".join(step_table(recorded).split())
    assert said in pick_notes(recommend(recorded, 0.1, "bf16"), recorded)
    tuned = [_compiled("bf16+compiled", 2000.0, True), _compiled("int8-weight-only+compiled", 1000.0, True)]
    assert inductor_note(tuned) == []
    # no record (a file made before 2026-12-06): bf16's build switches nothing on, int8 weight-only's config does;
    # the same when only some rows have the record (a file resumed by newer code)
    old = [_compiled("bf16+compiled", 2000.0), _compiled("int8-weight-only+compiled", 1000.0, library="torchao")]
    assert inductor_sides(old) == ({False: {"bf16+compiled"}, True: {"int8-weight-only+compiled"}},
                                   {"bf16+compiled", "int8-weight-only+compiled"})
    assert inductor_note(old)[0].startswith(said + "; no record in the file for bf16+compiled, int8-weight-only")
    resumed = [_compiled("bf16+compiled", 2000.0), _compiled("int8-weight-only+compiled", 1000.0, True)]
    assert inductor_sides(resumed) == ({False: {"bf16+compiled"}, True: {"int8-weight-only+compiled"}},
                                       {"bf16+compiled"})
    # torchao schemes whose build switches nothing on (int4-intx's config has no set_inductor_config; HQQ packs its
    # own values): no note beside bf16
    intx = [_compiled("bf16+compiled", 2000.0), _compiled("int4-intx+compiled", 900.0, library="torchao"),
            _compiled("int4-hqq+compiled", 900.0, library="torchao")]
    assert inductor_note(intx) == []
    # a recipe built its parts' configs in its worker: tuned when one part's build switches it on
    recipe = {"base": "bf16", "linears": [{"scheme": "bf16", "count": 6}, {"scheme": "int8-weight-only", "count": 1}]}
    mixed = [_compiled("bf16+compiled", 2000.0), _compiled("bf16, down int8+compiled", 1500.0, recipe=recipe)]
    assert inductor_sides(mixed)[0] == {False: {"bf16+compiled"}, True: {"bf16, down int8+compiled"}}
    eager = [_compiled("bf16", 2000.0, mode="eager"), _compiled("int8-weight-only", 1000.0, mode="eager")]
    assert inductor_sides(eager) == ({}, set())
    # compiled rows with no compile record compiled nothing for the step (a CPU runs step_cpu alone): no note, even
    # in a file made by today's code
    cpu = [r.model_copy(update={"compile": None}) for r in old]
    assert inductor_sides(cpu) == ({}, set()) and inductor_note(cpu) == []


def test_docs_inductor_tuning_figures_are_the_h100_files():
    """docs/step.md's measured effect of torchao's Inductor settings on bf16 compiled, read from the two H100 files."""
    text, row = _docs_text("docs/step.md"), _h100_bf16_compiled
    for context, words in ((128, "{:.2f} ms at 128 positions ({:.2f}×"), (4096, "{:.2f} ms at 4,096 ({:.2f}×)"),
                           (32768, "{:.2f} ms at 32,768 ({:.2f}×)")):
        tuned, plain = row("step_llama31_8b_bf16_tuned.json", 1, context), row("step_llama31_8b.json", 1, context)
        assert tuned.compile["inductor"]["coordinate_descent_tuning"] is True
        assert not (plain.compile or {}).get("inductor")  # made before compiled rows recorded Inductor's settings
        t, p = tuned.step_us("step_compiled"), plain.step_us("step_compiled")
        assert words.format(t / 1e3, p / t) in text
    for context in (128, 4096):
        t, p = (row(f, 16, context).step_us("step_compiled") for f in ("step_llama31_8b_bf16_tuned.json",
                                                                          "step_llama31_8b.json"))
        assert abs(p / t - 1) <= 0.02
        g = [row(f, m, context).step_us("step_graph") for f in ("step_llama31_8b_bf16_tuned.json",
                                                                 "step_llama31_8b.json") for m in (1, 16)]
        assert abs(g[2] / g[0] - 1) < 0.02 and abs(g[3] / g[1] - 1) < 0.02
    tuned, plain = row("step_llama31_8b_bf16_tuned.json", 1, 128), row("step_llama31_8b.json", 1, 128)
    first = [r.compile["first_call_s"][0] for r in (plain, tuned)]
    assert (f"first call went from {first[0]:.0f} s to {first[1]:.0f} s, "
            f"and its worker from {plain.worker_wall_s:.0f} s to {tuned.worker_wall_s:.0f} s") in text


def test_the_err_line_says_what_the_rows_compared(tmp_path):
    """The header said 'err: ... of the logits (the final hidden state without an LM head)' under a method line whose
    step includes 'the LM head, argmax': one line read as the other's contradiction. The step measures its error on
    what it ends with (the logits, or the normed hidden state without an LM head, error.compared): the line now says
    which, by the rows' lm_head, and a headless step says the methods' LM head and argmax are not in it."""
    import json

    from qbench.results import read_results
    from qbench.step.view import describe

    def err_lines(path):
        return [line for line in describe(read_results(path)) if line.startswith(("  err:", "  no LM head"))]

    assert err_lines(ROOT / "results" / "h200" / "step_tiny_trained.json") == [
        "  err: relative Frobenius error of the logits, after the LM head in the activation dtype, against the FP32 step "
        "on the same weights"]
    assert err_lines(ROOT / "results" / "h100" / "step_smollm2_shapes.json") == [
        "  err: relative Frobenius error of the logits, after the LM head quantized by each scheme (its damage "
        "included), against the FP32 step on the same weights"]
    doc = json.loads((ROOT / "results" / "h200" / "step_tiny_trained.json").read_text())
    for row in doc["rows"]:
        row["lm_head"] = "none"
        row["error"] = {**(row["error"] or {}), "compared": "hidden", "kl_div": None, "top1_agree": None}
    headless = tmp_path / "headless.json"
    headless.write_text(json.dumps(doc))
    assert err_lines(headless) == [
        "  err: relative Frobenius error of the final hidden state, after the last norm: the step has no LM head "
        "(model.lm_head = false), against the FP32 step on the same weights",
        "  no LM head: the step ends at the final norm; the LM head and argmax the methods name are not timed"]
