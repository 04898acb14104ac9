"""Run a model-step scenario's schemes in this process, printing the main thread's Python stack to
stderr every ``--dump-every`` seconds (a sampling thread reading ``sys._current_frames()``; on the
H200, ``faulthandler.dump_traceback_later`` crashed the process with a segmentation fault while
Dynamo was tracing), so a scheme that hangs or
takes minutes shows where. The runner's worker is killed at the scheme timeout and its log ends with
the phase it was in (:mod:`qbench.step.measure`); this says which call inside the phase. Not part of
the package: a diagnostic (issue 23: ``fp8-weight-only+compiled``'s compiled step never finished on
the H200).

    python scripts/diag_step_hang.py scenarios/diag_fp8_compiled.toml --dump-every 30 --out rows.json

Prints one line per row (scheme, M, context, status, step µs per method, the compile record) and
writes the rows as JSON to ``--out``. Runs the schemes in the order of the scenario, in one process
(no worker, no scheme timeout: wrap it in ``timeout``).
"""

from __future__ import annotations

import argparse
import threading
import traceback
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--dump-every", type=float, default=30.0, help="seconds between stack dumps")
    parser.add_argument("--out", default=None)
    parser.add_argument("--scheme", action="append", default=None, help="labels to run (default: all)")
    args = parser.parse_args(argv)

    import torch

    from qbench import compile_info, scenario as scenario_mod
    from qbench.step.measure import measure_step_scheme

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    compile_info.single_compile_thread()
    scen = scenario_mod.load(args.scenario)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    done = threading.Event()
    main_id = threading.get_ident()

    def sample() -> None:
        start = time.perf_counter()
        while not done.wait(args.dump_every):
            frame = sys._current_frames().get(main_id)
            lines = traceback.format_stack(frame)[-40:] if frame is not None else []
            print(f"--- stack at {time.perf_counter() - start:.0f} s\n" + "".join(lines), file=sys.stderr, flush=True)

    threading.Thread(target=sample, daemon=True).start()
    rows = []
    for index, entry in enumerate(scen.schemes):
        if args.scheme and entry.label not in args.scheme:
            continue
        t0 = time.perf_counter()
        got = measure_step_scheme(scen, index, device)
        print(f"# {entry.label}: {time.perf_counter() - t0:.1f} s", flush=True)
        for row in got:
            print(row["scheme"], row["m"], row["context"], row["status"], row.get("reason"),
                  row.get("latency_us"), row.get("compile"), flush=True)
        rows += got
    done.set()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
