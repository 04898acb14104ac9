"""The default terminal views fit 120 characters (issue 24, "What to build" item 6) and ``--wide``
still shows what they leave out: ``report --crossover``, ``model`` (the layer-sum view),
``recommend`` ("why not"), ``recommend --summary`` and a tensor-parallel ``report`` table, on the
committed H200 files (a tensor-parallel file is built from :func:`tests.rows.full_tp_row`); then
``recommend --by-format``, the model-step views (``model``, ``recommend`` and ``report`` of a
model-step file), ``report`` of a layer file (its footnotes), ``compare`` and ``report --by-m``
(:data:`MORE_VIEWS`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qbench import cli
from qbench.render import TABLE_WIDTH, fit, narrow
from tests.rows import full_tp_row

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "results" / "h200"
LLAMA3_8B = sorted(str(p.relative_to(ROOT)) for p in H200.glob("llama3_8b_*.json"))


def _run(capsys, monkeypatch, *argv: str) -> str:
    """stdout of ``qbench ARGV`` run in-process from the repository root."""
    monkeypatch.chdir(ROOT)
    cli.main(list(argv))
    return capsys.readouterr().out


def _width(text: str) -> int:
    """The longest line of ``text``, in characters."""
    return max(len(line) for line in text.splitlines())


#: view name -> (argv of the default view, text only ``--wide`` shows).
VIEWS = {
    "crossover": (["report", "results/h200/sweep.json", "--crossover"],
                  ["slower at M", "not timed at M", "best speed-up vs bf16 (bf16/scheme, stream)"]),
    "model": (["model", "llama3-8b", *LLAMA3_8B, "--allow-incomplete"],
              ["HBM floor µs", "floor/step", "stored GiB", "max rel err  note", "speed-up vs bf16 (bf16 step / this step)",
               "incomplete: no row at 4096→128256"]),
    "recommend": (["recommend", "results/h200/decode.json", "--max-rel-err", "0.01"],
                  ["capture failed at M=1: CUDA graph capture failed: AcceleratorError: CUDA error: operation not "
                   "permitted when stream is capturing"]),
    "summary": (["recommend", "results/h200/decode.json", "--max-rel-err", "0.01", "--summary"],
                ["bf16 µs", "speed-up vs bf16 (bf16 time / pick time)", "pick stability",
                 "picked in 2 of 3 runs (int8-weight-only+compiled in 1)"]),
    "summary-llama3-8b": (["recommend", *LLAMA3_8B, "--max-rel-err", "0.01", "--summary", "--allow-incomplete"],
                          ["1.01× (same within noise)", "  K  "]),
}


def _fits_and_wide_shows(capsys, monkeypatch, name: str, argv: list, wide_only: list) -> None:
    """The default view of ``argv`` fits 120 characters, ``--wide`` is wider (the committed files'
    full views are) and shows each of ``wide_only``, which the default view leaves out."""
    narrow_text = _run(capsys, monkeypatch, *argv)
    wide_text = _run(capsys, monkeypatch, *argv, "--wide")
    assert _width(narrow_text) <= TABLE_WIDTH, name
    assert _width(wide_text) > TABLE_WIDTH, name
    for text in wide_only:
        assert text in wide_text, (name, text)
        assert text not in narrow_text, (name, text)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_default_view_fits_120_and_wide_shows_the_rest(name, capsys, monkeypatch):
    _fits_and_wide_shows(capsys, monkeypatch, name, *VIEWS[name])


def test_narrow_views_keep_what_a_decision_needs(capsys, monkeypatch):
    """Known cells of the committed files in the narrow views (hand-read from their --wide views)."""
    crossover = _run(capsys, monkeypatch, "report", "results/h200/sweep.json", "--crossover")
    line = next(ln for ln in crossover.splitlines() if ln.startswith("int4-weight-only+compiled "))
    assert line.split() == ["int4-weight-only+compiled", "1–4", "8", "1.95×"]
    model = _run(capsys, monkeypatch, "model", "llama3-8b", *LLAMA3_8B, "--allow-incomplete")
    line = next(ln for ln in model.splitlines() if ln.split()[:2] == ["1", "int4-weight-only+compiled"])
    assert line.split() == ["1", "int4-weight-only+compiled", "2680", "373", "1.75×", "0.104", "ok"]
    assert "×bf16 = bf16 step / this step" in model
    summary = _run(capsys, monkeypatch, "recommend", "results/h200/decode.json", "--max-rel-err", "0.01", "--summary")
    line = next(ln for ln in summary.splitlines() if ln.startswith("decode "))
    assert line.split() == ["decode", "1", "int8-weight-only-gemlite", "8.78", "0.00915", "1.54×",
                            "int8-weight-only+compiled", "2", "of", "3"]
    why = _run(capsys, monkeypatch, "recommend", "results/h200/decode.json", "--max-rel-err", "0.01")
    # the long reason wraps within its cell: its words all there, in order, under the column
    lines = why.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("w8a8-dynamic "))
    cell = " ".join(ln[37:].strip() for ln in lines[i:i + 3])
    assert cell == ("unusable in a graph-captured decode loop (eager 1399 µs): CUDA graph capture failed at M=1: "
                    "CUDA graph capture failed: AcceleratorError: CUDA error: operation not permitted when stream "
                    "is capturing")
    assert lines[i + 1].startswith(" " * 37) and lines[i + 3].startswith("int8-bnb ")


def test_markdown_csv_and_json_keep_every_column(capsys, monkeypatch):
    """Documents are generated from Markdown: it keeps the wide columns, as CSV and JSON do."""
    for argv, wide_only in VIEWS.values():
        if "--summary" in argv:  # --summary --format csv: the baseline's time and the speed-up's header
            csv_text = _run(capsys, monkeypatch, *argv, "--format", "csv")
            assert "baseline_us" in csv_text.splitlines()[0]
        github = _run(capsys, monkeypatch, *argv, "--format", "github")
        assert wide_only[0] in github, argv


def _tp_file(tmp_path: Path) -> str:
    """A result file of tensor-parallel rows (qbench's longest scheme label at tp 2 row, tp 2
    column and tp 4 row, every tp field set)."""
    rows = [full_tp_row(scheme=s, tp_size=tp, split=split, collective=coll)
            for s in ("bf16", "fp8-dynamic[kernel_preference=mslk]")
            for tp, split, coll in ((2, "row", "all_reduce"), (2, "column", "all_gather"), (4, "row", "all_reduce"))]
    path = tmp_path / "tp.json"
    path.write_text(json.dumps({"schema_version": 2, "rows": rows, "env": {}, "scenario": {"name": "tp"}}))
    return str(path)


def test_tensor_parallel_table_fits_120_and_wide_shows_the_rest(tmp_path, capsys, monkeypatch):
    path = _tp_file(tmp_path)
    narrow_text = _run(capsys, monkeypatch, "report", path)
    wide_text = _run(capsys, monkeypatch, "report", path, "--wide")
    assert _width(narrow_text) <= TABLE_WIDTH
    head = next(ln for ln in narrow_text.splitlines() if ln.startswith("scheme "))
    assert head.split() == ["scheme", "M", "tp", "split", "end-to-end", "µs", "stream", "µs", "vs", "tp", "1",
                            "rel", "err", "status"]
    row = next(ln for ln in narrow_text.splitlines() if ln.startswith("fp8-dynamic[kernel_preference=mslk]"))
    assert row.split() == ["fp8-dynamic[kernel_preference=mslk]", "1", "2", "row", "14.5", "9.07", "1.25×", "cold",
                           "9.30e-03", "ok"]
    for header in ("collective", "stored MiB per rank", "local GEMM µs", "collective µs", "cold µs",
                   "speed-up vs tp 1 (tp1 time / this)"):
        assert header in wide_text and header not in narrow_text, header
    csv_head = _run(capsys, monkeypatch, "report", path, "--format", "csv").splitlines()[0]
    assert "local_us" in csv_head and "collective_us" in csv_head  # data formats keep every column


#: view name -> (argv of the default view, text only ``--wide`` shows, text a Markdown view keeps).
MORE_VIEWS = {
    "by-format": (["recommend", "results/h200/decode.json", "--by-format"],
                  ["speed-up vs bf16 (bf16 time / fastest's)", "tinygemm_m16n8k16_chunk_kernel", "bitsandbytes",
                   "others of the format (their time / the fastest's)"],
                  "tinygemm_m16n8k16_chunk_kernel"),
    "model-step": (["model", "llama3.1-8b", "results/h200/step_llama31_8b.json"],
                   ["step µs (measured)", "×bf16 graph", "×bf16 compiled", "×bf16 loop (r-o)", "×bf16 Σ linear",
                    "  step method  "],
                   "×bf16 loop (r-o)"),
    "recommend-step": (["recommend", "results/h200/step_llama31_70b.json", "--max-rel-err", "0.5"],
                       ["fastest step within the budget", "within budget", "  context  "],
                       "fastest step within the budget"),
    "report-step": (["report", "results/h200/step_llama31_8b.json"],
                    ["Σ linear µs", "tok/s", "top-1", "floor %", "flags",
                     "  loop (r-o): µs per step of torch.compile(mode='reduce-overhead') in a decode loop (token n feeds "
                     "step n+1, no sync between): host included"],
                    " Σ linear µs |"),
    "report": (["report", "results/h200/decode.json"],
               ["stored MiB", "roofline µs", "HBM floor µs",
                "w8a8-dynamic+compiled (M=1) skipped: compiled w8a8-dynamic lowers to torch._int_mm, whose CUDA "
                "kernel needs M > 16 (M = 1); the eager w8a8-dynamic row runs at this M"],
               "w8a8-dynamic+compiled (M=1) skipped: compiled w8a8-dynamic lowers to torch._int_mm, whose CUDA "
               "kernel needs M > 16 (M = 1); the eager w8a8-dynamic row runs at this M"),
    "compare": (["compare", "--a", "tests/fixtures/real/h200_decode_2026-11-30.json", "--b", "results/h200/decode.json"],
                ["A stream µs", "B stream µs", "speed-up vs A (A/B)", "Δ rel err",
                 "both unusable in a graph-captured decode loop",
                 "A = tests/fixtures/real/h200_decode_2026-11-30.json (cuda NVIDIA H200); B = results/h200/decode.json"],
                "A stream µs"),
    "by-m": (["report", "results/h200/sweep.json", "--by-m"],
             ["M=32    M=64", "(no stream time: the call cannot be captured in a CUDA graph, e.g. a host sync)"],
             "|   M=32 |   M=64 |"),
}


@pytest.mark.parametrize("name", sorted(MORE_VIEWS))
def test_more_default_views_fit_120_and_wide_shows_the_rest(name, capsys, monkeypatch):
    argv, wide_only, markdown = MORE_VIEWS[name]
    _fits_and_wide_shows(capsys, monkeypatch, name, argv, wide_only)
    cli.main([*argv, "--format", "github"])
    cap = capsys.readouterr()  # Markdown keeps it: the table on stdout, the notes on stderr
    assert markdown in cap.out + cap.err, name


def _row_of(text: str, *first: str) -> list[str]:
    """The words of the first line of ``text`` whose words start with ``first``."""
    return next(ln.split() for ln in text.splitlines() if ln.split()[:len(first)] == list(first))


def test_more_narrow_views_keep_what_a_decision_needs(capsys, monkeypatch):
    """Known cells of the committed files in the narrow views (hand-read from their --wide views)."""
    by_format = _run(capsys, monkeypatch, "recommend", "results/h200/decode.json", "--by-format")
    assert _row_of(by_format, "1", "4-bit", "int") == ["1", "4-bit", "int", "int4-weight-only+compiled", "6.89", "0.101",
                                                      "1.96×", "int4-weight-only", "1.18×,"]
    head = _row_of(by_format, "M", "format")
    assert head == ["M", "format", "fastest", "stream", "µs", "rel", "err", "×bf16", "others", "of", "the", "format"]
    # the others of the format wrap within their cell: every scheme there, whole, in order
    lines = by_format.splitlines()
    i = lines.index(next(ln for ln in lines if ln.split()[:3] == ["1", "4-bit", "int"]))
    start = lines[i].index("int4-weight-only 1.18×")
    cont = [ln for ln in lines[i + 1:i + 6] if ln[:start].strip() == ""]  # the lines the cell goes on to
    assert len(cont) == 4 and lines[i + 5].split()[:3] == ["1", "4-bit", "float"]
    cell = " ".join(ln[start:].strip() for ln in [lines[i], *cont])
    assert cell == ("int4-weight-only 1.18×, int4-weight-only-gemlite 1.20×, fp8-int4 1.97×, int4-preshuffled 2.25×, "
                    "int4-plain 2.50×, int4-intx 21.1×")
    step = _run(capsys, monkeypatch, "model", "llama3.1-8b", "results/h200/step_llama31_8b.json")
    assert _row_of(step, "M", "ctx") == ["M", "ctx", "scheme", "method", "step", "µs", "rest", "×bf16", "×bf16", "Σ",
                                         "err"]
    assert _row_of(step, "1", "128", "int4-weight-only+compiled") == [
        "1", "128", "int4-weight-only+compiled", "compiled", "3469", "22", "%", "1.57×", "1.67×", "0.297"]
    budget = _run(capsys, monkeypatch, "model", "llama3.1-8b", "results/h200/step_llama31_8b.json", "--max-rel-err", "0.3")
    assert _width(budget) <= TABLE_WIDTH and _row_of(budget, "1", "4096", "nf4-bnb")[-2:] == ["0.371", "over"]
    rec = _run(capsys, monkeypatch, "recommend", "results/h200/step_llama31_70b.json", "--max-rel-err", "0.5")
    assert _row_of(rec, "1", "4096") == ["1", "4096", "int4-weight-only", "graph", "30533", "33", "1.45×", "0.389",
                                        "2", "of", "2"]
    report = _run(capsys, monkeypatch, "report", "results/h200/step_llama31_8b.json")
    assert _row_of(report, "int4-weight-only+compiled", "1", "128") == [
        "int4-weight-only+compiled", "1", "128", "5.3", "ms", "3.47", "ms", "12.3", "ms", "22", "%", "1.57×", "1.67×",
        "0.3"]
    compare = _run(capsys, monkeypatch, *MORE_VIEWS["compare"][0])
    assert _row_of(compare, "int8-weight-only+compiled") == ["int8-weight-only+compiled", "1", "9.07", "11.8", "0.769×",
                                                             "+4.2e-07", "same", "—"]
    assert compare.splitlines()[:2] == ["A = tests/fixtures/real/h200_decode_2026-11-30.json (cuda NVIDIA H200)",
                                        "B = results/h200/decode.json (cuda NVIDIA H200)"]
    by_m = _run(capsys, monkeypatch, "report", "results/h200/sweep.json", "--by-m")
    # two blocks of M columns, each with the scheme column: M = 1..32, then 64..1024
    heads = [ln.split() for ln in by_m.splitlines() if ln.startswith("scheme ")]
    assert heads == [["scheme", "M=1", "M=2", "M=4", "M=8", "M=16", "M=32"],
                     ["scheme", "M=64", "M=128", "M=256", "M=512", "M=1024"]]
    rows = [ln.split() for ln in by_m.splitlines() if ln.startswith("int4-weight-only ")]
    assert rows == [["int4-weight-only", "8.13", "8.99", "10.4", "14.7", "23.4", "42.7"],
                    ["int4-weight-only", "80.7", "156", "303", "597", "1186"]]
    assert "stream µs, by M (in 2 tables of M columns, to fit 120 characters; --wide: one table)" in by_m


def test_by_m_of_a_narrow_grid_is_one_table(capsys, monkeypatch):
    """A grid that fits 120 characters stays one table (decode.json: one M)."""
    text = _run(capsys, monkeypatch, "report", "results/h200/decode.json", "--by-m")
    assert "stream µs, by M\n" in text and sum(ln.startswith("scheme ") for ln in text.splitlines()) == 1


def test_narrow_and_fit():
    assert narrow("simple") and narrow("grid") and not narrow("simple", wide=True)
    assert not any(narrow(f) for f in ("github", "pipe", "markdown", "csv", "json", "latex", "html"))
    assert fit("a b c", 3) == "a b\n  c"
    assert fit(["short", "x" * 10 + " y"], 5) == "short\n" + "x" * 10 + "\n  y"  # a long word stays whole
    assert fit("  - one two", 8) == "  - one\n    two"  # continuations indented 2 more than the line
