"""Summary statistics of timing samples (all values in µs).

`summarize` turns raw per-call samples into the schema's STATS record
(docs/results-schema.md: median, p10, p90, mean, cv, n). `median_ci_rel` gives the
relative half-width of a distribution-free ~95 % confidence interval of the median,
which the adaptive repetition loop (:mod:`qbench.timing.adaptive`) uses as its stop rule.
`verdict` is qbench's one noise rule between two readings (p10-p90 overlap: the same), which
every reader applies (:mod:`qbench.judge` for layer rows, :mod:`qbench.step.view` for steps).
"""

from __future__ import annotations

import math
from fractions import Fraction
from dataclasses import asdict, dataclass
from typing import Sequence

#: Two-sided tail mass of the median's confidence interval: 0.025 each side (~95 %).
CI_TAIL = 0.025


@dataclass(frozen=True)
class Stats:
    """Spread of one timing method's samples.

    Attributes:
        median, p10, p90, mean: µs per call. Percentiles use linear interpolation between
            order statistics (Hyndman & Fan type 7, numpy's default), so [1..100] gives
            median 50.5, p10 10.9, p90 90.1.
        cv: sample standard deviation (n-1) / mean, dimensionless; 0.0 when n == 1.
        n: number of samples.
        converged: True when the adaptive loop met its CI target, False when it stopped on
            budget or max_reps, None when not produced by the adaptive loop (e.g. the
            kernel profile). Not part of the schema's STATS; `to_dict` leaves it out.
        stop: why the adaptive loop stopped ("ci-target", "budget", "max-reps";
            :data:`qbench.timing.adaptive.STOP_REASONS`), None when not produced by it.
            ``to_dict`` writes it as ``stop`` when set.
    """

    median: float
    p10: float
    p90: float
    mean: float
    cv: float
    n: int
    converged: bool | None = None
    stop: str | None = None

    def to_dict(self) -> dict:
        """The schema's STATS object: {median, p10, p90, mean, cv, n} (µs, n an int), and ``stop``
        when the adaptive loop produced it."""
        d = asdict(self)
        d.pop("converged")
        if d["stop"] is None:
            d.pop("stop")
        return d


def _check(samples: Sequence[float]) -> list[float]:
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError("samples: need at least one sample, got none")
    bad = [x for x in xs if not math.isfinite(x)]
    if bad:
        raise ValueError(f"samples: must be finite, got {bad[0]!r}")
    return xs


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Percentile `q` in [0, 100] of an ascending sequence, linear interpolation (type 7).

    Raises:
        ValueError: empty input or q outside [0, 100].
    """
    if not sorted_xs:
        raise ValueError("percentile: empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: q must be in [0, 100], got {q}")
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    frac = pos - lo
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * frac


def summarize(samples_us: Sequence[float], converged: bool | None = None, stop: str | None = None) -> Stats:
    """Summarize per-call samples (µs) into a :class:`Stats`.

    Args:
        samples_us: per-call times in µs, any order, at least one, all finite.
        converged, stop: passed through to ``Stats.converged`` and ``Stats.stop``.

    Raises:
        ValueError: empty input or a non-finite sample (the value is in the message).
    """
    xs = sorted(_check(samples_us))
    n = len(xs)
    mean = math.fsum(xs) / n
    if n > 1:
        var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
        cv = math.sqrt(var) / mean if mean != 0 else float("inf")
    else:
        cv = 0.0
    return Stats(
        median=percentile(xs, 50.0),
        p10=percentile(xs, 10.0),
        p90=percentile(xs, 90.0),
        mean=mean,
        cv=cv,
        n=n,
        converged=converged,
        stop=stop,
    )


def median_ci_ranks(n: int, tail: float = CI_TAIL) -> tuple[int, int] | None:
    """1-based order-statistic ranks (l, u) of a distribution-free CI of the median.

    The number of samples below the true median is Binomial(n, 1/2); l is the largest rank
    with P(B <= l-1) <= tail, u = n + 1 - l, so [x_(l), x_(u)] covers the median with
    probability >= 1 - 2*tail (exact binomial sums with integers; e.g. Conover,
    *Practical Nonparametric Statistics*, 3rd ed., sec. 3.2). Returns None when n is too
    small for any such interval (n <= 5 at tail 0.025).
    """
    if n < 1:
        return None
    # Exact rational comparison: a float ``tail * 2**n`` overflows past n = 1023.
    frac = Fraction(tail).limit_denominator(10**9)
    total = 1 << n
    cum = 0  # P(B <= l-1) * 2^n
    l = 0
    for i in range(n):
        nxt = cum + math.comb(n, i)
        if nxt * frac.denominator > frac.numerator * total:
            break
        cum = nxt
        l = i + 1
    if l < 1:
        return None
    return l, n + 1 - l


def median_ci_rel(samples: Sequence[float], tail: float = CI_TAIL) -> float:
    """Relative half-width of a ~95 % distribution-free CI of the median.

    (x_(u) - x_(l)) / 2 / median with ranks from :func:`median_ci_ranks`; dimensionless.
    Returns ``inf`` when there are too few samples (n <= 5) or the median is 0 with a
    non-zero width; 0.0 for identical samples.

    Raises:
        ValueError: empty input or a non-finite sample.
    """
    xs = sorted(_check(samples))
    ranks = median_ci_ranks(len(xs), tail)
    if ranks is None:
        return float("inf")
    l, u = ranks
    width = xs[u - 1] - xs[l - 1]
    med = percentile(xs, 50.0)
    if med == 0:
        return 0.0 if width == 0 else float("inf")
    return abs(width / 2.0 / med)


def _interval(stats, runs: Sequence[float] = ()) -> tuple[float, float]:
    """[p10, p90] of ``stats``, widened to hold the median and every run's median of ``runs`` (the
    between-run spread of :func:`qbench.judge.tie_band`); the median alone when p10 or p90 is
    missing."""
    med, lo, hi = stats.median, stats.p10, stats.p90
    if lo is None or hi is None:
        lo = hi = med
    return min(lo, med, *runs), max(hi, med, *runs)


def verdict(a, b, a_runs: Sequence[float] = (), b_runs: Sequence[float] = ()) -> str:
    """``same`` when the [p10, p90] intervals of readings ``a`` and ``b`` (objects with ``median``,
    ``p10``, ``p90`` attributes in µs: a :class:`Stats` or a :class:`qbench.row.Stats`) overlap,
    else ``faster`` (B's median below A's) or ``slower``. A side without p10 or p90 is its median
    alone (a point), so it is ``same`` only when that point lies inside the other side's interval;
    with neither side having an interval the medians decide (NVBench's compare draws the same line).

    ``a_runs``/``b_runs``: the medians of a side's independent runs (``repeats.medians``, several
    files of one scenario); a side's interval then spans them too, so the wider of the within-run
    p10-p90 and the between-run spread decides (:func:`qbench.judge.tie_band`)."""
    lo_a, hi_a = _interval(a, a_runs)
    lo_b, hi_b = _interval(b, b_runs)
    if lo_b <= hi_a and lo_a <= hi_b:
        return "same"
    return "faster" if b.median < a.median else "slower"
