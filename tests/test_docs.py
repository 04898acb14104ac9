"""docs/: every generated block equals what its command prints from the committed results/, and
every chart a page shows exists (scripts/gen_docs.py). CPU only, in-process, no timing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_docs = _gen_docs()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_generated_blocks_are_up_to_date(path):
    text = path.read_text(encoding="utf-8")
    assert gen_docs.regenerate(text, str(path)) == text, (
        f"{path.name} is out of date: run python scripts/gen_docs.py (--check shows the diff)")


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_charts_exist(path):
    for command in gen_docs.image_commands(path.read_text(encoding="utf-8")):
        for png in gen_docs.image_outputs(command):
            assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} missing: run {command}"


def test_check_reports_a_stale_block(tmp_path, capsys):
    doc = (ROOT / "docs" / "results-h200.md").read_text(encoding="utf-8")
    stale = tmp_path / "stale.md"
    stale.write_text(doc.replace("int8-weight-only+compiled (9.07 µs", "int8-weight-only+compiled (99.9 µs", 1))
    assert gen_docs.main(["--check", str(stale)]) == 1
    assert "99.9 µs" in capsys.readouterr().out


def test_marker_without_its_command_above_is_an_error(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("```sh\nqbench report results/h200/seed.json\n```\n"
                   "<!-- BEGIN: qbench report results/h200/decode.json -->\n<!-- END -->\n")
    assert gen_docs.main(["--check", str(bad)]) == 2


def test_failing_command_is_an_error(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("```sh\nqbench report results/h200/missing.json\n```\n"
                   "<!-- BEGIN: qbench report results/h200/missing.json -->\n<!-- END -->\n")
    assert gen_docs.main(["--check", str(bad)]) == 2
