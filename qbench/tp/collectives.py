"""The collective each split needs: what it moves (pure formulas) and how it is called.

Bytes follow nccl-tests' ``doc/PERFORMANCE.md`` (NVIDIA/nccl-tests), which defines, for an
operation on ``p`` ranks over a buffer of ``S`` bytes (the full, gathered or reduced, tensor):

* algorithm bandwidth ``algbw = S / t``;
* bus bandwidth ``busbw = algbw x factor``, the rate each rank's link must sustain with an
  optimal (ring) algorithm: ``factor = (p - 1) / p`` for all-gather, ``2 (p - 1) / p`` for
  all-reduce (a reduce-scatter then an all-gather, each moving ``(p - 1) / p`` of ``S``).

So the bytes each rank sends (and receives) are ``(p - 1) / p x S`` for an all-gather and
``2 (p - 1) / p x S`` for an all-reduce; :func:`collective_bytes` returns both ``S`` and these
bus bytes, and ``bus bytes / time`` is nccl-tests' busbw, comparable with the link's peak.

* column split: all-gather of each rank's ``[M, N/p]`` output; ``S = M N x itemsize(output)``.
* row split: all-reduce (sum) of ``[M, N]`` partial sums; ``S = M N x itemsize(reduce dtype)``:
  the output dtype (bf16 for every torchao scheme), as Megatron-LM and vLLM all-reduce their
  activations, or float32 partial sums when the scenario asks (``tp.reduce_dtype``: twice the
  bytes, no rounding of partial sums to 8 mantissa bits).
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch


def collective_name(split: Optional[str], tp_size: int) -> str:
    """``all_gather`` (column), ``all_reduce`` (row), ``none`` (tp_size 1 or no split)."""
    if tp_size == 1 or split is None or split == "none":
        return "none"
    if split == "column":
        return "all_gather"
    if split == "row":
        return "all_reduce"
    raise ValueError(f"collective_name: split must be 'column' or 'row', got {split!r}")


def collective_bytes(split: Optional[str], tp_size: int, m: int, n: int, itemsize: int) -> dict:
    """What the collective of one layer call moves.

    Args:
        split: ``column``, ``row`` or ``none``.
        tp_size: ranks p >= 1.
        m, n: rows M and out_features N of the full output.
        itemsize: bytes per element of what is moved (output dtype for all-gather, reduce dtype
            for all-reduce).

    Returns:
        ``{"op", "data_bytes", "bus_bytes"}``: ``data_bytes`` = S = M N itemsize (0 for
        ``none``); ``bus_bytes`` = ``(p-1)/p S`` (all-gather) or ``2(p-1)/p S`` (all-reduce), an
        int (exact: S is a multiple of p wherever N divides by p); both 0 when p = 1.

    Raises:
        ValueError: p < 1, a negative size, or an unknown split.
    """
    if tp_size < 1 or m < 0 or n < 0 or itemsize < 0:
        raise ValueError(f"collective_bytes: need tp_size >= 1 and sizes >= 0, got tp_size={tp_size}, m={m}, n={n}, "
                         f"itemsize={itemsize}")
    op = collective_name(split, tp_size)
    if op == "none":
        return {"op": op, "data_bytes": 0, "bus_bytes": 0}
    size = m * n * itemsize
    factor = 1 if op == "all_gather" else 2
    return {"op": op, "data_bytes": size, "bus_bytes": factor * (tp_size - 1) * size // tp_size}


def bus_gbps(bus_bytes: int, time_us: Optional[float]) -> Optional[float]:
    """nccl-tests' bus bandwidth, GB/s (1e9 bytes/s): ``bus_bytes / time``; None without a time."""
    if not time_us or bus_bytes <= 0:
        return None
    return bus_bytes / (time_us * 1e-6) / 1e9


def all_gather_columns(y_local: torch.Tensor, tp_size: int, group=None) -> torch.Tensor:
    """Assemble ``Y [M, N]`` from every rank's ``[M, N/p]`` column block (rank order).

    One ``all_gather_single`` (``all_gather_into_tensor`` before torch 2.13) into a ``[p M, N/p]``
    buffer, then ``[p, M, N/p] -> [M, p, N/p] -> [M, N]`` (a view when M = 1, one copy otherwise;
    gloo takes only the concatenated form).
    """
    import torch.distributed as dist

    m, width = y_local.shape
    out = torch.empty((tp_size * m, width), dtype=y_local.dtype, device=y_local.device)
    gather = getattr(dist, "all_gather_single", None)
    if gather is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_gather_into_tensor(out, y_local.contiguous(), group=group)
    else:
        gather(out, y_local.contiguous(), group=group)
    return out.view(tp_size, m, width).transpose(0, 1).reshape(m, tp_size * width)


def all_reduce_rows(y_partial: torch.Tensor, reduce_dtype: torch.dtype, bias: Optional[torch.Tensor],
                    group=None) -> torch.Tensor:
    """Sum every rank's partial ``Y [M, N]`` in ``reduce_dtype``, add ``bias`` once, return ``Y``
    in the partial's dtype (in place when ``reduce_dtype`` is that dtype)."""
    import torch.distributed as dist

    out_dtype = y_partial.dtype
    y = y_partial if y_partial.dtype == reduce_dtype else y_partial.to(reduce_dtype)
    dist.all_reduce(y, group=group)
    if bias is not None:
        y = y + bias.to(reduce_dtype)
    return y if y.dtype == out_dtype else y.to(out_dtype)
