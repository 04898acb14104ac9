"""The multiprocessing forkserver the runner forks its workers from, what it preloads, and the
workers' environment variables (``QBENCH_PRELOAD``, ``QBENCH_AHEAD``, ``QBENCH_TUNING_CACHE``),
checked here once for both the runner and the early start.

This module imports neither torch nor any qbench module that does, so the command line can start
the forkserver as soon as the scenario is validated (torch-free, :func:`start_early`): its imports
(torch, then :mod:`qbench._preload`, seconds) then run at the same time as the runner's own (torch,
the environment record, the ceilings) instead of after them.
"""

from __future__ import annotations

import os
import time
from typing import Optional, Sequence

from qbench.schemes import tuning_cache

_CONTEXT = None
_PRELOADED: Optional[list[str]] = None  # what the forkserver of _CONTEXT preloads


#: ``QBENCH_PRELOAD`` values -> what the forkserver imports (:func:`preload_modules`).
PRELOADS = {"1": ["qbench._preload"], "0": ["torch"]}
#: Added to the default preload on CPU runs: the scheme packages and Inductor (:mod:`qbench._preload_cpu`).
CPU_PRELOAD = "qbench._preload_cpu"


def preload_enabled() -> bool:
    """Whether the forkserver preloads qbench's measurement modules (default); ``QBENCH_PRELOAD=0``
    preloads torch alone, each worker importing the rest after its go (kept for
    ``scripts/bench_decode.py``'s comparison)."""
    return os.environ.get("QBENCH_PRELOAD", "1") != "0"


def preload_modules(cpu: bool = False) -> list[str]:
    """Modules the forkserver imports once before forking any worker, by ``QBENCH_PRELOAD``:
    ``1`` (default) ``["qbench._preload"]`` (torch, Dynamo, torch.profiler, qbench's measurement
    modules; no scheme package is both fork-safe and slow to import,
    :data:`qbench._preload.FORK_SAFE_PACKAGES`), plus :data:`CPU_PRELOAD` for a run on the CPU
    (``cpu=True``); ``0`` ``["torch"]``. An unknown value reads as the default here; the runner
    refuses it first. Nothing is imported in the calling process."""
    modules = PRELOADS.get(os.environ.get("QBENCH_PRELOAD", "1"), PRELOADS["1"])
    return modules + [CPU_PRELOAD] if cpu and modules == PRELOADS["1"] else list(modules)


def env_ahead() -> Optional[int]:
    """``QBENCH_AHEAD`` (workers started ahead) as an int, None when unset.

    Raises:
        ValueError: not a whole number >= 0 (one line naming the variable and the value)."""
    ahead = os.environ.get("QBENCH_AHEAD")
    if ahead is None:
        return None
    if not (ahead.strip().isascii() and ahead.strip().isdigit()):  # isdigit alone takes '²', which int() refuses
        raise ValueError(f"environment variable QBENCH_AHEAD: must be a whole number >= 0 (workers started "
                         f"ahead), got {ahead!r}")
    return int(ahead)


def check_env() -> None:
    """Raise ValueError (one line naming the variable and the value) for a bad ``QBENCH_PRELOAD``
    (``0``, ``1``), ``QBENCH_AHEAD`` (:func:`env_ahead`) or ``QBENCH_TUNING_CACHE``
    (:func:`qbench.schemes.tuning_cache.check_env`)."""
    preload = os.environ.get("QBENCH_PRELOAD")
    if preload is not None and preload not in PRELOADS:
        raise ValueError(f"environment variable QBENCH_PRELOAD: must be 0 or 1, got {preload!r}")
    env_ahead()
    tuning_cache.check_env()


def context(cpu: bool = False):
    """The forkserver context, its server preloading :func:`preload_modules` (``cpu``: for a CPU
    run; the first call decides), started on first use or by :func:`start`."""
    global _CONTEXT, _PRELOADED
    if _CONTEXT is None:
        import multiprocessing

        _CONTEXT = multiprocessing.get_context("forkserver")
        _PRELOADED = preload_modules(cpu)
        _CONTEXT.set_forkserver_preload(_PRELOADED)
    return _CONTEXT


def preloaded() -> list[str]:
    """What the forkserver of :func:`context` preloads (``[]`` before :func:`context`)."""
    return list(_PRELOADED or [])


def predicts_cpu(requested: Optional[str]) -> bool:
    """Whether a run asked for device ``requested`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``; None:
    ``auto``) will run on the CPU, decided without importing torch: ``auto`` means CUDA where
    the host has an NVIDIA GPU's device node (``/dev/nvidiactl``, or ``/dev/dxg`` under WSL) and
    ``CUDA_VISIBLE_DEVICES`` does not hide every GPU. A wrong guess costs time, not correctness:
    :func:`ensure` replaces a forkserver started for the CPU when the run is on CUDA."""
    requested = requested or "auto"
    if requested == "cpu":
        return True
    if requested != "auto":
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return True
    return not any(os.path.exists(node) for node in ("/dev/nvidiactl", "/dev/dxg"))


def ensure(cpu: bool) -> list[str]:
    """Make sure the forkserver suits a run on the CPU (``cpu``) or CUDA, and return what it preloads.

    Starts it if it is not running (:func:`start`). A forkserver started with :data:`CPU_PRELOAD`
    for a run that is on CUDA is stopped and started again without it (its scheme packages are not
    fork-safe with CUDA); one started for CUDA serves a CPU run as it is (its workers import the
    scheme packages themselves)."""
    global _CONTEXT, _PRELOADED
    if not cpu and CPU_PRELOAD in preloaded():
        import multiprocessing.forkserver

        if pids():
            multiprocessing.forkserver._forkserver._stop()
        _CONTEXT, _PRELOADED = None, None
    start(cpu)
    return preloaded()


def start(cpu: bool = False) -> None:
    """Start the forkserver now (preloading for a CPU run with ``cpu``, :func:`preload_modules`)
    without waiting for its preload; the first worker's start waits for it. Only host work overlaps
    with the caller: the forkserver never touches CUDA. A second call, or a call after a worker
    started, does nothing.

    The forkserver gets ``/dev/null`` for stdout and stderr (each worker writes its own log): one
    that outlives its run (a run refused right after the start, its preload still importing) holds
    no pipe of the caller open, and a Ctrl-C during its preload prints no traceback. (Python's
    forkserver ignores a failed preload import silently either way; a worker then imports what it
    needs.)"""
    import multiprocessing.forkserver
    import sys

    context(cpu)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError):
            pass
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    env = {key: os.environ.get(key) for key in IMPORT_PATH_ENV}
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.environ.update(import_path_env(sys.path))
        multiprocessing.forkserver.ensure_running()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
        for key, value in env.items():  # this process's own environment as it was
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: The variables :func:`import_path_env` sets for the forkserver's start.
IMPORT_PATH_ENV = ("PYTHONPATH", "PYTHONSAFEPATH")


def import_path_env(path: Sequence[str]) -> dict[str, str]:
    """The environment that gives the forkserver this process's import path ``path`` (``sys.path``).

    Python 3.11's forkserver runs ``python -c ...`` and ignores the parent's ``sys.path`` while it
    preloads (CPython fixed that in later bugfix releases: the server now copies it): the server's
    ``sys.path`` then starts with its working directory, so a folder named
    ``qbench`` there (a clone, run from its parent) shadows an editable install as a namespace
    package and every worker fails to import. ``PYTHONSAFEPATH=1`` drops that entry (Python 3.11+,
    the ``-P`` option) and ``PYTHONPATH`` lists the parent's own entries, in order (``''`` as the
    working directory, as multiprocessing's spawn does), so workers import what this process does."""
    entries = [os.getcwd() if entry == "" else entry for entry in path]
    return {"PYTHONSAFEPATH": "1", "PYTHONPATH": os.pathsep.join(dict.fromkeys(entries))}


def worth_starting_early(scenario) -> bool:
    """Whether ``qbench run`` should start the forkserver as soon as the scenario is validated
    (before this process imports torch): a scenario (:class:`qbench.scenario.Scenario`) without a
    ``[tp]`` table (tensor-parallel runs use torchrun, not the forkserver) and workers' environment
    variables that pass :func:`check_env`. Anything else is refused later, with its one-line reason,
    and a forkserver started for it would only keep importing after the refusal."""
    if getattr(scenario, "tp", None) is not None:
        return False
    try:
        check_env()
    except ValueError:
        return False
    return True


def start_early(scenario, device: Optional[str] = None) -> bool:
    """``qbench run``'s step after validating ``scenario``: start the forkserver when
    :func:`worth_starting_early`, for the device the run will use (``device``: the ``--device``
    option, else the scenario's ``device``; :func:`predicts_cpu`). Returns whether it started."""
    if not worth_starting_early(scenario):
        return False
    start(cpu=predicts_cpu(device if device is not None else scenario.device))
    return True


def kill() -> None:
    """SIGKILL the forkserver, if one runs (one that hangs or stopped answering), and reap it; a
    :func:`start` later starts a new one."""
    import multiprocessing.forkserver
    import signal

    for pid in pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            multiprocessing.forkserver._forkserver._stop()  # closes its pipe, reaps it, forgets its address
        except (ChildProcessError, OSError):
            server = multiprocessing.forkserver._forkserver
            server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None


def pids() -> tuple[int, ...]:
    """The forkserver's process id when it runs (a 1-tuple), else ``()``: the environment record's
    CPU-busy check leaves its CPU time out (:func:`qbench.env.cpu_load`)."""
    import multiprocessing.forkserver

    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    return (pid,) if pid else ()


def cpu_ticks(pids: Sequence[int]) -> int:
    """utime + stime of the processes ``pids`` (the forkserver's, :func:`pids`) in clock ticks
    (``/proc/<pid>/stat`` fields 14 and 15, proc(5): the same USER_HZ unit as ``/proc/stat``); a pid
    that cannot be read counts 0. The environment record leaves this CPU time out of "other work"
    (:func:`qbench.env.cpu_load`), and :func:`wait_idle` waits until it stops growing."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)", field 3 is fields[0]
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total


def wait_idle(quiet_s: float = 0.1, limit_s: float = 30.0) -> float:
    """Wait until the forkserver (importing its preload) spent no CPU time over ``quiet_s``
    (:func:`cpu_ticks`), at most ``limit_s``; returns the seconds waited, 0 when none runs. A CPU
    run's ceilings are then measured on cores no import of this run takes."""
    t0 = time.perf_counter()
    own = pids()
    if not own:
        return 0.0
    before = cpu_ticks(own)
    while time.perf_counter() - t0 < limit_s:
        time.sleep(quiet_s)
        now = cpu_ticks(own)
        if now == before:
            break
        before = now
    return time.perf_counter() - t0
