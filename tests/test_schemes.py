"""Every registered scheme, through the same parametrized checks (CPU here, CUDA when present)."""

import pytest
import torch

from qbench import metrics, schemes
from qbench.schemes import ledger
from qbench.schemes.base import SchemeOptions
from tests.conftest import CUDA

K, N, M = 256, 128, 4
ALL = schemes.names()


def _devices():
    return ["cpu"] + (["cuda"] if CUDA else [])


def test_registry_has_the_mission_schemes():
    assert set(ALL) >= {"fp32", "tf32", "fp16", "bf16", "fp8-weight-only", "fp8-dynamic", "int8-weight-only",
                        "w8a8-dynamic", "int8-bnb", "int4-weight-only", "int4-intx", "nf4-bnb", "fp4-bnb",
                        "int4-plain", "int4-preshuffled", "fp8-int4", "int4-weight-only-gemlite",
                        "int8-weight-only-gemlite", "fp8-weight-only-gemlite", "fp8-dynamic-gemlite"}


def test_unknown_scheme_suggests_close_names():
    with pytest.raises(schemes.UnknownSchemeError, match="did you mean.*nf4-bnb"):
        schemes.get("nf4bnb")


def test_duplicate_registration_refused():
    with pytest.raises(ValueError, match="already registered"):
        schemes.register(schemes.get("fp16"))


@pytest.mark.parametrize("name", ALL)
def test_scheme_declaration(name):
    s = schemes.get(name)
    assert s.library in {"torch", "torchao", "bitsandbytes", "gemlite"}
    assert s.compute_dtype in {"fp32", "tf32", "fp16", "bf16", "fp8", "int8"}
    assert s.family in {"float", "weight-only", "dynamic", "bnb"}
    assert issubclass(s.options_model, SchemeOptions) and s.summary


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("name", ALL)
def test_scheme_builds_runs_and_is_accurate(name, device):
    """Build from an FP32 weight, count the ledger, run, and compare with the float64 reference;
    a scheme that cannot run here must say why (a skipped row), which this test reports."""
    scheme = schemes.get(name)
    options = scheme.options_model()
    dev = torch.device(device)
    reason = scheme.unavailable_reason(dev, options)
    if reason:
        pytest.skip(f"{name} on {device}: {reason}")
    gen = torch.Generator().manual_seed(1)
    weight = (torch.randn(N, K, generator=gen) / K**0.5).to(dev)
    x = torch.randn(M, K, generator=gen).to(dev)
    module = scheme.build(weight, None, options)
    book = ledger.count(scheme.parts(module))
    assert book.payload_bytes > 0
    # payload never exceeds the FP32 weight, and a quantized format really is smaller
    assert book.payload_bytes <= K * N * 4
    if scheme.nominal_bits < 16:
        assert book.stored_bytes < K * N * 2
    with torch.inference_mode():
        y = module(x.to(scheme.activation_dtype))
    ref = x.double() @ weight.double().T
    err = metrics.error_metrics(y, ref)
    assert err["nonfinite"] == 0
    bound = {32: 1e-5, 16: 1e-2, 8: 6e-2, 4: 0.2}[int(scheme.nominal_bits)]
    if name == "tf32":
        bound = 3e-3
    assert err["rel_fro"] < bound, f"{name}: rel_fro {err['rel_fro']:.3g} >= {bound}"
