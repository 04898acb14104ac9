"""The solver: the exact front against every recipe enumerated, the pick at a budget, the refit."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from qbench.search.problem import Problem, model_units
from qbench.search.solve import Infeasible, front, pick, predict, refit, refit_factor


def problem(times, damages, fixed=100.0) -> Problem:
    units = model_units(-(-len(times) // 4), False)[: len(times)]  # the first len(times) units of a model
    return Problem(units, tuple(f"c{i}" for i in range(len(times[0]))), tuple(map(tuple, times)),
                   tuple(map(tuple, damages)), tuple(tuple(0.0 for _ in row) for row in damages), fixed)


def brute_front(p: Problem) -> set[tuple[float, float]]:
    """Every recipe enumerated; the (time, KLD) pairs no other pair beats on both."""
    points = {predict(p, choice) for choice in itertools.product(range(len(p.candidates)), repeat=len(p.units))}
    return {a for a in points if not any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in points)}


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.integers(1, 4).flatmap(lambda k: st.tuples(
    st.lists(st.lists(st.integers(0, 30), min_size=k, max_size=k), min_size=n, max_size=n),
    st.lists(st.lists(st.integers(0, 30), min_size=k, max_size=k), min_size=n, max_size=n)))))
def test_front_is_every_undominated_recipe(data):
    times, damages = data  # integers: sums in any order are exact, so the sets compare exactly
    p = problem([[float(t) for t in row] for row in times], [[float(d) for d in row] for row in damages])
    got = front(p)
    assert {(q.time_us, q.kld) for q in got} == brute_front(p)
    assert len(got) == len({(q.time_us, q.kld) for q in got})  # ties keep one recipe
    assert [q.time_us for q in got] == sorted(q.time_us for q in got)
    for q in got:  # each point's recipe is predicted where the point says
        assert predict(p, q.choice) == (q.time_us, q.kld)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(0.0, 50.0), min_size=3, max_size=3), min_size=4, max_size=4),
       st.lists(st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3), min_size=4, max_size=4),
       st.floats(0.0, 4.0))
def test_pick_is_the_fastest_recipe_within_the_budget(times, damages, budget):
    p = problem(times, damages)
    every = [predict(p, c) for c in itertools.product(range(3), repeat=4)]
    # a recipe exactly at the budget is within it; sums in another order may land a rounding either side,
    # so the pick lies between the fastest strictly within and the fastest within a rounding over
    inside = [t for t, d in every if d <= budget * (1 - 1e-9)]
    edge = [t for t, d in every if d <= budget * (1 + 1e-9) + 1e-12]
    if not inside:
        return
    got = pick(front(p), budget).time_us
    assert min(edge) - 1e-9 <= got <= min(inside) + 1e-9


# A hand-made case: three units, bf16 (10 µs, 0.001 each) or int4 (4 µs; 0.02, 0.01 and 0.1 nats):
# pure int4 is 112 µs at 0.13 nats, pure bf16 130 µs at 0.003; every recipe by hand:
# (1,1,0) 118 µs 0.031, (0,1,0) 124 µs 0.012, (1,0,0) 124 µs 0.022, the rest dominated.
HAND = problem([[10, 4], [10, 4], [10, 4]], [[0.001, 0.02], [0.001, 0.01], [0.001, 0.1]])


def test_the_fastest_pure_scheme_misses_and_a_mix_meets_the_budget():
    points = front(HAND)
    assert [(q.time_us, round(q.kld, 6), q.choice) for q in points] == [
        (112.0, 0.13, (1, 1, 1)), (118.0, 0.031, (1, 1, 0)), (124.0, 0.012, (0, 1, 0)), (130.0, 0.003, (0, 0, 0))]
    chosen = pick(points, 0.05)
    assert chosen.choice == (1, 1, 0) and chosen.time_us == 118.0  # int4 on the first two units, the third bf16
    assert predict(HAND, HAND.pure(1))[1] > 0.05  # the fastest pure scheme misses


def test_no_feasible_recipe_is_one_line():
    with pytest.raises(Infeasible) as info:
        pick(front(HAND), 0.001)
    assert str(info.value) == ("search.max_kld: no recipe of the candidates is predicted within 0.001 nats/token (the "
                               "least damaged recipe is predicted at 0.003): raise the budget or add a candidate with "
                               "less damage, got 0.001")


def test_refit_moves_the_pick_off_a_recipe_whose_measured_bound_missed():
    chosen = pick(front(HAND), 0.05)  # (1,1,0), predicted 0.031
    factor = refit_factor(chosen.kld, measured=0.05, measured_unc=0.01)  # measured 0.05 ± 0.01: bound 0.06 misses
    assert factor == pytest.approx(0.06 / 0.031)
    again = refit(HAND, factor)
    assert again.scale == pytest.approx(factor)
    assert predict(again, chosen.choice)[1] == pytest.approx(0.06)
    moved = pick(front(again), 0.05)
    assert moved.choice == (0, 1, 0) and moved.kld == pytest.approx(0.012 * factor)  # the next safer recipe
    assert refit_factor(0.0, 0.01, 0.001) is None
    with pytest.raises(ValueError):
        refit(HAND, 0.0)


def test_the_rests_damage_is_added_to_every_prediction_and_kept_by_a_refit():
    """HAND with 0.01 of damage no unit carries: every front point 0.01 higher (same recipes), (1,1,0) now predicted
    0.041; measured 0.05 ± 0.01 gives the units (0.06 - 0.01) / 0.031, and after the refit it is predicted at 0.06."""
    from dataclasses import replace

    rest = replace(HAND, fixed_kld=0.01)
    assert [(q.choice, q.kld) for q in front(rest)] == [(q.choice, pytest.approx(q.kld + 0.01)) for q in front(HAND)]
    chosen = pick(front(rest), 0.05)
    assert chosen.choice == (1, 1, 0) and chosen.kld == pytest.approx(0.041)
    factor = refit_factor(chosen.kld, measured=0.05, measured_unc=0.01, fixed=rest.fixed_kld)
    assert factor == pytest.approx(0.05 / 0.031)
    again = refit(rest, factor)
    assert again.fixed_kld == 0.01 and predict(again, chosen.choice)[1] == pytest.approx(0.06)
    assert refit_factor(0.041, measured=0.0, measured_unc=0.005, fixed=0.01) is None  # the bound is all rest


def test_a_unit_whose_candidates_tie_keeps_one_recipe():
    p = problem([[5, 5]], [[0.1, 0.1]])
    assert [(q.time_us, q.kld) for q in front(p)] == [(105.0, 0.1)]
