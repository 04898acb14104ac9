"""Bytes one decode step moves and its HBM floor (pure functions, torch-free).

For a Llama-family model of B blocks at M sequences and a context of C cached positions, one step
reads every stored weight once (the seven linear layers of every block, the LM head, the RMSNorm
weights, and the M embedding rows it looks up), reads the whole KV cache (C + 1 positions per
sequence per block, the new one included: it is written first) and writes the new position's K and
V. The HBM floor is those bytes over the measured memory bandwidth: no step that reads them from
HBM can be faster (the layer job's ``hbm_floor_us``, one level up).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from qbench.model.config import StepModelConfig


def step_bytes(config: StepModelConfig, *, m: int, context: int, blocks: int,
               block_weight_bytes: Union[int, Sequence[int]], lm_head_bytes: int, act_itemsize: int,
               kv_itemsize: int, kv_scale_bytes: int = 0) -> dict:
    """Bytes read and written by one decode step, by part.

    Args:
        config: the model.
        m: sequences (one new token each).
        context: positions already cached.
        blocks: blocks of the model (all of them: an extrapolated step counts the whole model).
        block_weight_bytes: stored bytes of one block's seven linear layers (the ledger's count), or
            one such count per block (``blocks`` of them: a mixed recipe's blocks differ).
        lm_head_bytes: stored bytes of the LM head (0 without one).
        act_itemsize: bytes per element of the activations (embedding rows, norm weights).
        kv_itemsize: bytes per element of the KV cache.
        kv_scale_bytes: bytes of one block's KV-cache scales, read once per step (an fp8 cache's
            per-KV-head K and V scales; 0 for a float cache).

    Returns:
        ``{"weights", "lm_head", "embedding", "norms", "kv_read", "kv_write", "total"}`` in bytes,
        and ``"kv_scales"`` when ``kv_scale_bytes`` is given.

    Raises:
        ValueError: a per-block list whose length is not ``blocks``.
    """
    if isinstance(block_weight_bytes, int):
        weights = blocks * block_weight_bytes
    elif len(block_weight_bytes) != blocks:
        raise ValueError(f"step_bytes: {len(block_weight_bytes)} per-block byte counts for {blocks} blocks")
    else:
        weights = sum(block_weight_bytes)
    kv_per_position = config.kv_elements_per_position() * kv_itemsize
    out = {
        "weights": weights,
        "lm_head": lm_head_bytes,
        "embedding": m * config.hidden * act_itemsize,
        "norms": (2 * blocks + 1) * config.hidden * act_itemsize,
        "kv_read": blocks * m * (context + 1) * kv_per_position,
        "kv_write": blocks * m * kv_per_position,
    }
    if kv_scale_bytes:
        out["kv_scales"] = blocks * kv_scale_bytes
    out["total"] = sum(out.values())
    return out


def kv_cache_bytes(config: StepModelConfig, *, m: int, context: int, blocks: int, kv_itemsize: int,
                   kv_scale_bytes: int = 0) -> dict:
    """The KV cache's ledger: ``per_token`` (one position of one sequence, every block), and
    ``per_context`` (one sequence's ``context + 1`` positions, the step's new one included),
    ``scales`` (every block's, once) and ``total`` (M sequences and the scales), in bytes."""
    per_token = blocks * config.kv_elements_per_position() * kv_itemsize
    per_context = (context + 1) * per_token
    return {"per_token": per_token, "per_context": per_context, "scales": blocks * kv_scale_bytes,
            "total": m * per_context + blocks * kv_scale_bytes}


def attention_bytes(config: StepModelConfig, *, m: int, context: int, kv_itemsize: int, act_itemsize: int,
                    kv_scale_bytes: int = 0) -> int:
    """Bytes one block's decode attention moves at least: the cache's K and V over ``context + 1``
    positions for M sequences, its scales, the query read and the output written (``M × heads ×
    head_dim`` each, activation dtype)."""
    return (m * (context + 1) * config.kv_elements_per_position() * kv_itemsize + kv_scale_bytes
            + 2 * m * config.heads * config.head_dim * act_itemsize)


def floor_us(total_bytes: int, memory_gbps: Optional[float]) -> Optional[float]:
    """``total_bytes`` / ``memory_gbps`` (GB/s = 1e9 B/s) in µs; None without a bandwidth."""
    if not memory_gbps:
        return None
    return total_bytes / (memory_gbps * 1e3)


def extrapolate(t_small: float, t_large: float, n_small: int, n_large: int, n_model: int) -> float:
    """The step of ``n_model`` blocks from steps of ``n_small`` and ``n_large`` blocks, linear in
    the block count: ``t_large + (n_model - n_large) × (t_large - t_small) / (n_large - n_small)``.

    Raises:
        ValueError: ``n_large <= n_small``.
    """
    if n_large <= n_small:
        raise ValueError(f"extrapolate: needs n_large > n_small, got {n_large} <= {n_small}")
    return t_large + (n_model - n_large) * (t_large - t_small) / (n_large - n_small)
