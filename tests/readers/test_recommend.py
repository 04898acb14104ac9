"""Tests for qbench recommend (qbench.readers.recommend): picks per M at two budgets, reasons, Pareto front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qbench.readers import recommend as rec_mod
from qbench.judge import pareto_front
from qbench.readers.recommend import recommend
from qbench.results import ResultDoc, read_results
from qbench.row import flag_record, reason_record
from tests.conftest import run_subcommand
from tests.rows import make_row, typed_row

FIXTURES = Path(__file__).parents[1] / "fixtures"
CUDA = read_results(FIXTURES / "cuda_run1.json")
CPU = read_results(FIXTURES / "cpu.json")


def run(*argv):
    return run_subcommand(rec_mod, "recommend", *argv)


def _picks(result):
    return {g["m"]: g["pick"]["scheme"] if g["pick"] else None for g in result["by_m"]}


def _reasons(result, m):
    g = next(g for g in result["by_m"] if g["m"] == m)
    return {o["scheme"]: o["reason"] for o in g["others"]}


def test_budget_001():
    r = recommend(CUDA, 0.01, "cold")
    # M = 1: fp16 (11.2 µs, rel_fro 0.00029) and bf16 (11.0 µs, 0.0023) are the same speed within
    # noise, so the lower error wins (issue 13): fp16, with bf16 named as tied
    assert _picks(r) == {1: "fp16", 16: "w8a8-dynamic", 512: "w8a8-dynamic"}
    why = _reasons(r, 1)
    assert why["int8-weight-only"] == "slower: 23.1 µs vs 11.2 µs (2.06×)"
    assert why["nf4-bnb"] == "over error budget (rel_fro 0.092 > 0.01)"
    assert why["fp8-dynamic"] == "over error budget (rel_fro 0.035 > 0.01)"
    assert why["w8a8-dynamic"].startswith("failed: RuntimeError")
    assert why["int4-weight-only"].startswith("skipped: torchao Int4WeightOnlyConfig")
    # fp16's [10.96, 11.83] µs overlaps bf16's p10-p90: a tie, named on the pick
    assert why["bf16"] == ("same speed within noise, higher error (rel_fro 0.0023 vs 0.00029): "
                           "11.0 µs vs 11.2 µs (0.98×, p10–p90 overlap)")
    assert r["by_m"][0]["pick"]["ties"] == ["bf16"]
    assert _reasons(r, 512)["fp16"] == "non-finite outputs (12)"
    # every scheme at every M is either the pick or has a reason
    for g in r["by_m"]:
        assert len(g["others"]) + 1 == 9


def test_budget_01():
    r = recommend(CUDA, 0.1, "cold")
    # M = 16: w8a8-dynamic (8.90 µs, rel_fro 0.0087) ties fp8-dynamic (8.40 µs, 0.035); fp8-dynamic, the
    # pick at M = 1, is one of the tied, so it is kept (the neighbour rule comes before the lower error)
    assert _picks(r) == {1: "fp8-dynamic", 16: "fp8-dynamic", 512: "fp8-dynamic"}
    assert r["by_m"][1]["pick"]["kept_from_m"] == 1 and r["by_m"][1]["pick"]["ties"] == ["w8a8-dynamic"]
    assert _reasons(r, 16)["w8a8-dynamic"] == ("same speed within noise, fp8-dynamic kept from M=1: "
                                               "8.90 µs vs 8.40 µs (1.06×, p10–p90 overlap)")
    assert _reasons(r, 1)["nf4-bnb"] == "slower: 14.2 µs vs 8.10 µs (1.75×)"


def test_tie_only_when_spreads_overlap():
    """A 2 % median gap is a tie when the p10-p90 intervals overlap and a ranking when they do
    not; the rendered pick line names the tie."""
    def row(scheme, med, p10, p90):
        return make_row(scheme=scheme, m=1, k=8, n=8, status="ok", stored_bytes=128,
                        latency_us={"stream": {"median": med, "p10": p10, "p90": p90}},
                        error={"rel_fro": 1e-3, "nonfinite": 0})
    wide = recommend({"rows": [row("a", 10.0, 9.5, 10.5), row("b", 10.2, 9.9, 10.6)]}, 0.01)
    (g,) = wide["by_m"]
    assert g["pick"]["scheme"] == "a" and g["pick"]["ties"] == ["b"]
    assert g["others"][0]["reason"].startswith("same speed within noise: 10.2 µs vs 10.0 µs")
    assert "use a (10.0 µs, rel_fro 0.001); as fast within noise: b" in rec_mod.render_recommendation(wide)
    tight = recommend({"rows": [row("a", 10.0, 9.95, 10.05), row("b", 10.2, 10.15, 10.25)]}, 0.01)
    (g,) = tight["by_m"]
    assert g["pick"]["ties"] == [] and g["others"][0]["reason"] == "slower: 10.2 µs vs 10.0 µs (1.02×)"
    assert "_stats" not in g["pick"] and all("_stats" not in p for p in g["pareto"])


def test_tiny_budget_leaves_only_fp32():
    assert _picks(recommend(CUDA, 1e-6, "cold")) == {1: "fp32", 16: "fp32", 512: "fp32"}
    assert _picks(recommend(CUDA, 1e-9, "cold")) == {1: None, 16: None, 512: None}


def test_nonfinite_row_is_never_picked_even_when_fastest():
    doc = CUDA.model_copy(deep=True)
    row = next(r for r in doc.rows if r.scheme == "fp16" and r.m == 512)
    row.latency_us["cold"].median = 1.0
    row.error.rel_fro = 1e-4  # a runner that measured rel_fro over finite entries only
    r = recommend(doc, 0.01, "cold")
    assert _picks(r)[512] == "w8a8-dynamic"
    assert _reasons(r, 512)["fp16"] == "non-finite outputs (12)"
    g512 = next(g for g in r["by_m"] if g["m"] == 512)
    assert "fp16" not in {p["scheme"] for p in g512["pareto"]}


def test_pareto_front_on_fixture_m1():
    g1 = recommend(CUDA, 0.01, "cold")["by_m"][0]
    front = {p["scheme"] for p in g1["pareto"]}
    # tf32 (19.5 µs, 4.6e-4, 64 MiB) is dominated by fp16 (11.2 µs, 2.9e-4, 32 MiB)
    assert front == {"fp8-dynamic", "bf16", "fp16", "nf4-bnb", "fp32", "int8-weight-only"}


def test_pareto_front_handmade():
    pts = [
        {"name": "a", "latency_us": 1, "rel_fro": 0.1, "stored_bytes": 4},
        {"name": "b", "latency_us": 2, "rel_fro": 0.01, "stored_bytes": 8},
        {"name": "c", "latency_us": 3, "rel_fro": 0.01, "stored_bytes": 8},   # dominated by b
        {"name": "d", "latency_us": 3, "rel_fro": 0.001, "stored_bytes": 16},
        {"name": "e", "latency_us": 5, "rel_fro": 0.5, "stored_bytes": 1},    # smallest
        {"name": "f", "latency_us": 1, "rel_fro": 0.1, "stored_bytes": 4},    # equal to a: kept
        {"name": "g", "latency_us": 6, "rel_fro": 0.5, "stored_bytes": 2},    # dominated by e
        {"name": "h", "latency_us": None, "rel_fro": 0.0, "stored_bytes": 0},  # not measured
    ]
    assert [p["name"] for p in pareto_front(pts)] == ["a", "b", "d", "e", "f"]
    assert [p["name"] for p in pareto_front(pts, ("latency_us", "rel_fro"))] == ["a", "b", "d", "f"]
    assert pareto_front([]) == []


def test_cpu_fallback_only_without_explicit_method(capsys):
    assert run(str(FIXTURES / "cpu.json"), "--max-rel-err", "0.01") == 0
    out = capsys.readouterr().out
    assert "cpu median" in out and "no stream latency in this file" in out
    assert "use fp32" in out
    assert run(str(FIXTURES / "cpu.json"), "--max-rel-err", "0.01", "--method", "cold") == 1
    out = capsys.readouterr().out
    assert "WARNING: no row has cold latency" in out and "no cold latency" in out
    r = recommend(CPU, 0.01, "cold")
    assert set(_reasons(r, 1).values()) >= {"no cold latency"}


def test_cli_json_and_text(capsys):
    assert run(str(FIXTURES / "cuda_run1.json"), "--max-rel-err", "0.01", "--format", "json") == 0
    r = json.loads(capsys.readouterr().out)
    assert _picks(r) == {1: "fp16", 16: "w8a8-dynamic", 512: "w8a8-dynamic"}
    assert run(str(FIXTURES / "cuda_run1.json"), "--max-rel-err", "0.1") == 0
    out = capsys.readouterr().out
    assert "M=1 (K=4096, N=4096): use fp8-dynamic" in out and "Pareto front" in out


@pytest.mark.parametrize("argv", [["--format", "csv"], ["--max-rel-err", "-1"]])
def test_bad_input_exit_2(argv, capsys):
    args = ["--max-rel-err", "0.01", *argv] if "--max-rel-err" not in argv else argv
    assert run(str(FIXTURES / "cuda_run1.json"), *args) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_schema_99_exit_2(capsys):
    assert run(str(FIXTURES / "schema_v99.json"), "--max-rel-err", "0.01") == 2


# ---- --summary and several files ----------------------------------------------------------------

def test_summary_rows_hand_checked():
    """One row per M: the pick at 0.01 on the fixture and its speed-up over bf16 at the same shape."""
    rows = rec_mod.summary_rows(CUDA, recommend(CUDA, 0.01, "cold"), "bf16")
    assert [r["m"] for r in rows] == [1, 16, 512]
    r1 = rows[0]
    # fp16 ties bf16 with the lower error: picked, speed-up 11.0 / 11.2 over bf16 (slower median, same within noise)
    assert r1["pick"] == "fp16" and r1["speedup"] == pytest.approx(11.0 / 11.2) and r1["ties"] == ["bf16"]
    r16 = rows[1]
    # the fixture's cold medians at M = 16 (tests/fixtures/make_fixtures.py): bf16 11.4 µs, w8a8-dynamic 8.9 µs
    assert r16["pick"] == "w8a8-dynamic" and r16["latency_us"] == 8.9 and r16["baseline_us"] == 11.4
    assert r16["speedup"] == pytest.approx(11.4 / 8.9, rel=1e-12)
    # a baseline that is not in the file leaves the column empty instead of failing
    assert all(r["baseline_us"] is None and r["speedup"] is None
               for r in rec_mod.summary_rows(CUDA, recommend(CUDA, 0.01, "cold"), "fp64"))


def test_cli_summary_over_two_files(capsys, tmp_path):
    a = FIXTURES / "cuda_run1.json"
    b = FIXTURES / "cuda_run2_noise.json"
    assert run(str(a), str(b), "--max-rel-err", "0.01", "--summary", "--format", "github") == 0
    out = capsys.readouterr().out
    assert out.count("| w8a8-dynamic") >= 2 and "vs bf16" in out and "as fast within noise" in out
    assert run(str(a), str(b), "--max-rel-err", "0.01", "--summary", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    # two runs of one scenario on one machine are one result (issue 24): one row per M, and how often it won
    assert [(r["m"], r["pick"], r["stability"]) for r in rows] == [
        (1, "fp16", "picked in 2 of 2 runs"), (16, "w8a8-dynamic", "picked in 2 of 2 runs"),
        (512, "w8a8-dynamic", "picked in 2 of 2 runs")]
    assert {r["file"] for r in rows} == {f"{a} + {b}"}


def test_cli_two_files_without_summary_names_each(capsys):
    a, b = FIXTURES / "cuda_run1.json", FIXTURES / "cuda_run2_noise.json"
    assert run(str(a), str(b), "--max-rel-err", "0.01", "--wide") == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    out = capsys.readouterr().out
    assert out.startswith("budget rel_fro <= 0.01") and out.count("Pareto front") == 3  # one result
    assert out.splitlines()[1].startswith(f"warning: {a} + {b}: errors come from a synthetic weight")
    assert "M=1 (K=4096, N=4096): use fp16 (11.2 µs, rel_fro 0.00029); as fast within noise: bf16; picked in 2 of 2 runs" in out
    assert run(str(a), str(FIXTURES / "cpu.json"), "--max-rel-err", "0.01") == 0  # two scenarios: two results
    out = capsys.readouterr().out
    assert f"== {a}" in out and f"== {FIXTURES / 'cpu.json'}" in out


def test_cli_summary_mixed_methods_is_bad_input(capsys):
    assert run(str(FIXTURES / "cuda_run1.json"), str(FIXTURES / "cpu.json"),
               "--max-rel-err", "0.01", "--summary") == 2
    assert "--summary needs one timing method" in capsys.readouterr().err



def test_cli_two_files_json_is_one_document(capsys):
    a, b = FIXTURES / "cuda_run1.json", FIXTURES / "cpu.json"
    assert run(str(a), str(b), "--max-rel-err", "0.01", "--format", "json") == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["file"] for d in docs] == [str(a), str(b)] and all("by_m" in d for d in docs)
    # two runs of one scenario: one record, naming its files, each pick with how often it won
    assert run(str(a), str(FIXTURES / "cuda_run2_noise.json"), "--max-rel-err", "0.01", "--format", "json") == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["files"] == [str(a), str(FIXTURES / "cuda_run2_noise.json")]
    assert rec["by_m"][0]["pick"]["stability"] == {"runs": 2, "picked": 2, "others": {}}


def test_cli_summary_bad_baseline_and_missing_method_are_bad_input(capsys):
    a = str(FIXTURES / "cuda_run1.json")
    assert run(a, "--max-rel-err", "0.01", "--summary", "--baseline", "nope") == 2
    err = capsys.readouterr().err
    assert a in err and "--baseline 'nope' is not a scheme" in err and err.count("\n") == 1
    assert run(str(FIXTURES / "cpu.json"), "--max-rel-err", "0.01", "--summary", "--method", "cold") == 2
    assert "no row has cold latency; methods in this file: cpu" in capsys.readouterr().err


@pytest.mark.parametrize("view", [[], ["--by-format"]], ids=["picks", "by-format"])
def test_a_baseline_typo_is_refused_in_every_view(capsys, tmp_path, view):
    """A --baseline that names no scheme of the file is one line, exit 2, with or without --summary
    (it was ignored without it); the default bf16 missing from a file refuses nothing."""
    a = str(FIXTURES / "cuda_run1.json")
    assert run(a, "--max-rel-err", "0.01", *view, "--baseline", "bf-16") == 2
    err = capsys.readouterr().err
    assert "--baseline 'bf-16' is not a scheme of this file; schemes: bf16" in err and err.count("\n") == 1
    doc = json.loads(Path(a).read_text())
    doc["rows"] = [r for r in doc["rows"] if r["scheme"] != "bf16"]
    (tmp_path / "no_bf16.json").write_text(json.dumps(doc))
    assert run(str(tmp_path / "no_bf16.json"), "--max-rel-err", "0.01", *view) in (0, 1)
    assert "--baseline" not in capsys.readouterr().err


def test_cli_summary_csv_and_same_scenario_twice(capsys, tmp_path):
    a = str(FIXTURES / "cuda_run1.json")
    assert run(a, a, "--max-rel-err", "0.01", "--summary", "--format", "csv") == 0
    cap = capsys.readouterr()
    out = cap.out.strip().splitlines()
    assert out[0].startswith("scenario,m,k,n,pick,") and len(out) == 1 + 3  # one file named twice: read once
    assert cap.err.startswith("budget rel_fro <= 0.01; latency = ")  # the prose beside a data format: on stderr
    doc = json.loads(Path(a).read_text())
    doc["env"]["device_name"] = "NVIDIA A100-SXM4-80GB"  # the same scenario on another GPU: another result
    other = tmp_path / "a100.json"
    other.write_text(json.dumps(doc))
    assert run(a, str(other), "--max-rel-err", "0.01", "--summary", "--format", "csv") == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 + 6 and out[1].startswith(a + ",1,")  # two files of one scenario are told apart by path
    assert run(a, "--max-rel-err", "0.01", "--format", "csv") == 2
    assert "csv needs --summary" in capsys.readouterr().err


def test_pareto_stored_bytes_within_one_percent_are_equal():
    """4 KiB less metadata on a 16 MiB weight does not keep a slower, less accurate scheme on
    the front (decode on the H200: int8-bnb 138 µs, 16,793,600 B against
    int8-weight-only+compiled 11.2 µs, 16,797,696 B)."""
    fast = {"scheme": "int8-weight-only+compiled", "latency_us": 11.2, "rel_fro": 0.0093, "stored_bytes": 16_797_696}
    slow = {"scheme": "int8-bnb", "latency_us": 138.0, "rel_fro": 0.0121, "stored_bytes": 16_793_600}
    assert [p["scheme"] for p in pareto_front([fast, slow])] == ["int8-weight-only+compiled"]
    # with no tolerance the 4 KiB keep it there
    assert len(pareto_front([fast, slow], rtol={})) == 2
    # a real storage difference (half the bytes) still counts
    half = dict(slow, scheme="int4", stored_bytes=8_912_896)
    assert {p["scheme"] for p in pareto_front([fast, half])} == {"int8-weight-only+compiled", "int4"}


# ---- stream: the decision method ------------------------------------------------------------------

STREAM = read_results(FIXTURES / "cuda_stream.json")
UNUSABLE = "unusable in a graph-captured decode loop"


def test_stream_is_the_default_and_can_pick_otherwise_than_cold():
    """cuda_stream.json at rel_fro <= 0.1, M=1: nf4-bnb streams at 3.90 µs where
    int4-weight-only+compiled takes 4.60; cold (L2 flushed, launch gaps) ranks them the other way
    round (14.6 µs against 10.0)."""
    r = recommend(STREAM, 0.1)
    assert r["method"] == "stream"
    # M = 16: fp16 (9.65 µs, rel_fro 0.00029) ties bf16 (9.60 µs, 0.0023): the lower error wins
    assert _picks(r) == {1: "nf4-bnb", 16: "fp16"}
    assert _reasons(r, 1)["int4-weight-only+compiled"] == "slower: 4.60 µs vs 3.90 µs (1.18×)"
    assert _picks(recommend(STREAM, 0.1, "cold")) == {1: "int4-weight-only+compiled", 16: "fp16"}
    tight = recommend(STREAM, 0.01)
    assert _picks(tight) == {1: "int8-weight-only+compiled", 16: "fp16"}
    assert tight["by_m"][1]["pick"]["ties"] == ["bf16"]
    assert tight["by_m"][0]["pick"]["latency_us"] == 5.2


def test_host_syncing_row_is_named_unusable_with_its_eager_time():
    r = recommend(STREAM, 0.01)
    why = _reasons(r, 1)
    # the cell drops qbench's "not attempted: " (the stream capture was skipped after the warm one
    # failed); the JSON record keeps the whole reason
    assert why["w8a8-dynamic"] == (f"{UNUSABLE} (eager 911 µs): CUDA graph capture failed at M=1: CUDA graph "
                                   "capture failed: AcceleratorError: CUDA error: operation not permitted when "
                                   "stream is capturing")
    assert why["int8-bnb"].startswith(f"{UNUSABLE} (eager 169 µs): CUDA graph capture failed at M=1")
    assert _reasons(r, 16)["w8a8-dynamic"].startswith(f"{UNUSABLE} (eager 1538 µs)")
    unusable = {u["scheme"]: u for u in r["by_m"][0]["unusable"]}
    assert set(unusable) == {"w8a8-dynamic", "int8-bnb"}
    assert unusable["w8a8-dynamic"]["eager_us"] == pytest.approx(911.3)
    assert unusable["w8a8-dynamic"]["reason"].startswith("not attempted: CUDA graph capture failed at M=1")
    # cold times them (launch hidden, host round trip shown): plain slower candidates there
    assert _reasons(recommend(STREAM, 0.01, "cold"), 1)["w8a8-dynamic"].startswith("slower: 513 µs vs 11.2 µs")


def test_unusable_only_for_capture_reasons_on_hand_built_rows():
    """A null stream is 'unusable' only when the reason's kind says the call was not captured; a
    row whose copies did not fit in memory is just 'no stream latency'."""
    def row(scheme, stream, reason=None, eager=None):
        lat = {"stream": None if stream is None else {"median": stream, "p10": stream, "p90": stream},
               "eager": None if eager is None else {"median": eager, "p10": eager, "p90": eager}}
        return make_row(scheme=scheme, m=1, k=4096, n=4096, status="ok", stored_bytes=33554432,
                        latency_us=lat, latency_reasons={"stream": reason_record(*reason)} if reason else {},
                        error={"rel_fro": 1e-3, "nonfinite": 0})
    doc = {"rows": [row("bf16", 9.4),
                    row("int8-bnb", None, ("capture-failed", "CUDA graph capture failed at M=1: "
                                           "cudaErrorStreamCaptureUnsupported"), eager=168.9),
                    row("w8a8-dynamic", None, ("not-attempted", "not attempted: CUDA graph capture failed at M=1: "
                                               "host sync")),
                    row("fp32", None, ("copies", "stream needs 4 copies of 67108864 B; only 2 fit in 50% of the "
                                       "201326592 B free")),
                    row("fp16", None, ("not-timed", "tensor-parallel rows do not time stream yet (graph-captured "
                                       "call + collective)"))]}
    r = recommend(doc, 0.01)
    why = _reasons(r, 1)
    assert _picks(r) == {1: "bf16"}
    assert why["int8-bnb"] == f"{UNUSABLE} (eager 169 µs): CUDA graph capture failed at M=1: cudaErrorStreamCaptureUnsupported"
    assert why["w8a8-dynamic"] == f"{UNUSABLE} (no eager time): CUDA graph capture failed at M=1: host sync"
    assert why["fp32"].startswith("no stream latency (stream needs 4 copies")
    assert why["fp16"].startswith("no stream latency (tensor-parallel rows do not time stream yet")
    assert [u["scheme"] for u in r["by_m"][0]["unusable"]] == ["int8-bnb", "w8a8-dynamic"]


def test_cli_default_is_stream_and_says_so(capsys):
    assert run(str(FIXTURES / "cuda_stream.json"), "--max-rel-err", "0.01") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "budget rel_fro <= 0.01; latency = stream median"
    assert "M=1 (K=4096, N=4096): use int8-weight-only+compiled (5.20 µs, rel_fro 0.0093)" in out
    assert f"w8a8-dynamic               {UNUSABLE} (eager 911 µs)" in out
    assert "stream µs" in out  # the Pareto table's header


def test_cli_method_cold_still_works(capsys):
    assert run(str(FIXTURES / "cuda_stream.json"), "--max-rel-err", "0.1", "--method", "cold") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "budget rel_fro <= 0.1; latency = cold median"
    assert "M=1 (K=4096, N=4096): use int4-weight-only+compiled (10.0 µs" in out and UNUSABLE not in out


def test_cli_file_without_stream_falls_back_to_cold_with_a_note(capsys):
    assert run(str(FIXTURES / "cuda_run1.json"), "--max-rel-err", "0.01", "--wide") == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("budget rel_fro <= 0.01; latency = cold median (no stream latency in this file: an older "
                     "result, or stream not timed; using cold times)")
    assert run(str(FIXTURES / "cuda_run1.json"), "--max-rel-err", "0.01", "--method", "stream") == 1
    assert "WARNING: no row has stream latency; methods in this file: cold, warm, eager, kernel" in capsys.readouterr().out


def test_cpu_result_with_stream_reads_stream(capsys):
    assert run(str(FIXTURES / "cpu_stream.json"), "--max-rel-err", "0.01") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "budget rel_fro <= 0.01; latency = stream median"
    # cpu (one cache-hot weight) would pick fp32 at 60.9 µs; streamed from DRAM bf16 wins
    assert "M=1 (K=1024, N=1024): use bf16 (122 µs" in out


def test_summary_names_the_unusable_schemes(capsys):
    a = str(FIXTURES / "cuda_stream.json")
    assert run(a, "--max-rel-err", "0.01", "--summary", "--wide") == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    out = capsys.readouterr().out
    assert out.startswith("budget rel_fro <= 0.01; latency = stream median; the pick")
    assert out.rstrip().splitlines()[-1] == (
        f"{UNUSABLE} (no stream time: the call cannot be captured in a CUDA graph, e.g. a host sync): "
        "w8a8-dynamic (M=1,16), int8-bnb (M=1,16)")
    assert run(a, "--max-rel-err", "0.01", "--summary", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["unusable"] for r in rows] == [["w8a8-dynamic", "int8-bnb"]] * 2
    assert rows[0]["speedup"] == pytest.approx(9.40 / 5.20)
    # an old file's summary says it fell back
    assert run(str(FIXTURES / "cuda_run1.json"), "--max-rel-err", "0.01", "--summary") == 0
    assert "latency = cold median (no stream latency in this file" in capsys.readouterr().out


def test_long_capture_reason_is_shortened_in_the_cell_only():
    long = ("not attempted: CUDA graph capture failed at M=1: CUDA graph capture failed: AcceleratorError: CUDA "
            "error: operation not permitted when stream is capturing (then AcceleratorError: CUDA error: "
            "operation failed due to a previous error during capture)")
    row = {"scheme": "int8-bnb", "m": 1, "k": 8, "n": 8, "status": "ok", "stored_bytes": 128,
           "latency_us": {"stream": None, "eager": {"median": 175.0}}, "latency_reasons": {"stream": long},
           "error": {"rel_fro": 1e-3, "nonfinite": 0}}
    (g,) = recommend({"schema_version": 1, "rows": [row]}, 0.01)["by_m"]  # a schema 1 file's reason
    assert g["others"][0]["reason"] == (f"{UNUSABLE} (eager 175 µs): CUDA graph capture failed at M=1: CUDA graph "
                                        "capture failed: AcceleratorError: CUDA error: operation not permitted when "
                                        "stream is capturing")
    assert g["unusable"][0]["reason"] == long
    row["latency_reasons"]["stream"] = "CUDA graph capture failed: " + "x" * 300
    (g,) = recommend({"schema_version": 1, "rows": [row]}, 0.01)["by_m"]
    assert g["others"][0]["reason"].endswith("x…") and len(g["others"][0]["reason"]) < 220


# ---- --by-format ---------------------------------------------------------------------------------

_MSLK = "_ZN12cutlass_mslk13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE"
_CAPTURE = ("not attempted: CUDA graph capture failed at M=1: CUDA graph capture failed: AcceleratorError: "
            "CUDA error: operation not permitted when stream is capturing")


def _fmt_row(scheme, weight_dtype, library, us, kernels=(), m=1, rel=0.01, spread=0.01, stream_reason=None,
             status="ok"):
    """A row with the keys of results/h200/decode.json: ``stream`` median ``us`` ± ``spread`` (p10/p90)."""
    return {"scheme": scheme, "base_scheme": scheme.split("+")[0].split("[")[0], "library": library,
            "mode": "compiled" if "+compiled" in scheme else "eager", "m": m, "k": 4096, "n": 4096,
            "weight_dtype": weight_dtype, "status": status, "reason": None if status == "ok" else "no kernel",
            "stored_bytes": 16793600,
            "latency_us": {"stream": None if us is None else
                           {"median": us, "p10": us * (1 - spread), "p90": us * (1 + spread)},
                           "eager": {"median": 200.0, "p10": 190.0, "p90": 210.0}},
            "latency_reasons": {} if stream_reason is None else {"stream": stream_reason},
            "error": {"rel_fro": rel, "nonfinite": 0},
            "dispatch": {"label": "fused-quantized", "host_sync": stream_reason is not None,
                         "graph_capturable": stream_reason is None,
                         "kernels": [{"name": name, "count": 1.0, "us": k_us, "kind": kind}
                                     for name, k_us, kind in kernels]}}


FORMAT_DOC = {"schema_version": 1, "scenario": {"name": "hand"}, "rows": [
    _fmt_row("bf16", "bfloat16", "torch", 13.5, [("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT", 10.7, "kernel"),
                                                  ("void cublasLt::splitKreduce_kernel<32, 16>(float*)", 1.7, "kernel")],
             rel=0.0029),
    _fmt_row("fp16", "float16", "torch", 13.9, rel=0.00036),
    _fmt_row("fp8-weight-only+compiled", "float8_e4m3fn", "torchao", 8.0,
             [("triton_red_fused__to_copy_mm_mul_t_0", 8.3, "kernel")], rel=0.027),
    _fmt_row("fp8-dynamic[kernel_preference=mslk]", "float8_e4m3fn", "torchao", 10.0,
             [("_kernel_quantize_fp8_row", 2.4, "kernel"), (_MSLK, 7.1, "kernel")], rel=0.038),
    _fmt_row("fp8-dynamic", "float8_e4m3fn", "torchao", 28.0, rel=0.038),
    _fmt_row("int8-weight-only+compiled", "int8", "torchao", 9.0, rel=0.0093),
    _fmt_row("int8-bnb", "int8", "bitsandbytes", None, stream_reason=_CAPTURE),
    _fmt_row("w8a8-dynamic", "int8", "torchao", None, stream_reason=_CAPTURE),
    _fmt_row("int4-weight-only", "int4 (tinygemm packed int32)", "torchao", 8.0,
             [("Memcpy DtoD (Device -> Device)", 9.9, "memcpy"),
              ("void at::native::tinygemm_m16n8k16_chunk_kernel<256, 1, 8, 8, 4, 8>(const unsigned char*)", 6.7, "kernel")],
             rel=0.1),
    _fmt_row("int4-intx", "int4 (in int8)", "torchao", 160.0, rel=0.11),
    _fmt_row("nf4-bnb", "nf4 (2 per uint8)", "bitsandbytes", 10.8, rel=0.093, spread=0.02),
    _fmt_row("fp4-bnb", "fp4 (2 per uint8)", "bitsandbytes", 10.9, rel=0.12, spread=0.02),
    _fmt_row("fp32", "float32", "torch", 23.0, rel=1e-7),
    _fmt_row("tf32", "float32", "torch", None, status="skipped"),
]}


def _by_fmt(records):
    return {r["format"]: r for r in records}


def test_by_format_hand_checked():
    recs = rec_mod.by_format(FORMAT_DOC)
    assert [r["format"] for r in recs] == ["8-bit float", "8-bit int", "4-bit int", "4-bit float",
                                          "16-bit float", "32-bit float"]
    f = _by_fmt(recs)
    fp8 = f["8-bit float"]
    assert (fp8["pick"], fp8["library"], fp8["kernel"]) == (
        "fp8-weight-only+compiled", "torchao", "triton_red_fused__to_copy_mm_mul_t_0")
    assert fp8["latency_us"] == 8.0 and fp8["speedup"] == pytest.approx(13.5 / 8.0)
    assert [(o["scheme"], round(o["ratio"], 4), o["tie"]) for o in fp8["others"]] == [
        ("fp8-dynamic[kernel_preference=mslk]", 1.25, False), ("fp8-dynamic", 3.5, False)]
    i8 = f["8-bit int"]
    assert i8["pick"] == "int8-weight-only+compiled" and i8["speedup"] == pytest.approx(1.5)
    assert [(o["scheme"], o["reason"]) for o in i8["others"]] == [
        ("int8-bnb", "unusable in a graph-captured decode loop"),
        ("w8a8-dynamic", "unusable in a graph-captured decode loop")]
    i4 = f["4-bit int"]
    # the longest kernel, not the longest item: the DtoD copy is not a kernel
    assert i4["pick"] == "int4-weight-only" and i4["kernel"] == "tinygemm_m16n8k16_chunk_kernel<256, 1, 8, 8, 4, 8>"
    assert i4["others"][0]["ratio"] == pytest.approx(20.0)
    f4 = f["4-bit float"]  # NF4 and FP4: p10–p90 overlap, a tie
    assert f4["pick"] == "nf4-bnb" and f4["others"][0]["tie"] is True
    assert f4["others"][0]["ratio"] == pytest.approx(10.9 / 10.8)
    assert f["16-bit float"]["pick"] == "bf16" and f["16-bit float"]["kernel"].startswith("nvjet_sm90_tst")
    f32 = f["32-bit float"]
    assert f32["pick"] == "fp32" and f32["others"] == [
        {"scheme": "tf32", "ratio": None, "tie": False, "reason": "skipped"}]
    assert f32["speedup"] == pytest.approx(13.5 / 23.0)
    # a budget leaves the schemes over it out of the ranking, with the reason
    within = _by_fmt(rec_mod.by_format(FORMAT_DOC, max_rel_err=0.1))
    assert within["4-bit int"]["pick"] == "int4-weight-only"
    assert within["4-bit int"]["others"][0]["reason"] == "over error budget (rel_fro 0.11 > 0.1)"
    tight = _by_fmt(rec_mod.by_format(FORMAT_DOC, max_rel_err=0.02))
    assert tight["8-bit float"]["pick"] is None
    assert tight["8-bit float"]["others"][0]["reason"] == "over error budget (rel_fro 0.027 > 0.02)"
    mslk = ResultDoc.of(FORMAT_DOC).rows[3]
    assert rec_mod.main_kernel(mslk) == "cutlass_mslk::device_kernel<gemm::kernel::GemmUniversal>"


def test_by_format_reads_the_registry_then_the_row():
    def row(scheme, base, **fields):
        return typed_row(scheme=scheme, base_scheme=base, m=1, k=8, n=8, status="ok", **fields)

    fmt = rec_mod.row_storage_format
    assert fmt(row("fp8-dynamic[kernel_preference=mslk]", "fp8-dynamic", weight_dtype="float8_e4m3fn")) == "8-bit float"
    # a scheme this qbench does not know: the row's weight_dtype says it
    assert fmt(row("gemlite-int4", "gemlite-int4", weight_dtype="int4 (gemlite)")) == "4-bit int"
    # a file without weight_dtype: the registry's scheme
    assert fmt(row("nf4-bnb", "nf4-bnb")) == "4-bit float"


def test_cli_by_format(capsys, tmp_path):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(FORMAT_DOC))
    assert run(str(path), "--by-format", "--wide") == 0  # no --max-rel-err needed; --wide: each cell one line
    out = capsys.readouterr().out
    assert "fp8-dynamic[kernel_preference=mslk] 1.25×, fp8-dynamic 3.50×" in out
    assert "int8-bnb, w8a8-dynamic: unusable in a graph-captured decode loop" in out
    assert "fp4-bnb 1.01× (tie)" in out
    assert run(str(path), "--by-format", "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "m,format,pick,library,kernel,latency_us,rel_fro,speedup,others" and len(lines) == 7
    assert run(str(path), str(path), "--by-format", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 12 and rows[0]["scenario"] == str(path)  # one scenario twice: named by path
    assert run(str(path), "--by-format", "--summary") == 2
    assert run(str(path)) == 2  # --max-rel-err is required without --by-format
    assert "--max-rel-err is required" in capsys.readouterr().err


def test_cli_by_format_on_the_h200_sweep(capsys):
    sweep = Path(__file__).resolve().parents[2] / "results" / "h200" / "sweep.json"
    assert run(str(sweep), "--by-format", "--format", "json") == 0
    recs = json.loads(capsys.readouterr().out)
    assert {r["m"] for r in recs} == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
    at1 = {r["format"]: r["pick"] for r in recs if r["m"] == 1}
    assert at1["4-bit int"] == "int4-weight-only+compiled" and at1["16-bit float"] == "bf16"


def test_the_pick_and_the_others_name_their_flags_and_noise():
    """A pick timed while other work kept the CPU busy, and a loser with a noisy reading: both say so
    next to their numbers (a new user's report: recommend was silent about them)."""
    from qbench.readers.recommend import recommend, render_recommendation
    from tests.rows import make_row, stats

    def row(scheme, us, cv, flags, rel):
        return make_row(scheme=scheme, m=1, k=256, n=128, device="cpu", status="ok", stored_bytes=1000,
                        latency_us={"stream": dict(stats(us, us * 0.99, us * 1.01), cv=cv)}, flags=flags,
                        error={"rel_fro": rel})

    busy = [flag_record("cpu-busy", "1.2 cores busy with other work")]
    doc = {"rows": [row("int8-weight-only+compiled", 600.0, 0.05, busy, 0.009),
                    row("bf16", 1500.0, 0.98, [], 0.003)]}
    result = recommend(doc, 0.01, "stream")
    pick = result["by_m"][0]["pick"]
    assert pick["scheme"] == "int8-weight-only+compiled" and pick["caveats"] == ["cpu-busy"]
    text = render_recommendation(result, "simple")
    assert "use int8-weight-only+compiled (600 µs, rel_fro 0.009) [cpu-busy]" in text
    assert "slower: 1500 µs vs 600 µs (2.50×; bf16: noisy (cv 0.98))" in text


# ---- issue 24: a pick that holds across runs; weights said; input faults --------------------------

def _layer_row(scheme, median, p10, p90, rel=0.005, **extra):
    from tests.rows import make_row, stats

    return make_row(scheme=scheme, m=1, k=256, n=128, device="cuda:0", status="ok", error={"rel_fro": rel},
                    latency_us={"stream": stats(median, p10, p90)}, stored_bytes=256 * 128, **extra)


def _repeats(medians):
    return {"runs": len(medians), "ok_runs": len(medians), "medians": {"stream": medians},
            "spread": {"stream": (max(medians) - min(medians)) / sorted(medians)[len(medians) // 2]}}


def test_between_run_spread_makes_two_schemes_tie():
    """a: 10.0 µs with p10-p90 9.9-10.1 in its first run, but its three runs read 10, 12 and 11 µs;
    b: 11.5 µs, p10-p90 11.4-11.6, runs 11.5, 11.5, 11.5. Within one run they do not overlap (a is
    faster); across runs a spans 10-12, which holds b's 11.5: a tie, and the lower error wins."""
    from qbench.readers.recommend import recommend

    def doc(with_repeats):
        extra_a = {"repeats": _repeats([10.0, 12.0, 11.0])} if with_repeats else {}
        extra_b = {"repeats": _repeats([11.5, 11.5, 11.5])} if with_repeats else {}
        return {"schema_version": 2, "rows": [_layer_row("a", 10.0, 9.9, 10.1, rel=0.008, **extra_a),
                                              _layer_row("b", 11.5, 11.4, 11.6, rel=0.002, **extra_b)]}

    alone = recommend(doc(False), 0.01, "stream")["by_m"][0]
    assert alone["pick"]["scheme"] == "a" and alone["pick"]["ties"] == []
    assert alone["others"] == [{"scheme": "b", "reason": "slower: 11.5 µs vs 10.0 µs (1.15×)"}]
    g = recommend(doc(True), 0.01, "stream")["by_m"][0]
    assert g["pick"]["scheme"] == "b" and g["pick"]["ties"] == ["a"]  # tied: the lower error (0.002) wins
    # the band named is a's between-run spread, (12 - 10) / 11 = 18 %
    assert g["others"] == [{"scheme": "a", "reason": "same speed within noise (between-run spread 18%), higher error "
                                                     "(rel_fro 0.008 vs 0.002): 10.0 µs vs 11.5 µs (0.87×, runs' "
                                                     "medians overlap)"}]


def test_pick_stability_of_rows_with_repeats(capsys, tmp_path):
    """One file of `qbench run --repeat 3`: each run's pick is counted (a won 2 of its 3 runs)."""
    rows = [_layer_row("a", 10.0, 9.9, 10.1, repeats=_repeats([10.0, 10.1, 14.0])),
            _layer_row("b", 12.0, 11.9, 12.1, repeats=_repeats([12.0, 12.0, 12.0]))]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": 2, "complete": True, "scenario": {"name": "s"},
                                "env": {"device": "cuda:0", "device_name": "NVIDIA H200"}, "rows": rows}))
    assert run(str(path), "--max-rel-err", "0.01") == 0
    out = capsys.readouterr().out
    assert "M=1 (K=256, N=128): use a (10.0 µs, rel_fro 0.005); as fast within noise: b; picked in 2 of 3 runs (b in 1)" \
        in out


def test_pick_stability_over_committed_h200_decode_runs(capsys):
    """The current H200 decode file holds three independent runs of each scheme on one tree
    (``qbench run --repeat 3``, 2026-12-02): the gemlite int8 kernel won two of them, the compiled
    int8 weight-only layer one, and the between-run spread (42 %) makes the two a tie."""
    root = Path(__file__).resolve().parents[2] / "results" / "h200"
    assert run(str(root / "decode.json"), "--max-rel-err", "0.01", "--wide") == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    out, err = capsys.readouterr()
    assert out.startswith("budget rel_fro <= 0.01; latency = stream median\n") and err == ""
    assert ("\nM=1 (K=4096, N=4096): use int8-weight-only-gemlite (8.78 µs, rel_fro 0.00915); as fast within noise: "
            "int8-weight-only+compiled; picked in 2 of 3 runs (int8-weight-only+compiled in 1)\n") in out
    assert ("int8-weight-only+compiled            same speed within noise (between-run spread 42%), higher error "
            "(rel_fro 0.00934 vs 0.00915)") in out


def test_pick_stability_over_committed_h200_decode_files_of_three_days(capsys):
    """Files of one scenario from three days read as one result: 11-29 (no stream time: not a run
    of the stream pick), 11-30 (no gemlite: int8-weight-only+compiled wins) and the current file's
    three runs."""
    root = Path(__file__).resolve().parents[2]
    real = root / "tests" / "fixtures" / "real"
    files = [str(real / "h200_decode_2026-11-29.json"), str(real / "h200_decode_2026-11-30.json"),
             str(root / "results" / "h200" / "decode.json")]
    assert run(*files, "--max-rel-err", "0.01") == 0
    out, err = capsys.readouterr()
    assert err == "" and "picked in 2 of 4 runs (int8-weight-only+compiled in 2)" in out


def test_input_fault_rows_are_the_inputs_fault_and_a_real_weight_has_no_warning(capsys, tmp_path):
    from qbench.readers.recommend import recommend
    from qbench.row import flag_record

    fault = flag_record("input-fault", "the weight has 3 non-finite entries (3 NaN, 0 Inf)")
    real = "safetensors layer.safetensors:model.layers.0.mlp.down_proj.weight"
    rows = [_layer_row("a", 10.0, 9.9, 10.1, flags=[fault], weight_source=real),
            _layer_row("b", 12.0, 11.9, 12.1, flags=[fault], weight_source=real)]
    doc = {"schema_version": 2, "complete": True, "scenario": {"name": "s"},
           "env": {"device": "cuda:0", "device_name": "NVIDIA H200"}, "rows": rows}
    g = recommend(doc, 0.01, "stream")["by_m"][0]
    assert g["pick"] is None
    assert g["others"][0] == {"scheme": "a", "reason": "the input's fault, not the scheme's (input-fault): the weight "
                                                       "has 3 non-finite entries (3 NaN, 0 Inf)"}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(doc))
    assert run(str(path), "--max-rel-err", "0.01") == 1
    assert "synthetic" not in capsys.readouterr().out  # a file's weight: no synthetic-weight warning


def test_pick_lines_end_a_run():
    from qbench.readers.recommend import pick_lines

    doc = {"schema_version": 2, "rows": [_layer_row("a", 10.0, 9.9, 10.1), _layer_row("b", 8.0, 7.9, 8.1, rel=0.05)]}
    assert pick_lines(doc, "results/runs/x.json") == [
        "pick within rel_fro <= 0.01 (stream median): M=1 a (10.0 µs)",
        "why, and the other schemes: qbench recommend results/runs/x.json --max-rel-err 0.01"]
    assert pick_lines(doc, "my runs/x.json", 0.001)[0] == "pick within rel_fro <= 0.001 (stream median): M=1 none within the budget"
    assert pick_lines(doc, "my runs/x.json")[1].endswith("recommend 'my runs/x.json' --max-rel-err 0.01")
    # a tie: the slower median with the lower error is picked, and the line says the faster one is as fast
    # and the rule among the tied (the pick is not the fastest median: say why where it is printed)
    tie = {"schema_version": 2, "rows": [_layer_row("a", 10.0, 9.5, 10.5, rel=0.001), _layer_row("b", 9.8, 9.4, 10.2, rel=0.005)]}
    assert pick_lines(tie, "x.json")[0] == ("pick within rel_fro <= 0.01 (stream median): M=1 a (10.0 µs; as fast "
                                            "within noise: b (lowest median)); among schemes as fast within noise the "
                                            "pick is the smaller M's, else the lowest error, then the fewest stored bytes")


def test_a_tie_with_the_pick_but_not_the_fastest_is_not_called_a_tie():
    """Ties are not transitive. f: 10 µs (9.9-10.1); w: 20 µs but p10-p90 5-30 (overlaps f), lower error;
    t: 18 µs (17.5-18.5, inside w's range, not f's), lower error still. The pick is chosen among the
    schemes tied with the fastest (f, w): w, by error. t is not listed as tied with it (it would read as
    a tie lost on nothing: its error is lower), but as slower than the fastest beyond noise (new-user
    trial 2026-12-02: fp32 listed "as fast within noise" beside an fp16 pick of higher error)."""
    from qbench.readers.recommend import pick_lines, recommend

    doc = {"schema_version": 2, "rows": [_layer_row("f", 10.0, 9.9, 10.1, rel=0.009),
                                         _layer_row("w", 20.0, 5.0, 30.0, rel=0.004),
                                         _layer_row("t", 18.0, 17.5, 18.5, rel=0.0001)]}
    g = recommend(doc, 0.01)["by_m"][0]
    assert (g["pick"]["scheme"], g["pick"]["ties"], g["pick"]["fastest_median"]) == ("w", ["f"], "f")
    why = {o["scheme"]: o["reason"] for o in g["others"]}
    assert why["t"].startswith("slower than the fastest, f, beyond noise: 18.0 µs vs 10.0 µs (1.80×; the pick's own "
                               "spread overlaps it")
    assert why["f"].startswith("same speed within noise, higher error")
    line = pick_lines(doc, "x.json")[0]
    assert line.startswith("pick within rel_fro <= 0.01 (stream median): M=1 w (20.0 µs")
    assert line.endswith("; as fast within noise: f (lowest median)); among schemes as fast within noise the pick is the "
                                                "smaller M's, else the lowest error, then the fewest stored bytes")  # t is not named


def test_hostile_strings_are_shown_escaped(tmp_path, capsys):
    """A result file's labels cannot reach the terminal raw nor add a line (break review 2026-12-01, #16):
    the pick is the first hostile label, escaped, on its one line."""
    from tests.rows import hostile_doc

    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(hostile_doc()), encoding="utf-8")
    for fmt in ("simple", "github"):
        assert run(str(path), "--max-rel-err", "0.1", "--format", fmt) == 0
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "\x07" not in out + err
        prose = out if fmt == "simple" else err  # Markdown: the table alone on stdout, the prose on stderr
        assert "M=1 (K=256, N=128): use \\x1b]0;pwned\\x07\\x1b[2J (5.00 µs, rel_fro 0.01)" in prose.splitlines()
        assert not any(line.startswith("c ") or line.startswith("| c ") for line in out.splitlines())
        if fmt == "github":
            why_not = [line for line in out.splitlines() if line.startswith("|")]
            assert len(why_not) == 2 + 3  # header, separator, the three others: the newline added no row
    assert run(str(path), "--max-rel-err", "0.1", "--summary") == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err


def test_a_scheme_tied_with_the_fastest_but_not_the_pick_says_so():
    """Break review 2026-12-02: f 10 µs (8-12), w 20 µs (11-30, the pick by error), c 10.5 µs (10.4-10.6):
    c ties f, not w; its reason must compare it with f, not claim a p10-p90 overlap with w."""
    from qbench.readers.recommend import recommend

    doc = {"schema_version": 2, "rows": [_layer_row("f", 10.0, 8.0, 12.0, rel=0.009),
                                         _layer_row("w", 20.0, 11.0, 30.0, rel=0.001),
                                         _layer_row("c", 10.5, 10.4, 10.6, rel=0.008)]}
    g = recommend(doc, 0.01)["by_m"][0]
    assert g["pick"]["scheme"] == "w" and sorted(g["pick"]["ties"]) == ["c", "f"]
    why = {o["scheme"]: o["reason"] for o in g["others"]}
    assert why["c"].startswith("same speed as the fastest, f, within noise, higher error (rel_fro 0.008 vs 0.001): "
                               "10.5 µs vs 10.0 µs, the fastest (1.05×, p10–p90 overlap")
    assert why["f"].startswith("same speed within noise, higher error")  # f and w do overlap


def test_recommend_takes_every_declared_budget(capsys):
    """The quality budgets come from the job records' declarations (qbench.readers.common.declared_budgets):
    each is an option of recommend, checked, and named by the step view's refusal."""
    from pathlib import Path

    from qbench import cli
    from qbench.readers.common import declared_budgets

    flags = [b.flag for b in declared_budgets()]
    assert flags[:3] == ["--max-kld", "--max-ppl-ratio", "--min-same-top"]
    with pytest.raises(SystemExit):
        cli.main(["recommend", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(flag in text for flag in flags)
    step = str(Path(__file__).resolve().parents[2] / "results" / "h200" / "step_tiny_trained.json")
    assert cli.main(["recommend", step, "--max-rel-err", "0.01", "--min-same-top", "0.9"]) == 2
    assert capsys.readouterr().err.startswith(f"qbench recommend: {', '.join(flags[:-1])} and {flags[-1]} are budgets")
    assert cli.main(["recommend", step, "--min-same-top", "2"]) == 2
    assert "--min-same-top: must be a number >= 0 and <= 1, got 2.0" in capsys.readouterr().err
