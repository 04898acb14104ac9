"""The life cycle every job kind shares (the single-GPU runner, :mod:`qbench.runner`, and the
tensor-parallel one, :mod:`qbench.tp.runner`): the checks made before anything runs, the result
document, the partial file written after every job, the final write of a complete run, and the
one line that says why a worker died. Both runners import this module and neither imports the
other's internals, so the import graph has no cycle.
"""

from __future__ import annotations

import datetime as _dt
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import qbench
from qbench import env as envmod
from qbench import memory
from qbench.results import write_results
from qbench.scenario import Scenario


class RunError(Exception):
    """A run that cannot start (bad device, output not writable); one line, exit status 2."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with what was kept: ``partial`` (the partial file's path, None when the
    run had not written one yet) and ``rows`` (the rows in it)."""

    def __init__(self, partial=None, rows: int = 0):
        super().__init__()
        self.partial, self.rows = partial, rows

    def message(self) -> str:
        """One line for the user: where the rows measured so far are, or that there are none."""
        kept = "an existing result file was left as it was"
        if self.partial is None:
            return f"interrupted before any scheme was measured; nothing was written ({kept})"
        if not self.rows:
            return f"interrupted before any scheme finished; {self.partial} holds no rows ({kept})"
        return f"interrupted; the {self.rows} rows measured so far are in {self.partial} (\"complete\": false; {kept})"


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
            kept = [line.strip() for line in f.read().splitlines() if line.strip()]
        return kept[-lines:] if lines > 0 else []
    except OSError:
        return []


def _last_line(log_path: str) -> str:
    lines = log_tail(log_path)
    return lines[-1][:240] if lines else ""
