"""TF32 (and oneDNN bf16) switched on elsewhere in the process must not leak into the fp32 row.

The traps: ``torch.set_float32_matmul_precision("high")`` (TF32 on cuBLAS, and on oneDNN for the
CPU), ``"medium"`` (bf16 on oneDNN), ``torch.backends.cuda.matmul.allow_tf32 = True`` (legacy
API), the per-backend ``fp32_precision`` flags, and ``NVIDIA_TF32_OVERRIDE``. The fp32 scheme's
build forces strict IEEE FP32 and its module checks the precision at every call; the flags are
recorded by :func:`qbench.schemes.precision.precision_state` (the result's ``env``).

On the CPU the oneDNN flag path is tested for real; the CUDA path of the call-time check is
tested on a GPU (marked ``cuda``), where TF32 changes the numbers.
"""

from __future__ import annotations

import pytest
import torch

from qbench import schemes
from qbench.schemes import precision
from qbench.measure import measure_scheme
from qbench.scenario import from_dict
from tests.conftest import needs_cuda

_FLAGS = ("fp32_precision", "mkldnn.fp32_precision", "mkldnn.matmul.fp32_precision", "mkldnn.conv.fp32_precision",
          "cuda.matmul.fp32_precision", "cudnn.fp32_precision", "cudnn.conv.fp32_precision")


def _get(path: str):
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _set(path: str, value) -> None:
    *parents, last = path.split(".")
    obj = torch.backends
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


@pytest.fixture(autouse=True)
def restore_precision_flags(monkeypatch):
    """Every test here flips process-wide flags; put them back afterwards (parents first)."""
    monkeypatch.delenv(precision.ENV_OVERRIDE, raising=False)
    saved = {path: _get(path) for path in _FLAGS}
    yield
    for path in _FLAGS:
        _set(path, saved[path])


def _fp32_module(k: int = 256, n: int = 128):
    torch.manual_seed(0)
    weight = torch.randn(n, k) / k**0.5
    scheme = schemes.get("fp32")
    return scheme.build(weight, None, scheme.options_model()), weight


def _rel_err(y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> float:
    ref = x.double() @ weight.double().T
    return float((y.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("trap", ["high", "medium"])
def test_fp32_build_forces_strict_after_set_float32_matmul_precision(trap):
    torch.set_float32_matmul_precision(trap)
    assert precision.cpu_matmul_fp32_precision() != "ieee"
    assert precision.cuda_matmul_fp32_precision() == "tf32"
    module, weight = _fp32_module()
    assert precision.cpu_matmul_fp32_precision() == "ieee"
    assert precision.cuda_matmul_fp32_precision() == "ieee"
    x = torch.randn(8, 256)
    assert _rel_err(module(x), x, weight) < 1e-6


@pytest.mark.parametrize("flip", [
    lambda: torch.set_float32_matmul_precision("high"),
    lambda: torch.set_float32_matmul_precision("medium"),
    lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
    lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "tf32"),
], ids=["set_precision_high", "set_precision_medium", "mkldnn_matmul_bf16", "mkldnn_matmul_tf32"])
def test_fp32_module_refuses_a_flag_flipped_after_build(flip):
    module, _ = _fp32_module()
    x = torch.randn(2, 256)
    module(x)  # strict: runs
    flip()
    now = precision.cpu_matmul_fp32_precision()
    assert now != "ieee"
    with pytest.raises(RuntimeError, match=f"oneDNN FP32 matmul precision is '{now}'"):
        module(x)


def test_cpu_precision_resolves_the_global_flag():
    """``mkldnn.matmul`` left at "none" inherits the global flag: a global bf16 is not strict."""
    torch.backends.fp32_precision = "bf16"
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    assert precision.cpu_matmul_fp32_precision() == "bf16"


def test_cuda_precision_resolution_and_env_override(monkeypatch):
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert precision.cuda_matmul_fp32_precision() == "tf32"
    monkeypatch.setenv(precision.ENV_OVERRIDE, "0")  # NVIDIA libraries then ignore the TF32 request
    assert precision.cuda_matmul_fp32_precision() == "ieee"
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    monkeypatch.setenv(precision.ENV_OVERRIDE, "1")
    assert precision.cuda_matmul_fp32_precision() == "ieee"


def test_legacy_allow_tf32_is_seen_by_the_new_api():
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cuda.matmul.allow_tf32 = True
    assert precision.cuda_matmul_fp32_precision() == "tf32"


def test_precision_state_records_every_flag(monkeypatch):
    torch.set_float32_matmul_precision("medium")
    monkeypatch.setenv(precision.ENV_OVERRIDE, "0")
    state = precision.precision_state()
    assert state["mkldnn_matmul_fp32_precision"] == "bf16"
    assert state["effective_cpu_matmul"] == "bf16"
    assert state["cuda_matmul_fp32_precision"] == "tf32"
    assert state["effective_cuda_matmul"] == "ieee"  # the override wins in cuBLAS
    assert state[precision.ENV_OVERRIDE] == "0"
    for key in ("float32_matmul_precision", "cuda_matmul_allow_tf32", "cudnn_conv_fp32_precision",
                "global_fp32_precision", "cuda_matmul_allow_bf16_reduced_precision_reduction"):
        assert key in state
    import json

    json.dumps(state)  # JSON-ready for env


def test_precision_state_survives_mixed_apis():
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # new API
    torch.backends.cuda.matmul.allow_tf32 = False  # legacy API
    state = precision.precision_state()  # does not raise, and reads the same answer through both APIs
    assert state["float32_matmul_precision"] == "highest" and state["cuda_matmul_allow_tf32"] is False
    assert state["cuda_matmul_fp32_precision"] == "ieee" and state["effective_cuda_matmul"] == "ieee"
    torch.backends.cuda.matmul.allow_tf32 = True  # legacy API on top of the new one
    state = precision.precision_state()
    assert state["float32_matmul_precision"] == "high" and state["cuda_matmul_allow_tf32"] is True
    assert state["effective_cuda_matmul"] == "tf32"


def test_fp32_worker_forces_override_and_tf32_refuses_it(monkeypatch):
    assert schemes.get("fp32").worker_env == {precision.ENV_OVERRIDE: "0"}
    tf32 = schemes.get("tf32")
    monkeypatch.setenv(precision.ENV_OVERRIDE, "0")
    assert "NVIDIA_TF32_OVERRIDE=0" in tf32.extra_check(torch.device("cuda"), tf32.options_model())
    monkeypatch.delenv(precision.ENV_OVERRIDE)
    assert tf32.extra_check(torch.device("cuda"), tf32.options_model()) is None


def _scenario(device: str):
    return from_dict({"name": "precision", "m": [1, 33], "device": device,
                      "layer": {"in_features": 512, "out_features": 256},
                      "timing": {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.05},
                      "schemes": ["fp32"]}, "precision.toml")


def test_fp32_row_strict_on_cpu_after_medium():
    torch.set_float32_matmul_precision("medium")
    rows = measure_scheme(_scenario("cpu"), 0, torch.device("cpu"))
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert row["error"]["rel_fro"] < 1e-6 and row["error"]["nonfinite"] == 0


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("trap", ["set_precision_high", "allow_tf32"])
def test_fp32_row_strict_on_gpu_after_tf32_switched_on(trap):
    if trap == "allow_tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        torch.set_float32_matmul_precision("high")
    dev = torch.device("cuda")
    rows = measure_scheme(_scenario("cuda"), 0, dev)
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert row["error"]["rel_fro"] < 1e-5, row["error"]


@pytest.mark.cuda
@needs_cuda
def test_fp32_module_refuses_tf32_flipped_after_build_on_gpu():
    module, weight = _fp32_module()
    module = module.cuda()
    x = torch.randn(16, 256, device="cuda")
    assert _rel_err(module(x), x, weight.cuda()) < 1e-5
    torch.set_float32_matmul_precision("high")
    with pytest.raises(RuntimeError, match="'tf32' at call time"):
        module(x)


@pytest.mark.cuda
@needs_cuda
def test_tf32_trap_is_real_on_this_gpu():
    """Control: with TF32 on, a plain FP32 matmul on an Ampere-or-later GPU is ~1e-3 off, so
    the strict-FP32 tests above would notice a leak."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs compute capability >= 8.0")
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    x, weight = torch.randn(64, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda") / 32
    assert _rel_err(x @ weight.T, x, weight) > 1e-4
