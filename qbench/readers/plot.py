"""``qbench plot RESULT.json -o FILE.png``: a roofline chart and a latency/error Pareto chart.

Figure 1 (``FILE.png``): attained TFLOP/s against arithmetic intensity, log-log, under the measured (else datasheet)
ceilings; one point per scheme × M. Figure 2 (``FILE-pareto.png``): latency against rel_fro, one panel per M,
``recommend``'s Pareto front ringed and named with stored MiB. matplotlib is optional and imported only here (Agg);
file text is drawn literally (:func:`plain`); a value that cannot be drawn is refused before any chart is written.
"""

from __future__ import annotations

import argparse
import itertools
import math
from importlib import import_module
from pathlib import Path

from qbench.judge import pareto_front, resolve_method, shape_order
from qbench.readers.common import Command, Refused, add_options, chart_folder, job_view, open_results, write_chart
from qbench.render.styles import OUTSIDE, plain, pyplot, save, scheme_colour_index, scheme_styles
from qbench.results import ResultDoc

__all__ = ["COMMAND", "DRAWABLE_MAX", "check_drawable", "draw_pareto", "plain", "pareto_groups", "place_labels",
           "plot_pareto", "plot_roofline", "points", "run_plot", "scheme_colour_index", "scheme_styles"]


def points(doc: ResultDoc | dict, method: str) -> list[dict]:
    """Plottable rows (``ok``, a ``method`` median): ``{"label", "scheme", "m", "k", "n", "tp_size", "split",
    "stored_bytes", "base", "compiled", "ai" (FLOP/byte), "tflops" (1e12 FLOP/s), "latency_us", "rel_fro" (None
    with non-finite outputs)}``."""
    out = []
    for r in ResultDoc.of(doc).rows:
        stats = r.stats(method)
        if not stats or stats.median <= 0:
            continue
        compiled = r.mode == "compiled"
        out.append({"label": f"{r.scheme} M={r.m}", "scheme": r.scheme, "m": r.m, "k": r.k, "n": r.n,
                    "tp_size": r.tp_size, "split": r.split, "stored_bytes": r.stored_bytes,
                    # the eager variant's label: a compiled scheme shares its colour
                    "base": r.scheme.removesuffix("+compiled") if compiled else r.scheme, "compiled": compiled,
                    "ai": r.arithmetic_intensity,
                    "tflops": r.flops / stats.median / 1e6 if r.flops else None,
                    "latency_us": stats.median,
                    "rel_fro": None if r.error is not None and r.error.nonfinite else r.rel_fro})
    return out


#: The largest magnitude :func:`check_drawable` lets through: the axis limits (a value times 3) and
#: the ceiling lines (an AI times a bandwidth) stay finite.
DRAWABLE_MAX = 1e100


def check_drawable(doc: ResultDoc, method: str, path: str) -> None:
    """Refuse a charted value (points' ``latency_us``, ``rel_fro``, ``ai``, ``tflops``; the ceilings' GB/s and
    TFLOP/s) that is not finite or over :data:`DRAWABLE_MAX` in magnitude.

    Raises:
        Refused: one line naming ``path``, the scheme and M or the ceiling, the quantity and its value."""
    values = [(f"scheme {p['scheme']!r} M={p['m']}: {key}", p[key]) for p in points(doc, method)
              for key in ("latency_us", "rel_fro", "ai", "tflops")]
    for source in ("measured", "datasheet"):
        ceil = getattr(doc.ceilings, source, None) if doc.ceilings is not None else None
        if ceil is not None:
            values += [(f"ceilings.{source}.memory_gbps", ceil.memory_gbps),
                       *((f"ceilings.{source}.tflops.{d}", t) for d, t in (ceil.tflops or {}).items())]
    for what, v in values:
        if v is not None and not (math.isfinite(v) and abs(v) <= DRAWABLE_MAX):
            raise Refused(f"{path}: {what} {v:g} cannot be drawn (a chart needs finite values of magnitude "
                          f"<= {DRAWABLE_MAX:g}); no chart was written")


def _dots(ax, pts: list[dict], x: str, y: str, colours: dict, markers: dict | None = None) -> list:
    """One point per row, coloured by scheme, shaped by M (``markers``), hollow when compiled; returns a legend
    handle per scheme."""
    from matplotlib.lines import Line2D

    seen: dict[str, tuple] = {}
    for p in pts:
        colour = colours[p["base"]]
        face, edge, lw = ("white", colour, 1.6) if p["compiled"] else (colour, "black", 0.4)
        ax.scatter(p[x], p[y], s=40, facecolors=[face], edgecolors=[edge], linewidths=lw,
                   marker=markers[p["m"]] if markers else "o", zorder=3)
        seen.setdefault(p["scheme"], (face, edge, lw))
    return [Line2D([], [], ls="", marker="o", markerfacecolor=face, markeredgecolor=edge, markeredgewidth=lw,
                   markersize=7, label=plain(s)) for s, (face, edge, lw) in seen.items()]


def plot_roofline(doc: ResultDoc, method: str, path: Path) -> Path:
    """Write the roofline chart of ``doc`` (``method`` medians) to ``path`` (by suffix): points named in the legend
    only, under the bandwidth slope and a line per compute peak of :meth:`~qbench.results.ResultDoc.ceiling`
    (with both, the datasheet bandwidth dashed)."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    pts = [p for p in points(doc, method) if p["ai"] and p["tflops"]]
    fig, ax = plt.subplots(figsize=(11.5, 7))
    ceil, source = doc.ceiling()
    xs = [p["ai"] for p in pts] or [1.0]
    lo, hi = min(xs) / 2, max(xs) * 2
    handles = []
    if ceil:
        bw = ceil.memory_gbps
        peaks = {d: v for d, v in (ceil.tflops or {}).items() if v}
        top = max(peaks.values(), default=1.0)
        right = max(hi, top * 1000 / bw * 2)
        handles += ax.plot([lo, top * 1000 / bw], [lo * bw / 1000, top], "k-", lw=1.4,
                           label=f"memory {bw:.0f} GB/s ({source})")
        sheet = doc.ceilings.datasheet
        if source == "measured" and sheet is not None and sheet.memory_gbps:
            sbw = sheet.memory_gbps
            stop = max((v for v in (sheet.tflops or {}).values() if v), default=top)
            handles += ax.plot([lo, stop * 1000 / sbw], [lo * sbw / 1000, stop], color="grey", ls="--", lw=1,
                               label=f"memory {sbw:.0f} GB/s (datasheet)")
        by_peak: dict[float, list[str]] = {}  # dtypes sharing a peak share one line
        for dtype, peak in peaks.items():
            by_peak.setdefault(peak, []).append(dtype)
        styles = ("-", "--", "-.", ":")
        for i, (peak, dtypes) in enumerate(sorted(by_peak.items(), reverse=True)):
            ridge = peak * 1000 / bw  # AI where the bandwidth slope meets this peak
            handles += ax.plot([max(ridge, lo), right], [peak, peak], lw=1.2, ls=styles[i % len(styles)],
                               color=plt.cm.Dark2(i % 8),
                               label=plain(f"{'/'.join(dtypes)} peak {peak:.0f} TFLOP/s (ridge AI {ridge:.0f})"))
    colours, markers = scheme_styles([p["base"] for p in pts], [p["m"] for p in pts])
    scheme_handles = _dots(ax, pts, "ai", "tflops", colours, markers)
    if len(markers) > 1:
        scheme_handles += [Line2D([], [], ls="", marker=mk, color="grey", label=f"M={m}") for m, mk in markers.items()]
    elif markers:
        scheme_handles.append(Line2D([], [], ls="", label=f"(all points M={next(iter(markers))})"))
    name = doc.env.device_name or doc.env.device or ""
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte of minimum traffic)",
           ylabel=f"attained TFLOP/s (FLOPs / {method} median)",
           title=plain(f"roofline: {doc.scenario.name or ''} on {name}; ceilings {source}"))
    if pts or handles:  # one legend, outside the axes: ceilings first, then the schemes
        gap = [Line2D([], [], ls="", label=" ")] if handles and pts else []
        ax.legend(handles=handles + gap + (scheme_handles if pts else []), **OUTSIDE)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    return save(fig, path)


#: Offsets (points) tried for a label, nearest first, and the directions at each (degrees, lower right first).
_LABEL_RADII = (7, 13, 21, 31, 43, 57, 73, 91, 112, 136, 165)
_LABEL_ANGLES = (-30, 30, -150, 150, 0, 180, -90, 90, -60, 60, -120, 120, -10, 10, -170, 170)


def place_labels(ax, items: list[tuple[float, float, str]], obstacles: list[tuple[float, float]],
                 fontsize: float = 6.5, marker_pt: float = 6.0) -> tuple[list, int]:
    """Annotate ``items`` (x, y, text; data coordinates) on ``ax`` so that no two labels overlap, none covers a
    point of ``obstacles`` (``marker_pt`` points either side) and all stay inside the axes: greedy, in order of x
    then y, each at the first free spot of :data:`_LABEL_RADII` × :data:`_LABEL_ANGLES`, a leader line beyond the
    first radius placed to cross the fewest labels and leaders; an item with no free spot goes where it overlaps
    least. Call after the layout. Returns ``(annotations, crowded)``: the annotations in placement order and how
    many found no free spot."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0
    frame = ax.get_window_extent(renderer)
    half = marker_pt * px
    taken = [Bbox.from_bounds(x - half, y - half, 2 * half, 2 * half)
             for x, y in ax.transData.transform(obstacles)] if obstacles else []
    labels: list[Bbox] = []
    leaders: list[list[tuple[float, float]]] = []  # points along each leader line drawn, pixels
    ends: list[tuple[tuple[float, float], tuple[float, float]]] = []  # each leader: point, label centre
    pad = 1.5

    def side(o, u, v):
        return (u[0] - o[0]) * (v[1] - o[1]) - (u[1] - o[1]) * (v[0] - o[0])

    def cross(p: tuple, q: tuple, a: tuple, b: tuple) -> bool:
        """Whether segments p-q and a-b properly intersect."""
        return side(p, q, a) * side(p, q, b) < 0 and side(a, b, p) * side(a, b, q) < 0

    def centre(box: Bbox) -> tuple[float, float]:
        return (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2

    def along(x0: float, y0: float, box: Bbox) -> list[tuple[float, float]]:
        """Points on the segment from (x0, y0) to ``box``'s centre, outside the box."""
        cx, cy = centre(box)
        pts = [(x0 + (cx - x0) * t / 24, y0 + (cy - y0) * t / 24) for t in range(2, 24)]
        return [(u, v) for u, v in pts if not box.contains(u, v)]

    def crossings(box: Bbox, segment: list[tuple[float, float]]) -> int:
        """Leader lines through ``box``, and labels ``segment`` passes through."""
        return sum(any(box.contains(u, v) for u, v in line) for line in leaders) + \
            sum(any(other.contains(u, v) for u, v in segment) for other in labels)

    def overlap(a: Bbox, b: Bbox) -> float:
        w, h = min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0)
        return w * h if w > 0 and h > 0 else 0.0

    out, crowded = [], 0
    for x, y, text in sorted(items):
        size = Text(0, 0, text, fontsize=fontsize, figure=fig).get_window_extent(renderer)
        w, h = size.width, size.height
        ax_px, ay_px = ax.transData.transform((x, y))
        best = None  # ((overlap area, leader crossings), dx, dy, ha, va, box)
        for r, deg in itertools.product(_LABEL_RADII, _LABEL_ANGLES):
            c, s_ = math.cos(math.radians(deg)), math.sin(math.radians(deg))
            ha, fx = ("left", 0.0) if c > 0.3 else ("right", 1.0) if c < -0.3 else ("center", 0.5)
            va, fy = ("bottom", 0.0) if s_ > 0.3 else ("top", 1.0) if s_ < -0.3 else ("center", 0.5)
            box = Bbox.from_bounds(ax_px + r * c * px - w * fx - pad, ay_px + r * s_ * px - h * fy - pad,
                                   w + 2 * pad, h + 2 * pad)
            area = float(sum(overlap(box, o) for o in labels) + sum(overlap(box, o) for o in taken))
            if box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1:
                area += w * h * 10
            lead = r > _LABEL_RADII[0]  # a leader line: better not across a label or another leader
            crossed = crossings(box, along(ax_px, ay_px, box) if lead else []) + \
                (sum(cross((ax_px, ay_px), centre(box), a, b) for a, b in ends) if lead else 0)
            if best is None or (area, crossed) < best[0]:
                best = ((area, crossed), r * c, r * s_, ha, va, box)
            if (area, crossed) == (0.0, 0):
                break
        (area, _), dx, dy, ha, va, box = best
        crowded += int(area > 0)
        arrow = None if math.hypot(dx, dy) <= _LABEL_RADII[0] else \
            {"arrowstyle": "-", "color": "0.45", "lw": 0.5, "shrinkA": 0, "shrinkB": 3}
        out.append(ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                               fontsize=fontsize, arrowprops=arrow, zorder=4, annotation_clip=False))
        if arrow is not None:
            leaders.append(along(ax_px, ay_px, box))
            ends.append(((ax_px, ay_px), centre(box)))
        labels.append(box)
    return out, crowded


def pareto_groups(doc: ResultDoc | dict, method: str) -> list[dict]:
    """The points of ``doc`` by (M, K, N, tp_size, split), ascending: ``{"m", "k", "n", "tp_size", "split",
    "points", "front"}``, ``front`` the schemes on :func:`qbench.judge.pareto_front` of the points with an error
    (also an exact 0): the front ``recommend`` reports."""
    groups: dict[tuple, dict] = {}
    keys = ("m", "k", "n", "tp_size", "split")
    for p in points(doc, method):
        groups.setdefault(tuple(p[k] for k in keys), {**{k: p[k] for k in keys}, "points": []})["points"].append(p)
    for g in groups.values():
        g["front"] = {p["scheme"] for p in pareto_front([p for p in g["points"] if p["rel_fro"] is not None])}
    return [groups[key] for key in sorted(groups, key=shape_order)]


def draw_pareto(doc: ResultDoc, method: str):
    """The latency-vs-error figure of ``doc``: a log-log panel per :func:`pareto_groups` group, the front ringed and
    named with stored MiB. Returns ``(figure, annotations, crowded)``."""
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    groups = [g for g in pareto_groups(doc, method) if any(p["rel_fro"] and p["rel_fro"] > 0 for p in g["points"])]
    n = max(len(groups), 1)
    single = n == 1
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(11, 6.5) if single else (5.8 * ncols, 4.3 * nrows), dpi=120,
                             sharey=True, squeeze=False)
    flat = list(axes.flat)
    shapes = len({(g["k"], g["n"], g["tp_size"], g["split"]) for g in groups})
    colours, _ = scheme_styles([p["base"] for g in groups for p in g["points"]], [])
    plotted = [(g, [p for p in g["points"] if p["rel_fro"] and p["rel_fro"] > 0]) for g in groups]
    handles: dict[str, Line2D] = {}
    for ax, (g, pts) in zip(flat, plotted):
        for h in _dots(ax, pts, "latency_us", "rel_fro", colours):
            handles.setdefault(h.get_label(), h)
        for p in pts:
            if p["scheme"] in g["front"]:
                ax.scatter(p["latency_us"], p["rel_fro"], s=150, facecolors="none", edgecolors="black",
                           linewidths=0.9, zorder=2)
        lo, hi = min(p["latency_us"] for p in pts) / 1.6, max(p["latency_us"] for p in pts) * 1.6
        ax.set(xscale="log", yscale="log", xlim=(lo, hi))
        ax.xaxis.set_minor_formatter(NullFormatter())
        if math.log10(hi / lo) < 2:  # under two decades: labels at 1, 2 and 5 × 10^k
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if not single:
            ax.set_title(f"M={g['m']}" + (f", K={g['k']}, N={g['n']}" if shapes > 1 else "")
                         + (f", tp_size={g['tp_size']} {g['split']}" if g["tp_size"] is not None else ""), fontsize=9)
        ax.grid(True, which="both", alpha=0.2)
        ax.tick_params(labelsize=7.5, labelleft=True)
        ax.set_xlabel(f"{method} median (µs)", fontsize=8)
        ax.set_ylabel("rel. Frobenius error", fontsize=8)
    errs = [p["rel_fro"] for _, pts in plotted for p in pts]
    if errs:
        flat[0].set_ylim(min(errs) / 3, max(errs) * 3)
    for ax in flat[len(plotted):]:
        ax.set_axis_off()
    m_note = f" (all points M={groups[0]['m']})" if single and groups else ""
    heading = plain(f"latency vs error: {doc.scenario.name or ''}{m_note}; ringed and named: the Pareto front over "
                    "(latency, error, stored MiB), as qbench recommend")
    legend = [*handles.values(), Line2D([], [], ls="", marker="o", markersize=11, markerfacecolor="none",
                                        markeredgecolor="black", label="on the Pareto front")]
    if single:
        flat[0].set_title(heading, fontsize=10)
        flat[0].set_xlabel(f"latency, {method} median (µs)")
        flat[0].set_ylabel("relative Frobenius error vs float64")
        if handles:
            flat[0].legend(handles=legend, title="scheme", title_fontsize=8, **OUTSIDE)
        fig.tight_layout()
    else:
        fig.suptitle(heading, fontsize=11)
        if nrows * ncols > n:  # a free panel holds the legend
            flat[-1].legend(handles=legend, loc="upper left", fontsize=7.5, title="scheme", title_fontsize=8,
                            ncols=1 if len(legend) <= 20 else 2)
            fig.tight_layout(rect=(0, 0, 1, 0.975))  # leave the suptitle its own line
        else:
            fig.tight_layout(rect=(0, 0, 0.84, 0.975))
            fig.legend(handles=legend, loc="upper left", bbox_to_anchor=(0.85, 0.95), fontsize=7.5,
                       title="scheme", title_fontsize=8)
    annotations, crowded = [], 0
    for ax, (g, pts) in zip(flat, plotted):
        items = [(p["latency_us"], p["rel_fro"], plain(f"{p['scheme']} {p['stored_bytes'] / 2**20:.2f} MiB"
                  if p.get("stored_bytes") else p["scheme"])) for p in pts if p["scheme"] in g["front"]]
        placed, bad = place_labels(ax, items, [(p["latency_us"], p["rel_fro"]) for p in pts])
        annotations += placed
        crowded += bad
    return fig, annotations, crowded


def plot_pareto(doc: ResultDoc, method: str, path: Path) -> Path:
    """Write :func:`draw_pareto`'s chart to ``path`` (.png, .svg or .pdf)."""
    return save(draw_pareto(doc, method)[0], path)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("result", help="result JSON written by qbench run")
    p.add_argument("-o", "--out", "--output", dest="output", default=None,
                   help="FILE.png, .svg or .pdf: the roofline; the Pareto chart goes to FILE-pareto.<same suffix> "
                        "(default: the result's path with .png)")
    p.add_argument("--what", choices=("roofline", "pareto", "both"), default=None,
                   help="a per-layer result's charts to draw (default both)")
    p.add_argument("--force", action="store_true", help="overwrite existing chart files")
    add_options(p, method=None)


def run_plot(args: argparse.Namespace) -> int:
    """Run ``qbench plot`` from parsed ``args``; returns 0; never overwrites without ``--force``.

    Raises:
        Refused: bad input (one line)."""
    try:
        import_module("matplotlib")
    except ImportError:
        raise Refused("needs matplotlib; install it from the qbench checkout with: pip install -e '.[plot]'") from None
    docs = open_results([args.result], command="plot")
    if args.output is None:  # beside the result, never over an existing chart without --force
        args.output = str(Path(args.result).with_suffix(".png"))
    view = job_view(docs, "plot")
    if view is not None:  # a job kind's own chart (qbench.jobs)
        return view(args, [args.result], docs)
    (doc,) = docs
    method, note = resolve_method(doc, args.method)
    check_drawable(doc, method, args.result)
    out = Path(args.output)
    charts = [(out, plot_roofline), (out.with_name(f"{out.stem}-pareto{out.suffix}"), plot_pareto)]
    charts = [c for c, kind in zip(charts, ("roofline", "pareto")) if (args.what or "both") in (kind, "both")]
    chart_folder(out, [target for target, _ in charts], getattr(args, "force", False))
    print(f"latency = {method} median" + (f" ({note})" if note else ""))
    for target, draw in charts:
        write_chart(target, lambda: draw(doc, method, target))
    return 0


COMMAND = Command(
    name="plot", help="roofline and latency/error charts (.png, .svg or .pdf)", description=__doc__.split("\n\n")[0],
    exit_codes="0; 2 bad input (an existing chart without --force, a suffix other than .png/.svg/.pdf, a path "
               "that cannot be written)",
    add_arguments=_add_arguments, run=run_plot)
