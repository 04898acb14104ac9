"""How a scheme's layout shards for tensor parallelism, declared on the scheme (torch-free).

Megatron-LM (Shoeybi et al., 2019, sec. 3) splits ``W [N, K]`` by output features (``column``:
each rank holds ``N/p`` rows of ``W``) or by input features (``row``: ``K/p`` columns). Every rank
builds its shard with the scheme's own ``build()`` from the FP32 slice, as a real tensor-parallel
checkpoint quantizes each shard. Whether that equals slicing the unsharded quantized weight
depends on where the scheme's scales live:

* per-row scales (one per output feature, over all of K: int8-weight-only, fp8 per-row,
  int8-bnb's SCB) split along N trivially: a column shard's scales are the matching slice of the
  unsharded ones, bit for bit. Along K they do not: a row shard's scale is the absmax of its K/p
  columns only, so the shard is quantized differently (usually a little more finely) than the
  slice of the unsharded weight.
* per-group scales (int4: one scale and zero point per ``group_size`` consecutive K elements of a
  row) split along N trivially, and along K only at group boundaries: with ``K/p`` a multiple of
  ``group_size`` every group lies inside one rank and the shard equals the slice (the scenario
  loader refuses a row split that would cut a group).
* per-tensor scales (fp8 ``granularity = "per-tensor"``) never survive a split: each shard takes
  the absmax of its own slice.
* dynamic activation scales (fp8-dynamic, w8a8-dynamic: one per row of ``X``, over K) are the
  same in a column split (every rank sees all of ``X``) and per-shard in a row split.
* a kernel's packed layout can add its own constraint: torchao's tinygemm int4 layout
  (``Int4TilePackedTo4dTensor.from_hp``) pads K to a multiple of 1024 and N to a multiple of 8,
  so a 512-wide K shard would store and read twice its weight; such a shard is skipped.

The slicing itself and the verdict for one shard are :mod:`qbench.tp.shard`. Sources of the
rules: torchao 0.18 ``quantization/quant_api.py`` and the tensor subclasses it builds;
bitsandbytes 0.50 ``functional.quantize_4bit`` / ``int8_vectorwise_quant``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from qbench.schemes.options import SchemeOptions


def _one(options) -> int:
    return 1


def _always(value: bool) -> Callable[[SchemeOptions], bool]:
    return lambda options: value


@dataclass(frozen=True)
class ShardRule:
    """How one scheme's layout shards along one dimension.

    Attributes:
        shardable: False when the layout cannot be split this way at all.
        note: one line: where the scales live and what splitting does to them.
        multiple: ``multiple(options) -> int``: the shard's length along the split dimension
            (N/p for column, K/p for row) must be a multiple of this (group size, tile size).
        why_multiple: what ``multiple`` comes from, for the skip reason.
        same_as_slice: ``same_as_slice(options) -> bool``: the shard's quantized weight equals
            the matching slice of the unsharded quantized weight (scales included).
    """

    shardable: bool
    note: str
    multiple: Callable[[SchemeOptions], int] = _one
    why_multiple: str = ""
    same_as_slice: Callable[[SchemeOptions], bool] = _always(True)


@dataclass(frozen=True)
class Sharding:
    """A scheme's two rules: ``column`` (split N) and ``row`` (split K)."""

    column: ShardRule
    row: ShardRule

    def rule(self, split: str) -> ShardRule:
        """The rule of ``split`` (``"column"`` or ``"row"``).

        Raises:
            ValueError: another split (the value in the message)."""
        if split not in ("column", "row"):
            raise ValueError(f"split must be 'column' or 'row', got {split!r}")
        return getattr(self, split)


def group_size(options) -> int:
    return options.group_size


def fp8_dynamic_column(options) -> bool:
    """A column shard of fp8-dynamic equals the slice with per-row weight scales only."""
    return getattr(options, "granularity", "per-row") == "per-row"


def no_double_quant(options) -> bool:
    """bitsandbytes 4-bit: without double quantization a shard's absmax values are the slice's."""
    return not options.double_quant


#: The rules several schemes share.
UNQUANTIZED = Sharding(*[ShardRule(True, "no scales: the shard is the slice, cast element by element")] * 2)
PER_ROW_COLUMN = ShardRule(True, "per-row scales over K: a column shard's scales are the slice of the unsharded ones")
PER_ROW_ROW = ShardRule(True, "per-row scales over K: each row shard takes the absmax of its own K/p columns",
                        same_as_slice=_always(False))
PER_ROW = Sharding(PER_ROW_COLUMN, PER_ROW_ROW)
GROUP_COLUMN = ShardRule(True, "per-group scales along K: a column shard keeps whole groups")
GROUP_ROW = ShardRule(True, "per-group scales along K: K/p is a multiple of group_size, so no group straddles ranks",
                      multiple=group_size, why_multiple="group_size")
PER_GROUP = Sharding(GROUP_COLUMN, GROUP_ROW)
DYNAMIC_ROW = ShardRule(True, "weight and per-token activation scales are taken over each rank's K/p columns",
                        same_as_slice=_always(False))
