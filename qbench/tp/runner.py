"""Run a scenario with a ``[tp]`` table: one job per (scheme, tp_size, split), each in its own processes.

For every scheme: tp_size 1 once (``split = "none"``, the unsharded baseline of both splits),
run as ``python -m qbench.tp.worker``; then every (split, tp_size > 1) under
``torchrun --standalone --nproc-per-node P --max-restarts 1 -m qbench.tp.worker`` (:mod:`qbench.tp.worker`). A
job is skipped, with the reason in its rows, when the scheme cannot run on the device, cannot be
sharded that way (:func:`qbench.tp.shard.plan`), or needs more ranks than the host has (CUDA
devices; on the CPU, cores, at most :data:`MAX_CPU_RANKS`). A job that exits badly or outlives
``timing.scheme_timeout_s`` (both launches of a restarted job within it) gives failed rows with the line that says
why its root-cause rank failed; the others go on. A job whose rank crashed gets one more launch (rows flagged
``restarted``).

The result file is the same versioned document as :func:`qbench.runner.run` writes, rewritten
after every job (``"complete": false`` until the end).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

from qbench.measure import failed_rows
from qbench.lifecycle import (
    RunInterrupted, RunOutcome, RunWriteError, done_labels, finish, log_tail, prepare, record,
)
from qbench.scenario import Scenario
from qbench.tp import shard
from qbench.tp.measure import add_speedup_vs_tp1, tp_row

#: Most gloo ranks started on one CPU host (each needs a core of its own to mean anything).
MAX_CPU_RANKS = 8


def jobs(scenario: Scenario) -> list[tuple[int, int, str]]:
    """``(entry_index, tp_size, split)`` in run order: per scheme, tp_size 1 (``none``) first,
    then each split's tp_sizes in the scenario's order."""
    out = []
    for index in range(len(scenario.schemes)):
        if 1 in scenario.tp.tp_size:
            out.append((index, 1, "none"))
        out += [(index, p, split) for split in scenario.tp.split for p in scenario.tp.tp_size if p > 1]
    return out


def skip_reason(scenario: Scenario, index: int, tp_size: int, split: str, device, ranks_available: int) -> Optional[str]:
    """Why a job cannot run here (one line), or None."""
    entry = scenario.schemes[index]
    reason = entry.scheme.unavailable_reason(device, entry.options)
    if reason:
        return reason
    if split != "none":
        verdict = shard.plan(entry.scheme, entry.options, split, tp_size, scenario.layer.in_features,
                             scenario.layer.out_features)
        if verdict.reason:
            return verdict.reason
    if tp_size > ranks_available:
        what = "CUDA devices" if device.type == "cuda" else f"CPU ranks (cores, at most {MAX_CPU_RANKS})"
        return f"tp_size {tp_size} needs {tp_size} processes; this host allows {ranks_available} {what}"
    return None


def ranks_available(device) -> int:
    """CUDA devices visible, or on the CPU min(cores, :data:`MAX_CPU_RANKS`)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.device_count()
    return min(os.cpu_count() or 1, MAX_CPU_RANKS)


#: How often torchrun launches a failed multi-rank job's processes again (``--max-restarts``): a rank that
#: crashed (a broken gloo or NCCL connection, a killed process; a scheme's own failure is caught inside the
#: worker and gives ``failed`` rows, no crash) gets one more launch, and its rows are flagged ``restarted``.
MAX_RESTARTS = 1


def command(tp_size: int, job_path: str, out_dir: str) -> list[str]:
    """The worker's command line: plain python for tp_size 1, torchrun otherwise."""
    worker = ["-m", "qbench.tp.worker", job_path, out_dir]
    if tp_size == 1:
        return [sys.executable, *worker]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={tp_size}",
            f"--max-restarts={MAX_RESTARTS}", *worker]


def run_tp(scenario: Scenario, *, device: Optional[str] = None, out: Optional[str] = None, force: bool = False,
           progress: Optional[Callable[[str], None]] = None, show_bar: bool = False, resume: bool = False) -> RunOutcome:
    """Measure every (scheme, tp_size, split) of ``scenario`` (which has a ``tp`` table) and write
    the result file; the arguments are :func:`qbench.runner.run`'s (``show_bar`` is accepted and
    ignored). A stop signal ends the running job's whole session (torchrun and its ranks).

    Raises:
        RunError: the device or the output path is unusable (nothing measured or written).
        RunInterrupted: a stop signal; the rows so far are in the partial file.
        ValueError: the scenario has no ``tp`` table.
    """
    if scenario.job != "tp":
        raise ValueError("run_tp: the scenario has no [tp] table; use qbench.runner.run")
    started = time.perf_counter()
    try:
        dev, output, doc = prepare(scenario, device, out, force, resume)  # the unsharded worker's memory bounds every rank
    except KeyboardInterrupt as exc:
        raise RunInterrupted.of(exc) from None
    try:
        done = done_labels(doc)
        available = ranks_available(dev)
        try:
            tmp = tempfile.mkdtemp(prefix=f"qbench-tp-{os.getpid()}-")
        except OSError as exc:
            raise RunWriteError(f"TMPDIR {tempfile.gettempdir()}: cannot create the jobs' folder "
                                f"({exc.strerror or exc}); nothing was measured") from None
        try:
            for number, (index, tp_size, split) in enumerate(jobs(scenario)):
                if scenario.schemes[index].label in done:  # --resume: its rows were kept
                    continue
                t0 = time.perf_counter()
                reason = skip_reason(scenario, index, tp_size, split, dev, available)
                if reason:
                    rows = failed_rows(_rows(scenario, index, dev, tp_size, split), "skipped", reason)
                else:
                    try:
                        rows = run_job(scenario, index, tp_size, split, dev, os.path.join(tmp, str(number)))
                    except OSError as exc:
                        raise RunWriteError(f"{tmp}: cannot write a job file ({exc.strerror or exc}); the run "
                                            f"stopped; " + output._kept()) from None
                add_speedup_vs_tp1(rows, doc["rows"])
                record(doc, output, rows, t0, started)
                if progress is not None:
                    for row in rows:
                        if row["status"] != "ok":
                            progress(f"{row['scheme']} tp={tp_size} {split} M={row['m']}: {row['status']}: {row['reason']}")
        except KeyboardInterrupt as exc:
            raise output.interrupted(exc) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return finish(doc, output, started, force=force)
    finally:
        output.release()


def _rows(scenario: Scenario, index: int, dev, tp_size: int, split: str) -> list[dict]:
    return [tp_row(scenario, index, m, dev, tp_size, split) for m in scenario.m]


def run_job(scenario: Scenario, index: int, tp_size: int, split: str, dev, folder: str) -> list[dict]:
    """Run one job's processes to completion (or the timeout) and return its rows."""
    os.makedirs(folder)
    job_path, log_path = os.path.join(folder, "job.json"), os.path.join(folder, "worker.log")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump({"scenario": scenario.to_dict(), "source": scenario.source, "entry_index": index,
                   "split": split, "device": str(dev), "runner_pid": os.getpid()}, f)
    env = os.environ.copy()
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // tp_size)))  # silences torchrun's notice
    env = scenario.schemes[index].scheme.worker_environ(env)
    timeout = scenario.timing.scheme_timeout_s
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command(tp_size, job_path, folder), stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            code: Optional[int] = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            code = None
        except BaseException:  # a stop signal (the job's session does not get the terminal's Ctrl-C)
            _kill_session(proc)
            raise
    rows_path = os.path.join(folder, "rows.json")
    if code == 0 and os.path.exists(rows_path):
        with open(rows_path, encoding="utf-8") as f:
            rows = json.load(f)
        restarted = any(f["name"] == "restarted" for row in rows for f in row.get("flags") or [])
        # the failed launch's reason (the whole log read), where torchrun restarted the job or rows failed after one
        first = _first_failure(log_path) if restarted or any(row["status"] != "ok" for row in rows) else ""
        for row in rows:
            for flag in row.get("flags") or []:
                if flag["name"] == "restarted" and first:
                    flag["text"] += f"; the failure: {first}"
            if first and row["status"] != "ok" and row.get("reason"):  # failed rows carry no flags: say it here
                row["reason"] += f" (the second launch: torchrun restarted the job after {first})"
        return rows
    what = f"timed out after {timeout:g} s" if code is None else f"exited with status {code}"
    last = _last_line(log_path)
    reason = f"tp worker ({'torchrun, ' if tp_size > 1 else ''}{tp_size} rank{'s' if tp_size > 1 else ''}) {what}"
    return failed_rows(_rows(scenario, index, dev, tp_size, split), "failed", f"{reason}; last output: {last}" if last else reason)


#: Seconds :func:`_kill_session` waits for SIGKILLed ranks to be gone before the run's folder is removed.
RANKS_GONE_S = 10.0


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the job's own session (``start_new_session``: torchrun, or the tp_size 1 worker) and
    the process group of each of its children (torchrun starts every rank in a session of its own,
    which the first kill does not reach), reap it, and wait (at most :data:`RANKS_GONE_S` s) until
    those children are gone: only then may the caller remove the job's folder. Before, a rank that
    outlived torchrun by its watcher's interval (:data:`qbench.tp.worker.WATCH_INTERVAL_S`) could
    write ``rows.json`` after the folder's removal (its ``makedirs`` created the folder again)."""
    from qbench.tp.worker import runner_alive

    ranks = _children(proc.pid)  # read before torchrun dies: then they belong to init
    groups = {proc.pid}
    for pid in ranks:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    groups.discard(os.getpgrp())  # never this run's own group
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    deadline = time.monotonic() + RANKS_GONE_S
    while any(runner_alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    """The pids of process ``pid``'s children (``/proc/*/stat`` field 4); ``[]`` where ``/proc`` is missing."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _last_line(log_path: str) -> str:
    """The line of a job's log that says why it failed (at most 240 characters), by :func:`_reason`, with the rank
    torchrun names under "Root Cause" (torchrun prints each rank's traceback lines as ``[rankR]: ...``)."""
    lines = log_tail(log_path)
    return _reason(lines, _root_cause_rank(lines)) if lines else ""


def _reason(lines: list[str], rank: Optional[int]) -> str:
    """The line of ``lines`` that says why ``rank`` failed: its last exception, else the last exception no rank
    prefix claims (printed before torch set the prefix; torchrun's own ``ChildFailedError`` left out), else
    torchrun's ``failed (exitcode: ...)`` line for it (a rank killed by a signal prints no exception), else torchrun's
    own error (``ChildFailedError``), else the last line; never another rank's exception (that rank's broken
    connection is a consequence, not the cause). Without a rank: any rank's last exception, else any exception, else
    the last line."""
    errors = [line for line in lines if _exception_name(line)]
    if rank is None:
        return ([line for line in errors if line.startswith("[rank")] or errors or lines)[-1][:240]
    own = [line for line in errors if line.startswith(f"[rank{rank}]:")]
    loose = [line for line in errors if not line.startswith(("[rank", "torch.distributed.elastic"))]
    failed = [m.group(1) for line in lines if (m := FAILED_RANK.search(line)) and int(m.group(2)) == rank]
    elastic = [line for line in errors if line.startswith("torch.distributed.elastic")]
    return (own or loose or failed or elastic or lines)[-1][:240]


#: torchrun's line for each rank that failed (``failed (exitcode: -9) local_rank: 1 (pid: ...) of binary: ...``).
FAILED_RANK = re.compile(r"\] (failed \(exitcode: -?\d+\) local_rank: (\d+) .*)")


def _first_failure(log_path: str) -> str:
    """Why a restarted job's first launch failed: the log up to torchrun's first ``failed (exitcode: ...)`` line read
    as :func:`_last_line` reads a failed job's, the rank it names first (a rank killed by a signal prints no
    exception: then that line itself). Not the log's last line, which is the second launch's; "" when the log has no
    such line."""
    lines = log_tail(log_path, 1 << 30)  # the whole log: the second launch may print more than a tail holds
    at = next((i for i, line in enumerate(lines) if FAILED_RANK.search(line)), None)
    if at is None:
        return ""
    return _reason(lines[:at + 1], int(FAILED_RANK.search(lines[at]).group(2)))


def _exception_name(line: str) -> bool:
    """Whether ``line`` (a rank's ``[rankR]: `` prefix dropped) starts with ``SomeError:`` or ``SomeException:``."""
    if line.startswith("[rank") and "]: " in line:
        line = line.split("]: ", 1)[1]
    return line.split(":", 1)[0].endswith(("Error", "Exception")) and " " not in line.split(":", 1)[0]


def _root_cause_rank(lines: list[str]) -> Optional[int]:
    """The rank torchrun's summary names under "Root Cause" (``rank : R (local_rank: L)``), or None."""
    for i, line in enumerate(lines):
        if line.startswith("Root Cause"):
            for later in lines[i + 1:i + 8]:
                key, _, value = later.partition(":")
                if key.strip() == "rank" and value.split() and value.split()[0].isdigit():
                    return int(value.split()[0])
    return None
