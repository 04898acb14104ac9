"""qbench's own speed: run a scenario several times and say where the wall time went.

Runs ``python -m qbench run SCENARIO`` ``--runs`` times per design and prints, per run, qbench's
``wall_s`` and the seconds summed over schemes by phase (worker ``prepare``: imports and CUDA
context; ``waited_for_go``; ``build``; ``copies`` for stream; each timing method; the ceilings), with
a JSON summary written to ``OUTDIR/bench.json``. Designs (environment of the run):

- ``preload``: the default runner (the forkserver preloads qbench's measurement modules, Dynamo and
  torch.profiler; ``QBENCH_AHEAD`` workers started ahead, 6 on a 16-core host);
- ``per-scheme-imports``: ``QBENCH_PRELOAD=0``, ``QBENCH_AHEAD=1`` on CUDA and 0 on the CPU: the
  runner before issue 15 (each worker imports its packages; one worker started ahead on CUDA).

Both designs keep one process per scheme; ``qbench compare OUTDIR/per-scheme-imports-1.json
OUTDIR/preload-1.json`` shows whether any number moved.

Usage: python scripts/bench_decode.py OUTDIR [--scenario scenarios/decode.toml] [--runs 3]
       [--designs preload,per-scheme-imports]
       python scripts/bench_decode.py --summarize RESULT.json...   (a Markdown table per file: wall
       time and phases; docs/speed.md)
       python scripts/bench_decode.py --per-scheme RESULT.json     (each scheme's phases)
       python scripts/bench_decode.py --timeline RESULT.json...    (where wall_s went between the
       workers: the start, measuring, hand-offs, the end)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def designs() -> dict:
    """Each design's environment. The old runner started one worker ahead on CUDA and none on the
    CPU (its start-up would compete with the timed work for cores)."""
    import torch

    ahead = "1" if torch.cuda.is_available() else "0"
    return {"preload": {}, "per-scheme-imports": {"QBENCH_PRELOAD": "0", "QBENCH_AHEAD": ahead}}


def scheme_rows(doc: dict) -> list[dict]:
    """The first row of each scheme that has worker phases: a scheme's M rows share one worker, so
    its phases are counted once."""
    seen, out = set(), []
    for row in doc["rows"]:
        if row["scheme"] not in seen and row.get("worker_phases_s"):
            seen.add(row["scheme"])
            out.append(row)
    return out


def phases(doc: dict) -> dict:
    """Seconds by phase, summed over schemes (:func:`scheme_rows`)."""
    total = {}
    for row in scheme_rows(doc):
        ph = dict(row["worker_phases_s"])
        for method, s in (ph.pop("by_method", None) or {}).items():
            total[f"method:{method}"] = total.get(f"method:{method}", 0.0) + s
        for key, s in ph.items():
            total[key] = total.get(key, 0.0) + (s or 0.0)
    total["ceilings"] = doc.get("ceilings_wall_s") or 0.0
    return total


def timeline_split(doc: dict) -> dict | None:
    """Where the run's wall time went, from its ``workers.timeline`` (qbench.runner.TIMELINE_EVENTS;
    None for files written before it existed), in s. The parts add up to ``wall_s``:

    - ``first go``: the run's start to the first worker receiving its go (the forkserver's preload,
      of which ``forkserver ready`` is the first fork, and the first worker's own preparation);
    - ``measuring``: summed over workers, go received to every M measured (the workers' ``after_go``);
    - ``write and release``: rows written, GPU synchronized, memory given back, ``done`` sent;
    - ``to the next go``: one worker's done sent to the next one's go sent (the runner's turnaround);
    - ``next not ready``: the next go sent to the next worker receiving it (its preparation not
      finished, or the pipe);
    - ``end``: the last worker's done to the run's end (its exit, the result file).

    A worker that died has no readings of its own; its go and exit stand in."""
    timeline = (doc.get("workers") or {}).get("timeline")
    if not timeline:
        return None
    go = [e.get("worker_go", e.get("go")) for e in timeline]
    released = [e.get("worker_released", e.get("exited")) for e in timeline]
    measured = [e.get("worker_measured", e.get("exited")) for e in timeline]
    if None in go or None in released or None in measured:
        return None
    sent = [e.get("go", g) for e, g in zip(timeline, go)]
    return {"forkserver ready": timeline[0].get("forked"), "first go": go[0],
            "measuring": sum(m - g for g, m in zip(go, measured)),
            "write and release": sum(r - m for m, r in zip(measured, released)),
            "to the next go": sum(max(0.0, s - r) for r, s in zip(released, sent[1:])),
            "next not ready": sum(g - max(s, r) for r, s, g in zip(released, sent[1:], go[1:])),
            "end": doc["wall_s"] - released[-1]}


def timeline_table(paths: list[str]) -> str:
    """Markdown: per result file, ``wall_s`` split by :func:`timeline_split`."""
    from tabulate import tabulate

    keys = ["forkserver ready", "first go", "measuring", "write and release", "to the next go", "next not ready",
            "end"]
    rows = []
    for path in paths:
        doc = _load(path)
        split = timeline_split(doc)
        cells = ["no timeline (written before 2026-12-01, third session)"] + [""] * (len(keys) - 1) if split is None \
            else [f"{split[k]:.1f}" if split[k] is not None else "" for k in keys]
        rows.append([_label(path, paths), _design(doc), f"{doc['wall_s']:.1f}", *cells])
    return tabulate(rows, headers=["file", "runner", "wall_s", *keys], tablefmt="github", disable_numparse=True)


def _design(doc: dict) -> str:
    workers = doc.get("workers")
    if not workers:
        return "not recorded (a file from before 2026-12-01)"
    pre = {"qbench._preload": "qbench preloaded"}.get((workers["preloaded"] or ["torch"])[0], "torch preloaded")
    if "qbench._preload_cpu" in workers["preloaded"]:
        pre = "qbench and scheme packages preloaded"
    return f"{pre}, {workers['ahead']} ahead"


def _label(path: str, paths: list[str]) -> str:
    """The file's path below the folder all ``paths`` share (its name when they share its folder):
    two calls' ``preload-1.json`` read ``call6/new/preload-1.json`` and ``call8/bench/preload-1.json``."""
    folders = {os.path.dirname(os.path.abspath(p)) for p in paths}
    if len(folders) == 1:
        return os.path.basename(path)
    return os.path.relpath(os.path.abspath(path), os.path.commonpath(sorted(folders)))


def summary_table(paths: list[str]) -> str:
    """Markdown: per result file, qbench's wall_s and the seconds summed over schemes by phase.
    ``measure, not in a method`` = measure minus the timing methods: first calls (compilation,
    gemlite's autotuning), error metrics and imports made after the go."""
    from tabulate import tabulate

    rows = []
    for path in paths:
        doc = _load(path)
        ph = phases(doc)
        known = any(k.startswith("method:") for k in ph)  # by_method: files from 2026-12-01 on
        methods = sum(v for k, v in ph.items() if k.startswith("method:"))
        rows.append([_label(path, paths), _design(doc), len(doc["rows"]), f"{doc['wall_s']:.0f}",
                     f"{ph.get('prepare', 0):.1f}", f"{ph.get('waited_for_go', 0):.1f}", f"{ph.get('build', 0):.1f}",
                     f"{ph.get('copies', 0):.1f}", f"{methods:.1f}" if known else "not recorded",
                     f"{ph.get('measure', 0) - methods:.1f}" if known else "not recorded",
                     f"{ph.get('after_go', 0):.1f}", f"{ph.get('ceilings', 0):.1f}"])
    return tabulate(rows, headers=["file", "runner", "rows", "wall_s", "prepare", "waited for go", "build",
                                   "copies", "timing methods", "measure, not in a method", "after go (sum)",
                                   "ceilings"], tablefmt="github", disable_numparse=True)


def per_scheme_table(path: str) -> str:
    """Markdown: each scheme's worker phases (s) in one result file, in run order."""
    from tabulate import tabulate

    doc = _load(path)
    rows = []
    for row in scheme_rows(doc):
        ph = row["worker_phases_s"]
        methods = sum((ph.get("by_method") or {}).values())
        first = (row.get("compile") or {}).get("first_call_s")
        rows.append([row["scheme"], f"{ph.get('prepare', 0):.1f}", f"{ph.get('waited_for_go', 0):.1f}",
                     f"{ph.get('build', 0):.1f}", f"{methods:.1f}", f"{ph.get('measure', 0) - methods:.1f}",
                     "" if first is None else f"{first:.1f}", f"{ph.get('after_go', 0):.1f}"])
    return tabulate(rows, headers=["scheme", "prepare", "waited for go", "build", "timing methods",
                                   "measure, not in a method", "first call (compiled)", "after go"],
                    tablefmt="github", disable_numparse=True)


def _is_bench(path: str) -> bool:
    """Whether ``path`` is a ``bench.json`` this script wrote (its runs, not a result file)."""
    return os.path.basename(path).startswith("bench") and os.path.isfile(path) and _load(path).get("kind") == "bench-decode"


def _check_results(paths: list[str]) -> str | None:
    """One line naming the first path that is not a qbench result file (rows and env), else None."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            return f"{path}: cannot read a JSON result file ({type(exc).__name__}: {exc})"
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or "env" not in doc:
            return f"{path}: not a qbench result file (no rows and env)"
    return None


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0; 1 when a benchmark run failed; 2 on bad arguments or files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="exit status: 0; 1 a benchmark run failed; 2 bad arguments or files")
    parser.add_argument("outdir", nargs="?", help="folder for the runs' result files, logs and bench.json")
    parser.add_argument("--scenario", default="scenarios/decode.toml", help="scenario to run (default: decode)")
    parser.add_argument("--runs", type=int, default=3, help="runs per design (>= 1, default 3)")
    parser.add_argument("--designs", default="preload,per-scheme-imports",
                        help="comma-separated: preload (the current runner), per-scheme-imports (the runner "
                             "before issue 15)")
    parser.add_argument("--summarize", nargs="+", metavar="RESULT",
                        help="print a Markdown table of wall time and phases per result file (or, given "
                             "bench.json files, of their runs), run nothing")
    parser.add_argument("--per-scheme", metavar="RESULT", help="print each scheme's phases in one result file")
    parser.add_argument("--timeline", nargs="+", metavar="RESULT",
                        help="print a Markdown table of where each file's wall_s went between the workers "
                             "(workers.timeline), run nothing")
    args = parser.parse_args(argv)
    if args.summarize and all(_is_bench(p) for p in args.summarize):
        print("\n\n".join(runs_table(_load(p)["runs"]) for p in args.summarize))
        return 0
    if args.summarize or args.per_scheme or args.timeline:
        bad = _check_results(args.summarize or args.timeline or [args.per_scheme])
        if bad:
            print(f"bench_decode: {bad}", file=sys.stderr)
            return 2
        print(summary_table(args.summarize) if args.summarize else timeline_table(args.timeline) if args.timeline
              else per_scheme_table(args.per_scheme))
        return 0
    if not args.outdir:
        parser.error("OUTDIR is required to run the benchmark")
    known = tuple(designs())
    unknown = [d for d in args.designs.split(",") if d not in known]
    if unknown:
        parser.error(f"--designs: unknown design {unknown[0]!r}; choose from {', '.join(known)}")
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    if not os.path.isfile(args.scenario):
        parser.error(f"--scenario: no such file {args.scenario!r}")
    os.makedirs(args.outdir, exist_ok=True)
    runs = []
    for design in args.designs.split(","):
        env = {**os.environ, **designs()[design]}
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
            doc = _load(out)
            statuses = {}
            for row in doc["rows"]:
                statuses[row["status"]] = statuses.get(row["status"], 0) + 1
            record = {"design": design, "run": i, "rc": proc.returncode, "wall_s": doc["wall_s"],
                      "process_s": process_s, "rows": statuses, "workers": doc.get("workers"),
                      "phases_s": phases(doc), "timeline_s": timeline_split(doc)}
            runs.append(record)
            print(json.dumps({k: record[k] for k in ("design", "run", "wall_s", "rows")}), file=sys.stderr)
    with open(os.path.join(args.outdir, "bench.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": "bench-decode", "scenario": args.scenario, "runs": runs}, f, indent=1)
    failed = [r for r in runs if "wall_s" not in r]
    print(runs_table(runs))
    if failed:
        print(f"bench_decode: {len(failed)} run(s) failed (rc {', '.join(str(r['rc']) for r in failed)}); "
              f"their logs are in {args.outdir}", file=sys.stderr)
    return 1 if failed else 0


def runs_table(runs: list[dict]) -> str:
    """Markdown: each run of a ``bench.json``: process s (start to exit), wall_s, phases summed over schemes."""
    from tabulate import tabulate

    keys = ["prepare", "build", "measure", "after_go", "ceilings"]
    table = [[r["design"], r["run"], f"{r['process_s']:.1f}", f"{r['wall_s']:.1f}" if "wall_s" in r else f"rc {r['rc']}"]
             + [f"{r['phases_s'][k]:.1f}" if k in r.get("phases_s", {}) else "" for k in keys] for r in runs]
    return tabulate(table, headers=["design", "run", "process_s", "wall_s"] + [k.replace("_", " ") for k in keys],
                    tablefmt="github", disable_numparse=True)

if __name__ == "__main__":
    sys.exit(main())
