"""Every committed result file, rendered by every reader view, gives the output stored in
``tests/fixtures/reader_outputs/`` (made by its ``make.py`` with the readers before they became
one wing, issue 22): the same exit status, stdout and stderr, byte for byte.

A fixture whose source file is gone from ``results/`` (older generations may be deleted) is
skipped and says which file is missing.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "reader_outputs"
ROOT = HERE.parents[2]
FIXTURES = sorted(HERE.glob("*.json"))


def _maker():
    spec = importlib.util.spec_from_file_location("reader_outputs_make", HERE / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fixtures_cover_every_reader():
    """The stored views include every command and the report views asked for."""
    views = {v for f in FIXTURES for v in json.loads(f.read_text(encoding="utf-8"))["views"]}
    assert {"report", "report-by-m", "report-crossover", "recommend", "recommend-summary", "recommend-by-format",
            "compare", "model", "plot-data"} <= views
    assert len(FIXTURES) > 100


def _diff(want: str, got: str) -> str:
    lines = list(difflib.unified_diff(want.splitlines(), got.splitlines(), "stored", "rendered", lineterm="", n=1))
    return "\n".join(lines[:40])


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_output_unchanged(path: Path, monkeypatch):
    fixture = json.loads(path.read_text(encoding="utf-8"))
    missing = [s for s in fixture["sources"] if not (ROOT / s).exists()]
    if missing:
        pytest.skip(f"source file gone from results/: {', '.join(missing)}")
    monkeypatch.chdir(ROOT)
    maker = _maker()
    for name, want in fixture["views"].items():
        got = maker.render_view(want["argv"])
        assert got["rc"] == want["rc"], f"{name} {' '.join(want['argv'])}: exit {got['rc']}, stored {want['rc']}"
        for stream in ("stdout", "stderr"):
            assert got[stream] == want[stream], (f"{name} {' '.join(want['argv'])}: {stream} differs\n"
                                                 + _diff(want[stream], got[stream]))
