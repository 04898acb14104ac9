"""``qbench plot RESULT.json -o FILE.png``: a roofline chart and a latency/error Pareto chart.

Figure 1 (``FILE.png``): x = arithmetic intensity (FLOP/byte), y = attained TFLOP/s
(``flops / median`` of the method), log-log, with the ceilings drawn: the bandwidth slope
``AI * GB/s / 1000`` (TFLOP/s) and one horizontal line per compute dtype, from
``doc["ceilings"]["measured"]``, else ``["datasheet"]`` (none on CPU). One labelled point per
scheme x M.

Figure 2 (``FILE-pareto.png``): latency median (µs) against rel_fro, log-log, one colour per M,
with each M's Pareto front over (latency, rel_fro) drawn as a step line.

matplotlib is optional (``pip install 'qbench[plot]'``) and is imported only here, with the Agg
backend. Exit status: 0, or 2 on bad input or missing matplotlib.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qbench.recommend import pareto_front
from qbench.results import ResultsError, latency_stats, read_results, resolve_method

__all__ = ["plot_pareto", "plot_roofline", "points", "register", "run_plot"]


def points(doc: dict, method: str) -> list[dict]:
    """Plottable rows: ``ok`` rows with a ``method`` median; each ``{"label", "scheme", "m",
    "ai" (FLOP/byte), "tflops" (attained, 1e12 FLOP/s), "latency_us", "rel_fro"}``."""
    out = []
    for r in doc.get("rows") or []:
        stats = latency_stats(r, method)
        if not stats or stats["median"] <= 0:
            continue
        err = r.get("error") or {}
        rel = None if err.get("nonfinite") else err.get("rel_fro")
        out.append({"label": f"{r['scheme']} M={r['m']}", "scheme": r["scheme"], "m": r["m"],
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


def plot_roofline(doc: dict, method: str, path: Path) -> Path:
    """Write the roofline chart of ``doc`` (``method`` medians) to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in points(doc, method) if p["ai"] and p["tflops"]]
    fig, ax = plt.subplots(figsize=(9, 6))
    ceil, source = _ceilings(doc)
    xs = [p["ai"] for p in pts] or [1.0]
    lo, hi = min(xs) / 2, max(xs) * 2
    if ceil:
        bw = ceil["memory_gbps"]
        by_peak: dict[float, list[str]] = {}  # dtypes sharing a peak share one line
        for dtype, peak in (ceil.get("tflops") or {}).items():
            by_peak.setdefault(peak, []).append(dtype)
        for peak, dtypes in sorted(by_peak.items()):
            ridge = peak * 1000 / bw  # AI where the bandwidth slope meets this peak
            ax.plot([max(ridge, lo), max(hi, ridge * 2)], [peak, peak], lw=1, alpha=0.6)
            ax.annotate(f"{'/'.join(dtypes)} {peak:g} TFLOP/s", (max(hi, ridge * 2), peak),
                        fontsize=7, ha="right", va="bottom")
        top = max((ceil.get("tflops") or {"x": 1}).values())
        ax.plot([lo, top * 1000 / bw], [lo * bw / 1000, top], "k-", lw=1.2,
                label=f"{bw:g} GB/s ({source})")
    for p in pts:
        ax.scatter(p["ai"], p["tflops"], s=18)
        ax.annotate(p["label"], (p["ai"], p["tflops"]), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel(f"attained TFLOP/s (FLOPs / {method} median)")
    name = (doc.get("env") or {}).get("device_name") or (doc.get("env") or {}).get("device", "")
    ax.set_title(f"roofline: {name}, ceilings {source}")
    if ceil:
        ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_pareto(doc: dict, method: str, path: Path) -> Path:
    """Write latency (µs) against rel_fro, with each M's Pareto front, to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in points(doc, method) if p["rel_fro"] and p["rel_fro"] > 0]
    fig, ax = plt.subplots(figsize=(9, 6))
    for m in sorted({p["m"] for p in pts}):
        group = [p for p in pts if p["m"] == m]
        sc = ax.scatter([p["latency_us"] for p in group], [p["rel_fro"] for p in group],
                        s=18, label=f"M={m}")
        for p in group:
            ax.annotate(p["scheme"], (p["latency_us"], p["rel_fro"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
        front = sorted(pareto_front(group, ("latency_us", "rel_fro")), key=lambda p: p["latency_us"])
        ax.step([p["latency_us"] for p in front], [p["rel_fro"] for p in front], where="post",
                color=sc.get_facecolor()[0], lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"latency, {method} median (µs)")
    ax.set_ylabel("relative Frobenius error vs float64")
    ax.set_title("latency vs error; lines: Pareto front per M")
    if pts:
        ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``plot`` subcommand to ``subparsers``; it sets ``func=run_plot``."""
    p = subparsers.add_parser("plot", help="roofline and latency/error charts (PNG)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("result", help="result JSON written by qbench run")
    p.add_argument("-o", "--output", required=True,
                   help="FILE.png: the roofline; the Pareto chart goes to FILE-pareto.png")
    p.add_argument("--what", choices=("roofline", "pareto", "both"), default="both")
    p.add_argument("--method", default=None, help="timing method (default cold; cpu on CPU)")
    p.set_defaults(func=run_plot)
    return p


def run_plot(args: argparse.Namespace) -> int:
    """Run ``qbench plot`` from parsed ``args``; returns the exit status (0 or 2)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("qbench plot: needs matplotlib; install it with: pip install 'qbench[plot]'",
              file=sys.stderr)
        return 2
    try:
        doc = read_results(args.result)
    except ResultsError as exc:
        print(f"qbench plot: {exc}", file=sys.stderr)
        return 2
    method, note = resolve_method(doc, args.method)
    out = Path(args.output)
    if out.suffix.lower() != ".png":
        print(f"qbench plot: -o must name a .png file, got {out}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    if note:
        print(note)
    if args.what in ("roofline", "both"):
        print(plot_roofline(doc, method, out))
    if args.what in ("pareto", "both"):
        print(plot_pareto(doc, method, out.with_name(f"{out.stem}-pareto.png")))
    return 0
