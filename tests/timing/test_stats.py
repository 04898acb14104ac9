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


# ---- boundaries and exact answers (mutation testing, docs/testing.md) ---------------------------

def test_messages():
    with pytest.raises(ValueError, match=r"^samples: need at least one sample, got none$"):
        summarize([])
    with pytest.raises(ValueError, match=r"^samples: must be finite, got nan$"):
        median_ci_rel([1.0, float("nan")])
    with pytest.raises(ValueError, match=r"^percentile: empty sequence$"):
        percentile([], 50)
    for q in (-0.5, 100.5):
        with pytest.raises(ValueError, match=rf"^percentile: q must be in \[0, 100\], got {q}$"):
            percentile([1.0], q)


def test_percentile_ends_and_interpolation():
    xs = [1.0, 2.0, 3.0]
    assert (percentile(xs, 0), percentile(xs, 0.5), percentile(xs, 100)) == (1.0, 1.01, 3.0)
    assert percentile(xs, 95) == pytest.approx(2.9, rel=1e-15)  # pos 1.9: 2 + 0.9 x (3 - 2)


def test_summarize_two_samples_and_zero_mean():
    s = summarize([1.0, 3.0])  # mean 2, sample variance ((1-2)^2 + (3-2)^2) / 1 = 2
    assert s.cv == pytest.approx(math.sqrt(2) / 2, rel=1e-15)
    assert summarize([0.0, 2.0]).cv == pytest.approx(math.sqrt(2), rel=1e-15)  # mean 1
    assert summarize([-1.0, 1.0]).cv == math.inf  # mean 0: no relative spread
    assert summarize([1.0], converged=True).converged is True
    assert summarize([1.0, 2.0], converged=False).converged is False


def test_median_ci_ranks_boundaries():
    assert median_ci_ranks(0) is None
    assert median_ci_ranks(1, tail=0.5) == (1, 1)  # P(B <= 0) = 1/2 <= 0.5 exactly
    assert median_ci_ranks(6, tail=1 / 64) == (1, 6)  # P(B <= 0) = 1/64: equality is inside
    assert median_ci_ranks(6, tail=1 / 65) is None
    # the tail is read to 9 digits: 0.00999 is not 1/90 (which would give rank 2 at n = 10)
    assert median_ci_ranks(10, tail=0.00999) == (1, 10)


def test_median_ci_rel_tail_and_zero_median():
    assert median_ci_rel([1, 2, 3, 4, 5]) == math.inf  # too few for the default 95 %
    assert median_ci_rel([1, 2, 3, 4, 5], tail=0.5) == 0.0  # ranks (3, 3): width 0
    assert median_ci_rel([0.0] * 6) == 0.0
    assert median_ci_rel([-1, 0, 0, 0, 0, 0, 1]) == math.inf  # median 0, width 2
    assert median_ci_rel([0, 1, 1, 1, 1, 1, 2]) == 1.0  # ranks (1, 7): (2 - 0) / 2 / 1
