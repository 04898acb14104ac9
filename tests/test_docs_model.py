"""The figures in prose of docs/results-h200.md's two model sections (Llama-3-8B and Llama-3.1-70B
decode steps), recomputed with qbench.readers.model from the committed files they cite: a stale or
mistyped figure fails here. ``python tests/test_docs_model.py`` prints the figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from qbench.readers.model import PRESETS
from qbench.readers.model import index_rows, model_step
from qbench.results import read_results

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results-h200.md"
D = "results/h200/"
BLOCKS_8B = [f"{D}llama3_8b_{s}.json" for s in ("q_o", "k_v", "gate_up", "down")]
FILES_8B = BLOCKS_8B + [D + "llama3_8b_lm_head.json"]
FILES_70B = [D + f"llama31_70b_{s}.json" for s in ("q_o", "k_v", "gate_up", "down", "lm_head")]


def _step(model: str, files: list[str], max_rel_err=None) -> dict:
    index, _ = index_rows([(f, read_results(ROOT / f)) for f in files])
    return model_step(PRESETS[model], index, "stream", "bf16", max_rel_err)


def _rec(result: dict, scheme: str, m: int) -> dict:
    return next(r for r in result["rows"] if r["scheme"] == scheme and r["m"] == m)


def _ok(result: dict, m: int) -> list[dict]:
    return [r for r in result["rows"] if r["m"] == m and r["status"] == "ok"]


def _us(x: float) -> str:
    return f"{x:,.0f}"


def fragments() -> list[str]:
    """The prose fragments with their figures, as the docs print them."""
    r8, r8e = _step("llama3-8b", FILES_8B), _step("llama3-8b", FILES_8B, 0.01)
    b = _rec(r8, "bf16", 1)
    best = _ok(r8, 1)[0]
    mslk = "fp8-dynamic[kernel_preference=mslk]"
    out = [
        f"At M = 1 bf16's {b['stored_bytes'] / 2**30:.2f} GiB of linear weights take {_us(b['step_us'])} µs per step "
        f"({b['tokens_per_s']:.0f} tokens/s), {b['floor_fraction'] * 100:.0f} % of their {_us(b['hbm_floor_us'])} µs "
        "HBM floor.",
        f"The fastest step is {best['scheme']}, {_us(best['step_us'])} µs ({best['tokens_per_s']:.0f} tokens/s, "
        f"{best['speedup']:.2f}× bf16) at rel_fro up to {best['rel_fro_max']:.3g};",
        f"no quantized scheme is left: fp16 ({_rec(r8e, 'fp16', 1)['speedup']:.2f}×) and bf16.",
        f"fp8-dynamic[kernel_preference=mslk] is the fastest, {_rec(r8, mslk, 16)['speedup']:.2f}× and "
        f"{_rec(r8, mslk, 512)['speedup']:.2f}× (rel_fro {max(_rec(r8, mslk, m)['rel_fro_max'] for m in (16, 512)):.2g});",
        f"(tinygemm at M = 16: {_rec(r8, 'int4-weight-only', 16)['speedup']:.2f}×).",
    ]
    blocks_only = _step("llama3-8b", BLOCKS_8B, 0.01)
    int8c = _rec(blocks_only, "int8-weight-only+compiled", 1)
    out.append(f"(the 2026-11-30 tables: {int8c['speedup']:.2f}× bf16 at M = 1)")
    r70 = _step("llama3.1-70b", FILES_70B)
    b70, best70 = _rec(r70, "bf16", 1), _ok(r70, 1)[0]
    out += [
        f"bf16's {b70['stored_bytes'] / 2**30:.1f} GiB take {_us(b70['step_us'])} µs at M = 1 "
        f"({b70['floor_fraction'] * 100:.0f} % of the HBM floor, {b70['tokens_per_s']:.0f} tokens/s).",
        f"The fastest step at M = 1 is {best70['scheme']}, {_us(best70['step_us'])} µs ({best70['speedup']:.2f}× bf16, "
        f"{best70['floor_fraction'] * 100:.0f} % of its own floor, rel_fro {best70['rel_fro_max']:.3g});",
        f"fp8-dynamic[kernel_preference=mslk], {_rec(r70, mslk, 16)['speedup']:.2f}× and "
        f"{_rec(r70, mslk, 512)['speedup']:.2f}×.",
    ]
    return out


def test_every_prose_figure_matches_the_files():
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    for fragment in fragments():
        assert fragment in text, fragment


def test_the_schemes_said_to_have_no_step_have_none():
    r8, r70 = _step("llama3-8b", FILES_8B), _step("llama3.1-70b", FILES_70B)
    none8 = {r["scheme"] for r in r8["rows"] if r["step_us"] is None}
    none70 = {r["scheme"] for r in r70["rows"] if r["step_us"] is None}
    assert none8 == {"w8a8-dynamic", "int8-bnb", "int8-weight-only+compiled"}
    assert none70 == none8 | {"int4-weight-only+compiled"}
    assert all(r["lm_head_included"] for r in (r8, r70))
    within = _step("llama3.1-70b", FILES_70B, 0.01)
    assert all(within["fastest"][m] == "bf16" for m in within["ms"])


def test_the_cut_off_int8_compiled_run_is_as_described():
    """int8-weight-only+compiled has no 8B LM-head row: the merged file's first source (the cut-off run)
    holds the schemes before it, ending with fp8-weight-only+compiled at 151 s; the second source measured
    int4-weight-only+compiled alone; the suite log says the step was ended at 330 s."""
    from qbench.scenario import from_dict

    doc = read_results(ROOT / D / "llama3_8b_lm_head.json")
    labels = [e.label for e in from_dict(doc.scenario.model_dump(), "lm_head").schemes]
    have = list(dict.fromkeys(r.scheme for r in doc.rows))
    assert doc.complete is False and [s for s in labels if s not in have] == ["int8-weight-only+compiled"]
    cut, rest = doc.merged_from
    assert cut["complete"] is False and rest["schemes"] == ["int4-weight-only+compiled"]
    assert labels.index("int8-weight-only+compiled") == labels.index("fp8-weight-only+compiled") + 1
    assert cut["rows"] == 3 * (len(labels) - 2) and rest["rows"] == 3
    log = (ROOT / D / "env" / "2026-12-01" / "suite-call5.log").read_text()
    assert "llama3_8b_lm_head rc=124 wall_s=330.3" in log
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    assert f"{330.3 - cut['wall_s']:.0f} s after the previous scheme finished" in text


if __name__ == "__main__":
    print("\n".join(fragments()))


def test_readme_model_figures():
    readme = " ".join((ROOT / "README.md").read_text().split())
    r8, r70 = _step("llama3-8b", FILES_8B), _step("llama3.1-70b", FILES_70B)
    b8, b70 = _ok(r8, 1)[0], _ok(r70, 1)[0]
    assert (f"on Llama-3-8B at M = 1 the fastest step is {b8['scheme']}, {b8['speedup']:.2f}× bf16 "
            f"(rel_fro {b8['rel_fro_max']:.3g}); on Llama-3.1-70B {b70['scheme']}, {b70['speedup']:.2f}× "
            f"(rel_fro {b70['rel_fro_max']:.3g})") in readme
    mslk = "fp8-dynamic[kernel_preference=mslk]"
    assert all(r["fastest"][m] == mslk for r in (r8, r70) for m in (16, 512))
