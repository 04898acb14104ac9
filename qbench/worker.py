"""Worker process: measures one scheme of a scenario and writes its rows as JSON.

The runner starts one worker per scheme, forked from a multiprocessing *forkserver* that has
already imported torch (``set_forkserver_preload``), so each worker skips the torch import but
shares nothing else: the forkserver never touches CUDA, so every worker creates its own CUDA
context, and a crash (signal, CUDA fault, broken graph capture) ends only that worker.

``python -m qbench.worker JOB.json ROWS.json`` runs one job by hand. ``JOB.json`` holds
``{"scenario": Scenario.to_dict(), "source": str, "entry_index": int, "device": "cuda:0",
"ceilings": {...} | null, "release_before_done": bool, "shared_dir": str}`` (the last two optional:
release defaults to true, :func:`qbench.runner.must_release`; ``shared_dir``, a folder every worker
of the run shares, to the job file's folder); ``ROWS.json`` receives the list of row dicts (failed and skipped
rows included). Any exit other than 0 is turned into ``failed`` rows by the runner.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def main(argv: list[str], go=None) -> int:
    """Run the job in ``argv[0]`` and write its rows to ``argv[1]``; returns 0.

    With ``go`` (the worker's end of a multiprocessing pipe), first prepare without launching GPU work
    (import the scheme's packages, create the CUDA context), then wait for one message on ``go`` before
    measuring, and send ``done`` on it once the rows are on disk (the runner then lets the next worker
    measure while this process exits). ``done`` carries this worker's clock readings (``time.perf_counter``,
    s: ``started``, ``prepared``, ``go``, ``measured``, ``written``, ``released``) as JSON after a space,
    for the runner's timeline (:data:`qbench.runner.TIMELINE_EVENTS`).
    """
    started = time.perf_counter()
    job_path, rows_path = argv
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    import torch

    if torch.cuda._is_in_bad_fork():  # the forkserver initialised CUDA before forking (qbench._preload)
        raise RuntimeError("the runner's forkserver initialised CUDA before forking this worker (a module "
                           "qbench._preload imports is not fork-safe; QBENCH_PRELOAD=0 preloads torch alone)")

    from qbench import jobs
    from qbench.measure import import_ahead
    from qbench.results import finite_or_none
    from qbench.scenario import from_dict

    scenario = from_dict(job["scenario"], job["source"])
    device = torch.device(job["device"])
    entry = scenario.schemes[job["entry_index"]]
    scheme = entry.scheme
    import_ahead(scheme, entry, device, getattr(scenario, "m", ()))  # a quality run has no M
    if device.type == "cuda":
        torch.cuda.init()
        torch.empty(1, device=device)  # creates the context; allocates, launches no kernel
    prepared = time.perf_counter()
    finished = None
    if go is not None:
        try:
            go.recv_bytes()
        except EOFError:  # the runner went away before giving "go": nothing to measure for
            _remove_run_folder(job_path)
            return 3
        finished = watch_runner(go, job_path)
    go_at = time.perf_counter()
    measure = jobs.load(jobs.of_scenario(scenario).measure)  # every fork-launched job kind: same life cycle
    # files every worker of the run may share (the quality job's reference log-probabilities): the run's folder,
    # else (a job file run by hand) the job file's folder
    shared_dir = job.get("shared_dir") or os.path.dirname(os.path.abspath(job_path))
    rows = measure(scenario, job["entry_index"], device, job.get("ceilings"), shared_dir=shared_dir)
    _flag_uncalibrated(entry, rows)
    measured = time.perf_counter()
    for row in rows:
        row["worker_phases_s"] = {"prepare": prepared - started, "waited_for_go": go_at - prepared,
                                  **row.get("worker_phases_s", {}), "after_go": measured - go_at}
    tmp = rows_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(finite_or_none(rows), f, allow_nan=False)
    os.replace(tmp, rows_path)
    written = time.perf_counter()
    if device.type == "cuda":
        # Nothing of this worker's is still running on the GPU. Where two workers' memory would not
        # fit together (the runner decides, qbench.runner.must_release), the memory its layer,
        # copies and flush buffer held goes back to the driver now: the next worker builds while
        # this process exits, and must find the memory it found before "done" existed.
        torch.cuda.synchronize(device)
        if job.get("release_before_done", True):
            import gc

            del rows
            gc.collect()
            torch.cuda.empty_cache()
    if go is not None:
        stamps = {"started": started, "prepared": prepared, "go": go_at, "measured": measured, "written": written,
                  "released": time.perf_counter()}
        finished.set()  # from here on the runner may close the pipe: that is no longer a reason to stop
        try:
            go.send_bytes(b"done " + json.dumps(stamps).encode())
        except OSError:  # the runner went away; the rows are on disk either way
            pass
    return 0


def _flag_uncalibrated(entry, rows: list[dict]) -> None:
    """Flag ``uncalibrated`` the ok rows of an entry built with a scheme that needs calibration
    activations (its own or its recipe's) when the row holds no ``calibration`` record: a layer or
    step job, which builds it from round-to-nearest values (``Scheme.needs_calibration``)."""
    from qbench import schemes
    from qbench.row import flag_record

    names = [entry.name]
    if entry.recipe is not None:
        names += [c.name for _, c in entry.recipe.roles]
        if entry.recipe.keep_scheme is not None:
            names.append(entry.recipe.keep_scheme.name)
    needing = sorted({n for n in names if schemes.get(n).needs_calibration})
    if not needing:
        return
    for row in rows:
        if row.get("status", "ok") == "ok" and not row.get("calibration"):
            row.setdefault("flags", []).append(flag_record(
                "uncalibrated", f"{', '.join(needing)}: no calibration text in this job, so the weights hold "
                                "round-to-nearest values in the same int4 format and kernel (tinygemm): the speed "
                                "is that kernel's at these shapes; the quality job measures the calibrated values"))


#: Exit status of a worker that stopped because its runner went away (SIGKILL, a crash).
RUNNER_GONE = 4


def watch_runner(conn, job_path: str) -> threading.Event:
    """Stop this worker when its runner goes away while it measures: a daemon thread waits on the
    runner's pipe, on which the runner sends nothing after ``go``, so the pipe becomes readable only
    when the runner's end closes: the runner died (even by SIGKILL: the kernel closes its end) or
    stopped this worker. The thread then removes the run's temporary folder (no runner is left to)
    and ends the process at once (exit status :data:`RUNNER_GONE`), so no orphan keeps the device
    busy under the next run. Returns an Event to set before sending ``done``: from then on the
    runner closing the pipe is expected, and the thread does nothing."""
    finished = threading.Event()

    def watch() -> None:
        from multiprocessing.connection import wait

        try:
            wait([conn])
        except (OSError, ValueError):
            pass
        if finished.is_set():
            return
        os.write(2, b"qbench worker: the runner went away; stopping\n")
        _remove_run_folder(job_path)
        os._exit(RUNNER_GONE)

    threading.Thread(target=watch, name="qbench-watch-runner", daemon=True).start()
    return finished


def _remove_run_folder(job_path: str) -> None:
    """Remove the run's temporary folder (``qbench-<pid>-*``, the parent of the job's folder), as
    the runner would have; nothing for a job file elsewhere (``python -m qbench.worker`` by hand)."""
    import shutil

    run_folder = os.path.dirname(os.path.dirname(os.path.abspath(job_path)))
    if os.path.basename(run_folder).startswith("qbench-"):
        shutil.rmtree(run_folder, ignore_errors=True)


def child(job_path: str, rows_path: str, log_path: str, environ: dict, go=None) -> None:
    """Entry point of a forked worker: take the runner's environment (with the scheme's
    ``worker_env`` applied), send stdout and stderr to ``log_path``, run :func:`main`."""
    os.environ.clear()
    os.environ.update(environ)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    log_phases()
    sys.exit(main([job_path, rows_path], go))


def log_phases() -> None:
    """Send the ``qbench`` loggers' INFO lines (the phases a model-step worker enters,
    :mod:`qbench.step.measure`) to stderr, the worker's log, tagged :data:`qbench.lifecycle.PHASE_TAG`: the
    runner's reason for a worker that hangs names its last phase, whatever a library wrote after it. Idempotent."""
    import logging

    from qbench.lifecycle import PHASE_TAG

    logger = logging.getLogger("qbench")
    if not any(getattr(h, "qbench_phases", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"%(asctime)s {PHASE_TAG} %(message)s", "%H:%M:%S"))
        handler.qbench_phases = True
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


if __name__ == "__main__":
    log_phases()
    sys.exit(main(sys.argv[1:]))
