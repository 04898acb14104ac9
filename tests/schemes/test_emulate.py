"""Emulated layers (``Scheme.emulate``, :mod:`qbench.schemes.emulate`): every scheme with an
emulation builds a float layer of the right shape and dtype; on the CPU it holds exactly the weight
the real layer dequantizes to and its output is within the output dtype's rounding of the real one;
known answers per family (weights on the format's grid come back exactly, TF32 rounding of
hand-picked floats); on CUDA, each kernel against its emulation."""

from __future__ import annotations

import dataclasses
import warnings
from fractions import Fraction

import pytest
import torch

from qbench import schemes
from qbench.schemes.emulate import EmulatedLinear, cuda_scalar_div, mslk_fp8_row, round_to_tf32
from qbench.schemes.precision import strict_fp32
from tests.conftest import needs_cuda

N, K, M = 256, 512, 16
ALL = schemes.all_schemes()
EMULATED = [s.name for s in ALL if s.emulate is not None]
CPU = torch.device("cpu")
RUNS_ON_CPU = [n for n in EMULATED if schemes.get(n).unavailable_reason(CPU, schemes.get(n).options_model()) is None]


def _layer(seed: int = 0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(N, K, generator=g) * 0.02
    b = torch.randn(N, generator=g) * 0.01
    x = torch.randn(M, K, generator=g)
    return w.to(device), b.to(device), x.to(device)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def _options(name: str, **values):
    return schemes.get(name).options_model(**values)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --- (a) every emulation: a float layer of the right shape and dtype -------------------------------

def test_every_scheme_without_a_cpu_kernel_has_an_emulation():
    missing = [s.name for s in ALL if s.cuda_only and s.emulate is None]
    assert not missing, f"CUDA-only schemes without emulate: {missing}"


@pytest.mark.parametrize("name", EMULATED)
def test_shape_and_dtype(name):
    scheme = schemes.get(name)
    w, b, x = _layer()
    layer = scheme.emulated_build(w, b)
    assert isinstance(layer, EmulatedLinear) and layer.weight.dtype == torch.float32
    assert not layer.weight.requires_grad and layer.weight.shape == (N, K)
    y = layer(x.to(scheme.activation_dtype))
    assert y.shape == (M, N) and y.dtype == scheme.activation_dtype and torch.isfinite(y).all()
    y3 = layer(x.to(scheme.activation_dtype).reshape(2, M // 2, K))
    assert y3.shape == (2, M // 2, N) and torch.equal(y3.reshape(M, N), y)
    assert layer.forward_float(x.to(scheme.activation_dtype)).dtype == torch.float32
    assert scheme.emulated_build(w, None)(x.to(scheme.activation_dtype)).shape == (M, N)


def test_emulated_build_refuses_a_scheme_without_emulation():
    bare = dataclasses.replace(schemes.get("fp32"), emulate=None)
    with pytest.raises(NotImplementedError, match="has no emulation"):
        bare.emulated_build(*_layer()[:2])


@pytest.mark.parametrize("name, options", [
    ("int4-weight-only", {"activation_dtype": "fp16"}),
    ("int4-plain", {"activation_dtype": "fp16"}),
    ("fp8-int4", {"activation_dtype": "fp16"}),
    ("fp8-dynamic", {"activation_dtype": "fp16"}),
    ("fp8-dynamic", {"kernel_preference": "mslk", "granularity": "per-tensor"}),
])
def test_options_the_kernel_refuses_everywhere_are_refused(name, options):
    with pytest.raises(ValueError, match="activation_dtype|kernel_preference"):
        schemes.get(name).emulated_build(*_layer()[:2], _options(name, **options))


def test_strict_fp32_switches_tf32_off_and_restores_the_flags():
    matmul = torch.backends.cuda.matmul
    before = (matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision)
    try:
        matmul.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        with strict_fp32():
            assert matmul.fp32_precision == "ieee" and torch.backends.mkldnn.matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32" and torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    finally:
        matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision = before


# --- (b) on the CPU the emulation follows the library ----------------------------------------------

def _bnb_int8_weight(layer):
    import bitsandbytes.functional as bnb_f

    return bnb_f.int8_vectorwise_dequant(layer.weight.data, layer.weight.SCB)


def _bnb_4bit_weight(layer):
    import bitsandbytes.functional as bnb_f

    return bnb_f.dequantize_4bit(layer.weight.data, layer.weight.quant_state)


#: The weight the real CPU layer multiplies by, as float32 (read before its first call:
#: bitsandbytes repacks its weight then).
REAL_WEIGHT = {
    "fp32": lambda m: m.weight, "fp16": lambda m: m.weight, "bf16": lambda m: m.weight,
    "fp8-weight-only": lambda m: m.weight.dequantize(),
    "int8-weight-only": lambda m: m.weight.qdata.float() * m.weight.scale.to(m.weight.dtype).float(),
    "w8a8-dynamic": lambda m: m.weight.dequantize(torch.float32),
    "int4-intx": lambda m: m.weight.dequantize(),
    "int8-bnb": _bnb_int8_weight, "nf4-bnb": _bnb_4bit_weight, "fp4-bnb": _bnb_4bit_weight,
}

CPU_CASES = [(n, {}) for n in RUNS_ON_CPU] + [
    ("fp8-weight-only", {"activation_dtype": "fp16"}),
    ("int8-weight-only", {"activation_dtype": "fp16"}),
    ("w8a8-dynamic", {"activation_dtype": "fp16"}),
    ("int4-intx", {"mapping": "asymmetric", "group_size": 32}),
    ("int8-bnb", {"threshold": 0.0}),
    ("nf4-bnb", {"double_quant": False, "blocksize": 128}),
    ("nf4-bnb", {"compute_dtype": "fp16"}),
    ("fp4-bnb", {"compute_dtype": "fp32"}),
]


@pytest.mark.parametrize("name, values", CPU_CASES, ids=[f"{n}-{v}" if v else n for n, v in CPU_CASES])
def test_matches_the_real_cpu_layer(name, values):
    """Same dequantized weight as the real layer (exactly), and the real output within the output
    dtype's rounding of the emulation's float32 result (the real layers round once or twice:
    a bf16 matmul, then the bias)."""
    scheme = schemes.get(name)
    options = scheme.options_model(**values)
    if scheme.unavailable_reason(CPU, options):
        pytest.skip(scheme.unavailable_reason(CPU, options))
    w, b, x = _layer(1)
    if name == "int8-bnb":
        x[:, 5] *= 12.0  # outlier columns: LLM.int8 keeps them in fp16
        x[3, 40] = -9.0
    x = x.to(scheme.activation_dtype)
    with torch.no_grad():
        real = scheme.build(w.clone(), b.clone(), options)
        real_weight = REAL_WEIGHT[name](real).float() if name in REAL_WEIGHT else None
        y_real = real(x)
    emu = scheme.emulated_build(w, b, options)
    if real_weight is not None:
        assert torch.equal(emu.weight, real_weight), f"{name}: emulated weight differs from the real layer's"
    y_emu = emu(x)
    assert y_emu.dtype == y_real.dtype
    rounding = torch.finfo(y_real.dtype).eps
    between = _rel(y_real, emu.forward_float(x))
    assert between <= 0.75 * rounding, f"{name}: real vs emulated {between:.3g}, output eps {rounding:.3g}"


# --- (c) known answers --------------------------------------------------------------------------

def _int4_grid(group: int, scale: float, seed: int = 2) -> torch.Tensor:
    """[N, K] weights q * scale, q integers in [-8, 7], every group holding both -8 and 7 (so a
    min-max or absmax rule finds the grid)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-8, 8, (N, K // group, group), generator=g)
    q[..., 0], q[..., 1] = -8, 7
    return (q.float() * scale).reshape(N, K)


@pytest.mark.parametrize("name, values", [
    ("int4-weight-only", {"group_size": 128}), ("int4-weight-only", {"group_size": 32}),
    ("int4-plain", {}), ("int4-preshuffled", {"group_size": 256}),
    ("int4-weight-only-gemlite", {"group_size": 64}),
    ("int4-intx", {"mapping": "asymmetric", "group_size": 64}),
    ("fp8-int4", {"int4_packing_format": "plain"}),
])
def test_int4_grid_weights_come_back_exactly(name, values):
    options = _options(name, **values)
    group = getattr(options, "group_size", 128)
    w = _int4_grid(group, 2.0 ** -4)
    layer = schemes.get(name).emulated_build(w, None, options)
    assert torch.equal(layer.weight, w)


def test_int4_intx_symmetric_scale_is_amax_over_7_5():
    """torchao's SYMMETRIC mapping divides the range by (7 - (-8)) / 2 = 7.5, so the int4 grid is
    not kept. Group amax 8/16 = 0.5: scale = bf16(0.5 / 7.5) = 1.0703125 * 2^-4 = 0.06689453125;
    -0.5 -> q = -7.47 -> -7 steps: -0.46826171875 -> bf16 -0.46875; 7/16 = 0.4375 -> q = 6.54 -> 7
    steps: the same magnitude."""
    w = _int4_grid(32, 2.0 ** -4)
    layer = schemes.get("int4-intx").emulated_build(w, None, _options("int4-intx", group_size=32))
    assert float(layer.weight[0, 0]) == -0.46875 and float(layer.weight[0, 1]) == 0.46875


def test_fp8_int4_preshuffled_looks_up_e4m3_products():
    """A row with amax 448 * 2^-10 on the int4 grid: the e4m3 row step gives 56 q exactly, the
    int4 step recovers q with group scale 56, and the kernel's table holds e4m3(56 q): 168, 280,
    336 and 392 are not e4m3 values (3 mantissa bits) and round to 160, 288, 320 and 384 (ties to
    even), so those weights come back off the grid by the hand-computed amounts."""
    s = 56 * 2.0 ** -10
    w = _int4_grid(128, s)
    layer = schemes.get("fp8-int4").emulated_build(w, None, _options("fp8-int4"))
    table = {-8: -448, -7: -384, -6: -320, -5: -288, -4: -224, -3: -160, -2: -112, -1: -56,
             0: 0, 1: 56, 2: 112, 3: 160, 4: 224, 5: 288, 6: 320, 7: 384}
    expected = torch.round(w / s).long().cpu().apply_(lambda q: table[q]).float() * 2.0 ** -10
    assert torch.equal(layer.weight, expected)


def _e4m3_grid(rows: int, cols: int, exponent: int, seed: int = 3) -> torch.Tensor:
    """Random e4m3 values times 2^exponent, each row holding ±448 (its absmax), so a per-row
    ``amax / 448`` scale is exactly 2^exponent."""
    g = torch.Generator().manual_seed(seed)
    v = (torch.randn(rows, cols, generator=g) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).float()
    v[:, 0], v[:, 1] = 448.0, -448.0
    return v * 2.0 ** exponent


@pytest.mark.parametrize("name, values", [
    ("fp8-weight-only", {}), ("fp8-dynamic", {}), ("fp8-dynamic", {"granularity": "per-tensor"}),
    ("fp8-dynamic", {"kernel_preference": "mslk"}), ("fp8-weight-only-gemlite", {}), ("fp8-dynamic-gemlite", {}),
])
def test_e4m3_values_come_back_exactly(name, values):
    """Weights (and, for dynamic schemes, activations) that are e4m3 values times a power of two,
    with the row's absmax at 448 times it: scale and cast are exact, so the layer's float output is
    the float32 product of the inputs themselves."""
    w, x = _e4m3_grid(N, K, -8), _e4m3_grid(M, K, -6, seed=4)
    layer = schemes.get(name).emulated_build(w, None, _options(name, **values))
    assert torch.equal(layer.weight, w)
    with strict_fp32():
        assert torch.equal(layer.forward_float(x.bfloat16()), x @ w.T)


def test_int8_grid_weights_come_back_exactly():
    """gemlite's int8 rule, scale = amax / 127: a row with amax 127 s (s a power of two) keeps its
    integers; bitsandbytes' (absmax / 127 per row) too, to float32 rounding of 1/127."""
    g = torch.Generator().manual_seed(5)
    q = torch.randint(-127, 128, (N, K), generator=g).float()
    q[:, 0] = 127
    w = q * 2.0 ** -9
    assert torch.equal(schemes.get("int8-weight-only-gemlite").emulated_build(w, None).weight, w)
    bnb = schemes.get("int8-bnb").emulated_build(w, None).weight
    torch.testing.assert_close(bnb, w, rtol=2e-7, atol=0)


@pytest.mark.parametrize("name", ["nf4-bnb", "fp4-bnb"])
def test_4bit_code_values_come_back_exactly(name):
    """Without double quantization, a block holding code values times a power of two (the code's
    largest magnitude, 1, present) dequantizes to those values (bf16 of code * absmax)."""
    import bitsandbytes.functional as bnb_f

    code = bnb_f.get_4bit_type(name.split("-")[0], device="cpu").float()
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(0, 16, (N, K), generator=g)
    w = code[idx]
    w[:, ::64] = code[code.abs().argmax()]
    w = (w * 2.0 ** -3).bfloat16().float()
    layer = schemes.get(name).emulated_build(w, None, _options(name, double_quant=False))
    assert torch.equal(layer.weight, w)


def test_mslk_fp8_row_divides_like_tl_div_rn():
    """A weight row seen on the H200: amax 0.060546875, so the IEEE scale amax / 448 is
    0.00013514926831703633 (mslk's Triton kernel stored exactly that), and 0.0113525390625 / scale =
    84.00001 rounds to e4m3 88 (the kernel's value; with the reciprocal-times scale torch computes on
    CUDA, 0.00013514928286895156, it is 83.99999 -> 80)."""
    row = torch.zeros(1, 16, dtype=torch.bfloat16)
    row[0, 0], row[0, 1] = 0.060546875, 0.0113525390625
    q, scale = mslk_fp8_row(row)
    assert float(scale) == 0.00013514926831703633 and float(q[0, 1].float()) == 88.0
    assert float(cuda_scalar_div(torch.tensor([0.060546875]), 448.0)) == 0.00013514928286895156


def test_tf32_rounding_of_hand_picked_floats():
    """Ten explicit mantissa bits, round to nearest, ties to even."""
    cases = {
        1 + 2 ** -11: 1.0,  # a tie: 1 is even
        1 + 3 * 2 ** -11: 1 + 2 ** -9,  # a tie between 1 + 2^-10 (odd) and 1 + 2^-9 (even)
        1 + 2 ** -11 + 2 ** -20: 1 + 2 ** -10,  # above the tie
        -(1 + 2 ** -11): -1.0,
        1 / 3: 1365 / 4096,  # 1.0101010101|0101010101011b x 2^-2: dropped bits below half
        2.0 ** -130: 2.0 ** -130,  # a subnormal with no bits below the 10 kept
        float("inf"): float("inf"),
    }
    x = torch.tensor(list(cases), dtype=torch.float32)
    got = round_to_tf32(x)
    expected = torch.tensor(list(cases.values()), dtype=torch.float32)
    assert torch.equal(got, expected), (got.tolist(), expected.tolist())
    assert torch.isnan(round_to_tf32(torch.tensor([float("nan")]))).all()
    assert float(round_to_tf32(torch.tensor([1 + 2 ** -11]), "rna")) == 1 + 2 ** -10
    assert float(round_to_tf32(torch.tensor([1 + 2 ** -10 - 2 ** -23]), "rz")) == 1.0
    assert float(round_to_tf32(torch.tensor([3.4028234663852886e38]))) == float("inf")  # rounds past the max


def test_tf32_layer_rounds_both_operands():
    w = torch.full((2, 4), 1 + 3 * 2 ** -11)
    x = torch.full((1, 4), 1 + 2 ** -11)
    y = schemes.get("tf32").emulated_build(w, None)(x)
    assert y.dtype == torch.float32
    assert Fraction(float(y[0, 0])) == 4 * (1 + Fraction(1, 2 ** 9))


# --- (d) on CUDA: each kernel against its emulation -----------------------------------------------

CUDA_CASES = [(n, {}) for n in EMULATED] + [
    ("fp8-dynamic", {"granularity": "per-tensor"}), ("fp8-dynamic", {"kernel_preference": "mslk"}),
    ("fp8-int4", {"int4_packing_format": "plain"}), ("int4-weight-only", {"group_size": 32}),
    ("int4-plain", {"group_size": 256}), ("int4-weight-only-gemlite", {"group_size": 64}),
    ("nf4-bnb", {"double_quant": False}), ("int8-bnb", {"threshold": 0.0}),
]
CUDA_IDS = [f"{n}-{v}" if v else n for n, v in CUDA_CASES]


def _cuda_scheme(name, values):
    scheme = schemes.get(name)
    options = scheme.options_model(**values)
    reason = scheme.unavailable_reason(torch.device("cuda"), options)
    if reason:
        pytest.skip(f"{name}: {reason}")
    return scheme, options


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name, values", CUDA_CASES, ids=CUDA_IDS)
def test_kernel_matches_emulation_on_cuda(name, values):
    """A 256 x 512 layer, a batch of 16: the kernel's output and the emulation's float32 result
    differ by well under the kernel's own error against FP32 (a tenth of it), or by no more than one
    epsilon of the output dtype (the kernel's own output rounding, plus, for gemlite below M = 64,
    split-K partial sums added with bf16 atomics: int8-weight-only-gemlite 2.4e-3 and 4.4e-3 in two
    H200 runs). tf32 without a bias: see :func:`test_tf32_kernel_with_a_bias_is_tf32`."""
    scheme, options = _cuda_scheme(name, values)
    w, b, x = _layer(7, "cuda")
    if name == "tf32":
        b = None
    with strict_fp32():
        ref = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    xa = x.to(scheme.activation_dtype)
    with torch.no_grad():
        kernel = scheme.build(w.clone(), None if b is None else b.clone(), options)
        y_kernel = kernel(xa)
        y_emu = scheme.emulated_build(w, b, options).forward_float(xa)
    own = _rel(y_kernel, ref)
    between = _rel(y_kernel, y_emu)
    print(f"{name} {values}: own error {own:.3g}, kernel vs emulation {between:.3g}")
    rounding = torch.finfo(y_kernel.dtype).eps
    assert between <= max(0.1 * own, rounding), f"{name}: kernel vs emulation {between:.3g}, own error {own:.3g}"


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name, values", CUDA_CASES, ids=CUDA_IDS)
def test_identity_activations_read_out_the_kernels_weight(name, values):
    """X = I (512 rows) makes each output row one weight column, so the kernel's dequantized weight
    is read back (rounded to the output dtype) and compared with the emulation's: equal, but for
    at most 5 % of the values off by one rounding of the output dtype (kernels that round a partial
    result before the last scale: w8a8-dynamic's bf16 product, gemlite's epilogue)."""
    scheme, options = _cuda_scheme(name, values)
    w = _layer(8, "cuda")[0]
    eye = torch.eye(K, device="cuda").to(scheme.activation_dtype)
    with torch.no_grad():
        y_kernel = scheme.build(w.clone(), None, options)(eye).float()
        y_emu = scheme.emulated_build(w, None, options)(eye).float()
    differ = y_kernel != y_emu
    off = ((y_kernel - y_emu).abs() / y_emu.abs().clamp(min=torch.finfo(torch.float32).tiny))[differ]
    eps = torch.finfo(scheme.activation_dtype).eps
    print(f"{name} {values}: {differ.float().mean().item():.4f} of the read-out weights differ, "
          f"by up to {(off.max().item() if differ.any() else 0):.3g}")
    assert differ.float().mean() <= 0.05 and (off <= 1.01 * eps).all()


@pytest.mark.cuda
@needs_cuda
@pytest.mark.xfail(reason="torch 2.11 + cu130 on the H200: F.linear with a bias (M = 16) ran strict FP32 with "
                          "TF32 on, cublasLt's bias epilogue (error 1.1e-7 with the bias, 2.9e-4 without); the "
                          "tf32 emulation follows the scheme (TF32) instead", strict=False)
def test_tf32_kernel_with_a_bias_is_tf32():
    scheme, options = _cuda_scheme("tf32", {})
    w, b, x = _layer(9, "cuda")
    with torch.no_grad():
        kernel = scheme.build(w.clone(), b.clone(), options)
        y = kernel(x)
    with strict_fp32():
        ref = torch.nn.functional.linear(x.double(), w.double(), b.double())
    assert _rel(y, ref) > 1e-5, "the tf32 kernel with a bias ran as strict FP32"
