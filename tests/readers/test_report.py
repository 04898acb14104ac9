"""Tests for qbench report (qbench.readers.report): the row table, the crossover and by-M views."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from qbench.readers import report
from qbench.render import FORMATS, MARKDOWN_FORMATS, MARKUP_FORMATS
from qbench.results import read_results
from qbench.readers.report import crossover, m_ranges, render_crossover
from tests.conftest import run_subcommand
from tests.rows import make_row

FIXTURES = Path(__file__).parents[1] / "fixtures"
CUDA = str(FIXTURES / "cuda_run1.json")
CPU = str(FIXTURES / "cpu.json")


def run(*argv):
    return run_subcommand(report, "report", *argv)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format(fmt, capsys):
    assert run(CUDA, "--format", fmt) == 0
    cap = capsys.readouterr()
    assert "bf16" in cap.out
    # data formats and formats meant to be pasted or parsed (LaTeX, HTML, TSV, wikis): no header; Markdown: the
    # table alone on stdout (paste-ready), the header on stderr
    markdown = fmt in MARKDOWN_FORMATS
    assert ("NVIDIA H200" in cap.out) == (fmt not in ("csv", "json") and fmt not in MARKUP_FORMATS and not markdown)
    assert ("NVIDIA H200" in cap.err) == markdown
    if markdown:
        assert all(line.startswith("|") for line in cap.out.splitlines())


def test_columns_sort_status(capsys):
    assert run(CUDA, "--format", "csv", "--columns", "scheme,m,cold", "--sort", "cold",
               "--status", "ok") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    colds = [float(r["cold"]) for r in rows]
    assert colds == sorted(colds) and rows[0]["scheme"] == "fp8-dynamic"
    assert {r["scheme"] for r in rows}.isdisjoint({"int4-weight-only"})
    assert len(rows) == 23  # 27 rows - 3 skipped - 1 failed


def test_sort_descending_puts_missing_last(capsys):
    assert run(CUDA, "--format", "json", "--columns", "scheme,m,cold", "--sort=-cold") == 0
    recs = json.loads(capsys.readouterr().out)
    assert recs[0]["scheme"] == "fp32" and recs[0]["m"] == 512
    assert all(r["cold"] is None for r in recs[-4:])


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--columns", "scheme,bogus"], "unknown column 'bogus'; allowed: scheme"),
        (["--columns", "scheme,strem"], "unknown column 'strem'; did you mean stream, stream_cv? "
                                        "(--help-columns lists all"),
        (["--format", "excel"], "unknown format 'excel'; allowed:"),
        (["--sort", "nope"], "unknown column 'nope'"),
        (["--crossover", "--baseline", "fp64"], "--baseline 'fp64' is not a scheme of this file"),
    ],
)
def test_bad_values_exit_2_with_one_line(argv, needle, capsys):
    assert run(CUDA, *argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_schema_99_exit_2(capsys):
    assert run(str(FIXTURES / "schema_v99.json")) == 2
    err = capsys.readouterr().err
    assert "schema_v99.json" in err and "99" in err


def test_cpu_report_shows_cpu_not_cuda(capsys):
    assert run(CPU) == 0
    out = capsys.readouterr().out
    assert "cpu µs" in out and "cold µs" not in out and "CPU" in out


def test_help_columns(capsys):
    assert run(CUDA, "--help-columns") == 0
    assert "stored_mib" in capsys.readouterr().out


# ---- crossover ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "wins, sweep, want",
    [
        ([1, 16, 64], [1, 16, 64, 512], "1–64"),
        ([1, 16, 512], [1, 16, 64, 512], "1–16, 512"),
        ([64], [1, 16, 64, 512], "64"),
        ([], [1, 16], ""),
        ([1, 16], [1, 16], "1–16"),
        ([1, 4, 8, 16, 256], [1, 2, 4, 8, 16, 256], "1, 4–256"),
        ([1, 4, 8, 256], [1, 2, 4, 8, 16, 256], "1, 4–8, 256"),
    ],
)
def test_m_ranges(wins, sweep, want):
    assert m_ranges(wins, sweep) == want


def test_crossover_fixture():
    recs = {r["scheme"]: r for r in crossover(read_results(CUDA), "bf16", "cold")}
    assert "bf16" not in recs
    assert recs["fp8-dynamic"]["wins"] == [1, 16, 512] and recs["fp8-dynamic"]["ranges"] == "1–512"
    assert recs["w8a8-dynamic"]["wins"] == [16, 512] and recs["w8a8-dynamic"]["untimed"] == [1]
    assert recs["w8a8-dynamic"]["ranges"] == "16–512"
    assert recs["fp16"]["wins"] == [] and recs["fp16"]["ranges"] == ""
    assert recs["int4-weight-only"]["untimed"] == [1, 16, 512]
    assert recs["fp8-dynamic"]["best_speedup"] == pytest.approx(31.0 / 18.5)  # bf16 / fp8-dynamic, best at M=512


def test_crossover_handmade_with_gap():
    def row(s, m, us):
        return make_row(scheme=s, m=m, k=8, n=8, status="ok", latency_us={"stream": {"median": us}})
    doc = {"rows": [row("bf16", m, 10.0) for m in (1, 2, 4, 8)]
           + [row("q", 1, 5.0), row("q", 2, 6.0), row("q", 4, 12.0), row("q", 8, 9.0)]}
    (rec,) = crossover(doc)
    assert rec["wins"] == [1, 2, 8] and rec["losses"] == [4] and rec["ranges"] == "1–2, 8"
    assert "1–2, 8" in render_crossover([rec], "bf16", "stream")


def test_crossover_overlapping_spread_is_same_not_a_win():
    """Two equal-speed schemes must not read as a pattern of wins and losses: where the [p10, p90]
    intervals overlap the M is a tie, whatever the medians say."""
    def row(s, m, p10, med, p90):
        return make_row(scheme=s, m=m, k=8, n=8, status="ok",
                        latency_us={"stream": {"median": med, "p10": p10, "p90": p90}})
    doc = {"rows": [row("bf16", 1, 9.0, 10.0, 11.0), row("bf16", 2, 9.0, 10.0, 11.0),
                    row("bf16", 4, 9.0, 10.0, 11.0),
                    row("q", 1, 9.5, 9.8, 10.5),     # median below, intervals overlap: same
                    row("q", 2, 10.5, 10.2, 12.0),   # median above, overlap: same
                    row("q", 4, 7.0, 8.0, 8.9)]}     # wholly below: a win
    (rec,) = crossover(doc)
    assert rec["ties"] == [1, 2] and rec["wins"] == [4] and rec["losses"] == []
    assert rec["ranges"] == "4"
    assert rec["best_speedup"] == pytest.approx(10.0 / 8.0)  # bf16 / q at M = 4, the largest
    out = render_crossover([rec], "bf16", "stream", "github")
    assert "same at M" in out and "1, 2" in out


def test_crossover_cli_falls_back_to_cpu(capsys):
    assert run(CPU, "--crossover", "--baseline", "fp32") == 0
    out = capsys.readouterr().out
    assert "cpu median" in out and "no stream latency in this file" in out


# ---- --by-m grid --------------------------------------------------------------------------------

def test_by_m_grid_cells_are_the_report_cells():
    from qbench.readers.report import by_m, render_by_m

    doc = read_results(CUDA)
    records, ms = by_m(doc, "cold")
    assert ms == [1, 16, 512]
    recs = {r["scheme"]: r for r in records}
    # the fixture's bf16 cold medians (tests/fixtures/make_fixtures.py): 11.0, 11.4, 31.0 µs at M = 1, 16, 512
    assert [recs["bf16"]["cells"][m] for m in ms] == ["11.0", "11.4", "31.0"]
    assert [recs["bf16"]["values"][m] for m in ms] == [11.0, 11.4, 31.0]
    assert recs["fp32"]["cells"][512] == "395" and recs["nf4-bnb"]["cells"][1] == "14.2"  # 3 significant digits
    # a skipped scheme shows its status, not an empty cell
    assert set(recs["int4-weight-only"]["cells"].values()) == {"skipped"}
    out = render_by_m(records, ms, "cold µs", "github")
    assert out.startswith("cold µs, by M")
    assert [h.strip() for h in out.splitlines()[2].strip("|").split("|")] == ["scheme", "M=1", "M=16", "M=512"]
    assert out.count("\n| ") == len(records) + 1  # header + one line per scheme


def test_by_m_cli_and_bad_column(capsys):
    assert run(CUDA, "--by-m", "rel_err", "--format", "github") == 0
    cap = capsys.readouterr()
    assert "rel err, by M" in cap.err and "M=512" in cap.out
    assert run(CUDA, "--by-m", "bogus") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown column 'bogus'" in err


def test_by_m_missing_m_is_a_dash():
    from qbench.readers.report import by_m, render_by_m

    def row(s, m):
        return make_row(scheme=s, m=m, k=8, n=8, status="ok", latency_us={"cold": {"median": 5.0}})
    records, ms = by_m({"rows": [row("a", 1), row("a", 2), row("b", 2)]}, "cold")
    assert ms == [1, 2]
    text = render_by_m(records, ms, "cold µs", "plain")
    line_b = next(line for line in text.splitlines() if line.startswith("b"))
    assert line_b.split()[1:] == ["—", "5.00"]


def test_by_m_csv_carries_raw_values(capsys):
    assert run(CUDA, "--by-m", "cold", "--format", "csv") == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "scheme,m1,m16,m512"
    doc = read_results(CUDA)
    med = next(r for r in doc.rows if r.scheme == "bf16" and r.m == 16).latency_us["cold"].median
    bf16 = next(line for line in lines if line.startswith("bf16,")).split(",")
    assert float(bf16[2]) == med  # full precision, not the table's rounded text
    skipped = next(line for line in lines if line.startswith("int4-weight-only,")).split(",")
    assert skipped[1:] == ["skipped"] * 3


def test_by_m_and_crossover_are_exclusive(capsys):
    with pytest.raises(SystemExit) as exc:
        run(CUDA, "--by-m", "cold", "--crossover")
    assert exc.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


# ---- edge cases found by trying to break the sweep views -------------------------------------

def _sweep_doc(rows):
    return {"schema_version": 1, "rows": rows}


def _r(s, m, med, p10=None, p90=None, k=8, n=8, status="ok"):
    stats = {"median": med, "p10": p10, "p90": p90}
    return {"scheme": s, "m": m, "k": k, "n": n, "status": status,
            "latency_us": {"stream": stats if status == "ok" else None}}


def test_crossover_untimed_m_splits_a_win_range():
    doc = _sweep_doc([_r("bf16", m, 10.0) for m in (1, 2, 4)]
                     + [_r("q", 1, 5.0), _r("q", 2, 5.0, status="skipped"), _r("q", 4, 5.0)])
    (rec,) = crossover(doc)
    assert rec["wins"] == [1, 4] and rec["untimed"] == [2] and rec["ranges"] == "1, 4"


def test_crossover_baseline_without_any_time_is_bad_input(tmp_path, capsys):
    p = tmp_path / "basefail.json"
    p.write_text(json.dumps(_sweep_doc([_r("bf16", 1, 1.0, status="failed"), _r("q", 1, 5.0)])))
    with pytest.raises(ValueError, match="has no stream latency at any M"):
        crossover(read_results(p))
    assert run(str(p), "--crossover") == 2
    err = capsys.readouterr().err
    assert str(p) in err and "its rows: failed" in err and err.count("\n") == 1


def test_crossover_two_shapes_get_a_kn_column_and_data_formats_are_scriptable():
    doc = _sweep_doc([_r("bf16", 1, 10.0), _r("q", 1, 5.0),
                      _r("bf16", 1, 10.0, k=16), _r("q", 1, 20.0, k=16)])
    recs = crossover(doc)
    text = render_crossover(recs, "bf16", "stream", "plain")
    assert "K×N" in text and "8×8" in text and "16×8" in text
    rows = list(csv.DictReader(io.StringIO(render_crossover(recs, "bf16", "stream", "csv"))))
    assert rows[0]["k"] == "8" and rows[0]["wins"] == "1" and rows[0]["baseline"] == "bf16"
    assert rows[1]["losses"] == "1" and rows[1]["method"] == "stream"
    data = json.loads(render_crossover(recs, "bf16", "stream", "json"))
    assert data[0]["wins"] == [1] and data[1]["losses"] == [1]


def test_by_m_refuses_options_that_do_not_apply(capsys):
    assert run(CUDA, "--by-m", "cold", "--columns", "scheme") == 2
    assert "do not apply to --by-m" in capsys.readouterr().err
    assert run(CUDA, "--by-m", "") == 2
    assert "unknown column ''" in capsys.readouterr().err
    assert run(CPU, "--by-m", "cold") == 2
    err = capsys.readouterr().err
    assert "no row of" in err and "methods in this file: cpu" in err


def test_by_m_status_ok_drops_skipped_rows(capsys):
    assert run(CUDA, "--by-m", "dispatch", "--status", "ok", "--format", "json") == 0
    schemes = {r["scheme"] for r in json.loads(capsys.readouterr().out)}
    assert "int4-weight-only" not in schemes and "bf16" in schemes


@pytest.mark.parametrize("fmt", ["tsv", "latex", "html"])
def test_markup_formats_print_the_table_alone(capsys, fmt):
    """Formats meant to be pasted or parsed get no device header or title lines around them."""
    assert run(CUDA, "--format", fmt, "--columns", "scheme,m,cold", "--status", "ok") == 0
    out = capsys.readouterr().out
    assert "NVIDIA" not in out and "times:" not in out
    assert run(CUDA, "--by-m", "cold", "--format", fmt) == 0
    out = capsys.readouterr().out
    assert "by M" not in out.splitlines()[0] and "NVIDIA" not in out


def test_help_columns_needs_no_file_but_a_report_does(capsys):
    assert run("--help-columns") == 0
    assert "stored_mib" in capsys.readouterr().out
    assert run() == 2
    assert "give a result JSON file" in capsys.readouterr().err


# ---- stream: the decision method ------------------------------------------------------------------

STREAM = str(FIXTURES / "cuda_stream.json")
CPU_STREAM = str(FIXTURES / "cpu_stream.json")
UNUSABLE = "unusable in a graph-captured decode loop"


def _table_header(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith("| scheme"))
    return [h.strip() for h in line.strip("|").split("|")]


def test_report_default_columns_put_stream_first_with_the_hbm_floor(capsys):
    assert run(STREAM, "--format", "github") == 0  # the narrow default (issue 24): fits 120 characters
    out = capsys.readouterr().out
    assert _table_header(out) == ["scheme", "M", "bits/w", "stream µs", "cold µs", "floor %", "rel err", "status"]
    assert max(len(line) for line in out.splitlines() if line.startswith("|")) <= 120
    assert run(STREAM, "--format", "github", "--wide") == 0
    cap = capsys.readouterr()
    out = cap.out
    assert cap.err.splitlines()[1] == ("times: stream (graph over weight copies > L2) + CUDA cold, warm, eager, kernel; "
                                       "µs per call, median")
    head = _table_header(out)
    assert head[head.index("roofline µs") + 1:] == ["stream µs", "cold µs", "warm µs", "eager µs", "HBM floor µs",
                                                    "floor %", "rel err", "status"]
    bf16 = next(line for line in out.splitlines() if line.startswith("| bf16 ") and "|   1 |" in line)
    cells = [c.strip() for c in bf16.strip("|").split("|")]
    floor = 32 * 2**20 / 4310e3  # stored bytes / measured GB/s of the fixture's ceilings, µs
    assert cells[head.index("stream µs")] == "9.40" and cells[head.index("HBM floor µs")] == f"{floor:.2f}"
    assert cells[head.index("floor %")] == f"{100 * floor / 9.40:.0f}"


def test_report_on_a_file_without_stream_is_unchanged(capsys):
    assert run(CUDA, "--format", "github") == 0
    assert _table_header(capsys.readouterr().out) == ["scheme", "M", "bits/w", "cold µs", "warm µs", "rel err", "status"]
    assert run(CUDA, "--format", "github", "--wide") == 0
    cap = capsys.readouterr()
    out = cap.out
    assert cap.err.splitlines()[1] == "times: CUDA cold, warm, eager, kernel; µs per call, median"
    head = _table_header(out)
    assert "stream µs" not in head and "HBM floor µs" not in head
    assert head[head.index("roofline µs") + 1:] == ["cold µs", "warm µs", "eager µs", "rel err", "status"]


def test_cpu_report_shows_stream_beside_cpu(capsys):
    assert run(CPU_STREAM, "--format", "github") == 0
    assert _table_header(capsys.readouterr().out) == ["scheme", "M", "bits/w", "stream µs", "cpu µs", "rel err", "status"]
    assert run(CPU_STREAM, "--format", "github", "--wide") == 0
    cap = capsys.readouterr()
    out = cap.out
    assert cap.err.splitlines()[1] == "times: stream (copies > LLC) + cpu; CPU run, no CUDA timings; µs per call, median"
    head = _table_header(out)
    assert head[head.index("roofline µs") + 1:] == ["stream µs", "cpu µs", "rel err", "status"]


def test_crossover_reads_stream_and_names_unusable_schemes(capsys):
    recs = {r["scheme"]: r for r in crossover(read_results(STREAM))}
    assert recs["w8a8-dynamic"]["untimed"] == [1, 16] and recs["w8a8-dynamic"]["unusable"] == [1, 16]
    assert recs["nf4-bnb"]["wins"] == [1] and recs["nf4-bnb"]["losses"] == [16]
    assert recs["nf4-bnb"]["best_speedup"] == pytest.approx(9.40 / 3.90)  # bf16 / nf4-bnb at M = 1
    assert recs["fp16"]["ties"] == [1, 16]
    assert run(STREAM, "--crossover", "--wide") == 0  # --wide: each prose line whole (the default wraps at 120 characters)
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("weight: ")  # the header's third line says where the weight came from
    assert out[3] == "crossover vs bf16, stream median; speed-up = bf16 time / scheme time (> 1: the scheme is faster)"
    assert out[-1] == (f"{UNUSABLE} (no stream time: the call cannot be captured in a CUDA graph, e.g. a host "
                       "sync): w8a8-dynamic (M=1,16), int8-bnb (M=1,16)")
    assert run(STREAM, "--crossover", "--format", "csv") == 0
    rows = {r["scheme"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert rows["int8-bnb"]["unusable"] == "1;16" and rows["int8-bnb"]["method"] == "stream"
    assert run(STREAM, "--crossover", "--method", "cold") == 0
    out = capsys.readouterr().out
    assert "crossover vs bf16, cold median; speed-up = bf16 time / scheme time" in out and UNUSABLE not in out


def test_crossover_on_a_file_without_stream_falls_back_to_cold(capsys):
    assert run(CUDA, "--crossover") == 0
    assert ("crossover vs bf16, cold median (no stream latency in this file: an older result, or stream not "
            "timed; using cold times)") in capsys.readouterr().out


def test_by_m_without_a_column_reads_the_method(capsys):
    assert run(STREAM, "--by-m", "--format", "github") == 0
    err = capsys.readouterr().err  # Markdown: the prose on stderr
    assert "stream µs, by M" in err and err.rstrip().splitlines()[-1].startswith(UNUSABLE)
    assert run(CUDA, "--by-m", "--format", "github") == 0
    err = capsys.readouterr().err
    assert "cold µs, by M" in err and "no stream latency in this file" in err
    assert run(STREAM, "--by-m", "--method", "cold", "--format", "github") == 0
    err = capsys.readouterr().err
    assert "cold µs, by M" in err and UNUSABLE not in err
    assert run(STREAM, "--by-m", "rel_err", "--method", "cold") == 2
    assert "--method does not apply to --by-m rel_err" in capsys.readouterr().err
    assert run(CUDA, "--by-m", "stream") == 2  # explicit: no fallback
    assert "no row of" in capsys.readouterr().err


def test_by_m_bare_through_the_main_parser(capsys):
    from qbench import cli

    assert cli.main(["report", STREAM, "--by-m"]) == 0
    assert "stream µs, by M" in capsys.readouterr().out
    assert cli.main(["report", STREAM, "--by-m", "floor_pct", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "scheme,m1,m16" and next(line for line in lines if line.startswith("w8a8-dynamic,")) == "w8a8-dynamic,,"


def test_help_columns_lists_every_registry_method_with_its_includes(capsys):
    from qbench.timing import registry

    assert run("--help-columns") == 0
    out = capsys.readouterr().out
    for name in registry.LAYER_METHODS:  # a model step's methods are the step table's (qbench.step.view)
        line = next(line for line in out.splitlines() if line.startswith(f"{name} "))
        assert registry.METHODS[name].includes in line
    assert "hbm_floor_us" in out and "floor_pct" in out and "stream_copies" in out


# ---- issue 24: several files are one result; ties over runs; the weight said --------------------

def _one(scheme, median, p10, p90, **extra):
    from tests.rows import make_row, stats

    return make_row(scheme=scheme, m=1, k=256, n=128, device="cuda:0", status="ok", error={"rel_fro": 0.01},
                    latency_us={"stream": stats(median, p10, p90)}, **extra)


def _file(tmp_path, name, rows, scenario="s"):
    path = tmp_path / name
    path.write_text(json.dumps({"schema_version": 2, "complete": True, "scenario": {"name": scenario},
                                "env": {"device": "cuda:0", "device_name": "NVIDIA H200"}, "rows": rows}))
    return str(path)


def test_several_files_of_one_scenario_are_one_report(tmp_path, capsys):
    a = _file(tmp_path, "a.json", [_one("bf16", 10.0, 9.9, 10.1)])
    b = _file(tmp_path, "b.json", [_one("int8", 8.0, 7.9, 8.1)])  # completed by --schemes int8
    assert run(a, b, "--crossover", "--format", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["scheme"], r["wins"]) for r in rows] == [("int8", "1")]
    other = _file(tmp_path, "o.json", [_one("int8", 8.0, 7.9, 8.1)], scenario="other")
    assert run(a, other) == 2
    assert capsys.readouterr().err == (f"qbench report: the files are not one result (one scenario on one machine): "
                                       f"{a} (s, cuda NVIDIA H200); {other} (other, cuda NVIDIA H200)\n")


def test_crossover_ties_by_the_between_run_spread(tmp_path):
    """int8 beats bf16 within one run (8.0 against 10.0, p10-p90 disjoint) but its runs read 8, 10.5
    and 9 µs: the between-run spread holds bf16's 10 µs, so M=1 is a tie, not a win."""
    reps = {"runs": 3, "ok_runs": 3, "medians": {"stream": [8.0, 10.5, 9.0]}, "spread": {"stream": 2.5 / 9.0}}
    doc = read_results(_file(tmp_path, "r.json", [_one("bf16", 10.0, 9.9, 10.1), _one("int8", 8.0, 7.9, 8.1)]))
    assert crossover(doc)[0]["wins"] == [1]
    doc = read_results(_file(tmp_path, "r2.json", [_one("bf16", 10.0, 9.9, 10.1),
                                                  _one("int8", 8.0, 7.9, 8.1, repeats=reps)]))
    (rec,) = crossover(doc)
    assert rec["wins"] == [] and rec["ties"] == [1]


def test_header_says_the_weight(tmp_path, capsys):
    from qbench.render import render_header

    real = "HF checkpoint /models/llama:model.layers.0.mlp.down_proj.weight"
    doc = read_results(_file(tmp_path, "w.json", [_one("bf16", 10.0, 9.9, 10.1, weight_source=real)]))
    assert render_header(doc).splitlines()[2] == f"weight: {real}"
    old = read_results(_file(tmp_path, "o.json", [_one("bf16", 10.0, 9.9, 10.1)]))
    assert render_header(old).splitlines()[2] == ("weight: seeded Gaussian N(0, 1/K) (synthetic; a file written "
                                                  "before rows said their weight)")


# ---- break review 2026-12-01 #16: a result file's strings cannot hurt the reader ----------------

def _hostile(tmp_path):
    from tests.rows import hostile_doc

    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(hostile_doc()), encoding="utf-8")
    return str(path)


def _no_control_bytes(text):
    assert "\x1b" not in text and "\x07" not in text
    assert not any(ord(c) < 0x20 and c not in "\n\t" for c in text)


def test_hostile_strings_terminal_table(tmp_path, capsys):
    assert run(_hostile(tmp_path)) == 0
    out, err = capsys.readouterr()
    _no_control_bytes(out + err)
    lines = out.splitlines()
    assert lines[0].startswith("<img src=x onerror=alert(1)>\\x1b[31m (cpu) | ")
    assert any(line.startswith("\\x1b]0;pwned\\x07\\x1b[2J ") for line in lines)
    assert any(line.startswith("a|b\\nc ") for line in lines)
    assert not any(line.startswith("c ") for line in lines)  # the newline added no line


def test_hostile_strings_github_table(tmp_path, capsys):
    assert run(_hostile(tmp_path), "--format", "github") == 0
    out, err = capsys.readouterr()
    _no_control_bytes(out + err)
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 4  # header, separator, bf16 and three hostile rows: no extra row
    cells = {line.count("|") - line.count("\\|") for line in table}
    assert len(cells) == 1  # every line has the same number of cells
    assert any(line.startswith("| a\\|b\\nc ") for line in table)


def test_hostile_strings_csv(tmp_path, capsys):
    assert run(_hostile(tmp_path), "--format", "csv") == 0
    out, err = capsys.readouterr()
    _no_control_bytes(out + err)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["scheme"] for r in rows] == ["bf16", "\\x1b]0;pwned\\x07\\x1b[2J", "a|b\\nc", "'=HYPERLINK(\"x\")"]
    assert [float(r["stream"]) for r in rows] == [10.0, 5.0, 6.0, 7.0]  # numbers stay numbers


def test_hostile_strings_json_is_the_file(tmp_path, capsys):
    from tests.rows import HOSTILE_SCHEMES

    assert run(_hostile(tmp_path), "--format", "json") == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and [r["scheme"] for r in json.loads(out)] == ["bf16", *HOSTILE_SCHEMES]


def test_hostile_strings_through_the_command_line(tmp_path, capsys):
    from qbench import cli

    for fmt in ("simple", "github", "csv"):
        assert cli.main(["report", _hostile(tmp_path), "--format", fmt]) == 0
        out, err = capsys.readouterr()
        _no_control_bytes(out + err)
