"""A search's choice (one candidate per unit) written as the scheme entry a scenario runs (torch-free).

The base is the candidate most units take; every other unit's linears are named one by one with
the recipe's ``"<block>.<role>"`` keys (``"3.down" = "int8-weight-only"``), the LM head by its role
key. So a pick runs as it is in the quality job and the step job, and a user pastes it into a
scenario's ``[[schemes]]``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from qbench.model.recipe import Choice
from qbench.search.problem import Problem


def counts(problem: Problem, choice: Sequence[int]) -> dict[str, int]:
    """Units per candidate label, in candidate order (candidates no unit takes left out)."""
    n = Counter(choice)
    return {label: n[c] for c, label in enumerate(problem.candidates) if n[c]}


def base_of(choice: Sequence[int]) -> int:
    """The candidate most units take (ties: the earlier candidate)."""
    n = Counter(choice)
    return max(sorted(n), key=lambda c: n[c])


def entry(problem: Problem, candidates: Sequence[Any], choice: Sequence[int], label: str) -> dict:
    """The scheme entry of ``choice`` (``candidates``: the scenario's scheme entries, in the
    problem's candidate order): the base's name and options, ``label``, and a ``recipe`` table naming
    every unit's linears that the base does not build (no ``recipe`` when one candidate takes every unit).
    """
    b = base_of(choice)
    base = candidates[b]
    out: dict[str, Any] = {"name": base.name, **Choice(base.name, base.options).changed(), "label": label}
    if base.options.mode != "eager":
        out["mode"] = base.options.mode
    table: dict[str, Any] = {}
    for unit, c in zip(problem.units, choice):
        if c == b:
            continue
        scheme = Choice(candidates[c].name, candidates[c].options).to_scenario()
        for role in unit.roles:
            table[role if unit.block is None else f"{unit.block}.{role.removesuffix('_proj')}"] = scheme
    if table:
        out["recipe"] = table
    return out
