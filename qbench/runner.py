"""Run a scenario: one worker process per scheme, rows gathered into one versioned result file.

While the run goes, its rows are written after every scheme (atomically, ``"complete": false``) to
a partial file beside the result, ``<name>.partial.json`` (:func:`partial_path`), so the rows
already measured survive a crash or Ctrl-C during a later scheme; only the complete run is written
to the result path (``"complete": true``), and then the partial file is removed. So an interrupted
``--force`` run leaves the old result file byte-identical, and its own rows in the partial file.
A worker that dies (signal, CUDA error, timeout) turns into ``failed`` rows
with the reason; every other scheme is unaffected.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from typing import Callable, Optional

from qbench import forkserver, jobs
from qbench.forkserver import preload_enabled, preload_modules  # noqa: F401 - the runner's public names
from qbench.tp.worker import runner_alive  # one liveness check (a zombie is dead) for both runners
from qbench.lifecycle import (  # noqa: F401 - re-exported: the runner's public names stay where they were
    RunError, RunInterrupted, RunOutcome, RunWriteError, _death_reason, check_output, default_output, done_labels, finish,
    log_said, log_tail, partial_path, prepare, record,
)
from qbench.measure import failed_rows, unavailable_reason
from qbench.scenario import Scenario



def run(scenario: Scenario, *, device: Optional[str] = None, out: Optional[str] = None, force: bool = False,
        progress: Optional[Callable[[str], None]] = None, show_bar: bool = False,
        per_scheme: Optional[Callable[[str], None]] = None, resume: bool = False, repeat: int = 1) -> RunOutcome:
    """Measure every scheme of ``scenario`` and write the result file.

    Args:
        scenario: a validated scenario.
        device: overrides ``scenario.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``).
        out: result path; default ``scenario.output`` or a fresh :func:`default_output`.
        force: overwrite an existing result file.
        progress: called with one line per finished scheme (``None``: silent).
        show_bar: draw a tqdm progress bar over the schemes.
        per_scheme: called with one line per finished scheme, ``[3/17] int8-bnb: ok x1 (6.2 s)``
            (the progress a log or CI shows when there is no terminal for the bar).
        repeat: measure each scheme in this many independent worker processes, one after another
            (no worker started ahead), and keep the first run's rows with every run's medians and
            their spread (:func:`qbench.lifecycle.combine_runs`).
        resume: keep the rows of the partial (else the complete) file at the output and measure
            only the schemes it has no rows of (:func:`qbench.lifecycle.resume_rows`).

    Raises:
        RunError: the device or the output path is unusable, another run holds the output, a
            partial file of an interrupted run is there (without ``resume``), or ``QBENCH_AHEAD`` /
            ``QBENCH_PRELOAD`` / ``QBENCH_TUNING_CACHE`` is not a valid value (nothing is measured
            or written); RunWriteError (a RunError): a write failed mid-run, the rows so far kept.
        RunInterrupted: a stop signal; the rows so far are in the partial file.
    """
    _check_worker_env()
    job = jobs.of_scenario(scenario)
    if job.run is not None:  # tensor parallel: qbench.tp runs one torchrun job per (scheme, tp_size, split)
        return jobs.load(job.run)(scenario, device=device, out=out, force=force, progress=progress, show_bar=show_bar,
                                resume=resume)
    started = time.perf_counter()
    output = None
    try:
        dev, output, doc = prepare(scenario, device, out, force, resume)
        # started by the command line, or now (its preload then overlaps the ceilings); replaced if it
        # was started for the CPU and the run is on CUDA
        preloaded = forkserver.ensure(cpu=dev.type == "cpu")
        t0 = time.perf_counter()
        # on the CPU the forkserver's imports would take cores from the ceilings: they wait for it
        waited = forkserver.wait_idle() if dev.type == "cpu" else None
        doc["ceilings"] = _ceilings(dev, scenario)
        if waited is not None and doc["ceilings"] is not None:
            doc["ceilings"]["waited_for_imports_s"] = waited
        doc["ceilings_wall_s"] = time.perf_counter() - t0
    except KeyboardInterrupt as exc:
        if output is not None:
            output.release()
        raise (output.interrupted(exc) if output is not None else RunInterrupted.of(exc)) from None
    try:
        return _measure(scenario, dev, output, doc, preloaded, started, force, progress, show_bar, per_scheme, repeat)
    finally:
        output.release()


def _measure(scenario, dev, output, doc, preloaded, started, force, progress, show_bar, per_scheme,
             repeat: int = 1) -> RunOutcome:
    if progress is not None:
        for line in doc["env"].get("warnings") or []:
            progress(f"warning: {line}")
        if output.resumed_from is not None:
            progress(f"resuming {output.resumed_from}: {len(doc['rows'])} rows kept")
        elif output.nothing_to_resume:
            progress(f"nothing to resume: no partial or complete result at {output.path}; measuring every scheme")
    job = jobs.of_scenario(scenario)
    done = done_labels(doc)
    entries = [(i, e) for i, e in enumerate(scenario.schemes) if e.label not in done]
    if progress is not None and output.resumed_from is not None and not entries:
        progress(f"every scheme has rows in {output.resumed_from}: nothing to measure (its wall time is kept)")
    bar = _bar(len(entries)) if show_bar else None
    tmp = None
    try:
        remove_stale_temp_folders()
        tmp = _temp_folder()
        workers = _Workers(scenario, dev, doc["ceilings"], tmp, started=started, skip=done,
                           prestart=0 if repeat > 1 else None, keep_logs=logs_folder(output.path))
        doc["workers"] = {**doc.get("workers", {}), "design": "one process per scheme" if repeat == 1 else
                          f"{repeat} processes per scheme, one after another", "repeat": repeat, "preloaded": preloaded,
                          "ahead": workers.ahead, "timeline": workers.timeline}
        try:
            for number, (index, entry) in enumerate(entries):
                if bar is not None:
                    bar.set_description(entry.label)
                t0 = time.perf_counter()
                rows = workers.rows(index)
                if repeat > 1:  # N independent processes of this scheme, then the next scheme
                    from qbench.lifecycle import combine_runs

                    rows = combine_runs([rows] + [workers.rows(index) for _ in range(repeat - 1)])
                record(doc, output, rows, t0, started)
                workers.stamp(index, "recorded", new=False)
                if per_scheme is not None:
                    counts: dict[str, int] = {}
                    for row in rows:
                        counts[row["status"]] = counts.get(row["status"], 0) + 1
                    said = ", ".join(f"{status} x{n}" for status, n in counts.items())
                    per_scheme(f"[{number + 1}/{len(entries)}] {entry.label}: {said} ({time.perf_counter() - t0:.1f} s)")
                if bar is not None:
                    bar.update(1)
                if progress is not None:
                    for row in rows:  # skipped rows are listed under the table; failures are news
                        if row["status"] == "failed":
                            progress(f"{row['scheme']}{job.where(row)}: {row['status']}: {row['reason']}")
        finally:
            workers.close()
    except KeyboardInterrupt as exc:
        raise output.interrupted(exc) from None
    except WorkerFilesError as exc:
        raise RunWriteError(f"{exc}; the run stopped; " + output._kept()) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if bar is not None:
            bar.close()
    return finish(doc, output, started, force=force)


#: Prefix of a run's temporary folder in ``TMPDIR``: ``qbench-<runner pid>-<random>``. A folder
#: whose runner is gone (SIGKILL) is removed by the next run (:func:`remove_stale_temp_folders`), or
#: by its measuring worker, which watches the runner (:mod:`qbench.worker`).
TEMP_PREFIX = "qbench-"
_TEMP_NAME = re.compile(r"^qbench-(?:tp-)?(\d+)-")


#: Seconds the runner waits for the forkserver to report the exit of a worker that has exited (a
#: zombie under the forkserver) or that the runner killed, before it takes the forkserver as stopped
#: or hung (:meth:`_Workers._await_exit`). A forkserver that answers reports an exit within
#: milliseconds.
EXIT_REPORT_S = 5.0
#: Seconds a SIGKILLed worker may take to exit (a CUDA context's teardown) before the runner stops
#: waiting for it: the forkserver, which would report it, is then killed so that nothing (not even
#: multiprocessing at the runner's exit) waits for it any longer.
KILL_WAIT_S = 30.0


def logs_folder(result: "os.PathLike[str] | str") -> str:
    """Where the logs of workers that died are kept for the result file ``result``: ``<result>.worker-logs``
    beside it (a worker's own folder is temporary; its timeout or crash reason names the kept log)."""
    return f"{result}.worker-logs"


def _read_rows(path: str) -> Optional[list]:
    """The rows a worker wrote to ``path`` (it writes them atomically, once every M is measured), or
    None when the file is missing or not a JSON list."""
    try:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    except (OSError, ValueError):
        return None
    return rows if isinstance(rows, list) else None


class ForkserverGone(Exception):
    """The forkserver died or stopped answering; the message is the failed rows' reason."""


class WorkerFilesError(OSError):
    """A worker's job file or temporary folder cannot be written (a full or read-only ``TMPDIR``)."""


def _temp_folder() -> str:
    try:
        return tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
    except OSError as exc:
        raise WorkerFilesError(f"TMPDIR {tempfile.gettempdir()}: cannot create the workers' folder "
                               f"({exc.strerror or exc})") from None


def remove_stale_temp_folders(folder: Optional[str] = None) -> list[str]:
    """Remove ``qbench-<pid>-*`` (and ``qbench-tp-<pid>-*``) folders of ``folder`` (default the temp
    folder) that belong to this user and whose runner process no longer exists; returns them."""
    folder = folder or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _TEMP_NAME.match(name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        path = os.path.join(folder, name)
        try:
            if os.stat(path).st_uid != os.getuid() or runner_alive(int(match.group(1))):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def blank_rows(scenario: Scenario, entry, dev) -> list[dict]:
    """The rows of one scheme with their identity and nothing measured, for the scenario's job kind
    (:attr:`qbench.jobs.Job.blank_rows`: a layer row per M, a model-step row per context and M, ...)."""
    return jobs.load(jobs.of_scenario(scenario).blank_rows)(scenario, entry, entry.scheme, dev)


def _bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="scheme", file=sys.stderr, leave=False)


def _ceilings(dev, scenario: Scenario) -> Optional[dict]:
    """The device's measured ceilings (:func:`qbench.ceilings.measure_ceilings`) for the compute
    dtypes of the scenario's schemes (on the CPU: of those that run there)."""
    try:
        from qbench.ceilings import measure_ceilings
    except ImportError as exc:
        return {"measured": None, "datasheet": None, "reason": f"ceilings unavailable: {exc}"}
    entries = [(e.scheme, e) for e in scenario.schemes]
    if dev.type == "cpu":
        entries = [(s, e) for s, e in entries if s.unavailable_reason(dev, e.options) is None]
    return measure_ceilings(dev, sorted({s.compute_dtype for s, _ in entries}))


def _env_ahead() -> Optional[int]:
    """``QBENCH_AHEAD`` as an int, None when unset (:func:`qbench.forkserver.env_ahead`).

    Raises:
        RunError: not a whole number >= 0 (one line naming the variable and the value)."""
    try:
        return forkserver.env_ahead()
    except ValueError as exc:
        raise RunError(str(exc)) from None


def _check_worker_env() -> None:
    """One line (RunError) for a bad ``QBENCH_PRELOAD`` (``0``, ``1``), ``QBENCH_AHEAD`` (a whole
    number >= 0) or ``QBENCH_TUNING_CACHE`` (``0`` or ``1``), before anything is measured or written
    (:func:`qbench.forkserver.check_env`)."""
    try:
        forkserver.check_env()
    except ValueError as exc:
        raise RunError(str(exc)) from None


#: The events of ``workers.timeline`` in a result file: each entry is ``{"scheme": label, event: s}``,
#: seconds since the run's start (:func:`run`'s ``wall_s`` origin). ``worker_*`` events are the
#: worker's own clock, absent where ``time.perf_counter`` is not CLOCK_MONOTONIC or the worker sent no
#: ``done`` (it died); a scheme skipped in the runner (CPU) has no entry.
TIMELINE_EVENTS = {
    "spawn": "the runner asked the forkserver for the worker",
    "forked": "the forkserver forked it (the first waits for the forkserver's preload)",
    "worker_started": "the worker's main() began",
    "worker_prepared": "imports and CUDA context done; waiting for its go",
    "go": "the runner sent go",
    "worker_go": "the worker received go",
    "worker_measured": "every M measured",
    "worker_written": "its rows file written",
    "worker_released": "GPU work synchronized, memory given back; it sends done",
    "done": "the runner received done (and sent the next worker its go)",
    "exited": "the worker process exited",
    "recorded": "its rows were added to the partial result file",
}


def must_release(scenario: Scenario, dev, ahead: int) -> bool:
    """Whether a CUDA worker must give its memory back to the driver (``gc.collect`` and
    ``torch.cuda.empty_cache``, a fraction of a second per scheme) before it says ``done``: only when
    two workers' peaks (the measuring one
    and the exiting one, :func:`qbench.layer.memory.estimate_bytes`, an upper bound: the one kind
    whose workers may overlap is the layer job) and the contexts of the
    workers waiting ahead (:data:`qbench.memory.PROCESS_OVERHEAD` each) would not fit in the free
    memory; otherwise its memory goes back when it exits, while the next one measures. True when the
    free memory cannot be read; False on the CPU (no ``done``-time release there)."""
    if dev.type != "cuda":
        return False
    if jobs.of_scenario(scenario).exclusive:  # a worker holds a whole model: never two at once
        return True
    from qbench import memory
    from qbench.layer.memory import estimate_bytes

    free = memory.free_bytes(dev)
    if free is None:
        return True
    return 2 * estimate_bytes(scenario, dev)["total"] + ahead * memory.PROCESS_OVERHEAD > free


def default_ahead(dev) -> int:
    """Workers started ahead of the measuring one: ``QBENCH_AHEAD`` if set; on CUDA
    ``clamp((cores - 2) // 2, 1, 6)``, and 0 on the CPU, where start-up would compete with the timed
    work for cores. A torchao or bitsandbytes worker takes seconds to prepare (its package import)
    while most schemes measure in a second or two after their go, so one worker ahead would leave
    the runner waiting on imports."""
    value = _env_ahead()
    if value is not None:
        return value
    if dev.type != "cuda":
        return 0
    return max(1, min(6, ((os.cpu_count() or 1) - 2) // 2))


class _Workers:
    """One worker process per scheme, the next ones started ahead of time.

    On CUDA, while worker ``i`` measures, workers ``i + 1 .. i + ahead`` start: each imports what its
    forkserver did not preload and creates its CUDA context, launches no GPU work, and waits for
    ``go``. Worker ``i + 1`` gets its go when worker ``i`` says ``done`` (its rows are on disk, its GPU
    work synchronized, only its process exit left: about 0.1 s per scheme on the H200, mostly the CUDA
    context's teardown, which then overlaps worker ``i + 1``'s build, not its timing) or has exited.
    Timing is therefore never shared with another process's kernels; only host-side start-up and
    teardown overlap it. Worker ``i``'s rows still count only once it has exited with status 0.

    Args:
        prestart: workers started ahead (int), True for 1, False for 0; None: :func:`default_ahead`.
        started: the run's start (``time.perf_counter()``), the origin of :attr:`timeline`; None: now.
        skip: labels of schemes not to measure (their rows were kept by ``--resume``): no worker
            is started ahead for them.

    A forkserver that dies, or does not fork a worker within ``timing.scheme_timeout_s`` (stopped,
    hung, a preload that never ends), is killed, and that scheme and every later one get
    ``failed`` rows saying so, instead of a traceback or a run that never ends. No wait on the
    forkserver is unbounded: a worker's exit (which only the forkserver, its parent, reports) is
    waited for until the scheme's deadline, :data:`KILL_WAIT_S` s after its SIGKILL, and
    :data:`EXIT_REPORT_S` s once it has exited (a zombie); a forkserver that does not report it is
    killed the same way (the worker's rows are
    kept when it wrote them: its measurement finished; otherwise they fail with that reason).

    Attributes:
        timeline: one entry per scheme that got a worker, in the order they ran
            (:data:`TIMELINE_EVENTS`): where a run's wall time went between the workers' phases.
    """

    def __init__(self, scenario: Scenario, dev, ceilings: Optional[dict], folder: str,
                 prestart: "Optional[bool | int]" = None, started: Optional[float] = None, skip=(),
                 keep_logs: Optional[str] = None):
        self.scenario, self.dev, self.ceilings, self.folder = scenario, dev, ceilings, folder
        self.keep_logs = keep_logs  # where a worker that died leaves its log (:func:`logs_folder`), or None
        #: the schemes this run measures, by index (those labelled in ``skip`` have rows already: --resume)
        self.order = [i for i, e in enumerate(scenario.schemes) if e.label not in set(skip)]
        self.current = None  # the measuring worker's process, stopped by close()
        self.broken: Optional[str] = None  # why the forkserver can start no more workers
        self.ahead = default_ahead(dev) if prestart is None else int(prestart)
        self.started: dict[int, tuple] = {}
        self.runs_of: dict[int, int] = {}  # workers started per scheme (qbench run --repeat)
        self.gone: set[int] = set()  # workers already given their go (by the previous one's "done")
        self.release = must_release(scenario, dev, self.ahead)
        self.origin = time.perf_counter() if started is None else started
        self.timeline: list[dict] = []
        self._entries: dict[int, dict] = {}

    def stamp(self, index: int, event: str, at: Optional[float] = None, new: bool = True) -> None:
        """Record ``event`` of scheme ``index``'s worker at ``at`` (``time.perf_counter()``; None:
        now) in :attr:`timeline`, as seconds since the run's start; with ``new=False`` only for a
        scheme that already has an entry (one that got a worker)."""
        entry = self._entries.get(index)
        if entry is None and not new:
            return
        if entry is None:
            entry = self._entries[index] = {"scheme": self.scenario.schemes[index].label}
            self.timeline.append(entry)
        entry[event] = round((time.perf_counter() if at is None else at) - self.origin, 4)

    def _start(self, index: int) -> tuple:
        """Start scheme ``index``'s worker (waiting for its go).

        Raises:
            WorkerFilesError: its job file cannot be written (TMPDIR full or read-only).
            ForkserverGone: the forkserver died or did not fork it within the scheme timeout.
        """
        from qbench import worker

        if self.broken is not None:
            raise ForkserverGone(self.broken)
        scheme = self.scenario.schemes[index].scheme
        self.runs_of[index] = self.runs_of.get(index, 0) + 1  # --repeat: one folder per run
        self.gone.discard(index)  # a new worker of this scheme waits for its own go
        run = self.runs_of[index]
        folder = os.path.join(self.folder, str(index) if run == 1 else f"{index}-run{run}")
        job_path, rows_path, log_path = (os.path.join(folder, n) for n in ("job.json", "rows.json", "worker.log"))
        try:
            os.makedirs(folder)
            with open(job_path, "w", encoding="utf-8") as f:
                json.dump({"scenario": self.scenario.to_dict(), "source": self.scenario.source, "entry_index": index,
                           "device": str(self.dev), "ceilings": self.ceilings, "release_before_done": self.release,
                           "runner_pid": os.getpid(), "shared_dir": self.folder}, f)
        except OSError as exc:
            raise WorkerFilesError(f"{job_path}: cannot write the worker's job file ({exc.strerror or exc})") from None
        env = scheme.worker_environ()
        # "go" (runner -> worker) and "done" (worker -> runner) are messages on one pipe (not Events:
        # no named semaphore for the resource tracker to report at exit; and a worker whose runner
        # died sees EOF and exits: before its go at once, while measuring through a watcher thread).
        mine, theirs = forkserver.context().Pipe(duplex=True)
        proc = forkserver.context().Process(target=worker.child, args=(job_path, rows_path, log_path, env, theirs),
                                            daemon=True)
        self.stamp(index, "spawn")
        self._fork(proc, mine, theirs)  # returns once the forkserver has forked the worker (after its preload)
        self.stamp(index, "forked")
        theirs.close()
        return proc, mine, rows_path, log_path

    def _fork(self, proc, mine, theirs) -> None:
        """``proc.start()``, bounded by the scheme timeout: the forkserver answers with the worker's
        pid; one that is stopped or hung would block the run for ever, one that died raises
        (EOFError, ConnectionError) from inside multiprocessing."""
        timeout = self.scenario.timing.scheme_timeout_s
        failed: list[BaseException] = []

        def start() -> None:
            try:
                proc.start()
            except BaseException as exc:  # noqa: BLE001 - reported to the runner's thread
                failed.append(exc)

        thread = threading.Thread(target=start, name="qbench-fork", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive() or failed:
            if thread.is_alive():
                self.broken = (f"the forkserver did not start a worker within {timeout:g} s (timing.scheme_timeout_s; "
                               "stopped or hung); it was killed, and no later scheme was measured")
            else:
                exc = failed[0]
                self.broken = (f"the forkserver died ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); "
                               "no later scheme was measured")
            forkserver.kill()
            thread.join(10)
            mine.close()
            theirs.close()
            raise ForkserverGone(self.broken)

    def _go(self, index: int, conn) -> None:
        if index in self.gone:
            return
        self.gone.add(index)
        self.stamp(index, "go")
        try:
            conn.send_bytes(b"go")
        except OSError:  # the worker already died while preparing; its exit code tells why
            pass

    def skip_reason(self, index: int) -> Optional[str]:
        """On the CPU, why scheme ``index`` cannot run here, decided in this process by the worker's
        own rule (:func:`qbench.measure.unavailable_reason`: a package check, ``cuda_only``, a compiled
        scheme without a C++ compiler; nothing is imported), so a
        skipped scheme costs no worker start-up (1-2 s of imports each on the 2-core CI machine).
        On CUDA None: the device checks would create a CUDA context in the runner; the worker
        decides, as before. None too for a job kind that emulates a scheme without a kernel here
        (:attr:`qbench.jobs.Job.emulates`)."""
        if self.dev.type != "cpu" or index in self.started:
            return None
        entry = self.scenario.schemes[index]
        scheme = entry.scheme
        if jobs.of_scenario(self.scenario).emulates and scheme.emulate is not None:
            return None  # the job runs it emulated where it has no kernel: the worker decides
        return unavailable_reason(scheme, entry, self.dev)

    def _failed(self, index: int, reason: str) -> list[dict]:
        entry = self.scenario.schemes[index]
        return failed_rows(blank_rows(self.scenario, entry, self.dev), "failed", reason)

    def rows(self, index: int) -> list[dict]:
        """Run scheme ``index`` (started ahead or now) to completion and return its rows.

        Raises:
            WorkerFilesError: a worker's job file cannot be written."""
        reason = self.skip_reason(index)
        if reason is not None:
            entry = self.scenario.schemes[index]
            return failed_rows(blank_rows(self.scenario, entry, self.dev), "skipped", reason)
        try:
            proc, conn, rows_path, log_path = self.started.pop(index, None) or self._start(index)
        except ForkserverGone as exc:
            return self._failed(index, str(exc))
        self.current = proc
        self._go(index, conn)
        position = self.order.index(index) if index in self.order else len(self.order)
        for ahead in self.order[position + 1: position + 1 + self.ahead]:
            if ahead not in self.started and self.skip_reason(ahead) is None:  # none for a scheme skipped here
                try:
                    self.started[ahead] = self._start(ahead)
                except ForkserverGone:  # that scheme fails when its turn comes; this one measures on
                    break
        timeout = self.scenario.timing.scheme_timeout_s
        deadline = time.monotonic() + timeout
        from multiprocessing.connection import wait

        ready = wait([conn, proc.sentinel], timeout)
        timed_out = not ready
        if timed_out:  # killed before its pipe closes (a worker whose pipe closes stops itself)
            proc.kill()
        if conn in ready:
            try:
                said = conn.recv_bytes()
            except (EOFError, OSError):
                said = b""
            if said.split(b" ", 1)[0] == b"done":
                self.stamp(index, "done")
                following = self.order[position + 1] if position + 1 < len(self.order) else None
                if following in self.started:  # the next one measures while this one exits
                    self._go(following, self.started[following][1])
                self._worker_stamps(index, said)
        conn.close()
        # every wait on the forkserver's answer (the worker's exit) is bounded: by the scheme's
        # deadline while the worker may still measure, then by KILL_WAIT_S after its SIGKILL, and by
        # EXIT_REPORT_S once it has exited (a zombie) without a report
        state = self._await_exit(proc, time.monotonic() + KILL_WAIT_S if timed_out else deadline)
        if state == "running":  # still measuring at the deadline
            timed_out = True
            proc.kill()
            state = self._await_exit(proc, time.monotonic() + KILL_WAIT_S)
        self.stamp(index, "exited")
        self.current = None
        if state != "reported":  # the forkserver, the worker's parent, did not say how it ended
            self._abandon_forkserver(proc, state, killed=timed_out)
            rows = _read_rows(rows_path)
            if rows is not None:  # written (atomically) after every M was measured: a finished measurement
                return rows
            said = log_said(log_path)
            return self._failed(index, (f"worker timed out after {timeout:g} s; " if timed_out else "") + self.broken
                                + (f"; {said}" if said else "") + self._kept_log(index, log_path))
        code = None if timed_out else proc.exitcode
        if code == 0 and os.path.exists(rows_path):
            with open(rows_path, encoding="utf-8") as f:
                return json.load(f)
        return self._failed(index, _death_reason(code, log_path, timeout) + self._kept_log(index, log_path))

    def _kept_log(self, index: int, log_path: str) -> str:
        """Copy the log of scheme ``index``'s worker, which died, into :attr:`keep_logs` (its run folder is removed at
        the end) and return ``"; log: PATH"`` for the reason, or ``""`` when none is kept or it cannot be copied."""
        if not self.keep_logs or not os.path.exists(log_path):
            return ""
        name = re.sub(r"[^A-Za-z0-9._+-]", "_", f"{index}-{self.scenario.schemes[index].label}")[:120] + ".log"
        try:
            os.makedirs(self.keep_logs, exist_ok=True)
            shutil.copyfile(log_path, os.path.join(self.keep_logs, name))
        except OSError:
            return ""
        return f"; log: {os.path.join(self.keep_logs, name)}"

    def _await_exit(self, proc, until: float) -> str:
        """Wait for the forkserver to report worker ``proc``'s exit (the forkserver is its parent:
        only it reaps the worker and writes the exit status to ``proc.sentinel``), at most until
        ``until`` (``time.monotonic()``). Returns ``"reported"``; ``"unreported"`` once the worker
        has exited (a zombie in ``/proc``) and no report came for :data:`EXIT_REPORT_S` s (a
        stopped or hung forkserver; checked every 0.5 s); ``"running"`` when ``until`` passed and
        the worker has not exited (or ``/proc`` cannot tell)."""
        exited_at = None
        while True:
            now = time.monotonic()
            end = until if exited_at is None else exited_at + EXIT_REPORT_S
            proc.join(max(0.0, min(0.5, end - now)))
            if proc.exitcode is not None:
                return "reported"
            now = time.monotonic()
            if exited_at is None and not runner_alive(proc.pid):
                exited_at = now
            if exited_at is not None and now - exited_at >= EXIT_REPORT_S:
                return "unreported"
            if exited_at is None and now >= until:
                return "running"

    def _abandon_forkserver(self, proc, state: str, killed: bool) -> None:
        """The forkserver did not report worker ``proc``'s exit (``state``, :meth:`_await_exit`:
        ``"unreported"``, or ``"running"``: the worker outlived its SIGKILL by :data:`KILL_WAIT_S`):
        SIGKILL that worker and every worker started ahead (while the forkserver still holds their
        pids, so no pid is reused), then the forkserver (:func:`qbench.forkserver.kill`; its zombie
        children go to init), and set :attr:`broken`: every later scheme fails with that reason.
        ``killed``: the runner killed ``proc`` at the scheme timeout."""
        server = forkserver.pids()
        server = server[0] if server else "?"
        if state == "running":
            self.broken = (f"the worker (pid {proc.pid}) did not exit within {KILL_WAIT_S:g} s of its SIGKILL; the "
                           f"forkserver (pid {server}), which would report its exit, was killed, and no later scheme "
                           "was measured")
        else:
            what = "was killed at the scheme timeout" if killed else "exited"
            self.broken = (f"the forkserver (pid {server}) stopped answering (stopped or hung): the worker (pid "
                           f"{proc.pid}) {what}, but its exit was not reported within {EXIT_REPORT_S:g} s; it was "
                           "killed, and no later scheme was measured")
        ahead = list(self.started.values())
        self.started.clear()
        for other, conn, *_ in ahead:
            conn.close()
        self._stop_workers([proc] + [other for other, *_ in ahead])

    def _stop_workers(self, procs) -> None:
        """SIGKILL the workers ``procs`` and wait (bounded: :meth:`_await_exit`, at most
        :data:`KILL_WAIT_S`) for their exits; a forkserver that does not report one (or that
        :attr:`broken` gave up on) is killed after the workers, which ends every wait: its pipes
        close and multiprocessing reads the exits as 255."""
        procs = [p for p in procs if p.exitcode is None]
        for p in procs:
            p.kill()
        until = time.monotonic() + KILL_WAIT_S
        if self.broken is not None or any(self._await_exit(p, until) != "reported" for p in procs):
            forkserver.kill()
            for p in procs:
                p.join(1.0)

    def _worker_stamps(self, index: int, said: bytes) -> None:
        """The worker's own clock readings from its ``done`` message, into the timeline as
        ``worker_<event>``. Only where ``time.perf_counter`` is CLOCK_MONOTONIC (Linux: one clock for
        every process of the host, so the worker's readings and the runner's share an origin)."""
        if "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
            return
        try:
            stamps = json.loads(said.split(b" ", 1)[1])
        except (IndexError, ValueError):
            return
        for event, at in stamps.items():
            if isinstance(at, (int, float)):
                self.stamp(index, f"worker_{event}", at)

    def close(self) -> None:
        """Stop the measuring worker, if one still runs, and the workers started ahead that will not
        run (a stop signal, an error)."""
        procs = [self.current] if self.current is not None else []
        for proc, conn, *_ in self.started.values():
            conn.close()
            procs.append(proc)
        self.current = None
        self.started.clear()
        self._stop_workers(procs)
