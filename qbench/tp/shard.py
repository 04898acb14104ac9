"""Which slice of the FP32 weight a rank holds, and whether a scheme's layout can be sharded so.

Tensor parallelism after Megatron-LM (Shoeybi et al., 2019, sec. 3): with ``W [N, K]`` and
``Y = X W^T``,

* ``column`` split: rank ``r`` of ``p`` holds rows ``r N/p .. (r+1) N/p`` of ``W`` (output
  features), sees all of ``X [M, K]`` and computes ``Y[:, r N/p .. (r+1) N/p]``; an all-gather
  assembles ``Y``.
* ``row`` split: rank ``r`` holds columns ``r K/p .. (r+1) K/p`` of ``W`` (input features),
  sees the matching columns of ``X`` and computes a partial ``Y [M, N]``; an all-reduce (sum)
  gives ``Y``. A bias is added once, after the reduction (Megatron's ``RowParallelLinear``).

Every rank builds its shard with the scheme's own ``build()`` from the FP32 slice, exactly as a
real tensor-parallel checkpoint quantizes each shard. Whether that equals slicing the unsharded
quantized weight depends on where the scheme's scales live:

* per-row scales (one per output feature, over all of K: int8-weight-only, fp8 per-row,
  int8-bnb's SCB) split along N trivially: a column shard's scales are the matching slice of the
  unsharded ones, bit for bit. Along K they do not: a row shard's scale is the absmax of its K/p
  columns only, so the shard is quantized differently (usually a little more finely) than the
  slice of the unsharded weight.
* per-group scales (int4: one scale and zero point per ``group_size`` consecutive K elements of a
  row) split along N trivially, and along K only at group boundaries: with ``K/p`` a multiple of
  ``group_size`` every group lies inside one rank and the shard equals the slice (the scenario
  loader refuses a row split that would cut a group, :func:`qbench.scenario._check_tp`).
* per-tensor scales (fp8 ``granularity = "per-tensor"``) never survive a split: each shard takes
  the absmax of its own slice.
* dynamic activation scales (fp8-dynamic, w8a8-dynamic: one per row of ``X``, over K) are the
  same in a column split (every rank sees all of ``X``) and per-shard in a row split.
* a kernel's packed layout can add its own constraint: torchao's tinygemm int4 layout
  (``Int4TilePackedTo4dTensor.from_hp``) pads K to a multiple of 1024 and N to a multiple of 8,
  so a 512-wide K shard would store and read twice its weight; such a shard is skipped.

:data:`RULES` holds one entry per registered scheme. It lives here, not in the ``Scheme``
dataclass, so that tensor parallelism is one module the single-GPU code never imports; a scheme
without an entry is skipped with a reason naming this table. Everything here is pure: no process
group, no device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

import torch

from qbench.schemes.base import SchemeOptions

Split = Literal["column", "row"]


def shard_range(length: int, tp_size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s equal share of ``length`` elements.

    Raises:
        ValueError: ``tp_size < 1``, ``rank`` outside ``0 .. tp_size-1``, or ``length`` not a
            multiple of ``tp_size`` (values in the message).
    """
    if tp_size < 1 or not 0 <= rank < tp_size:
        raise ValueError(f"shard_range: need 0 <= rank < tp_size, got rank={rank}, tp_size={tp_size}")
    if length % tp_size:
        raise ValueError(f"shard_range: length {length} does not divide by tp_size {tp_size}")
    size = length // tp_size
    return rank * size, (rank + 1) * size


def shard_weight(weight: torch.Tensor, bias: Optional[torch.Tensor], split: Split, tp_size: int,
                 rank: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Rank ``rank``'s contiguous copy of the FP32 ``weight [N, K]`` and its bias.

    ``column``: ``weight[n0:n1, :]`` and ``bias[n0:n1]``. ``row``: ``weight[:, k0:k1]`` and no
    bias (the caller adds the full bias once, after the all-reduce).

    Raises:
        ValueError: a bad split, rank, or a dimension that does not divide by ``tp_size``.
    """
    n, k = weight.shape
    if split == "column":
        n0, n1 = shard_range(n, tp_size, rank)
        return weight[n0:n1].contiguous(), (None if bias is None else bias[n0:n1].contiguous())
    if split == "row":
        k0, k1 = shard_range(k, tp_size, rank)
        return weight[:, k0:k1].contiguous(), None
    raise ValueError(f"shard_weight: split must be 'column' or 'row', got {split!r}")


def shard_activations(x: torch.Tensor, split: Split, tp_size: int, rank: int) -> torch.Tensor:
    """What rank ``rank`` multiplies: all of ``x [M, K]`` (column) or ``x[:, k0:k1]`` (row),
    contiguous."""
    if split == "column":
        return x
    k0, k1 = shard_range(x.shape[1], tp_size, rank)
    return x[:, k0:k1].contiguous()


def shard_shape(k: int, n: int, split: Split, tp_size: int) -> tuple[int, int]:
    """``(K, N)`` of one rank's shard."""
    return (k, n // tp_size) if split == "column" else (k // tp_size, n)


@dataclass(frozen=True)
class ShardRule:
    """How one scheme's layout shards along one dimension.

    Attributes:
        shardable: False when the layout cannot be split this way at all.
        multiple: ``multiple(options) -> int``: the shard's length along the split dimension
            (N/p for column, K/p for row) must be a multiple of this (group size, tile size).
        why_multiple: what ``multiple`` comes from, for the skip reason.
        same_as_slice: ``same_as_slice(options) -> bool``: the shard's quantized weight equals
            the matching slice of the unsharded quantized weight (scales included).
        note: one line: where the scales live and what splitting does to them.
    """

    shardable: bool
    note: str
    multiple: Callable[[SchemeOptions], int] = lambda options: 1
    why_multiple: str = ""
    same_as_slice: Callable[[SchemeOptions], bool] = lambda options: True


def _always(value: bool) -> Callable[[SchemeOptions], bool]:
    return lambda options: value


_UNQUANTIZED = ShardRule(True, "no scales: the shard is the slice, cast element by element")
_PER_ROW_COLUMN = ShardRule(True, "per-row scales over K: a column shard's scales are the slice of the unsharded ones")
_PER_ROW_ROW = ShardRule(True, "per-row scales over K: each row shard takes the absmax of its own K/p columns",
                         same_as_slice=_always(False))
_GROUP_ROW = ShardRule(True, "per-group scales along K: K/p is a multiple of group_size, so no group straddles ranks",
                       multiple=lambda options: options.group_size, why_multiple="group_size")


_GEMLITE_PER_ROW_ROW = ShardRule(True, "per-row scales over K: each row shard takes the absmax of its own K/p columns",
                                 multiple=lambda options: 32, why_multiple="gemlite's in_features multiple of 32",
                                 same_as_slice=_always(False))


def _fp8_dynamic_column(options) -> bool:
    return getattr(options, "granularity", "per-row") == "per-row"


#: scheme name -> {split: rule}. Sources: torchao 0.18 ``quantization/quant_api.py`` and the
#: tensor subclasses it builds; bitsandbytes 0.50 ``functional.quantize_4bit`` /
#: ``int8_vectorwise_quant``.
RULES: dict[str, dict[str, ShardRule]] = {
    **{name: {"column": _UNQUANTIZED, "row": _UNQUANTIZED} for name in ("fp32", "tf32", "fp16", "bf16")},
    "fp8-weight-only": {"column": _PER_ROW_COLUMN, "row": _PER_ROW_ROW},
    "fp8-dynamic": {
        "column": ShardRule(True, "per-row weight scales split with N; per-token activation scales are over all of K on "
                                  "every rank (per-tensor: each shard takes its own weight absmax)",
                            same_as_slice=_fp8_dynamic_column),
        "row": ShardRule(True, "weight and per-token activation scales are taken over each rank's K/p columns",
                         same_as_slice=_always(False)),
    },
    "int8-weight-only": {"column": _PER_ROW_COLUMN, "row": _PER_ROW_ROW},
    "w8a8-dynamic": {
        "column": ShardRule(True, "per-row weight scales split with N; per-token activation scales over all of K"),
        "row": ShardRule(True, "weight and per-token activation scales are taken over each rank's K/p columns",
                         same_as_slice=_always(False)),
    },
    "int4-weight-only": {
        "column": ShardRule(True, "per-group scales along K: a column shard keeps whole groups",
                            multiple=lambda options: 8, why_multiple="the tinygemm N tile (torchao pads N to a multiple of 8)"),
        "row": ShardRule(True, "per-group scales along K; the tinygemm layout pads K to a multiple of 1024",
                         multiple=lambda options: max(1024, options.group_size),
                         why_multiple="1024, the tinygemm K padding (torchao Int4TilePackedTo4dTensor.from_hp pads K to a "
                                      "multiple of 1024: a smaller shard would store and read padding)"),
    },
    "int4-intx": {"column": ShardRule(True, "per-group scales along K: a column shard keeps whole groups"), "row": _GROUP_ROW},
    **{name: {"column": ShardRule(True, "per-group scales along K: a column shard keeps whole groups"), "row": _GROUP_ROW}
       for name in ("int4-plain", "int4-preshuffled", "int4-weight-only-gemlite")},
    "fp8-int4": {
        "column": ShardRule(True, "per-group int4 scales along K and (preshuffled) per-row FP8 scales split with N; "
                                  "per-token activation scales are over all of K on every rank"),
        "row": ShardRule(True, "groups of 128 along K stay whole; preshuffled: the per-row FP8 scale of the weight is "
                               "taken over each rank's K/p columns",
                         multiple=lambda options: 128, why_multiple="torchao's fixed group size 128",
                         same_as_slice=lambda options: options.int4_packing_format == "plain"),
    },
    **{name: {"column": _PER_ROW_COLUMN, "row": _GEMLITE_PER_ROW_ROW}
       for name in ("int8-weight-only-gemlite", "fp8-weight-only-gemlite")},
    "fp8-dynamic-gemlite": {
        "column": ShardRule(True, "per-row weight scales split with N; per-token activation scales are over all of K on "
                                  "every rank"),
        "row": ShardRule(True, "weight and per-token activation scales are taken over each rank's K/p columns",
                         multiple=lambda options: 32, why_multiple="gemlite's in_features multiple of 32",
                         same_as_slice=_always(False)),
    },
    "int8-bnb": {
        "column": ShardRule(True, "per-row absmax (SCB) split with N; outlier columns of X are seen by every rank"),
        "row": ShardRule(True, "per-row absmax (SCB) over each rank's K/p columns; outlier columns are partitioned",
                         same_as_slice=_always(False)),
    },
    **{name: {
        "column": ShardRule(True, "absmax per block of the row-major weight: N/p whole rows hold whole blocks; "
                                  "double-quantization statistics are recomputed per shard",
                            same_as_slice=lambda options: not options.double_quant),
        "row": ShardRule(True, "absmax per block along each row: K/p must hold whole blocks; double-quantization "
                               "statistics are recomputed per shard",
                         multiple=lambda options: options.blocksize, why_multiple="blocksize",
                         same_as_slice=lambda options: not options.double_quant),
    } for name in ("nf4-bnb", "fp4-bnb")},
}


@dataclass(frozen=True)
class ShardPlan:
    """The verdict for one (scheme, options, split, tp_size): ``reason`` is None when it runs.

    Attributes:
        k, n: the shard's K and N.
        same_as_slice: see :class:`ShardRule`.
        note: the rule's note.
        reason: one line, why the shard is skipped; None when it can run.
    """

    k: int
    n: int
    same_as_slice: bool
    note: str
    reason: Optional[str]


def plan(scheme_name: str, options: SchemeOptions, split: Split, tp_size: int, k: int, n: int) -> ShardPlan:
    """Can ``scheme_name`` with ``options`` be sharded ``tp_size`` ways along ``split`` for a
    ``[N, K]`` layer? Pure; never raises for a scheme without a rule (that is a skip reason)."""
    sk, sn = shard_shape(k, n, split, tp_size)
    rule = RULES.get(scheme_name, {}).get(split)
    if rule is None:
        return ShardPlan(sk, sn, False, "", f"no {split} sharding rule for scheme {scheme_name!r} "
                                            f"(add one to qbench.tp.shard.RULES)")
    if not rule.shardable:
        return ShardPlan(sk, sn, False, rule.note, f"{scheme_name} cannot be split along "
                                                   f"{'N' if split == 'column' else 'K'}: {rule.note}")
    if tp_size == 1:
        return ShardPlan(k, n, True, rule.note, None)
    length, dim = (sn, "N") if split == "column" else (sk, "K")
    multiple = rule.multiple(options)
    if length % multiple:
        return ShardPlan(sk, sn, False, rule.note, f"{split} shard {dim} = {length} is not a multiple of {multiple} "
                                                   f"({rule.why_multiple}) for {scheme_name}")
    return ShardPlan(sk, sn, bool(rule.same_as_slice(options)), rule.note, None)
