"""Crossover on hand-built sweeps: tensor-parallel rows meet the baseline at their own sharding,
a null median is untimed, the refusals word for word (mutation testing, docs/testing.md)."""

from __future__ import annotations

import pytest

from qbench.readers.report import crossover
from tests.rows import make_row


def _s(median, spread=0.01):
    return {"median": median, "p10": median * (1 - spread), "p90": median * (1 + spread), "n": 20}


def _row(scheme, m, stream, status="ok", **extra):
    return make_row(scheme=scheme, m=m, k=64, n=32, status=status, latency_us={"stream": stream},
                    latency_reasons={}, **extra)


def test_tensor_parallel_rows_meet_the_baseline_at_their_sharding():
    doc = {"rows": [
        _row("bf16", 1, _s(10.0)), _row("bf16", 2, _s(10.0)),
        _row("bf16", 1, _s(4.0), tp_size=2, split="row"),
        _row("x", 1, _s(5.0)), _row("x", 2, {"median": None, "p10": None, "p90": None}),
        _row("x", 1, _s(6.0), tp_size=2, split="row"),  # slower than bf16 at tp 2, faster than bf16 at tp 1
        _row("x", 1, _s(3.0), tp_size=2, split="column"),  # no bf16 row at tp 2 column: untimed
    ]}
    plain, row_split, column_split = crossover(doc, "bf16", "stream")
    assert plain == {"scheme": "x", "k": 64, "n": 32, "wins": [1], "ties": [], "losses": [], "untimed": [2],
                     "unusable": [], "best_speedup": 2.0, "ranges": "1"}
    assert row_split == {"scheme": "x", "k": 64, "n": 32, "tp_size": 2, "split": "row", "wins": [], "ties": [],
                         "losses": [1], "untimed": [], "unusable": [], "best_speedup": 4.0 / 6.0, "ranges": ""}
    assert column_split["split"] == "column" and column_split["untimed"] == [1] and column_split["best_speedup"] is None


def test_refusals_word_for_word():
    with pytest.raises(ValueError) as info:
        crossover({"rows": [_row("b", 1, _s(1.0)), _row("a", 1, _s(1.0))]}, "bf16", "stream")
    assert str(info.value) == "--baseline 'bf16' is not a scheme of this file; schemes: a, b"
    with pytest.raises(ValueError) as info:
        crossover({"rows": []}, "bf16", "stream")
    assert str(info.value) == "--baseline 'bf16' is not a scheme of this file; schemes: none (the file has no rows)"
    with pytest.raises(ValueError) as info:
        crossover({"rows": [_row("bf16", 1, None, status="skipped"), _row("bf16", 2, None, status="failed"),
                            _row("a", 1, _s(1.0))]}, "bf16", "stream")
    assert str(info.value) == ("--baseline 'bf16' has no stream latency at any M in this file (its rows: failed, "
                               "skipped); choose another --baseline or --method")


def test_each_tp_size_is_its_own_record():
    doc = {"rows": [_row("bf16", 1, _s(10.0), tp_size=2, split="row"), _row("bf16", 1, _s(6.0), tp_size=4, split="row"),
                    _row("x", 1, _s(5.0), tp_size=2, split="row"), _row("x", 1, _s(8.0), tp_size=4, split="row")]}
    two, four = crossover(doc, "bf16", "stream")
    assert (two["tp_size"], two["wins"], two["best_speedup"]) == (2, [1], 2.0)  # 10 / 5
    assert (four["tp_size"], four["losses"], four["best_speedup"]) == (4, [1], 6.0 / 8.0)
