"""The layer job's ``[weight]`` table: where the FP32 weight ``[N, K]`` comes from, and its checks.

Torch-free: a file source is checked through the model library's checkpoint reader
(:mod:`qbench.model.checkpoint`: the index, and the header by ``safetensors.safe_open``), never the
tensor data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from qbench.model.checkpoint import FLOAT_DTYPES, INDEX, SINGLE, ConfigError, read_headers, tensor_file
from qbench.tables import Frozen, ScenarioError, one_line as _one_line, show as _show

#: safetensors dtypes a weight may be stored in (header names, safetensors format spec).
_SAFETENSORS_FLOAT = tuple(FLOAT_DTYPES)

#: ``weight.source`` values whose weight qbench draws itself (errors on them are not a trained layer's).
SYNTHETIC_WEIGHTS = ("random", "student-t", "outlier-channels")
#: ``weight.source`` -> the keys of ``[weight]`` it takes (all of them required).
WEIGHT_KEYS = {"random": (), "student-t": ("df",), "outlier-channels": ("outlier_channels", "outlier_scale"),
               "safetensors": ("path", "tensor"), "hf-checkpoint": ("path", "tensor")}


class WeightSpec(Frozen):
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


def weight_path(scenario: Any) -> Path:
    """``weight.path`` (a safetensors file or a checkpoint folder), relative to the scenario file's folder."""
    path = Path(scenario.weight.path or "")
    return path if path.is_absolute() else Path(scenario.source).parent / path


def weight_file(scenario: Any) -> Path:
    """The safetensors file holding ``weight.tensor``: ``weight.path`` itself (``safetensors``), or the
    file of the checkpoint folder that the worker reads it from (``hf-checkpoint``:
    :func:`qbench.model.checkpoint.tensor_file`, ``model.safetensors`` first, else the shard its index
    names, as transformers loads them). Torch-free: reads the index only.

    Raises:
        ScenarioError: not a folder, no index and no single file, an unreadable index, a tensor
            the index does not list, or a shard that is not a file of the folder (file, key, value).
    """
    path = weight_path(scenario)
    if scenario.weight.source != "hf-checkpoint":
        return path
    source, name = scenario.source, scenario.weight.tensor
    if not path.is_dir():
        raise ScenarioError(source, "weight.path", f"must be a Hugging Face checkpoint folder (relative to the scenario's "
                                                   f"folder) holding {INDEX} or {SINGLE}, got {_show(str(path))}")
    try:
        return tensor_file(path, name, "weight.path")
    except ConfigError as exc:
        key = "weight.tensor" if exc.message.startswith("tensor ") else "weight.path"
        raise ScenarioError(source, key, _one_line(exc.message)) from None  # it names the folder or tensor


def weight_source(scenario: Any) -> str:
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


def weight_is_synthetic(scenario: Any) -> bool:
    """Whether qbench drew the weight itself (:data:`SYNTHETIC_WEIGHTS`): its errors are not a trained layer's."""
    return scenario.weight.source in SYNTHETIC_WEIGHTS


def check(scenario: Any) -> None:
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


def _check_safetensors(scenario: Any) -> None:
    """The weight file (:func:`weight_file`) exists and holds ``weight.tensor`` as a float tensor
    of shape ``[N, K]``: its header as :func:`qbench.model.checkpoint.read_headers` reads it
    (``safe_open``, which also refuses a truncated file), never the tensor data.
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
        header = dict(read_headers(path, "weight.path"))
    except ConfigError as exc:
        raise ScenarioError(source, "weight.path", _one_line(exc.message)) from None  # it names the file
    entry = header.get(name)
    if entry is None:
        names = sorted(header)
        have = (", ".join(names[:8]) + (", ..." if len(names) > 8 else "")) if names else "no tensors"
        raise ScenarioError(source, "weight.tensor", f"not in {path.name} (it has {have}), got {_show(name)}")
    shape, dtype = list(entry.shape), entry.dtype
    if shape != [n, k]:
        raise ScenarioError(source, "weight.tensor", f"shape must be [out_features, in_features] = [{n}, {k}], "
                                                     f"got {name!r} of shape {_show(shape)}")
    if dtype not in _SAFETENSORS_FLOAT:
        raise ScenarioError(source, "weight.tensor", f"dtype must be one of {', '.join(_SAFETENSORS_FLOAT)}, "
                                                     f"got {name!r} of dtype {_show(dtype)}")
