"""Tensor-parallel worker: one rank of one (scheme, tp_size, split) job.

Launched by :mod:`qbench.tp.runner` as::

    torchrun --standalone --nproc-per-node P --max-restarts 1 -m qbench.tp.worker JOB.json OUT_DIR

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
    if job.get("runner_pid"):
        watch_runner(int(job["runner_pid"]), os.getppid())
    import torch

    from qbench.results import finite_or_none
    from qbench.row import flag_record
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
        ranks.barrier()  # no rank closes its connections while another still waits in the last collective
    finally:
        if world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
    if rank == 0:
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        for row in rows:
            row["cpu_threads_per_rank"] = torch.get_num_threads() if not cuda else None
            if restarts and world > 1 and row["status"] == "ok":  # an outer agent's count is not this job's
                row["flags"].append(flag_record("restarted", f"torchrun launched the job's {world} processes "
                                                             f"{restarts + 1} times"))
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "rows.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(finite_or_none(rows), f, allow_nan=False)
        os.replace(path + ".tmp", path)
    return 0


#: Seconds between two checks that the runner still exists (:func:`watch_runner`).
WATCH_INTERVAL_S = 0.5


def runner_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (``/proc/PID/stat`` state ``Z``: dead,
    not yet reaped); where ``/proc`` is missing, whether ``os.kill(pid, 0)`` finds it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_runner(*pids: int) -> None:
    """End this process's group with SIGKILL once any of ``pids`` is gone: the runner (SIGKILL, a
    crash) and this process's parent (torchrun, which the runner kills on a stop signal or a
    timeout; torchrun starts each rank in a session of its own, so the runner's kill of torchrun's
    session does not reach the ranks). Checked every :data:`WATCH_INTERVAL_S` s by a daemon
    thread, so no rank keeps measuring under the next run."""
    import signal
    import threading
    import time

    def watch() -> None:
        while all(runner_alive(pid) for pid in pids):
            time.sleep(WATCH_INTERVAL_S)
        os.write(2, b"qbench tp worker: the runner went away; stopping the job\n")
        try:
            os.killpg(0, signal.SIGKILL)
        finally:
            os._exit(4)

    threading.Thread(target=watch, name="qbench-watch-runner", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
