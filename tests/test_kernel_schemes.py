"""The kernels of the ``.[kernels]`` extra (mslk through torchao, gemlite) and the options users ask
for (``activation_dtype`` on torchao, ``compute_dtype`` on bitsandbytes 4-bit), on the CPU: every
new scheme is registered and says why it cannot run here; a missing package, an unsupported
dtype or a too-old GPU is a skip reason naming it; what does run on the CPU runs accurately."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import pytest
import torch

from qbench import env, metrics, scenario, schemes
from qbench.schemes import ledger
from qbench.schemes import gemlite_schemes, torchao_schemes
from qbench.schemes.base import TensorPart

CPU, CUDA_DEVICE = torch.device("cpu"), torch.device("cuda", 0)
MSLK = ("int4-plain", "int4-preshuffled", "fp8-int4")
GEMLITE = ("int4-weight-only-gemlite", "int8-weight-only-gemlite", "fp8-weight-only-gemlite", "fp8-dynamic-gemlite")


def _without(monkeypatch, *missing: str) -> None:
    """Make ``importlib.util.find_spec`` say the ``missing`` import names are not installed."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name in missing else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _with(monkeypatch, *present: str) -> None:
    """Make ``importlib.util.find_spec`` find the ``present`` import names (a stand-in spec)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return importlib.machinery.ModuleSpec(name, None) if name in present else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _fake_gpu(monkeypatch, capability=(9, 0)) -> None:
    """Let ``Scheme.unavailable_reason`` believe a CUDA device of ``capability`` is present."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)


# --- registration ---

def test_new_schemes_are_registered_with_their_library_and_needs():
    for name in MSLK:
        s = schemes.get(name)
        assert s.library == "torchao" and s.cuda_only and s.min_compute_capability == (9, 0)
        assert "mslk" in s.summary and s.extra_check is not None
    for name in GEMLITE:
        s = schemes.get(name)
        assert s.library == "gemlite" and s.packages == ("gemlite",) and s.cuda_only
    assert schemes.get("fp8-weight-only-gemlite").min_compute_capability == (8, 9)
    assert schemes.get("fp8-dynamic-gemlite").compute_dtype == "fp8"
    assert schemes.get("int8-weight-only-gemlite").min_compute_capability == (8, 0)
    assert schemes.get("fp8-int4").family == "dynamic" and schemes.get("fp8-int4").compute_dtype == "fp8"


@pytest.mark.parametrize("name", MSLK + GEMLITE)
def test_new_schemes_are_skipped_on_cpu_naming_cuda(name):
    s = schemes.get(name)
    # CUDA first, whether the package is installed or not: installing it would not make it run here
    assert s.unavailable_reason(CPU, s.options_model()) == f"{name} has no CPU kernel: needs CUDA"


def test_env_records_the_kernel_libraries():
    record = env.collect(CPU)
    assert "gemlite" in record and "mslk" in record
    assert record["gemlite"] == env._version("gemlite") and record["mslk"] == env._version("mslk-cuda")


# --- a missing package is a skip reason naming what to install ---

@pytest.mark.parametrize("name", MSLK)
def test_missing_mslk_names_the_pip_package_and_the_extra(monkeypatch, name):
    _without(monkeypatch, "mslk")
    _fake_gpu(monkeypatch)
    s = schemes.get(name)
    reason = s.unavailable_reason(CUDA_DEVICE, s.options_model())
    assert reason == torchao_schemes.MSLK_MISSING
    assert "pip install mslk-cuda" in reason and ".[kernels]" in reason


def test_missing_mslk_skips_the_mslk_kernel_preference(monkeypatch):
    _without(monkeypatch, "mslk")
    _fake_gpu(monkeypatch)
    s = schemes.get("fp8-dynamic")
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model()) is None
    assert "mslk-cuda" in s.unavailable_reason(CUDA_DEVICE, s.options_model(kernel_preference="mslk"))


@pytest.mark.parametrize("name", GEMLITE)
def test_missing_gemlite_names_the_package(monkeypatch, name):
    _without(monkeypatch, "gemlite")
    s = schemes.get(name)
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model()) == "package 'gemlite' is not installed (pip install gemlite)"
    assert s.unavailable_reason(CPU, s.options_model()) == f"{name} has no CPU kernel: needs CUDA"


def test_missing_torchao_comes_before_mslk(monkeypatch):
    _without(monkeypatch, "torchao", "mslk")
    s = schemes.get("int4-plain")
    assert "'torchao'" in s.unavailable_reason(CUDA_DEVICE, s.options_model())


@pytest.mark.parametrize("name", MSLK)
def test_mslk_schemes_need_sm90(monkeypatch, name):
    _with(monkeypatch, "mslk")
    _fake_gpu(monkeypatch, (8, 9))
    s = schemes.get(name)
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model()) == "needs compute capability >= 9.0, device has 8.9"
    _fake_gpu(monkeypatch, (9, 0))
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model()) is None


@pytest.mark.parametrize("name, cc", [("fp8-weight-only-gemlite", (8, 0)), ("fp8-dynamic-gemlite", (8, 6)),
                                      ("int8-weight-only-gemlite", (7, 5)), ("int4-weight-only-gemlite", (7, 5))])
def test_gemlite_compute_capability(monkeypatch, name, cc):
    _with(monkeypatch, "gemlite")
    _fake_gpu(monkeypatch, cc)
    s = schemes.get(name)
    assert "needs compute capability" in s.unavailable_reason(CUDA_DEVICE, s.options_model())
    _fake_gpu(monkeypatch, (9, 0))
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model()) is None


# --- activation_dtype on the torchao schemes ---

def test_fp16_on_tinygemm_is_skipped_naming_the_constraint(monkeypatch):
    _fake_gpu(monkeypatch)
    s = schemes.get("int4-weight-only")
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model()) is None
    reason = s.unavailable_reason(CUDA_DEVICE, s.options_model(activation_dtype="fp16"))
    assert reason.startswith("activation_dtype=fp16: tinygemm") and "bf16 only" in reason


@pytest.mark.parametrize("name", MSLK)
def test_fp16_on_mslk_int4_is_skipped(monkeypatch, name):
    _with(monkeypatch, "mslk")
    _fake_gpu(monkeypatch)
    s = schemes.get(name)
    reason = s.unavailable_reason(CUDA_DEVICE, s.options_model(activation_dtype="fp16"))
    assert reason.startswith("activation_dtype=fp16: mslk") and "bf16" in reason


def test_fp16_on_fp8_dynamic_is_skipped_with_mslk_only(monkeypatch):
    _with(monkeypatch, "mslk")
    _fake_gpu(monkeypatch)
    s = schemes.get("fp8-dynamic")
    assert s.unavailable_reason(CUDA_DEVICE, s.options_model(activation_dtype="fp16")) is None
    reason = s.unavailable_reason(CUDA_DEVICE, s.options_model(activation_dtype="fp16", kernel_preference="mslk"))
    assert "bf16 only" in reason and "f8f8bf16_rowwise" in reason


@pytest.mark.parametrize("name", ["fp8-weight-only", "int8-weight-only", "w8a8-dynamic", "int4-intx"])
def test_fp16_layers_run_on_cpu(name):
    """An fp16 torchao layer: fp16 scales where the bf16 layer has bf16 ones, fp16 output from
    the bf16 activations qbench feeds it, and the bf16 layer's accuracy."""
    s = schemes.get(name)
    gen = torch.Generator().manual_seed(2)
    weight, x = torch.randn(128, 256, generator=gen) / 16, torch.randn(4, 256, generator=gen)
    ref = x.double() @ weight.double().T
    out = {}
    for dtype in ("bf16", "fp16"):
        options = s.options_model(activation_dtype=dtype)
        assert s.unavailable_reason(CPU, options) is None
        module = s.build(weight, None, options)
        book = ledger.count(s.parts(module))
        with torch.inference_mode():
            y = module(x.to(s.activation_dtype))
        out[dtype] = (module, book, y, metrics.error_metrics(y, ref)["rel_fro"])
    (m16, book16, y16, err16), (_, book_bf, y_bf, err_bf) = out["fp16"], out["bf16"]
    assert isinstance(m16, torchao_schemes.CastInputLinear) and y16.dtype == torch.float16
    assert y_bf.dtype == torch.bfloat16
    assert book16.stored_bytes == book_bf.stored_bytes and book16.payload_bytes == book_bf.payload_bytes
    assert err16 < 1.2 * err_bf + 1e-3


def test_activation_dtype_label_and_validation():
    sc = scenario.from_dict({"name": "x", "m": [1], "schemes": [
        {"name": "int8-weight-only", "activation_dtype": "fp16"},
        {"name": "fp8-int4", "int4_packing_format": "plain"},
        {"name": "nf4-bnb", "compute_dtype": "fp32"},
        {"name": "int4-weight-only-gemlite", "group_size": 64}]}, "x.toml")
    assert [e.label for e in sc.schemes] == ["int8-weight-only[activation_dtype=fp16]", "fp8-int4[int4_packing_format=plain]",
                                             "nf4-bnb[compute_dtype=fp32]", "int4-weight-only-gemlite[group_size=64]"]
    for bad in ({"name": "int8-weight-only", "activation_dtype": "fp32"}, {"name": "int4-plain", "group_size": 64},
                {"name": "int4-weight-only-gemlite", "group_size": 32}, {"name": "nf4-bnb", "compute_dtype": "fp8"}):
        with pytest.raises(scenario.ScenarioError):
            scenario.from_dict({"name": "x", "m": [1], "schemes": [bad]}, "x.toml")


# --- compute_dtype on the bitsandbytes 4-bit schemes ---

@pytest.mark.parametrize("name", ["nf4-bnb", "fp4-bnb"])
def test_bnb_compute_dtype(name):
    s = schemes.get(name)
    assert "fp32: the slow path" in s.summary
    gen = torch.Generator().manual_seed(4)
    weight, x = torch.randn(128, 256, generator=gen) / 16, torch.randn(2, 256, generator=gen)
    ref = x.double() @ weight.double().T
    books = set()
    for dtype, want in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        module = s.build(weight, None, s.options_model(compute_dtype=dtype))
        assert module.compute_dtype == want
        books.add(ledger.count(s.parts(module)).stored_bytes)
        with torch.inference_mode():
            y = module(x.to(s.activation_dtype))
        assert y.dtype == torch.bfloat16  # the layer returns the model's dtype whatever it computes in
        assert metrics.error_metrics(y, ref)["rel_fro"] < 0.2
    assert len(books) == 1  # the compute dtype does not change what is stored


# --- gemlite: the int4 quantizer and the ledger of a GemLiteLinearTriton ---

def test_rtn_int4_by_hand():
    row = torch.tensor([[-1.0, -0.5, 0.0, 2.0] * 8])  # one group of 32: min -1, max 2
    w_q, scales, zeros = gemlite_schemes.rtn_int4(row, 32)
    assert w_q.dtype == torch.uint8 and w_q.shape == (1, 32) and scales.shape == zeros.shape == (1, 1)
    assert scales.dtype == zeros.dtype == torch.bfloat16
    s = 3.0 / 15  # (max - min) / 15 = 0.2 (bf16: 0.2001953125)
    assert scales.item() == pytest.approx(torch.tensor(s, dtype=torch.bfloat16).item())
    assert zeros.item() == 5.0  # round(1 / 0.2002) = 5
    assert w_q[0, :4].tolist() == [0, 3, 5, 15]  # round(w / s) + 5: -4.995 -> -5, -2.498 -> -2, 0, 9.99 -> 10
    deq = (w_q.float() - zeros.float()) * scales.float()
    assert (deq - row).abs().max() <= scales.float().item() / 2 + 1e-6


def test_rtn_int4_error_matches_other_int4():
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(64, 512, generator=gen)
    for group in (64, 128):
        w_q, scales, zeros = gemlite_schemes.rtn_int4(w, group)
        deq = ((w_q.float().view(64, -1, group) - zeros.float()[..., None]) * scales.float()[..., None]).view(64, 512)
        assert 0.05 < (deq - w).norm() / w.norm() < 0.12


class _GemliteStandIn(torch.nn.Module):
    """The tensors ``GemLiteLinearTriton.pack`` leaves for a 4-bit, group-128 layer (K = N = 256)."""

    def __init__(self, bias: bool):
        super().__init__()
        p = lambda t: torch.nn.Parameter(t, requires_grad=False)  # noqa: E731
        self.W_q = p(torch.zeros(256 // 8, 256, dtype=torch.int32))
        self.scales = p(torch.ones(2, 256, dtype=torch.bfloat16))
        self.zeros = p(torch.zeros(2, 256, dtype=torch.bfloat16))
        self.metadata = p(torch.zeros(12, dtype=torch.int32))
        self.orig_shape = p(torch.tensor([256, 256], dtype=torch.int32))
        self.meta_scale = p(torch.tensor(0.0))
        self.bias = p(torch.zeros(256, dtype=torch.bfloat16)) if bias else None


def test_gemlite_parts_counts_the_module_tensors():
    book = ledger.count(gemlite_schemes.gemlite_parts(_GemliteStandIn(bias=True)))
    assert [(p["name"], p["role"]) for p in book.parts] == [
        ("W_q", "payload"), ("scales", "metadata"), ("zeros", "metadata"), ("meta_scale", "metadata"),
        ("metadata", "metadata"), ("orig_shape", "metadata"), ("bias", "bias")]
    assert book.payload_bytes == 256 * 256 // 2
    assert book.metadata_bytes == 2 * (2 * 256 * 2) + 4 + 48 + 8
    assert book.bias_bytes == 512


def test_gemlite_parts_leaves_out_empty_placeholders_and_refuses_an_unpacked_layer():
    module = _GemliteStandIn(bias=False)
    module.zeros = torch.nn.Parameter(torch.tensor([[]], dtype=torch.int32), requires_grad=False)  # 8-bit: no zeros
    names = [p.name for p in gemlite_schemes.gemlite_parts(module)]
    assert "zeros" not in names and "bias" not in names
    module.W_q = torch.nn.Parameter(torch.empty(0, dtype=torch.uint8), requires_grad=False)  # before pack()
    with pytest.raises(TypeError, match="pack"):
        gemlite_schemes.gemlite_parts(module)
    assert all(isinstance(p, TensorPart) for p in gemlite_schemes.gemlite_parts(_GemliteStandIn(bias=False)))


def test_worker_does_not_import_the_package_of_a_skipped_scheme(tmp_path, monkeypatch):
    """gemlite cannot be imported without a CUDA device: a worker on the CPU must give the skipped
    rows without importing it (it preloads a scheme's packages only where the scheme can run)."""
    import json

    from qbench import worker

    sc = scenario.from_dict({"name": "x", "m": [1], "layer": {"in_features": 256, "out_features": 128},
                             "schemes": ["int8-weight-only-gemlite"]}, "x.toml")
    job, rows = tmp_path / "job.json", tmp_path / "rows.json"
    job.write_text(json.dumps({"scenario": sc.to_dict(), "source": "x.toml", "entry_index": 0, "device": "cpu",
                               "ceilings": None}))
    _with(monkeypatch, "gemlite")
    imported = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *args: imported.append(name) or real(name, *args))
    assert worker.main([str(job), str(rows)]) == 0
    assert "gemlite" not in imported
    assert [(r["status"], r["reason"]) for r in json.loads(rows.read_text())] == [
        ("skipped", "int8-weight-only-gemlite has no CPU kernel: needs CUDA")]


# --- a kernel that cannot take an M: that row is skipped with the constraint, the others run ---

def test_compiled_w8a8_on_cuda_names_int_mm_for_m_up_to_16():
    """torch._int_mm's CUDA kernel refuses M <= 16 (results/h200/decode.json's failed row);
    eager w8a8 and the CPU take any M, so only compiled CUDA rows at M <= 16 are refused."""
    import torch

    from qbench import schemes

    scheme = schemes.get("w8a8-dynamic")
    compiled = scheme.options_model(mode="compiled")
    eager = scheme.options_model()
    cuda = torch.device("cuda:0")
    assert "needs M > 16 (M = 1)" in scheme.m_reason(1, cuda, compiled)
    assert "needs M > 16 (M = 16)" in scheme.m_reason(16, cuda, compiled)
    assert scheme.m_reason(17, cuda, compiled) is None
    assert scheme.m_reason(1, cuda, eager) is None
    assert scheme.m_reason(1, torch.device("cpu"), compiled) is None
    assert schemes.get("bf16").m_reason(1, cuda, schemes.get("bf16").options_model()) is None


def test_m_check_skips_only_its_rows(monkeypatch):
    """A scheme whose kernel refuses M = 1: the M = 1 row is skipped with the reason, M = 4 is measured."""
    import dataclasses

    import torch

    from qbench import measure, schemes
    from qbench.scenario import from_dict

    bf16 = schemes.get("bf16")
    picky = dataclasses.replace(bf16, m_check=lambda m, device, options: "no M = 1 here" if m == 1 else None)
    monkeypatch.setitem(schemes._REGISTRY, "bf16", picky)
    sc = from_dict({"name": "t", "m": [1, 4], "layer": {"in_features": 64, "out_features": 32},
                    "timing": {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.05, "methods": ["cold"]},
                    "schemes": ["bf16"]}, "t.toml")
    rows = measure.measure_scheme(sc, 0, torch.device("cpu"))
    assert [(r["m"], r["status"], r["reason"]) for r in rows] == [(1, "skipped", "no M = 1 here"), (4, "ok", None)]
    assert rows[1]["latency_us"]["cpu"]["median"] > 0 and rows[0]["latency_us"].get("cpu") is None
    all_refused = dataclasses.replace(bf16, m_check=lambda m, device, options: "never")
    monkeypatch.setitem(schemes._REGISTRY, "bf16", all_refused)
    assert {r["status"] for r in measure.measure_scheme(sc, 0, torch.device("cpu"))} == {"skipped"}


@pytest.mark.parametrize("name", ["nf4-bnb", "fp4-bnb"])
@pytest.mark.parametrize("n", [96, 112, 257])
def test_bnb_4bit_on_cpu_takes_an_n_its_packed_kernel_cannot(name, n):
    """bitsandbytes' packed AVX512-BF16 CPU kernel asserts N % 32 on the first call (it failed a quantized LM head of
    257 rows); such an N runs on bitsandbytes' generic 4-bit CPU path: the output is the dequantized weight's."""
    bnb = pytest.importorskip("bitsandbytes")
    from qbench.schemes.bnb_schemes import CPU_PACKED_BLOCK_N

    spec = schemes.get(name)
    w, x = torch.randn(n, 64, generator=torch.Generator().manual_seed(n)), torch.randn(3, 64)
    layer = spec.build(w, None, spec.options_model())
    w_dq = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()  # before any repack
    y = layer(x.to(spec.activation_dtype)).float()
    ref = x.to(torch.bfloat16).float() @ w_dq.T
    assert metrics.error_metrics(y, ref)["rel_fro"] < 0.01
    if n % CPU_PACKED_BLOCK_N:
        assert layer.support_avx512bf16_for_cpu is False
