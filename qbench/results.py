"""Write and read the qbench result JSON (format: ``docs/results-schema.md``).

Writing is atomic: the document goes to a temporary file in the destination folder, is flushed
and fsynced, then moved over the destination with :func:`os.replace` (or hard-linked into place
when overwriting is not allowed), so a reader never sees a half-written file and a crash leaves
any old file intact.

JSON is strict both ways. qbench measures things that can go non-finite (an fp16 output that
overflowed gives ``rel_fro = NaN``), and Python's :mod:`json` would write those as the non-JSON
tokens ``NaN`` / ``Infinity``. :func:`write_results` therefore **converts every non-finite float
to ``null``** ("not measured", as the schema defines null) before writing; the row's
``error.nonfinite`` count is what says that outputs overflowed. We convert rather than raise
because one overflowing scheme must not lose the whole run. :func:`read_results` refuses
``NaN`` / ``Infinity`` tokens in a file.

Errors are one line each and derive from :class:`ResultsError`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from qbench import SCHEMA_VERSION
from qbench.row import RowError, row_key, validate_row  # row_key: re-exported (compare imports it from here)
from qbench.timing import registry

__all__ = [
    "ResultsError",
    "ResultsExistError",
    "ResultsSchemaError",
    "SCHEMA_VERSION",
    "finite_or_none",
    "latency_stats",
    "methods_present",
    "read_results",
    "resolve_method",
    "write_results",
]

#: The CPU method every CPU row has (CPU rows may also have ``stream``).
CPU_METHOD = registry.CPU_METHOD
#: The method decisions read by default (``stream``: weights from HBM, graph-captured).
DECISION_METHOD = registry.DECISION_METHOD


class ResultsError(Exception):
    """A result file cannot be written or read; the message is one line naming the file."""


class ResultsExistError(ResultsError, FileExistsError):
    """The destination exists and ``force`` was not given."""


class ResultsSchemaError(ResultsError):
    """The file's ``schema_version`` is missing or not one this qbench reads."""


def finite_or_none(obj: Any) -> Any:
    """Return a copy of ``obj`` (JSON-like: dict, list, tuple, scalars) with every non-finite
    float (NaN, +Inf, -Inf) replaced by ``None``. Other values are returned unchanged."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def write_results(path: str | os.PathLike, doc: dict, *, force: bool = False) -> Path:
    """Write the result document ``doc`` to ``path`` as strict, indented JSON, atomically.

    Non-finite floats become ``null`` (see the module docstring). Parent folders are created.

    Every row is checked against the row model first (:func:`check_rows`: a key that is not a
    field of :class:`qbench.row.Row`, or a value of the wrong type, is refused before anything is
    written), so a producer that writes a wrong key fails at once. A derived summary (a document
    with a ``"kind"``, e.g. ``scripts/repeatability.py``'s) has rows of its own and is not checked.

    Returns the path written. Raises :class:`ResultsExistError` when ``path`` exists and
    ``force`` is false (the existing file is left untouched), and :class:`ResultsError` when a
    row does not fit the model, ``doc`` cannot be serialised (e.g. a value that is not JSON) or
    the folder is not writable.
    """
    path = Path(path)
    if path.exists() and not force:
        raise ResultsExistError(f"{path}: already exists; pass --force to overwrite it")
    clean = finite_or_none(doc)
    if isinstance(clean, dict) and "kind" not in clean and isinstance(clean.get("rows"), list):
        check_rows(clean["rows"], f"{path}: not written")
    try:
        text = json.dumps(clean, indent=2, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot write result JSON: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result file gets the umask's mode
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if force:
            os.replace(tmp, path)
        else:
            _place_new(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _place_new(tmp: str, path: Path) -> None:
    """Move ``tmp`` to ``path`` only if ``path`` does not exist (no race with another writer)."""
    try:
        os.link(tmp, path)  # fails with FileExistsError when another writer got there first
    except FileExistsError:
        raise ResultsExistError(f"{path}: already exists; pass --force to overwrite it") from None
    except OSError:  # file systems without hard links: the exists() check above has to do
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _refuse_constant(token: str) -> None:
    raise ValueError(f"non-finite number {token} is not strict JSON")


def read_results(path: str | os.PathLike) -> dict:
    """Read and check a result JSON file; return the document as a dict.

    Raises :class:`ResultsError` when the file is missing, is not strict JSON, or is not a qbench
    result (an object with a ``rows`` list), and :class:`ResultsSchemaError` when its
    ``schema_version`` is missing or is not :data:`qbench.SCHEMA_VERSION`. Messages name the file.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ResultsError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: not a qbench result (top level is {type(doc).__name__})")
    if "schema_version" not in doc:
        raise ResultsSchemaError(f"{path}: no schema_version; not a qbench result")
    version = doc["schema_version"]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ResultsSchemaError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this qbench reads {SCHEMA_VERSION})"
        )
    if not isinstance(doc.get("rows"), list):
        raise ResultsError(f"{path}: not a qbench result (no 'rows' list)")
    check_rows(doc["rows"], str(path))
    return doc


def check_rows(rows: list, source: str) -> None:
    """Check every row of a result file against the row model (:func:`qbench.row.validate_row`,
    reading rules): every key a field of :class:`qbench.row.Row` at every depth (a misspelt or
    invented key is an error), every value of its field's type and range (``m``, ``k``, ``n``
    integers > 0, ``status`` one of ``ok``/``skipped``/``failed``, a STATS ``median`` > 0,
    ``error.rel_fro`` >= 0, timing methods from the registry), the identity present. Older files
    lack the fields added since they were written (:data:`qbench.row.ADDED_SINCE`) and may carry
    legacy ones (:data:`qbench.row.LEGACY`); both are accepted. Two rows may not share an
    identity (:func:`row_key`).

    Raises:
        ResultsError: one line naming ``source``, the row's index and key path, the bad value and
            what is allowed, e.g. ``x.json: rows[3].latency_us.cold.median: Input should be
            greater than 0 (got 0)``.
    """
    seen: dict[tuple, int] = {}
    if any(isinstance(row, dict) and row.get("job") == "step" for row in rows):
        _check_step_rows(rows, source)
        return
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultsError(f"{source}: rows[{i}]: a row is an object, got {type(row).__name__}")
        try:
            validate_row(row)
        except RowError as exc:
            raise ResultsError(f"{source}: rows[{i}].{exc}"[:400]) from None
        key = row_key(row)
        if key in seen:
            raise ResultsError(f"{source}: rows[{i}] repeats rows[{seen[key]}] (scheme {row['scheme']!r}, "
                               f"M={row['m']}, K={row['k']}, N={row['n']}): one row per scheme and shape")
        seen[key] = i


def _check_step_rows(rows: list, source: str) -> None:
    """The rows of a model-step result (:class:`qbench.step.row.StepRow`), one per identity."""
    from pydantic import ValidationError

    from qbench.step.row import StepRow

    seen: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("job") != "step":
            raise ResultsError(f"{source}: rows[{i}]: a model-step result holds only step rows (job = 'step')")
        try:
            key = StepRow.model_validate(row).key
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ResultsError(f"{source}: rows[{i}].{where}: {err['msg']} (got {err.get('input')!r})"[:400]) from None
        if key in seen:
            raise ResultsError(f"{source}: rows[{i}] repeats rows[{seen[key]}] (scheme {row['scheme']!r}, M={row['m']}, "
                               f"context={row['context']}): one row per scheme, M and context")
        seen[key] = i


#: The values a ``--method`` option accepts (CLI choices of report, compare, recommend, plot):
#: every layer method of the registry, in table order (a model step's methods are not: step
#: results have their own table, :mod:`qbench.step.view`).
METHOD_CHOICES = registry.LAYER_METHODS
#: What a file without the decision method's data falls back to, in this order (the registry's
#: ``fallback_rank``): ``cold`` on a CUDA result, ``cpu`` on a CPU result (files written before
#: ``stream`` existed have neither stream).
FALLBACK_METHODS = registry.FALLBACK_METHODS


def latency_stats(row: dict, method: str) -> dict | None:
    """The STATS (µs) of ``row`` for ``method`` when the row is ``ok`` and has a median there,
    else ``None`` (skipped, failed, or not timed by that method)."""
    if row.get("status") != "ok":
        return None
    stats = (row.get("latency_us") or {}).get(method)
    return stats if stats and stats.get("median") is not None else None


def methods_present(rows: list[dict]) -> list[str]:
    """Timing methods with at least one non-null STATS in ``rows``, in the registry's order
    (``stream``, ``cold``, ``warm``, ``eager``, ``kernel``, ``cpu``), unknown names last."""
    seen = {m for r in rows for m, s in (r.get("latency_us") or {}).items() if s}
    order = list(registry.METHODS)
    return [m for m in order if m in seen] + sorted(seen - set(order))


def resolve_method(doc: dict, requested: str | None,
                   default: str = DECISION_METHOD) -> tuple[str, str | None]:
    """Choose the timing method to read from ``doc``.

    ``requested`` is what the user passed (``None`` when they passed nothing). An explicit method
    is always used as given. Without one, ``default`` (``stream``) is used if some row of the file
    has it; otherwise the first of :data:`FALLBACK_METHODS` the file has (``cold`` on a CUDA
    result, ``cpu`` on a CPU result: files written before ``stream`` existed). Returns
    ``(method, note)``; ``note`` is a one-line explanation when a fallback happened, else ``None``.
    A file with none of them gives ``(default, None)``: the caller says that nothing is timed.
    """
    if requested is not None:
        return requested, None
    present = methods_present(doc.get("rows", []))
    if default in present:
        return default, None
    fallback = next((m for m in FALLBACK_METHODS if m in present and m != default), None)
    if fallback is None:
        return default, None
    return fallback, (f"no {default} latency in this file: an older result, or {default} not timed; "
                      f"using {fallback} times")


def incomplete_warning(doc: dict, path: str | os.PathLike) -> str | None:
    """One line when ``doc`` says ``"complete": false`` (an interrupted or still running run: some
    schemes may be missing), else None. Readers print it; ``recommend`` refuses such a file unless
    asked (``--allow-incomplete``)."""
    if doc.get("complete") is not False:
        return None
    rows = doc.get("rows") or []
    schemes = len({r.get("scheme") for r in rows})
    return (f"warning: {path} is incomplete (\"complete\": false, {len(rows)} rows of {schemes} schemes): "
            "the run was interrupted or is still going; schemes may be missing")


def machine_of(doc: dict) -> str:
    """The machine a result was measured on, as one label: ``"cuda NVIDIA H200"`` or ``"cpu AMD EPYC"``
    (the device type of ``env.device`` and ``env.device_name``). Readers that add or divide times of
    several files (``model``, ``compare``) compare these labels."""
    env = doc.get("env") or {}
    kind = str(env.get("device", "?")).split(":", 1)[0]
    return f"{kind} {env.get('device_name') or '?'}"
