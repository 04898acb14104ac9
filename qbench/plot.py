"""``qbench plot RESULT.json -o FILE.png``: a roofline chart and a latency/error Pareto chart.

Figure 1 (``FILE.png``): x = arithmetic intensity (FLOP/byte), y = attained TFLOP/s
(``flops / median`` of the method), log-log, with the ceilings drawn: the bandwidth slope
``AI * GB/s / 1000`` (TFLOP/s) and one horizontal line per compute dtype, from
``doc["ceilings"]["measured"]``, else ``["datasheet"]`` (none on CPU). One labelled point per
scheme x M.

Figure 2 (``FILE-pareto.png``): latency median (µs) against rel_fro, log-log, one colour per M,
with each M's Pareto front over (latency, rel_fro) drawn as a step line.

The method is ``stream`` unless ``--method`` says otherwise; a file without any stream time
(written before it existed) falls back to ``cold``, or ``cpu`` on a CPU result. The command
prints the method it used.

matplotlib is optional (``pip install 'qbench[plot]'``) and is imported only here, with the Agg
backend. Exit status: 0, or 2 on bad input or missing matplotlib.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qbench.recommend import pareto_front
from qbench.results import (
    DECISION_METHOD,
    METHOD_CHOICES,
    ResultsError,
    latency_stats,
    incomplete_warning,
    read_results,
    resolve_method,
)

__all__ = ["plot_pareto", "plot_roofline", "points", "register", "run_plot"]


def points(doc: dict, method: str) -> list[dict]:
    """Plottable rows: ``ok`` rows with a ``method`` median; each ``{"label", "scheme", "m", "base"
    (registry name), "compiled" (bool),
    "ai" (FLOP/byte), "tflops" (attained, 1e12 FLOP/s), "latency_us", "rel_fro"}``."""
    out = []
    for r in doc.get("rows") or []:
        stats = latency_stats(r, method)
        if not stats or stats["median"] <= 0:
            continue
        err = r.get("error") or {}
        rel = None if err.get("nonfinite") else err.get("rel_fro")
        out.append({"label": f"{r['scheme']} M={r['m']}", "scheme": r["scheme"], "m": r["m"],
                    "base": r["scheme"].replace("+compiled", ""), "compiled": r.get("mode") == "compiled",
                    "ai": r.get("arithmetic_intensity"),
                    "tflops": r["flops"] / stats["median"] / 1e6 if r.get("flops") else None,
                    "latency_us": stats["median"], "rel_fro": rel})
    return out


def _ceilings(doc: dict) -> tuple[dict | None, str]:
    c = doc.get("ceilings") or {}
    for source in ("measured", "datasheet"):
        if c.get(source) and c[source].get("memory_gbps"):
            return c[source], source
    return None, "none"


#: Marker per M (in ascending M order), so one chart can hold a sweep of M values.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def scheme_colour_index(base: str) -> int:
    """A scheme's fixed colour slot: its place in the registry (``qbench.schemes.names()``), so a
    scheme has the same colour in every chart of every file; a name outside the registry (an old
    file) comes after them, in a slot from its name."""
    from qbench import schemes

    names = schemes.names()
    if base in names:
        return names.index(base)
    return len(names) + sum(map(ord, base)) % 20


def _styles(pts: list[dict]) -> tuple[dict, dict]:
    """Colour per scheme fixed by the registry order (:func:`scheme_colour_index`; 40 colours:
    tab20's dark shades, its light ones, then tab20b), the same in every chart; marker per M
    (ascending). A compiled variant shares its eager scheme's colour; an option variant
    (``fp8-dynamic[kernel_preference=mslk]``) takes its scheme's slot plus the registry's size."""
    import matplotlib

    from qbench import schemes

    # 40 distinct colours: tab20 (dark shades first, then light) then tab20b
    tab20, tab20b = matplotlib.colormaps["tab20"], matplotlib.colormaps["tab20b"]
    palette = [tab20(2 * i) for i in range(10)] + [tab20(2 * i + 1) for i in range(10)] + \
        [tab20b(i) for i in range(20)]
    bases = list(dict.fromkeys(p["base"] for p in pts))
    count = len(schemes.names())

    def slot(base: str) -> int:
        name, variant = (base.split("[", 1)[0], True) if "[" in base else (base, False)
        return scheme_colour_index(name) + (count if variant else 0)

    colours = {b: palette[slot(b) % len(palette)] for b in bases}
    markers = {m: _MARKERS[i % len(_MARKERS)] for i, m in enumerate(sorted({p["m"] for p in pts}))}
    return colours, markers


def _scatter_with_legend(ax, pts: list[dict], x: str, y: str) -> list:
    """One point per row, coloured by registry scheme, shaped by M, hollow when compiled; returns
    the legend handles (every scheme label and, when there are several, every M)."""
    from matplotlib.lines import Line2D

    colours, markers = _styles(pts)
    labels: dict[str, tuple] = {}
    for p in pts:
        colour = colours[p["base"]]
        face = "white" if p["compiled"] else colour
        ax.scatter(p[x], p[y], s=40, facecolors=[face], edgecolors=[colour if p["compiled"] else "black"],
                   linewidths=1.6 if p["compiled"] else 0.4, marker=markers[p["m"]], zorder=3)
        labels.setdefault(p["scheme"], (colour, face, p["compiled"]))
    handles = [Line2D([], [], ls="", marker="o", markerfacecolor=face, markeredgecolor=colour if compiled else "black",
                      markeredgewidth=1.6 if compiled else 0.4, markersize=7, label=s)
               for s, (colour, face, compiled) in labels.items()]
    if len(markers) > 1:
        handles += [Line2D([], [], ls="", marker=mk, color="grey", label=f"M={m}") for m, mk in markers.items()]
    elif markers:
        handles.append(Line2D([], [], ls="", label=f"(all points M={next(iter(markers))})"))
    return handles


def plot_roofline(doc: dict, method: str, path: Path) -> Path:
    """Write the roofline chart of ``doc`` (``method`` medians) to ``path`` (PNG).

    Points are coloured by scheme and shaped by M (legend on the right, no text on the points, so
    schemes at the same AI cannot hide each other's names). The ceilings come from
    ``doc["ceilings"]["measured"]`` (else ``["datasheet"]``): the bandwidth slope and one
    horizontal line per distinct compute peak, named in the legend with its dtypes and TFLOP/s;
    when both are present the datasheet bandwidth is drawn dashed for comparison.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in points(doc, method) if p["ai"] and p["tflops"]]
    fig, ax = plt.subplots(figsize=(11.5, 7))
    ceil, source = _ceilings(doc)
    xs = [p["ai"] for p in pts] or [1.0]
    lo, hi = min(xs) / 2, max(xs) * 2
    ceiling_handles = []
    if ceil:
        bw = ceil["memory_gbps"]
        peaks = {d: v for d, v in (ceil.get("tflops") or {}).items() if v}
        top = max(peaks.values(), default=1.0)
        right = max(hi, top * 1000 / bw * 2)
        line, = ax.plot([lo, top * 1000 / bw], [lo * bw / 1000, top], "k-", lw=1.4,
                        label=f"memory {bw:.0f} GB/s ({source})")
        ceiling_handles.append(line)
        sheet = ((doc.get("ceilings") or {}).get("datasheet") or {})
        if source == "measured" and sheet.get("memory_gbps"):
            sbw = sheet["memory_gbps"]
            stop = max((v for v in (sheet.get("tflops") or {}).values() if v), default=top)
            line, = ax.plot([lo, stop * 1000 / sbw], [lo * sbw / 1000, stop], color="grey", ls="--", lw=1,
                            label=f"memory {sbw:.0f} GB/s (datasheet)")
            ceiling_handles.append(line)
        by_peak: dict[float, list[str]] = {}  # dtypes sharing a peak share one line
        for dtype, peak in peaks.items():
            by_peak.setdefault(peak, []).append(dtype)
        styles = ("-", "--", "-.", ":")
        for i, (peak, dtypes) in enumerate(sorted(by_peak.items(), reverse=True)):
            ridge = peak * 1000 / bw  # AI where the bandwidth slope meets this peak
            line, = ax.plot([max(ridge, lo), right], [peak, peak], lw=1.2, ls=styles[i % len(styles)],
                            color=plt.cm.Dark2(i % 8),
                            label=f"{'/'.join(dtypes)} peak {peak:.0f} TFLOP/s (ridge AI {ridge:.0f})")
            ceiling_handles.append(line)
    point_handles = _scatter_with_legend(ax, pts, "ai", "tflops")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte of minimum traffic)")
    ax.set_ylabel(f"attained TFLOP/s (FLOPs / {method} median)")
    name = (doc.get("env") or {}).get("device_name") or (doc.get("env") or {}).get("device", "")
    scen = (doc.get("scenario") or {}).get("name", "")
    ax.set_title(f"roofline: {scen} on {name}; ceilings {source}")
    if pts or ceiling_handles:  # one legend, outside the axes: ceilings first, then the schemes
        from matplotlib.lines import Line2D

        gap = [Line2D([], [], ls="", label=" ")] if ceiling_handles and pts else []
        ax.legend(handles=ceiling_handles + gap + (point_handles if pts else []), loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize=7.5, borderaxespad=0)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # keep the legends outside the axes
    plt.close(fig)
    return path


def plot_pareto(doc: dict, method: str, path: Path) -> Path:
    """Write latency (µs) against rel_fro, with each M's Pareto front, to ``path`` (PNG).

    Points are coloured by scheme and shaped by M (legend on the right); the schemes on a Pareto
    front are also named next to their point, and each M's front is a grey step line.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in points(doc, method) if p["rel_fro"] and p["rel_fro"] > 0]
    fig, ax = plt.subplots(figsize=(11, 6.5))
    handles = _scatter_with_legend(ax, pts, "latency_us", "rel_fro")
    styles = ("-", "--", "-.", ":")
    placed: list[tuple[float, float]] = []
    for i, m in enumerate(sorted({p["m"] for p in pts})):
        group = [p for p in pts if p["m"] == m]
        front = sorted(pareto_front(group, ("latency_us", "rel_fro")), key=lambda p: p["latency_us"])
        ax.step([p["latency_us"] for p in front], [p["rel_fro"] for p in front], where="post",
                color="grey", ls=styles[i % len(styles)], lw=1, zorder=2)
        for p in front:
            if any(abs(p["latency_us"] / qx - 1) < 0.15 and abs(p["rel_fro"] / qy - 1) < 0.3 for qx, qy in placed):
                continue  # a name already sits there (same scheme at a neighbouring M); colour and shape tell
            placed.append((p["latency_us"], p["rel_fro"]))
            ax.annotate(p["scheme"] + (f" M={m}" if len({q['m'] for q in pts}) > 1 else ""),
                        (p["latency_us"], p["rel_fro"]), fontsize=7, xytext=(5, -3),
                        textcoords="offset points", va="top")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"latency, {method} median (µs)")
    ax.set_ylabel("relative Frobenius error vs float64")
    scen = (doc.get("scenario") or {}).get("name", "")
    ax.set_title(f"latency vs error: {scen}; grey steps: Pareto front per M (named points)")
    if pts:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5,
                  title="scheme", title_fontsize=8, borderaxespad=0)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # keep the legends outside the axes
    plt.close(fig)
    return path


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``plot`` subcommand to ``subparsers``; it sets ``func=run_plot``."""
    p = subparsers.add_parser("plot", help="roofline and latency/error charts (PNG)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("result", help="result JSON written by qbench run")
    p.add_argument("-o", "--out", "--output", dest="output", required=True,
                   help="FILE.png, .svg or .pdf: the roofline; the Pareto chart goes to FILE-pareto.<same suffix>")
    p.add_argument("--what", choices=("roofline", "pareto", "both"), default="both")
    p.add_argument("--force", action="store_true", help="overwrite existing PNG files")
    p.add_argument("--method", default=None, choices=METHOD_CHOICES,
                   help=f"timing method (default {DECISION_METHOD}; a file without it: cold, or cpu on CPU)")
    p.set_defaults(func=run_plot)
    return p


def run_plot(args: argparse.Namespace) -> int:
    """Run ``qbench plot`` from parsed ``args``; returns the exit status (0 or 2). Like ``qbench
    run``, it never overwrites a file without ``--force``."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("qbench plot: needs matplotlib; install it with: pip install 'qbench[plot]'",
              file=sys.stderr)
        return 2
    try:
        doc = read_results(args.result)
        if incomplete_warning(doc, args.result):
            print(incomplete_warning(doc, args.result), file=sys.stderr)
    except ResultsError as exc:
        print(f"qbench plot: {exc}", file=sys.stderr)
        return 2
    method, note = resolve_method(doc, args.method)
    out = Path(args.output)
    suffix = out.suffix.lower()
    if suffix not in (".png", ".svg", ".pdf"):
        print(f"qbench plot: -o must name a .png, .svg or .pdf file, got {out}", file=sys.stderr)
        return 2
    pareto_path = out.with_name(f"{out.stem}-pareto{out.suffix}")
    targets = ([out] if args.what in ("roofline", "both") else []) + \
              ([pareto_path] if args.what in ("pareto", "both") else [])
    existing = [str(t) for t in targets if t.exists()]
    if existing and not getattr(args, "force", False):
        print(f"qbench plot: {', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
              "pass --force to overwrite", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"latency = {method} median" + (f" ({note})" if note else ""))
    if args.what in ("roofline", "both"):
        print(plot_roofline(doc, method, out))
    if args.what in ("pareto", "both"):
        print(plot_pareto(doc, method, pareto_path))
    return 0
