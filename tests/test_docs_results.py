"""results/<machine>/ shows only what is current (issue 22, item 4): the committed INDEX.md of each
machine equals what scripts/results_index.py writes; the top of each machine folder holds result files
and the index only; no partial file is committed; the README's headline reads the current decode file;
scripts/merge_results.py merges a cut-off run with the run that completed it, and refuses runs of
another scenario or machine. CPU only, no timing."""

from __future__ import annotations

import copy
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
merge_results = _script("merge_results")
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


def test_readme_headline_reads_the_current_decode_file():
    """The headline table's command reads results/h200/decode.json, and that file is a run of every
    scheme today's scenarios/decode.toml lists."""
    from qbench.scenario import load

    readme = (ROOT / "README.md").read_text()
    assert "<!-- BEGIN: python scripts/docs_tables.py headline results/h200/decode.json " in readme
    doc = json.loads((RESULTS / "h200" / "decode.json").read_text())
    today = [e.label for e in load(ROOT / "scenarios" / "decode.toml").schemes]
    assert [s for s in dict.fromkeys(r["scheme"] for r in doc["rows"])] == today and len(today) == 26


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


# ---- merge_results --------------------------------------------------------------------------------

def _split(tmp_path, cut_at: int = 20):
    """The committed 26-scheme decode file split like a run cut off after ``cut_at`` schemes and a
    ``qbench run --schemes`` run of the rest; returns (original, base path, rest path)."""
    original = json.loads((RESULTS / "h200" / "decode.json").read_text())
    labels = list(dict.fromkeys(r["scheme"] for r in original["rows"]))
    base, rest = copy.deepcopy(original), copy.deepcopy(original)
    base["complete"] = False
    base["rows"] = [r for r in original["rows"] if r["scheme"] in labels[:cut_at]]
    rest["scenario"]["schemes"] = original["scenario"]["schemes"][cut_at:]
    rest["rows"] = [r for r in original["rows"] if r["scheme"] in labels[cut_at:]]
    rest["wall_s"] = 10.0
    paths = tmp_path / "cut.partial.json", tmp_path / "rest.json"
    for path, doc in zip(paths, (base, rest)):
        path.write_text(json.dumps(doc))
    return original, str(paths[0]), str(paths[1])


def test_merge_of_a_cut_off_run_and_its_completion_is_the_whole_run(tmp_path, capsys):
    original, base, rest = _split(tmp_path)
    out = tmp_path / "merged.json"
    assert merge_results.main([base, rest, "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["rows"] == original["rows"] and merged["complete"] is True
    assert merged["scenario"] == original["scenario"] and merged["env"] == original["env"]
    assert merged["wall_s"] == pytest.approx(original["wall_s"] + 10.0, abs=1e-3)
    assert [s["file"] for s in merged["merged_from"]] == [base, rest]
    assert [s["rows"] for s in merged["merged_from"]] == [20, 6]
    assert merged["merged_from"][1]["schemes"] == [e for e in merge_results.scheme_labels(original, "x")][20:]
    assert merge_results.missing(merged) == []


def test_merge_that_still_lacks_a_scheme_is_incomplete(tmp_path):
    original, base, rest = _split(tmp_path)
    doc = json.loads(Path(rest).read_text())
    doc["rows"] = [r for r in doc["rows"] if r["scheme"] != "w8a8-dynamic+compiled"]
    Path(rest).write_text(json.dumps(doc))
    merged = merge_results.merge([base, rest])
    assert merged["complete"] is False and merge_results.missing(merged) == ["w8a8-dynamic+compiled"]


@pytest.mark.parametrize("change, message", [
    (lambda d: d["scenario"].update(name="other"), "scenario.name: 'other' differs from"),
    (lambda d: d["scenario"].update(m=[1, 16]), "scenario.m: [1, 16] differs from"),
    (lambda d: d["env"].update(device_name="NVIDIA H100"), "env.device_name: 'cuda NVIDIA H100' differs from"),
    (lambda d: d["rows"].append(copy.deepcopy(d["rows"][0])), "is also in"),
])
def test_merge_refuses_runs_of_another_scenario_or_machine(tmp_path, capsys, change, message):
    _, base, rest = _split(tmp_path)
    doc = json.loads(Path(rest).read_text())
    change(doc)
    if message == "is also in":  # a row of the rest repeated in the base run
        base_doc = json.loads(Path(base).read_text())
        base_doc["rows"].append(doc["rows"][-1])
        Path(base).write_text(json.dumps(base_doc))
        doc["rows"].pop()
    Path(rest).write_text(json.dumps(doc))
    assert merge_results.main([base, rest, "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("merge_results: ") and message in err[0], err
    assert not (tmp_path / "m.json").exists()


def test_a_merged_file_merged_again_keeps_every_source(tmp_path):
    """The committed 70B down file (two sources, two compiled schemes missing) completed by a third run
    of those schemes (here: the rows of its own first source, renamed, stand in for them)."""
    committed = str(RESULTS / "h200" / "llama31_70b_down.json")
    doc = json.loads(Path(committed).read_text())
    labels = merge_results.scheme_labels(doc, committed)
    missing = merge_results.missing(doc)
    third = copy.deepcopy(doc)
    third["scenario"]["schemes"] = [e for e, label in zip(doc["scenario"]["schemes"], labels) if label in missing]
    third["rows"] = []
    for label in missing:
        for r in [r for r in doc["rows"] if r["scheme"] == "fp32"]:
            third["rows"].append(dict(r, scheme=label))
    third.pop("merged_from")
    path = tmp_path / "rest.json"
    path.write_text(json.dumps(third))
    merged = merge_results.merge([committed, str(path)])
    assert merged["complete"] is True and len(merged["rows"]) == len(doc["rows"]) + 6
    assert [s["file"] for s in merged["merged_from"]] == [s["file"] for s in doc["merged_from"]] + [str(path)]


def test_merge_refuses_an_existing_output_without_force(tmp_path, capsys):
    _, base, rest = _split(tmp_path)
    out = tmp_path / "m.json"
    out.write_text("{}")
    assert merge_results.main([base, rest, "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == "{}"


@pytest.mark.parametrize("name", ["llama31_70b_down", "llama31_70b_lm_head", "llama3_8b_lm_head"])
def test_committed_merged_files_are_their_sources_rows(name):
    doc = json.loads((RESULTS / "h200" / f"{name}.json").read_text())
    sources = doc["merged_from"]
    assert len(sources) == 2 and sum(s["rows"] for s in sources) == len(doc["rows"])
    assert doc["complete"] is False and doc["complete"] == (merge_results.missing(doc) == [])
    assert doc["wall_s"] == pytest.approx(sum(s["wall_s"] for s in sources), abs=1e-3)
    assert all(s["file"].startswith("results/h200/2026-12-01/") and len(s["sha256"]) == 64 for s in sources)
