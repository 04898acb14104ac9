"""The README's model-step figures, recomputed from the committed H200 step files."""

from __future__ import annotations

import json
from pathlib import Path

from qbench.step.row import StepRow
from qbench.step.view import decision_method, linear_speedup, logits_error, speedups, tied

ROOT = Path(__file__).resolve().parents[2]


def _rows(name):
    return [StepRow.model_validate(r) for r in json.loads((ROOT / "results/h200" / name).read_text())["rows"]]


def _find(rows, scheme, m, context):
    return next(r for r in rows if (r.scheme, r.m, r.context) == (scheme, m, context))


def test_readme_step_figures():
    text = (ROOT / "README.md").read_text()
    rows = _rows("step_llama31_8b.json")
    sp, lsp = speedups(rows), linear_speedup(rows)
    eager, comp = _find(rows, "int4-weight-only", 1, 128), _find(rows, "int4-weight-only+compiled", 1, 128)
    figures = {f"{sp[eager.key]['step_graph']:.2f}× bf16's eager", f"{sp[comp.key]['step_compiled']:.2f}× compiled",
               f"predicts {lsp[eager.key]:.2f}× and {lsp[comp.key]:.2f}×"}
    far_e, far_c = _find(rows, "int4-weight-only", 1, 32768), _find(rows, "int4-weight-only+compiled", 1, 32768)
    figures.add(f"32768 positions {sp[far_e.key]['step_graph']:.2f}× and {sp[far_c.key]['step_compiled']:.2f}×")
    m16 = [sp[r.key][decision_method(r)] for r in rows if r.m == 16 and r.base_scheme == "int4-weight-only"]
    figures.add(f"({min(m16):.2f}-{max(m16):.2f}×)")
    mslk = _find(rows, "fp8-dynamic[kernel_preference=mslk]", 16, 128)
    figures.add(f"mslk's kernel ({sp[mslk.key]['step_graph']:.2f}× at 128 positions)")
    faster = {r.scheme for r in rows if r.m == 16 and r.scheme not in ("bf16", "fp16", "bf16+compiled")
              and sp[r.key][decision_method(r)] > 1}
    assert faster == {"fp8-dynamic[kernel_preference=mslk]"}  # "the one 8-bit scheme faster than bf16"
    assert _find(rows, "bf16+compiled", 16, 128).latency_us["step_compiled"]["median"] < \
        mslk.latency_us["step_graph"]["median"]  # "bf16 compiled is faster still"
    for scheme in ("fp8-dynamic+compiled", "int8-weight-only+compiled"):
        got = [sp[r.key][decision_method(r)] for r in rows if r.m == 16 and r.scheme == scheme]
        assert len(got) == 3, scheme  # every context
        figures.add(f"{min(got):.2f}-{max(got):.2f}×")
    fp8c = [_find(rows, "fp8-weight-only+compiled", 1, c) for c in (128, 4096)]
    int4c = [_find(rows, "int4-weight-only+compiled", 1, c) for c in (128, 4096)]
    assert f"{sp[fp8c[0].key]['step_compiled']:.2f}" == f"{sp[int4c[0].key]['step_compiled']:.2f}"  # "1.57× each"
    assert tied([fp8c[0]], int4c[0]) == [fp8c[0]]  # "p10–p90 overlapping"
    figures.add(f"128 positions ({sp[fp8c[0].key]['step_compiled']:.2f}× each, p10–p90 overlapping;")
    figures.add(f"logits error ({logits_error(fp8c[0]):.3f} against {logits_error(int4c[0]):.3f})")
    figures.add(f"4096 ({sp[fp8c[1].key]['step_compiled']:.2f}× against {sp[int4c[1].key]['step_compiled']:.2f}×)")
    assert 0.2 < logits_error(fp8c[0]) / logits_error(int4c[0]) < 0.3  # "a quarter of its logits error"
    bench = json.loads((ROOT / "results/h200/step_llama3_8b.json").read_text())
    assert bench["complete"] is True and len(bench["scenario"]["schemes"]) == 8
    assert bench["wall_s"] <= 360
    run2 = json.loads((ROOT / "results/h200/evidence/speed/2026-12-02d/step_llama3_8b_run2.json").read_text())
    assert run2["complete"] is True and run2["wall_s"] <= 360
    figures.add(f"the 8-scheme speed benchmark took {bench['wall_s']:.0f} s and {run2['wall_s']:.0f} s in two runs "
                "on one H200 against a 360 s target")
    asked = len(json.loads((ROOT / "results/h200/step_llama31_8b.json").read_text())["scenario"]["schemes"])
    figures.add(f"{len({r.scheme for r in rows})} of its scenario's {asked} schemes")
    bf = [_find(rows, "bf16", 1, c) for c in (128, 32768)]
    figures.add(f"is {100 * bf[0].remainder_share['step_graph']:.0f} % at 128 positions and "
                f"{100 * bf[1].remainder_share['step_graph']:.0f} %")
    r70 = _rows("step_llama31_70b.json")
    i70 = _find(r70, "int4-weight-only", 1, 4096)
    figures.add(f"int4 is {speedups(r70)[i70.key]['step_graph']:.2f}×")
    figures.add(f"from {_find(r70, 'bf16', 1, 4096).blocks_built} of 80 blocks")
    flat = " ".join(text.split())
    for fig in figures:
        assert fig in flat, fig
