"""``qbench plot SEARCH.json -o FILE.png``: a search's time-vs-KLD chart.

One panel: step time (x, µs) against mean KL divergence (y, nats/token, log when every value drawn
is positive). Drawn: the last round's predicted front (a step line through its recipes and the pure
candidates on it), the pure candidates (squares, named), each verified recipe twice, predicted
(hollow) and measured (filled, with the KLD's uncertainty as an error bar, at its measured step when
the step job gave one), joined by a dotted line; the pick (a star); the budget (``max_kld``, a red
dashed line) and the noise floor (the floor scheme against the reference, grey). Labels placed by
:func:`qbench.readers.plot.place_labels` (none overlap). The numbers come from the file's rows
(:class:`qbench.search.row.SearchRow`) and its ``search`` summary; nothing is recomputed but the
front's outline (the points no other point beats on both axes).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from qbench.readers.common import Refused, one_chart, refuse_options
from qbench.readers.plot import DRAWABLE_MAX, place_labels, plain, scheme_styles
from qbench.render.styles import OUTSIDE, pyplot, save
from qbench.search.view import checked, front_points, plural, summary_of


def _x(r) -> float:
    """Where a verified recipe's measured point sits on the time axis: its measured step, else its prediction."""
    return r.measured.step_us if r.measured is not None and r.measured.step_us is not None else r.predicted_us


def front_outline(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of ``(time, kld)`` no other point beats on both (at most as slow and at most as
    damaging, better on one), sorted by time: the front's outline, KLD falling as time grows."""
    out = []
    for t, d in sorted(set(points)):
        if not out or d < out[-1][1]:
            out.append((t, d))
    return out


def check_drawable(doc: Any, path: str) -> None:
    """Raise :class:`Refused` (one line naming ``path``, the row and the value) when the file has no
    ok row to draw, or a value the chart draws is beyond :data:`qbench.readers.plot.DRAWABLE_MAX`
    (the rows' values are finite: their model refuses NaN and infinity). Called before any file is written."""
    rows = [r for r in doc.rows if r.status == "ok"]
    if not rows:
        raise Refused(f"{path}: no ok search row to draw; no chart was written")
    for r in rows:
        values = [("predicted_us", r.predicted_us), ("predicted_kld", r.predicted_kld)]
        if r.measured is not None:
            values += [("measured.kld", r.measured.kld), ("measured.kld_unc", r.measured.kld_unc),
                       ("measured.step_us", r.measured.step_us)]
        for key, v in values:
            if v is not None and not (math.isfinite(v) and abs(v) <= DRAWABLE_MAX):
                raise Refused(f"{path}: row {r.scheme!r} round {r.round}: {key} {v:g} cannot be drawn (a chart needs "
                              f"finite values of magnitude <= {DRAWABLE_MAX:g}); no chart was written")


def draw_search(doc: Any):
    """The figure of a search result ``doc`` (see the module docstring). Returns ``(figure,
    annotations, crowded)`` as :func:`qbench.readers.plot.draw_pareto` does; the caller saves and closes it."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    s = summary_of(doc)
    rows = [r for r in doc.rows if r.status == "ok"]
    last = max(r.round for r in rows)
    pure = [r for r in rows if r.kind == "pure"]
    front = [r for r in rows if r.kind == "front" and r.round == last]
    verified = [r for r in rows if r.measured is not None]
    budget = (s.get("budget") or {}).get("max_kld")
    floor = s.get("floor") or {}
    ys = [r.predicted_kld for r in rows] + [v for r in verified for v in (r.measured.kld - r.measured.kld_unc,
                                                                           r.measured.kld + r.measured.kld_unc)]
    ys += [v for v in (budget, floor.get("kld")) if v is not None]
    log_y = all(y > 0 for y in ys)

    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=120)
    colours, _ = scheme_styles([r.scheme for r in pure], [])
    handles = []
    outline = front_outline([(r.predicted_us, r.predicted_kld) for r in front + pure])
    if outline:
        said = f"predicted front, round {last}: {plural(front_points(doc), 'point')} ({len(front)} mixed recipes drawn)"
        line, = ax.plot([p[0] for p in outline], [p[1] for p in outline], color="0.35", lw=1.2, drawstyle="steps-post",
                        zorder=1, label=said)
        ax.scatter([r.predicted_us for r in front], [r.predicted_kld for r in front], s=12, color="0.45", zorder=2)
        handles.append(line)
    for r in pure:
        ax.scatter(r.predicted_us, r.predicted_kld, s=70, marker="s", color=colours[r.scheme], edgecolors="black",
                   linewidths=0.5, zorder=3)
        handles.append(Line2D([], [], ls="", marker="s", color=colours[r.scheme], markeredgecolor="black",
                              markersize=7, label=plain(f"{r.scheme} (every unit)")))
    for r in verified:
        x = _x(r)
        ax.plot([r.predicted_us, x], [r.predicted_kld, r.measured.kld], ls=":", color="tab:blue", lw=0.9, zorder=2)
        ax.scatter(r.predicted_us, r.predicted_kld, s=46, facecolors="white", edgecolors="tab:blue", linewidths=1.3,
                   zorder=4)
        ax.errorbar(x, r.measured.kld, yerr=r.measured.kld_unc, fmt="o", color="tab:blue", ms=5, capsize=3, zorder=5)
    if verified:
        handles += [Line2D([], [], ls="", marker="o", markerfacecolor="white", markeredgecolor="tab:blue",
                           label="verified recipe: predicted"),
                    Line2D([], [], ls="-", marker="o", color="tab:blue",
                           label="verified recipe: measured (± KLD uncertainty; at its measured step)")]
    pick = next((r for r in rows if r.pick), None)
    if pick is not None:
        px, py = (_x(pick), pick.measured.kld) if pick.measured is not None else (pick.predicted_us, pick.predicted_kld)
        ax.scatter(px, py, s=260, marker="*", color="gold", edgecolors="black", linewidths=0.8, zorder=6)
        handles.append(Line2D([], [], ls="", marker="*", color="gold", markeredgecolor="black", markersize=13,
                              label=plain(f"pick: {pick.scheme} ({s.get('pick_by') or 'solver'})")))
    if budget is not None:
        handles.append(ax.axhline(budget, color="tab:red", ls="--", lw=1.2, zorder=1,
                                  label=f"budget: mean KLD <= {budget:g} (measured upper bound)"))
    if floor.get("kld") is not None:
        handles.append(ax.axhline(floor["kld"], color="0.6", ls="-.", lw=1, zorder=1,
                                  label=plain(f"noise floor: {floor.get('scheme', '?')} {floor['kld']:.3g}")))
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(plain(f"step time, µs ({s.get('method', 'step')}; predicted: the step's fixed rest + each unit's time)"))
    ax.set_ylabel("mean KL divergence vs the reference (nats/token)" + (", log" if log_y else ""))
    title = f"search: {doc.scenario.name or ''}, M = {s.get('m')}, context {s.get('context')}"
    rest = "" if s.get("fixed_kld") is None else "the rest's + "
    ax.set_title(plain(title + f"; predicted KLD: {rest}the sum of each unit's KLD alone"), fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(handles=handles, **OUTSIDE)
    fig.tight_layout()
    items = [(r.predicted_us, r.predicted_kld, plain(r.scheme)) for r in pure]
    items += [(_x(r), r.measured.kld, plain(r.scheme)) for r in verified if r.kind != "pure"]
    obstacles = [(r.predicted_us, r.predicted_kld) for r in rows] + [(_x(r), r.measured.kld) for r in verified]
    annotations, crowded = place_labels(ax, items, obstacles)
    return fig, annotations, crowded


def plot_search(doc: Any, path: Path) -> Path:
    """Write :func:`draw_search`'s chart to ``path`` (.png, .svg or .pdf)."""
    return save(draw_search(doc)[0], path)


def plot_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench plot SEARCH.json -o FILE``: :func:`plot_search` of the one file (``--what`` and
    ``--method`` are refused: the search's own method timed its points)."""
    refuse_options(args, ("what", "method"), f"{paths[0]}: a search result has one chart (its own method timed its "
                   "points); {flag} applies to per-layer results")
    (doc,) = docs
    checked(doc, paths[0])
    check_drawable(doc, paths[0])
    return one_chart(args, lambda out: plot_search(doc, out))
