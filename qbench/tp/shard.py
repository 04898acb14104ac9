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
real tensor-parallel checkpoint quantizes each shard. Whether a scheme's layout can be split, and
whether the shard then equals the slice of the unsharded quantized weight, is the scheme's own
declaration (:attr:`qbench.schemes.scheme.Scheme.shard`, the rules and where the scales live:
:mod:`qbench.schemes.shard_rule`); :func:`plan` reads it. A scheme declared without one is skipped
with a reason saying so. Everything here is pure: no process group, no device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from qbench.schemes.scheme import Scheme
from qbench.schemes.options import SchemeOptions

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
class ShardPlan:
    """The verdict for one (scheme, options, split, tp_size): ``reason`` is None when it runs.

    Attributes:
        k, n: the shard's K and N.
        same_as_slice: see :class:`qbench.schemes.shard_rule.ShardRule`.
        note: the rule's note.
        reason: one line, why the shard is skipped; None when it can run.
    """

    k: int
    n: int
    same_as_slice: bool
    note: str
    reason: Optional[str]


def plan(scheme: Scheme, options: SchemeOptions, split: Split, tp_size: int, k: int, n: int) -> ShardPlan:
    """Can ``scheme`` with ``options`` be sharded ``tp_size`` ways along ``split`` for a ``[N, K]``
    layer, by its declared rule (:attr:`~qbench.schemes.scheme.Scheme.shard`)? Pure; never raises
    for a scheme declared without a rule (that is a skip reason)."""
    sk, sn = shard_shape(k, n, split, tp_size)
    if scheme.shard is None:
        return ShardPlan(sk, sn, False, "", f"scheme {scheme.name!r} declares no shard rule "
                                            f"(give its Scheme(...) a shard=Sharding(column=..., row=...))")
    rule = scheme.shard.rule(split)
    if not rule.shardable:
        return ShardPlan(sk, sn, False, rule.note, f"{scheme.name} cannot be split along "
                                                   f"{'N' if split == 'column' else 'K'}: {rule.note}")
    if tp_size == 1:
        return ShardPlan(k, n, True, rule.note, None)
    length, dim = (sn, "N") if split == "column" else (sk, "K")
    multiple = rule.multiple(options)
    if length % multiple:
        return ShardPlan(sk, sn, False, rule.note, f"{split} shard {dim} = {length} is not a multiple of {multiple} "
                                                   f"({rule.why_multiple}) for {scheme.name}")
    return ShardPlan(sk, sn, bool(rule.same_as_slice(options)), rule.note, None)
