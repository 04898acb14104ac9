"""The default terminal views fit 120 characters (issue 24, "What to build" item 6) and ``--wide``
still shows what they leave out: ``report --crossover``, ``model`` (the layer-sum view),
``recommend`` ("why not"), ``recommend --summary`` and a tensor-parallel ``report`` table, on the
committed H200 files (a tensor-parallel file is built from :func:`tests.rows.full_tp_row`)."""

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


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_default_view_fits_120_and_wide_shows_the_rest(name, capsys, monkeypatch):
    argv, wide_only = VIEWS[name]
    narrow_text = _run(capsys, monkeypatch, *argv)
    wide_text = _run(capsys, monkeypatch, *argv, "--wide")
    assert _width(narrow_text) <= TABLE_WIDTH, name
    assert _width(wide_text) > TABLE_WIDTH, name  # the committed files' full tables are wider
    for text in wide_only:
        assert text in wide_text, (name, text)
        assert text not in narrow_text, (name, text)


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


def test_narrow_and_fit():
    assert narrow("simple") and narrow("grid") and not narrow("simple", wide=True)
    assert not any(narrow(f) for f in ("github", "pipe", "markdown", "csv", "json", "latex", "html"))
    assert fit("a b c", 3) == "a b\n  c"
    assert fit(["short", "x" * 10 + " y"], 5) == "short\n" + "x" * 10 + "\n  y"  # a long word stays whole
    assert fit("  - one two", 8) == "  - one\n    two"  # continuations indented 2 more than the line
