"""``qbench plot`` of a search result (qbench.search.plot): the front's outline by hand, the chart's
parts (the front, the pure schemes, each verified recipe predicted and measured with its error bar,
the pick, the budget and the noise floor) on a hand-made file, and the refusals (one line, exit 2,
no chart written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qbench import cli
from qbench.search.plot import front_outline

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 0.02


def _measured(label: str, kld: float, unc: float, us: float) -> dict:
    return {"label": label, "kld": kld, "kld_unc": unc, "step_us": us}


def _row(scheme, kind, rnd, t, d, measured=None, pick=False) -> dict:
    return {"job": "search", "scheme": scheme, "kind": kind, "round": rnd, "m": 1, "context": 256, "predicted_us": t,
            "predicted_kld": d, "predicted_kld_unc": d / 10, "choice": [0, 0], "counts": {},
            "recipe": {"name": "int4-intx", "label": scheme} if pick else None, "measured": measured,
            "within_budget": None if measured is None else measured["kld"] + measured["kld_unc"] <= BUDGET, "pick": pick}


def search_doc(path: Path, rows: list[dict]) -> Path:
    """A search result: a committed result's environment, a search scenario, ``rows`` and a summary."""
    doc = json.loads((ROOT / "results" / "cpu" / "quality_smollm2_roles.json").read_text())
    doc["scenario"] = {"name": "search_test", "device": "cpu", "schemes": ["bf16", "int8-weight-only", "int4-intx"]}
    doc["rows"] = rows
    doc["search"] = {"budget": {"max_kld": BUDGET}, "m": 1, "context": 256, "method": "step_cpu",
                     "floor": {"scheme": "bf16", "kld": 0.0004, "kld_unc": 0.0001}, "pick_by": "solver",
                     "units": ["block 0 attn_in", "block 0 o", "block 0 mlp_in", "block 0 down"]}
    path.write_text(json.dumps(doc))
    return path


ROWS = [_row("bf16", "pure", 1, 1000.0, 0.0004, _measured("bf16", 0.0004, 0.0001, 990.0)),
        _row("int8-weight-only", "pure", 1, 700.0, 0.003),
        _row("int4-intx", "pure", 1, 500.0, 0.05, _measured("int4-intx", 0.055, 0.005, 520.0)),
        _row("r1 front 1", "front", 1, 560.0, 0.02, _measured("r1 front 1", 0.026, 0.003, 570.0)),
        _row("r2 front 1", "front", 2, 600.0, 0.012, _measured("r2 front 1", 0.015, 0.002, 610.0), pick=True),
        _row("r2 front 2", "front", 2, 650.0, 0.008)]


def test_front_outline_keeps_the_points_nothing_beats():
    pts = [(500, 0.05), (600, 0.012), (650, 0.008), (700, 0.003), (800, 0.009), (1000, 0.0004), (560, 0.06)]
    assert front_outline(pts) == [(500, 0.05), (600, 0.012), (650, 0.008), (700, 0.003), (1000, 0.0004)]
    assert front_outline([(1, 2), (1, 2), (1, 3)]) == [(1, 2)]


def test_the_chart_draws_every_part(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from qbench.readers.common import open_results
    from qbench.search.plot import draw_search

    (doc,) = open_results([str(search_doc(tmp_path / "s.json", ROWS))], command="plot")
    fig, annotations, crowded = draw_search(doc)
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert sorted(round(c.lines[0].get_ydata()[0], 6) for c in bars) == [0.0004, 0.015, 0.026, 0.055]  # measured
    labels = [h.get_label() for h in ax.get_legend().legend_handles]
    assert "predicted front, round 2: 2 points (2 mixed recipes drawn)" in labels and "pick: r2 front 1 (solver)" in labels
    assert "budget: mean KLD <= 0.02 (measured upper bound)" in labels and "noise floor: bf16 0.0004" in labels
    outline = next(line for line in ax.get_lines() if line.get_label().startswith("predicted front"))
    assert list(outline.get_xdata()) == [500, 600, 650, 700, 1000]  # the pure schemes on it, round 2's mixes
    budget = next(line for line in ax.get_lines() if line.get_label().startswith("budget"))
    assert list(budget.get_ydata()) == [BUDGET, BUDGET]
    assert ax.get_yscale() == "log" and crowded == 0
    assert sorted(a.get_text() for a in annotations) == ["bf16", "int4-intx", "int8-weight-only", "r1 front 1",
                                                         "r2 front 1"]
    plt.close(fig)


def test_qbench_plot_writes_the_search_chart(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = search_doc(tmp_path / "s.json", ROWS)
    out = tmp_path / "charts" / "search.png"
    assert cli.main(["plot", str(path), "-o", str(out)]) == 0
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.strip() == str(out)
    assert cli.main(["plot", str(path), "-o", str(out)]) == 2  # never overwritten without --force
    assert "already exists; pass --force" in capsys.readouterr().err
    for extra in (["--what", "roofline"], ["--method", "cold"]):  # ignored silently before (break trial 2026-12-06)
        assert cli.main(["plot", str(path), "-o", str(tmp_path / "x.png"), *extra]) == 2
        assert "a search result has one chart" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_a_file_with_nothing_to_draw_is_one_line_and_no_chart(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rows = [{**r, "status": "failed", "reason": "test"} for r in ROWS[:2]]
    path = search_doc(tmp_path / "s.json", rows)
    out = tmp_path / "search.png"
    assert cli.main(["plot", str(path), "-o", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{path}: no ok search row to draw; no chart was written" in line
    assert not out.exists()
