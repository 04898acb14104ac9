"""Tensor-parallel worker: one rank of one (scheme, tp_size, split) job.

Launched by :mod:`qbench.tp.runner` as::

    torchrun --standalone --nproc-per-node P -m qbench.tp.worker JOB.json OUT_DIR

or, for tp_size 1, as plain ``python -m qbench.tp.worker JOB.json OUT_DIR`` (no
torch.distributed). ``JOB.json`` holds ``{"scenario": Scenario.to_dict(), "source": str,
"entry_index": int, "split": "column" | "row" | "none", "device": "cpu" | "cuda"}``. Rank 0
writes ``OUT_DIR/rows.json`` (a list of rows, failed ones included); any other exit is turned
into failed rows by the runner.

torchrun sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``. On CUDA rank ``r`` uses
``cuda:LOCAL_RANK`` and the group uses NCCL; on the CPU it uses gloo and each rank gets
``cpu_count // WORLD_SIZE`` intra-op threads (torchrun would otherwise set OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import datetime
import json
import os
import sys

#: How long a rank waits in a collective before torch.distributed gives up (s); the runner's
#: own timeout (``timing.scheme_timeout_s``) normally ends a stuck job first.
COLLECTIVE_TIMEOUT_S = 900


def main(argv: list[str]) -> int:
    """Run the job in ``argv[0]``; rank 0 writes ``argv[1]/rows.json``. Returns 0."""
    job_path, out_dir = argv
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    import torch

    from qbench.results import finite_or_none
    from qbench.scenario import from_dict
    from qbench.tp.measure import measure_tp
    from qbench.tp.timing import RankGroup

    scenario = from_dict(job["scenario"], job["source"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = job["device"].startswith("cuda")
    if cuda:
        device = torch.device("cuda", local_rank if world > 1 else torch.device(job["device"]).index or 0)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    group = None
    if world > 1:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        if cuda:
            dist.init_process_group("nccl", device_id=device, timeout=timeout)
        else:
            dist.init_process_group("gloo", timeout=timeout)
    ranks = RankGroup(rank=rank, size=world, device=device, group=group)
    try:
        rows = measure_tp(scenario, job["entry_index"], job["split"], ranks)
    finally:
        if world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
    if rank == 0:
        for row in rows:
            row["cpu_threads_per_rank"] = torch.get_num_threads() if not cuda else None
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "rows.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(finite_or_none(rows), f, allow_nan=False)
        os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
