"""qbench's own speed: run a scenario several times and say where the wall time went.

Runs ``python -m qbench run SCENARIO`` ``--runs`` times per design and prints, per run, qbench's
``wall_s`` and the seconds summed over schemes by phase (worker ``prepare``: imports and CUDA
context; ``waited_for_go``; ``build``; ``copies`` for stream; each timing method; the ceilings), with
a JSON summary written to ``OUTDIR/bench.json``. Designs (environment of the run):

- ``preload``: the default runner (the forkserver preloads qbench's measurement modules, Dynamo and
  torch.profiler; ``QBENCH_AHEAD`` workers started ahead, 6 on a 16-core host);
- ``per-scheme-imports``: ``QBENCH_PRELOAD=0 QBENCH_AHEAD=1``, the runner before issue 15 (each
  worker imports its packages; one worker started ahead on CUDA).

Both designs keep one process per scheme; ``qbench compare OUTDIR/per-scheme-imports-1.json
OUTDIR/preload-1.json`` shows whether any number moved.

Usage: python scripts/bench_decode.py OUTDIR [--scenario scenarios/decode.toml] [--runs 3]
       [--designs preload,per-scheme-imports]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

DESIGNS = {"preload": {}, "per-scheme-imports": {"QBENCH_PRELOAD": "0", "QBENCH_AHEAD": "1"}}


def phases(doc: dict) -> dict:
    """Seconds by phase, summed over schemes (one row per scheme: its M rows share one worker)."""
    seen, total = set(), {}
    for row in doc["rows"]:
        if row["scheme"] in seen or not row.get("worker_phases_s"):
            continue
        seen.add(row["scheme"])
        ph = dict(row["worker_phases_s"])
        for method, s in (ph.pop("by_method", None) or {}).items():
            total[f"method:{method}"] = total.get(f"method:{method}", 0.0) + s
        for key, s in ph.items():
            total[key] = total.get(key, 0.0) + (s or 0.0)
    total["ceilings"] = doc.get("ceilings_wall_s") or 0.0
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--scenario", default="scenarios/decode.toml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--designs", default="preload,per-scheme-imports")
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    runs = []
    for design in args.designs.split(","):
        env = {**os.environ, **DESIGNS[design]}
        for i in range(1, args.runs + 1):
            out = os.path.join(args.outdir, f"{design}-{i}.json")
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "qbench", "run", args.scenario, "--out", out, "--force",
                                   "--quiet"], env=env, capture_output=True, text=True)
            process_s = time.perf_counter() - t0
            with open(os.path.join(args.outdir, f"{design}-{i}.log"), "w", encoding="utf-8") as f:
                f.write(proc.stdout + proc.stderr)
            if proc.returncode != 0 or not os.path.exists(out):
                runs.append({"design": design, "run": i, "rc": proc.returncode, "process_s": process_s})
                print(f"{design} {i}: rc {proc.returncode}", file=sys.stderr)
                continue
            with open(out, encoding="utf-8") as f:
                doc = json.load(f)
            statuses = {}
            for row in doc["rows"]:
                statuses[row["status"]] = statuses.get(row["status"], 0) + 1
            record = {"design": design, "run": i, "rc": proc.returncode, "wall_s": doc["wall_s"],
                      "process_s": process_s, "rows": statuses, "workers": doc.get("workers"),
                      "phases_s": phases(doc)}
            runs.append(record)
            print(json.dumps({k: record[k] for k in ("design", "run", "wall_s", "rows")}), file=sys.stderr)
    with open(os.path.join(args.outdir, "bench.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": "bench-decode", "scenario": args.scenario, "runs": runs}, f, indent=1)
    try:
        from tabulate import tabulate
    except ImportError:
        return 0
    keys = sorted({k for r in runs for k in r.get("phases_s", {})})
    table = [[r["design"], r["run"], r.get("wall_s")] + [r.get("phases_s", {}).get(k) for k in keys] for r in runs]
    print(tabulate(table, headers=["design", "run", "wall_s"] + keys, floatfmt=".1f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
