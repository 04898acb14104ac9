"""The docs: every generated block of README.md and docs/*.md (and results/<machine>/INDEX.md) equals
what scripts/gen_docs.py makes from the committed files, in one test; the generator's own rules; and
the README as a front door (size, line length, nothing outside the clone, the test command CI runs).
No sentence is pinned: prose is edited freely. CPU only, in-process, no timing."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_docs = _gen_docs()
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_generated_block_is_up_to_date(capsys):
    """The one test over every figure of the docs: each block regenerated from the committed files
    (and every chart present, every INDEX.md current); the diff says what moved."""
    status = gen_docs.main(["--check"])
    out, err = capsys.readouterr()
    assert status == 0, f"run python scripts/gen_docs.py\n{out[-6000:]}\n{err[-2000:]}"


# ---- the generator -------------------------------------------------------------------------------

def test_check_reports_a_stale_block(tmp_path, capsys):
    doc = tmp_path / "page.md"
    doc.write_text("```sh\nqbench report results/h200/seed.json --format github\n```\n"
                   "<!-- BEGIN: qbench report results/h200/seed.json --format github -->\n| stale |\n<!-- END -->\n"
                   "<!-- gen:ceilings results/h200/decode.json -->\nstale too\n<!-- /gen -->\n")
    assert gen_docs.main(["--check", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "-| stale |" in out and "-stale too" in out and "+| memory " in out
    assert gen_docs.main([str(doc)]) == 0 and gen_docs.main(["--check", str(doc)]) == 0


@pytest.mark.parametrize("text", [
    "```sh\nqbench report results/h200/seed.json\n```\n<!-- BEGIN: qbench report results/h200/decode.json -->\n<!-- END -->\n",
    "```sh\nqbench report results/h200/missing.json\n```\n<!-- BEGIN: qbench report results/h200/missing.json -->\n<!-- END -->\n",
    "<!-- gen:no-such-block -->\n<!-- /gen -->\n",
    "<!-- gen:scheme no-such-scheme results/h200/decode.json -->\n<!-- /gen -->\n",
], ids=["command-not-shown-above", "failing-command", "unknown-generator", "failing-generator"])
def test_a_bad_block_is_an_error(tmp_path, text, capsys):
    bad = tmp_path / "bad.md"
    bad.write_text(text)
    assert gen_docs.main(["--check", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"gen_docs: {bad}:")


def test_contents_lists_the_sections_with_their_anchors():
    page = "# T\n\n## Contents\n\n## Decode, M = 1\n```\n## not a heading\n```\n## `qbench` x\n## Decode, M = 1\n"
    assert gen_docs.gen_contents([], page).splitlines() == [
        "- [Decode, M = 1](#decode-m--1)", "- [qbench x](#qbench-x)", "- [Decode, M = 1](#decode-m--1-1)"]


def test_generated_result_pages_open_with_a_contents_list():
    for name in ("results-h200.md", "schemes.md", "methodology.md"):
        text = (ROOT / "docs" / name).read_text(encoding="utf-8")
        first_section = text.index("\n## ")
        assert "<!-- gen:contents -->" in text[:first_section + 200], name


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with ``header``, as cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_every_registered_scheme_has_its_section_and_its_options_row():
    """docs/schemes.md promises one section per registered scheme (``qbench list``) and docs/scenarios.md's
    scheme table names each scheme with each option it takes (``mode`` and ``label`` are every scheme's):
    int4-hqq, int4-gptq and int4-awq had neither."""
    from qbench import schemes

    headings = {line[3:].strip() for line in (ROOT / "docs" / "schemes.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("## ")}
    table = _table_rows((ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8"), "| scheme | options")
    rows = {name.strip("` "): options for names, options in table for name in names.split(",")}
    for s in schemes.all_schemes():
        assert s.name in headings, f"docs/schemes.md: no section '## {s.name}'"
        assert s.name in rows, f"docs/scenarios.md: {s.name} not in the scheme options table"
        for option in set(s.options_model.model_fields) - {"mode", "label"}:
            assert f"`{option}`" in rows[s.name], f"docs/scenarios.md: {s.name}'s option {option} not in its row"


def test_every_quality_key_is_in_the_quality_table():
    """Each key of ``[quality]`` and of its ``calibration`` table (qbench.quality.spec) has a row in
    docs/scenarios.md, its default the model's where the model has one."""
    from qbench.quality.spec import CalibrationSpec, QualitySpec

    page = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    section = page[page.index("## `[quality]`"):]
    rows = {key.strip("`"): default for key, _, default, _ in _table_rows(section, "| key | type")}
    keys = [*QualitySpec.model_fields, *(f"calibration.{k}" for k in CalibrationSpec.model_fields)]
    assert not set(keys) - set(rows), sorted(set(keys) - set(rows))
    assert rows["calibration.chunks"] == "required" and rows["calibration.first_chunk"] == "0"
    assert rows["calibration.chunk"] == "`quality.chunk`" and rows["calibration.text"] == "the evaluated text"


def _section_keys(heading: str) -> dict[str, str]:
    """docs/scenarios.md's ``| key | type | default | meaning |`` table under ``heading``: key -> default."""
    page = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    section = page[page.index(heading):]
    return {key.strip("`"): default for key, _, default, _ in _table_rows(section, "| key | type")}


def test_every_search_key_is_in_the_search_table():
    """Each key of ``[search]`` and of its ``calibration`` / ``evaluation`` spans (qbench.search.spec) has a row in
    docs/scenarios.md, a required key said required and a defaulted key's default the model's."""
    from qbench.search.spec import SearchSpec, Span

    rows = _section_keys("## `[search]`")
    keys = {**SearchSpec.model_fields, **{f"{span}.{k}": f for span in ("calibration", "evaluation")
                                          for k, f in Span.model_fields.items()}}
    assert not set(keys) - set(rows), sorted(set(keys) - set(rows))
    for key, field in keys.items():
        if field.is_required():
            assert rows[key] == "required", (key, rows[key])
        elif field.default is not None:
            shown = f'`"{field.default}"`' if isinstance(field.default, str) else str(field.default)
            assert rows[key] in (shown, f"`{str(field.default).lower()}`"), (key, rows[key], field.default)


def test_every_step_model_key_is_in_the_model_table():
    """Each key of a model-step scenario's ``[model]`` (qbench.step.spec.ModelSpec, its source's ``name`` and
    ``checkpoint`` included) has a row in docs/scenarios.md: ``attention`` and ``kv_cache`` had none."""
    from qbench.step.spec import ModelSpec

    rows = _section_keys("## `[model]`")
    assert not set(ModelSpec.model_fields) - set(rows), sorted(set(ModelSpec.model_fields) - set(rows))
    assert rows["attention"] == f'`"{ModelSpec.model_fields["attention"].default}"`'
    assert rows["kv_cache"] == f'`"{ModelSpec.model_fields["kv_cache"].default}"`'


# ---- the README ------------------------------------------------------------------------------------

def _prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks (tables and markers included)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def test_readme_is_a_short_front_door():
    assert len(README.encode()) <= 10_000
    long = [line for line in _prose_lines(README) if len(line) > 160]
    assert not long, long
    assert not re.search(r"\bissues? #?\d+|#\d{1,4}\b", README, flags=re.IGNORECASE)
    assert "../" not in README and "shared/" not in README
    for link in re.findall(r"\]\(([^)#]+)", README):
        assert (ROOT / link).exists(), link


def test_readme_answers_one_question_each_and_leaves_the_quality_answer_marked():
    heads = re.findall(r"^### (.+)$", README, flags=re.MULTILINE)
    assert heads == ["A kernel for a layer: the layer pick", "A scheme for a model: the measured step",
                     "Quality on a real model", "A recipe for a model: the search"]
    quality = README.split("### Quality on a real model", 1)[1].split("\n## ", 1)[0]
    assert "<!-- TODO" in quality or "qbench" in quality
    assert "<!-- gen:layer-pick" in README and "<!-- gen:step-pick" in README and "<!-- gen:search-pick" in README


def _fenced_after(text: str, phrase: str) -> str:
    block = text.split(phrase, 1)[1].split("```", 2)[1]
    return block.split("\n", 1)[1].strip()


def test_ci_runs_the_readme_test_command():
    """`.ci/run` runs the README's test command as written there, so the two cannot drift apart."""
    command = _fenced_after(README, "Install and run the tests")
    assert command.endswith("python -m pytest -q") and "pip install -e \".[test]\"" in command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in ci, "the last command of .ci/run is the README's test command"
    run = _fenced_after(README, "Install and run the decode scenario")
    assert run.endswith("python -m qbench run scenarios/decode.toml") and (ROOT / "scenarios" / "decode.toml").is_file()
