"""Tests for qbench.results: atomic, no-clobber writing; strict, versioned reading."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from qbench import SCHEMA_VERSION
from qbench.judge import methods_present, resolve_method
from qbench.results import (
    ResultDoc,
    ResultsError,
    ResultsExistError,
    ResultsSchemaError,
    finite_or_none,
    read_results,
    upgrade_prose_row,
    write_results,
)
from tests.conftest import committed_results


FIXTURES = Path(__file__).parent / "fixtures"


def _doc(**extra):
    return {"schema_version": SCHEMA_VERSION, "complete": True, "rows": [], **extra}


def _row(**fields):
    return {"scheme": "bf16", "m": 1, "k": 8, "n": 8, "status": "ok", **fields}  # malformed on purpose below


def test_round_trip(tmp_path):
    p = tmp_path / "sub" / "r.json"
    doc = _doc(rows=[_row(latency_us={"cold": {"median": 11.0}})])
    assert write_results(p, doc) == p
    assert read_results(p).to_json() == doc
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]  # no temp file left behind


def test_refuses_overwrite_without_force_and_keeps_old_file(tmp_path):
    p = tmp_path / "r.json"
    write_results(p, _doc(wall_s=1.0))
    before = p.read_bytes()
    with pytest.raises(ResultsExistError) as exc:
        write_results(p, _doc(wall_s=2.0))
    msg = str(exc.value)
    assert str(p) in msg and "--force" in msg and "\n" not in msg
    assert isinstance(exc.value, ResultsError)
    assert p.read_bytes() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == ["r.json"]


def test_force_overwrites(tmp_path):
    p = tmp_path / "r.json"
    write_results(p, _doc(wall_s=1.0))
    write_results(p, _doc(wall_s=2.0), force=True)
    assert read_results(p).wall_s == 2.0


def test_nonfinite_floats_become_null(tmp_path):
    """Documented choice: NaN/Inf are written as null (strict JSON), never as NaN tokens."""
    p = tmp_path / "r.json"
    doc = _doc(rows=[_row(error={"rel_fro": math.nan, "max_abs": math.inf, "sqnr_db": -math.inf,
                                 "nonfinite": 12}, per_rank_median_us={"local_gemm": [1.5, math.nan]})])
    write_results(p, doc)
    text = p.read_text()
    assert "NaN" not in text and "Infinity" not in text
    row = read_results(p).rows[0]
    assert row.error.model_dump(exclude_unset=True) == {"rel_fro": None, "max_abs": None, "sqnr_db": None,
                                                        "nonfinite": 12}
    assert row.per_rank_median_us == {"local_gemm": [1.5, None]}
    assert doc["rows"][0]["error"]["nonfinite"] == 12 and math.isnan(doc["rows"][0]["error"]["rel_fro"])


def test_finite_or_none_leaves_other_values():
    assert finite_or_none({"a": (1, 2.5, "x", None, True)}) == {"a": [1, 2.5, "x", None, True]}


def test_unserialisable_doc_is_a_results_error_and_writes_nothing(tmp_path):
    p = tmp_path / "r.json"
    with pytest.raises(ResultsError, match="cannot write"):
        write_results(p, _doc(bad=object()))
    assert not p.exists() and list(tmp_path.iterdir()) == []


def test_read_refuses_version_99_naming_the_file():
    path = FIXTURES / "schema_v99.json"
    with pytest.raises(ResultsSchemaError) as exc:
        read_results(path)
    assert "schema_v99.json" in str(exc.value) and "99" in str(exc.value)


@pytest.mark.parametrize(
    "text, error, needle",
    [
        ('{"rows": []}', ResultsSchemaError, "no schema_version"),
        ('{"schema_version": "1", "rows": []}', ResultsSchemaError, "'1'"),
        ('{"schema_version": true, "rows": []}', ResultsSchemaError, "True"),
        ("not json {", ResultsError, "not JSON"),
        ('{"schema_version": 1, "rows": [{"x": NaN}]}', ResultsError, "not JSON"),
        ("[1, 2]", ResultsError, "not a qbench result"),
        ('{"schema_version": 1}', ResultsError, "no 'rows' list"),
    ],
)
def test_read_refuses_bad_files(tmp_path, text, error, needle):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(error) as exc:
        read_results(p)
    assert needle in str(exc.value) and "bad.json" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_read_missing_file(tmp_path):
    with pytest.raises(ResultsError, match="no such file"):
        read_results(tmp_path / "nope.json")


def test_methods_and_resolve_method():
    cuda = read_results(FIXTURES / "cuda_run1.json")
    cpu = read_results(FIXTURES / "cpu.json")
    assert methods_present(cuda.rows) == ["cold", "warm", "eager", "kernel"]
    assert methods_present(cpu.rows) == ["cpu"]
    # files written before stream existed: cold (CUDA) or cpu (CPU), with a note saying so
    method, note = resolve_method(cuda, None)
    assert method == "cold" and note.startswith("no stream latency in this file") and "using cold" in note
    method, note = resolve_method(cpu, None)
    assert method == "cpu" and note.startswith("no stream latency in this file") and "using cpu" in note
    assert resolve_method(cpu, "cold") == ("cold", None)  # explicit: no fallback
    assert resolve_method(cuda, "stream") == ("stream", None)
    # files with stream read it, CUDA and CPU alike; the methods come in the registry's order
    stream = read_results(FIXTURES / "cuda_stream.json")
    cpu_stream = read_results(FIXTURES / "cpu_stream.json")
    assert methods_present(stream.rows) == ["stream", "cold", "warm", "eager", "kernel"]
    assert methods_present(cpu_stream.rows) == ["stream", "cpu"]
    assert resolve_method(stream, None) == ("stream", None)
    assert resolve_method(cpu_stream, None) == ("stream", None)
    assert resolve_method(stream, "cold") == ("cold", None)
    # no method at all: the default, no note (the command says nothing is timed)
    assert resolve_method(ResultDoc(schema_version=2), None) == ("stream", None)


def test_method_choices_are_the_registry():
    from qbench.judge import METHOD_CHOICES
    from qbench.timing import registry

    assert METHOD_CHOICES == registry.LAYER_METHODS == ("stream", "cold", "warm", "eager", "kernel", "cpu")


def test_atomic_write_uses_replace_in_same_folder(tmp_path, monkeypatch):
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((os.path.dirname(src), os.path.dirname(dst)))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_results(tmp_path / "r.json", _doc(), force=True)
    assert seen == [(str(tmp_path), str(tmp_path))]
    assert json.loads((tmp_path / "r.json").read_text())["schema_version"] == SCHEMA_VERSION



# ---- the row contract: malformed rows are one line naming file, row and key, never a traceback ----

@pytest.mark.parametrize(
    "row, where",
    [
        (None, "rows[1]: a row is an object, got NoneType"),
        ([1, 2], "rows[1]: a row is an object, got list"),
        ({}, "rows[1].scheme: Field required (missing)"),
        ({"scheme": "x", "k": 8, "n": 8, "status": "ok"}, "rows[1].m: Field required (missing)"),
        (_row(m="16"), "rows[1].m: Input should be a valid integer (got '16')"),
        (_row(m=0), "rows[1].m: Input should be greater than 0 (got 0)"),
        (_row(m=1.5), "rows[1].m: Input should be a valid integer"),
        (_row(status="done"), "rows[1].status: Input should be 'ok', 'skipped' or 'failed' (got 'done')"),
        (_row(latency_us={"cold": {"median": 0}}), "rows[1].latency_us.cold.median: Input should be greater than 0 (got 0)"),
        (_row(latency_us={"cold": {"median": "11"}}), "rows[1].latency_us.cold.median: Input should be a valid number (got '11')"),
        (_row(latency_us={"cold": [11.0]}), "rows[1].latency_us.cold: Input should be a valid dictionary"),
        (_row(error={"rel_fro": "0.01"}), "rows[1].error.rel_fro: Input should be a valid number (got '0.01')"),
        (_row(error={"rel_fro": -1.0}), "rows[1].error.rel_fro: Input should be greater than or equal to 0"),
        (_row(scheme="bf16", m=1), "rows[1] repeats rows[0] (scheme 'bf16', M=1, K=8, N=8)"),
        # keys no row carries: the compile_s column's old fixture key, a misspelt field, a method
        (_row(compile={"compile_s": 14.2}), "rows[1].compile.compile_s: Extra inputs are not permitted (got 14.2)"),
        (_row(stored_byte=10), "rows[1].stored_byte: Extra inputs are not permitted (got 10)"),
        (_row(latency_us={"hot": {"median": 1.0}}), "rows[1].latency_us: unknown timing method 'hot'"),
        (_row(latency_us={"cold": {"median": 1.0, "copies": 8}}),
         "rows[1].latency_us.cold.copies: a stream key on a cold record"),
        (_row(tp_size=0, split="row"), "rows[1].tp_size: Input should be greater than or equal to 1 (got 0)"),
        (_row(split="diagonal"), "rows[1].split: Input should be 'column', 'row' or 'none' (got 'diagonal')"),
        (_row(flags="repacked"), "rows[1].flags: Input should be a valid list (got 'repacked')"),
    ],
)
def test_malformed_rows_are_one_clear_line(tmp_path, row, where):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_doc(rows=[_row(), row])))
    with pytest.raises(ResultsError) as exc:
        read_results(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: ") and where in msg and "\n" not in msg


def test_rows_that_differ_only_by_tp_size_are_distinct(tmp_path):
    p = tmp_path / "tp.json"
    p.write_text(json.dumps(_doc(rows=[_row(tp_size=1, split="column"), _row(tp_size=2, split="column"),
                                       _row(tp_size=2, split="row")])))
    assert len(read_results(p).rows) == 3


def test_committed_results_all_pass_the_row_contract():
    files = committed_results()
    assert len(files) >= 10
    for f in files:
        doc = json.loads(f.read_text())
        if isinstance(doc, dict) and "rows" in doc and "schema_version" in doc and "kind" not in doc:
            read_results(f)  # run results; "kind" marks derived summaries (repeatability.json)


def test_schema_1_files_are_read_as_the_current_schema():
    """A schema 1 file's reasons and flags (sentences) become records with a kind and a name; the
    rest of the file is unchanged."""
    p = Path(__file__).parent.parent / "results" / "h200" / "llama31_70b_q_o.json"  # a schema 1 run of 2026-12-01
    raw = json.loads(p.read_text())
    assert raw["schema_version"] == 1
    doc = read_results(p)
    assert doc.schema_version == SCHEMA_VERSION == 3 and len(doc.rows) == len(raw["rows"])
    for got, was in zip(doc.rows, raw["rows"]):
        assert {m: r.text for m, r in got.latency_reasons.items()} == was["latency_reasons"]
        assert [f.line for f in got.flags] == was["flags"]
    kinds = {r.kind for row in doc.rows for r in row.latency_reasons.values()}
    assert kinds == {"capture-failed", "not-attempted"}
    # the 2026-12-01 CPU file's sentence (schema 1): no capture words, so kind "other"
    old = upgrade_prose_row({"latency_reasons": {"cold": "CUDA method; this row ran on the CPU"}, "flags": []})
    assert old["latency_reasons"] == {"cold": {"kind": "other", "text": "CUDA method; this row ran on the CPU"}}
    cpu = read_results(Path(__file__).parent.parent / "results" / "cpu" / "decode.json")  # schema 3, written typed
    assert {r.kind for row in cpu.rows for r in row.latency_reasons.values()} == {"cuda-only"}


def test_schema_2_step_files_are_read_with_structured_flags():
    """A model-step row of schema 2 wrote its flags as sentences (``name: text``): read, each is a
    record with the flag's name (one of row.FLAG_NAMES) and the rest of the sentence; the STATS are
    typed; the rest of the row is unchanged."""
    p = Path(__file__).parent.parent / "results" / "h200" / "step_llama3_8b.json"
    raw = json.loads(p.read_text())
    assert raw["schema_version"] == 2
    doc = read_results(p)
    assert doc.job == "step" and doc.schema_version == SCHEMA_VERSION
    for got, was in zip(doc.rows, raw["rows"]):
        assert [f.line for f in got.flags if f.name != "noisy"] == [f for f in was["flags"] if not f.startswith("noisy")]
        assert {m: s.median for m, s in got.latency_us.items() if s} == {m: s["median"] for m, s in was["latency_us"].items() if s}
        assert got.model_dump(mode="json", exclude_unset=True, exclude={"flags"}) == \
            {k: v for k, v in was.items() if k != "flags"}
    assert {"throttled", "noisy", "reduce-overhead-slower"} <= {n for r in doc.rows for n in r.flag_names}
    # noisy decided again by the one rule (cv > NOISY_CV): of the file's two p90/p10 flags, one stays
    noisy = [(r.scheme, r.m, r.context, f.text) for r in doc.rows for f in r.flags if f.name == "noisy"]
    assert noisy == [("int8-weight-only+compiled", 1, 4096, "step_reduce_overhead cv = 0.27 (> 0.25)")]
    assert sum(f.startswith("noisy") for r in raw["rows"] for f in r["flags"]) == 2


def _step_row(flags: list, **stats) -> dict:
    return {"job": "step", "scheme": "x", "base_scheme": "x", "library": "torch", "mode": "eager", "model": "m",
            "title": "M", "m": 1, "context": 8, "device": "cuda:0", "weight_dtype": "bfloat16",
            "activation_dtype": "bfloat16", "lm_head": "scheme", "blocks": 1, "flags": flags,
            "latency_us": {"step_graph": {"median": 100.0, **stats}}}


@pytest.mark.parametrize("version", [1, 2])
def test_one_noise_rule_for_old_step_rows(tmp_path, version):
    """The one noise rule (cv > NOISY_CV) decides an old step row's noisy flag when it is read: a
    reading of cv 0.30 and p90/p10 1.10 (the old p90/p10 > 1.25 rule did not flag it) is noisy; one of
    cv 0.10 and p90/p10 1.60 (flagged by the old rule) is not; judge says the same of both."""
    from qbench.judge import is_noisy
    p = tmp_path / "s.json"
    tripped = _step_row([], p10=95.0, p90=104.5, cv=0.30)
    calm = _step_row(["noisy: step_graph p90/p10 = 1.60 (> 1.25)", "throttled: sw_power_cap"], p10=80.0, p90=128.0,
                     cv=0.10)
    for row, want in ((tripped, [("noisy", "step_graph cv = 0.30 (> 0.25)")]), (calm, [("throttled", "sw_power_cap")])):
        p.write_text(json.dumps(_doc(schema_version=version, rows=[row])))
        (got,) = read_results(p).rows
        assert [(f.name, f.text) for f in got.flags] == want
        assert is_noisy(got, "step_graph") == (want[0][0] == "noisy")
    p.write_text(json.dumps(_doc(rows=[{**calm, "flags": [{"name": "noisy", "text": "kept as written"}]}])))
    assert read_results(p).rows[0].flag_names == ["noisy"]  # a current file's flags are as the worker wrote them


@pytest.mark.parametrize("version", [2, SCHEMA_VERSION])
def test_a_layer_row_with_a_sentence_for_a_reason_is_refused(tmp_path, version):
    """Layer rows wrote structured reasons from schema 2 on: only schema 1 sentences (and a schema 2
    model-step row's) are upgraded."""
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_doc(schema_version=version, rows=[_row(latency_reasons={"warm": "capture failed"})])))
    with pytest.raises(ResultsError, match=r"rows\[0\]\.latency_reasons\.warm: Input should be a valid dictionary"):
        read_results(p)
    with pytest.raises(ResultsError, match="kind"):
        write_results(p, _doc(rows=[_row(latency_reasons={"warm": {"kind": "oops", "text": "x"}})]), force=True)


def test_break_report_files_are_one_line_errors(tmp_path):
    """Break report #12, #18, #23: ``1e999``, deep nesting and a device file are refused in one line."""
    import pytest as _pytest

    from qbench.results import ResultsError, read_results

    (tmp_path / "inf.json").write_text('{"schema_version": 2, "rows": [], "x": 1e999}')
    (tmp_path / "deep.json").write_text("[" * 100000)
    for path, words in ((tmp_path / "inf.json", "overflows to infinity"), (tmp_path / "deep.json", "nested too deeply"),
                        ("/dev/zero", "not a regular file")):
        with _pytest.raises(ResultsError) as exc:
            read_results(path)
        assert words in str(exc.value) and "\n" not in str(exc.value)
