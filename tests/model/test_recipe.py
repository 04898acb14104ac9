"""Mixed recipes (qbench.model.recipe): which scheme builds each linear, the scenario round trip, and
known answers of both jobs on the committed trained checkpoint on a CPU: a recipe naming the base
scheme everywhere is the plain scheme bit for bit, one naming bf16 everywhere is the bf16 row, int4
with int8 down projections loses between int8 and int4, and stored bytes are the hand sum of each
linear's bytes under its own scheme. Refusals: tests/bad_scenarios/recipe_*.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from qbench.scenario import from_dict, load
from qbench.step import floor
from qbench.model.config import PRESETS
from qbench.model.recipe import Choice, Plan, Recipe
from qbench.schemes.options import IntxOptions, SchemeOptions, TorchaoOptions

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
HAMLET = ROOT / "data" / "text" / "hamlet.txt"
#: (K, N) of the trained checkpoint's linears: hidden 128, 4 heads of 32, 2 KV heads, FFN 384, vocab 257
SHAPES = {"q_proj": (128, 128), "k_proj": (128, 64), "v_proj": (128, 64), "o_proj": (128, 128),
          "gate_proj": (128, 384), "up_proj": (128, 384), "down_proj": (384, 128), "lm_head": (128, 257)}
ALL_ROLES = ("q", "k", "v", "o", "gate", "up", "down")


def bf16_bytes(k: int, n: int) -> int:
    return 2 * k * n  # bf16 weight


def int8_bytes(k: int, n: int) -> int:
    return k * n + n * (4 + 1)  # int8 values, per-row float32 scale and int8 zero point (torchao)


def int4_intx_bytes(k: int, n: int) -> int:
    return k * n + n * (k // 128) * (2 + 1)  # int4 values one per int8, per-group bf16 scale and int8 zero point


# -- which scheme builds (block, role) --------------------------------------------------------------
def test_plan_kept_block_wins_then_role_then_base():
    int4, int8, bf16 = Choice("int4-intx", IntxOptions()), Choice("int8-weight-only", TorchaoOptions()), \
        Choice("bf16", SchemeOptions())
    recipe = Recipe(roles=(("down_proj", int8), ("lm_head", int8)), keep_blocks=(0, -1), keep_scheme=bf16)
    plan = Plan(int4, 4, recipe)
    assert plan.kept() == (0, 3)
    assert plan.choice(0, "down_proj") == bf16 and plan.choice(3, "q_proj") == bf16  # kept blocks win
    assert plan.choice(1, "down_proj") == int8 and plan.choice(2, "q_proj") == int4
    assert plan.choice(-1, "lm_head") == int8  # the head is in no block
    assert plan.counts(head=True) == {"bf16": 14, "int4-intx": 12, "int8-weight-only": 3}
    assert plan.counts(head=False) == {"bf16": 14, "int4-intx": 12, "int8-weight-only": 2}
    assert Plan(int4, 4).choice(3, "down_proj") == int4 and Plan(int4, 4).record(True) is None
    assert plan.identity() == {"roles": {"down_proj": "int8-weight-only", "lm_head": "int8-weight-only"},
                               "keep_blocks": {"blocks": [0, 3], "scheme": "bf16"}}


def test_plan_block_key_wins_over_kept_blocks_and_roles():
    int4, int8, bf16 = Choice("int4-intx", IntxOptions()), Choice("int8-weight-only", TorchaoOptions()), \
        Choice("bf16", SchemeOptions())
    g64 = Choice("int4-intx", IntxOptions(group_size=64))
    recipe = Recipe(roles=(("down_proj", int8),), keep_blocks=(0,), keep_scheme=bf16,
                    linears=((0, "down_proj", int4), (-1, "q_proj", g64), (2, "down_proj", bf16)))
    plan = Plan(int4, 4, recipe)
    assert plan.choice(0, "down_proj") == int4  # the block key beats the kept block
    assert plan.choice(0, "up_proj") == bf16  # the rest of the kept block
    assert plan.choice(3, "q_proj") == g64 and plan.choice(3, "k_proj") == int4  # -1 is block 3
    assert plan.choice(2, "down_proj") == bf16 and plan.choice(1, "down_proj") == int8  # beats the role
    # block 0: 6 bf16 + 1 int4; blocks 1, 2: 6 int4 + down (int8, bf16); block 3: q int4/64, 5 int4, down int8
    assert plan.counts(head=False) == {"int4-intx": 1 + 6 + 6 + 5, "bf16": 6 + 1, "int8-weight-only": 2,
                                       "int4-intx[group_size=64]": 1}
    assert plan.identity()["by_block"] == {"0.down_proj": "int4-intx", "2.down_proj": "bf16",
                                           "3.q_proj": "int4-intx[group_size=64]"}
    assert recipe.describe() == "down=int8-weight-only; 0.down=int4-intx,-1.q=int4-intx[group_size=64],2.down=bf16; " \
                                "blocks 0 bf16"
    same = Recipe(roles=recipe.roles, keep_blocks=recipe.keep_blocks, keep_scheme=bf16,
                  linears=((2, "down_proj", bf16), (3, "q_proj", g64), (-4, "down_proj", int4)))
    from qbench.model.recipe import identity_key

    key = identity_key(plan.record(False))
    assert key == identity_key(Plan(int4, 4, same).record(False))  # blocks written another way, same linears
    assert key != identity_key(Plan(int4, 4, Recipe(roles=recipe.roles, keep_blocks=(0,), keep_scheme=bf16)).record(False))
    assert "by_block" not in Plan(int4, 4, Recipe(roles=recipe.roles)).identity()  # older records read the same


def test_block_keys_group_by_scheme_in_the_label_and_round_trip():
    data = {"name": "r", "device": "cpu", "m": [1], "model": {"name": "tiny", "context": [8]},
            "schemes": [{"name": "int4-intx", "recipe": {"down": "int8-weight-only", "1.down_proj": "bf16",
                                                         "-1.q": {"name": "int4-intx", "group_size": 64},
                                                         "0.up": "bf16"}}]}
    scenario = from_dict(data, "<test>")
    entry = scenario.schemes[0]
    assert entry.label == "int4-intx recipe(down=int8-weight-only; 1.down+0.up=bf16,-1.q=int4-intx[group_size=64])"
    assert entry.recipe.linears[0][:2] == (1, "down_proj")
    assert entry.recipe.to_scenario()["recipe"] == {"down_proj": "int8-weight-only", "1.down": "bf16",
                                                    "-1.q": {"name": "int4-intx", "group_size": 64}, "0.up": "bf16"}
    again = from_dict(scenario.to_dict(), "<test>")
    assert again.schemes[0].recipe == entry.recipe and again.schemes[0].label == entry.label


BLOCK_KEY_REFUSALS = {  # recipe table -> (key named, words)
    "x.down": ({"x.down": "bf16"}, "schemes[0].recipe.x.down", ["integer block", "'x.down'"]),
    "3.lm_head": ({"1.lm_head": "bf16"}, "schemes[0].recipe.1.lm_head", ["in no block", "'1.lm_head'"]),
    "unknown role": ({"1.downn": "bf16"}, "schemes[0].recipe.1.downn", ["unknown role", "'1.downn'"]),
    "twice as written": ({"1.down": "bf16", "1.down_proj": "bf16"}, "schemes[0].recipe.1.down_proj",
                         ["second time", "'1.down_proj'"]),
    "outside": ({"2.down": "bf16"}, "schemes[0].recipe.2.down", ["2 blocks", "'2.down'"]),
    "outside negative": ({"-3.o": "bf16"}, "schemes[0].recipe.-3.o", ["2 blocks", "'-3.o'"]),
    "one linear twice": ({"1.down": "bf16", "-1.down": "bf16"}, "schemes[0].recipe.-1.down",
                         ["block 1's down_proj a second time", "'1.down'", "got '-1.down'"]),
    "activation dtype": ({"0.q": "int8-bnb"}, "schemes[0].recipe.0.q", ["float16", "'int8-bnb'"]),
    "option": ({"0.q": {"name": "int4-intx", "group_size": 100}}, "schemes[0].recipe.0.q.group_size", ["100"]),
}


@pytest.mark.parametrize("case", BLOCK_KEY_REFUSALS)
def test_block_key_refusals_name_the_key_and_value(case):
    from qbench.tables import ScenarioError

    table, key, words = BLOCK_KEY_REFUSALS[case]
    data = {"name": "r", "device": "cpu", "m": [1], "model": {"name": "tiny", "context": [8]},
            "schemes": [{"name": "int4-intx", "recipe": table}]}
    with pytest.raises(ScenarioError) as info:
        from_dict(data, "<test>")
    line = str(info.value)
    assert line.startswith(f"<test>: {key}: "), line
    for word in words:
        assert word in line, line


def test_a_block_key_refusal_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    from qbench import cli

    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nm = [1]\n[model]\nname = "tiny"\ncontext = [8]\n[[schemes]]\nname = "int4-intx"\n'
                    'recipe = { "5.down" = "bf16" }\n')
    code = cli.main(["run", str(path), "--out", str(tmp_path / "out" / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "schemes[0].recipe.5.down" in err and "'5.down'" in err
    assert not (tmp_path / "out").exists()


def test_scenario_round_trip_keeps_the_recipe_and_its_label():
    data = {"name": "r", "device": "cpu", "m": [1], "model": {"name": "tiny", "context": [8]},
            "schemes": [{"name": "int4-intx", "recipe": {"down": {"name": "int4-intx", "group_size": 64}, "q_proj": "bf16"},
                         "keep_blocks": {"blocks": [-1]}},
                        {"name": "int4-intx", "label": "mine", "recipe": {"down": "int8-weight-only"}}]}
    scenario = from_dict(data, "<test>")
    first = scenario.schemes[0]
    assert first.label == "int4-intx recipe(q=bf16,down=int4-intx[group_size=64]; blocks -1 bf16)"
    assert [r for r, _ in first.recipe.roles] == ["q_proj", "down_proj"]  # model order, full names
    again = from_dict(scenario.to_dict(), "<test>")
    assert [(e.label, e.recipe) for e in again.schemes] == [(e.label, e.recipe) for e in scenario.schemes]
    assert again.schemes[1].label == "mine"


def test_step_bytes_per_block_is_the_sum():
    c = PRESETS["tiny"]
    out = floor.step_bytes(c, m=1, context=8, blocks=2, block_weight_bytes=[100, 7], lm_head_bytes=0,
                           act_itemsize=2, kv_itemsize=2)
    assert out["weights"] == 107
    with pytest.raises(ValueError, match="2 blocks"):
        floor.step_bytes(c, m=1, context=8, blocks=2, block_weight_bytes=[1], lm_head_bytes=0, act_itemsize=2,
                         kv_itemsize=2)


# -- the quality job on the trained checkpoint ------------------------------------------------------
def _quality(tmp_path: Path, entries: list[str], extra: str = "") -> Path:
    lines = ['name = "r"', 'device = "cpu"', "[model]", f'checkpoint = "{TRAINED}"', "[quality]", f'text = "{HAMLET}"',
             "chunk = 512", "chunks = 4", extra]
    for entry in entries:
        lines += ["[[schemes]]", entry]
    path = tmp_path / "q.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _every_role(scheme: str) -> str:
    return "recipe = { " + ", ".join(f'{r} = "{scheme}"' for r in ALL_ROLES) + " }"


@pytest.fixture(scope="module")
def quality_rows(tmp_path_factory) -> dict:
    from tests.quality.conftest import run_scheme

    tmp = tmp_path_factory.mktemp("recipe-quality")
    entries = {
        "int4": 'name = "int4-intx"',
        "int4 everywhere": f'name = "int4-intx"\nlabel = "int4 everywhere"\n{_every_role("int4-intx")}',
        "bf16": 'name = "bf16"',
        "bf16 roles": f'name = "int4-intx"\nlabel = "bf16 roles"\n{_every_role("bf16")}',
        "bf16 blocks": 'name = "int4-intx"\nlabel = "bf16 blocks"\nkeep_blocks = { blocks = [0, 1, 2, 3] }',
        "int8": 'name = "int8-weight-only"',
        "int4 down int8": 'name = "int4-intx"\nlabel = "int4 down int8"\nrecipe = { down = "int8-weight-only" }',
        "mixed": 'name = "int4-intx"\nlabel = "mixed"\nrecipe = { down = "int8-weight-only" }\n'
                 'keep_blocks = { blocks = [0, -1] }',
    }
    by_block = ", ".join(f'"{b}.{r}" = "int4-intx"' for b in (0, -3, 2, -1) for r in ALL_ROLES)
    entries["int4 by block keys"] = f'name = "bf16"\nlabel = "int4 by block keys"\nrecipe = {{ {by_block} }}'
    entries["block keys mixed"] = ('name = "int4-intx"\nlabel = "block keys mixed"\nkeep_blocks = { blocks = [0] }\n'
                                   'recipe = { down = "int8-weight-only", "0.down" = "int4-intx", "-2.q" = "bf16" }')
    path = _quality(tmp, list(entries.values()))
    return {name: run_scheme(path, i, tmp) for i, name in enumerate(entries)}


def test_recipe_of_the_base_scheme_everywhere_is_the_plain_scheme(quality_rows):
    plain, recipe = quality_rows["int4"], quality_rows["int4 everywhere"]
    assert recipe["status"] == "ok" and recipe["stats"] == plain["stats"]  # bit for bit: every statistic equal
    assert recipe["linear_stored_bytes"] == plain["linear_stored_bytes"]
    assert recipe["recipe"]["linears"] == [{"scheme": "int4-intx", "count": 28, "ran": "kernel"}]


def test_recipe_of_bf16_everywhere_is_the_bf16_row(quality_rows):
    bf16 = quality_rows["bf16"]
    for name in ("bf16 roles", "bf16 blocks"):
        row = quality_rows[name]
        assert row["stats"] == bf16["stats"], name
        assert row["linear_stored_bytes"] == bf16["linear_stored_bytes"] == 4 * sum(
            bf16_bytes(*SHAPES[r]) for r in SHAPES if r != "lm_head")


def test_int4_with_int8_down_loses_between_int8_and_int4(quality_rows):
    kld = {name: quality_rows[name]["stats"]["kld"]["mean"] for name in ("int8", "int4 down int8", "int4")}
    assert 0 < kld["int8"] < kld["int4 down int8"] < kld["int4"], kld


def test_stored_bytes_are_the_hand_sum_of_each_linear(quality_rows):
    row = quality_rows["mixed"]  # blocks 0 and 3 bf16; blocks 1, 2: int4-intx with down int8-weight-only
    kept = sum(bf16_bytes(*SHAPES[r]) for r in SHAPES if r != "lm_head")
    middle = sum(int4_intx_bytes(*SHAPES[r]) for r in SHAPES if r not in ("lm_head", "down_proj"))
    middle += int8_bytes(*SHAPES["down_proj"])
    assert row["linear_stored_bytes"] == 2 * kept + 2 * middle == 1187840
    assert row["recipe"]["keep_blocks"] == {"blocks": [0, 3], "scheme": "bf16"}
    assert {i["scheme"]: i["count"] for i in row["recipe"]["linears"]} == {"bf16": 14, "int4-intx": 12,
                                                                          "int8-weight-only": 2}


def test_block_keys_naming_every_linear_are_that_scheme_bit_for_bit(quality_rows):
    plain, keyed = quality_rows["int4"], quality_rows["int4 by block keys"]
    assert keyed["status"] == "ok" and keyed["stats"] == plain["stats"]
    assert keyed["linear_stored_bytes"] == plain["linear_stored_bytes"]
    assert keyed["recipe"]["linears"] == [{"scheme": "int4-intx", "count": 28, "ran": "kernel"}]
    assert len(keyed["recipe"]["by_block"]) == 28 and keyed["recipe"]["by_block"]["1.q_proj"] == "int4-intx"


def test_block_keys_stored_bytes_are_the_hand_sum(quality_rows):
    row = quality_rows["block keys mixed"]
    # block 0 kept bf16 but its down int4 (block key); blocks 1, 3: int4 with down int8; block 2: q bf16, down int8
    int4 = {r: int4_intx_bytes(*SHAPES[r]) for r in SHAPES}
    bf16 = {r: bf16_bytes(*SHAPES[r]) for r in SHAPES}
    block0 = sum(bf16[r] for r in SHAPES if r not in ("lm_head", "down_proj")) + int4["down_proj"]
    block1 = sum(int4[r] for r in SHAPES if r not in ("lm_head", "down_proj")) + int8_bytes(*SHAPES["down_proj"])
    block2 = block1 - int4["q_proj"] + bf16["q_proj"]
    assert row["linear_stored_bytes"] == block0 + 2 * block1 + block2
    assert row["recipe"]["by_block"] == {"0.down_proj": "int4-intx", "2.q_proj": "bf16"}
    assert {i["scheme"]: i["count"] for i in row["recipe"]["linears"]} == {"bf16": 6 + 1, "int4-intx": 1 + 6 + 6 + 5,
                                                                          "int8-weight-only": 3}
    kld = {name: quality_rows[name]["stats"]["kld"]["mean"] for name in ("bf16", "block keys mixed", "int4")}
    assert kld["bf16"] < kld["block keys mixed"] < kld["int4"], kld


def test_an_emulated_part_flags_the_row_and_names_it(tmp_path):
    from tests.quality.conftest import run_scheme

    path = _quality(tmp_path, ['name = "int8-weight-only"\nrecipe = { down = "int4-weight-only" }'])
    row = run_scheme(path, 0, tmp_path)  # int4-weight-only (tinygemm) has no CPU kernel
    assert row["status"] == "ok" and row["emulated"] and row.get("linear_stored_bytes") is None
    (flag,) = [f for f in row["flags"] if f["name"] == "emulated"]
    assert "int4-weight-only linears" in flag["text"]
    ran = {i["scheme"]: i["ran"] for i in row["recipe"]["linears"]}
    assert ran == {"int8-weight-only": "kernel", "int4-weight-only": "emulated"}


# -- the step job on the trained checkpoint, and the pairing of both halves -------------------------
STEP = f"""name = "r"
device = "cpu"
seed = 7
m = [1]
[model]
checkpoint = "{TRAINED}"
context = [16]
quantize_lm_head = true
methods = ["step_cpu"]
linear_sum = false
[timing]
warmup = 1
min_reps = 3
max_reps = 5
budget_s = 0.05
[[schemes]]
name = "int4-intx"
[[schemes]]
name = "int4-intx"
label = "int4 everywhere"
{_every_role("int4-intx")}
[[schemes]]
name = "int4-intx"
label = "mixed"
recipe = {{ down = "int8-weight-only", lm_head = "int8-weight-only" }}
keep_blocks = {{ blocks = [0, -1] }}
[[schemes]]
name = "int4-intx"
label = "block keys"
recipe = {{ "1.down" = "int8-weight-only", "-1.q" = "bf16" }}
"""


@pytest.fixture(scope="module")
def step_rows(tmp_path_factory) -> list[dict]:
    from qbench.step.measure import measure_step_scheme

    path = tmp_path_factory.mktemp("recipe-step") / "s.toml"
    path.write_text(STEP)
    scenario = load(path)
    return [measure_step_scheme(scenario, i, torch.device("cpu"))[0] for i in range(len(scenario.schemes))]


def test_step_job_runs_a_recipe_with_each_linear_counted(step_rows):
    plain, same, mixed = step_rows[:3]
    assert [r["status"] for r in step_rows] == ["ok"] * 4
    assert same["error"] == plain["error"] and same["bytes"] == plain["bytes"]  # the base everywhere: the plain step
    kept = sum(bf16_bytes(*SHAPES[r]) for r in SHAPES if r != "lm_head")
    middle = sum(int4_intx_bytes(*SHAPES[r]) for r in SHAPES if r not in ("lm_head", "down_proj"))
    assert mixed["bytes"]["weights"] == 2 * kept + 2 * (middle + int8_bytes(*SHAPES["down_proj"]))
    assert mixed["bytes"]["lm_head"] == int8_bytes(*SHAPES["lm_head"])
    assert mixed["recipe"]["roles"] == {"down_proj": "int8-weight-only", "lm_head": "int8-weight-only"}
    assert {i["scheme"]: (i["count"], i["ran"]) for i in mixed["recipe"]["linears"]} == {
        "bf16": (14, "kernel"), "int4-intx": (12, "kernel"), "int8-weight-only": (3, "kernel")}
    assert mixed["error"]["kl_div"] < plain["error"]["kl_div"]  # more bits in the recipe: closer to FP32


def test_step_job_runs_block_keys_with_each_linear_counted(step_rows):
    plain, keyed = step_rows[0], step_rows[3]
    int4 = {r: int4_intx_bytes(*SHAPES[r]) for r in SHAPES}
    delta = int8_bytes(*SHAPES["down_proj"]) - int4["down_proj"] + bf16_bytes(*SHAPES["q_proj"]) - int4["q_proj"]
    assert keyed["bytes"]["weights"] == plain["bytes"]["weights"] + delta
    assert keyed["recipe"]["by_block"] == {"1.down_proj": "int8-weight-only", "3.q_proj": "bf16"}
    # the head (quantize_lm_head) is int4 too
    assert {i["scheme"]: i["count"] for i in keyed["recipe"]["linears"]} == {"int4-intx": 26 + 1, "int8-weight-only": 1,
                                                                            "bf16": 1}


def test_quality_of_pairs_a_recipe_only_with_the_same_recipe(step_rows, tmp_path):
    from qbench.quality.row import QualityRow
    from qbench.decision import quality_of
    from qbench.step.row import StepRow
    from tests.quality.conftest import run_scheme

    path = _quality(tmp_path, ['name = "int4-intx"',
                               'name = "int4-intx"\nlabel = "other label"\nrecipe = { down = "int8-weight-only", '
                               'lm_head = "int8-weight-only" }\nkeep_blocks = { blocks = [3, 0] }'],
                    extra="lm_head = true")
    quality = [QualityRow.model_validate(run_scheme(path, i, tmp_path)) for i in range(2)]
    plain, _, mixed = (StepRow.model_validate(r) for r in step_rows[:3])
    assert quality_of(plain, quality).scheme == "int4-intx"
    assert quality_of(mixed, quality).scheme == "other label"  # same recipe, blocks written another way
    assert quality_of(mixed, quality[:1]) is None  # never the base scheme's plain row


def test_shipped_recipe_scenarios_are_one_pair():
    """recipe_tiny_quality.toml and recipe_tiny_step.toml hold the same entries: each step row finds its quality row."""
    from qbench.model.recipe import plan_of

    quality, step = (load(ROOT / "scenarios" / f"recipe_tiny_{kind}.toml") for kind in ("quality", "step"))
    assert quality.model.checkpoint == step.model.checkpoint and quality.device == step.device == "auto"
    plans = [{e.label: (e.name, e.options, plan_of(e, 4).identity()) for e in s.schemes} for s in (quality, step)]
    assert plans[0] == plans[1]
    assert sum(e.recipe is not None for e in quality.schemes) == 2
