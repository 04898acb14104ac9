"""Worker process: measures one scheme of a scenario and writes its rows as JSON.

Usage (by :mod:`qbench.runner`, not by hand): ``python -m qbench.worker JOB.json ROWS.json``.
``JOB.json`` holds ``{"scenario": Scenario.to_dict(), "source": str, "entry_index": int,
"device": "cuda:0", "ceilings": {...} | null}``. The worker exits 0 after writing ``ROWS.json``
(a list of row dicts, failed and skipped rows included); any other exit (a signal, an uncaught
error, a CUDA fault) is turned into ``failed`` rows by the runner.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    job_path, rows_path = argv
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    import torch

    from qbench.measure import measure_scheme
    from qbench.results import finite_or_none
    from qbench.scenario import from_dict

    scenario = from_dict(job["scenario"], job["source"])
    rows = measure_scheme(scenario, job["entry_index"], torch.device(job["device"]), job.get("ceilings"))
    tmp = rows_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(finite_or_none(rows), f, allow_nan=False)
    os.replace(tmp, rows_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
