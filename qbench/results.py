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
from typing import Any, Callable, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qbench import SCHEMA_VERSION, jobs
from qbench.row import NOISY_CV, Num, Row, RowError, flag_record, is_noisy_cv, row_key, validate_row

__all__ = [
    "Ceilings",
    "CeilingSet",
    "Env",
    "READABLE_VERSIONS",
    "ResultDoc",
    "ResultsError",
    "ResultsExistError",
    "ResultsSchemaError",
    "SCHEMA_VERSION",
    "ScenarioInfo",
    "finite_or_none",
    "read_results",
    "renoise_row",
    "upgrade_prose_row",
    "write_results",
]

#: The ``schema_version`` values :func:`read_results` reads: 1 (every row's reasons and flags as
#: sentences), 2 (structured on layer rows, sentences on model-step rows), both upgraded on reading
#: by :func:`upgrade_prose_row`, and 3 (:data:`qbench.SCHEMA_VERSION`: structured on every row).
READABLE_VERSIONS = (1, 2, 3)


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


def _dumps(doc: Any) -> str:
    """Compact JSON with one row per line: a third of the indented size, and a diff still shows rows."""
    def one(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)

    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        return one(doc)
    head = {k: v for k, v in doc.items() if k != "rows"}
    rows = ",\n".join(one(row) for row in doc["rows"])
    return one(head)[:-1] + (',' if head else '') + '"rows":[\n' + rows + "\n]}"


def write_results(path: str | os.PathLike, doc: "dict | ResultDoc", *, force: bool = False) -> Path:
    """Write the result document ``doc`` (a dict, or a :class:`ResultDoc` as read:
    :meth:`ResultDoc.to_json`) to ``path`` as strict JSON (compact, one row per line), atomically.

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
    if isinstance(doc, ResultDoc):
        doc = doc.to_json()
    clean = finite_or_none(doc)
    if isinstance(clean, dict) and "kind" not in clean and isinstance(clean.get("rows"), list):
        rows = _current(clean["rows"], clean.get("schema_version", SCHEMA_VERSION))  # an old file's: checked as read
        job = jobs.of_rows(rows)
        check = check_rows if job.name == jobs.DEFAULT else jobs.load(job.check_rows)
        check(rows, f"{path}: not written")
    try:
        text = _dumps(clean)
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


#: Largest result file read (bytes): the committed sweep file is under 2 MiB; a bigger "result" is
#: not one, and reading it whole would only cost memory. Project choice.
MAX_RESULT_BYTES = 256 << 20


def _finite_float(token: str) -> float:
    """A JSON number as a float, refused when it overflows to infinity (``1e999``): strict JSON
    results hold finite numbers only (:func:`finite_or_none` writes null instead)."""
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {token} overflows to infinity (a result holds finite numbers only)")
    return value


def _kind(rows: list, doc: dict) -> "jobs.Job":
    """The job kind of a document: its rows' (:func:`qbench.jobs.of_rows`); a file without rows, its scenario's tables'
    (an empty search file is a search's, not a per-layer result)."""
    if rows or not isinstance(doc.get("scenario"), dict):
        return jobs.of_rows(rows)
    return jobs.of_tables(doc["scenario"])


def read_results(path: str | os.PathLike) -> "ResultDoc":
    """Read and check a result JSON file; return it as a :class:`ResultDoc` (rows as
    :class:`qbench.row.Row`). An older file's reasons and flags written as sentences are upgraded
    on the way (:func:`upgrade_prose_row`). The rows of another job kind (a ``job`` key on its rows) are typed and
    checked by that kind's ``check_rows`` (:mod:`qbench.jobs`); :attr:`ResultDoc.job` names it.

    Raises :class:`ResultsError` when the file is missing, is not strict JSON, or is not a qbench
    result (an object with a ``rows`` list, every row fitting the row model), and
    :class:`ResultsSchemaError` when its ``schema_version`` is missing or is not one of
    :data:`READABLE_VERSIONS`. Messages name the file.
    """
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # /dev/zero, a FIFO, a folder: never read without end
            raise ResultsError(f"{path}: not a regular file (a qbench result is a JSON file)")
        with open(path, "rb") as f:
            raw = f.read(MAX_RESULT_BYTES + 1)
        if len(raw) > MAX_RESULT_BYTES:
            raise ResultsError(f"{path}: larger than {MAX_RESULT_BYTES >> 20} MiB: not a qbench result")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise ResultsError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise ResultsError(f"{path}: not a qbench result: arrays or objects nested too deeply") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: not a qbench result (top level is {type(doc).__name__})")
    if "schema_version" not in doc:
        raise ResultsSchemaError(f"{path}: no schema_version; not a qbench result")
    version = doc["schema_version"]
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ResultsSchemaError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this qbench reads {' and '.join(map(str, READABLE_VERSIONS))})"
        )
    if not isinstance(doc.get("rows"), list):
        raise ResultsError(f"{path}: not a qbench result (no 'rows' list)")
    rows = _current(doc["rows"], version)  # upgraded in memory
    job = _kind(rows, doc)
    if job.name != jobs.DEFAULT:  # another job kind: rows typed by its row model
        parts = {"rows": jobs.load(job.check_rows)(rows, str(path)), "job_kind": job.name}
    else:
        parts = {"rows": check_rows(rows, str(path))}
    doc["schema_version"] = SCHEMA_VERSION  # the document is a current one from here on
    try:
        return ResultDoc.model_validate({**doc, **parts})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ResultsError(f"{path}: {loc}: {err['msg']} (got {err.get('input')!r})"[:400]) from None


#: Older files wrote why a method has no time as a sentence; these words of it say the call was not
#: captured in a CUDA graph (the capture failed, was not attempted after an earlier failure, or the
#: call syncs with the host), in the order checked. Not a bare "capture": tensor-parallel rows said
#: "do not time stream yet (graph-captured call + collective)", which is not the scheme's fault.
#: The one place a reason's words are read: the current schema writes the kind.
_PROSE_CAPTURE_WORDS = (("not attempted", "not-attempted"), ("capture failed", "capture-failed"),
                        ("cannot be captured", "capture-failed"), ("host sync", "host-sync"))


def upgrade_prose_row(row: dict) -> dict:
    """A row of an older file (schema 1; a model-step row of schema 2) as the current schema reads
    it: each ``latency_reasons`` sentence becomes ``{"kind", "text"}`` (the kind from
    :data:`_PROSE_CAPTURE_WORDS`, else ``other``), each ``flags`` sentence ``name: text`` becomes
    ``{"name", "text"}``. Other keys are unchanged; entries already structured are kept."""
    out = dict(row)
    reasons = row.get("latency_reasons")
    if isinstance(reasons, dict):
        out["latency_reasons"] = {m: _prose_reason(t) if isinstance(t, str) else t for m, t in reasons.items()}
    flags = row.get("flags")
    if isinstance(flags, list):
        out["flags"] = [_prose_flag(f) if isinstance(f, str) else f for f in flags]
    return out


#: The newest schema in which a row of each job kind still wrote its reasons and flags as sentences
#: (a kind not listed never did, or did only in schema 1).
_PROSE_UNTIL = {"step": 2}


def _current(rows: list, version: Any) -> list:
    """``rows`` of a document of schema ``version`` as the current schema holds them: a row written
    as sentences in that version (every row of schema 1, a model-step row of schema 2) upgraded by
    :func:`upgrade_prose_row`, every other row as it is (a schema 2 layer row with a sentence for a
    reason stays refused)."""
    if not isinstance(version, int) or version >= SCHEMA_VERSION:
        return rows
    out = []
    for r in rows:
        if isinstance(r, dict) and version <= _PROSE_UNTIL.get(r.get("job"), 1):
            r = upgrade_prose_row(r)
        if isinstance(r, dict) and version <= _OTHER_NOISE_RULE_UNTIL.get(r.get("job"), 0):
            r = renoise_row(r)
        out.append(r)
    return out


#: The newest schema in which a row of each job kind flagged ``noisy`` by another rule than
#: :func:`qbench.row.is_noisy_cv` (the model step: a method's p90 / p10 above 1.25).
_OTHER_NOISE_RULE_UNTIL = {"step": 2}


def renoise_row(row: dict) -> dict:
    """``row`` (a dict with structured ``flags``) with its ``noisy`` flags decided again by the one
    noise rule (:func:`qbench.row.is_noisy_cv` on each ``latency_us.<method>.cv``): a ``noisy`` flag
    whose method (its text's first word) is not noisy by that rule goes, one that is keeps its place
    with the rule's words, and a noisy method without a flag gets one at the end. Other keys are
    unchanged."""
    latency = row.get("latency_us")
    flags = row.get("flags")
    if not isinstance(latency, dict) or not isinstance(flags, list):
        return row
    cvs = {m: s.get("cv") for m, s in latency.items() if isinstance(s, dict)}
    noisy = [m for m, cv in cvs.items() if isinstance(cv, (int, float)) and is_noisy_cv(cv)]

    def said(method: str) -> dict:
        return flag_record("noisy", f"{method} cv = {cvs[method]:.2f} (> {NOISY_CV})")

    out, flagged = [], set()
    for f in flags:
        if isinstance(f, dict) and f.get("name") == "noisy":
            method = str(f.get("text", "")).split(" ", 1)[0]
            if method in noisy and method not in flagged:
                out.append(said(method))
                flagged.add(method)
            continue
        out.append(f)
    out += [said(m) for m in noisy if m not in flagged]
    return {**row, "flags": out}


def _prose_reason(text: str) -> dict:
    low = text.lower()
    kind = next((k for word, k in _PROSE_CAPTURE_WORDS if word in low), "other")
    return {"kind": kind, "text": text}


def _prose_flag(text: str) -> dict:
    name, _, rest = text.partition(": ")
    return {"name": name, "text": rest}


class _Open(BaseModel):
    """A document part whose keys are not all listed: the ones readers use are typed, the rest kept."""

    model_config = ConfigDict(extra="allow")


class Env(_Open):
    """The environment a result was measured in (``env``; :mod:`qbench.env`). Only the fields
    readers use are typed; every other key is kept."""

    device: Optional[str] = None
    device_name: Optional[str] = None
    cpu: Optional[str] = None
    compute_capability: Optional[Union[str, list, tuple]] = None
    torch: Optional[str] = None
    torchao: Optional[str] = None
    bitsandbytes: Optional[str] = None

    @property
    def machine(self) -> str:
        """The machine, as one label: ``"cuda NVIDIA H200"`` or ``"cpu AMD EPYC"`` (the device type
        of ``device`` and ``device_name``; ``?`` for a missing one)."""
        kind = str(self.device if self.device is not None else "?").split(":", 1)[0]
        return f"{kind} {self.device_name or '?'}"


class CeilingSet(_Open):
    """One set of ceilings: ``memory_gbps`` (GB/s) and ``tflops`` (compute dtype -> TFLOP/s)."""

    memory_gbps: Optional[Num] = None
    tflops: Optional[dict[str, Optional[Num]]] = None


class Ceilings(_Open):
    """The ceilings of a result (:mod:`qbench.ceilings`): measured on the device, and the datasheet's."""

    measured: Optional[CeilingSet] = None
    datasheet: Optional[CeilingSet] = None


class ScenarioInfo(_Open):
    """The scenario as run (``scenario``); readers use its ``name``."""

    name: Optional[str] = None


class ResultDoc(BaseModel):
    """One qbench result file as readers hold it (``docs/results-schema.md``): the document's
    fields, with ``rows`` typed by the job kind: :class:`qbench.row.Row` for the layer and
    tensor-parallel jobs, the kind's own row model otherwise (:attr:`job` names the kind; a reader
    takes its view from the kind's record, :mod:`qbench.jobs`). Keys this model does not list are
    kept. An older file is held as the current document it upgrades to (:data:`qbench.SCHEMA_VERSION`)."""

    model_config = ConfigDict(extra="allow")

    schema_version: int
    complete: Optional[bool] = None
    qbench_version: Optional[str] = None
    created: Optional[str] = None
    wall_s: Optional[Num] = None
    env: Env = Field(default_factory=Env)
    ceilings: Optional[Ceilings] = None
    scenario: ScenarioInfo = Field(default_factory=ScenarioInfo)
    workers: Optional[Any] = None
    rows: list[Any] = Field(default_factory=list)  # typed by the job kind: Row, or the kind's row model
    job_kind: str = Field(default=jobs.DEFAULT, exclude=True)

    @property
    def job(self) -> str:
        """The job kind of the rows (:mod:`qbench.jobs`): the kind a row names, else ``"layer"``."""
        return self.job_kind

    @property
    def machine(self) -> str:
        """The machine the result was measured on, as one label: ``"cuda NVIDIA H200"`` or
        ``"cpu AMD EPYC"`` (the device type of ``env.device`` and ``env.device_name``)."""
        return self.env.machine

    def ceiling(self) -> tuple[Optional[CeilingSet], str]:
        """The ceilings a reader draws: the measured ones when they give a memory bandwidth, else
        the datasheet's; ``(None, "none")`` without either (CPU results)."""
        for source in ("measured", "datasheet"):
            got = getattr(self.ceilings, source, None) if self.ceilings is not None else None
            if got is not None and got.memory_gbps:
                return got, source
        return None, "none"

    @classmethod
    def of(cls, doc: "ResultDoc | dict") -> "ResultDoc":
        """``doc`` itself, or a dict (a document of :func:`qbench.runner.run`, or one a test builds)
        checked into a :class:`ResultDoc` the way :func:`read_results` checks a file (an older
        dict's rows upgraded). Raises :class:`ResultsError` when a row does not fit the model."""
        if isinstance(doc, cls):
            return doc
        rows = doc.get("rows") or []
        version = doc.get("schema_version", SCHEMA_VERSION)
        if isinstance(version, int) and version < SCHEMA_VERSION:
            rows, doc = _current(rows, version), {**doc, "schema_version": SCHEMA_VERSION}
        job = _kind(rows, doc)
        if job.name != jobs.DEFAULT:
            return cls.model_validate({**doc, "schema_version": SCHEMA_VERSION, "job_kind": job.name,
                                       "rows": jobs.load(job.check_rows)(rows, "document")})
        typed = [r for r in rows if isinstance(r, Row)]
        plain = [r for r in rows if not isinstance(r, Row)]
        if plain and typed:
            raise ResultsError("a document's rows are all dicts or all Rows")
        checked = typed or check_rows(plain, "document")
        return cls.model_validate({"schema_version": SCHEMA_VERSION, **doc, "rows": checked})

    def to_json(self) -> dict:
        """The document as JSON types, with exactly the keys it was read or built with (an older
        file's rows and version upgraded): what :func:`write_results` writes back."""
        out = self.model_dump(mode="json", exclude_unset=True, exclude={"rows"})
        if "rows" in self.model_fields_set:
            out["rows"] = [r.model_dump(mode="json", exclude_unset=True) for r in self.rows]
        return out


def check_rows(rows: list, source: str) -> list[Row]:
    """Check every row of a result file against the row model (:func:`qbench.row.validate_row`,
    reading rules): every key a field of :class:`qbench.row.Row` at every depth (a misspelt or
    invented key is an error), every value of its field's type and range (``m``, ``k``, ``n``
    integers > 0, ``status`` one of ``ok``/``skipped``/``failed``, a STATS ``median`` > 0,
    ``error.rel_fro`` >= 0, timing methods from the registry), the identity present. Older files
    lack the fields added since they were written (:data:`qbench.row.ADDED_SINCE`) and may carry
    legacy ones (:data:`qbench.row.LEGACY`); both are accepted. Two rows may not share an
    identity (:func:`row_key`).

    Returns the rows as :class:`qbench.row.Row`, in order.

    Raises:
        ResultsError: one line naming ``source``, the row's index and key path, the bad value and
            what is allowed, e.g. ``x.json: rows[3].latency_us.cold.median: Input should be
            greater than 0 (got 0)``.
    """
    seen: dict[tuple, int] = {}
    out: list[Row] = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultsError(f"{source}: rows[{i}]: a row is an object, got {type(row).__name__}")
        try:
            out.append(validate_row(row))
        except RowError as exc:
            raise ResultsError(f"{source}: rows[{i}].{exc}"[:400]) from None
        key = row_key(row)
        if key in seen:
            raise ResultsError(f"{source}: rows[{i}] repeats rows[{seen[key]}] (scheme {row['scheme']!r}, "
                               f"M={row['m']}, K={row['k']}, N={row['n']}): one row per scheme and shape")
        seen[key] = i
    return out


def check_job_rows(rows: list, source: str, row_type: type[BaseModel], job: str, only: str,
                   repeats: Callable[[Any], str]) -> list:
    """The rows of a result of job kind ``job`` as ``row_type`` (a pydantic row with a ``key``
    property), in order: each row a dict (or already ``row_type``) saying ``"job": job``, every key a
    field and every value of its type, no two rows of one ``key``. The row check of every job kind
    but the layer's (:attr:`qbench.jobs.Job.check_rows`).

    Raises:
        ResultsError: one line naming ``source``, the row's index and key path and the bad value;
            ``only`` for a row of another kind; ``repeats(row)`` names a repeated row's identity.
    """
    seen: dict[tuple, int] = {}
    out: list = []
    for i, row in enumerate(rows):
        if isinstance(row, row_type):
            row = row.model_dump(mode="json", exclude_unset=True)
        if not isinstance(row, dict) or row.get("job") != job:
            raise ResultsError(f"{source}: rows[{i}]: {only}")
        try:
            typed = row_type.model_validate(row)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ResultsError(f"{source}: rows[{i}].{where}: {err['msg']} (got {err.get('input')!r})"[:400]) from None
        if typed.key in seen:
            raise ResultsError(f"{source}: rows[{i}] repeats rows[{seen[typed.key]}] {repeats(typed)}")
        seen[typed.key] = i
        out.append(typed)
    return out
