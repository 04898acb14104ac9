"""The life cycle every job kind shares (the single-GPU runner, :mod:`qbench.runner`, and the
tensor-parallel one, :mod:`qbench.tp.runner`): the checks made before anything runs, the result
document, the partial file written after every job, the final write of a complete run, and the
one line that says why a worker died.

No row is lost: one run per result path (:class:`OutputLock`, a second run is refused naming the
holder's pid); a partial file left by an interrupted run is never overwritten or deleted by a new
run (``--resume`` keeps its rows and measures only the schemes it lacks, :func:`resume_rows`);
default names never collide (:func:`claim_output`); SIGINT, SIGTERM and SIGHUP stop a run through
the same clean-up as Ctrl-C (:func:`stop_signals`); a write that fails (full disk, read-only
folder) is one line saying where the rows are (:class:`RunWriteError`). Both runners import this module and neither imports the
other's internals, so the import graph has no cycle.
"""

from __future__ import annotations


import datetime as _dt
import fcntl
import json
import math
import os
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import qbench
from qbench import jobs
from qbench.row import combine_repeats
from qbench.results import ResultsExistError, write_results
from qbench.scenario import Scenario


class RunError(Exception):
    """A run that cannot start (bad device, output not writable, another run on the same output, a
    partial file left by an interrupted run); one line, exit status 2."""


class RunWriteError(RunError):
    """An OSError while writing a result, its partial file or a worker's job file (a full disk, a
    read-only folder, a full ``TMPDIR``): one line saying where the rows measured so far are; the
    run stops, exit status 2."""


#: The signals that stop a run cleanly (:func:`stop_signals`): Ctrl-C, ``kill``/``timeout``/``docker
#: stop``/a CI cancel, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal (:data:`STOP_SIGNALS`) arrived; ``signum`` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__()
        self.signum = signum


@contextmanager
def stop_signals():
    """While the block runs (in the main thread), SIGINT, SIGTERM and SIGHUP raise :class:`Stopped`
    (a KeyboardInterrupt, so every ``except KeyboardInterrupt`` and ``finally`` of the runner runs:
    workers stopped, temporary folders removed, the rows kept and their file named); a second
    signal while that clean-up runs is ignored (SIGKILL still ends the process). Outside the main
    thread it does nothing (Python delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, frame):
        if fired:
            return
        fired.append(signum)
        raise Stopped(signum)

    old = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, was in old.items():
            signal.signal(sig, was)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal (:data:`STOP_SIGNALS`), with what was kept: ``partial`` (the
    partial file's path, None when the run had not written one yet), ``rows`` (the rows in it, as
    written on disk) and ``signum`` (exit status ``128 + signum``: 130 for Ctrl-C)."""

    def __init__(self, partial=None, rows: int = 0, signum: int = signal.SIGINT):
        super().__init__()
        self.partial, self.rows, self.signum = partial, rows, signum

    @classmethod
    def of(cls, exc: BaseException, partial=None, rows: int = 0) -> "RunInterrupted":
        """The RunInterrupted for the KeyboardInterrupt ``exc`` (a :class:`Stopped` carries its signal)."""
        return cls(partial, rows, getattr(exc, "signum", signal.SIGINT))

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)

    def message(self) -> str:
        """One line for the user: where the rows measured so far are, or that there are none."""
        kept = "an existing result file was left as it was"
        what = "interrupted" if self.signum == signal.SIGINT else f"stopped by {signal.Signals(self.signum).name}"
        if self.partial is None or not self.rows:
            return f"{what} before any scheme finished; nothing was written ({kept})"
        rows = f"the {self.rows} rows measured so far are" if self.rows != 1 else "the 1 row measured so far is"
        return (f"{what}; {rows} in {self.partial} (\"complete\": false; {kept}); "
                f"run the same command with --resume to measure only the schemes it lacks")


@dataclass
class RunOutcome:
    """What :func:`run` produced: the result document, where it was written, and the exit code
    (0: at least one row ``ok``; 1: every row skipped or failed)."""

    doc: dict
    path: Path
    exit_code: int
    message: str = ""


def default_output(scenario: Scenario, device: str, n: int = 1) -> Path:
    """``results/runs/<scenario>-<device>-<UTC timestamp>.json``, with ``-<n>`` before ``.json``
    for ``n`` > 1: :func:`claim_output` takes the first of these that no file, partial file or
    running run holds, so runs started in the same second get different files."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / "runs" / f"{scenario.name}-{device.replace(':', '')}-{stamp}{'' if n == 1 else f'-{n}'}.json"


def partial_path(path: Path) -> Path:
    """Where an unfinished run keeps its rows: ``keep.json`` -> ``keep.partial.json``."""
    return path.with_name(f"{path.stem}.partial{path.suffix or '.json'}")


def lock_path(path: Path) -> Path:
    """The lock of a run writing ``path``: ``keep.json`` -> ``keep.json.lock`` (holds its pid)."""
    return path.with_name(path.name + ".lock")


class OutputLock:
    """One run per result path: an exclusive ``flock`` on :func:`lock_path`, held until the run
    ends (the kernel drops it when the process dies, SIGKILL included, so no stale lock blocks a
    later run). The lock file holds the holder's pid, which a refused run names."""

    def __init__(self, path: Path):
        self.path, self.file, self.fd = path, lock_path(path), None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            RunError: another process holds it (one line naming its pid).
        """
        for _ in range(10):
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise RunError(f"{self.path}: another qbench run (pid {holder}) is writing it; wait for it to end "
                               f"or choose another --out") from None
            try:
                same = os.stat(self.file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:  # the holder removed it as we opened it: take the new one
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self.fd = fd
                return
            os.close(fd)
        raise RunError(f"{self.path}: cannot take its lock {self.file}")

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self.fd is None:
            return
        try:
            os.unlink(self.file)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def check_output(path: Path, force: bool, resume: bool = False) -> None:
    """Refuse, before anything is measured, an output that is a folder, that exists (without
    ``force`` or ``resume``), whose partial file exists (without ``resume``: it holds the rows of
    an interrupted run, never overwritten or deleted), or whose folder cannot be written. A
    dangling symbolic link counts as existing (the final write could not replace it).

    Raises:
        RunError: one line naming the path.
    """
    check_existing(path, force, resume)
    check_folder(path)


def check_existing(path: Path, force: bool, resume: bool = False, resumable: bool = True) -> None:
    """The refusals of :func:`check_output` that read what is at ``path`` and its partial file (``resumable``: the
    job kind can resume, so the refusal offers ``--resume``).

    Raises:
        RunError: one line naming the path.
    """
    if path.is_dir():
        raise RunError(f"{path}: is a directory, not a result file")
    if os.path.lexists(path) and not (force or resume):
        raise RunError(f"{path}: already exists; pass --force to overwrite it, "
                       + ("--resume to add the schemes it lacks, " if resumable else "")
                       + "or --out to choose another file")
    if force and path.is_file() and not _is_result(path):
        raise RunError(f"{path}: exists and is not a qbench result file (a checkpoint's config, a text?); --force "
                       f"replaces only result files: choose another --out")
    partial = partial_path(path)
    if os.path.lexists(partial) and not resume:
        raise RunError(f"{partial}: holds the rows of an interrupted run, which a new run does not overwrite; "
                       f"run the same command with --resume to measure only the schemes it lacks, or move it away")


def _is_result(path: Path) -> bool:
    """Whether ``path`` holds a qbench result file (a JSON object with ``schema_version`` and ``rows``),
    read at most 64 MiB: what ``--force`` may replace."""
    try:
        if path.stat().st_size > 64 << 20:
            return False
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "schema_version" in doc and "rows" in doc


def refuse_early(path: Path, force: bool, resume: bool = False, resumable: bool = True) -> None:
    """The refusals :func:`claim_output` makes of a named output that exists, made before torch is
    imported (by the command line): another run writing it (:class:`OutputLock`, probed), then
    :func:`check_existing`. Nothing is left behind; a path with no file and no partial file is left
    to :func:`claim_output`.

    Raises:
        RunError: one line naming the path.
    """
    if not (os.path.lexists(path) or os.path.lexists(partial_path(path))):
        return
    probe = OutputLock(path)
    probe.acquire()
    probe.release()
    check_existing(path, force, resume, resumable)


def check_folder(path: Path) -> None:
    """Create ``path``'s folder and check a file can be created there.

    Raises:
        RunError: one line naming the path and the system's reason.
    """
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".qbench-probe-"):
            pass
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL
        raise RunError(f"{path}: cannot write there: {getattr(exc, 'strerror', None) or exc}") from None


def claim_output(scenario: Scenario, dev, out: Optional[str], force: bool, resume: bool) -> tuple[Path, OutputLock]:
    """The result path of a run and its lock (:class:`OutputLock`), taken: ``out``, else the
    scenario's ``output``, else a fresh :func:`default_output` (with ``resume``: the newest
    unlocked partial file of this scenario and device under ``results/runs``, if any).

    Raises:
        RunError: the path is refused (:func:`check_output`) or another run holds it.
    """
    chosen = out or scenario.output
    if chosen is None and resume:
        chosen = _newest_partial(scenario, str(dev))
    if chosen is not None:
        path = Path(chosen)
        check_folder(path)
        lock = OutputLock(path)
        lock.acquire()
        try:
            check_output(path, force, resume)
        except BaseException:
            lock.release()
            raise
        return path, lock
    for n in range(1, 1000):
        path = default_output(scenario, str(dev), n)
        if os.path.lexists(path) or os.path.lexists(partial_path(path)):
            continue
        check_folder(path)
        lock = OutputLock(path)
        try:
            lock.acquire()
        except RunError:
            continue
        if os.path.lexists(path) or os.path.lexists(partial_path(path)):
            lock.release()
            continue
        return path, lock
    raise RunError(f"{default_output(scenario, str(dev))}: no free default name; pass --out")


def _newest_partial(scenario: Scenario, device: str) -> Optional[str]:
    """The newest ``results/runs/<scenario>-<device>-*.partial.json`` no running run holds."""
    folder = Path("results") / "runs"
    found = sorted(folder.glob(f"{scenario.name}-{device.replace(':', '')}-*.partial.json"),
                   key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
    for partial in found:
        path = partial.with_name(partial.name.replace(".partial.json", ".json"))
        probe = OutputLock(path)
        try:
            probe.acquire()
        except RunError:
            continue
        probe.release()
        return str(path)
    return None


class Output:
    """Where a run writes: the result ``path``, its ``partial`` file (rewritten after every job,
    ``"complete": false``), the lock held until the run ends, and the rows on disk so far.

    Attributes:
        written: rows in the partial file as last written (what an interrupt message may claim).
        resumed_from: the file whose rows this run kept (``--resume``), or None.
        nothing_to_resume: ``--resume`` found neither a partial nor a complete file: every scheme
            is measured (the run says so).
    """

    def __init__(self, path: Path, lock: OutputLock):
        self.path, self.lock, self.partial = path, lock, partial_path(path)
        self.written: Optional[int] = None  # None: no partial file written by this run yet
        self.resumed_from: Optional[Path] = None
        self.nothing_to_resume = False

    def write_partial(self, doc: dict) -> None:
        """Write ``doc`` to the partial file (atomically: a reader sees the old or the new file).

        Raises:
            RunWriteError: an OSError (full disk, read-only folder): one line naming the file and
                what the partial file still holds.
        """
        try:
            write_results(self.partial, doc, force=True)
        except OSError as exc:
            raise RunWriteError(f"{self.partial}: cannot write ({_reason(exc)}); the run stopped; "
                                + self._kept()) from None
        self.written = len(doc["rows"])

    def interrupted(self, exc: BaseException) -> RunInterrupted:
        """The :class:`RunInterrupted` for a stop signal ``exc``, naming what is on disk (a partial
        file without rows is removed by :meth:`release`: it is not named)."""
        if not self.written:
            return RunInterrupted.of(exc)
        return RunInterrupted.of(exc, self.partial, self.written)

    def _kept(self) -> str:
        if not self.written:
            return "no row had been measured"
        rows = f"the {self.written} rows measured so far are" if self.written != 1 else "the 1 row measured so far is"
        return f"{rows} in {self.partial} (\"complete\": false)"

    def release(self) -> None:
        """End the run's hold on the output: remove the partial file this run wrote if it holds no
        row (a partial file with rows is kept, always), and release the lock (idempotent)."""
        if self.lock.fd is not None and self.written == 0 and self.resumed_from is None:
            try:
                self.partial.unlink()
            except OSError:
                pass
        self.lock.release()


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def prepare(scenario: Scenario, device: Optional[str], out: Optional[str], force: bool, resume: bool = False):
    """The checks every run makes before it measures anything, its output claimed, and its
    document.

    Returns ``(device, output, doc)``: the resolved torch device, the :class:`Output` (its lock
    taken: release it when the run ends, :func:`finish` does), and the result document with
    ``env`` and ``scenario`` filled, ``"complete": false``, and no rows; with ``resume``, the rows
    of the partial file (else of the complete file) at the output, when one exists
    (:func:`resume_rows`), and ``scenario`` listing their schemes too. The partial file is written
    once (the rows kept, or none) before this returns.

    Raises:
        RunError: the device or the output path is unusable, another run holds the output, or the
            file to resume was measured with another scenario or on another machine.
        ScenarioError: the layer does not fit in the device's free memory (:mod:`qbench.memory`).
    """
    from qbench import env as envmod  # torch: imported by a run, not by the command line's checks (check_output)
    from qbench import memory

    try:
        dev = envmod.resolve_device(device or scenario.device)
    except (ValueError, RuntimeError) as exc:
        raise RunError(str(exc)) from None
    memory.check_fits(scenario, dev)  # before anything is allocated or written
    path, lock = claim_output(scenario, dev, out, force, resume)
    output = Output(path, lock)
    try:
        _remove_stale_temp_files(path)
        doc = {
            "schema_version": qbench.SCHEMA_VERSION, "complete": False, "qbench_version": qbench.__version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "wall_s": None,
            "env": envmod.collect(dev), "scenario": scenario.to_dict(), "ceilings": None, "rows": [],
        }
        if resume:
            resume_rows(doc, output, scenario, dev)
        output.write_partial(doc)
    except BaseException:
        output.release()
        raise
    return dev, output, doc


def _remove_stale_temp_files(path: Path) -> None:
    """Remove ``.<name>.*.tmp`` files of ``path`` and its partial file: what a write killed
    between its temporary file and the rename left (the caller holds ``path``'s lock, so no other
    run is writing them)."""
    folder = path.parent if str(path.parent) else Path(".")
    for name in (path.name, partial_path(path).name):
        for stale in folder.glob(f".{_glob_escape(name)}.*.tmp"):
            try:
                stale.unlink()
            except OSError:
                pass


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


#: Row keys naming the content a row was measured on (the checkpoint's identity by content, the
#: text's, the tokenizer's and a calibrated row's calibration text's sha256): a scenario naming the
#: same paths may read other bytes than the kept rows did. A dotted key is a nested one, compared on
#: the rows that hold it (a row of an uncalibrated scheme has no ``calibration``).
INPUT_KEYS = ("checkpoint_id", "text_sha256", "tokenizer_sha256", "calibration.text_sha256")


def resume_rows(doc: dict, output: Output, scenario: Optional[Scenario] = None, dev=None) -> None:
    """Put the rows of the earlier file at ``output`` (its partial file, else its complete file;
    nothing when neither exists) into ``doc``, after checking it was measured with the same
    scenario (every key but the scheme list, ``source`` and ``output``) on the same machine and
    device, and on the same inputs: each kept row's :data:`INPUT_KEYS` equal those of a row this
    run would write (the job's blank row of ``scenario`` on ``dev`` and its ``input_digests``), so a
    text, calibration text or checkpoint edited in place since is refused; the union of both scheme
    lists goes into ``doc["scenario"]`` and ``doc["workers"]["resumed"]`` says where the rows came from.

    Raises:
        RunError: the file cannot be read, is not a qbench result, or was measured with another
            scenario, device, machine, text or checkpoint content (one line naming the file and
            what differs: each scenario key that does, with both values).
    """
    from qbench.results import Env, ResultsError, read_results

    def machine_of(d: dict) -> str:
        return Env.model_validate(d.get("env") if isinstance(d.get("env"), dict) else {}).machine

    source = output.partial if output.partial.exists() else output.path if output.path.exists() else None
    if source is None:
        output.nothing_to_resume = True
        return
    try:
        earlier = read_results(source).to_json()  # the document as written (a schema 1 file's rows upgraded)
    except ResultsError as exc:
        raise RunError(f"cannot resume: {exc}") from None
    except RecursionError:
        raise RunError(f"cannot resume: {source}: not a qbench result (JSON nested too deeply)") from None
    where = _nonfinite(earlier.get("rows"), "rows")
    if where:
        raise RunError(f"cannot resume: {source}: {where}: not a finite number")
    mine, theirs = dict(doc["scenario"]), earlier.get("scenario")
    if not isinstance(theirs, dict):
        raise RunError(f"cannot resume: {source}: has no scenario to compare with {mine.get('source')}")
    differ = [d for key in sorted(set(mine) | set(theirs)) if key not in ("schemes", "source", "output")
              for d in _differences(key, theirs.get(key), mine.get(key))]
    if differ:
        said = "; ".join(f"{key}: {_short(there)} there, {_short(now)} now" for key, there, now in differ)
        raise RunError(f"cannot resume: {source} was measured with another scenario ({said}); choose another --out")
    env = earlier.get("env") if isinstance(earlier.get("env"), dict) else {}
    if str(env.get("device")) != doc["env"].get("device") or machine_of(earlier) != machine_of(doc):
        raise RunError(f"cannot resume: {source} was measured on {machine_of(earlier)} ({env.get('device')}), this run "
                       f"is on {machine_of(doc)} ({doc['env'].get('device')}); choose another --out")
    if scenario is not None:
        _same_inputs(earlier["rows"], scenario, dev, source)
    schemes = list(theirs.get("schemes") or [])
    schemes += [s for s in mine["schemes"] if s not in schemes]
    doc["scenario"]["schemes"] = schemes
    doc["rows"] = list(earlier["rows"])
    doc.setdefault("workers", {})["resumed"] = {"from": str(source), "rows_kept": len(earlier["rows"]),
                                                "created": earlier.get("created"), "wall_s": earlier.get("wall_s")}
    output.resumed_from = source


def _same_inputs(rows: list, scenario: Scenario, dev, source: Path) -> None:
    """Refuse (RunError) kept ``rows`` whose :data:`INPUT_KEYS` differ from a row this run writes: the
    job's blank row, and its :attr:`~qbench.jobs.Job.input_digests` for the nested keys a blank row lacks."""
    from qbench import jobs

    if not rows or not scenario.schemes:
        return
    entry, job = scenario.schemes[0], jobs.of_scenario(scenario)
    (now, *_) = jobs.load(job.blank_rows)(scenario, entry, entry.scheme, dev)
    if job.input_digests is not None:
        now = {**now, **jobs.load(job.input_digests)(scenario)}
    what = {"checkpoint_id": "the checkpoint's content (config, tensor headers or tensor bytes)",
            "text_sha256": "the text's content", "tokenizer_sha256": "the tokenizer's content (tokenizer.json)",
            "calibration.text_sha256": "the calibration text's content"}
    for key in INPUT_KEYS:
        if now.get(key) is None:
            continue
        for row in rows:
            kept = _nested(row, key)
            if kept is None and "." in key:
                continue  # a row without the nested record (an uncalibrated scheme's)
            if kept != now[key]:
                label = row.get("scheme") if isinstance(row, dict) else None
                raise RunError(f"cannot resume: {source}: {what[key]} changed since its rows were measured ({key} "
                               f"{_digest(kept)} in row {label!r}, {_digest(now[key])} now): rows of both would not "
                               f"compare; choose another --out, or --force to measure every scheme again")


def _nested(row, key: str):
    """``row``'s value at the dotted ``key`` (``calibration.text_sha256``), or None."""
    for part in key.split("."):
        row = row.get(part) if isinstance(row, dict) else None
    return row


def done_labels(doc: dict) -> set[str]:
    """The scheme labels that already have rows in ``doc`` (kept by ``--resume``)."""
    return {row.get("scheme") for row in doc["rows"]}


def _nonfinite(obj, where: str) -> Optional[str]:
    """The key path of the first non-finite float in ``obj`` (``1e999`` reads as infinity), or None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else where
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = ((f"[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    for key, value in items:
        found = _nonfinite(value, f"{where}{key}" if str(key).startswith("[") else f"{where}.{key}")
        if found:
            return found
    return None


def _differences(key: str, there, now) -> list[tuple]:
    """``(dotted key, there, now)`` of each value that differs between two scenario tables, down to
    the innermost table holding it (``quality.calibration.first_chunk``), so a refusal names the key
    and not a table cut off before it; a key on one side only is a difference with None."""
    if isinstance(there, dict) and isinstance(now, dict):
        return [d for k in sorted(set(there) | set(now), key=str)
                for d in _differences(f"{key}.{k}", there.get(k), now.get(k))]
    return [] if there == now else [(key, there, now)]


def _digest(value) -> str:
    """A sha256 as a line shows it: its first 12 hex digits (other values as :func:`_short`)."""
    return repr(value[:12] + "…") if isinstance(value, str) and len(value) > 12 else _short(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def record(doc: dict, output: Output, rows: list[dict], t0: float, started: float) -> None:
    """Add one job's rows (stamped with ``worker_wall_s`` since ``t0``) and rewrite the partial
    file, still ``"complete": false``, so that measured rows survive a later crash. ``doc`` gets
    the rows only once they are on disk (an interrupt during the write leaves both as they were).

    Raises:
        RunWriteError: the partial file cannot be written (:meth:`Output.write_partial`).
    """
    now = time.perf_counter()
    for row in rows:
        row["worker_wall_s"] = now - t0
    updated = {**doc, "rows": doc["rows"] + rows, "wall_s": _kept_wall_s(doc) + now - started}
    output.write_partial(updated)
    doc["rows"], doc["wall_s"] = updated["rows"], updated["wall_s"]


def _kept_wall_s(doc: dict) -> float:
    """The wall time (s) of the runs whose rows ``--resume`` kept in ``doc`` (0 without a resume)."""
    resumed = (doc.get("workers") or {}).get("resumed") or {}
    earlier = resumed.get("wall_s")
    return float(earlier) if isinstance(earlier, (int, float)) and not isinstance(earlier, bool) else 0.0


def finish(doc: dict, output: Output, started: float, *, force: bool = False) -> RunOutcome:
    """Mark the run complete, write it to the result path (replacing an existing file only with
    ``force``, or with ``--resume``, whose document holds that file's rows too), remove its partial
    file, release the output's lock, and give the exit code: 1 when no row is ``ok``.

    Raises:
        RunWriteError: the result file cannot be written (the partial file keeps every row).
        RunInterrupted: a stop signal during the final write (the partial file keeps every row).
    """
    doc["complete"] = True
    resumed = (doc.get("workers") or {}).get("resumed") or {}
    measured_now = len(doc["rows"]) > resumed.get("rows_kept", 0)
    # a resumed file's wall time is its earlier runs' plus this one's; a resume that measured nothing keeps it
    doc["wall_s"] = _kept_wall_s(doc) + (time.perf_counter() - started if measured_now or not resumed else 0.0)
    replace = force or output.resumed_from is not None
    try:
        write_results(output.path, doc, force=replace)
    except (OSError, ResultsExistError) as exc:  # exists: a file appeared there since the run started
        doc["complete"] = False
        why = "it appeared since the run started" if isinstance(exc, ResultsExistError) else _reason(exc)
        raise RunWriteError(f"{output.path}: cannot write ({why}); every row is in {output.partial} "
                            f"(\"complete\": false, {output.written} rows)") from None
    except KeyboardInterrupt as exc:
        doc["complete"] = False
        raise output.interrupted(exc) from None
    finally:
        if not doc["complete"]:
            output.release()
    try:
        output.partial.unlink()
    except FileNotFoundError:
        pass
    output.release()
    if not any(r["status"] == "ok" for r in doc["rows"]):
        return RunOutcome(doc, output.path, 1, f"no row was measured: all {len(doc['rows'])} rows were skipped or failed")
    return RunOutcome(doc, output.path, 0)


#: What marks a phase line in a worker's log (:func:`qbench.worker.log_phases`) among the libraries' own output: a
#: worker's death is reported with the last one.
PHASE_TAG = "[qbench]"


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
    said = log_said(log_path)
    return f"{what}; {said}" if said else what


def log_said(log_path: str) -> str:
    """What a dead worker's log says for its failed rows' reason: ``in phase: P; last output: L`` (``P`` its last
    :data:`PHASE_TAG` line, when a library wrote after it), ``last output: L``, or ``""`` for an empty log."""
    lines = log_tail(log_path)
    if not lines:
        return ""
    last = lines[-1][:240]
    phase = next((line[:240] for line in reversed(lines) if f" {PHASE_TAG} " in line), "")
    return f"in phase: {phase}; last output: {last}" if phase and phase != last else f"last output: {last}"


def log_tail(log_path: str, lines: int = 200) -> list[str]:
    """The last ``lines`` non-blank lines of a worker log, stripped; ``[]`` if it cannot be read."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            kept = [line.strip() for line in f.read().splitlines() if line.strip()]
        return kept[-lines:] if lines > 0 else []
    except OSError:
        return []


# ---- qbench run --repeat N: one scheme's runs combined -----------------------------------------------
# ``qbench run --repeat N``: one scheme measured by N independent worker processes, combined.
#
# Each run is a new process (new CUDA context, new ``torch.compile`` compilation, new autotuning where
# a library autotunes), so the spread between the runs' medians shows what the within-run p10-p90
# cannot: a compiled or autotuned kernel that differs between compilations, far outside either
# run's p10-p90. Torch-free.
#
# A combined row is one run's row (its STATS, ledger, error, dispatch: the first ok run timed by the
# most methods, :func:`qbench.row.combine_repeats`, the rule readers use for several files), with
# ``repeats``:
#
#     {"runs": N, "ok_runs": k, "medians": {method: [median of run 1, ..., run N]},
#      "spread": {method: (max - min) / median of the medians}}
#
# Decisions (ties, picks) use the wider of the two spreads (:func:`qbench.judge.tie_band`).


def _identity(row: dict) -> tuple:
    return (row.get("m"), row.get("context"), row.get("k"), row.get("n"), row.get("tp_size"), row.get("split"))


def combine_runs(runs: Sequence[list[dict]]) -> list[dict]:
    """The rows of one scheme from ``runs`` (the rows of each of N runs, in run order), combined.

    Rows of one identity (M, and context for a model step) are combined by
    :func:`qbench.row.combine_repeats` on their typed rows (the job's row model): the base is
    the first ``ok`` row timed by the most methods (a run that failed yields to a later one that
    measured), and ``repeats`` lists every run's count and medians (``spread`` with two or more).
    The base row's dict is returned with ``repeats`` added; with one run the rows are returned
    unchanged.

    Raises:
        ValueError: no runs.
        qbench.results.ResultsError: a row does not fit its job's row model.
    """
    if not runs:
        raise ValueError("combine_runs: needs at least one run")
    if len(runs) == 1:
        return list(runs[0])
    by_key: dict[tuple, list[dict]] = {}
    for rows in runs:
        for row in rows:
            by_key.setdefault(_identity(row), []).append(row)
    out = []
    for rows in by_key.values():
        check = jobs.load(jobs.of_rows(rows).check_rows)
        base, repeats = combine_repeats([check([r], "run --repeat")[0] for r in rows])
        out.append({**rows[base], "repeats": repeats.model_dump()})
    return out
