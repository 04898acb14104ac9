"""The contract between the test fixtures and what qbench really writes (issue 16).

:func:`violations` compares a result document (a fixture) with real, committed result files
and returns one line per drift:

* a key path (``rows[].latency_us.cold.p10``) or a type at that path (``null``, ``bool``,
  ``int``, ``float``, ``str``, ``list``, ``dict``) that no real row or document carries (an ``int``
  is accepted where real rows have a ``float``: JSON writes 2.0 as 2);
* a scheme name whose base (before ``+compiled`` / ``[options]``) is not registered in
  :mod:`qbench.schemes`, or a ``base_scheme`` that differs from it;
* a ``dispatch.label`` outside :data:`qbench.dispatch.LABELS`, a ``compute_dtype`` or
  ``weight_dtype`` / ``activation_dtype`` that the scheme does not declare;
* producer invariants: a row with non-finite outputs has every other error figure null
  (``qbench.metrics.error_metrics``); ``stored_bytes = payload + metadata + bias``; the ledger's
  parts sum to the payload and metadata bytes; ``min_bytes`` and ``arithmetic_intensity`` follow
  ``qbench.formulas`` from the stored bytes;
* where a real file has the same scheme label (``+compiled`` aside: compiling keeps the weight) and
  (K, N): payload and metadata bytes and
  the ledger's part names that differ from the real row's.

The real rows are those of :data:`REAL_FILES` plus the ``skipped`` and ``failed`` rows the
producer's own ``base_row`` / ``failed_rows`` make (no committed file has a failed row).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The 2026-11-30 H200 decode file and the sweep file the fixtures were made from
#: (tests/fixtures/make_fixtures.py), the CPU decode file of the same days (its rows, from before CPU
#: ceilings were measured, carry a ``roofline_reason``) and the current CPU decode file.
REAL_FILES = ("tests/fixtures/real/h200_decode_2026-11-30.json", "tests/fixtures/real/cpu_decode_2026-12-01.json",
              "results/cpu/decode.json", "results/h200/sweep.json")
FIXTURES = ROOT / "tests" / "fixtures"
#: Per-run fields of a document, not of the result schema's rows: their sub-keys are the
#: scenario's / machine's own (checked by qbench.scenario and qbench.env), not by this contract.
FREE_FORM = ("env", "scenario", "ceilings")
#: Keys whose children are named by data (method names, scheme options): checked by name lists.
_METHODS_KEYS = ("latency_us", "latency_reasons")


def type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    for t in (int, float, str, list, dict):
        if isinstance(value, t):
            return t.__name__
    return type(value).__name__


def key_types(value, path: str = "", out: dict | None = None) -> dict[str, set[str]]:
    """Every key path in ``value`` with the set of JSON types found there. Lists become ``[]``."""
    out = {} if out is None else out
    out.setdefault(path, set()).add(type_name(value))
    if isinstance(value, dict):
        for key, child in value.items():
            key_types(child, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list):
        for child in value:
            key_types(child, f"{path}[]", out)
    return out


def _producer_rows() -> list[dict]:
    """Skipped and failed rows as qbench.measure makes them (identity fields, the rest null), and
    the ``error`` that qbench.metrics writes for an output with non-finite elements and against an
    all-zero reference."""
    import torch

    from qbench import schemes
    from qbench.metrics import error_metrics
    from qbench.measure import base_row, failed_rows
    from qbench.scenario import from_dict

    sc = from_dict({"name": "contract", "m": [1, 16], "layer": {"in_features": 256, "out_features": 256},
                    "schemes": sorted(schemes.names())}, "contract.toml")
    rows = []
    for entry in sc.schemes:
        scheme = schemes.get(entry.name)
        for status in ("skipped", "failed"):
            made = [base_row(sc, entry, scheme, m, torch.device("cpu")) for m in sc.m]
            rows += failed_rows(made, status, "RuntimeError: a reason")
    ref = torch.ones(2, 2, dtype=torch.float64)
    for y, r in ((torch.tensor([[float("nan"), 1.0], [1.0, 1.0]]), ref), (torch.ones(2, 2), torch.zeros_like(ref))):
        rows.append({"error": error_metrics(y, r)})
    return rows


@functools.cache
def real_docs() -> tuple[dict, ...]:
    return tuple(json.loads((ROOT / f).read_text()) for f in REAL_FILES)


@functools.cache
def real_key_types() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for doc in real_docs():
        key_types({k: v for k, v in doc.items() if k != "rows"}, "", out)
        for row in doc["rows"]:
            key_types(row, "rows[]", out)
    for row in _producer_rows():
        key_types(row, "rows[]", out)
    return out


def _skip(path: str) -> bool:
    head = path.split(".")[0].split("[")[0]
    return head in FREE_FORM


def _normalise(path: str) -> str:
    """``rows[].latency_us.cold.p10`` -> ``rows[].latency_us.*.p10``: method names are data."""
    parts = path.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in _METHODS_KEYS:
            parts[i + 1] = "*"
    return ".".join(parts)


@functools.cache
def _real_normalised() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path, types in real_key_types().items():
        out.setdefault(_normalise(path), set()).update(types)
    return out


def _itemsize(name) -> int | None:
    """Bytes per element of a dtype named as rows name it (``bfloat16``); None for another name."""
    import torch

    dtype = getattr(torch, str(name), None)
    return torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else None


def _real_rows_by_layout() -> dict[tuple, dict]:
    out = {}
    for doc in real_docs():
        for row in doc["rows"]:
            if row.get("status") == "ok" and row.get("payload_bytes") is not None:
                key = (row["scheme"].replace("+compiled", ""), row["k"], row["n"])
                out.setdefault(key, row)
    return out


def violations(doc: dict, name: str = "fixture") -> list[str]:
    """What ``doc`` carries that real result files do not; ``[]`` when it keeps the contract."""
    from qbench import dispatch, formulas, schemes
    from qbench.timing import registry

    bad: list[str] = []
    real = _real_normalised()
    found: dict[str, set[str]] = {}
    key_types({k: v for k, v in doc.items() if k != "rows"}, "", found)
    for row in doc.get("rows") or []:
        key_types(row, "rows[]", found)
    for path, types in sorted(found.items()):
        if not path or _skip(path):
            continue
        norm = _normalise(path)
        if norm not in real:
            bad.append(f"{name}: key {path!r} is in no real row")
            continue
        for t in sorted(types):
            if t not in real[norm] and not (t == "int" and "float" in real[norm]):
                bad.append(f"{name}: {path!r} is {t} here, real rows have {sorted(real[norm])}")
    layouts = _real_rows_by_layout()
    for row in doc.get("rows") or []:
        where = f"{name}: {row.get('scheme')} M={row.get('m')}"
        label = str(row.get("scheme", ""))
        base = label.split("[")[0].split("+")[0]
        if base not in schemes.names():
            bad.append(f"{where}: scheme base {base!r} is not registered (known: {', '.join(schemes.names())})")
            continue
        scheme = schemes.get(base)
        if row.get("base_scheme") != base:
            bad.append(f"{where}: base_scheme {row.get('base_scheme')!r} != {base!r}")
        for key, want in (("compute_dtype", scheme.compute_dtype), ("weight_dtype", scheme.weight_dtype),
                          ("library", scheme.library)):
            if key in row and row[key] != want:
                bad.append(f"{where}: {key} {row[key]!r}, the scheme declares {want!r}")
        from qbench.measure import dtype_name

        if "activation_dtype" in row and row["activation_dtype"] != dtype_name(scheme.activation_dtype):
            bad.append(f"{where}: activation_dtype {row['activation_dtype']!r}, the scheme declares "
                       f"{dtype_name(scheme.activation_dtype)!r}")
        for method in list(row.get("latency_us") or {}) + list(row.get("latency_reasons") or {}):
            if method not in registry.METHODS:
                bad.append(f"{where}: latency method {method!r} is not in the timing registry")
        label_ = (row.get("dispatch") or {}).get("label")
        if label_ is not None and label_ not in dispatch.LABELS:
            bad.append(f"{where}: dispatch label {label_!r} is not one of {dispatch.LABELS}")
        err = row.get("error") or {}
        if err.get("nonfinite"):
            extra = [k for k in ("rel_fro", "abs_fro", "max_abs", "sqnr_db", "cosine")
                     if err.get(k) is not None and not (isinstance(err[k], float) and math.isnan(err[k]))]
            if extra:
                bad.append(f"{where}: {err['nonfinite']} non-finite outputs but {extra} set (the producer "
                           f"writes null)")
        if row.get("status") != "ok" or row.get("payload_bytes") is None:
            continue
        stored = row["payload_bytes"] + row["metadata_bytes"] + row["bias_bytes"]
        if row.get("stored_bytes") != stored:
            bad.append(f"{where}: stored_bytes {row.get('stored_bytes')} != payload + metadata + bias = {stored}")
        parts = row.get("ledger") or []
        for role, key in (("payload", "payload_bytes"), ("metadata", "metadata_bytes")):
            total = sum(p["bytes"] for p in parts if p.get("role") == role)
            if total != row[key]:
                bad.append(f"{where}: ledger {role} parts sum to {total}, {key} is {row[key]}")
        act, out = _itemsize(row.get("activation_dtype")), _itemsize(row.get("output_dtype"))
        if row.get("min_bytes") is not None and act and out:
            want_min = formulas.min_bytes(row["m"], row["k"], row["n"], weight_bytes=stored, act_itemsize=act,
                                          out_itemsize=out)
            if row["min_bytes"] != want_min:
                bad.append(f"{where}: min_bytes {row['min_bytes']} != {want_min} (formulas.min_bytes of stored bytes)")
            ai = row.get("arithmetic_intensity")
            if ai is not None and not math.isclose(ai, row["flops"] / want_min, rel_tol=1e-12):
                bad.append(f"{where}: arithmetic_intensity {ai} != flops / min_bytes")
        twin = layouts.get((label.replace("+compiled", ""), row["k"], row["n"]))
        if twin is not None:
            for key in ("payload_bytes", "metadata_bytes"):
                if row[key] != twin[key]:
                    bad.append(f"{where}: {key} {row[key]} != {twin[key]} of the real {twin['scheme']} row "
                               f"(K={row['k']}, N={row['n']})")
            names, real_names = [p["name"] for p in parts], [p["name"] for p in twin["ledger"]]
            if names != real_names:
                bad.append(f"{where}: ledger parts {names} != the real row's {real_names}")
    return bad
