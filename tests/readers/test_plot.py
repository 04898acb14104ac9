"""Tests for qbench plot (qbench.readers.plot): PNGs are written (skipped without matplotlib); missing matplotlib is
one clear line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from qbench.readers import plot
from qbench.results import read_results
from tests.conftest import run_subcommand

FIXTURES = Path(__file__).parents[1] / "fixtures"


def run(*argv):
    return run_subcommand(plot, "plot", *argv)


@pytest.mark.parametrize("fixture", ["cuda_run1.json", "cpu.json"])
def test_writes_both_pngs(fixture, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    out = tmp_path / "fig" / "r.png"
    assert run(str(FIXTURES / fixture), "-o", str(out)) == 0
    for p in (out, tmp_path / "fig" / "r-pareto.png"):
        data = p.read_bytes()
        assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_out_the_charts_go_beside_the_result_and_are_not_overwritten(tmp_path, capsys):
    """`qbench plot RESULT.json` as the README writes it: RESULT.png and RESULT-pareto.png beside the file; a second
    call refuses to overwrite them without --force."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    result = tmp_path / "run.json"
    result.write_bytes((FIXTURES / "cpu.json").read_bytes())
    assert run(str(result)) == 0
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "run-pareto.png").exists()
    capsys.readouterr()
    assert run(str(result)) == 2 and "already exist; pass --force" in capsys.readouterr().err


def test_what_roofline_only(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
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
    assert "pip install -e '.[plot]'" in err and err.count("\n") == 1
    assert not (tmp_path / "r.png").exists()


def test_bad_input_exit_2(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run(str(FIXTURES / "schema_v99.json"), "-o", str(tmp_path / "r.png")) == 2
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "r.gif")) == 2  # .png, .svg, .pdf only


def test_existing_png_is_not_overwritten_without_force(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
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
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    assert run(str(FIXTURES / "cuda_stream.json"), "-o", str(tmp_path / "s.png"), "--what", "pareto") == 0
    assert capsys.readouterr().out.splitlines()[0] == "latency = stream median"
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "c.png"), "--what", "pareto") == 0
    assert capsys.readouterr().out.startswith("latency = cold median (no stream latency in this file")
    pts = {p["label"] for p in plot.points(read_results(FIXTURES / "cuda_stream.json"), "stream")}
    assert "nf4-bnb M=1" in pts and "w8a8-dynamic M=1" not in pts  # no stream time: not placed


def test_scheme_colours_are_fixed_by_the_registry():
    from qbench import schemes
    from qbench.readers.plot import scheme_colour_index

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


ROOT = Path(__file__).resolve().parents[2]


def _row(scheme, median, rel, stored, m=1):
    return {"scheme": scheme, "m": m, "k": 64, "n": 32, "status": "ok", "flops": 2 * m * 64 * 32,
            "stored_bytes": stored, "error": {"rel_fro": rel, "nonfinite": 0},
            "latency_us": {"stream": {"median": median, "p10": median * 0.99, "p90": median * 1.01}}}


def test_chart_front_uses_three_axes_like_recommend():
    """a: 10 µs, rel 0.01, 1000 B; b: 12 µs, rel 0.02, 500 B; c: 13 µs, rel 0.02, 1000 B. On the two
    drawn axes only a is on the front; with the stored bytes b is too (fewest bytes); c is dominated
    by a on all three."""
    doc = {"rows": [_row("a", 10.0, 0.01, 1000), _row("b", 12.0, 0.02, 500), _row("c", 13.0, 0.02, 1000)]}
    (g,) = plot.pareto_groups(doc, "stream")
    assert (g["m"], g["k"], g["n"], g["front"]) == (1, 64, 32, {"a", "b"})


@pytest.mark.parametrize("path, method", [(FIXTURES / "cuda_stream.json", "stream"),
                                          (FIXTURES / "cuda_run1.json", "cold"),
                                          (ROOT / "results" / "h200" / "sweep.json", "stream"),
                                          (ROOT / "results" / "h200" / "decode.json", "stream")])
def test_chart_front_is_recommends_front(path, method):
    from qbench.readers.recommend import recommend

    doc = read_results(path)
    rec = recommend(doc, float("inf"), method)
    want = {(g["m"], g["k"], g["n"], g.get("tp_size"), g.get("split")): {p["scheme"] for p in g["pareto"]}
            for g in rec["by_m"]}
    got = {(g["m"], g["k"], g["n"], g["tp_size"], g["split"]): g["front"] for g in plot.pareto_groups(doc, method)}
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}


def _text_boxes(fig, annotations):
    from matplotlib.text import Text

    fig.canvas.draw()  # an annotation's text is positioned when drawn
    renderer = fig.canvas.get_renderer()
    return [Text.get_window_extent(a, renderer) for a in annotations]  # the text alone, not its leader


def _overlaps(a, b):
    return min(a.x1, b.x1) > max(a.x0, b.x0) and min(a.y1, b.y1) > max(a.y0, b.y0)


def test_sweep_pareto_labels_do_not_overlap():
    """results/h200/sweep.json, 11 M values: one label per front point (7 + 10 + 10 + 10 + 10 + 8 + 8
    + 9 + 9 + 9 + 9 = 99, recommend's fronts), none overlapping another, each inside its panel."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig, annotations, crowded = plot.draw_pareto(read_results(ROOT / "results" / "h200" / "sweep.json"), "stream")
    try:
        assert len(annotations) == 99 and crowded == 0
        boxes = _text_boxes(fig, annotations)
        assert not [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if _overlaps(boxes[i], boxes[j])]
        renderer = fig.canvas.get_renderer()
        for a, box in zip(annotations, boxes):
            frame = a.axes.get_window_extent(renderer)
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert len([ax for ax in fig.axes if ax.axison]) == 11  # one panel per M, the 12th holds the legend
    finally:
        plt.close(fig)


def test_labels_of_points_on_one_spot_are_spread():
    """Five labels for one point: the first four sit 7 pt from it (right, left, below, above; no
    leader line), the nearest spots left at 7 pt overlap them, so the fifth goes further out with a
    leader line; no two overlap."""
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    try:
        items = [(5.0, 5.0, f"label {i}") for i in range(1, 6)]
        annotations, crowded = plot.place_labels(ax, items, [(5.0, 5.0)])
        assert crowded == 0 and [a.get_text() for a in annotations] == [f"label {i}" for i in range(1, 6)]
        # at 7 pt, -30° and the other slanted spots put the box (less its 1.5 px padding) 6.06 pt to the
        # side, inside the 6 pt marker square; straight right (0°) leaves it 7 - 1.5 / (120 / 72) = 6.1 pt
        # away. Then left (180°, the 6th angle tried), below (-90°, the 7th), above (90°, the 8th).
        assert [a.xyann for a in annotations[:4]] == [pytest.approx((7.0, 0.0), abs=1e-9),
                                                      pytest.approx((-7.0, 0.0), abs=1e-9),
                                                      pytest.approx((0.0, -7.0), abs=1e-9),
                                                      pytest.approx((0.0, 7.0), abs=1e-9)]
        assert all(a.arrow_patch is None for a in annotations[:4])
        assert annotations[4].arrow_patch is not None and abs(complex(*annotations[4].xyann)) > 7
        boxes = _text_boxes(fig, annotations)
        assert not any(_overlaps(boxes[i], boxes[j]) for i in range(5) for j in range(i + 1, 5))
    finally:
        plt.close(fig)


def test_unwritable_path_is_one_line_exit_2(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "r.png"  # a folder that is a file: mkdir fails, whoever runs the test
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qbench plot: cannot write {out}: ") and err.count("\n") == 1
    (tmp_path / "d.png").mkdir()  # a directory where the chart goes: savefig fails
    assert run(str(FIXTURES / "cuda_run1.json"), "-o", str(tmp_path / "d.png"), "--what", "roofline", "--force") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qbench plot: cannot write {tmp_path / 'd.png'}: ") and err.count("\n") == 1


# ---- break review 2026-12-01 #20: values and labels a chart cannot draw ------------------------

def _cpu_file(tmp_path, rows, name="r.json", **doc):
    import json

    path = tmp_path / name
    path.write_text(json.dumps({"schema_version": 2, "complete": True, "scenario": {"name": "s"},
                                "env": {"device": "cpu", "device_name": "AMD EPYC"}, "rows": rows, **doc}))
    return str(path)


def _cpu_row(scheme, us, rel, m=1):
    from tests.rows import make_row, stats

    return make_row(scheme=scheme, m=m, k=256, n=128, device="cpu", status="ok", flops=2 * 256 * 128,
                    arithmetic_intensity=1.5, stored_bytes=65536, latency_us={"stream": stats(us, us * 0.99, us * 1.01)},
                    error={"rel_fro": rel})


@pytest.mark.parametrize("rel", [1e308, 1e101])
def test_undrawable_error_is_one_line_exit_2_and_no_chart(rel, tmp_path, capsys):
    """rel_fro 1e308 made the Pareto chart's axis limits infinite (a ValueError traceback after the
    roofline was written); now: one line naming the file, the scheme, M and the value, exit 2, no file."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    path = _cpu_file(tmp_path, [_cpu_row("bf16", 10.0, 0.001), _cpu_row("int8", 5.0, rel)])
    out = tmp_path / "o" / "r.png"
    assert run(path, "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err == (f"qbench plot: {path}: scheme 'int8' M=1: rel_fro {rel:g} cannot be drawn (a chart needs finite "
                   "values of magnitude <= 1e+100); no chart was written\n")
    assert not out.exists() and not (tmp_path / "o" / "r-pareto.png").exists()


def test_undrawable_ceiling_is_one_line_exit_2(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    path = _cpu_file(tmp_path, [_cpu_row("bf16", 10.0, 0.001)],
                 ceilings={"measured": {"memory_gbps": 1e300, "tflops": {"bf16": 10.0}}})
    assert run(path, "-o", str(tmp_path / "r.png")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qbench plot: {path}: ceilings.measured.memory_gbps 1e+300 cannot be drawn")
    assert err.count("\n") == 1


def test_plain_escapes_dollars():
    assert plot.plain("$\\frac{a}{$") == "\\$\\frac{a}{\\$" and plot.plain("int8-weight-only") == "int8-weight-only"


@pytest.mark.parametrize("label", ["$\\frac{a}{$", "$\\undefinedcmd$", "$x^2$"])
def test_mathtext_labels_are_drawn_literally(label, tmp_path, capsys):
    """A label with mathtext gave a 104-line ParseSyntaxException / ParseFatalException; now it is
    drawn as the characters it holds (exit 0, both charts written)."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    path = _cpu_file(tmp_path, [_cpu_row("bf16", 10.0, 0.001), _cpu_row(label, 5.0, 0.01)],
                 env={"device": "cpu", "device_name": label}, scenario={"name": label})
    out = tmp_path / "r.png"
    assert run(path, "-o", str(out)) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Exception" not in captured.err
    for p in (out, tmp_path / "r-pareto.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.pyplot as plt

    fig, annotations, _ = plot.draw_pareto(read_results(path), "stream")
    try:
        texts = [a.get_text() for a in annotations]
        assert f"{plot.plain(label)} 0.06 MiB" in texts
        fig.canvas.draw()  # the labels lay out without a mathtext parse
    finally:
        plt.close(fig)


def test_axis_tick_labels_do_not_overlap():
    """The gate_up chart's M = 1 panel spans under two decades: matplotlib labelled its minor ticks
    (2×10¹ 3×10¹ 4×10¹ ...) in a larger font, into an unreadable smear. No two x tick labels of a
    panel overlap now, and each panel has at least two."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig, _, _ = plot.draw_pareto(read_results(ROOT / "results" / "h200" / "llama3_8b_gate_up.json"), "stream")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in (a for a in fig.axes if a.axison):
            low, high = ax.get_xlim()
            labels = [t for t in (*ax.get_xticklabels(minor=False), *ax.get_xticklabels(minor=True))
                      if t.get_text() and low <= t.get_position()[0] <= high]
            boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
            assert len(boxes) >= 2, ax.get_title()
            assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), (ax.get_title(), [t.get_text() for t in labels])
    finally:
        plt.close(fig)
