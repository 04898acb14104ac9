"""The [tp] table: validated at the edge, errors naming tp.* and the value; round trip."""

import pytest

from qbench import scenario

BASE = {"name": "x", "m": [1], "layer": {"in_features": 256, "out_features": 256},
        "schemes": ["bf16", {"name": "int4-intx", "group_size": 64}]}


def test_tp_defaults_and_round_trip():
    sc = scenario.from_dict({**BASE, "tp": {"tp_size": [1, 2], "split": "row"}})
    assert sc.tp.tp_size == (1, 2) and sc.tp.split == ("row",) and sc.tp.reduce_dtype == "output"
    assert sc.to_dict()["tp"] == {"tp_size": [1, 2], "split": ["row"], "reduce_dtype": "output"}
    assert scenario.from_dict(sc.to_dict()) == sc
    assert scenario.from_dict({**BASE, "tp": {"tp_size": 4}}).tp.split == ("column", "row")
    assert "tp" not in scenario.from_dict(BASE).to_dict()  # result files of plain scenarios unchanged


@pytest.mark.parametrize("tp, key, words", [
    ({"tp_size": [3]}, "tp.tp_size", "power of two"),
    ({"tp_size": [16]}, "tp.tp_size", "16"),
    ({"tp_size": [2, 2]}, "tp.tp_size", "distinct"),
    ({"tp_size": [8], "split": "row"}, "tp.tp_size", "multiple of 64"),
    ({"tp_size": [2], "split": "diagonal"}, "tp.split[0]", "'diagonal'"),
    ({"tp_size": [2], "reduce_dtype": "fp8"}, "tp.reduce_dtype", "'fp8'"),
    ({"split": "row"}, "tp.tp_size", "missing"),
    ({"tp_size": [2], "sizes": 1}, "tp.sizes", "unknown key"),
])
def test_tp_errors_name_key_and_value(tp, key, words):
    with pytest.raises(scenario.ScenarioError) as info:
        scenario.from_dict({**BASE, "tp": tp}, "t.toml")
    message = str(info.value)
    assert message.startswith(f"t.toml: {key}: ") and words in message and "\n" not in message


def test_column_split_needs_n_to_divide():
    with pytest.raises(scenario.ScenarioError) as info:
        scenario.from_dict({**BASE, "layer": {"in_features": 256, "out_features": 12}, "tp": {"tp_size": [8], "split": "column"}}, "t.toml")
    assert str(info.value) == ("t.toml: tp.tp_size: layer.out_features (N, split = 'column') = 12 must divide by every "
                               "tp_size, got 8")
    # 12 divides by 2 and 4: a column split of those sizes is accepted
    assert scenario.from_dict({**BASE, "layer": {"in_features": 256, "out_features": 12},
                               "tp": {"tp_size": [2, 4], "split": "column"}}).tp.tp_size == (2, 4)
