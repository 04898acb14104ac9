"""The layer job's ``[weight]`` table: where the FP32 weight ``[N, K]`` comes from, and its checks.

Torch-free: a file source is checked by reading the safetensors header (and a checkpoint's
index), never the tensor data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from qbench.tables import Frozen, ScenarioError, one_line as _one_line, show as _show

#: safetensors dtypes a weight may be stored in (header names, safetensors format spec).
_SAFETENSORS_FLOAT = ("F64", "F32", "F16", "BF16")

#: ``weight.source`` values whose weight qbench draws itself (errors on them are not a trained layer's).
SYNTHETIC_WEIGHTS = ("random", "student-t", "outlier-channels")
#: ``weight.source`` -> the keys of ``[weight]`` it takes (all of them required).
WEIGHT_KEYS = {"random": (), "student-t": ("df",), "outlier-channels": ("outlier_channels", "outlier_scale"),
               "safetensors": ("path", "tensor"), "hf-checkpoint": ("path", "tensor")}
#: The files of a Hugging Face checkpoint folder qbench reads (sharded, or one file).
HF_INDEX, HF_SINGLE = "model.safetensors.index.json", "model.safetensors"


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
