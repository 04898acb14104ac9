"""The fixtures keep the contract with what qbench writes (tests/fixture_contract.py, issue 16):
every key and type they carry is in real committed rows, every scheme is registered, every dispatch
label is in the label set, and the checker reports a fixture that breaks any of it."""

from __future__ import annotations

import copy
import json
import pytest

from tests.fixture_contract import FIXTURES, real_key_types, violations

FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.json") if p.name != "schema_v99.json")


def _load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_fixture_keeps_the_contract(name):
    assert violations(_load(name), name) == []


def test_every_fixture_file_is_checked():
    assert set(FIXTURE_FILES) == {"cpu.json", "cpu_stream.json", "cuda_run1.json", "cuda_run2_noise.json",
                                  "cuda_run3_slower.json", "cuda_stream.json"}


def test_real_rows_are_read():
    real = real_key_types()
    assert real["rows[].stored_bytes"] >= {"int", "null"}  # ok rows and the producer's skipped rows
    assert real["rows[].latency_us.stream.copies"] == {"int"}
    assert "rows[].compile.first_call_s" in real and "rows[].compile.compile_s" not in real


def _one_of(bad: list[str], *words: str) -> bool:
    return any(all(w in line for w in words) for line in bad)


@pytest.fixture
def run1():
    return _load("cuda_run1.json")


def _row(doc, scheme, m):
    return next(r for r in doc["rows"] if r["scheme"] == scheme and r["m"] == m)


def test_an_invented_key_is_reported(run1):
    doc = copy.deepcopy(run1)
    _row(doc, "bf16", 1)["compile"] = {"compile_s": 14.2}  # the key the compile_s column once read
    _row(doc, "fp16", 1)["latency_us"]["cold"]["p50"] = 11.0
    bad = violations(doc, "invented")
    assert _one_of(bad, "invented: key 'rows[].compile.compile_s' is in no real row")
    assert _one_of(bad, "'rows[].latency_us.cold.p50' is in no real row")
    assert len(bad) == 2, bad


def test_a_wrong_type_is_reported(run1):
    doc = copy.deepcopy(run1)
    _row(doc, "bf16", 1)["latency_us"]["cold"]["n"] = "200"
    _row(doc, "bf16", 16)["latency_us"]["cold"]["n"] = 200.0  # n is an int in real rows
    _row(doc, "bf16", 512)["latency_us"]["cold"]["median"] = 31  # an int where real rows have floats: fine
    bad = violations(doc, "typed")
    assert _one_of(bad, "'rows[].latency_us.cold.n' is str here")
    assert _one_of(bad, "'rows[].latency_us.cold.n' is float here")
    assert len(bad) == 2, bad


def test_invented_scheme_label_and_dtype_are_reported(run1):
    doc = copy.deepcopy(run1)
    _row(doc, "fp8-dynamic", 1)["scheme"] = "fp8-rowwise"
    _row(doc, "bf16", 1)["dispatch"]["label"] = "torch gemv"
    _row(doc, "bf16", 16)["weight_dtype"] = "bf16"
    _row(doc, "nf4-bnb", 16)["activation_dtype"] = "bf16"
    _row(doc, "tf32", 16)["latency_us"]["hot"] = None
    bad = violations(doc, "drift")
    assert _one_of(bad, "scheme base 'fp8-rowwise' is not registered")
    assert _one_of(bad, "dispatch label 'torch gemv' is not one of")
    assert _one_of(bad, "bf16 M=16: weight_dtype 'bf16', the scheme declares 'bfloat16'")
    assert _one_of(bad, "nf4-bnb M=16: activation_dtype 'bf16', the scheme declares 'bfloat16'")
    assert _one_of(bad, "latency method 'hot' is not in the timing registry")


def test_producer_invariants_are_checked(run1):
    doc = copy.deepcopy(run1)
    _row(doc, "fp16", 512)["error"]["cosine"] = 0.99  # 12 non-finite outputs: the producer writes null
    int8 = _row(doc, "int8-weight-only", 1)
    int8["metadata_bytes"] = 8192  # the old fixture's int8 metadata (real: 20,480 = 4 N scale + N zero point)
    int8["stored_bytes"] = int8["payload_bytes"] + 8192
    nf4 = _row(doc, "nf4-bnb", 1)
    nf4["min_bytes"] -= 64  # the weight term from payload bytes... or anything but the stored bytes
    bf16 = _row(doc, "bf16", 1)
    bf16["stored_bytes"] += 1
    bad = violations(doc, "inv")
    assert _one_of(bad, "fp16 M=512: 12 non-finite outputs but ['cosine'] set")
    assert _one_of(bad, "int8-weight-only M=1: metadata_bytes 8192 != 20480 of the real int8-weight-only row")
    assert _one_of(bad, "int8-weight-only M=1: ledger metadata parts sum to 20480, metadata_bytes is 8192")
    assert _one_of(bad, "nf4-bnb M=1: min_bytes", "formulas.min_bytes of stored bytes")
    assert _one_of(bad, "bf16 M=1: stored_bytes 33554433 != payload + metadata + bias = 33554432")


def test_ledger_part_names_are_the_real_ones(run1):
    doc = copy.deepcopy(run1)
    int8 = _row(doc, "int8-weight-only", 16)
    int8["ledger"] = [{"name": "weight", "role": "payload", "dtype": "int8", "shape": [4096, 4096],
                       "bytes": int8["payload_bytes"]},
                      {"name": "scale", "role": "metadata", "dtype": "float32", "shape": [4096],
                       "bytes": int8["metadata_bytes"]}]
    bad = violations(doc, "parts")
    assert bad == ["parts: int8-weight-only M=16: ledger parts ['weight', 'scale'] != the real row's "
                   "['weight.qdata', 'weight.scale', 'weight.zero_point']"]
