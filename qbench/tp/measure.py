"""Measure one scheme, sharded ``tp_size`` ways along one split, at every M; run on every rank.

Each rank builds its shard with the scheme's own ``build()`` from its slice of the FP32 weight
(:mod:`qbench.tp.shard`), multiplies its share of the activations, and the collective
(:mod:`qbench.tp.collectives`) gives every rank the whole ``Y [M, N]``. Rank 0 compares that
``Y`` with the float64 reference of the unsharded FP32 layer, and with the output of the
unsharded layer built by the same scheme (so a row says both "how far from exact" and "how far
from not sharding at all").

Three timings per row (µs, STATS; :mod:`qbench.tp.timing`): ``local_gemm_us`` (the rank's own
layer call), ``collective_us`` (the collective alone, on a ready buffer), ``end_to_end_us`` (the
call and the collective, as the model runs them). With ``tp_size`` 1 there is no collective and
``end_to_end_us`` is ``local_gemm_us``.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from qbench import inputs, ledger, metrics
from qbench.measure import _settings, base_row, checked, dtype_name, failed_rows
from qbench.row import TP_ROW_FIELDS, check_row
from qbench.scenario import Scenario
from qbench.schemes import get as get_scheme
from qbench.tp import collectives, shard
from qbench.tp.timing import RankGroup, per_rank_cold, synced_time

#: The tensor-parallel fields of a row: those :class:`qbench.row.Row` marks ``tp``.
TP_FIELDS = TP_ROW_FIELDS


def tp_row(scenario: Scenario, entry_index: int, m: int, device: torch.device, tp_size: int, split: str) -> dict:
    """A result row (``docs/results-schema.md``) plus the tensor-parallel fields, unmeasured.

    ``split`` is ``column``, ``row`` or ``none`` (tp_size 1: the unsharded layer, the baseline
    of both splits).
    """
    entry = scenario.schemes[entry_index]
    scheme = get_scheme(entry.name)
    row = base_row(scenario, entry, scheme, m, device)
    row.update({key: None for key in TP_FIELDS})
    row.update(tp_size=tp_size, split=split, collective=collectives.collective_name(split, tp_size),
               roofline_reason="no roofline for tensor-parallel rows")
    return check_row(row, writing=True)


def measure_tp(scenario: Scenario, entry_index: int, split: str, ranks: RankGroup) -> list[dict]:
    """Rows (one per M) for ``scenario.schemes[entry_index]`` split ``ranks.size`` ways.

    Every rank must call this with the same arguments. Never raises for the scheme's own failure:
    a build or first-call error on any rank gives ``failed`` rows on every rank (the ranks agree
    on it before going on, so none is left waiting in a collective). Rows are complete on rank 0
    and checked against :class:`qbench.row.Row` (:func:`qbench.measure.checked`).
    """
    p, device = ranks.size, ranks.device
    entry = scenario.schemes[entry_index]
    scheme = get_scheme(entry.name)
    rows = [tp_row(scenario, entry_index, m, device, p, split) for m in scenario.m]
    k, n = scenario.layer.in_features, scenario.layer.out_features
    verdict = shard.plan(entry.name, entry.options, split, p, k, n) if split != "none" else None
    torch.manual_seed(scenario.seed)
    t0 = time.perf_counter()
    problem = None
    try:
        weight, bias = inputs.make_weight(scenario, device)
        if split == "none":
            w_local, b_local = weight, bias
        else:
            w_local, b_local = shard.shard_weight(weight, bias, split, p, ranks.rank)
        module = scheme.build(w_local, b_local, entry.options)
        book = ledger.count(scheme.parts(module))
        unsharded = scheme.build(weight, bias, entry.options) if p > 1 and ranks.rank == 0 else None
    except Exception as exc:
        problem = f"build (rank {ranks.rank}): {type(exc).__name__}: {exc}"
    if _agree_failed(ranks, problem):
        return checked(failed_rows(rows, "failed", problem or "build failed on another rank"))
    built = time.perf_counter()
    sk, sn = (k, n) if verdict is None else (verdict.k, verdict.n)
    reduce_dtype = None
    if split == "row" and p > 1:
        reduce_dtype = torch.float32 if scenario.tp.reduce_dtype == "float32" else None
    stored_all = ranks.sum_int(book.stored_bytes)
    with torch.inference_mode():
        for row in rows:
            row.update(book.fields(sk, sn))
            row["stored_bytes_all_ranks"] = stored_all
            row["shard"] = {"k": sk, "n": sn, "same_as_slice": True if verdict is None else verdict.same_as_slice,
                            "note": "unsharded" if verdict is None else verdict.note}
            _measure_m(scenario, scheme, module, unsharded, weight, bias, row, split, ranks, reduce_dtype)
    for row in rows:
        row["worker_phases_s"] = {"build": built - t0, "measure": time.perf_counter() - built}
    return checked(rows)


def _agree_failed(ranks: RankGroup, problem: Optional[str]) -> bool:
    """True on every rank when any rank has a problem (one small collective)."""
    return ranks.max_float(1.0 if problem else 0.0) > 0


def _collective(split: str, ranks: RankGroup, bias: Optional[torch.Tensor],
                reduce_dtype: Optional[torch.dtype]) -> Callable[[torch.Tensor], torch.Tensor]:
    if split == "none" or ranks.size == 1:
        return lambda y: y
    if split == "column":
        return lambda y: collectives.all_gather_columns(y, ranks.size, ranks.group)
    return lambda y: collectives.all_reduce_rows(y, reduce_dtype or y.dtype, bias, ranks.group)


def _measure_m(scenario, scheme, module, unsharded, weight, bias, row, split, ranks, reduce_dtype) -> None:
    m, p = row["m"], ranks.size
    cuda = ranks.device.type == "cuda"
    problem = None
    try:
        x32 = inputs.make_activations(scenario, m, ranks.device)
        x = x32.to(scheme.activation_dtype)
        x_local = x if split == "none" else shard.shard_activations(x, split, p, ranks.rank)
        collect = _collective(split, ranks, bias, reduce_dtype)
        y_local = module(x_local)
        y = collect(module(x_local))
        row["output_dtype"] = dtype_name(y.dtype)
        if ranks.rank == 0:
            y_ref = inputs.reference(x32, weight, bias)
            row["error"] = metrics.error_metrics(y, y_ref)
            if unsharded is not None:
                y_whole = unsharded(x)
                row["unsharded_error"] = metrics.error_metrics(y_whole, y_ref)
                row["sharded_vs_unsharded"] = metrics.error_metrics(y, y_whole)
            del y_ref
    except Exception as exc:
        problem = f"run (rank {ranks.rank}): {type(exc).__name__}: {exc}"
    if _agree_failed(ranks, problem):
        failed_rows([row], "failed", problem or "run failed on another rank")
        return
    moved_dtype = reduce_dtype or y_local.dtype
    if row["collective"] == "all_reduce":
        row["reduce_dtype"] = dtype_name(moved_dtype)
    volume = collectives.collective_bytes(split, p, m, row["n"], torch.empty((), dtype=moved_dtype).element_size())
    row["collective_bytes"], row["collective_data_bytes"] = volume["bus_bytes"], volume["data_bytes"]
    settings = _settings(scenario)
    gemm = lambda: module(x_local)  # noqa: E731
    medians: dict = {}
    try:
        local = per_rank_cold(gemm, settings, ranks) if cuda else synced_time(gemm, settings, ranks)
        row["local_gemm_us"], medians["local_gemm"] = local.stats.to_dict(), local.per_rank_median
        if p > 1:
            # all_reduce works in place: time it on zeros, so repeated sums stay finite
            buffer = y_local if split == "column" else torch.zeros_like(y_local)
            coll = synced_time(lambda: collect(buffer), settings, ranks)
            row["collective_us"], medians["collective"] = coll.stats.to_dict(), coll.per_rank_median
            row["collective_busbw_gbps"] = collectives.bus_gbps(volume["bus_bytes"], coll.stats.median)
            whole = synced_time(lambda: collect(module(x_local)), settings, ranks, flush=cuda)
            row["end_to_end_us"], medians["end_to_end"] = whole.stats.to_dict(), whole.per_rank_median
        else:
            row["end_to_end_us"], medians["end_to_end"] = row["local_gemm_us"], medians["local_gemm"]
    except Exception as exc:  # past the agreement above; the other ranks fail or time out alike
        failed_rows([row], "failed", f"timing (rank {ranks.rank}): {type(exc).__name__}: {exc}")
        return
    row["per_rank_median_us"] = medians
    method = "cold" if cuda else "cpu"
    row["latency_us"][method] = row["end_to_end_us"]
    for other in scenario.timing.methods:
        if other == method:
            continue
        row["latency_us"][other] = None
        if other == "stream":
            row["latency_reasons"][other] = "tensor-parallel rows do not time stream yet (graph-captured call + collective)"
        elif not cuda:
            row["latency_reasons"][other] = "CUDA method; this row ran on the CPU"
        else:
            row["latency_reasons"][other] = "tensor-parallel rows time cold only (end_to_end_us)"
