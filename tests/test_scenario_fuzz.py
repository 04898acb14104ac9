"""Fuzzing the scenario loader: whatever the document, the answer is a Scenario or a ScenarioError.

Three sources of documents: arbitrary TOML-able values (every TOML type: strings, 64-bit
integers, floats with inf and nan, booleans, dates and times, arrays, tables), near-valid
scenarios built from the real keys with one or more values or keys replaced, and arbitrary text
(and bytes) written to a file and read with :func:`qbench.scenario.load`. Any other exception, or
a ScenarioError whose message is not one line starting with the source, fails the test.
``QBENCH_FUZZ_EXAMPLES`` sets the examples per test (default 150; 3000 ran clean).
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qbench import schemes
from qbench.scenario import Scenario, ScenarioError, from_dict, load

SOURCE = "fuzz.toml"
FUZZ = settings(max_examples=int(os.environ.get("QBENCH_FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_scalars = st.one_of(
    st.text(max_size=20), _int64, st.integers(min_value=-3, max_value=5000), st.floats(allow_nan=True),
    st.booleans(), st.dates(), st.times(), st.datetimes(timezones=st.none() | st.just(dt.timezone.utc)),
)
_keys = st.text(max_size=12)
toml_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
                           max_leaves=12)

REAL_KEYS = {
    "": ["name", "description", "seed", "device", "output", "m", "layer", "timing", "inputs", "weight", "schemes"],
    "layer": ["in_features", "out_features", "bias"],
    "timing": ["warmup", "min_reps", "max_reps", "target_rel_ci", "budget_s", "graph_calls", "flush_multiple",
               "methods", "scheme_timeout_s"],
    "inputs": ["outlier_fraction", "outlier_magnitude"],
    "weight": ["source", "path", "tensor"],
    "scheme": ["name", "mode", "label", "threshold", "blocksize", "double_quant", "group_size", "mapping",
               "granularity"],
}
#: Values a real scenario would plausibly hold, so mutations stay close to valid.
_plausible = st.one_of(
    st.sampled_from([0, 1, -1, 2, 7, 32, 64, 96, 128, 200, 256, 4096, 2**20, 2**20 + 1, 2**17, 2**63 - 1]),
    st.sampled_from([0.0, 0.5, 1.0, -1.0, 1e9, float("inf"), float("nan"), 1e-300]),
    st.sampled_from(["", "x", "fp16", "cuda", "cuda:1", "cpu", "auto", "gpu", "random", "safetensors", "cold",
                     "eager", "compiled", "per-row", "asymmetric", "/dev/null/x.json", "w.safetensors", "a b"]),
    st.booleans(), st.lists(st.integers(min_value=-2, max_value=600), max_size=4),
    st.lists(st.sampled_from(["cold", "warm", "eager", "kernel", "hot"]), max_size=5),
    st.sampled_from(list(schemes.names()) + ["int4_intx", "nf4"]),
)


def _valid() -> dict:
    return {"name": "fuzz", "m": [1, 16], "layer": {"in_features": 256, "out_features": 128, "bias": False},
            "timing": {"warmup": 1, "min_reps": 3, "max_reps": 10}, "schemes": ["fp16", {"name": "int4-intx", "group_size": 64}]}


@st.composite
def near_valid(draw) -> dict:
    """A valid scenario with 1 to 4 edits: a real key set to a plausible or arbitrary value, a
    key removed, or an unknown key added, at the top, in a section, or in a scheme table."""
    doc = _valid()
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        where = draw(st.sampled_from(["", "layer", "timing", "inputs", "weight", "scheme"]))
        if where == "":
            table = doc
        elif where == "scheme":
            schemes_ = doc.get("schemes")
            if not isinstance(schemes_, list) or not schemes_:
                continue
            i = draw(st.integers(min_value=0, max_value=len(schemes_) - 1))
            if not isinstance(schemes_[i], dict):
                schemes_[i] = {"name": schemes_[i]} if isinstance(schemes_[i], str) else {}
            table = schemes_[i]
        else:
            if not isinstance(doc.get(where), dict):
                doc[where] = {}
            table = doc[where]
        action = draw(st.sampled_from(["set", "set", "set", "delete", "unknown"]))
        key = draw(st.sampled_from(REAL_KEYS[where]))
        if action == "set":
            table[key] = draw(st.one_of(_plausible, _plausible, toml_values))
        elif action == "delete":
            table.pop(key, None)
        else:
            table[draw(_keys)] = draw(_plausible)
    return doc


def _check(make) -> None:
    try:
        result = make()
    except ScenarioError as exc:
        msg = str(exc)
        assert msg.startswith(exc.source + ": ") and "\n" not in msg and "\r" not in msg, msg
        return
    assert isinstance(result, Scenario)
    assert from_dict(result.to_dict(), result.source) == result  # the scenario as run round-trips


@FUZZ
@given(st.dictionaries(st.one_of(_keys, st.sampled_from(REAL_KEYS[""])), toml_values, max_size=8))
def test_arbitrary_tables(data):
    _check(lambda: from_dict(data, SOURCE))


@FUZZ
@given(toml_values)
def test_arbitrary_top_level_values(data):
    _check(lambda: from_dict(data, SOURCE))


@FUZZ
@given(near_valid())
def test_near_valid_scenarios(data):
    _check(lambda: from_dict(data, SOURCE))


def _load_bytes(blob: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.toml"
        path.write_bytes(blob)
        return load(path)


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_through_load(text):
    _check(lambda: _load_bytes(text.encode("utf-8", "surrogatepass")))


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_through_load(blob):
    _check(lambda: _load_bytes(blob))


@FUZZ
@given(st.lists(st.sampled_from(['name = "x"\n', "m = [1, 4]\n", "m = 0\n", 'schemes = ["fp16"]\n',
                                 "[layer]\n", "in_features = 256\n", "in_features = 200\n", "[timing]\n",
                                 "budget_s = nan\n", "methods = []\n", "[[schemes]]\n", 'name = "nf4-bnb"\n',
                                 "blocksize = 32\n", "[inputs]\n", "outlier_fraction = 0.5\n", "[weight]\n",
                                 'source = "safetensors"\n', "a = [" * 3, "]\n", "x = {\n", "= 1\n"]),
                max_size=14))
def test_toml_fragments_through_load(lines):
    _check(lambda: _load_bytes("".join(lines).encode()))


def test_deeply_nested_toml_is_a_scenario_error(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("m = " + "[" * 5000 + "]" * 5000 + "\n")
    try:
        load(path)
    except ScenarioError as exc:
        assert "nested too deeply" in str(exc) or "not valid TOML" in str(exc)
    else:
        raise AssertionError("a 5000-deep array loaded")
