"""Repeatability of the stream, cold and warm medians over several result files of the same scenario.

    python scripts/repeatability.py OUT/decode-repeat-*.json --out results/h200/evidence/repeatability.json

(``OUT``: the folder of ``bash scripts/h200_suite.sh OUT repeat``; the run files themselves stay out of
``results/``: the summary is the evidence, see ``results/h200/INDEX.md``.)

For each scheme x M present in the files: the per-run medians, their coefficient of variation
(sample standard deviation, n - 1, over the mean, %; the same definition as a row's cv), and the runs it was missing from (an incomplete run, a failed row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from qbench.results import read_results, write_results


def summarize(paths: list[Path], methods=("stream", "cold", "warm")) -> dict:
    """Per (scheme, M, method): medians across runs and their CV (%)."""
    docs = [(p, read_results(p).to_json()) for p in paths]
    keys = []
    for _, doc in docs:
        for row in doc["rows"]:
            if (row["scheme"], row["m"]) not in keys:
                keys.append((row["scheme"], row["m"]))
    rows = []
    # a method no file timed at all (stream in files written before it existed) gives no rows
    timed = {mt for _, doc in docs for r in doc["rows"] for mt, st in (r.get("latency_us") or {}).items() if st}
    for scheme, m in keys:
        for method in (mt for mt in methods if mt in timed):
            medians, missing = [], []
            for path, doc in docs:
                row = next((r for r in doc["rows"] if r["scheme"] == scheme and r["m"] == m), None)
                stats = (row or {}).get("latency_us", {}).get(method) if row and row["status"] == "ok" else None
                if stats:
                    medians.append(stats["median"])
                else:
                    missing.append(path.name)
            cv = statistics.stdev(medians) / statistics.mean(medians) * 100 if len(medians) > 1 else None
            rows.append({"scheme": scheme, "m": m, "method": method, "runs": len(medians), "medians_us": medians,
                         "cv_pct": cv, "missing_from": missing})
    return {"files": [str(p) for p, _ in docs], "complete": {str(p): d["complete"] for p, d in docs},
            "wall_s": {str(p): d["wall_s"] for p, d in docs}, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    summary = summarize(args.files)
    for r in summary["rows"]:
        cv = "—" if r["cv_pct"] is None else f"{r['cv_pct']:.2f} %"
        print(f"{r['scheme']:28s} M={r['m']:<4d} {r['method']:5s} runs={r['runs']} cv={cv:>8s}  "
              + " ".join(f"{x:.2f}" for x in r["medians_us"]))
    if args.out:
        write_results(args.out, {"schema_version": 1, "kind": "repeatability", **summary}, force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
