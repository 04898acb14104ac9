"""Profile one scheme's worker with cProfile: where a scheme's seconds after ``go`` are spent.

Runs what a runner's worker runs for one scheme of a scenario (``qbench.measure.measure_scheme``),
in this process, twice when ``--runs 2`` (the second run shows the warm-cache cost: Inductor's FX
graph cache, Triton's cache and gemlite's tuned configs on disk), under ``cProfile``, and prints
the functions with the most cumulative time. A dev tool for issue 15 (``docs/speed.md``).

Usage: python scripts/profile_worker.py SCENARIO.toml LABEL [--runs 1] [--device auto] [--top 40]
       [--out PROFILE.prof]
Exit status: 0; 2 bad arguments (an unknown label: one line naming the file and the labels).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("label", help="the scheme's row label, e.g. int8-weight-only+compiled")
    parser.add_argument("--runs", type=int, default=1, help="measure_scheme calls, each profiled (default 1)")
    parser.add_argument("--device", default=None, help="auto | cpu | cuda[:N] (default: the scenario's)")
    parser.add_argument("--top", type=int, default=40, help="functions printed per run (default 40)")
    parser.add_argument("--out", default=None, help="write the last run's profile here (pstats format)")
    args = parser.parse_args(argv)
    from qbench import env, scenario
    from qbench.measure import measure_scheme

    try:
        sc = scenario.only_schemes(scenario.load(args.scenario), [args.label])
        device = env.resolve_device(args.device or sc.device)
    except ValueError as exc:
        print(f"profile_worker: {exc}", file=sys.stderr)
        return 2
    for run in range(1, args.runs + 1):
        profiler = cProfile.Profile()
        t0 = time.perf_counter()
        profiler.enable()
        rows = measure_scheme(sc, 0, device)
        profiler.disable()
        wall = time.perf_counter() - t0
        print(f"== run {run}: {args.label} on {device}: {wall:.2f} s; rows: "
              + ", ".join(f"M={r['m']} {r['status']}" for r in rows))
        print(f"   phases: {rows[0].get('worker_phases_s')}; compile: {rows[0].get('compile')}")
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.top)
        print(text.getvalue())
        if args.out and run == args.runs:
            profiler.dump_stats(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
