"""Tensor parallelism's scenario keys: a layer scenario (:mod:`qbench.layer.tables`) plus ``[tp]``,
and its checks. Torch-free.

::

    [tp]
    tp_size = [2, 4]              # ranks, each a power of two <= 8
    split = ["column", "row"]     # shard N (all-gather) and/or K (all-reduce)
    reduce_dtype = "output"       # what the row split all-reduces: the output dtype or float32
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from qbench.layer import tables as layer
from qbench.tables import Frozen, ScenarioError

#: Largest tensor-parallel size a scenario may ask for (one host of 8 GPUs).
TP_MAX = 8


class TpSpec(Frozen):
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


class TpTables(layer.LayerTables):
    """A tensor-parallel scenario's own keys: the layer job's and ``[tp]``."""

    tp: TpSpec


def check(scenario: Any) -> None:
    """The layer job's rules (:func:`qbench.layer.tables.check`), then every shard a whole layer
    (:func:`_check_tp`).

    Raises:
        ScenarioError: the key at fault, its value and why."""
    layer.check(scenario)
    _check_tp(scenario)


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


def describe(scenario: Any) -> str:
    """The ``qbench check`` summary: the layer's, then ``tp_size [2, 4] split ['column', 'row']``."""
    return f"{layer.describe(scenario)}, tp_size {list(scenario.tp.tp_size)} split {list(scenario.tp.split)}"
