"""qbench model: the linear layers of a decode step summed from per-layer rows (hand-computed
cases), the presets against the scenario files and the models' known parameter counts, and the
command on the committed H200 files."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from qbench import cli
from qbench.readers import model as model_mod
from qbench.readers.model import PRESETS, LinearShape, ModelPreset
from qbench.readers.model import index_rows, model_step, row_floor_us
from qbench.results import read_results
from qbench.row import reason_record
from tests.conftest import run_subcommand
from tests.rows import make_row, typed_row

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "results" / "h200"
LLAMA3_8B_FILES = [str(H200 / f"llama3_8b_{p}.json") for p in ("q_o", "k_v", "gate_up", "down")]

CAPTURE = ("not attempted: CUDA graph capture failed at M=1: CUDA graph capture failed: AcceleratorError: "
           "CUDA error: operation not permitted when stream is capturing")

#: A small model: 3 blocks of [A: 8→16 ×2, B: 16→8 ×1], LM head 8→32.
TINY = ModelPreset(name="tiny", title="Tiny", blocks=3,
                   block=(LinearShape("a_proj, a2_proj", 8, 16, 2, "scenarios/tiny_a.toml"),
                          LinearShape("b_proj", 16, 8, 1, "scenarios/tiny_b.toml")),
                   lm_head=LinearShape("lm_head", 8, 32, 1, "scenarios/tiny_head.toml"))


def row(scheme, m, k, n, us=None, stored=256, floor=0.1, rel=0.001, status="ok", reason=None,
        stream_reason=None, nonfinite=0):
    """A result row with the keys qbench writes (results/h200/*.json), ``stream`` median ``us``."""
    r = {"scheme": scheme, "base_scheme": scheme.split("+")[0], "library": "torch", "m": m, "k": k,
         "n": n, "status": status, "reason": reason, "stored_bytes": stored,
         "latency_us": {"stream": None if us is None else {"median": us, "p10": us * 0.99, "p90": us * 1.01},
                        "eager": {"median": 50.0, "p10": 49.0, "p90": 51.0}},
         "latency_reasons": {} if stream_reason is None else
                            {"stream": reason_record("not-attempted", stream_reason)},
         "error": {"rel_fro": rel, "nonfinite": nonfinite}}
    if floor is not None:
        r["hbm_floor_us"] = floor
    return make_row(**r)


def doc(rows, gbps=1000.0):
    return {"schema_version": 2, "ceilings": {"measured": {"memory_gbps": gbps}}, "rows": rows,
            "scenario": {"name": "hand"}}


def _get(result, scheme, m):
    return next(r for r in result["rows"] if r["scheme"] == scheme and r["m"] == m)


def _index(*rows, gbps=1000.0):
    return index_rows([("hand.json", doc(list(rows), gbps))])[0]


BASE_ROWS = [
    row("bf16", 1, 8, 16, 10.0), row("bf16", 1, 16, 8, 6.0),
    row("bf16", 16, 8, 16, 12.0), row("bf16", 16, 16, 8, 7.0),
    row("int4-weight-only", 1, 8, 16, 4.0, stored=80, floor=0.03, rel=0.1),
    row("int4-weight-only", 1, 16, 8, 3.0, stored=72, floor=0.02, rel=0.09),
    row("int4-weight-only", 16, 8, 16, 20.0, stored=80, floor=0.03, rel=0.1),  # no 16→8 row at M=16
    row("int8-bnb", 1, 8, 16, stream_reason=CAPTURE), row("int8-bnb", 1, 16, 8, stream_reason=CAPTURE),
    row("nf4-bnb", 1, 8, 16, status="skipped", reason="package 'bitsandbytes' is not installed"),
    row("nf4-bnb", 1, 16, 8, 5.0),
]


def test_sum_by_hand():
    r = model_step(TINY, _index(*BASE_ROWS))
    assert r["ms"] == [1, 16] and not r["missing"] and r["lm_head_included"] is False
    bf = _get(r, "bf16", 1)
    # 3 blocks × (2 × 10 + 1 × 6) µs = 78 µs; 3 × (2 × 256 + 256) B = 2304 B; 3 × (2 × 0.1 + 0.1) = 0.9 µs
    assert bf["status"] == "ok" and bf["step_us"] == pytest.approx(78.0)
    assert bf["stored_bytes"] == 2304 and bf["hbm_floor_us"] == pytest.approx(0.9)
    assert bf["floor_fraction"] == pytest.approx(0.9 / 78)
    assert bf["tokens_per_s"] == pytest.approx(1e6 / 78)  # M = 1: one token per step
    assert bf["speedup"] == pytest.approx(1.0)
    i4 = _get(r, "int4-weight-only", 1)
    # 3 × (2 × 4 + 3) = 33 µs; 3 × (2 × 80 + 72) = 696 B; 3 × (2 × 0.03 + 0.02) = 0.24 µs; 78 / 33
    assert i4["step_us"] == pytest.approx(33.0) and i4["stored_bytes"] == 696
    assert i4["hbm_floor_us"] == pytest.approx(0.24) and i4["speedup"] == pytest.approx(78 / 33)
    assert i4["rel_fro_max"] == pytest.approx(0.1)
    bf16 = _get(r, "bf16", 16)
    # 3 × (2 × 12 + 7) = 93 µs for 16 tokens
    assert bf16["step_us"] == pytest.approx(93.0) and bf16["tokens_per_s"] == pytest.approx(16e6 / 93)
    assert r["fastest"] == {1: "int4-weight-only", 16: "bf16"}
    # per M: the schemes with a step fastest first, then the rest in the order first seen
    assert [x["scheme"] for x in r["rows"] if x["m"] == 1] == ["int4-weight-only", "bf16", "int8-bnb", "nf4-bnb"]


def test_incomplete_and_unusable_are_not_summed():
    r = model_step(TINY, _index(*BASE_ROWS))
    i4 = _get(r, "int4-weight-only", 16)
    assert i4["status"] == "incomplete" and i4["step_us"] is None and i4["speedup"] is None
    assert i4["note"] == "incomplete: no row at 16→8"
    nf4 = _get(r, "nf4-bnb", 1)
    assert nf4["status"] == "incomplete" and nf4["step_us"] is None
    assert "skipped at 8→16: package 'bitsandbytes' is not installed" in nf4["note"]
    bnb = _get(r, "int8-bnb", 1)
    assert bnb["status"] == "unusable" and bnb["step_us"] is None
    assert bnb["note"] == "unusable in a graph-captured decode loop (no stream time at any shape)"
    # a scheme seen only at M = 1 has an incomplete record at M = 16 too
    assert _get(r, "int8-bnb", 16)["note"] == "incomplete: no row at 8→16; no row at 16→8"


def test_lm_head_counts_once_and_is_required_when_measured():
    head = [row("bf16", 1, 8, 32, 5.0, stored=512, floor=0.2)]
    r = model_step(TINY, _index(*BASE_ROWS, *head))
    assert r["lm_head_included"] is True
    bf = _get(r, "bf16", 1)
    assert bf["step_us"] == pytest.approx(78.0 + 5.0) and bf["stored_bytes"] == 2304 + 512
    assert bf["hbm_floor_us"] == pytest.approx(0.9 + 0.2)
    assert _get(r, "int4-weight-only", 1)["note"] == "incomplete: no row at 8→32"
    assert r["fastest"][1] == "bf16"


def test_missing_block_shape():
    r = model_step(TINY, _index(row("bf16", 1, 8, 16, 10.0)))
    assert [(s["k"], s["n"], s["scenario"]) for s in r["missing"]] == [(16, 8, "scenarios/tiny_b.toml")]
    assert _get(r, "bf16", 1)["status"] == "incomplete" and r["fastest"] == {1: None}
    assert model_mod.missing_lines(r) == ["missing b_proj 16→8 (×1 per block): python -m qbench run scenarios/tiny_b.toml"]


def test_floor_from_the_files_bandwidth_and_first_file_wins():
    # no hbm_floor_us: stored bytes / measured bandwidth: 2e6 B at 1000 GB/s = 2 µs
    stored = typed_row(scheme="x", m=1, k=8, n=8, status="ok", stored_bytes=2_000_000)
    assert row_floor_us(stored, 1000.0) == pytest.approx(2.0)
    assert row_floor_us(stored, None) is None
    a = doc([row("bf16", 1, 8, 16, 10.0, stored=2_000_000, floor=None),
             row("bf16", 1, 16, 8, 6.0, stored=1_000_000, floor=None)], gbps=1000.0)
    b = doc([row("bf16", 1, 8, 16, 99.0)])
    index, notes = index_rows([("a.json", a), ("b.json", b)])
    assert index[("bf16", 1, 8, 16)].source == "a.json"
    assert notes == ["K=8, N=16: rows of b.json not used (a.json has them, given first)"]
    r = model_step(TINY, index)
    # 3 × (2 × 2 + 1 × 1) µs of floor; the step keeps a.json's 10 µs
    bf = _get(r, "bf16", 1)
    assert bf["hbm_floor_us"] == pytest.approx(15.0) and bf["step_us"] == pytest.approx(78.0)


def test_error_budget_and_nonfinite():
    rows = [*BASE_ROWS, row("fp16", 1, 8, 16, 9.0, rel=0.0004), row("fp16", 1, 16, 8, 5.0, nonfinite=3)]
    r = model_step(TINY, _index(*rows), max_rel_err=0.01)
    assert _get(r, "int4-weight-only", 1)["status"] == "over error budget"
    assert _get(r, "int4-weight-only", 1)["step_us"] == pytest.approx(33.0)  # still summed, not ranked
    assert _get(r, "fp16", 1)["status"] == "non-finite outputs"
    assert r["fastest"][1] == "bf16"


def test_presets_match_the_scenarios_and_the_parameter_counts():
    for preset in PRESETS.values():
        for shape in (*preset.block, preset.lm_head):
            layer = tomllib.loads((ROOT / shape.scenario).read_text())["layer"]
            assert (layer["in_features"], layer["out_features"]) == (shape.k, shape.n), shape.scenario
    # Σ count × K × N: 218,103,808 linear weights per Llama-3-8B block × 32 (+ LM head and embedding
    # 525,336,576 each + norms 266,240 = 8,030,261,248, the published parameter count)
    l8 = PRESETS["llama3-8b"]
    per_block = sum(s.count * s.k * s.n for s in l8.block)
    assert per_block == 218_103_808 and l8.blocks == 32
    assert per_block * 32 + 2 * 4096 * 128256 + (2 * 32 + 1) * 4096 == 8_030_261_248
    l70 = PRESETS["llama3.1-70b"]
    per_block = sum(s.count * s.k * s.n for s in l70.block)
    assert per_block * 80 + 2 * 8192 * 128256 + (2 * 80 + 1) * 8192 == 70_553_706_496
    assert {(s.k, s.n) for s in l70.block} == {(8192, 8192), (8192, 1024), (8192, 28672), (28672, 8192)}


def run(*argv):
    return run_subcommand(model_mod, "model", *argv)


def test_cli_llama3_8b_on_the_h200_files(capsys):
    """The committed per-layer files give every scheme's step at M = 1, 16, 512: exit 0."""
    assert cli.main(["model", "llama3-8b", *LLAMA3_8B_FILES, "--wide"]) == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    out = capsys.readouterr().out
    assert "attention (scores, softmax, RoPE), the KV cache" in out and "not included" in out
    assert "LM head 4096→128256: missing, not measured" in out
    assert "tokens/s of the linear layers only" in out and "- M=1: fastest " in out
    assert "unusable in a graph-captured decode loop" in out
    # the step of bf16 at M = 1 from the files, summed here independently
    medians = {}
    for path in LLAMA3_8B_FILES:
        for r in read_results(path).rows:
            if r.scheme == "bf16" and r.m == 1:
                medians[(r.k, r.n)] = r.latency_us["stream"].median
    expected = 32 * (2 * medians[(4096, 4096)] + 2 * medians[(4096, 1024)] + 2 * medians[(4096, 14336)]
                     + medians[(14336, 4096)])
    assert run("llama3-8b", *LLAMA3_8B_FILES, "--format", "json") == 0
    result = json.loads(capsys.readouterr().out)
    bf = next(r for r in result["rows"] if r["scheme"] == "bf16" and r["m"] == 1)
    assert bf["step_us"] == pytest.approx(expected) and bf["speedup"] == pytest.approx(1.0)
    assert bf["stored_bytes"] == 2 * 6_979_321_856  # bf16: 2 bytes per linear weight, no metadata
    assert {r["status"] for r in result["rows"] if r["scheme"] in ("int8-bnb", "w8a8-dynamic")} == {"unusable"}
    assert result["ms"] == [1, 16, 512] and all(result["fastest"][str(m)] for m in (1, 16, 512))


def test_cli_csv_is_the_table_alone(capsys):
    """CSV on stdout is the table alone; the prose (shapes, the fastest per M, what to act on) goes to stderr."""
    assert run("llama3-8b", *LLAMA3_8B_FILES, "--format", "csv") == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert lines[0] == "m,scheme,step_us,hbm_floor_us,floor_pct,stored_gib,tokens_per_s,speedup,rel_fro_max,note"
    assert len(lines) == 1 + 3 * 17
    assert "- M=1: " in cap.err and model_mod.ACT_ON in cap.err and "32 blocks ×" in cap.err


def test_cli_70b_names_the_missing_shapes(capsys):
    assert cli.main(["model", "llama3.1-70b", *LLAMA3_8B_FILES]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "Traceback" not in cap.err
    for name in ("q_o", "k_v", "gate_up", "down"):
        assert f"python -m qbench run scenarios/llama31_70b_{name}.toml" in cap.err
    assert "4 of its 4 block shapes are in none of the files given" in cap.err
    assert cli.main(["model", "llama3.1-70b"]) == 1
    assert "no result file given" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["gpt2", *LLAMA3_8B_FILES[:1]], ["llama3-8b", "missing.json"],
                                  ["llama3-8b", *LLAMA3_8B_FILES, "--format", "nope"],
                                  ["llama3-8b", *LLAMA3_8B_FILES, "--max-rel-err", "-1"]])
def test_bad_input_exit_2(argv, capsys):
    assert run(*argv) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_files_of_two_machines_are_refused(capsys):
    """A CPU file and an H200 file: a step would add CPU and GPU times; one line, exit 2."""
    from pathlib import Path

    from qbench.readers import model
    from tests.conftest import run_subcommand

    root = Path(__file__).resolve().parents[2]
    code = run_subcommand(model, "model", "llama3-8b", str(root / "results/cpu/decode.json"),
                          str(root / "results/h200/llama3_8b_k_v.json"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("qbench model: the files were measured on different machines (")
    assert "cpu AMD EPYC" in err[0] and "cuda NVIDIA H200" in err[0]


def test_summary_counts_the_schemes_without_a_complete_step(capsys):
    """Llama-3.1-70B from the committed 2026-12-01 files (the cut-off shapes merged with the runs that
    completed them, still without two compiled schemes): 13 schemes complete, 4 without (two not
    graph-capturable, two compiled schemes with a shape missing)."""
    from qbench.readers import model
    from tests.conftest import run_subcommand

    files = sorted(str(p) for p in H200.glob("llama31_70b_*.json"))
    assert len(files) == 5
    assert run_subcommand(model, "model", "llama3.1-70b", *files) == 0
    out = capsys.readouterr().out
    assert "- M=1: fastest of the 13 schemes with a complete step (4 without) fp8-weight-only+compiled:" in out


def test_allow_incomplete_turns_the_warning_into_a_note(capsys):
    """Runs cut off, merged with the runs that completed them and still missing two schemes
    (``"complete": false``): without the flag each such file is a warning on stderr; with it, stderr is
    empty and a note under the table names each one."""
    files = [str(H200 / f"llama31_70b_{s}.json") for s in ("q_o", "k_v", "gate_up", "down", "lm_head")]
    assert run("llama3.1-70b", *files) == 0
    err = capsys.readouterr().err
    assert err.count("is incomplete") == 2
    assert run("llama3.1-70b", *files, "--allow-incomplete", "--wide") == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    cap = capsys.readouterr()
    assert cap.err == ""
    notes = [line for line in cap.out.splitlines() if line.startswith("note: ") and "incomplete" in line]
    assert len(notes) == 2 and all("read with --allow-incomplete" in n for n in notes)
    assert notes[0].startswith(f"note: {files[3]}: incomplete (\"complete\": false, 45 rows)")


def test_allow_incomplete_keeps_the_warning_where_csv_has_no_place_for_a_note(capsys):
    files = [str(H200 / f"llama31_70b_{s}.json") for s in ("q_o", "k_v", "gate_up", "down", "lm_head")]
    assert run("llama3.1-70b", *files, "--format", "csv", "--allow-incomplete") == 0
    assert capsys.readouterr().err.count("is incomplete") == 2
    assert run("llama3.1-70b", *files, "--format", "json", "--allow-incomplete") == 0
    cap = capsys.readouterr()
    assert cap.err == "" and sum("read with --allow-incomplete" in n for n in json.loads(cap.out)["notes"]) == 2


def test_files_of_different_machines_are_warned_about(tmp_path, capsys):
    """Issue 24: one device label ("cpu AMD EPYC") can hide another instruction set; qbench model
    names every difference machine_differences finds, on stderr."""
    from qbench.readers.common import warn_machine_differences
    from qbench.results import ResultDoc

    def doc(flags, cpus):
        return ResultDoc.of({"schema_version": 2, "rows": [], "env": {
            "device": "cpu", "device_name": "AMD EPYC", "cpu_count": cpus,
            "cpu_info": {"model_name": "AMD EPYC", "flags": flags, "capability": "AVX2"}}})

    got = warn_machine_differences(["a.json", "b.json", "c.json"],
                                   [doc(["avx2"], 8), doc(["avx2"], 8), doc(["avx2", "avx512f"], 16)])
    assert got == ["warning: a.json (A) and c.json (B) may come from different machines: CPU instruction set: only "
                   "B has avx512f (bf16, int8 and bitsandbytes CPU kernels depend on these)",
                   "warning: a.json (A) and c.json (B) may come from different machines: CPU count: 8 (A) vs 16 (B)"]
    assert capsys.readouterr().err == "\n".join(got) + "\n"


def test_llama31_8b_takes_llama3_8b_shapes_and_says_which_answer_to_act_on(capsys):
    """The newcomer's friction: the layer view named no llama3.1-8b (the step job's model, the same
    linear shapes as Llama-3-8B), showed its errors without the synthetic-weights warning that
    recommend prints for the same files, and never said which of the three answers decides."""
    assert run("llama3.1-8b", *LLAMA3_8B_FILES, "--wide") == 0
    out = capsys.readouterr().out
    assert out.startswith("Llama-3.1-8B (llama3.1-8b): 32 blocks")
    assert out.count("warning: errors come from a synthetic weight") == 1
    assert out.count(model_mod.ACT_ON) == 1 and "the measured step decides a model" in model_mod.ACT_ON
    assert run("llama3.1-8b", *LLAMA3_8B_FILES, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["warnings"][0].startswith("warning: errors come from a synthetic weight")


def test_a_baseline_typo_is_refused(capsys):
    assert run("llama3-8b", *LLAMA3_8B_FILES, "--baseline", "bf-16") == 2
    err = capsys.readouterr().err
    assert "--baseline 'bf-16' is not a scheme of these files; schemes: bf16" in err and err.count("\n") == 1
