"""Scenario files: TOML read with tomllib, validated once into frozen, typed objects.

Every error names the file, the key path and the bad value, in one line::

    decode.toml: layer.in_features: must be a multiple of group_size=128 for int4-intx, got 4000

Code past :func:`load` trusts the :class:`Scenario` it gets. The format is documented in
``docs/scenarios.md`` and by the files under ``scenarios/``.

Validation imports no torch: a scheme's declaration (:mod:`qbench.schemes.catalog`) is torch-free
(``qbench check`` answers in well under a torch import).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from qbench import schemes
from qbench.schemes.options import SchemeOptions
from qbench import jobs
from qbench.model.config import ConfigError, StepModelConfig
from qbench.quality.spec import QualitySpec
from qbench.quality.spec import check as check_quality
from qbench.step.spec import ModelSpec
from qbench.step.spec import check as check_model
from qbench.model import recipe as recipes
from qbench.timing import registry
from qbench.timing.settings import TimingSettings

#: The layer timing methods a scenario's ``timing.methods`` may list (:mod:`qbench.timing.registry`).
METHODS = registry.SCENARIO_METHODS
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
#: Largest M a scenario may ask for (rows = batch x tokens).
M_MAX = 1 << 20
#: safetensors dtypes a weight may be stored in (header names, safetensors format spec).
_SAFETENSORS_FLOAT = ("F64", "F32", "F16", "BF16")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_VALUE_CHARS = 120
#: Largest scenario file read (bytes): a scenario is a few hundred bytes; this bounds a read of
#: ``/dev/zero`` or a huge file instead of filling the memory.
MAX_SCENARIO_BYTES = 64 << 20


class ScenarioError(ValueError):
    """A scenario that cannot be run: ``"<file>: <key path>: <what is wrong>, got <value>"``."""

    def __init__(self, source: str, key: str, message: str):
        self.source, self.key, self.message = source, key, message
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")


class _Frozen(BaseModel):
    # allow_inf_nan=False: TOML has ``inf`` and ``nan`` floats; no scenario number may be either.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class LayerSpec(_Frozen):
    """The linear layer: ``in_features`` = K, ``out_features`` = N, optional bias."""

    in_features: int = Field(default=4096, gt=0, le=1 << 17)
    out_features: int = Field(default=4096, gt=0, le=1 << 17)
    bias: bool = False


class TimingSpec(TimingSettings):
    """A scenario's ``[timing]`` table: the timing knobs (:class:`~qbench.timing.settings.TimingSettings`:
    warm-up calls, repetition bounds, the target relative half-width of the median's confidence
    interval, the per-method budget (s), calls per CUDA graph, the L2 flush buffer as a multiple of
    the L2 size) plus the layer methods to run and the per-scheme worker timeout (s). The timing
    methods read it as their settings."""

    methods: tuple[Literal[METHODS], ...] = Field(default=METHODS, min_length=1)
    scheme_timeout_s: float = Field(default=600.0, gt=0, le=86_400)

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("timing methods must be distinct")
        return value


class InputsSpec(_Frozen):
    """Activation distribution: standard normal, plus ``outlier_fraction`` of the K columns
    scaled to ``outlier_magnitude`` (LLM.int8-style outlier features)."""

    outlier_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    outlier_magnitude: float = Field(default=0.0, ge=0.0, le=1e6)


#: ``weight.source`` values whose weight qbench draws itself (errors on them are not a trained layer's).
SYNTHETIC_WEIGHTS = ("random", "student-t", "outlier-channels")
#: ``weight.source`` -> the keys of ``[weight]`` it takes (all of them required).
WEIGHT_KEYS = {"random": (), "student-t": ("df",), "outlier-channels": ("outlier_channels", "outlier_scale"),
               "safetensors": ("path", "tensor"), "hf-checkpoint": ("path", "tensor")}
#: The files of a Hugging Face checkpoint folder qbench reads (sharded, or one file).
HF_INDEX, HF_SINGLE = "model.safetensors.index.json", "model.safetensors"


class WeightSpec(_Frozen):
    """Where the FP32 weight ``[N, K]`` comes from (``docs/scenarios.md``, ``[weight]``):

    * ``random``: seeded Gaussian N(0, 1/K) (synthetic);
    * ``student-t``: seeded Student-t of ``df`` degrees of freedom (> 2), scaled to variance 1/K:
      heavy-tailed like trained layers (synthetic);
    * ``outlier-channels``: the Gaussian with ``outlier_channels`` input channels (columns of W,
      chosen by the seed) multiplied by ``outlier_scale`` (synthetic);
    * ``safetensors``: tensor ``tensor`` of the file ``path`` (relative to the scenario file);
    * ``hf-checkpoint``: tensor ``tensor`` of the Hugging Face checkpoint folder ``path``
      (``model.safetensors.index.json`` names its shard, else ``model.safetensors``).
    """

    source: Literal["random", "student-t", "outlier-channels", "safetensors", "hf-checkpoint"] = "random"
    path: Optional[str] = None
    tensor: Optional[str] = None
    df: Optional[float] = Field(None, gt=2.0, le=1e6)
    outlier_channels: Optional[int] = Field(None, ge=1, le=1 << 17)
    outlier_scale: Optional[float] = Field(None, gt=0.0, le=1e4)

    @field_validator("df", "outlier_scale", mode="before")
    @classmethod
    def _float(cls, value: Any) -> Any:  # TOML's `df = 3` is an int; strict mode would refuse it
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class SchemeEntry(_Frozen):
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


#: Largest tensor-parallel size a scenario may ask for (one host of 8 GPUs).
TP_MAX = 8


class TpSpec(_Frozen):
    """Tensor parallelism (``[tp]``, see ``docs/tp.md``): the layer sharded over ``tp_size``
    ranks, each a power of two <= 8. ``split``: ``column`` shards N (each rank computes
    ``Y[:, N/p slice]``, then an all-gather), ``row`` shards K (each rank a partial ``Y``, then an
    all-reduce); one of them or both. ``reduce_dtype``: what the row split all-reduces, the
    layer's ``output`` dtype (as Megatron-LM and vLLM do) or ``float32`` partial sums."""

    tp_size: tuple[int, ...] = Field(min_length=1, max_length=4)
    split: tuple[Literal["column", "row"], ...] = Field(default=("column", "row"), min_length=1, max_length=2)
    reduce_dtype: Literal["output", "float32"] = "output"

    @field_validator("tp_size", "split", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return (value,)
        return tuple(value) if isinstance(value, list) else value

    @field_validator("tp_size")
    @classmethod
    def _tp_size(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for i, p in enumerate(value):
            if not 1 <= p <= TP_MAX or p & (p - 1):
                raise ValueError(f"every tp_size must be a power of two in 1..{TP_MAX}, item {i} is {p}")
        if len(set(value)) != len(value):
            raise ValueError("tp_size values must be distinct")
        return value

    @field_validator("split")
    @classmethod
    def _split(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("split values must be distinct")
        return value


class Scenario(_Frozen):
    """A validated scenario. ``m`` lists the M values (rows = batch x tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, arbitrary_types_allowed=True,
                              allow_inf_nan=False)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(default=0, ge=0, lt=2**63)
    device: str = "auto"
    output: Optional[str] = None
    m: tuple[int, ...] = Field(min_length=1, max_length=64)
    layer: LayerSpec = LayerSpec()
    timing: TimingSpec = TimingSpec()
    inputs: InputsSpec = InputsSpec()
    weight: WeightSpec = WeightSpec()
    schemes: tuple[SchemeEntry, ...] = Field(min_length=1)
    tp: Optional[TpSpec] = None
    model: Optional[ModelSpec] = None
    quality: Optional[QualitySpec] = None
    source: str = "<scenario>"

    @property
    def job(self) -> str:
        """The job kind (:func:`qbench.jobs.of_scenario`): ``"quality"`` (``[quality]`` and ``[model]``),
        ``"step"`` (a ``[model]`` table: the whole decode step), ``"tp"`` (a ``[tp]`` table) or ``"layer"``."""
        return jobs.of_scenario(self).name

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.match(value):
            raise ValueError("must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
        return value

    @field_validator("m")
    @classmethod
    def _m(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for i, m in enumerate(value):
            if m <= 0 or m > M_MAX:
                raise ValueError(f"every M must be an integer in 1..{M_MAX}, item {i} is {m}")
        if len(set(value)) != len(value):
            raise ValueError("M values must be distinct")
        return value

    def to_dict(self) -> dict:
        """The scenario as run, JSON-ready (scheme options expanded, defaults included)."""
        data = self.model_dump(exclude={"schemes"})
        data["m"] = list(self.m)
        data["timing"]["methods"] = list(self.timing.methods)
        data["schemes"] = [{"name": e.name, **e.options.model_dump(exclude_none=True),
                            **(e.recipe.to_scenario() if e.recipe else {})} for e in self.schemes]
        if self.model is None:
            data.pop("model")
            for key in ("df", "outlier_channels", "outlier_scale"):  # as files before these keys were written
                if data["weight"].get(key) is None:
                    data["weight"].pop(key, None)
        else:
            data["model"] = self.model.to_dict()
            for key in ("layer", "weight", "inputs"):
                data.pop(key)
            data["timing"].pop("methods")
        if self.quality is None:
            data.pop("quality")
        else:
            data.pop("m")  # a quality scenario has no M of its own (:func:`from_dict` sets the chunk)
        if self.tp is None:
            data.pop("tp")
        else:
            data["tp"] = {**data["tp"], "tp_size": list(self.tp.tp_size), "split": list(self.tp.split)}
        return data


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
        raise ScenarioError(source, "source", f"unknown key (qbench records the file itself); allowed: "
                                              f"{', '.join(k for k in Scenario.model_fields if k != 'source')}")
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
    """Validate a parsed scenario (a dict as tomllib returns it, or :meth:`Scenario.to_dict`).

    Raises:
        ScenarioError: naming ``source``, the key path and the bad value.
    """
    if not isinstance(data, dict):
        raise ScenarioError(source, "", f"a scenario is a table of keys, got {type(data).__name__}")
    data = dict(data)
    data.pop("source", None)
    raw_schemes = data.pop("schemes", None)
    entries = _scheme_entries(raw_schemes, source, data)
    if "quality" in data:
        if not isinstance(data.get("model"), dict):
            raise ScenarioError(source, "model", "a quality scenario ([quality]) names its model in a [model] table "
                                                 "(checkpoint = a Hugging Face folder), got none")
        if "m" in data:
            raise ScenarioError(source, "m", "not used by a quality scenario: each chunk runs at M = quality.chunk "
                                             f"tokens; remove it, got {_show(data['m'])}")
        chunk = data["quality"].get("chunk", 512) if isinstance(data["quality"], dict) else 512
        data["m"] = (chunk,) if isinstance(chunk, int) and not isinstance(chunk, bool) and 0 < chunk <= M_MAX else (1,)
    if "m" in data:
        data["m"] = _m_values(data["m"], source)
    if isinstance(data.get("model"), dict):
        if "layer" in data:
            raise ScenarioError(source, "layer", "a model-step scenario ([model]) builds every layer of the model; "
                                                 "remove [layer], got a [layer] table")
        for key in ("tp", "weight", "inputs"):
            if key in data:
                raise ScenarioError(source, key, f"not used by a model-step scenario ([model]): its weights are seeded "
                                                 f"per block and its inputs are token ids; remove [{key}]")
        if isinstance(data.get("timing"), dict) and "methods" in data["timing"]:
            raise ScenarioError(source, "timing.methods", "a model-step scenario lists its step methods in "
                                                          f"model.methods, got {_show(data['timing']['methods'])}")
    if isinstance(data.get("timing"), dict) and isinstance(data["timing"].get("methods"), list):
        data["timing"] = {**data["timing"], "methods": tuple(data["timing"]["methods"])}
    try:
        scenario = Scenario.model_validate({**data, "schemes": entries, "source": source})
    except ValidationError as exc:
        raise _as_scenario_error(exc, source, Scenario) from None
    _check_cross_fields(scenario)
    return scenario


def _m_values(raw: Any, source: str) -> tuple:
    """``m`` as a tuple, each out-of-range item named ``m[i]``; wrong item types go on to pydantic."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise ScenarioError(source, "m", f"must be a list of integers (rows = batch x tokens) or one integer, got {_show(raw)}")
    if not raw:
        raise ScenarioError(source, "m", "is empty: list at least one M (rows = batch x tokens), got []")
    for i, m in enumerate(raw):
        if isinstance(m, int) and not isinstance(m, bool) and not 1 <= m <= M_MAX:
            raise ScenarioError(source, f"m[{i}]", f"must be an integer in 1..{M_MAX} (rows = batch x tokens), got {m}")
    return tuple(raw)


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


def _check_cross_fields(scenario: Scenario) -> None:
    k = scenario.layer.in_features
    n = scenario.layer.out_features
    # a model-step scenario's shapes are the model's: a scheme that cannot take one is a skipped row
    for i, entry in enumerate(() if scenario.model is not None else scenario.schemes):
        multiple = entry.scheme.k_multiple(entry.options)
        if k % multiple:
            raise ScenarioError(scenario.source, "layer.in_features",
                                f"must be a multiple of {multiple} (group/block size or kernel constraint of schemes[{i}] "
                                f"{entry.label}), got {k}")
        multiple = entry.scheme.n_multiple(entry.options)
        if n % multiple:
            raise ScenarioError(scenario.source, "layer.out_features",
                                f"must be a multiple of {multiple} (kernel constraint of schemes[{i}] {entry.label}), got {n}")
    _check_weight(scenario)
    if scenario.inputs.outlier_fraction > 0 and scenario.inputs.outlier_magnitude <= 0:
        raise ScenarioError(scenario.source, "inputs.outlier_magnitude",
                            f"must be > 0 when outlier_fraction > 0, got {scenario.inputs.outlier_magnitude}")
    if scenario.tp is not None:
        _check_tp(scenario)
    config = None
    if scenario.quality is not None:
        config = quality_model(scenario)
    elif scenario.model is not None:
        config = step_model(scenario)
    _check_recipes(scenario, config)


def _check_recipes(scenario: Scenario, config: Optional[StepModelConfig]) -> None:
    """Every recipe (:func:`qbench.model.recipe.check`) against the model; a layer or tp scenario refuses one."""
    entries = [(i, e) for i, e in enumerate(scenario.schemes) if e.recipe is not None]
    if not entries:
        return
    if config is None:
        i, entry = entries[0]
        key = f"schemes[{i}].{'recipe' if entry.recipe.roles else 'keep_blocks'}"
        raise ScenarioError(scenario.source, key, f"a recipe picks a scheme per linear of a model ([model]); a "
                                                  f"{scenario.job} scenario measures one "
                                                  f"{'sharded ' if scenario.tp else ''}linear layer, got a recipe on "
                                                  f"{entry.label!r}")
    if scenario.quality is not None:
        head, head_key = ("scheme" if scenario.quality.lm_head else "float"), "quality.lm_head"
    else:
        spec = scenario.model
        head = "none" if not spec.lm_head else ("scheme" if spec.quantize_lm_head else "float")
        head_key = "model.quantize_lm_head" + ("" if spec.lm_head else " (and model.lm_head)")
    try:
        for i, entry in entries:
            recipes.check(entry.recipe, recipes.Choice(entry.name, entry.options), config.blocks, head,
                          f"schemes[{i}]", head_key)
    except recipes.RecipeError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def quality_model(scenario: Scenario) -> StepModelConfig:
    """The model of a quality scenario with its checkpoint, tokenizer and text checked
    (:func:`qbench.quality.spec.check`). Torch-free.

    Raises:
        ScenarioError: the key ``model.<key>`` or ``quality.<key>`` at fault and why."""
    try:
        return check_quality(scenario.model, scenario.quality, scenario.source)
    except ConfigError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def _check_tp(scenario: Scenario) -> None:
    """Every shard is a whole layer: N (column) or K (row) divides by every tp_size, and a row
    shard's K stays a multiple of every scheme's group/block size (groups never straddle ranks)."""
    tp, k, n = scenario.tp, scenario.layer.in_features, scenario.layer.out_features
    for split in tp.split:
        dim, name = (n, "layer.out_features (N, split = 'column')") if split == "column" else (k, "layer.in_features (K, split = 'row')")
        for p in tp.tp_size:
            if dim % p:
                raise ScenarioError(scenario.source, "tp.tp_size", f"{name} = {dim} must divide by every tp_size, got {p}")
            if split != "row":
                continue
            for i, entry in enumerate(scenario.schemes):
                multiple = entry.scheme.k_multiple(entry.options)
                if (k // p) % multiple:
                    raise ScenarioError(scenario.source, "tp.tp_size",
                                        f"a row shard's K = {k}/{p} = {k // p} must be a multiple of {multiple} "
                                        f"(group/block size of schemes[{i}] {entry.label}), got {p}")


def step_model(scenario: Scenario) -> StepModelConfig:
    """The model a model-step scenario's ``[model]`` table names (a preset, or the config.json at
    ``model.config``), checked against its ``context`` and ``blocks`` (:func:`qbench.step.spec.check`).
    Torch-free.

    Raises:
        ScenarioError: the scenario has no ``[model]`` table, or the key ``model.<key>`` that
            :func:`qbench.step.spec.check` refuses and why.
    """
    if scenario.model is None:
        raise ScenarioError(scenario.source, "model", "not a model-step scenario (it has no [model] table)")
    try:
        return check_model(scenario.model, scenario.source)
    except ConfigError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def weight_path(scenario: Scenario) -> Path:
    """``weight.path`` (a safetensors file or a checkpoint folder), relative to the scenario file's folder."""
    path = Path(scenario.weight.path or "")
    return path if path.is_absolute() else Path(scenario.source).parent / path


def weight_file(scenario: Scenario) -> Path:
    """The safetensors file holding ``weight.tensor``: ``weight.path`` itself (``safetensors``), or the
    shard of the checkpoint folder that its ``model.safetensors.index.json`` names, else its
    ``model.safetensors`` (``hf-checkpoint``). Torch-free: reads the index only.

    Raises:
        ScenarioError: not a folder, no index and no single file, an unreadable index, a tensor
            the index does not list, or a shard name that leaves the folder (file, key, value).
    """
    path = weight_path(scenario)
    if scenario.weight.source != "hf-checkpoint":
        return path
    source, name = scenario.source, scenario.weight.tensor
    if not path.is_dir():
        raise ScenarioError(source, "weight.path", f"must be a Hugging Face checkpoint folder (relative to the scenario's "
                                                   f"folder) holding {HF_INDEX} or {HF_SINGLE}, got {_show(str(path))}")
    index = path / HF_INDEX
    if not index.is_file():
        if (path / HF_SINGLE).is_file():
            return path / HF_SINGLE
        raise ScenarioError(source, "weight.path", f"has neither {HF_INDEX} nor {HF_SINGLE}, got {_show(str(path))}")
    try:
        if index.stat().st_size > 100 << 20:
            raise ValueError("larger than 100 MiB")
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (OSError, ValueError, AttributeError, RecursionError) as exc:
        raise ScenarioError(source, "weight.path", f"{HF_INDEX} is not a readable JSON index "
                                                   f"({_one_line(str(exc)) or type(exc).__name__}), got {_show(str(index))}") from None
    if not isinstance(weight_map, dict):
        raise ScenarioError(source, "weight.path", f"{HF_INDEX} has no 'weight_map' table, got {_show(str(index))}")
    shard = weight_map.get(name)
    if shard is None:
        names = sorted(str(key) for key in weight_map)
        have = (", ".join(names[:8]) + (", ..." if len(names) > 8 else "")) if names else "no tensors"
        raise ScenarioError(source, "weight.tensor", f"not in {HF_INDEX} of {path.name} (it has {have}), got {_show(name)}")
    if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
        raise ScenarioError(source, "weight.tensor", f"{HF_INDEX} maps it to a shard that is not a file name in the "
                                                     f"folder ({_show(shard)}), got {_show(name)}")
    return path / shard


def weight_source(scenario: Scenario) -> str:
    """Where the weight of every row comes from, one line (the rows' ``weight_source``): ``seeded
    Gaussian N(0, 1/K) (synthetic, seed 0)``, ``Student-t (df=3) ...``, ``outlier channels ...``,
    ``safetensors <file>:<tensor>``, ``HF checkpoint <folder>:<tensor>``. Torch-free."""
    w, seed = scenario.weight, scenario.seed
    if w.source == "random":
        return f"seeded Gaussian N(0, 1/K) (synthetic, seed {seed})"
    if w.source == "student-t":
        return f"Student-t (df={w.df:g}) scaled to variance 1/K (synthetic, seed {seed})"
    if w.source == "outlier-channels":
        return (f"outlier channels: {w.outlier_channels} of the K input channels x {w.outlier_scale:g} on N(0, 1/K) "
                f"(synthetic, seed {seed})")
    if w.source == "hf-checkpoint":
        return f"HF checkpoint {w.path}:{w.tensor}"
    return f"safetensors {w.path}:{w.tensor}"


def weight_is_synthetic(scenario: Scenario) -> bool:
    """Whether qbench drew the weight itself (:data:`SYNTHETIC_WEIGHTS`): its errors are not a trained layer's."""
    return scenario.weight.source in SYNTHETIC_WEIGHTS


def _check_weight(scenario: Scenario) -> None:
    """``[weight]``: the keys its ``source`` takes are all given, no other is; a file source holds the
    tensor (:func:`_check_safetensors`); ``outlier_channels`` is at most K."""
    weight, source = scenario.weight, scenario.source
    wanted = WEIGHT_KEYS[weight.source]
    for key in ("path", "tensor", "df", "outlier_channels", "outlier_scale"):
        value = getattr(weight, key)
        if key in wanted and value in (None, ""):
            raise ScenarioError(source, f"weight.{key}", f"missing: source = {weight.source!r} needs "
                                                         f"{'both ' if len(wanted) == 2 else ''}"
                                                         f"{' and '.join(repr(k) for k in wanted)}, got "
                                                         f"{_show(weight.model_dump(exclude_none=True))}")
        if key not in wanted and value is not None:
            users = [s for s, keys in WEIGHT_KEYS.items() if key in keys]
            raise ScenarioError(source, f"weight.{key}", f"only used with source = {' or '.join(repr(u) for u in users)}, "
                                                         f"got source = {weight.source!r}")
    if weight.source == "outlier-channels" and weight.outlier_channels > scenario.layer.in_features:
        raise ScenarioError(source, "weight.outlier_channels", f"must be at most in_features = "
                                                               f"{scenario.layer.in_features}, got {weight.outlier_channels}")
    if weight.source in ("safetensors", "hf-checkpoint"):
        _check_safetensors(scenario)


def _check_safetensors(scenario: Scenario) -> None:
    """The weight file (:func:`weight_file`) exists and holds ``weight.tensor`` as a float tensor
    of shape ``[N, K]``.

    Reads only the file's header (8-byte little-endian length, then JSON; safetensors format
    spec), never the tensor data.
    """
    source, name = scenario.source, scenario.weight.tensor
    n, k = scenario.layer.out_features, scenario.layer.in_features
    import importlib.util

    if importlib.util.find_spec("safetensors") is None:  # the workers load the weight with it
        raise ScenarioError(source, "weight.source", f"{scenario.weight.source!r} needs the safetensors package "
                                                     "(pip install safetensors, or qbench's extra: pip install -e '.[safetensors]'), "
                                                     f"got source = {scenario.weight.source!r}")
    path = weight_file(scenario)
    if not path.is_file():
        raise ScenarioError(source, "weight.path", f"no such file (relative to the scenario's folder), "
                                                   f"got {_show(str(path))}")
    try:
        header = _safetensors_header(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(source, "weight.path", f"not a readable safetensors file ({_one_line(str(exc))}), "
                                                   f"got {_show(str(path))}") from None
    entry = header.get(name)
    if not isinstance(entry, dict) or name == "__metadata__":
        names = sorted(key for key in header if key != "__metadata__")
        have = (", ".join(names[:8]) + (", ..." if len(names) > 8 else "")) if names else "no tensors"
        raise ScenarioError(source, "weight.tensor", f"not in {path.name} (it has {have}), got {_show(name)}")
    shape, dtype = entry.get("shape"), entry.get("dtype")
    if shape != [n, k]:
        raise ScenarioError(source, "weight.tensor", f"shape must be [out_features, in_features] = [{n}, {k}], "
                                                     f"got {name!r} of shape {_show(shape)}")
    if dtype not in _SAFETENSORS_FLOAT:
        raise ScenarioError(source, "weight.tensor", f"dtype must be one of {', '.join(_SAFETENSORS_FLOAT)}, "
                                                     f"got {name!r} of dtype {_show(dtype)}")


def _safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file: ``{name: {"dtype", "shape", "data_offsets"}}``.

    Raises:
        ValueError: the file is too short or its header is not a JSON object (json's
            ``JSONDecodeError`` and ``UnicodeDecodeError`` are ValueErrors).
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("shorter than the 8-byte header length")
        length = int.from_bytes(head, "little")
        if length > min(size - 8, 100 << 20):
            raise ValueError(f"header length {length} does not fit the file ({size} bytes)")
        header = json.loads(f.read(length).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    return header


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _show(value: Any) -> str:
    """``repr(value)`` on one line, cut to ``_VALUE_CHARS`` characters."""
    if isinstance(value, tuple):  # lists become tuples before validation; show what the file says
        value = list(value)
    text = repr(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


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
    if kind == "extra_forbidden":
        allowed = _allowed_keys(root, loc)
        hint = ""
        if len(loc) == 2 and isinstance(loc[-1], str) and loc[-1] in root.model_fields and not prefix:
            hint = f"; '{loc[-1]}' is a top-level key: {_under_table(loc[0], loc[-1])}"
        return ScenarioError(source, key, f"unknown key{what}" + (f"; allowed: {', '.join(allowed)}" if allowed else "") + hint)
    if kind == "missing":
        return ScenarioError(source, key, f"missing{what}: this key is required")
    msg = _one_line(msg.removeprefix("Value error, ")) or "invalid"
    msg = msg[0].lower() + msg[1:]
    for pattern, wording in _REWORDS:
        msg = pattern.sub(wording, msg)
    return ScenarioError(source, key.rstrip(".") or "scenario", f"{msg}{what}, got {_show(err.get('input'))}")


def _allowed_keys(root: type[BaseModel], loc: list) -> list[str]:
    model: Any = root
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return []
        model = field.annotation
    return [k for k in model.model_fields if k != "source"]
