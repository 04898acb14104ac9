"""The figures in prose of docs/results-h200.md's decode-kernels section, recomputed from the committed
file they cite (results/h200/decode_kernels.json): a stale or mistyped figure fails here."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "results" / "h200" / "decode_kernels.json"
DOC = ROOT / "docs" / "results-h200.md"


def _sig(x: float) -> str:
    """Three significant figures, as the docs print µs (6.91, 13.5, 155, 4807 kept whole)."""
    return str(round(x)) if x >= 1000 else f"{x:.3g}"


@pytest.fixture(scope="module")
def rows():
    doc = json.loads(FILE.read_text())
    return {(r["scheme"], r["m"]): r for r in doc["rows"]}


@pytest.fixture(scope="module")
def section():
    text = DOC.read_text()
    start = text.index("## Decode kernels: every int4, int8 and fp8 kernel")
    return text[start:text.index("```sh", start)]


def stream(rows, scheme, m):
    return rows[(scheme, m)]["latency_us"]["stream"]["median"]


def test_file_is_complete_and_all_ok(rows, section):
    assert len(rows) == 45 and all(r["status"] == "ok" for r in rows.values())
    assert "45 rows, all ok" in section


def test_m1_figures(rows, section):
    best = min((stream(rows, s, 1), s) for (s, m) in rows if m == 1)
    assert best[1] == "int4-weight-only+compiled"
    bf16 = stream(rows, "bf16", 1)
    fig = f"{_sig(best[0])} µs against\n  bf16's {_sig(bf16)} ({bf16 / best[0]:.2f}×)"
    assert fig in section
    assert f"fused int8 reduction ({_sig(stream(rows, 'int8-weight-only+compiled', 1))} µs)" in section
    assert f"fp8 GEMV ({_sig(stream(rows, 'fp8-weight-only-gemlite', 1))} µs)" in section


@pytest.mark.parametrize("scheme", ["int4-plain", "int4-preshuffled", "fp8-int4",
                                    "fp8-dynamic[kernel_preference=mslk]"])
def test_flat_in_m_figures(rows, section, scheme):
    figs = " / ".join(_sig(stream(rows, scheme, m)) for m in (1, 16, 128))
    text = " ".join(section.split())
    assert f"{scheme} {figs}" in text or f"{scheme} reads {figs}" in text
    assert stream(rows, scheme, 128) / stream(rows, scheme, 1) < 1.3  # "flat": under 30 % growth


def test_tinygemm_growth_and_the_m16_winners(rows, section):
    text = " ".join(section.split())
    figs = [_sig(stream(rows, "int4-weight-only", m)) for m in (1, 16, 128)]
    assert f"tinygemm (int4-weight-only, not compiled) grows from {figs[0]} to {figs[1]} and {figs[2]} µs" in text
    r16, r128 = (stream(rows, "bf16", m) / stream(rows, "fp8-int4", m) for m in (16, 128))
    assert f"fp8-int4 reads {r16:.2f}× and {r128:.2f}× bf16 at M = 16 and 128" in text and r16 < 1 and r128 < 1
    beat = {m: sorted(s for (s, mm) in rows if mm == m and stream(rows, s, m) < stream(rows, "bf16", m))
            for m in (16, 128)}
    assert beat == {16: ["fp8-dynamic[kernel_preference=mslk]", "int8-weight-only-gemlite"],
                    128: ["fp8-dynamic-gemlite", "fp8-dynamic[kernel_preference=mslk]"]}
    assert "No 4-bit kernel beats bf16 there" in text and "Two rows beat bf16 at each of these M" in text
    for m in (16, 128):
        int4 = min((stream(rows, s, m), s) for (s, mm) in rows
                   if mm == m and s in ("int4-weight-only", "int4-weight-only+compiled", "int4-plain",
                                        "int4-preshuffled", "int4-weight-only-gemlite", "fp8-int4"))
        fp8 = min((stream(rows, s, m), s) for (s, mm) in rows if mm == m and s.startswith("fp8-") and s != "fp8-int4")
        assert int4[1] == "fp8-int4" and fp8[1] == "fp8-dynamic[kernel_preference=mslk]"


def test_compiled_int8_trap(rows, section):
    text = " ".join(section.split())
    t16, t128 = stream(rows, "int8-weight-only+compiled", 16), stream(rows, "int8-weight-only+compiled", 128)
    b16, b128 = stream(rows, "bf16", 16), stream(rows, "bf16", 128)
    assert f"{_sig(t16)} and {_sig(t128)} µs: {t16 / b16:.0f}× and {t128 / b128:.0f}× bf16" in text
    for m in (16, 128):
        names = [k["name"] for k in rows[("int8-weight-only+compiled", m)]["dispatch"]["kernels"]]
        assert "weight_int8pack_mm_kernel" in names[0]
    g = [_sig(stream(rows, "int8-weight-only-gemlite", m)) for m in (16, 128)]
    assert f"gemlite's int8 kernels read {g[0]} and {g[1]} µs there" in text


def test_fp8_int4_bytes(rows, section):
    r = rows[("fp8-int4", 1)]
    scale = next(p for p in r["ledger"] if p["name"] == "weight.group_scale")
    assert scale["shape"] == [32, 8, 4096] and scale["bytes"] == 1 << 20 and scale["dtype"] == "float8_e4m3fn"
    assert f"stores {r['bits_per_weight']:.2f} bits per weight" in " ".join(section.split())


SEEN = {  # docs/schemes.md "Kernels seen" lines: scheme -> M -> kernel names the profile must hold
    "int4-plain": {1: ["cutlass_mslk"], 16: ["cutlass_mslk"], 128: ["cutlass_mslk"]},
    "int4-preshuffled": {1: ["cutlass_mslk"], 16: ["cutlass_mslk"], 128: ["cutlass_mslk"]},
    "fp8-int4": {m: ["_kernel_quantize_fp8_row", "cutlass_mslk"] for m in (1, 16, 128)},
    "int4-weight-only-gemlite": {1: ["gemv_INT_revsplitK_kernel", "FillFunc"], 16: ["gemm_splitK_INT_kernel", "FillFunc"],
                                 128: ["gemm_INT_kernel"]},
    "int8-weight-only-gemlite": {1: ["gemv_INT_splitK_kernel"], 16: ["gemm_splitK_INT_kernel", "FillFunc"],
                                 128: ["gemm_INT_kernel"]},
    "fp8-weight-only-gemlite": {1: ["gemv_INT_splitK_kernel"], 16: ["gemm_splitK_INT_kernel"], 128: ["gemm_INT_kernel"]},
    "fp8-dynamic-gemlite": {m: ["scale_activations_per_token_triton_v3_kernel", k] for m, k in
                            ((1, "gemv_INT_splitK_kernel"), (16, "gemm_splitK_INT_kernel"), (128, "gemm_INT_kernel"))},
}


def test_schemes_md_kernels_seen_are_in_the_profiles(rows):
    """Each kernel docs/schemes.md says was seen is in that row's profile, and each "Kernels seen"
    line names them (the mslk kernel by its demangled prefix)."""
    text = (ROOT / "docs" / "schemes.md").read_text()
    for scheme, by_m in SEEN.items():
        section = text[text.index(f"\n## {scheme}\n"):]
        line = section[section.index("**Kernels seen**"):].split("\n", 1)[0]
        for m, names in by_m.items():
            profile = [k["name"] for k in rows[(scheme, m)]["dispatch"]["kernels"]]
            for name in names:
                assert any(name in p for p in profile), (scheme, m, name, profile)
                shown = "cutlass_mslk::device_kernel" if name == "cutlass_mslk" else name
                assert shown in line, (scheme, shown)
            assert len(profile) == len(names), (scheme, m, profile)  # nothing else ran


def test_schemes_md_counted_bytes(rows):
    """The stored bytes and bits per weight docs/schemes.md gives each kernel scheme, counted on the H200."""
    text = " ".join((ROOT / "docs" / "schemes.md").read_text().split())
    for scheme in ("int4-plain", "int4-preshuffled", "fp8-int4", "int4-weight-only-gemlite", "int8-weight-only-gemlite",
                   "fp8-weight-only-gemlite", "fp8-dynamic-gemlite"):
        r = rows[(scheme, 1)]
        section = text[text.index(f"## {scheme} "):]
        storage = section[section.index("**Storage.**"):section.index("**Kernels expected.**")]
        assert f"{r['stored_bytes']:,} bytes" in storage, scheme
        assert f"{r['bits_per_weight']:.2f} bits per weight" in storage, scheme
    assert "| fp8-int4 | torchao (mslk) | int4 (2 per int8, symmetric) | bfloat16 → e4m3 per call | fp8 | " \
           f"{rows[('fp8-int4', 1)]['bits_per_weight']:.2f} † |" in text
