"""The hand-written figures of docs/step.md and docs/results-h200.md's model-step section, recomputed
from the committed H200 files they cite (the tables beside them are generated: scripts/gen_docs.py)."""

from __future__ import annotations

import json
from pathlib import Path

from qbench.step.row import StepRow

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "results" / "h200"


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def _rows(name):
    return [StepRow.model_validate(r) for r in json.loads((H200 / name).read_text())["rows"]]


def _find(rows, scheme, m, context):
    return next(r for r in rows if (r.scheme, r.m, r.context) == (scheme, m, context))


def test_crosscheck_figures():
    text = _flat(ROOT / "docs" / "step.md")
    for name, compiled, blocks, digits in (("crosscheck_step.json", False, 32, 3),
                                           ("crosscheck_step_compiled.json", True, 8, 3)):
        doc = json.loads((H200 / "evidence" / name).read_text())
        assert doc["compiled"] is compiled and doc["blocks"] == blocks
        by = {r["scheme"]: r for r in doc["records"]}
        bf, i4 = by["bf16"], by["int4-weight-only"]
        assert "qbench's int4-weight-only layer modules" in i4["hf_linears"]  # one kernel on both sides
        for fig in (f"bf16 {bf['hf_graph_us'] / 1e3:.{digits}f} ms (transformers) against "
                    f"{bf['qbench_graph_us'] / 1e3:.{digits}f} ms (qbench, {bf['ratio_qbench_over_hf']:.3f}×), "
                    f"logits within {bf['logits_rel_diff']:.3f}",
                    f"int4 weight-only {i4['hf_graph_us'] / 1e3:.{digits}f} ms against "
                    f"{i4['qbench_graph_us'] / 1e3:.{digits}f} ms ({i4['ratio_qbench_over_hf']:.2f}×), "
                    f"logits within {i4['logits_rel_diff']:.3f}"):
            assert fig in text, fig
        # the bar: qbench no slower than transformers by more than 10 % (bf16 and int4)
        assert bf["ratio_qbench_over_hf"] <= 1.10 and i4["ratio_qbench_over_hf"] <= 1.10


def _first_calls(row):
    return row.compile["first_call_s"]


OLD_BENCH = "evidence/speed/2026-12-02c/step_llama3_8b_392s.json"  # the run before the two speed changes
THREADS16 = "evidence/speed/2026-12-02c/step_llama3_8b_fp8c_threads16.json"
RUN2 = "evidence/speed/2026-12-02d/step_llama3_8b_run2.json"  # the benchmark again, same tree and caches


def _doc(name):
    return json.loads((H200 / name).read_text())


def _compile_total(doc, scheme):
    """Seconds of first compiled calls of one scheme over its rows (both methods, every shape)."""
    rows = [StepRow.model_validate(r) for r in doc["rows"] if r["scheme"] == scheme]
    return sum(sum(_first_calls(r)) for r in rows)


def test_speed_benchmark_figures():
    doc, old = _doc("step_llama3_8b.json"), _doc(OLD_BENCH)
    text = _flat(ROOT / "docs" / "step.md")
    target = 360
    assert doc["complete"] is True and doc["wall_s"] <= target < old["wall_s"]
    assert f"Met, by {target - doc['wall_s']:.0f} s ({doc['wall_s']:.1f} s of job time, the file's `wall_s`;" in text
    assert f"all 8 schemes, {len(doc['rows'])} ok rows, in {doc['wall_s']:.0f} s" in text
    assert all(r["status"] == "ok" for r in doc["rows"]) and len(doc["rows"]) == 32
    assert f"took {old['wall_s']:.0f} s. Two changes since" in text
    timeline = {t["scheme"]: t for t in doc["workers"]["timeline"]}
    fp8 = timeline["fp8-weight-only+compiled"]
    assert f"The first seven took {fp8['go']:.0f} s" in text
    for scheme, t in timeline.items():
        if scheme != "fp8-weight-only+compiled":
            assert f"{scheme} {t['done'] - t['go']:.1f} s" in text, scheme
    assert f"then `fp8-weight-only+compiled` {fp8['done'] - fp8['go']:.0f} s." in text
    rows = [StepRow.model_validate(r) for r in doc["rows"]]
    orows = [StepRow.model_validate(r) for r in old["rows"]]
    # the bnb change: the nf4-bnb build, before and after
    nf4_old, nf4 = (_find(rs, "nf4-bnb", 1, 128).worker_phases_s for rs in (orows, rows))
    assert (f"`nf4-bnb`'s build took {nf4_old['build']:.1f} of its {nf4_old['after_go']:.1f} s there" in text
            and f"here {nf4['build']:.1f} of {nf4['after_go']:.1f} s" in text)
    otl = {t["scheme"]: t for t in old["workers"]["timeline"]}
    saved = (otl["nf4-bnb"]["done"] - otl["nf4-bnb"]["go"]) - (timeline["nf4-bnb"]["done"] - timeline["nf4-bnb"]["go"])
    assert f"This change is the run's {saved:.0f} s." in text
    # the compile-thread change: recorded on every compiled row, and what it did not do
    assert {r.compile["compile_threads"] for r in rows if r.mode == "compiled"} == {16}
    assert all(not r.compile.get("compile_threads") for r in orows if r.mode == "compiled")
    f_new, f_old = (_compile_total(d, "fp8-weight-only+compiled") for d in (doc, old))
    i_new, i_old = (_compile_total(d, "int8-weight-only+compiled") for d in (doc, old))
    assert f"add up to {f_new:.0f} s here (16 threads) against {f_old:.0f} s in the 392 s run" in text
    assert f"those of `int8-weight-only+compiled` {i_new:.0f} s against {i_old:.0f} s" in text
    assert f"fp8 on 16 threads had compiled in {_compile_total(_doc(THREADS16), 'fp8-weight-only+compiled'):.0f} s" in text
    new128, old128, old4096 = (_find(rs, "fp8-weight-only+compiled", 1, c) for rs, c in ((rows, 128), (orows, 128), (orows, 4096)))
    assert max(x for r in rows if r.scheme == "fp8-weight-only+compiled" for x in _first_calls(r)) == _first_calls(new128)[0]
    assert max(x for r in orows if r.scheme == "fp8-weight-only+compiled" for x in _first_calls(r)) == _first_calls(old4096)[1]
    for fig in (f"add up to {f_new:.0f} s here, the longest {_first_calls(new128)[0]:.1f} s (M = 1, context 128, the compiled step)",
                f"in the 392 s run they add up to {f_old:.0f} s, that same call {_first_calls(old128)[0]:.1f} s and the longest "
                f"{_first_calls(old4096)[1]:.1f} s (M = 1, context 4096, the reduce-overhead step)"):
        assert fig in text, fig
    i8 = [_find(rows, "int8-weight-only+compiled", m, 128).step_us("step_compiled") / 1e3 for m in (16, 1)]
    assert f"the compiled step reads {i8[0]:.0f} ms against {i8[1]:.1f} ms" in text
    run2 = _doc(RUN2)
    assert run2["complete"] is True and run2["wall_s"] <= target and len(run2["rows"]) == 32
    assert run2["env"]["date"][:13] == doc["env"]["date"][:13] == "2026-12-02T08"
    minutes = (int(run2["env"]["date"][14:16]) - int(doc["env"]["date"][14:16]))
    t2 = {t["scheme"]: t for t in run2["workers"]["timeline"]}["fp8-weight-only+compiled"]
    assert (f"{minutes} minutes later, took {run2['wall_s']:.0f} s" in text
            and f"fp8-weight-only+compiled {t2['done'] - t2['go']:.0f} s, its first compiled calls "
                f"{_compile_total(run2, 'fp8-weight-only+compiled'):.0f} s in all against {f_new:.0f} s in the first" in text)
    far = _find(_rows("step_llama31_8b.json"), "fp8-weight-only+compiled", 1, 32768)
    assert f"At 32768 positions its first call took {_first_calls(far)[0]:.0f} s" in text


def test_fp8_weight_only_compiled_figures():
    from qbench.step.view import logits_error, speedups, tied

    rows, bench, latest = _rows("step_llama31_8b.json"), _rows(OLD_BENCH), _rows("step_llama3_8b.json")
    sp = speedups(rows)
    f = {c: _find(rows, "fp8-weight-only+compiled", 1, c) for c in (128, 4096)}
    i = {c: _find(rows, "int4-weight-only+compiled", 1, c) for c in (128, 4096)}
    bf = {c: _find(bench, "fp8-weight-only+compiled", 1, c) for c in (128, 4096)}
    bi = {c: _find(bench, "int4-weight-only+compiled", 1, c) for c in (128, 4096)}
    ms = lambda r, d=3: f"{r.step_us('step_compiled') / 1e3:.{d}f}"  # noqa: E731
    rest = lambda r: (r.step_us("step_compiled") - r.linear["sum_us"]) / 1e3  # noqa: E731
    lin = lambda r: r.linear["sum_us"] / 1e3  # noqa: E731
    assert tied([f[128]], i[128]) == [f[128]] and tied([f[4096]], i[4096]) == []
    assert tied([bf[128]], bi[128]) == [] and ms(bf[128]) < ms(bi[128])  # the other run: fp8 faster beyond noise
    assert lin(bf[128]) > lin(bi[128]) and lin(f[128]) < lin(i[128])  # Σ linear the other way round in each run
    lf = {c: _find(latest, "fp8-weight-only+compiled", 1, c) for c in (128, 4096)}
    li = {c: _find(latest, "int4-weight-only+compiled", 1, c) for c in (128, 4096)}
    assert tied([li[128]], lf[128]) == [] and lin(lf[128]) > lin(li[128])  # the third run: int4 ahead on both
    assert all(r.step_us("step_compiled") < o.step_us("step_compiled")
               for r, o in ((i[4096], f[4096]), (bi[4096], bf[4096]), (li[4096], lf[4096])))  # "in all three runs"
    slower = 100 * (lf[128].step_us("step_compiled") / li[128].step_us("step_compiled") - 1)
    r2 = _rows(RUN2)
    rf, ri = (_find(r2, s, 1, 128) for s in ("fp8-weight-only+compiled", "int4-weight-only+compiled"))
    assert tied([rf], ri) == [] and ms(rf) < ms(ri)  # the fourth run: fp8 faster beyond noise again
    again = 100 * (ri.step_us("step_compiled") / rf.step_us("step_compiled") - 1)
    assert (_find(r2, "int4-weight-only+compiled", 1, 4096).step_us("step_compiled")
            < _find(r2, "fp8-weight-only+compiled", 1, 4096).step_us("step_compiled"))  # "in all four runs"
    assert "throttled" in f[128].flag_names
    step_md = _flat(ROOT / "docs" / "step.md")
    for fig in (f"{ms(f[128])} against {ms(i[128])} ms, {sp[f[128].key]['step_compiled']:.2f}× bf16",
                f"{ms(bf[128])} against {ms(bi[128])} ms, fp8 faster beyond noise",
                f"its Σ linear there is {lin(bf[128]):.2f} against int4's {lin(bi[128]):.2f} ms "
                f"({lin(f[128]):.2f} against {lin(i[128]):.2f} ms here)",
                f"{ms(lf[128])} against {ms(li[128])} ms, int4 faster by {slower:.0f} % beyond noise, Σ linear "
                f"{lin(lf[128]):.2f} against {lin(li[128]):.2f} ms",
                f"int4 {slower:.0f} % faster in one, fp8 {again:.1f} % faster in the other",
                f"{ms(rf)} against {ms(ri)} ms, fp8 faster beyond noise again, Σ linear {lin(rf):.2f} against {lin(ri):.2f} ms",
                f"fp8's logits error is {logits_error(f[128]):.3f} against int4's {logits_error(i[128]):.3f}",
                f"(here {ms(f[4096], 2)} against {ms(i[4096], 2)} ms, {sp[f[4096].key]['step_compiled']:.2f}× against "
                f"{sp[i[4096].key]['step_compiled']:.2f}×)",
                f"fp8's Σ linear is int4's ({lin(f[4096]):.2f} against {lin(i[4096]):.2f} ms), its rest is not "
                f"({rest(f[4096]):.2f} against {rest(i[4096]):.2f} ms)",
                f"(`reduce-overhead`, {f[128].step_us('step_reduce_overhead') / 1e3:.1f} and "
                f"{i[128].step_us('step_reduce_overhead') / 1e3:.1f} ms at 128 positions"):
        assert fig in step_md, fig
    res_md = _flat(ROOT / "docs" / "results-h200.md")
    for fig in (f"({lin(f[128]):.2f} against {lin(i[128]):.2f} ms of Σ linear)",
                f"({ms(f[128], 2)} ms each, p10–p90 overlapping)",
                f"({rest(f[4096]):.2f} against {rest(i[4096]):.2f} ms at 4096)",
                f"fp8's Σ linear is {lin(bf[128]):.2f} against int4's {lin(bi[128]):.2f} ms and its step "
                f"{ms(bf[128], 2)} against {ms(bi[128], 2)} ms",
                f"in its 343 s run (`step_llama3_8b.json`) fp8's Σ linear is {lin(lf[128]):.2f} against "
                f"{lin(li[128]):.2f} ms and its step {ms(lf[128], 2)} against {ms(li[128], 2)} ms",
                f"step_llama3_8b_run2.json`) {lin(rf):.2f} against {lin(ri):.2f} ms and {ms(rf, 2)} against {ms(ri, 2)} ms"):
        assert fig in res_md, fig
    readme = _flat(ROOT / "README.md")
    faster = 100 * (bi[128].step_us("step_compiled") / bf[128].step_us("step_compiled") - 1)
    assert (f"p10–p90 overlapping; in three more runs {faster:.1f} % faster, {slower:.1f} % slower and {again:.1f} % "
            "faster: the order does not hold across runs)") in readme


def test_methodology_step_tie_example():
    from qbench.step.view import recommend

    rows = _rows("step_llama31_8b.json")
    rec = next(r for r in recommend(rows, 0.5) if (r["m"], r["context"]) == (1, 128))
    assert (rec["pick"], rec["ties"]) == ("fp8-weight-only+compiled", ["int4-weight-only+compiled"])
    f, i = (_find(rows, s, 1, 128).step_us("step_compiled") / 1e3 for s in (rec["pick"], rec["ties"][0]))
    assert f"are tied ({f:.3f} and {i:.3f} ms) and the pick is fp8 weight-only" in _flat(ROOT / "docs" / "methodology.md")
