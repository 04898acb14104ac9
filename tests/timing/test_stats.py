import math

import pytest

from qbench.timing.stats import Stats, median_ci_ranks, median_ci_rel, percentile, summarize


def test_summarize_1_to_100_exact():
    s = summarize(range(1, 101))
    assert s.median == pytest.approx(50.5)
    assert s.p10 == pytest.approx(10.9)
    assert s.p90 == pytest.approx(90.1)
    assert s.mean == pytest.approx(50.5)
    assert s.cv == pytest.approx(math.sqrt(841.6666666666666) / 50.5)
    assert s.n == 100


def test_summarize_order_independent_and_single():
    assert summarize([3, 1, 2]).median == 2
    one = summarize([7.0])
    assert (one.median, one.p10, one.p90, one.cv, one.n) == (7.0, 7.0, 7.0, 0.0, 1)


def test_to_dict_is_schema_stats():
    d = summarize([1, 2, 3], converged=True).to_dict()
    assert set(d) == {"median", "p10", "p90", "mean", "cv", "n"}
    assert isinstance(d["n"], int)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_rejects(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_percentile_bounds():
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_median_ci_ranks_known():
    assert median_ci_ranks(5) is None  # 2 * (1/32) > 0.05
    assert median_ci_ranks(6) == (1, 6)  # P(B<=0) = 1/64
    # n=100: classic table value, ranks 40 and 61 (P(B<=39) = 0.0176)
    assert median_ci_ranks(100) == (40, 61)


def test_median_ci_rel():
    assert median_ci_rel([5.0] * 30) == 0.0
    assert median_ci_rel([1.0, 2.0, 3.0]) == math.inf
    xs = list(range(1, 101))
    assert median_ci_rel(xs) == pytest.approx((61 - 40) / 2 / 50.5)
