"""Worker process: measures one scheme of a scenario and writes its rows as JSON.

The runner starts one worker per scheme, forked from a multiprocessing *forkserver* that has
already imported torch (``set_forkserver_preload``), so each worker skips the torch import but
shares nothing else: the forkserver never touches CUDA, so every worker creates its own CUDA
context, and a crash (signal, CUDA fault, broken graph capture) ends only that worker.

``python -m qbench.worker JOB.json ROWS.json`` runs one job by hand. ``JOB.json`` holds
``{"scenario": Scenario.to_dict(), "source": str, "entry_index": int, "device": "cuda:0",
"ceilings": {...} | null}``; ``ROWS.json`` receives the list of row dicts (failed and skipped
rows included). Any exit other than 0 is turned into ``failed`` rows by the runner.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    """Run the job in ``argv[0]`` and write its rows to ``argv[1]``; returns 0."""
    started = time.perf_counter()
    job_path, rows_path = argv
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    import torch

    from qbench.measure import measure_scheme
    from qbench.results import finite_or_none
    from qbench.scenario import from_dict

    scenario = from_dict(job["scenario"], job["source"])
    imported = time.perf_counter()
    rows = measure_scheme(scenario, job["entry_index"], torch.device(job["device"]), job.get("ceilings"))
    for row in rows:
        row["worker_phases_s"] = {"start_and_import": imported - started, **row.get("worker_phases_s", {}),
                                  "total": time.perf_counter() - started}
    tmp = rows_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(finite_or_none(rows), f, allow_nan=False)
    os.replace(tmp, rows_path)
    return 0


def child(job_path: str, rows_path: str, log_path: str, environ: dict) -> None:
    """Entry point of a forked worker: take the runner's environment (with the scheme's
    ``worker_env`` applied), send stdout and stderr to ``log_path``, run :func:`main`."""
    os.environ.clear()
    os.environ.update(environ)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.exit(main([job_path, rows_path]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
