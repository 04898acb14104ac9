"""llama.cpp's statistics on inputs whose answers are computed by hand."""

import math

import numpy as np
import pytest

from qbench.quality.stats import covariance, mean_and_uncertainty, summarize


def test_mean_and_uncertainty_by_hand():
    # mean 2, variance (1 + 0 + 1) / 3 = 2/3, uncertainty sqrt((2/3) / 2) = sqrt(1/3)
    mean, unc = mean_and_uncertainty(np.array([1.0, 2.0, 3.0]))
    assert mean == 2.0 and unc == pytest.approx(math.sqrt(1 / 3))
    assert mean_and_uncertainty(np.array([5.0])) == (5.0, 0.0)


def test_covariance_by_hand():
    # mean(ab) = (1*2 + 2*4 + 3*6) / 3 = 28/3; mean a = 2, mean b = 4: (28/3 - 8) / 2 = 2/3
    assert covariance(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])) == pytest.approx(2 / 3)


def test_identical_runs_give_ratio_one_and_no_uncertainty():
    nll = np.array([1.0, 2.0, 0.5, 3.0])
    p = np.exp(-nll)
    s = summarize(nll, nll, np.zeros(4), np.ones(4), p, p)
    assert s["ppl"] == pytest.approx(math.exp(1.625)) and s["ref_ppl"] == s["ppl"]
    assert s["ln_ppl_ratio"] == 0 and s["ln_ppl_ratio_unc"] == pytest.approx(0, abs=1e-12)
    assert s["nll_correlation"] == pytest.approx(1.0)
    assert s["kld"]["mean"] == 0 and s["same_top"] == 1.0 and s["same_top_unc"] == 0
    assert s["dp"]["rms"] == 0 and s["dp"]["mean"] == 0


def test_known_statistics():
    nll_ref = np.array([1.0, 1.0, 2.0, 2.0])
    nll = nll_ref + np.array([0.1, 0.1, 0.3, 0.3])  # a constant shift per pair: ratio = mean shift = 0.2
    kld = np.array([0.0, 0.1, 0.2, 0.3])
    same = np.array([1, 1, 1, 0])
    p_ref = np.array([0.5, 0.5, 0.25, 0.25])
    p = np.array([0.4, 0.5, 0.25, 0.35])  # Δp = -0.1, 0, 0, 0.1
    s = summarize(nll, nll_ref, kld, same, p, p_ref)
    assert s["tokens"] == 4
    assert s["ln_ppl_ratio"] == pytest.approx(0.2)
    assert s["ppl_ratio"] == pytest.approx(math.exp(0.2))
    # u_Q² + u_ref² - 2 cov with the shift's own spread only: var(shift) = 0.01 -> sqrt(0.01 / 3)
    assert s["ln_ppl_ratio_unc"] == pytest.approx(math.sqrt(0.01 / 3))
    assert s["kld"]["mean"] == pytest.approx(0.15)
    assert s["kld"]["unc"] == pytest.approx(math.sqrt((0.035 - 0.0225) / 3))  # mean(k²) = 0.14/4
    assert s["kld"]["max"] == pytest.approx(0.3) and s["kld"]["p50"] == pytest.approx(0.15)
    assert s["same_top"] == 0.75 and s["same_top_unc"] == pytest.approx(math.sqrt(0.75 * 0.25 / 3))
    assert s["dp"]["mean"] == pytest.approx(0.0) and s["dp"]["rms"] == pytest.approx(math.sqrt(0.005))
    assert s["dp"]["min"] == pytest.approx(-0.1) and s["dp"]["max"] == pytest.approx(0.1)


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(ValueError):
        summarize(np.ones(3), np.ones(2), np.ones(3), np.ones(3), np.ones(3), np.ones(3))


def test_a_perplexity_beyond_float_range_is_infinite_not_an_error():
    """A mean NLL of 1000 nats (a 1e30 weight) overflows e^x: the statistic is inf, which the
    quality job reports as a non-finite statistic, instead of an OverflowError ending the worker."""
    import math

    import numpy as np

    from qbench.quality.stats import summarize

    n = 8
    nll = np.full(n, 1000.0)
    out = summarize(nll, np.full(n, 1.0), np.zeros(n), np.ones(n), np.full(n, 0.5), np.full(n, 0.5))
    assert out["ppl"] == math.inf and out["ppl_ratio"] == math.inf and out["ref_ppl"] == math.e ** 1.0


def test_float16_log_probs_give_a_kld_never_below_zero():
    # a scheme within a rounding of the reference, log-probs stored at float16 (quality.logprobs): each rounded
    # distribution sums to 1 only within ~1e-4, which made a unit's tiny mean KLD negative (the row model refused
    # it); renormalized, the KL of the rounded distributions is >= 0 and the float32 store is unchanged
    from types import SimpleNamespace as NS

    import torch

    from qbench.quality.measure import _per_token

    g = torch.Generator().manual_seed(0)
    ref_logits = torch.randn(2, 64, 5000, generator=g) * 3
    tokens = torch.randint(0, 5000, (2, 129), generator=g)
    for store in (torch.float16, torch.float32):
        lp_ref = torch.log_softmax(ref_logits, -1).to(store).float()
        ref = NS(first=64, scored=64, store=store, chunk=lambda c, device, lp_ref=lp_ref: lp_ref[c])
        tokens = torch.cat([tokens[:, :1], torch.randint(0, 5000, (2, 128), generator=g)], 1)
        per = _per_token(None, tokens, ref, torch.device("cpu"),
                         logits_of=lambda c: ref_logits[c] + 1e-4 * torch.randn(64, 5000, generator=g))
        if store == torch.float16:
            assert per["kld"].min() >= -1e-12  # a KL of two distributions, each summing to 1
        assert abs(per["kld"].mean()) < 1e-5  # a perturbation of 1e-4 in the logits, float16 rounding
