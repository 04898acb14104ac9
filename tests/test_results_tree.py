"""The tree stays light and results/<machine>/ shows only what is current: scripts/, the test
fixtures and the tracked files within their budgets; the top of each machine folder holds result
files and the index only (its INDEX.md is checked with the docs, tests/test_docs.py); no partial
file is committed. CPU only, no timing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import committed_results

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

def test_qbench_runs_own_folder_is_not_a_machine(tmp_path, monkeypatch):
    """``qbench run`` writes results/runs/ (gitignored): after the README's first command the docs
    check must not index it (it did: a fresh clone's test command then failed)."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "decode-cpu-20261204T075342Z.json").write_text("{}")
    (tmp_path / "h200" / "env").mkdir(parents=True)
    (tmp_path / "h200" / "env" / "provenance.toml").write_text("")
    monkeypatch.setattr(index, "RESULTS", tmp_path)
    assert index.machines() == ["h200"]



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
    assert not committed_results("*.partial.json")
    assert "results/**/*.partial.json" in (ROOT / ".gitignore").read_text()


@pytest.mark.parametrize("machine", MACHINES)
def test_one_current_file_per_scenario(machine):
    sources = [json.loads(p.read_text())["scenario"]["source"] for p in (RESULTS / machine).glob("*.json")]
    assert len(sources) == len(set(sources)), sources



#: CPU names a provenance ``machine`` line may give, and the word each file's ``env.cpu`` then holds.
_CPU_NAMES = {"AMD EPYC": "AMD EPYC", "Intel Xeon": "Intel(R) Xeon(R)"}


def test_provenance_names_the_cpu_each_file_ran_on():
    """A provenance entry's machine line names the CPU its files' own env records: the 2026-12-06 CPU
    files ran on an Intel Xeon (300 MiB L3) while provenance said AMD EPYC (a newcomer comparing CPUs was
    told the wrong one). Known answer: quality_tiny.json on the EPYC, search_smollm2.json on the Xeon."""
    import tomllib

    said = {}
    for machine in MACHINES:
        path = RESULTS / machine / "env" / "provenance.toml"
        for entry in tomllib.loads(path.read_text()).get("entry", []):
            names = [n for n in _CPU_NAMES if n in entry.get("machine", "")]
            for f in entry["files"]:
                doc = RESULTS / machine / f
                if names and doc.is_file():
                    cpu = json.loads(doc.read_text())["env"].get("cpu") or ""
                    assert _CPU_NAMES[names[0]] in cpu, f"{machine}/{f}: provenance says {names[0]}, env.cpu {cpu!r}"
                    said[f"{machine}/{f}"] = names[0]
    assert said["cpu/quality_tiny.json"] == "AMD EPYC" and said["cpu/search_smollm2.json"] == "Intel Xeon"

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


def _tracked() -> list[Path]:
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def test_the_tree_stays_within_its_budgets():
    """scripts/ at most 1,800 lines, tests/fixtures/ at most 2 MB, the tracked files at most 15 MB: a GPU
    run carries the tree, and what the product does not need lives in git history (docs/history.md)."""
    tracked = _tracked()
    scripts = sum(len(p.read_bytes().splitlines()) for p in tracked if p.parent == ROOT / "scripts")
    fixtures = sum(p.stat().st_size for p in tracked if (ROOT / "tests" / "fixtures") in p.parents)
    total = sum(p.stat().st_size for p in tracked)
    assert scripts <= 1800, f"scripts/ holds {scripts} lines"
    assert fixtures <= 2_000_000, f"tests/fixtures/ holds {fixtures:,} bytes"
    assert total <= 15_000_000, f"the tracked files hold {total:,} bytes"
