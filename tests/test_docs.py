"""The docs: every generated block of README.md and docs/*.md (and results/<machine>/INDEX.md) equals
what scripts/gen_docs.py makes from the committed files, in one test; the generator's own rules; and
the README as a front door (size, line length, nothing outside the clone, the test command CI runs);
and each hand-typed figure of docs/quality.md read again from its committed file (the phrase holding the
figure is pinned; other prose is edited freely). CPU only, in-process, no timing."""

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


# ---- hand-typed figures of docs/quality.md, each read again from its committed file ------------------

QUALITY_DOC = " ".join((ROOT / "docs" / "quality.md").read_text(encoding="utf-8").split())


def _rows(name: str) -> dict[str, dict]:
    """The rows of ``results/cpu/<name>`` by label."""
    import json

    return {r["scheme"]: r for r in json.loads((ROOT / "results" / "cpu" / name).read_text(encoding="utf-8"))["rows"]}


def _kld(name: str, scheme: str) -> str:
    """A row's mean KLD as ``qbench report`` writes it (``4.72e-05 ± 6.0e-07``)."""
    from qbench.quality.view import pm

    kld = _rows(name)[scheme]["stats"]["kld"]
    return pm(kld["mean"], kld["unc"], "{:.3g}")


def _said(*phrases: str) -> None:
    for phrase in phrases:
        assert phrase in QUALITY_DOC, f"docs/quality.md no longer says {phrase!r} (the committed file's figure)"


def test_the_float32_kld_scale_is_the_committed_tiny_rows():
    """The logprobs paragraph's bf16 figure is results/cpu/quality_tiny.json's (it had read 4.32e-05 ± 3.2e-06, a
    trial's run on fewer chunks, beside an uncommitted float16 figure)."""
    _said(f"{_kld('quality_tiny.json', 'bf16')} at `float32` (`results/cpu/quality_tiny.json`, 64 chunks)")
    assert "4.32e-05" not in QUALITY_DOC and "5.57e-05" not in QUALITY_DOC


def test_the_unit_damages_paragraph_is_the_committed_units_file():
    import json

    doc = json.loads((ROOT / "results" / "cpu" / "quality_smollm2_units.json").read_text(encoding="utf-8"))
    rows = {r["scheme"]: r for r in doc["rows"]}
    sums = {s: sum(p["kld"] for p in r["sensitivity"]) for s, r in rows.items()}
    ratio = {s: f"{sums[s] / rows[s]['stats']['kld']['mean']:.2f}x" for s in rows}
    head = [next(p["kld"] for p in r["sensitivity"] if p["part"] == "lm_head") / sums[s] for s, r in rows.items()]
    o = [sum(p["kld"] for p in r["sensitivity"] if p["unit"] == "o") / sums[s] for s, r in rows.items()]
    _said(f"({doc['wall_s']:.0f} s on a loaded 2-core CPU)", f"({100 * min(head):.0f}-{100 * max(head):.0f} % of the sum)",
          f"`o` is {100 * min(o):.0f}-{100 * max(o):.0f} %",
          f"{ratio['int4-weight-only[group_size=64]']} the whole row for int4, {ratio['int8-weight-only']} for int8 "
          f"and {ratio['fp8-weight-only']} for fp8; bf16's is {ratio['bf16']}")
    assert all(r["sensitivity"][0]["part"] == "lm_head" for r in rows.values())
    assert {s: r["sensitivity"][1]["part"] for s, r in rows.items()} == {
        "bf16": "block 2 down", "int8-weight-only": "block 29 down", "int4-weight-only[group_size=64]": "block 29 down",
        "fp8-weight-only": "block 29 down"}


def test_the_calibrated_reading_is_the_committed_calibrated_files():
    s = {k: r["stats"] for k, r in _rows("quality_smollm2_calibrated.json").items()}
    order = ["int4-weight-only[group_size=64]", "int4-hqq[group_size=64]", "int4-gptq[group_size=64]", "int4-awq[group_size=64]"]
    kld, top, ppl = ([f"{fmt(s[k])}" for k in order] for fmt in (
        lambda r: f"{r['kld']['mean']:.3f}", lambda r: f"{100 * r['same_top']:.1f}", lambda r: f"{r['ppl']:.1f}"))
    _said(f"KLD {kld[0]} (RTN), {kld[1]} (HQQ), {kld[2]} (GPTQ), {kld[3]} (AWQ)",
          f"same top {top[0]} % → {top[1]} / {top[2]} / {top[3]} %",
          f"perplexity {ppl[0]} → {ppl[1]} / {ppl[2]} / {ppl[3]} (bf16 {s['bf16']['ppl']:.1f})")

    t = {k: r["stats"] for k, r in _rows("quality_tiny_calibrated.json").items()}
    k = {name: t[name]["kld"]["mean"] for name in t}
    g64 = "[group_size=64]"
    _said(f"({k['int4-gptq']:.5f} vs {k['int4-weight-only']:.5f} at 128; {k['int4-gptq' + g64]:.5f} vs "
          f"{k['int4-weight-only' + g64]:.5f} at 64)",
          f"to {100 * t['int4-gptq']['same_top']:.1f}-{100 * t['int4-gptq' + g64]['same_top']:.1f} %",
          f"({k['int4-awq']:.5f}, {k['int4-awq' + g64]:.5f})",
          f"(ln {t['int4-awq']['ln_ppl_ratio']:.4f} vs RTN's {t['int4-weight-only']['ln_ppl_ratio']:.4f}",
          f"(KLD {k['int4-hqq']:.5f} at 128, above; {k['int4-hqq' + g64]:.5f} at 64, below)")
    assert int(k["int4-weight-only"] / k["int4-gptq"]) == int(k["int4-weight-only" + g64] / k["int4-gptq" + g64]) == 7
    assert k["int4-hqq"] > k["int4-weight-only"] and k["int4-hqq" + g64] < k["int4-weight-only" + g64]
    assert max(t, key=lambda n: t[n]["ln_ppl_ratio"] if n.startswith("int4") else -1).startswith("int4-awq")

    secs = {f: [r["calibration_s"] for r in _rows(f).values() if r.get("calibration_s")]
            for f in ("quality_tiny_calibrated.json", "quality_smollm2_calibrated.json")}
    assert 30 <= min(secs["quality_tiny_calibrated.json"]) and max(secs["quality_tiny_calibrated.json"]) <= 60
    assert 400 <= min(secs["quality_smollm2_calibrated.json"]) and max(secs["quality_smollm2_calibrated.json"]) <= 1100
    _said("30-60 s for the tiny model and 400-1,100 s for SmolLM2",
          f"(HQQ's search alone: {_rows('quality_smollm2_calibrated.json')['int4-hqq' + g64]['calibration_s']:.0f} s)")


def test_the_smollm2_reading_is_the_committed_smollm2_files():
    """The SmolLM2 section's counts, its ratios to the published anchors and its per-role order."""
    import json

    doc = json.loads((ROOT / "results" / "cpu" / "quality_smollm2.json").read_text(encoding="utf-8"))
    q = doc["scenario"]["quality"]
    _said(f"# {len(doc['rows'])} schemes, {q['chunks']} chunks of {q['chunk']}, float32 reference")
    s = {k: r["stats"] for k, r in _rows("quality_smollm2.json").items()}
    assert 2 <= s["int8-weight-only"]["kld"]["mean"] / 0.0014 < 4  # "a few times" q8_0's 0.0014
    assert 0.2 <= s["bf16"]["kld"]["mean"] / s["int8-weight-only"]["kld"]["mean"] <= 0.3  # "about a quarter of it"
    ppl = {k: s[k]["ppl"] / s["fp32"]["ppl"] for k in s}
    assert 1.2 <= ppl["nf4-bnb"] <= 1.3 and all(1.4 <= ppl[k] <= 1.6 for k in ("int4-intx[group_size=64]", "fp4-bnb"))
    assert 0.005 <= ppl["int8-weight-only"] - 1 <= 0.015  # "about one percent"
    for name, lead in (("quality_smollm2_roles.json", {"down_proj", "v_proj"}),
                       ("quality_tiny.json", {"down_proj", "k_proj"})):
        for scheme in ("int8-weight-only", "int4-weight-only[group_size=64]", "nf4-bnb"):
            row = _rows(name).get(scheme) or _rows(name)[scheme.split("[")[0]]  # the tiny model's int4 at group 128
            assert {p["part"] for p in row["sensitivity"][:2]} == lead, (name, scheme)


def test_the_cross_cpu_example_is_the_two_committed_tiny_files():
    """The budgets section's two CPUs: the same bf16 row of the same chunks in two committed files, each on its CPU."""
    import json

    said = []
    for name in ("quality_tiny.json", "quality_tiny_calibrated.json"):
        doc = json.loads((ROOT / "results" / "cpu" / name).read_text(encoding="utf-8"))
        said.append(f"{_kld(name, 'bf16')} on an {doc['env']['cpu'].replace('(R)', '').removesuffix(' Processor')} (`results/cpu/{name}`)")
        assert (doc["scenario"]["quality"]["chunks"], doc["scenario"]["quality"]["chunk"]) == (64, 512)
    _said(" and ".join(said))
