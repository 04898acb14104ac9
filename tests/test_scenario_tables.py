"""Each job kind owns its scenario keys (qbench.jobs records: tables, check, describe, fits): another
kind's key is refused in one line naming the file, the key and the kind that takes it; the
``qbench check`` line is the kind's own."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from qbench import cli, jobs, scenario

ROOT = Path(__file__).resolve().parent.parent
#: A shipped scenario of each kind that validates without a fetched checkpoint.
BASES = {"layer": "decode.toml", "tp": "tp_decode.toml", "step": "step_tiny.toml",
         "quality": "quality_llama3_8b_seeded.toml", "search": "search_tiny.toml"}


def _base(kind: str) -> dict:
    return tomllib.loads((ROOT / "scenarios" / BASES[kind]).read_text(encoding="utf-8"))


def _foreign_keys() -> list[tuple[str, tuple[str, ...]]]:
    """(kind, key path) for every top-level key and ``[model]`` / ``[timing]`` key of another kind's
    scenario class that this kind's class lacks and that, added to this kind's file, leaves it of this
    kind (a selecting table such as ``[model]`` on a layer file makes a step file instead)."""
    pairs = []
    for kind in jobs.JOBS:
        mine = scenario.scenario_class(kind)
        for other in jobs.JOBS:
            if other == kind:
                continue
            theirs = scenario.scenario_class(other)
            for name, field in theirs.model_fields.items():
                paths = [(name,)] if name not in mine.model_fields else []
                nested = getattr(field.annotation, "model_fields", None)
                if name in mine.model_fields and nested:
                    paths += [(name, sub) for sub in nested if sub not in mine.model_fields[name].annotation.model_fields]
                for path in paths:
                    if jobs.of_tables({**_base(kind), path[0]: {}}).name == kind and (kind, path) not in pairs:
                        pairs.append((kind, path))
    return pairs


FOREIGN = _foreign_keys()


def test_every_kind_has_keys_of_others_to_refuse():
    kinds = {kind for kind, _ in FOREIGN}
    assert kinds == {"step", "quality", "search"}  # a layer or tp file with another kind's table is that kind
    assert ("quality", ("model", "blocks")) in FOREIGN and ("step", ("layer",)) in FOREIGN
    assert ("quality", ("m",)) in FOREIGN and ("step", ("timing", "methods")) in FOREIGN


@pytest.mark.parametrize("kind, path", FOREIGN, ids=[f"{k}-{'.'.join(p)}" for k, p in FOREIGN])
def test_another_kinds_key_is_refused_naming_the_kind_that_takes_it(kind, path):
    data = _base(kind)
    if len(path) == 1:
        data[path[0]] = {"x": 1} if path[0] in ("layer", "weight", "inputs", "tp", "model", "quality") else 1
    else:
        data[path[0]] = {**data.get(path[0], {}), path[1]: 1}
    with pytest.raises(scenario.ScenarioError) as info:
        scenario.from_dict(data, "x.toml")
    err = info.value
    assert err.key == ".".join(path), str(err)
    owners = [j for j in jobs.JOBS if j != kind and path[0] in scenario.scenario_class(j).model_fields]
    assert err.message.startswith(f"a {kind} scenario takes no ") and "\n" not in str(err)
    assert any(f"{o} key" in err.message or f"{o}, " in err.message or f"{o} or" in err.message for o in owners)


def test_blocks_in_a_quality_scenario_is_one_line_exit_2(tmp_path, capsys):
    text = (ROOT / "scenarios" / "quality_llama3_8b_seeded.toml").read_text(encoding="utf-8")
    path = tmp_path / "quality_x.toml"
    path.write_text(text.replace('name = "llama3-8b"', 'name = "llama3-8b"\nblocks = 2').replace("../data", str(ROOT / "data")))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"qbench: {path}: model.blocks: a quality scenario takes no 'blocks' (a step key)"
    for key, value in (("methods", '["step_graph"]'), ("linear_sum", "false"), ("context", "[128]")):
        path.write_text(text.replace('name = "llama3-8b"', f'name = "llama3-8b"\n{key} = {value}'))
        with pytest.raises(scenario.ScenarioError, match=rf"model\.{key}: a quality scenario takes no '{key}' \(a step key"):
            scenario.load(path)
    # the step's cache keys point to where a quality scenario sets its cache (break trial 7, defect 5)
    path.write_text(text.replace('name = "llama3-8b"', 'name = "llama3-8b"\nkv_cache = "fp8"'))
    with pytest.raises(scenario.ScenarioError, match=r"model\.kv_cache: .*\[quality\] kv_cache"):
        scenario.load(path)


def test_a_quality_scenario_without_quality_does_not_ask_for_m(tmp_path):
    """Friction: a quality file that forgot [quality] read `m: missing: this key is required`."""
    path = tmp_path / "q.toml"
    path.write_text(f'name = "q"\n[model]\ncheckpoint = "{ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"}"\n'
                    '[[schemes]]\nname = "bf16"\n')
    with pytest.raises(scenario.ScenarioError) as info:
        scenario.load(path)
    assert "missing: this key is required" not in str(info.value)
    assert "add a [quality] table" in info.value.message and "model-step scenario" in info.value.message
    path.write_text('name = "q"\n[quality]\ntext = "t.txt"\n[[schemes]]\nname = "bf16"\n')
    with pytest.raises(scenario.ScenarioError, match=r"q\.toml: model: a quality scenario \(\[quality\]\) names its model"):
        scenario.load(path)


def test_a_quality_scenario_has_no_m_and_its_file_keeps_no_step_keys():
    sc = scenario.load(ROOT / "scenarios" / "quality_llama3_8b_seeded.toml")
    assert sc.job == "quality" and not hasattr(sc, "m") and not hasattr(sc, "layer")
    data = sc.to_dict()
    assert "m" not in data and data["model"] == {"name": "llama3-8b"} and "methods" not in data["timing"]
    assert scenario.from_dict(data, sc.source) == sc


@pytest.mark.parametrize("kind, line", [
    ("layer", "M = [1]; K = 4096, N = 4096"),
    ("tp", "M = [1]; K = 4096, N = 4096, tp_size [1, 2, 4, 8] split ['column', 'row']"),
    ("step", "M = [1, 3]; model tiny Llama (2 blocks, CPU), context [16, 128]"),
    ("quality", "model Llama-3-8B, text ../data/text/hamlet.txt, 64 chunks of 512 tokens"),
])
def test_describe_is_the_kinds_check_line(kind, line):
    sc = scenario.load(ROOT / "scenarios" / BASES[kind])
    assert jobs.load(jobs.get(kind).describe)(sc) == line


def test_the_progress_line_says_where_a_row_was_measured():
    row = {"m": 16, "context": 128}
    assert jobs.get("layer").where(row) == " M=16"
    assert jobs.get("step").where(row) == " M=16 context=128"
    assert jobs.get("quality").where({"scheme": "bf16"}) == ""
