"""The base every scenario table is built on (torch-free, imports nothing of qbench's jobs).

:mod:`qbench.scenario` (the shared keys) and each job's table model (:attr:`qbench.jobs.Job.tables`)
build on it, so a job's package and the scenario reader share one frozen model base, one error
and one way of showing a bad value without importing each other.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from qbench.timing.settings import TimingSettings

#: Largest M a scenario may ask for (rows = batch x tokens).
M_MAX = 1 << 20
#: Longest bad value an error line shows (``repr``, cut with ``...``).
VALUE_CHARS = 120


class ScenarioError(ValueError):
    """A scenario that cannot be run: ``"<file>: <key path>: <what is wrong>, got <value>"``."""

    def __init__(self, source: str, key: str, message: str):
        self.source, self.key, self.message = source, key, message
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")


class Frozen(BaseModel):
    """A validated, immutable scenario table: no unknown key, strict types, no inf or nan (TOML has
    ``inf`` and ``nan`` floats; no scenario number may be either)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Tables(Frozen):
    """A job kind's own scenario keys (:attr:`qbench.jobs.Job.tables`): its fields are the top-level
    keys and tables only scenarios of that kind take. :mod:`qbench.scenario` joins it with the shared
    keys into the kind's scenario class, so ``scenario.m`` or ``scenario.model`` is the kind's own.

    Class attributes a kind may set:
        REFUSED: key path of another kind's key -> why this kind takes none (added to the one-line
            refusal, which always names the key and the kind that takes it).
        MISSING: a required top-level key -> the line said when the file lacks it (what the key is,
            and what else the file may have meant).
    """

    REFUSED: ClassVar[dict[str, str]] = {}
    MISSING: ClassVar[dict[str, str]] = {}

    @classmethod
    def prepare(cls, data: dict, source: str) -> dict:
        """The file's parsed keys before validation: a kind checks or normalizes its own here, so an
        error can name an item (``m[1]``) where the model could only name the key."""
        return data

    def tables_dict(self) -> dict:
        """This kind's keys as run, JSON-ready (lists, not tuples), for :meth:`qbench.scenario.Scenario.to_dict`:
        the fields the table models declare, base classes first."""
        declared = [name for c in reversed(type(self).__mro__) if issubclass(c, Tables) and c is not Tables
                    for name in c.__dict__.get("__annotations__", {}) if name in type(self).model_fields]
        return {name: listed(getattr(self, name)) for name in dict.fromkeys(declared)}


class MTables(Tables):
    """The tables of a kind measured at M values (``m``: rows = batch x tokens): the layer job's,
    tensor parallelism's and the model step's."""

    MISSING = {"m": "missing: the M values (rows = batch x tokens), e.g. m = [1, 16]"}
    m: tuple[int, ...] = Field(min_length=1, max_length=64)

    @classmethod
    def prepare(cls, data: dict, source: str) -> dict:
        """``m`` as a tuple, each out-of-range item named ``m[i]`` (wrong item types go on to pydantic).

        Raises:
            ScenarioError: ``m`` is not a list or an integer, is empty, or has an item out of range."""
        if "m" not in data:
            return data
        raw = data["m"]
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = [raw]
        if not isinstance(raw, (list, tuple)):
            raise ScenarioError(source, "m", f"must be a list of integers (rows = batch x tokens) or one integer, "
                                             f"got {show(raw)}")
        if not raw:
            raise ScenarioError(source, "m", "is empty: list at least one M (rows = batch x tokens), got []")
        for i, m in enumerate(raw):
            if isinstance(m, int) and not isinstance(m, bool) and not 1 <= m <= M_MAX:
                raise ScenarioError(source, f"m[{i}]", f"must be an integer in 1..{M_MAX} (rows = batch x tokens), got {m}")
        return {**data, "m": tuple(raw)}

    @field_validator("m")
    @classmethod
    def _m(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for i, m in enumerate(value):
            if m <= 0 or m > M_MAX:
                raise ValueError(f"every M must be an integer in 1..{M_MAX}, item {i} is {m}")
        if len(set(value)) != len(value):
            raise ValueError("M values must be distinct")
        return value


class TimingSpec(TimingSettings):
    """A scenario's ``[timing]`` table: the timing knobs (:class:`~qbench.timing.settings.TimingSettings`:
    warm-up calls, repetition bounds, the target relative half-width of the median's confidence
    interval, the per-method budget (s), calls per CUDA graph, the L2 flush buffer as a multiple of
    the L2 size) plus the per-scheme worker timeout (s). A kind that lets the file pick its timing
    methods extends it with ``methods`` (:class:`qbench.layer.tables.LayerTiming`)."""

    scheme_timeout_s: float = Field(default=600.0, gt=0, le=86_400)


def listed(value: Any) -> Any:
    """``value`` JSON-ready: a table as a dict, a tuple as a list (recursively)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, (tuple, list)):
        return [listed(v) for v in value]
    if isinstance(value, dict):
        return {k: listed(v) for k, v in value.items()}
    return value


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


def show(value: Any) -> str:
    """``repr(value)`` on one line, cut to :data:`VALUE_CHARS` characters."""
    if isinstance(value, tuple):  # lists become tuples before validation; show what the file says
        value = list(value)
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."
