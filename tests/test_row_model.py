"""The typed row model (qbench/row.py, issue 12 item 1) and what it guards against: a column that
reads a key no row carries, a reader or a fixture that names a wrong key, a producer that writes a
key or a type the model does not have. Every committed result file still loads."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from qbench import row as rowmod
from qbench.render.columns import COLUMNS, Column, field_at
from qbench.results import ResultsError, read_results, write_results
from qbench.row import (ADDED_SINCE, IDENTITY, LEGACY, TP_ROW_FIELDS, Row, RowError, check_row, field_paths,
                        row_key, schema_markdown, validate_row)
from tests.rows import full_cpu_row, full_failed_row, full_row, full_tp_row, make_row, stats
from tests.conftest import committed_results

ROOT = Path(__file__).resolve().parent.parent


def _result_files() -> list[Path]:
    out = []
    for path in [*committed_results(), *sorted((ROOT / "tests" / "fixtures" / "real").glob("*.json"))]:
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and "schema_version" in doc and isinstance(doc.get("rows"), list) and "kind" not in doc:
            out.append(path)
    return out


# ---- the model ----------------------------------------------------------------------------------------

def test_field_paths_name_every_level():
    paths = field_paths()
    for path in ("scheme", "latency_us", "latency_us.*", "latency_us.*.median", "latency_us.*.copies",
                 "error.rel_fro", "dispatch.kernels[].name", "gpu_state.by_method.*.throttle_reasons",
                 "compile.first_call_s", "compile.graph_breaks", "per_rank_median_us.*", "shard.same_as_slice",
                 "end_to_end_us.median", "unsharded_error.rel_fro", "ledger[].bytes", "error.fp8_saturated"):
        assert path in paths, path
    for wrong in ("compile.compile_s", "latency_us.*.p50", "error.rel_err", "stored_byte", "compile_s"):
        assert wrong not in paths
    names = {p.rsplit(".", 1)[-1].removesuffix("[]") for p in field_paths()}
    assert {"median", "rel_fro", "first_call_s", "kind", "sm_clock_mhz"} <= names
    assert "compile_s" not in names


def test_identity_and_tp_fields():
    assert IDENTITY == ("scheme", "m", "k", "n", "tp_size", "split")
    assert row_key(make_row(scheme="bf16", m=1, k=8, n=4, status="ok")) == ("bf16", 1, 8, 4, None, None)
    assert row_key(full_tp_row()) == ("int8-weight-only+compiled", 1, 4096, 4096, 2, "row")
    assert TP_ROW_FIELDS == ("tp_size", "split", "collective", "reduce_dtype", "shard", "local_gemm_us",
                             "collective_us", "end_to_end_us", "per_rank_median_us", "collective_bytes",
                             "collective_data_bytes", "collective_busbw_gbps", "unsharded_error",
                             "sharded_vs_unsharded", "stored_bytes_all_ranks", "speedup_vs_tp1",
                             "speedup_vs_tp1_method", "cpu_threads_per_rank")
    from qbench.tp.measure import TP_FIELDS

    assert TP_FIELDS == TP_ROW_FIELDS


def test_full_rows_are_complete_for_the_producer():
    for row in (full_row(), full_failed_row(), full_cpu_row(), full_tp_row()):
        assert isinstance(validate_row(row, writing=True), Row)


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("flags"), "flags: missing (the producer writes it on every row)"),
    (lambda r: r["latency_us"]["cold"].pop("cv"), "latency_us.cold: cv: missing"),
    (lambda r: r["error"].update(fp8_saturated=3), "error: fp8_saturated: a legacy field"),
    (lambda r: r["compile"].pop("graph_breaks"), "compile: graph_breaks: missing"),
    (lambda r: r.update(tp_size=2, split="row"), "collective: missing (every tensor-parallel row carries all of"),
])
def test_the_producer_rules_refuse_what_reading_accepts(change, message):
    row = full_row()
    change(row)
    validate_row(row)  # an older file may look like this
    with pytest.raises(RowError) as exc:
        validate_row(row, writing=True)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("fields, message", [
    (dict(compile={"compile_s": 14.2}), "compile.compile_s: Extra inputs are not permitted (got 14.2)"),
    (dict(latency_us={"stream": {"median": 1.0, "p50": 1.0}}), "latency_us.stream.p50: Extra inputs are not permitted"),
    (dict(latency_us={"cold": stats(1.0, how="deepcopy")}), "latency_us.cold.how: a stream key on a cold record"),
    (dict(latency_us={"stream": stats(1.0, launch="hidden")}), "latency_us.stream.launch: a cold key on a stream record"),
    (dict(gpu_state={"by_method": {"hot": {}}}), "gpu_state.by_method: unknown timing method 'hot'"),
    (dict(dispatch={"label": "fused"}), "dispatch.label: dispatch label 'fused' is not one of"),
    (dict(stored_bytes=1.5), "stored_bytes: Input should be a valid integer (got 1.5)"),
    (dict(flops="2"), "flops: Input should be a valid integer (got '2')"),
    (dict(mode="jit"), "mode: Input should be 'eager' or 'compiled' (got 'jit')"),
])
def test_a_wrong_key_or_type_is_one_line(fields, message):
    with pytest.raises(RowError) as exc:
        make_row(scheme="bf16", m=1, k=8, n=8, status="ok", **fields)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# ---- every committed result file loads; legacy keys are handled explicitly -----------------------------

def test_every_committed_result_file_loads():
    """Every result document under results/ and tests/fixtures/real/ loads with all its rows (a
    model-step file's as StepRow)."""
    files = _result_files()
    assert len(files) >= 22
    for path in files:
        doc = read_results(path)
        assert len(doc.rows) == len(json.loads(path.read_text())["rows"]), path
        assert (doc.job == "step") == ("step" in path.stem.split("_")), path  # step_*, *_step_*, *_step


def test_legacy_and_added_fields_are_real_and_explicit():
    """Each legacy field is in some committed file and in no row the producer writes; each field
    added since is absent from some committed file and present in another."""
    docs = {p: json.loads(p.read_text()) for p in _result_files()}

    def has(row: dict, path: str) -> bool:
        cur = row
        for part in path.split("."):
            if not isinstance(cur, dict) or part not in cur:
                return False
            cur = cur[part]
        return True

    assert set(LEGACY) == {"error.fp8_saturated"}
    with_legacy = [p for p, d in docs.items() if any(has(r, "error.fp8_saturated") for r in d["rows"])]
    assert len(with_legacy) == 9  # the 2026-11-30 H200 files and the two older decode files of tests/fixtures/real
    for path in ADDED_SINCE:
        candidates = [r for d in docs.values() for r in d["rows"]
                      if r["status"] == "ok" and (not path.startswith("compile.") or r.get("compile"))]
        assert any(has(r, path) for r in candidates) and not all(has(r, path) for r in candidates), path
        assert path in field_paths()


def test_reading_then_writing_an_old_file_keeps_its_legacy_keys(tmp_path):
    doc = read_results(ROOT / "tests" / "fixtures" / "real" / "h200_decode_2026-11-30.json")
    assert any(r.error is not None and "fp8_saturated" in r.error.model_fields_set for r in doc.rows)
    write_results(tmp_path / "copy.json", doc)  # the writer checks keys and types, not the producer's rules
    assert read_results(tmp_path / "copy.json") == doc


# ---- the producer checks its rows ------------------------------------------------------------------------

def _scenario(tmp_path, names=("fp32",), k=64, n=32):
    from qbench import scenario
    from tests.conftest import small_scenario_toml

    path = tmp_path / "s.toml"
    path.write_text(small_scenario_toml(list(names), m=(1, 2), k=k, n=n))
    return scenario.load(path)


def test_measured_rows_fit_the_producer_rules(tmp_path):
    from qbench.measure import measure_scheme

    rows = measure_scheme(_scenario(tmp_path), 0, torch.device("cpu"))
    assert [(r["scheme"], r["m"], r["status"]) for r in rows] == [("fp32", 1, "ok"), ("fp32", 2, "ok")]
    for row in rows:
        validate_row(row, writing=True)
        assert row["payload_bytes"] == 64 * 32 * 4 and row["latency_us"]["cpu"]["n"] >= 3


def test_a_producer_writing_an_unknown_key_fails_loudly(tmp_path, monkeypatch):
    from qbench import measure, metrics
    from qbench.measure import measure_scheme

    real = metrics.error_metrics
    monkeypatch.setattr(measure.metrics, "error_metrics", lambda y, ref: {**real(y, ref), "rel_err": 0.0})
    with pytest.raises(RowError, match=r"^error\.rel_err: Extra inputs are not permitted \(got 0\.0\)$"):
        measure_scheme(_scenario(tmp_path), 0, torch.device("cpu"))


def test_a_producer_writing_a_wrong_type_fails_loudly(tmp_path, monkeypatch):
    from qbench import formulas
    from qbench.measure import measure_scheme

    monkeypatch.setattr(formulas, "flops", lambda m, k, n: 2.0 * m * k * n)
    with pytest.raises(RowError, match=r"^flops: Input should be a valid integer \(got 4096\.0\)$"):
        measure_scheme(_scenario(tmp_path), 0, torch.device("cpu"))


def test_skipped_rows_of_every_scheme_fit(tmp_path):
    from qbench import schemes
    from qbench.measure import base_row, checked, failed_rows

    sc = _scenario(tmp_path, sorted(schemes.names()), k=256, n=256)
    rows = [base_row(sc, e, schemes.get(e.name), 1, torch.device("cpu")) for e in sc.schemes]
    assert len(checked(failed_rows(rows, "skipped", "why"))) == len(schemes.names())


def test_tp_rows_fit_the_producer_rules(tmp_path):
    from qbench.tp.measure import tp_row

    row = tp_row(_scenario(tmp_path), 0, 1, torch.device("cpu"), 2, "column")
    assert (row["tp_size"], row["split"], row["collective"]) == (2, "column", "all_gather")
    assert all(f in row for f in TP_ROW_FIELDS)
    validate_row(row, writing=True)


def test_the_writer_refuses_a_row_with_an_unknown_key_and_writes_nothing(tmp_path):
    row = full_row()
    row["compile"]["compile_s"] = 14.2
    doc = {"schema_version": 1, "complete": True, "rows": [row]}
    path = tmp_path / "r.json"
    with pytest.raises(ResultsError) as exc:
        write_results(path, doc)
    assert str(exc.value) == (f"{path}: not written: rows[0].compile.compile_s: Extra inputs are not permitted "
                              "(got 14.2)")
    assert not path.exists() and list(tmp_path.iterdir()) == []


# ---- the column catalogue reads fields of the model --------------------------------------------------------

_FULL_ROWS = {"ok": full_row, "failed": full_failed_row, "cpu": full_cpu_row, "tp": full_tp_row}


def _values(column: Column) -> list:
    """The column's value on each complete row, as readers hold it (a :class:`Row`); a getter that
    names an attribute no row has raises AttributeError here."""
    values = []
    for make in _FULL_ROWS.values():
        row = validate_row(make())
        values.append(column.value(row))
        column.cell(row)
    return values


@pytest.mark.parametrize("key", list(COLUMNS))
def test_every_column_reads_fields_of_the_model_and_shows_a_value(key):
    values = _values(COLUMNS[key])
    assert any(v is not None for v in values), f"column {key} is empty on every complete row"


def test_the_column_check_catches_a_key_no_row_carries():
    """The issue's example: a compile_s column that read compile.compile_s was always a dash."""
    bad = Column("compile_s", "compile s", field_at("compile", "compile_s"))
    with pytest.raises(AttributeError, match="compile_s"):
        _values(bad)
    assert COLUMNS["compile_s"].value(validate_row(full_row())) == 5.5


def test_known_values_of_complete_rows():
    ok, cpu, tp = (validate_row(r) for r in (full_row(), full_cpu_row(), full_tp_row()))
    assert COLUMNS["stream_copies"].value(ok) == 15 and COLUMNS["graphs"].value(ok) == 1
    assert COLUMNS["graph_breaks"].value(ok) == 0 and COLUMNS["flags"].value(ok) == "above-ceiling"
    assert COLUMNS["cpu"].value(cpu) == 61.0 and COLUMNS["cold"].value(cpu) is None
    assert (COLUMNS["tp_size"].value(tp), COLUMNS["split"].value(tp), COLUMNS["end_to_end_us"].value(tp)) == (2, "row", 14.5)
    assert COLUMNS["reason"].value(validate_row(full_failed_row())) == "run: RuntimeError: an example failure"


# ---- readers hold typed rows --------------------------------------------------------------------------------

#: Every module that reads result rows: the reader commands, the renderers and the decision rules.
TYPED_READERS = sorted(str(p.relative_to(ROOT)) for folder in ("qbench/readers", "qbench/render")
                       for p in (ROOT / folder).glob("*.py")) + ["qbench/judge.py"]


def string_keys(source: str) -> tuple[list[tuple[int, str]], set[str]]:
    """``(line, key)`` of every string-key read in ``source`` (``x["key"]``, ``x.get("key")``,
    ``x.setdefault("key")``, ``x.pop("key")``) and the set of keys the module itself puts into
    dicts it builds (dict displays, ``dict(key=...)`` / ``.update(key=...)``, ``x["key"] = ...``)."""
    reads, built = [], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            if isinstance(node.ctx, ast.Store):
                built.add(node.slice.value)
            else:
                reads.append((node.lineno, node.slice.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "setdefault", "pop") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                reads.append((node.lineno, node.args[0].value))
            if node.func.attr == "update":
                built |= {kw.arg for kw in node.keywords if kw.arg}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            built |= {kw.arg for kw in node.keywords if kw.arg}
        elif isinstance(node, ast.Dict):
            built |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return reads, built


def row_key_reads(source: str) -> list[str]:
    """The string-key reads in ``source`` of a row field that is not also a key of a record the
    module builds itself: a row read as a dict instead of through :class:`qbench.row.Row`."""
    row_keys = {p.rsplit(".", 1)[-1].removesuffix("[]") for p in field_paths() if not p.endswith("*")}
    reads, built = string_keys(source)
    return [f"line {line}: {key!r}" for line, key in reads if key in row_keys and key not in built]


@pytest.mark.parametrize("module", TYPED_READERS)
def test_readers_read_rows_through_the_typed_api(module):
    assert row_key_reads((ROOT / module).read_text()) == []


def test_the_typed_api_scan_catches_a_dict_read_of_a_row():
    source = ('def f(row):\n'
              '    a = (row.get("compile") or {}).get("graphs_compiled")\n'
              '    b = row["stored_bytes"]\n'
              '    rec = {"scheme": row.scheme}\n'
              '    return rec["scheme"], row.latency_us["stream"]\n')
    assert sorted(row_key_reads(source)) == ["line 2: 'compile'", "line 2: 'graphs_compiled'", "line 3: 'stored_bytes'"]
    assert len(TYPED_READERS) >= 12 and "qbench/readers/report.py" in TYPED_READERS


# ---- the docs -----------------------------------------------------------------------------------------------

def test_results_schema_doc_is_generated_from_the_model():
    text = (ROOT / "docs" / "results-schema.md").read_text()
    marker = "<!-- gen:row-schema -->\n"
    assert marker in text
    body = text.split(marker, 1)[1].split("<!-- /gen -->", 1)[0]
    assert body == schema_markdown().rstrip("\n") + "\n"
    for name in Row.model_fields:
        assert f"| `{name}` |" in body, name
    assert "| `compile_s` |" not in body


def test_schema_markdown_marks_when_fields_are_written():
    text = schema_markdown()
    assert "| `tp_size` | int or null | tensor-parallel rows |" in text
    assert "| `flags` | list of Flag | always |" in text and "absent in files written before 2026-11-30" in text
    assert "| `kind` | `capture-failed` \\| `not-attempted`" in text
    assert "| `fp8_saturated` | int or null | never (legacy) |" in text
    assert "| `median` | float or null | always | median, µs per call |" in text


def test_check_row_returns_the_row_unchanged():
    row = {"scheme": "bf16", "m": 1, "k": 8, "n": 8, "status": "ok", "nominal_bits": 16}
    assert check_row(row) is row and row == {"scheme": "bf16", "m": 1, "k": 8, "n": 8, "status": "ok",
                                             "nominal_bits": 16}
    assert rowmod.validate_row(row).nominal_bits == 16.0


def test_preset_starts_a_row_with_every_always_written_field():
    row = Row.preset(scheme="bf16", base_scheme="bf16", m=1, k=8, n=8, flops=128)
    always = [n for n, f in Row.model_fields.items() if (f.json_schema_extra or {}).get("always")]
    assert list(row) == always  # the model's order, nothing else
    assert row["status"] == "ok" and row["latency_us"] == {} and row["flags"] == [] and row["options"] == {}
    assert row["flops"] == 128 and row["stored_bytes"] is None and row["error"] is None
    assert Row.preset(scheme="x", m=1, k=8, n=8)["latency_reasons"] is not row["latency_reasons"]  # fresh dicts
    with pytest.raises(RowError, match="stored_byte"):
        Row.preset(scheme="x", m=1, k=8, n=8, stored_byte=10)


def test_the_producers_helpers_of_every_job_kind():
    """qbench.row.failed_rows / dtype_name / describe_exception: what the layer, step and tp producers write."""
    import torch

    from qbench.row import describe_exception, dtype_name, failed_rows

    rows = failed_rows([{"status": "ok"}, {"status": "ok"}], "failed", "build: first\n\n  last  \n")
    assert rows == [{"status": "failed", "reason": "build: first … last"}] * 2
    assert failed_rows([{"status": "ok"}], "skipped", "  ") == [{"status": "skipped", "reason": "skipped"}]
    assert [dtype_name(d) for d in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn)] == [
        "bfloat16", "float16", "float32", "float8_e4m3fn"]
    assert describe_exception(ValueError("bad\nsee https://x")) == "ValueError: bad … see https://x"
