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
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import qbench
from qbench import forkserver, schemes
from qbench.forkserver import preload_enabled, preload_modules  # noqa: F401 - the runner's public names
from qbench.lifecycle import (  # noqa: F401 - re-exported: the runner's public names stay where they were
    RunError, RunInterrupted, RunOutcome, _death_reason, check_output, default_output, finish, log_tail, partial_path, prepare,
    record,
)
from qbench.measure import base_row, failed_rows
from qbench.results import write_results
from qbench.scenario import Scenario

_PACKAGE_ROOT = str(Path(qbench.__file__).resolve().parent.parent)


def run(scenario: Scenario, *, device: Optional[str] = None, out: Optional[str] = None, force: bool = False,
        progress: Optional[Callable[[str], None]] = None, show_bar: bool = False,
        per_scheme: Optional[Callable[[str], None]] = None) -> RunOutcome:
    """Measure every scheme of ``scenario`` and write the result file.

    Args:
        scenario: a validated scenario.
        device: overrides ``scenario.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``).
        out: result path; default ``scenario.output`` or :func:`default_output`.
        force: overwrite an existing result file.
        progress: called with one line per finished scheme (``None``: silent).
        show_bar: draw a tqdm progress bar over the schemes.
        per_scheme: called with one line per finished scheme, ``[3/17] int8-bnb: ok x1 (6.2 s)``
            (the progress a log or CI shows when there is no terminal for the bar).

    Raises:
        RunError: the device or the output path is unusable, or ``QBENCH_AHEAD`` / ``QBENCH_PRELOAD``
            / ``QBENCH_TUNING_CACHE`` is not a valid value (nothing is measured or written).
    """
    _check_worker_env()
    if scenario.tp is not None:  # tensor parallel: qbench.tp runs one torchrun job per (scheme, tp_size, split)
        from qbench.tp import runner as tp_runner

        return tp_runner.run_tp(scenario, device=device, out=out, force=force, progress=progress, show_bar=show_bar)
    started = time.perf_counter()
    try:
        dev, path, doc = prepare(scenario, device, out, force)
        # started by the command line, or now (its preload then overlaps the ceilings); replaced if it
        # was started for the CPU and the run is on CUDA
        preloaded = forkserver.ensure(cpu=dev.type == "cpu")
        if dev.type == "cuda":
            t0 = time.perf_counter()
            doc["ceilings"] = _ceilings(dev, scenario)
            doc["ceilings_wall_s"] = time.perf_counter() - t0
    except KeyboardInterrupt:
        raise RunInterrupted() from None
    partial = partial_path(path)
    write_results(partial, doc, force=True)
    if progress is not None:
        for line in doc["env"].get("warnings") or []:
            progress(f"warning: {line}")
    entries = list(enumerate(scenario.schemes))
    bar = _bar(len(entries)) if show_bar else None
    tmp = tempfile.TemporaryDirectory(prefix="qbench-")
    workers = _Workers(scenario, dev, doc["ceilings"], tmp.name, started=started)
    doc["workers"] = {"design": "one process per scheme", "preloaded": preloaded, "ahead": workers.ahead,
                      "timeline": workers.timeline}
    try:
        for index, entry in entries:
            if bar is not None:
                bar.set_description(entry.label)
            t0 = time.perf_counter()
            rows = workers.rows(index)
            record(doc, partial, rows, t0, started)
            workers.stamp(index, "recorded", new=False)
            if per_scheme is not None:
                counts: dict[str, int] = {}
                for row in rows:
                    counts[row["status"]] = counts.get(row["status"], 0) + 1
                said = ", ".join(f"{status} x{n}" for status, n in counts.items())
                per_scheme(f"[{index + 1}/{len(entries)}] {entry.label}: {said} ({time.perf_counter() - t0:.1f} s)")
            if bar is not None:
                bar.update(1)
            if progress is not None:
                for row in rows:  # skipped rows are listed under the table; failures are news
                    if row["status"] == "failed":
                        progress(f"{row['scheme']} M={row['m']}: {row['status']}: {row['reason']}")
    except KeyboardInterrupt:
        raise RunInterrupted(partial, len(doc["rows"])) from None
    finally:
        workers.close()
        tmp.cleanup()
        if bar is not None:
            bar.close()
    return finish(doc, path, started, force=force)


def blank_rows(scenario: Scenario, entry, dev) -> list[dict]:
    """The rows of one scheme with their identity and nothing measured, for the scenario's job kind
    (a layer row per M; a model-step row per context and M)."""
    scheme = schemes.get(entry.name)
    if scenario.job == "step":
        from qbench.step.measure import blank_rows as step_rows

        return step_rows(scenario, entry, scheme, dev)
    return [base_row(scenario, entry, scheme, m, dev) for m in scenario.m]


def _bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="scheme", file=sys.stderr, leave=False)


def _ceilings(dev, scenario: Scenario) -> Optional[dict]:
    try:
        from qbench.ceilings import measure_ceilings
    except ImportError as exc:
        return {"measured": None, "datasheet": None, "reason": f"ceilings unavailable: {exc}"}
    dtypes = sorted({schemes.get(e.name).compute_dtype for e in scenario.schemes})
    return measure_ceilings(dev, dtypes)



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
    ``torch.cuda.empty_cache``, about 0.2 s per scheme on the H200 host, ``results/h200/speed/
    2026-12-01/call10``) before it says ``done``: only when two workers' peaks (the measuring one
    and the exiting one, :func:`qbench.memory.estimate_bytes`, an upper bound) and the contexts of the
    workers waiting ahead (:data:`qbench.memory.PROCESS_OVERHEAD` each) would not fit in the free
    memory; otherwise its memory goes back when it exits, while the next one measures. True when the
    free memory cannot be read; False on the CPU (no ``done``-time release there)."""
    if dev.type != "cuda":
        return False
    if scenario.job == "step":  # a step worker holds a whole model and its KV cache: never two at once
        return True
    from qbench import memory

    free = memory.free_bytes(dev)
    if free is None:
        return True
    return 2 * memory.estimate_bytes(scenario, dev)["total"] + ahead * memory.PROCESS_OVERHEAD > free


def default_ahead(dev) -> int:
    """Workers started ahead of the measuring one: ``QBENCH_AHEAD`` if set; on CUDA
    ``clamp((cores - 2) // 2, 1, 6)``, and 0 on the CPU, where start-up would compete with the timed
    work for cores. On the H200 host (16 cores: 6 ahead) a torchao or bitsandbytes worker prepares
    in 5-7 s (its package import) while most schemes measure in 0.5-2 s after their go
    (``results/h200/speed/``), so one worker ahead leaves the runner waiting on imports."""
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

    Attributes:
        timeline: one entry per scheme that got a worker, in the order they ran
            (:data:`TIMELINE_EVENTS`): where a run's wall time went between the workers' phases.
    """

    def __init__(self, scenario: Scenario, dev, ceilings: Optional[dict], folder: str,
                 prestart: "Optional[bool | int]" = None, started: Optional[float] = None):
        self.scenario, self.dev, self.ceilings, self.folder = scenario, dev, ceilings, folder
        self.ahead = default_ahead(dev) if prestart is None else int(prestart)
        self.started: dict[int, tuple] = {}
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
        from qbench import worker

        scheme = schemes.get(self.scenario.schemes[index].name)
        folder = os.path.join(self.folder, str(index))
        os.makedirs(folder)
        job_path, rows_path, log_path = (os.path.join(folder, n) for n in ("job.json", "rows.json", "worker.log"))
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump({"scenario": self.scenario.to_dict(), "source": self.scenario.source, "entry_index": index,
                       "device": str(self.dev), "ceilings": self.ceilings, "release_before_done": self.release}, f)
        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        for key, value in scheme.worker_env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        # "go" (runner -> worker) and "done" (worker -> runner) are messages on one pipe (not Events:
        # no named semaphore for the resource tracker to report at exit; and a worker whose runner
        # died sees EOF and exits).
        mine, theirs = forkserver.context().Pipe(duplex=True)
        proc = forkserver.context().Process(target=worker.child, args=(job_path, rows_path, log_path, env, theirs),
                                            daemon=True)
        self.stamp(index, "spawn")
        proc.start()  # returns once the forkserver has forked the worker: it waits for the preload first
        self.stamp(index, "forked")
        theirs.close()
        return proc, mine, rows_path, log_path

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
        """On the CPU, why scheme ``index`` cannot run here, decided in this process (a package
        check, ``cuda_only``, a compiled scheme without a C++ compiler: nothing is imported), so a
        skipped scheme costs no worker start-up (1-2 s of imports each on the 2-core CI machine).
        On CUDA None: the device checks would create a CUDA context in the runner; the worker
        decides, as before."""
        if self.dev.type != "cpu" or index in self.started:
            return None
        from qbench.compile_info import have_compiler

        entry = self.scenario.schemes[index]
        reason = schemes.get(entry.name).unavailable_reason(self.dev, entry.options)
        if reason is None and entry.options.mode == "compiled" and not have_compiler():
            reason = "torch.compile on CPU needs a C++ compiler (none found)"
        return reason

    def rows(self, index: int) -> list[dict]:
        """Run scheme ``index`` (started ahead or now) to completion and return its rows."""
        reason = self.skip_reason(index)
        if reason is not None:
            entry = self.scenario.schemes[index]
            return failed_rows(blank_rows(self.scenario, entry, self.dev), "skipped", reason)
        proc, conn, rows_path, log_path = self.started.pop(index, None) or self._start(index)
        self._go(index, conn)
        for ahead in range(index + 1, min(index + 1 + self.ahead, len(self.scenario.schemes))):
            if ahead not in self.started and self.skip_reason(ahead) is None:  # none for a scheme skipped here
                self.started[ahead] = self._start(ahead)
        timeout = self.scenario.timing.scheme_timeout_s
        deadline = time.monotonic() + timeout
        from multiprocessing.connection import wait

        ready = wait([conn, proc.sentinel], timeout)
        if conn in ready:
            try:
                said = conn.recv_bytes()
            except (EOFError, OSError):
                said = b""
            if said.split(b" ", 1)[0] == b"done":
                self.stamp(index, "done")
                if index + 1 in self.started:  # the next one measures while this one exits
                    self._go(index + 1, self.started[index + 1][1])
                self._worker_stamps(index, said)
        conn.close()
        proc.join(max(0.0, deadline - time.monotonic()))
        self.stamp(index, "exited")
        if proc.is_alive():
            proc.kill()
            proc.join()
            code = None
        else:
            code = proc.exitcode
        if code == 0 and os.path.exists(rows_path):
            with open(rows_path, encoding="utf-8") as f:
                return json.load(f)
        entry = self.scenario.schemes[index]
        return failed_rows(blank_rows(self.scenario, entry, self.dev), "failed", _death_reason(code, log_path, timeout))

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
        """Stop workers started ahead that will not run (interrupt, error)."""
        for proc, conn, *_ in self.started.values():
            conn.close()
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.started.clear()
