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

import datetime as _dt
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import qbench
from qbench import env as envmod
from qbench import memory
from qbench import schemes
from qbench.measure import base_row, failed_rows
from qbench.results import write_results
from qbench.scenario import Scenario

_PACKAGE_ROOT = str(Path(qbench.__file__).resolve().parent.parent)


class RunError(Exception):
    """A run that cannot start (bad device, output not writable); one line, exit status 2."""


@dataclass
class RunOutcome:
    """What :func:`run` produced: the result document, where it was written, and the exit code
    (0: at least one row ``ok``; 1: every row skipped or failed)."""

    doc: dict
    path: Path
    exit_code: int
    message: str = ""


def default_output(scenario: Scenario, device: str) -> Path:
    """``results/runs/<scenario>-<device>-<UTC timestamp>.json``: a fresh file every run."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / "runs" / f"{scenario.name}-{device.replace(':', '')}-{stamp}.json"


def partial_path(path: Path) -> Path:
    """Where an unfinished run keeps its rows: ``keep.json`` -> ``keep.partial.json``."""
    return path.with_name(f"{path.stem}.partial{path.suffix or '.json'}")


def check_output(path: Path, force: bool) -> None:
    """Refuse, before anything is measured, an output that exists (without ``force``) or whose
    folder cannot be written.

    Raises:
        RunError: one line naming the path.
    """
    if path.exists() and not force:
        raise RunError(f"{path}: already exists; pass --force to overwrite it or --out to choose another file")
    if path.exists() and path.is_dir():
        raise RunError(f"{path}: is a directory, not a result file")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".qbench-probe-"):
            pass
    except OSError as exc:
        raise RunError(f"{path}: cannot write there: {exc.strerror or exc}") from None


def prepare(scenario: Scenario, device: Optional[str], out: Optional[str], force: bool):
    """The checks every run makes before it measures or writes anything, and its empty document.

    Returns ``(device, path, doc)``: the resolved torch device, the result path, and the result
    document with ``env`` and ``scenario`` filled, ``"complete": false`` and no rows.

    Raises:
        RunError: the device or the output path is unusable.
        ScenarioError: the layer does not fit in the device's free memory (:mod:`qbench.memory`).
    """
    try:
        dev = envmod.resolve_device(device or scenario.device)
    except (ValueError, RuntimeError) as exc:
        raise RunError(str(exc)) from None
    memory.check_fits(scenario, dev)  # before anything is allocated or written
    path = Path(out or scenario.output or default_output(scenario, str(dev)))
    check_output(path, force)
    doc = {
        "schema_version": qbench.SCHEMA_VERSION, "complete": False, "qbench_version": qbench.__version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "wall_s": None,
        "env": envmod.collect(dev), "scenario": scenario.to_dict(), "ceilings": None, "rows": [],
    }
    return dev, path, doc


def run(scenario: Scenario, *, device: Optional[str] = None, out: Optional[str] = None, force: bool = False,
        progress: Optional[Callable[[str], None]] = None, show_bar: bool = False) -> RunOutcome:
    """Measure every scheme of ``scenario`` and write the result file.

    Args:
        scenario: a validated scenario.
        device: overrides ``scenario.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``).
        out: result path; default ``scenario.output`` or :func:`default_output`.
        force: overwrite an existing result file.
        progress: called with one line per finished scheme (``None``: silent).
        show_bar: draw a tqdm progress bar over the schemes.

    Raises:
        RunError: the device or the output path is unusable (nothing is measured or written).
    """
    if scenario.tp is not None:  # tensor parallel: qbench.tp runs one torchrun job per (scheme, tp_size, split)
        from qbench.tp import runner as tp_runner

        return tp_runner.run_tp(scenario, device=device, out=out, force=force, progress=progress, show_bar=show_bar)
    started = time.perf_counter()
    dev, path, doc = prepare(scenario, device, out, force)
    if dev.type == "cuda":
        t0 = time.perf_counter()
        doc["ceilings"] = _ceilings(dev, scenario)
        doc["ceilings_wall_s"] = time.perf_counter() - t0
    partial = partial_path(path)
    write_results(partial, doc, force=True)
    if progress is not None:
        for line in doc["env"].get("warnings") or []:
            progress(f"warning: {line}")
    entries = list(enumerate(scenario.schemes))
    bar = _bar(len(entries)) if show_bar else None
    tmp = tempfile.TemporaryDirectory(prefix="qbench-")
    workers = _Workers(scenario, dev, doc["ceilings"], tmp.name)
    try:
        for index, entry in entries:
            if bar is not None:
                bar.set_description(entry.label)
            t0 = time.perf_counter()
            rows = workers.rows(index)
            record(doc, partial, rows, t0, started)
            if bar is not None:
                bar.update(1)
            if progress is not None:
                for row in rows:  # skipped rows are listed under the table; failures are news
                    if row["status"] == "failed":
                        progress(f"{row['scheme']} M={row['m']}: {row['status']}: {row['reason']}")
    finally:
        workers.close()
        tmp.cleanup()
        if bar is not None:
            bar.close()
    return finish(doc, path, started, force=force)


def record(doc: dict, path: Path, rows: list[dict], t0: float, started: float) -> None:
    """Add one job's rows (stamped with ``worker_wall_s`` since ``t0``) and rewrite the result
    file, still ``"complete": false``, so that measured rows survive a later crash."""
    now = time.perf_counter()
    for row in rows:
        row["worker_wall_s"] = now - t0
    doc["rows"].extend(rows)
    doc["wall_s"] = now - started
    write_results(path, doc, force=True)


def finish(doc: dict, path: Path, started: float, *, force: bool = False) -> RunOutcome:
    """Mark the run complete, write it to ``path`` (replacing an existing file only with ``force``),
    remove its partial file, and give the exit code: 1 when no row is ``ok``."""
    doc["complete"] = True
    doc["wall_s"] = time.perf_counter() - started
    write_results(path, doc, force=force)
    partial = partial_path(path)
    if partial.exists():
        partial.unlink()
    if not any(r["status"] == "ok" for r in doc["rows"]):
        return RunOutcome(doc, path, 1, f"no row was measured: all {len(doc['rows'])} rows were skipped or failed")
    return RunOutcome(doc, path, 0)


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


_CONTEXT = None


def _context():
    """The forkserver context, its server preloading torch (started on first use)."""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["qbench._preload"])
    return _CONTEXT


class _Workers:
    """One worker process per scheme, the next one started ahead of time.

    On CUDA, while worker ``i`` measures, worker ``i + 1`` starts: it imports its libraries and creates
    its CUDA context (seconds on some hosts), launches no GPU work, and waits for ``go``, which
    is given only after worker ``i`` has exited. Timing is therefore never shared with another
    process's kernels; only the next worker's host-side start-up overlaps it.
    """

    def __init__(self, scenario: Scenario, dev, ceilings: Optional[dict], folder: str,
                 prestart: Optional[bool] = None):
        self.scenario, self.dev, self.ceilings, self.folder = scenario, dev, ceilings, folder
        # On the CPU the start-up would compete with the timed work for cores: no overlap.
        self.prestart = dev.type == "cuda" if prestart is None else prestart
        self.started: dict[int, tuple] = {}

    def _start(self, index: int) -> tuple:
        from qbench import worker

        scheme = schemes.get(self.scenario.schemes[index].name)
        folder = os.path.join(self.folder, str(index))
        os.makedirs(folder)
        job_path, rows_path, log_path = (os.path.join(folder, n) for n in ("job.json", "rows.json", "worker.log"))
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump({"scenario": self.scenario.to_dict(), "source": self.scenario.source, "entry_index": index,
                       "device": str(self.dev), "ceilings": self.ceilings}, f)
        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        for key, value in scheme.worker_env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        # "go" is one message on a pipe (not an Event: no named semaphore for the resource
        # tracker to report at exit; and a worker whose runner died sees EOF and exits).
        go_reader, go_writer = _context().Pipe(duplex=False)
        proc = _context().Process(target=worker.child, args=(job_path, rows_path, log_path, env, go_reader),
                                  daemon=True)
        proc.start()
        go_reader.close()
        return proc, go_writer, rows_path, log_path

    def rows(self, index: int) -> list[dict]:
        """Run scheme ``index`` (started ahead or now) to completion and return its rows."""
        proc, go, rows_path, log_path = self.started.pop(index, None) or self._start(index)
        try:
            go.send_bytes(b"go")
        except OSError:  # the worker already died while preparing; its exit code tells why
            pass
        go.close()
        if self.prestart and index + 1 < len(self.scenario.schemes):
            self.started[index + 1] = self._start(index + 1)
        timeout = self.scenario.timing.scheme_timeout_s
        proc.join(timeout)
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
        rows = [base_row(self.scenario, entry, schemes.get(entry.name), m, self.dev) for m in self.scenario.m]
        return failed_rows(rows, "failed", _death_reason(code, log_path, timeout))

    def close(self) -> None:
        """Stop workers started ahead that will not run (interrupt, error)."""
        for proc, go, *_ in self.started.values():
            go.close()
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.started.clear()


def _death_reason(code: Optional[int], log_path: str, timeout: float) -> str:
    if code is None:
        what = f"worker timed out after {timeout:g} s"
    elif code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = f"worker killed by {name}"
    else:
        what = f"worker exited with status {code}"
    last = _last_line(log_path)
    return f"{what}; last output: {last}" if last else what


def log_tail(log_path: str, lines: int = 200) -> list[str]:
    """The last ``lines`` non-blank lines of a worker log, stripped; ``[]`` if it cannot be read."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return [line.strip() for line in f.read().splitlines()[-lines:] if line.strip()]
    except OSError:
        return []


def _last_line(log_path: str) -> str:
    lines = log_tail(log_path)
    return lines[-1][:240] if lines else ""
