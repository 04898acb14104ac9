"""A few representative committed result files, rendered by every reader view, give the output
stored in ``tests/fixtures/reader_outputs/`` (made by its ``make.py``): the same exit status, stdout
and stderr, byte for byte. A fixture whose source's content is no longer the one it was rendered
from (a file replaced by a newer run) is skipped and says which file; any other difference is a
regression, or a meant change of output (then run ``make.py`` and commit the fixtures with it).
"""

from __future__ import annotations

import difflib
import hashlib
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
    """The stored views include every command and the report views asked for, on a layer file, a
    CPU file and a model-step file."""
    views = {v for f in FIXTURES for v in json.loads(f.read_text(encoding="utf-8"))["views"]}
    assert {"report", "report-by-m", "report-crossover", "recommend", "recommend-summary", "recommend-by-format",
            "compare", "model", "plot-data"} <= views
    names = {f.stem for f in FIXTURES}
    assert {"file__h200_decode", "file__cpu_decode", "file__h200_step_llama31_8b"} <= names


def test_every_fixture_names_the_content_it_was_made_from():
    """Each fixture stores the SHA-256 of every source it rendered, so a replaced file is told apart
    from a changed reader."""
    for f in FIXTURES:
        fixture = json.loads(f.read_text(encoding="utf-8"))
        assert set(fixture["sha256"]) == set(fixture["sources"]), f.name
        assert all(len(h) == 64 and int(h, 16) >= 0 for h in fixture["sha256"].values()), f.name


def _diff(want: str, got: str) -> str:
    lines = list(difflib.unified_diff(want.splitlines(), got.splitlines(), "stored", "rendered", lineterm="", n=1))
    return "\n".join(lines[:40])


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_output_unchanged(path: Path, monkeypatch):
    fixture = json.loads(path.read_text(encoding="utf-8"))
    changed = [src for src in fixture["sources"]
               if hashlib.sha256((ROOT / src).read_bytes()).hexdigest() != fixture["sha256"][src]]
    if changed:
        pytest.skip(f"source content changed since the fixture was made (sha256 differs): {', '.join(changed)}")
    maker = _maker()
    monkeypatch.chdir(ROOT)
    for name, want in fixture["views"].items():
        got = maker.render_view(want["argv"])
        assert got["rc"] == want["rc"], f"{name} {' '.join(want['argv'])}: exit {got['rc']}, stored {want['rc']}"
        for stream in ("stdout", "stderr"):
            assert got[stream] == want[stream], (f"{name} {' '.join(want['argv'])}: {stream} differs\n"
                                                 + _diff(want[stream], got[stream]))
