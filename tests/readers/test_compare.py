"""Tests for qbench compare (qbench.readers.compare): noise-only runs are `same`, a regression is
flagged and exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qbench.readers import compare
from qbench.judge import verdict
from qbench.readers.compare import compare_docs
from qbench.results import read_results
from qbench.row import Stats, flag_record
from tests.conftest import run_subcommand

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUN1, RUN2, RUN3 = (str(FIXTURES / f) for f in
                    ("cuda_run1.json", "cuda_run2_noise.json", "cuda_run3_slower.json"))


def run(*argv):
    return run_subcommand(compare, "compare", *argv)


def test_noise_only_pair_is_all_same():
    recs = compare_docs(read_results(RUN1), read_results(RUN2), "cold", 1.05)
    timed = [r for r in recs if r["speedup"] is not None]
    assert len(timed) == 23
    assert {r["verdict"] for r in timed} == {"same"}
    assert not any(r["regression"] for r in recs)
    untimed = {(r["scheme"], r["m"]) for r in recs if r["verdict"] == "not comparable"}
    assert untimed == {("w8a8-dynamic", 1), ("int4-weight-only", 1), ("int4-weight-only", 16),
                       ("int4-weight-only", 512)}


def test_noise_only_pair_exits_0(capsys):
    assert run(RUN1, RUN2) == 0
    assert "REGRESSION" not in capsys.readouterr().out


def test_slower_pair():
    recs = compare_docs(read_results(RUN1), read_results(RUN3), "cold", 1.05)
    by = {(r["scheme"], r["m"]): r for r in recs}
    for m in (1, 16, 512):
        assert by[("int8-weight-only", m)]["verdict"] == "slower"
        assert by[("int8-weight-only", m)]["regression"]
        assert by[("int8-weight-only", m)]["speedup"] == pytest.approx(1 / 1.45, rel=0.03)
        assert by[("nf4-bnb", m)]["verdict"] == "faster"
        assert by[("tf32", m)]["verdict"] == "only in A"
        assert by[("int8-weight-only+compiled", m)]["verdict"] == "only in B"
    assert {r["scheme"] for r in recs if r["regression"]} == {"int8-weight-only"}
    assert by[("fp16", 512)]["rel_fro_diff"] is None  # non-finite in both: no error to diff
    assert by[("bf16", 1)]["rel_fro_diff"] == 0


def test_slower_pair_exits_1_and_names_rows(capsys):
    assert run(RUN1, RUN3) == 1
    out = capsys.readouterr().out
    assert "REGRESSION: 3 row(s)" in out and "int8-weight-only M=1" in out
    assert "only in A" in out and "only in B" in out


def test_threshold_above_ratio_passes(capsys):
    # no row is slower by more than 1.6x; tf32, ok in A, is missing from B: that alone fails (issue 24)
    assert run(RUN1, RUN3, "--threshold", "1.6") == 1
    out = capsys.readouterr().out
    assert "REGRESSION" not in out
    assert "FAILED: 3 row(s): tf32 M=1 (missing from B), tf32 M=16 (missing from B), tf32 M=512 (missing from B)" in out


def test_reverse_direction_is_faster():
    recs = compare_docs(read_results(RUN3), read_results(RUN1), "cold", 1.05)
    assert {r["verdict"] for r in recs if r["scheme"] == "int8-weight-only"} == {"faster"}


def test_json_output(capsys):
    assert run(RUN1, RUN3, "--format", "json") == 1
    recs = json.loads(capsys.readouterr().out)
    assert any(r["verdict"] == "slower" for r in recs)


@pytest.mark.parametrize(
    "a, b, want",
    [
        ({"median": 10, "p10": 9, "p90": 11}, {"median": 10.5, "p10": 10.8, "p90": 12}, "same"),
        ({"median": 10, "p10": 9, "p90": 11}, {"median": 12, "p10": 11.5, "p90": 13}, "slower"),
        ({"median": 10, "p10": 9, "p90": 11}, {"median": 8, "p10": 7, "p90": 8.9}, "faster"),
        ({"median": 10}, {"median": 10}, "same"),
        ({"median": 10, "p10": None, "p90": None}, {"median": 11}, "slower"),
    ],
)
def test_verdict(a, b, want):
    assert verdict(Stats(**a), Stats(**b)) == want


def test_bad_input_exit_2(capsys):
    assert run(RUN1, str(FIXTURES / "schema_v99.json")) == 2
    assert "schema_v99.json" in capsys.readouterr().err
    assert run(RUN1, RUN2, "--format", "excel") == 2


def test_cpu_files_fall_back_to_cpu(capsys):
    cpu = str(FIXTURES / "cpu.json")
    assert run(cpu, cpu) == 0
    out = capsys.readouterr().out
    assert "cpu median" in out and "A µs" in out  # the narrow table's header; the line under it names the method
    assert run(cpu, cpu, "--wide") == 0
    assert "A cpu µs" in capsys.readouterr().out


# ---- stream: the decision method ------------------------------------------------------------------

STREAM = str(FIXTURES / "cuda_stream.json")


def test_stream_files_compare_by_stream_and_name_unusable_rows(capsys):
    assert run(STREAM, STREAM, "--wide") == 0  # --wide: the long headers, which name the method
    out = capsys.readouterr().out
    assert "A stream µs" in out and "speed-up vs A (A/B)" in out
    assert "\nstream median; speed-up = A time / B time (> 1: B is faster)" in out
    recs = compare_docs(read_results(STREAM), read_results(STREAM))
    sync = next(r for r in recs if r["scheme"] == "w8a8-dynamic" and r["m"] == 1)
    assert sync["verdict"] == "not comparable" and sync["note"] == "both unusable in a graph-captured decode loop"
    assert run(STREAM, STREAM, "--format", "json") == 0
    assert {r["method"] for r in json.loads(capsys.readouterr().out)} == {"stream"}
    assert run(STREAM, STREAM, "--method", "cold", "--wide") == 0
    assert "A cold µs" in capsys.readouterr().out


def test_old_file_against_a_stream_file_compares_cold_and_says_so(capsys):
    run(RUN1, STREAM, "--wide")  # --wide: the header names the method, the line under the table is one line
    out = capsys.readouterr().out
    assert "A cold µs" in out and "(A has no stream latency; comparing cold times)" in out
    run(STREAM, RUN1, "--wide")
    assert "(B has no stream latency; comparing cold times)" in capsys.readouterr().out
    assert run(RUN1, RUN2, "--wide") == 0
    out = capsys.readouterr().out
    assert "A cold µs" in out and "no stream latency in this file" in out


def test_two_machines_are_named_and_warned(capsys):
    from pathlib import Path

    from qbench.readers import compare
    from tests.conftest import run_subcommand

    root = Path(__file__).resolve().parents[2]
    a, b = str(root / "results/cpu/decode.json"), str(root / "results/h200/decode.json")
    assert run_subcommand(compare, "compare", a, b) == 2  # another device: refused in one line (issue 24)
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"qbench compare: A ({a}) and B ({b}) ran on different machines (device: cpu (A) vs cuda (B); "
                          "CPU instruction set: only B has ")  # both files record env.cpu_info since 2026-12-04
    assert err.endswith("depend on these)); pass --allow-other-machine to compare them anyway\n")
    run_subcommand(compare, "compare", a, b, "--allow-other-machine")
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == [f"A = {a} (cpu AMD EPYC)", f"B = {b} (cuda NVIDIA H200)"]  # a line each
    run_subcommand(compare, "compare", a, b, "--allow-other-machine", "--wide")
    assert capsys.readouterr().out.splitlines()[0] == f"A = {a} (cpu AMD EPYC); B = {b} (cuda NVIDIA H200)"
    run_subcommand(compare, "compare", a, b, "--allow-other-machine")
    out, err = capsys.readouterr()
    assert err.splitlines()[:2] == [f"warning: A ({a}) ran on cpu AMD EPYC, B ({b}) on cuda NVIDIA H200: the "
                                    "speed-ups compare machines as much as schemes",
                                    "warning: machines differ: device: cpu (A) vs cuda (B)"]


def test_a_flagged_or_noisy_side_is_named_next_to_its_verdict(tmp_path, capsys):
    """B read 30x slower on a machine that other work kept busy: the row's cpu-busy flag and its
    noise appear in compare's note and in the REGRESSION line, so it does not read as a real
    regression (a new user's report: 7995 µs against 264 µs, no sign of why)."""
    from tests.rows import make_row, stats

    def doc(us, cv, flags):
        s = dict(stats(us), cv=cv)
        row = make_row(scheme="nf4-bnb", m=1, k=256, n=128, device="cpu", status="ok",
                       latency_us={"stream": s}, flags=flags)
        return {"schema_version": 2, "complete": True, "env": {"device": "cpu", "device_name": "AMD EPYC"},
                "rows": [row]}

    a = doc(264.0, 0.05, [])
    b = doc(7995.0, 0.9, [flag_record("cpu-busy", "2.0 cores busy with other work leaves 0.0 free cores for 2 "
                                                  "threads: noisy")])
    rec, = compare_docs(a, b, "stream", 1.05)
    assert rec["verdict"] == "slower" and rec["regression"]
    assert rec["note"] == "B: cpu-busy, noisy (cv 0.90)"
    clean, = compare_docs(a, a, "stream", 1.05)
    assert clean["note"] is None
    for name, d in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(d))
    # --wide: the REGRESSION line on one line (the default view wraps it at 120 characters)
    assert run(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--method", "stream", "--wide") == 1
    out = capsys.readouterr().out
    # neither file records its CPU's instruction set: that is named before the cpu-busy flag (issue 24)
    assert ("nf4-bnb M=1 (speed-up 0.03×; machines may differ (CPU instruction set unknown); B: cpu-busy, noisy "
            "(cv 0.90))") in out


# ---- issue 24: exit statuses a CI gate can rely on; machines told apart; several files per side ----

def _doc(rows, **env):
    return {"schema_version": 2, "complete": True, "scenario": {"name": "s"},
            "env": {"device": "cpu", "device_name": "AMD EPYC", **env}, "rows": rows}


def _row(scheme="int8", us=10.0, rel=0.01, status="ok", m=1, flags=()):
    from tests.rows import make_row, stats

    extra = {"latency_us": {"stream": stats(us, us * 0.99, us * 1.01)}, "error": {"rel_fro": rel}} \
        if status == "ok" else {"reason": "boom"}
    return make_row(scheme=scheme, m=m, k=256, n=128, device="cpu", status=status, flags=list(flags), **extra)


def _write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_no_row_in_common_exits_2(tmp_path, capsys):
    a = _write(tmp_path, "a.json", _doc([_row("int8")]))
    b = _write(tmp_path, "b.json", _doc([_row("nf4")]))
    assert run(a, b) == 2
    out, err = capsys.readouterr()
    assert err == f"qbench compare: no row in common between A ({a}) and B ({b}) (rows match by scheme, M, K, N)\n"


def test_error_growth_failure_and_disappearance_exit_1(tmp_path, capsys):
    a = _write(tmp_path, "a.json", _doc([_row("int8", rel=0.01), _row("nf4"), _row("fp8"), _row("bf16")]))
    b = _write(tmp_path, "b.json", _doc([_row("int8", rel=0.1), _row("nf4", status="failed"), _row("bf16")]))
    assert run(a, b) == 1
    out = capsys.readouterr().out
    assert "FAILED: 3 row(s): int8 M=1 (error grew 10.0×), nf4 M=1 (failed in B), fp8 M=1 (missing from B)" in out
    recs = {r["scheme"]: r for r in compare_docs(read_results(a), read_results(b), "stream", max_err_growth=20)}
    assert recs["int8"]["fails"] == [] and recs["bf16"]["fails"] == []  # 10x is within a 20x allowance
    c = _write(tmp_path, "c.json", _doc([_row("int8", rel=0.019), _row("bf16")]))
    a2 = _write(tmp_path, "a2.json", _doc([_row("int8", rel=0.01), _row("bf16")]))
    assert run(a2, c) == 0  # 1.9x: within the default 2x
    assert run(a2, c, "--max-err-growth", "1.5") == 1


def test_another_instruction_set_is_refused_and_a_host_difference_named_before_cpu_busy(tmp_path, capsys):
    from qbench.row import flag_record

    zen4 = {"cpu_info": {"model_name": "AMD EPYC", "flags": ["avx2", "avx512f", "avx512_bf16"], "capability": "AVX512"}}
    zen3 = {"cpu_info": {"model_name": "AMD EPYC", "flags": ["avx2"], "capability": "AVX2"}}
    a = _write(tmp_path, "a.json", _doc([_row("bf16", us=100.0)], **zen4))
    b = _write(tmp_path, "b.json", _doc([_row("bf16", us=4600.0)], **zen3))
    assert run(a, b) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qbench compare: A ({a}) and B ({b}) ran on different machines (CPU capability") \
        and err.count("\n") == 1 and "--allow-other-machine" in err
    busy = [flag_record("cpu-busy", "2 cores busy")]
    b2 = _write(tmp_path, "b2.json", _doc([_row("bf16", us=4600.0, flags=busy)], cpu_count=2, **zen4))
    a2 = _write(tmp_path, "a2.json", _doc([_row("bf16", us=100.0)], cpu_count=64, **zen4))
    assert run(a2, b2, "--wide") == 1  # --wide: the REGRESSION line whole
    out, err = capsys.readouterr()
    assert "warning: machines differ: CPU count: 64 (A) vs 2 (B)" in err
    assert "bf16 M=1 (speed-up 0.02×; machines differ (CPU count); B: cpu-busy)" in out


def test_several_files_per_side_are_one_result(tmp_path, capsys):
    a1 = _write(tmp_path, "a1.json", _doc([_row("int8"), _row("bf16")]))
    a2 = _write(tmp_path, "a2.json", _doc([_row("nf4")]))  # completed by --schemes nf4
    b = _write(tmp_path, "b.json", _doc([_row("int8"), _row("bf16"), _row("nf4")]))
    assert run("--a", a1, a2, "--b", b, "--wide") == 0  # --wide: A and B on one line, whole
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"A = {a1} + {a2} (cpu AMD EPYC); B = {b} (cpu AMD EPYC)"
    assert "only in" not in out and "3 same" in out
    assert run(a1, b) == 0  # the two-positional form still works (nf4 only in B: no failure)
    capsys.readouterr()
    other = _write(tmp_path, "o.json", dict(_doc([_row("nf4")]), scenario={"name": "other"}))
    assert run("--a", a1, other, "--b", b) == 2
    assert "A: the files are not one result" in capsys.readouterr().err
    assert run(a1, "--a", a2, "--b", b) == 2


def test_two_cuda_runs_on_hosts_of_other_cpu_counts_are_one_machine(capsys):
    """The committed H200 decode files of 11-29 and 11-30 ran on hosts of 16 and 32 CPUs: a GPU
    kernel's time does not depend on that, so nothing is warned and the rows' notes stay clean."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "real"
    a, b = str(root / "h200_decode_2026-11-29.json"), str(root / "h200_decode_2026-11-30.json")
    run(a, b)
    out, err = capsys.readouterr()
    assert "machines differ" not in out + err and "warning" not in err
