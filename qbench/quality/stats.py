"""llama.cpp's quality statistics of a quantized model against its reference, with uncertainties.

The set and the formulas of ``llama-perplexity --kl-divergence`` (llama.cpp,
``tools/perplexity/perplexity.cpp``: ``mean_and_uncertainty``, ``covariance`` and the
``kl_divergence`` summary), over the N scored tokens:

- PPL = exp(mean NLL); the uncertainty of the mean NLL is ``sqrt(var / (N - 1))`` (var with 1/N),
  and of PPL ``PPL × that`` (first-order propagation through exp).
- ln(PPL(Q)/PPL(ref)) = mean NLL(Q) - mean NLL(ref), uncertainty
  ``sqrt(u_Q² + u_ref² - 2 cov)`` with ``cov = (mean(NLL_Q NLL_ref) - mean_Q mean_ref) / (N - 1)``:
  the two runs score the same tokens, so their errors are correlated and the ratio is known far more
  precisely than either perplexity.
- KL divergence per token ``Σ_v p_ref(v) (ln p_ref(v) - ln p_Q(v))``: mean ± ``sqrt(var / (N - 1))``,
  its median, 90, 95, 99, 99.9 % and maximum.
- Same top: the share of tokens whose most likely next token is the reference's, ± the binomial
  ``sqrt(p (1 - p) / (N - 1))``.
- Δp = p_Q(token) - p_ref(token) of the token that follows: mean ± uncertainty, RMS Δp ±
  ``u(mean Δp²) / (2 RMS)``, and its percentiles (1, 5, 10, 50, 90, 95, 99 %, min, max).

Torch-free (numpy), so the reference values can be checked by hand (``tests/quality``).
"""

from __future__ import annotations

import math

import numpy as np

#: KL divergence percentiles reported (llama.cpp's list).
KLD_PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
#: Δp percentiles reported (llama.cpp's list).
DP_PERCENTILES = (1.0, 5.0, 10.0, 50.0, 90.0, 95.0, 99.0)


def mean_and_uncertainty(values: np.ndarray) -> tuple[float, float]:
    """The mean and the uncertainty of the mean, ``sqrt(var / (N - 1))`` with the 1/N variance
    (llama.cpp's ``mean_and_uncertainty``); uncertainty 0 for one value."""
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    mean = float(v.mean())
    var = max(float((v * v).mean()) - mean * mean, 0.0)
    return mean, (math.sqrt(var / (n - 1)) if n > 1 else 0.0)


def covariance(a: np.ndarray, b: np.ndarray) -> float:
    """The covariance of the two means, ``(mean(ab) - mean(a) mean(b)) / (N - 1)`` (llama.cpp's
    ``covariance``); 0 for one value."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = a.size
    if n < 2:
        return 0.0
    return (float((a * b).mean()) - float(a.mean()) * float(b.mean())) / (n - 1)


def _name(q: float) -> str:
    """``99.9`` -> ``"p99_9"``, ``50.0`` -> ``"p50"``: a percentile's key."""
    return "p" + f"{q:g}".replace(".", "_")


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q))


def _exp(x: float) -> float:
    """e^x, infinite beyond float range instead of raising: a mean NLL in the thousands (a weight of
    1e30) is a non-finite statistic the caller names, not an OverflowError."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def summarize(nll: np.ndarray, nll_ref: np.ndarray, kld: np.ndarray, same_top: np.ndarray,
              p: np.ndarray, p_ref: np.ndarray) -> dict:
    """The statistics of one scheme over N scored tokens (arrays of length N: the NLL of the token
    that follows under the scheme and the reference, nats; the per-token KL divergence, nats; whether
    the top token is the reference's; the probability of the token that follows under each).

    Returns a dict of floats: ``tokens``, ``ppl``, ``ppl_unc``, ``ref_ppl``, ``ref_ppl_unc``,
    ``ln_ppl_ratio``, ``ln_ppl_ratio_unc``, ``ppl_ratio``, ``ppl_ratio_unc``, ``nll_correlation``,
    ``kld`` (``mean``, ``unc``, ``p50`` .. ``p99_9``, ``max``), ``same_top``, ``same_top_unc``,
    ``dp`` (``mean``, ``unc``, ``rms``, ``rms_unc``, percentiles ``p1`` .. ``p99``, ``min``,
    ``max``; Δp in probability units, 0..1).

    Raises:
        ValueError: arrays of different lengths, or none.
    """
    arrays = [np.asarray(x, dtype=np.float64).ravel() for x in (nll, nll_ref, kld, same_top, p, p_ref)]
    n = arrays[0].size
    if n == 0 or any(a.size != n for a in arrays):
        raise ValueError(f"summarize: every array must hold the same number (> 0) of tokens, got "
                         f"{[a.size for a in arrays]}")
    nll, nll_ref, kld, same_top, p, p_ref = arrays
    log_ppl, log_ppl_unc = mean_and_uncertainty(nll)
    log_ref, log_ref_unc = mean_and_uncertainty(nll_ref)
    cov = covariance(nll, nll_ref)
    ratio = log_ppl - log_ref
    ratio_unc = math.sqrt(max(log_ppl_unc ** 2 + log_ref_unc ** 2 - 2.0 * cov, 0.0))
    corr = cov / (log_ppl_unc * log_ref_unc) if log_ppl_unc > 0 and log_ref_unc > 0 else None
    ppl, ref_ppl = _exp(log_ppl), _exp(log_ref)
    kld_mean, kld_unc = mean_and_uncertainty(kld)
    top = float(same_top.mean())
    top_unc = math.sqrt(top * (1.0 - top) / (n - 1)) if n > 1 else 0.0
    dp = p - p_ref
    dp_mean, dp_unc = mean_and_uncertainty(dp)
    ms, ms_unc = mean_and_uncertainty(dp * dp)
    rms = math.sqrt(ms)
    return {
        "tokens": int(n),
        "ppl": ppl, "ppl_unc": ppl * log_ppl_unc, "ref_ppl": ref_ppl, "ref_ppl_unc": ref_ppl * log_ref_unc,
        "ln_ppl_ratio": ratio, "ln_ppl_ratio_unc": ratio_unc,
        "ppl_ratio": _exp(ratio), "ppl_ratio_unc": _exp(ratio) * ratio_unc,
        "nll_correlation": corr,
        "kld": {"mean": kld_mean, "unc": kld_unc,
                **{_name(q): _pct(kld, q) for q in KLD_PERCENTILES}, "max": float(kld.max())},
        "same_top": top, "same_top_unc": top_unc,
        "dp": {"mean": dp_mean, "unc": dp_unc, "rms": rms, "rms_unc": (0.5 / rms * ms_unc) if rms > 0 else 0.0,
               **{_name(q): _pct(dp, q) for q in DP_PERCENTILES}, "min": float(dp.min()), "max": float(dp.max())},
    }
