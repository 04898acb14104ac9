"""A choice written as a scheme entry: the base is the scheme most units take, every other unit's
linears named by block keys; the recipe module reads it back to the same scheme per linear."""

from __future__ import annotations

from qbench.model import recipe
from qbench.scenario import SchemeEntry
from qbench.schemes import get
from qbench.search.pipeline import others
from qbench.search.problem import Problem, model_units
from qbench.search.recipes import base_of, counts, entry


def cand(name: str, **options) -> SchemeEntry:
    return SchemeEntry(name=name, options=get(name).options_model(**options), label=name)


CANDS = [cand("bf16"), cand("int8-weight-only"), cand("int4-intx", group_size=32)]
UNITS = model_units(2, True)  # 2 blocks x 4 units + the LM head
PROBLEM = Problem(UNITS, tuple(c.label for c in CANDS), ((1.0, 1.0, 1.0),) * 9, ((0.0, 0.0, 0.0),) * 9,
                  ((0.0, 0.0, 0.0),) * 9, 0.0)


def test_a_choice_is_a_recipe_of_block_keys_over_the_most_common_scheme():
    choice = (1, 1, 1, 0, 2, 1, 1, 1, 0)  # block 0: down bf16; block 1: attn_in int4; the head bf16
    got = entry(PROBLEM, CANDS, choice, "r1 front 3")
    assert got == {"name": "int8-weight-only", "label": "r1 front 3",
                   "recipe": {"0.down": "bf16", "1.q": {"name": "int4-intx", "group_size": 32},
                              "1.k": {"name": "int4-intx", "group_size": 32},
                              "1.v": {"name": "int4-intx", "group_size": 32}, "lm_head": "bf16"}}
    assert counts(PROBLEM, choice) == {"bf16": 2, "int8-weight-only": 6, "int4-intx": 1}
    item = {k: v for k, v in got.items() if k in recipe.KEYS}
    parsed = recipe.parse(item, "schemes[0]")
    plan = recipe.Plan(recipe.Choice("int8-weight-only", CANDS[1].options), 2, parsed)
    for u, c in zip(UNITS, choice):  # every linear is built by the unit's own candidate
        for role in u.roles:
            assert plan.choice(u.block if u.block is not None else -1, role).name == CANDS[c].name


def test_one_scheme_everywhere_is_a_plain_entry():
    assert entry(PROBLEM, CANDS, (2,) * 9, "x") == {"name": "int4-intx", "group_size": 32, "label": "x"}
    assert base_of((0, 1, 1, 0)) == 0  # a tie: the earlier candidate


def test_the_points_verified_beside_the_pick_are_its_nearest_neighbours():
    front = list(range(6))
    assert others(front, 2, 2) == [1, 3]
    assert others(front, 0, 2) == [1, 2]  # the fastest point: the next two safer ones
    assert others(front, 5, 3) == [4, 3, 2]
    assert others([0, 1], 0, 2) == [1]  # a front of two: one other
