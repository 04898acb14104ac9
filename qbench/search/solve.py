"""The exact time-vs-predicted-KLD front of a per-unit scheme choice (a multiple-choice knapsack).

Each unit (a block's attention input, o, MLP input, down; the LM head) takes one candidate scheme;
a recipe's predicted step time is the fixed rest plus the sum of its units' times, its predicted
mean KLD the rest's damage plus the sum of its units' damages (each measured with that unit quantized
alone; the rest's damage is what the base's whole row measures beyond its units'). The front is
every recipe no other recipe beats on both: built by dynamic programming over the units, each stage
the previous front plus each option of the next unit, dominated points dropped (a point is dropped
when another is no slower and strictly less damaged, or equal on both). Dropping a dominated partial
recipe loses nothing: whatever the remaining units add, its completion is dominated too, so the
result is the exact front (the tests check it against every recipe enumerated).

Torch-free; numpy does the merging, so a front of 10^5 points over 129 units stays in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from qbench.search.problem import Problem


class Infeasible(ValueError):
    """No recipe of the front meets the budget (one line: the budget and the least damage reachable)."""


@dataclass(frozen=True)
class Point:
    """One recipe of the front.

    Attributes:
        time_us: predicted step time (µs): the problem's fixed rest + Σ unit times.
        kld: predicted mean KLD (nats/token): the problem's fixed_kld + Σ unit damages.
        choice: per unit (the problem's order), the index of its candidate.
    """

    time_us: float
    kld: float
    choice: tuple[int, ...]


def _unit_options(times: Sequence[float], damages: Sequence[float]) -> list[int]:
    """The candidates of one unit that no other of the same unit dominates (a unit's own front)."""
    keep = []
    for c, (t, d) in enumerate(zip(times, damages)):
        if not any((t2 <= t and d2 <= d and (t2 < t or d2 < d)) or (t2 == t and d2 == d and c2 < c)
                   for c2, (t2, d2) in enumerate(zip(times, damages)) if c2 != c):
            keep.append(c)
    return keep


def front(problem: Problem) -> list[Point]:
    """The exact Pareto front of ``problem``: every recipe (one candidate per unit) whose predicted
    time and predicted KLD no other recipe beats on both, sorted by time (fastest first, so KLD
    falls along the list). Ties (equal time and KLD) keep one recipe.

    Returns:
        The front's points; a problem with no units gives one point (the fixed rest and its KLD, ()).
    """
    n_units = len(problem.units)
    times = np.zeros(1)
    damages = np.zeros(1)
    parents: list[np.ndarray] = []  # per stage: the index of each point's point at the stage before
    picks: list[np.ndarray] = []  # per stage: each point's candidate of that stage's unit
    for u in range(n_units):
        opts = _unit_options(problem.time_us[u], problem.damage[u])
        t = np.concatenate([times + problem.time_us[u][c] for c in opts])
        d = np.concatenate([damages + problem.damage[u][c] for c in opts])
        parent = np.tile(np.arange(len(times)), len(opts))
        pick = np.repeat(np.asarray(opts), len(times))
        order = np.lexsort((d, t))  # by time, then damage: the first of equal times is the least damaged
        t, d, parent, pick = t[order], d[order], parent[order], pick[order]
        best_before = np.concatenate(([np.inf], np.minimum.accumulate(d)[:-1]))
        keep = d < best_before  # strictly less damaged than every point no slower: not dominated
        times, damages = t[keep], d[keep]
        parents.append(parent[keep])
        picks.append(pick[keep])
    choices = np.zeros((len(times), n_units), dtype=np.int64)
    index = np.arange(len(times))
    for u in range(n_units - 1, -1, -1):  # every point's recipe at once, walking the stages back
        choices[:, u] = picks[u][index]
        index = parents[u][index]
    return [Point(problem.fixed_us + float(t), problem.fixed_kld + float(d), tuple(int(c) for c in row))
            for t, d, row in zip(times, damages, choices)]


def pick(points: Sequence[Point], budget: float) -> Point:
    """The fastest point of a front whose predicted KLD is at most ``budget`` (nats/token).

    Raises:
        Infeasible: none is; the line names the budget and the least predicted KLD of the front."""
    within = [p for p in points if p.kld <= budget]
    if not within:
        least = min(p.kld for p in points)
        raise Infeasible(f"search.max_kld: no recipe of the candidates is predicted within {budget:g} nats/token (the "
                         f"least damaged recipe is predicted at {least:.4g}): raise the budget or add a candidate "
                         f"with less damage, got {budget:g}")
    return min(within, key=lambda p: (p.time_us, p.kld))


def predict(problem: Problem, choice: Sequence[int]) -> tuple[float, float]:
    """``(time_us, kld)`` predicted for one recipe: fixed + Σ unit times, fixed_kld + Σ unit damages."""
    t = problem.fixed_us + sum(problem.time_us[u][c] for u, c in enumerate(choice))
    return t, problem.fixed_kld + sum(problem.damage[u][c] for u, c in enumerate(choice))


def refit_factor(predicted: float, measured: float, measured_unc: float, fixed: float = 0.0) -> Optional[float]:
    """The factor a refit scales every unit damage by: the measured KLD's upper bound (mean + its
    uncertainty) less the rest's damage ``fixed`` (which a refit keeps), over the predicted units'
    sum (``predicted - fixed``), so the recipe that missed is predicted where it was measured at worst
    and a re-solve at the same budget must move off it. None when the units' prediction or the bound
    beyond the rest is not positive (nothing to scale)."""
    units, bound = predicted - fixed, measured + measured_unc - fixed
    return None if units <= 0 or bound <= 0 else bound / units


def refit(problem: Problem, factor: float) -> Problem:
    """``problem`` with every unit damage (and its uncertainty) scaled by ``factor`` (> 0): the unit
    damages' sum missed the measured KLD of a whole recipe (damages of parts do not add up), so the
    predictions are rescaled to the measurement and the front re-solved. The rest's damage
    (``fixed_kld``, measured whole on the base) is kept."""
    if not factor > 0:
        raise ValueError(f"refit factor must be > 0, got {factor}")
    scale = lambda rows: tuple(tuple(v * factor for v in row) for row in rows)  # noqa: E731
    return replace(problem, damage=scale(problem.damage), damage_unc=scale(problem.damage_unc),
                   scale=problem.scale * factor)
