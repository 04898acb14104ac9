"""The figures in prose of docs/speed.md, recomputed from the committed files they cite."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEED = ROOT / "results" / "h200" / "speed"
TEXT = " ".join((ROOT / "docs" / "speed.md").read_text().split())


def _load(name: str) -> dict:
    return json.loads((SPEED / name).read_text())


def test_wall_times_and_scheme_count():
    old, new = _load("per-scheme-imports-1.json"), _load("preload-1.json")
    assert f"fell from {old['wall_s']:.0f} s to {new['wall_s']:.0f} s on the same machine" in TEXT
    assert old["env"]["gpu_uuid"] == new["env"]["gpu_uuid"]  # "same machine"
    assert old["workers"] == {"design": "one process per scheme", "preloaded": ["torch"], "ahead": 1}
    assert new["workers"] == {"design": "one process per scheme", "preloaded": ["qbench._preload"], "ahead": 6}
    schemes = {r["scheme"] for r in new["rows"]}
    assert len(schemes) == 26 and "decode scenario now has 26 schemes" in TEXT


def test_probe_facts():
    probe = {r["package"]: r for r in _load("probe-preload.json")["results"]}
    assert f"({probe['qbench._preload']['import_s']:.1f} s of imports on the H200 host" in TEXT
    assert probe["qbench._preload"]["fork_safe"] and probe["-"]["fork_safe"]
    assert not probe["torchao"]["cuda_initialized_after_import"] and probe["torchao"]["forked_child_exit"] != 0
    assert probe["bitsandbytes"]["cuda_initialized_after_import"] and probe["gemlite"]["cuda_initialized_after_import"]
    assert "A child forked after `import torchao` fails its matmul" in TEXT


def test_the_one_row_that_moved_only_between_runners():
    """int4-weight-only: faster with the new runner (compare's p10-p90 rule), 'same' between the two
    old-runner runs; fp8-dynamic[kernel_preference=mslk] moved in both compares, so it is not named."""
    def med(doc, scheme):
        return {r["scheme"]: r for r in doc["rows"]}[scheme]["latency_us"]["stream"]

    old, new, first = _load("per-scheme-imports-1.json"), _load("preload-1.json"), _load("first-per-scheme-imports.json")
    a, b, f = (med(d, "int4-weight-only") for d in (old, new, first))
    assert b["p90"] < a["p10"]  # faster, no overlap
    assert not (a["p90"] < f["p10"] or f["p90"] < a["p10"])  # the two old runs overlap
    a, f = med(old, "fp8-dynamic[kernel_preference=mslk]"), med(first, "fp8-dynamic[kernel_preference=mslk]")
    assert f["p90"] < a["p10"]  # moved between the two old runs too
    assert "the runners and not between the two old-runner runs: int4-weight-only (tinygemm), faster with the new runner" in TEXT
