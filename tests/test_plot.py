"""Tests for qbench.plot: PNGs are written (skipped without matplotlib); missing matplotlib is
one clear line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from qbench import plot
from qbench.results import read_results
from tests.conftest import run_subcommand

FIXTURES = Path(__file__).parent / "fixtures"


def run(*argv):
    return run_subcommand(plot, "plot", *argv)


@pytest.mark.parametrize("fixture", ["cuda_run1.json", "cpu.json"])
def test_writes_both_pngs(fixture, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'qbench[plot]')")
    out = tmp_path / "fig" / "r.png"
    assert run(str(FIXTURES / fixture), "-o", str(out)) == 0
    for p in (out, tmp_path / "fig" / "r-pareto.png"):
        data = p.read_bytes()
        assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_what_roofline_only(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'qbench[plot]')")
    out = tmp_path / "r.png"
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(out), "--what", "roofline") == 0
    assert out.exists() and not (tmp_path / "r-pareto.png").exists()


def test_points_attained_tflops():
    pts = {p["label"]: p for p in plot.points(read_results(FIXTURES / "cuda_run1.json"), "cold")}
    bf16 = pts["bf16 M=512"]
    assert bf16["tflops"] == pytest.approx(2 * 512 * 4096 * 4096 / 31.0 / 1e6)
    assert "int4-weight-only M=1" not in pts and "w8a8-dynamic M=1" not in pts
    assert pts["fp16 M=512"]["rel_fro"] is None  # non-finite: not placed on the error axis


def test_missing_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "r.png")) == 2
    err = capsys.readouterr().err
    assert "qbench[plot]" in err and err.count("\n") == 1
    assert not (tmp_path / "r.png").exists()


def test_bad_input_exit_2(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run(str(FIXTURES / "schema_v99.json"), "-o", str(tmp_path / "r.png")) == 2
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "r.gif")) == 2  # .png, .svg, .pdf only


def test_existing_png_is_not_overwritten_without_force(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'qbench[plot]')")
    out = tmp_path / "r.png"
    (tmp_path / "r-pareto.png").write_bytes(b"mine")
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert "r-pareto.png already exists" in err and "--force" in err and err.count("\n") == 1
    assert (tmp_path / "r-pareto.png").read_bytes() == b"mine" and not out.exists()
    # --what roofline does not touch the Pareto file, so it needs no --force
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(out), "--what", "roofline") == 0
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(out), "--force") == 0
    assert (tmp_path / "r-pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_says_which_method(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'qbench[plot]')")
    assert run(str(FIXTURES / "cuda_stream.json"), "-o", str(tmp_path / "s.png"), "--what", "pareto") == 0
    assert capsys.readouterr().out.splitlines()[0] == "latency = stream median"
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "c.png"), "--what", "pareto") == 0
    assert capsys.readouterr().out.startswith("latency = cold median (no stream latency in this file")
    pts = {p["label"] for p in plot.points(read_results(FIXTURES / "cuda_stream.json"), "stream")}
    assert "nf4-bnb M=1" in pts and "w8a8-dynamic M=1" not in pts  # no stream time: not placed


def test_scheme_colours_are_fixed_by_the_registry():
    from qbench import schemes
    from qbench.plot import scheme_colour_index

    names = schemes.names()
    assert [scheme_colour_index(n) for n in names] == list(range(len(names)))
    assert scheme_colour_index("not-a-scheme") >= len(names)


def test_plot_writes_svg_and_pdf(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    from qbench import cli

    for suffix in (".svg", ".pdf"):
        out = tmp_path / f"chart{suffix}"
        assert cli.main(["plot", str(FIXTURES / "cuda_run1.json"), "-o", str(out)]) == 0
        assert out.is_file() and (tmp_path / f"chart-pareto{suffix}").is_file()
    assert cli.main(["plot", str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "chart.gif")]) == 2
