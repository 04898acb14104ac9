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
``end_to_end_us`` is ``local_gemm_us``. The end-to-end time is also the row's time of the
device's first fallback method (:func:`qbench.timing.registry.fallback`: ``cold`` on CUDA, ``cpu``
on the CPU); a planned method that needs copies (``stream``) is timed across ranks over the shard's
copies; every other method the scenario lists is null with its reason.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from qbench import inputs, metrics
from qbench.measure import base_row, checked, dtype_name, failed_rows, make_copies
from qbench.row import TP_ROW_FIELDS, check_row, reason_record
from qbench.scenario import Scenario
from qbench.schemes import ledger
from qbench.tp import collectives, shard
from qbench.timing import registry
from qbench.tp.timing import RankGroup, per_rank_cold, synced_stream, synced_time

#: The tensor-parallel fields of a row: those :class:`qbench.row.Row` marks ``tp``.
TP_FIELDS = TP_ROW_FIELDS


def tp_row(scenario: Scenario, entry_index: int, m: int, device: torch.device, tp_size: int, split: str) -> dict:
    """A result row (``docs/results-schema.md``) plus the tensor-parallel fields, unmeasured.

    ``split`` is ``column``, ``row`` or ``none`` (tp_size 1: the unsharded layer, the baseline
    of both splits).
    """
    entry = scenario.schemes[entry_index]
    scheme = entry.scheme
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
    scheme = entry.scheme
    rows = [tp_row(scenario, entry_index, m, device, p, split) for m in scenario.m]
    k, n = scenario.layer.in_features, scenario.layer.out_features
    verdict = shard.plan(scheme, entry.options, split, p, k, n) if split != "none" else None
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
    copies, copies_why = None, None
    wants_copies = [m.name for m in registry.plan(scenario.timing.methods, device.type) if m.needs.copies]
    if wants_copies:
        copies, copies_why = _shard_copies(module, scheme, w_local, b_local, entry, book.stored_bytes, ranks,
                                           wants_copies[0])
    copied = time.perf_counter()
    with torch.inference_mode():
        for row in rows:
            row.update(book.fields(sk, sn))
            row["stored_bytes_all_ranks"] = stored_all
            row["shard"] = {"k": sk, "n": sn, "same_as_slice": True if verdict is None else verdict.same_as_slice,
                            "note": "unsharded" if verdict is None else verdict.note}
            _measure_m(scenario, scheme, module, unsharded, weight, bias, row, split, ranks, reduce_dtype,
                       copies, copies_why)
    for row in rows:
        row["worker_phases_s"] = {"build": built - t0, "copies": copied - built,
                                  "measure": time.perf_counter() - copied}
    return checked(rows)


def _shard_copies(module, scheme, w_local, b_local, entry, stored_bytes: int, ranks: RankGroup, method: str):
    """The L copies of this rank's shard for ``method`` (:func:`qbench.measure.make_copies`), with
    one L on every rank (the smallest any rank planned: the ranks call copies and collectives in
    lockstep). Returns ``(copies, None)`` or ``(None, reason)`` on every rank alike."""
    copies, why = None, None
    try:
        copies = make_copies(module, scheme, w_local, b_local, entry, stored_bytes, ranks.device)
    except Exception as exc:
        why = f"copies for {method} (rank {ranks.rank}): {type(exc).__name__}: {exc}".splitlines()[0][:300]
    least = -ranks.max_float(-float(len(copies.modules) if copies else 0))
    if least < 1 or _agree_failed(ranks, why):
        return None, why or f"copies for {method} failed on another rank"
    if len(copies.modules) > least:  # another rank had less free memory: keep as many as it has
        import dataclasses

        copies.modules = copies.modules[: int(least)]
        copies.plan = dataclasses.replace(copies.plan, copies=int(least), bounded_by="memory",
                                          cache_multiple=least * copies.plan.copy_bytes / copies.plan.cache_bytes)
    return copies, None


def add_speedup_vs_tp1(rows: list[dict], earlier: list[dict]) -> None:
    """Set ``speedup_vs_tp1`` (tp_size 1 time / this row's time) and ``speedup_vs_tp1_method`` on
    each ok tensor-parallel row of ``rows`` with tp_size > 1, against the ok tp_size 1 row of the
    same scheme label, M, K and N in ``earlier`` (the run's rows so far: tp_size 1 runs first).
    The time is the first of :data:`qbench.timing.registry.COMPARISON_ORDER` both rows have (``stream``,
    else the end-to-end ``cold`` on CUDA or ``cpu`` on the CPU)."""
    base = {(r["scheme"], r["m"], r["k"], r["n"]): r for r in earlier
            if r.get("tp_size") == 1 and r["status"] == "ok"}
    for row in rows:
        one = base.get((row["scheme"], row["m"], row["k"], row["n"]))
        if row["status"] != "ok" or (row.get("tp_size") or 1) == 1 or one is None:
            continue
        for method in registry.COMPARISON_ORDER:
            mine, theirs = (row["latency_us"].get(method) or {}), (one["latency_us"].get(method) or {})
            if mine.get("median") and theirs.get("median"):
                row["speedup_vs_tp1"] = theirs["median"] / mine["median"]
                row["speedup_vs_tp1_method"] = method
                break


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


def _measure_m(scenario, scheme, module, unsharded, weight, bias, row, split, ranks, reduce_dtype,
               copies=None, copies_why: Optional[str] = None) -> None:
    m, p = row["m"], ranks.size
    cuda = ranks.device.type == "cuda"
    problem = None
    try:
        x32 = inputs.make_activations(scenario, m, ranks.device)
        x = x32.to(scheme.activation_dtype)
        x_local = x if split == "none" else shard.shard_activations(x, split, p, ranks.rank)
        collect = _collective(split, ranks, bias, reduce_dtype)
        y_local = module(x_local)
        y = collect(y_local)  # a row split sums y_local in place; later only its shape and dtype are read
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
    settings = scenario.timing
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
    device_type = ranks.device.type
    end = registry.fallback(device_type)
    row["latency_us"][end.name] = row["end_to_end_us"]
    streamed = [m for m in registry.plan(scenario.timing.methods, device_type) if m.needs.copies]
    for method in streamed:
        name = method.name
        if copies is None:
            row["latency_us"][name] = None
            row["latency_reasons"][name] = reason_record("copies", copies_why or "no copies were built")
            continue
        # every rank reaches this (the agreement above), so the collectives stay in lockstep
        calls = [(lambda mod=mod: collect(mod(x_local))) for mod in copies.modules]
        try:
            got = synced_stream(calls, settings, ranks)
            row["latency_us"][name] = {**got.stats.to_dict(), **copies.plan.to_dict(), "how": copies.how}
            medians[name] = got.per_rank_median
        except Exception as exc:
            row["latency_us"][name] = None
            row["latency_reasons"][name] = reason_record(
                "error", f"rank {ranks.rank}: {type(exc).__name__}: {exc}".splitlines()[0][:300])
    row["per_rank_median_us"] = medians
    timed = {end.name, *(m.name for m in streamed)}
    for other in scenario.timing.methods:
        if other in timed:
            continue
        method = registry.METHODS[other]
        row["latency_us"][other] = None
        if not method.runs_on(device_type):
            row["latency_reasons"][other] = reason_record("cuda-only" if device_type != "cuda" else "cpu-only",
                                                          method.unavailable(device_type))
        else:
            row["latency_reasons"][other] = reason_record("not-timed",
                                                          f"tensor-parallel rows time {end.name} only (end_to_end_us)")
