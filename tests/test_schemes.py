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
    with pytest.raises(schemes.UnknownSchemeError, match="did you mean.*nf4-bnb") as info:
        schemes.get("nf4bnb")
    assert "known:" not in str(info.value) and len(str(info.value)) < 160  # the hint alone, one short line
    with pytest.raises(schemes.UnknownSchemeError, match=r"\(known: fp32, tf32, "):  # nothing close: every name
        schemes.get("zzzz")


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


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("name", ["int8-bnb", "nf4-bnb", "fp4-bnb"])
def test_bnb_layers_are_built_without_a_cpu_initialised_weight(monkeypatch, name, with_bias):
    """bitsandbytes' Linear4bit / Linear8bitLt built on the CPU first draw nn.Linear's kaiming-uniform
    weight there (0.2-0.4 s a layer: 46 of nf4-bnb's 50 s in the H200 step benchmark); qbench replaces
    that weight, so it builds them on the meta device. The input that trips it: an init of a real tensor.
    The layer must still hold real tensors and compute what a CPU-initialised one does."""
    import bitsandbytes as bnb

    scheme, options = schemes.get(name), schemes.get(name).options_model()
    w = torch.randn(128, 64, generator=torch.Generator().manual_seed(1))
    b = torch.randn(128) if with_bias else None
    init = torch.nn.init.kaiming_uniform_

    def no_real_init(tensor, *a, **k):  # nn.Linear.reset_parameters: free on the meta device only
        assert tensor.device.type == "meta", f"{name}: nn.Linear's init drew a {tuple(tensor.shape)} weight on {tensor.device}"
        return init(tensor, *a, **k)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.init, "kaiming_uniform_", no_real_init)
        built = scheme.build(w, b, options)
    assert all(t.device.type == "cpu" for t in [*built.parameters(), *built.buffers()])
    if name == "int8-bnb":
        ref = bnb.nn.Linear8bitLt(64, 128, bias=with_bias, has_fp16_weights=False, threshold=options.threshold)
        ref.weight = bnb.nn.Int8Params(w.half(), requires_grad=False, has_fp16_weights=False)
        dtype = torch.float16
        ref = ref.to("cpu")
    else:
        ref = bnb.nn.Linear4bit(64, 128, bias=with_bias, compute_dtype=torch.bfloat16,
                                compress_statistics=options.double_quant, quant_type=name[:3])
        ref.weight = bnb.nn.Params4bit(w.bfloat16(), requires_grad=False, blocksize=options.blocksize,
                                       compress_statistics=options.double_quant, quant_type=name[:3])
        dtype = torch.bfloat16
        ref = ref.to("cpu")
        ref.weight = ref.weight._quantize("cpu") if not ref.weight.bnb_quantized else ref.weight
    if with_bias:
        ref.bias = torch.nn.Parameter(b.to(dtype), requires_grad=False)
    else:
        assert built.bias is None
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(2)).to(dtype)
    with torch.no_grad():
        assert torch.equal(built.eval()(x), ref.eval()(x))
