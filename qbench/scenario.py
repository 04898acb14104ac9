"""Scenario files: TOML read with tomllib, validated once into frozen, typed objects.

Every error names the file, the key path and the bad value, in one line::

    decode.toml: layer.in_features: must be a multiple of group_size=128 for int4-intx, got 4000

A scenario is the keys every job kind shares (:class:`Scenario`: name, seed, device, output,
``[timing]``, schemes) joined with the keys of its kind: the kind's table model
(:attr:`qbench.jobs.Job.tables`, found through the registry by name, never imported here) makes
``m`` and ``[layer]`` a layer scenario's, ``[model]`` a model step's, ``[quality]`` a quality run's.
A key of another kind is refused naming the kind that takes it. Code past :func:`load` trusts the
scenario it gets. The format is documented in ``docs/scenarios.md`` and by the files under
``scenarios/``.

Validation imports no torch: a scheme's declaration (:mod:`qbench.schemes.catalog`) is torch-free
(``qbench check`` answers in well under a torch import).
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from qbench import jobs, schemes
from qbench.schemes.options import SchemeOptions
from qbench.model import recipe as recipes
from qbench.tables import Frozen, ScenarioError, Tables, TimingSpec, listed, one_line as _one_line, show as _show

__all__ = ["Scenario", "ScenarioError", "SchemeEntry", "TimingSpec", "check_output_path", "from_dict", "load",
           "loads", "only_schemes", "read_bytes", "scenario_class"]

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
#: Largest scenario file read (bytes): a scenario is a few hundred bytes; this bounds a read of
#: ``/dev/zero`` or a huge file instead of filling the memory.
MAX_SCENARIO_BYTES = 64 << 20


class SchemeEntry(Frozen):
    """One scheme to run: registry ``name``, validated ``options``, the row ``label``, and, for a
    model scenario, an optional mixed ``recipe`` (a scheme per role or block: :mod:`qbench.model.recipe`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    name: str
    options: SchemeOptions
    label: str
    recipe: Optional[recipes.Recipe] = None

    @property
    def scheme(self) -> schemes.Scheme:
        """The registered :class:`~qbench.schemes.scheme.Scheme` of ``name`` (a dictionary look-up;
        the entry pickles as its name, and a worker process finds the same record by it)."""
        return schemes.get(self.name)


class Scenario(Frozen):
    """A validated scenario: the keys every job kind shares. A loaded scenario is an instance of its
    kind's class (:func:`scenario_class`), which adds the kind's own keys (``scenario.m``,
    ``scenario.model``, ...); ``job`` names the kind."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, arbitrary_types_allowed=True,
                              allow_inf_nan=False)
    job: ClassVar[str] = ""
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(default=0, ge=0, lt=2**63)
    device: str = "auto"
    output: Optional[str] = None
    timing: TimingSpec = TimingSpec()
    schemes: tuple[SchemeEntry, ...] = Field(min_length=1)
    source: str = "<scenario>"

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.match(value):
            raise ValueError("must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
        return value

    def tables_dict(self) -> dict:  # the kind's table model has its own (qbench.tables.Tables)
        return {}

    def to_dict(self) -> dict:
        """The scenario as run, JSON-ready (scheme options expanded, defaults included)."""
        data = {key: getattr(self, key) for key in ("name", "description", "seed", "device", "output")}
        data.update(self.tables_dict())
        data["timing"] = listed(self.timing)
        data["source"] = self.source
        data["schemes"] = [{"name": e.name, **e.options.model_dump(exclude_none=True),
                            **(e.recipe.to_scenario() if e.recipe else {})} for e in self.schemes]
        return data


@functools.cache
def scenario_class(job: str) -> type[Scenario]:
    """The class of a scenario of job kind ``job``: :class:`Scenario`'s shared keys and the kind's
    table model (:attr:`qbench.jobs.Job.tables`, imported on first use), whose keys win (a kind may
    widen ``[timing]``)."""
    name = f"{job.capitalize()}Scenario"
    cls = globals().get(name)
    if cls is None:  # made once and kept as this module's attribute, so a scenario pickles by name
        tables = jobs.load(jobs.get(job).tables)
        cls = type(name, (tables, Scenario), {"job": job, "__module__": __name__, "__qualname__": name})
        globals()[name] = cls
    return cls


def __getattr__(name: str) -> type[Scenario]:
    """``qbench.scenario.<Kind>Scenario`` (e.g. ``LayerScenario``), made on first use: how a pickled
    scenario finds its class in a process that has not read one of that kind yet."""
    kind = name.removesuffix("Scenario").lower()
    if name.endswith("Scenario") and kind in jobs.JOBS:
        return scenario_class(kind)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load(path: str | Path) -> Scenario:
    """Read and validate a TOML scenario file.

    Besides :func:`from_dict`'s checks, a file may not set ``source`` (qbench records it) and its
    ``output``, when set, must be a path qbench can create or replace (:func:`check_output_path`).

    Raises:
        ScenarioError: the file is missing or unreadable, not TOML, or not a valid scenario.
    """
    path = Path(path)
    source = str(path)
    return loads(read_bytes(path), source)


def read_bytes(path: str | Path) -> bytes:
    """The bytes of scenario file ``path``, read once (a pipe such as ``qbench run <(...)`` can be
    read only once) and at most :data:`MAX_SCENARIO_BYTES`.

    Raises:
        ScenarioError: missing, a folder, unreadable, or larger than the limit.
    """
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SCENARIO_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioError(source, "", "no such file") from None
    except IsADirectoryError:
        raise ScenarioError(source, "", "is a directory, not a TOML scenario file") from None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL in the path
        raise ScenarioError(source, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if len(data) > MAX_SCENARIO_BYTES:
        raise ScenarioError(source, "", f"larger than {MAX_SCENARIO_BYTES >> 20} MiB: not a scenario file")
    return data


def loads(data: bytes, source: str) -> Scenario:
    """Validate the bytes of a TOML scenario file (:func:`load`'s checks), ``source`` naming it.

    Raises:
        ScenarioError: not UTF-8, not TOML, nested too deeply, or not a valid scenario.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(source, "", f"not valid TOML: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, "", f"not valid TOML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ScenarioError(source, "", "not valid TOML: arrays or tables nested too deeply") from None
    if "source" in parsed:
        fields = scenario_class(jobs.of_tables(parsed).name).model_fields
        raise ScenarioError(source, "source", f"unknown key (qbench records the file itself); allowed: "
                                              f"{', '.join(k for k in fields if k != 'source')}")
    try:
        scenario = from_dict(parsed, source)
    except RecursionError:
        raise ScenarioError(source, "", "arrays or tables nested too deeply for a scenario") from None
    if scenario.output is not None:
        problem = check_output_path(scenario.output)
        if problem:
            raise ScenarioError(source, "output", f"{problem}, got {_show(scenario.output)}")
    return scenario


def check_output_path(output: str) -> Optional[str]:
    """Why a scenario's ``output`` cannot be its result file, or None when it can. Touches
    nothing. ``output`` is relative to the working directory and must stay inside it (no absolute
    path, no ``..`` out of it: a downloaded scenario run with ``--force`` could otherwise replace
    any file the user can write; ``--out`` takes any path), must end in ``.json``, hold no NUL or
    other control character, not be a folder, and its nearest existing ancestor must be a
    writable folder (``os.access``).
    """
    if not output.strip():
        return "must be a file path, not empty"
    if any(ord(c) < 32 or ord(c) == 127 for c in output):
        return "must not contain control characters (NUL, newline, escape)"
    target = Path(output)
    if target.suffix != ".json":
        return "must end in .json (a result file)"
    if target.is_absolute() or ".." in target.parts:
        return "must be a path inside the working directory (no absolute path, no '..'); use --out for another place"
    try:
        if target.is_dir():
            return "is a directory; give a file path such as results/run.json"
        parent = target.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if parent.exists() and not parent.is_dir():
            return f"cannot be written: {parent} is a file, not a folder"
        if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
            return f"cannot be written: no permission to write in {parent}"
    except (OSError, ValueError) as exc:
        return f"cannot be written: {_one_line(str(exc))}"
    return None


def only_schemes(scenario: Scenario, values: list[str]) -> Scenario:
    """``scenario`` with only the schemes whose row label ``values`` name, in the scenario's order
    (``qbench run --schemes``: re-measure some schemes, complete a run that was cut off). A value
    that is itself a label is taken whole (a label may hold commas:
    ``int4-weight-only[activation_dtype=fp16,group_size=64]``); otherwise it is split on commas.

    Raises:
        ScenarioError: a label no scheme of the scenario has, or no label at all (one line naming the
            scenario file, the option and the value, with the labels it has, separated by ``; ``).
    """
    have = [entry.label for entry in scenario.schemes]
    wanted: list[str] = []
    for value in values:
        parts = [value.strip()] if value.strip() in have else [p.strip() for p in value.split(",")]
        wanted += [p for p in parts if p]
    unknown = [label for label in wanted if label not in have]
    if not wanted or unknown:
        value = unknown[0] if unknown else ",".join(values)
        raise ScenarioError(scenario.source, "--schemes", f"no scheme labelled {value!r} in this scenario "
                            f"(its labels: {'; '.join(have)})")
    return scenario.model_copy(update={"schemes": tuple(e for e in scenario.schemes if e.label in wanted)})


def from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a parsed scenario (a dict as tomllib returns it, or :meth:`Scenario.to_dict`) as the
    job kind its tables select (:func:`qbench.jobs.of_tables`), then the kind's own rules
    (:attr:`qbench.jobs.Job.check`).

    Raises:
        ScenarioError: naming ``source``, the key path and the bad value.
    """
    if not isinstance(data, dict):
        raise ScenarioError(source, "", f"a scenario is a table of keys, got {type(data).__name__}")
    data = dict(data)
    data.pop("source", None)
    raw_schemes = data.pop("schemes", None)
    entries = _scheme_entries(raw_schemes, source, data)
    job = jobs.of_tables(data)
    cls = scenario_class(job.name)
    data = cls.prepare(data, source)
    if isinstance(data.get("timing"), dict) and isinstance(data["timing"].get("methods"), list):
        data["timing"] = {**data["timing"], "methods": tuple(data["timing"]["methods"])}
    try:
        scenario = cls.model_validate({**data, "schemes": entries, "source": source})
    except ValidationError as exc:
        raise _as_scenario_error(exc, source, cls) from None
    jobs.load(job.check)(scenario)
    return scenario


def _under_table(table: str, key: str) -> str:
    """Why a top-level ``key`` turned up inside ``[table]``, and the fix."""
    return (f"in TOML a key written after the [{table}] header belongs to that table, so put "
            f"'{key} = ...' above the first [table] header")


def _misplaced(data: dict, key: str) -> str:
    """``; found 'layer.schemes': ...`` when ``key`` is missing at the top level but a table has
    it (see :func:`_under_table`), else ``""``."""
    for name, value in data.items():
        if isinstance(value, dict) and key in value:
            return f"; found '{name}.{key}': {_under_table(name, key)}"
    return ""


def _scheme_entries(raw: Any, source: str, data: Optional[dict] = None) -> tuple[SchemeEntry, ...]:
    if raw is None:
        raise ScenarioError(source, "schemes", "missing: list at least one scheme ([[schemes]] name = \"fp16\")"
                            + _misplaced(data or {}, "schemes"))
    if not isinstance(raw, list):
        raise ScenarioError(source, "schemes", f"must be a list of scheme names or [[schemes]] tables, got {_show(raw)}")
    if not raw:
        raise ScenarioError(source, "schemes", "is empty: list at least one scheme")
    entries, labels = [], set()
    for i, item in enumerate(raw):
        key = f"schemes[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise ScenarioError(source, key, f"must be a scheme name or a table with 'name', got {_show(item)}")
        item = dict(item)
        name = item.pop("name", None)
        if not isinstance(name, str):
            raise ScenarioError(source, f"{key}.name", f"missing or not a string: give a registered scheme name "
                                                       f"(qbench list), got {_show(name)}")
        try:
            scheme = schemes.get(name)
        except schemes.UnknownSchemeError as exc:
            raise ScenarioError(source, f"{key}.name", str(exc)) from None
        try:
            recipe = recipes.parse(item, key)
        except recipes.RecipeError as exc:
            raise ScenarioError(source, exc.key, exc.message) from None
        try:
            options = scheme.options_model.model_validate(item)
        except ValidationError as exc:
            raise _as_scenario_error(exc, source, scheme.options_model, prefix=f"{key}.", what=f" ({name})") from None
        label = options.label or _auto_label(name, options)
        if recipe is not None and not options.label:
            label = recipes.auto_label(label, recipe)
        if label in labels:
            raise ScenarioError(source, key, f"duplicate scheme label {label!r}: give one of them a 'label'")
        labels.add(label)
        entries.append(SchemeEntry(name=name, options=options, label=label, recipe=recipe))
    return tuple(entries)


def _auto_label(name: str, options: SchemeOptions) -> str:
    defaults = type(options)()
    changed = [f"{k}={v}" for k, v in options.model_dump(exclude={"mode", "label"}).items()
               if v != getattr(defaults, k)]
    label = name + ("+compiled" if options.mode == "compiled" else "")
    return label + (f"[{','.join(changed)}]" if changed else "")


def _key_part(part: Any) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    part = str(part)
    return part if _BARE_KEY.match(part) else json.dumps(part)  # TOML's quoted-key spelling, one line


#: pydantic's wording -> the scenario file's (TOML arrays and tables, not tuples and dicts).
_REWORDS = (
    (re.compile(r"^input should be a valid (tuple|list)$"), "must be a list"),
    (re.compile(r"^input should be a valid dictionary or instance of \w+$"), "must be a table ([section] or {...})"),
    (re.compile(r"^(tuple|list) should have at least 1 item after validation, not 0$"), "must not be empty"),
    (re.compile(r"^input should be a finite number$"), "must be a finite number (not inf or nan)"),
)


def _as_scenario_error(exc: ValidationError, source: str, root: type[BaseModel], prefix: str = "", what: str = "") -> ScenarioError:
    # An unknown key first: `mm = [1]` is a typo of `m`, better reported than "m: missing".
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    key = prefix + ".".join(_key_part(p) for p in loc).replace(".[", "[")
    kind, msg = err["type"], err["msg"]
    job = getattr(root, "job", "") if not prefix else ""
    if kind == "extra_forbidden":
        owners = [j for j in reversed(jobs.JOBS) if job and j != job and _path(scenario_class(j), loc) is not None]
        if owners:  # another kind's key: say which kind takes it
            table = isinstance(_path(scenario_class(owners[0]), loc), type)
            thing = f"[{loc[-1]}]" if table and len(loc) == 1 else repr(loc[-1])
            why = root.REFUSED.get(".".join(map(str, loc))) if issubclass(root, Tables) else None
            kinds = " or ".join([", ".join(owners[:-1]), owners[-1]] if len(owners) > 1 else owners)
            return ScenarioError(source, key, f"a {job} scenario takes no {thing} (a {kinds} key"
                                              f"{': ' + why if why else ''})")
        allowed = _allowed_keys(root, loc)
        hint = ""
        if len(loc) == 2 and isinstance(loc[-1], str) and loc[-1] in root.model_fields and not prefix:
            hint = f"; '{loc[-1]}' is a top-level key: {_under_table(loc[0], loc[-1])}"
        return ScenarioError(source, key, f"unknown key{what}" + (f"; allowed: {', '.join(allowed)}" if allowed else "") + hint)
    if kind == "missing":
        said = root.MISSING.get(key) if issubclass(root, Tables) and len(loc) == 1 else None
        return ScenarioError(source, key, said or f"missing{what}: this key is required")
    msg = _one_line(msg.removeprefix("Value error, ")) or "invalid"
    msg = msg[0].lower() + msg[1:]
    for pattern, wording in _REWORDS:
        msg = pattern.sub(wording, msg)
    return ScenarioError(source, key.rstrip(".") or "scenario", f"{msg}{what}, got {_show(err.get('input'))}")


def _path(root: type[BaseModel], loc: list) -> Any:
    """What the key path ``loc`` is in model ``root``: the nested model class of a table, another
    annotation for a plain key, None when ``root`` has no such key."""
    model: Any = root
    for part in loc:
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        field = fields.get(part) if fields and isinstance(part, str) else None
        if field is None:
            return None
        model = field.annotation
    return model


def _allowed_keys(root: type[BaseModel], loc: list) -> list[str]:
    """The keys allowed where ``loc`` points; at the top of a kind's scenario, the shared keys around the
    kind's own, then the tables that would make the file another kind (tried first: :data:`qbench.jobs.JOBS`)."""
    job = getattr(root, "job", "")
    if len(loc) == 1 and job:
        shared, before = list(Scenario.model_fields), list(jobs.JOBS)[:list(jobs.JOBS).index(job)]
        own = [k for k in root.model_fields if k not in shared]
        return (shared[:5] + own + [k for k in shared[5:] if k != "source"]
                + [t for j in reversed(before) if (t := jobs.JOBS[j].table) not in root.model_fields])
    model: Any = root
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return []
        model = field.annotation
    return [k for k in model.model_fields if k != "source"]
