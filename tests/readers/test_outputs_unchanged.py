"""Every committed result file, rendered by every reader view, gives the output stored in
``tests/fixtures/reader_outputs/`` (made by its ``make.py`` with the readers before they became
one wing, issue 22): the same exit status, stdout and stderr, byte for byte.

A source that moved (the results tree's reorganisation put older generations under
``results/<machine>/evidence/`` and merged runs) is followed by its content: when no file is at the
stored path but a file under ``results/`` has the stored ``sha256``, the views are rendered from
that file and compared with the stored output with the old path written as the new one.

A fixture whose source is gone from ``results/`` (no file with its content: older generations may
be deleted), or whose source's content is no longer the one the fixture was rendered from (a
current file replaced by a newer run, such as ``results/h200/decode.json``), is skipped and says
which file and why. Any other difference is a regression.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import json
import re
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


@functools.lru_cache(maxsize=1)
def _by_content() -> dict[str, list[str]]:
    """sha256 -> the JSON files under results/ with that content (relative paths, sorted)."""
    out: dict[str, list[str]] = {}
    for p in sorted((ROOT / "results").rglob("*.json")):
        out.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), []).append(str(p.relative_to(ROOT)))
    return out


def _moved(fixture: dict) -> dict[str, str]:
    """Old path -> new path for each source of ``fixture`` that is not at its stored path but whose
    content is under results/ elsewhere (the first such file); skips the test for a source that is
    gone or whose content changed."""
    moved, gone, changed = {}, [], []
    for src in fixture["sources"]:
        digest = fixture["sha256"][src]
        if (ROOT / src).exists():
            if hashlib.sha256((ROOT / src).read_bytes()).hexdigest() != digest:
                changed.append(src)
        elif digest in _by_content():
            moved[src] = _by_content()[digest][0]
        else:
            gone.append(src)
    if gone:
        pytest.skip(f"source file gone from results/ (no file has its content): {', '.join(gone)}")
    if changed:
        pytest.skip(f"source content changed since the fixture was made (sha256 differs): {', '.join(changed)}")
    return moved


def _renamed(text: str, moved: dict[str, str]) -> str:
    """``text`` with every old path of ``moved`` written as its new path (one pass, longest first)."""
    if not moved:
        return text
    pattern = re.compile("|".join(re.escape(old) for old in sorted(moved, key=len, reverse=True)))
    return pattern.sub(lambda m: moved[m.group(0)], text)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_output_unchanged(path: Path, monkeypatch):
    fixture = json.loads(path.read_text(encoding="utf-8"))
    moved = _moved(fixture)
    maker = _maker()
    monkeypatch.chdir(ROOT)
    for name, want in fixture["views"].items():
        argv = [moved.get(a, a) for a in want["argv"]]
        got = maker.render_view(argv)
        assert got["rc"] == want["rc"], f"{name} {' '.join(argv)}: exit {got['rc']}, stored {want['rc']}"
        for stream in ("stdout", "stderr"):
            stored = _renamed(want[stream], moved)
            assert got[stream] == stored, (f"{name} {' '.join(argv)}: {stream} differs\n" + _diff(stored, got[stream]))
