"""results/<machine>/ shows only what is current: the committed INDEX.md of each machine equals what
scripts/results_index.py writes; the top of each machine folder holds result files and the index
only; no partial file is committed. CPU only, no timing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"_test_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


index = _script("results_index")
MACHINES = index.machines()


def test_the_machines_are_found():
    assert {"h200", "cpu"} <= set(MACHINES)


@pytest.mark.parametrize("machine", MACHINES)
def test_committed_index_is_the_generated_one(machine):
    committed = (RESULTS / machine / "INDEX.md").read_text(encoding="utf-8")
    assert committed == index.render(machine), (
        f"results/{machine}/INDEX.md is out of date: run python scripts/results_index.py {machine}")


@pytest.mark.parametrize("machine", MACHINES)
def test_machine_folder_holds_current_files_evidence_and_env_only(machine):
    folder = RESULTS / machine
    top = {p.name for p in folder.iterdir()}
    assert {p for p in top if (folder / p).is_dir()} <= {"env", "evidence"}
    files = {p for p in top if (folder / p).is_file()}
    assert "INDEX.md" in files and all(f.endswith(".json") for f in files - {"INDEX.md"}), files
    for name in files - {"INDEX.md"}:
        doc = json.loads((folder / name).read_text())
        assert index.is_result(doc), f"{machine}/{name}: a current file is a run's result document"
    assert "## Not in the layout" not in index.render(machine)


def test_no_partial_file_is_committed():
    assert not sorted(RESULTS.rglob("*.partial.json"))
    assert "results/**/*.partial.json" in (ROOT / ".gitignore").read_text()


@pytest.mark.parametrize("machine", MACHINES)
def test_one_current_file_per_scenario(machine):
    sources = [json.loads(p.read_text())["scenario"]["source"] for p in (RESULTS / machine).glob("*.json")]
    assert len(sources) == len(set(sources)), sources


def test_index_names_claims_and_provenance():
    text = (RESULTS / "h200" / "INDEX.md").read_text()
    decode = text[text.index("### `decode.json`"):text.index("### `decode_kernels.json`")]
    assert "README.md § What a run looked like on an H200" in decode
    assert "- command: `python3 -m qbench run scenarios/decode.toml --repeat 3 --quiet -o OUT/decode.json" in decode
    assert "| [`decode.json`](decode.json) | `scenarios/decode.toml` | 26 | 25 / 1 / 0 | true | 2026-12-02T01:44:15 |" in text
    merged = text[text.index("### `llama31_70b_down.json`"):text.index("### `llama31_70b_gate_up.json`")]
    assert merged.count("- merged from `results/h200/2026-12-01/llama31_70b_down") == 2


def test_a_path_after_a_commit_is_history_not_a_claim(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Top\n\n## Now\nreads `results/h200/decode.json`.\n```sh\n"
                                        "# not a heading\nqbench report results/h200/seed.json\n```\n"
                                        "## Then\n`git show 0b7dab3:results/h200/decode.json` and "
                                        "`results/h200/evidence/speed/` and `results/h200/evidence/`\n")
    monkeypatch.setattr(index, "ROOT", tmp_path)
    mentions = index.page_mentions()
    assert index.claims_for("results/h200/decode.json", mentions) == [("README.md", "Now")]
    assert index.claims_for("results/h200/seed.json", mentions) == [("README.md", "Now")]
    assert index.claims_for("results/h200/evidence/speed/call1/a.json", mentions) == [("README.md", "Then")]
    assert index.claims_for("results/h200/evidence/b.json", mentions) == []
