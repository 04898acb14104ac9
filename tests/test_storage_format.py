"""The storage format of a scheme (Scheme.storage_format): derived from weight_dtype by default,
overridable, checked; every registered scheme has a known one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from qbench import schemes
from qbench.schemes.base import STORAGE_FORMATS, Scheme, storage_format_of


@pytest.mark.parametrize("label, expected", [
    ("float8_e4m3fn", "8-bit float"), ("torch.float8_e5m2", "8-bit float"), ("fp8", "8-bit float"),
    ("int8", "8-bit int"), ("uint8", "8-bit int"),
    ("int4 (tinygemm packed int32)", "4-bit int"), ("int4 (in int8)", "4-bit int"), ("uint4", "4-bit int"),
    ("nf4 (2 per uint8)", "4-bit float"), ("fp4 (2 per uint8)", "4-bit float"), ("float4_e2m1fn_x2", "4-bit float"),
    ("bfloat16", "16-bit float"), ("float16", "16-bit float"), ("float32", "32-bit float"),
    ("int2", "other"), ("", "other"), (None, "other"),
])
def test_storage_format_of(label, expected):
    assert storage_format_of(label) == expected


def test_registered_schemes_have_a_known_format():
    got = {s.name: s.storage_format for s in schemes.all_schemes()}
    assert all(f in STORAGE_FORMATS and f != "other" for f in got.values()), got
    assert got["fp8-dynamic"] == got["fp8-weight-only"] == "8-bit float"
    assert got["int8-bnb"] == got["w8a8-dynamic"] == got["int8-weight-only"] == "8-bit int"
    assert got["int4-weight-only"] == got["int4-intx"] == "4-bit int"
    assert got["nf4-bnb"] == got["fp4-bnb"] == "4-bit float"
    assert got["bf16"] == got["fp16"] == "16-bit float" and got["fp32"] == got["tf32"] == "32-bit float"


def _scheme(**kw) -> Scheme:
    base = dict(name="x", library="torch", summary="", family="float", weight_dtype="mystery",
                activation_dtype=torch.bfloat16, compute_dtype="bf16", nominal_bits=8,
                build=lambda w, b, o: None, parts=lambda m: [])
    return Scheme(**{**base, **kw})


def test_override_and_bad_value():
    assert _scheme().storage_format == "other"
    assert _scheme(storage_format="8-bit int").storage_format == "8-bit int"
    assert dataclasses.replace(_scheme(weight_dtype="int8"), name="y").storage_format == "8-bit int"
    with pytest.raises(ValueError, match="storage_format 'int8'"):
        _scheme(storage_format="int8")
