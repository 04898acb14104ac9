"""Several files of one scenario read as one result (qbench.readers.common, issue 24): a completion
file adds its rows, a row measured twice gets `repeats`, independent runs are split back out for
pick stability, and files of other scenarios or machines stay apart."""

from __future__ import annotations

import pytest

from qbench.judge import combine_rows, row_verdict, tie_note
from qbench.readers.common import group_results, merge_docs, split_runs
from qbench.results import ResultDoc
from tests.rows import make_row, stats, typed_row


def _row(scheme, median, m=1, **extra):
    return make_row(scheme=scheme, m=m, k=64, n=32, status="ok", error={"rel_fro": 0.01},
                    latency_us={"stream": stats(median, median * 0.99, median * 1.01)}, **extra)


def _doc(rows, name="s", gpu="NVIDIA H200", cpus=16):
    return ResultDoc.of({"schema_version": 2, "complete": True, "scenario": {"name": name},
                         "env": {"device": "cuda:0", "device_name": gpu, "cpu_count": cpus}, "rows": rows})


def test_a_completion_file_adds_its_rows_as_one_run():
    a, b = _doc([_row("bf16", 10.0), _row("int8", 8.0)]), _doc([_row("nf4", 9.0)])
    (res,) = group_results(["a.json", "b.json"], [a, b])
    assert res.label == "a.json + b.json" and [r.scheme for r in res.doc.rows] == ["bf16", "int8", "nf4"]
    assert len(res.runs) == 1 and res.runs[0].rows == res.doc.rows and all(r.repeats is None for r in res.doc.rows)


def test_rows_of_two_files_combine_with_their_medians_and_spread():
    a = _doc([_row("bf16", 10.0), _row("int8", 8.0)])
    b = _doc([_row("bf16", 10.0), _row("int8", 12.0)], cpus=32)  # another host's CPU count: one GPU machine
    (res,) = group_results(["a.json", "b.json"], [a, b])
    int8 = next(r for r in res.doc.rows if r.scheme == "int8")
    assert int8.stats("stream").median == 8.0  # the first file's row, with every run's median
    assert int8.repeats.runs == 2 and int8.repeats.medians == {"stream": [8.0, 12.0]}
    assert int8.repeats.spread["stream"] == pytest.approx(4.0 / 10.0)  # (max - min) / median of the medians
    assert [[r.stats("stream").median for r in run.rows] for run in res.runs] == [[10.0, 8.0], [10.0, 12.0]]


def test_a_row_with_repeats_is_one_run_per_median():
    rep = {"runs": 3, "ok_runs": 3, "medians": {"stream": [8.0, 9.0, 12.0]}, "spread": {"stream": 0.5}}
    runs = split_runs([_doc([_row("int8", 8.0, repeats=rep), _row("bf16", 10.0)])])
    assert [r.rows[0].stats("stream").median for r in runs] == [8.0, 9.0, 12.0]
    assert runs[2].rows[0].stats("stream").p90 == pytest.approx(12.0 * 1.01)  # the run's own spread, rescaled
    assert [r.rows[1].stats("stream").median for r in runs] == [10.0, 10.0, 10.0]  # one run: in every run
    merged = combine_rows([typed_row(**_row("int8", 8.0, repeats=rep)), typed_row(**_row("int8", 10.0))])
    assert merged.repeats.runs == 4 and merged.repeats.medians["stream"] == [8.0, 9.0, 12.0, 10.0]


def test_other_scenarios_or_gpus_stay_apart_and_a_file_named_twice_counts_once():
    a, b, c = _doc([_row("bf16", 10.0)]), _doc([_row("bf16", 10.0)], name="t"), _doc([_row("bf16", 10.0)], gpu="A100")
    assert [g.label for g in group_results(["a", "b", "c"], [a, b, c])] == ["a", "b", "c"]
    (res,) = group_results(["a", "a"], [a, a])
    assert res.paths == ["a"] and len(res.runs) == 1
    assert merge_docs([a]) is a


def test_tie_by_the_runs_spread_and_its_note():
    rep = {"runs": 3, "ok_runs": 3, "medians": {"stream": [8.0, 10.5, 9.0]}, "spread": {"stream": 2.5 / 9.0}}
    fast, base = typed_row(**_row("int8", 8.0)), typed_row(**_row("bf16", 10.0))
    assert row_verdict(base, fast, "stream") == "faster" and tie_note(base, fast, "stream") is None
    wobbly = typed_row(**_row("int8", 8.0, repeats=rep))
    assert row_verdict(base, wobbly, "stream") == "same"
    assert tie_note(base, wobbly, "stream") == "between-run spread 28%"  # tie_band: max(0.02, 2.5 / 9)
