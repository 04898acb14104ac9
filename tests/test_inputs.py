"""Inputs: outlier activation columns (and int8-bnb's count of them), FP8 saturation counts, and
weights read from a safetensors file, good and bad, all on a small layer on the CPU."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch

from qbench import inputs
from qbench.measure import measure_scheme
from qbench.scenario import ScenarioError, from_dict, load

K, N = 256, 256
CPU = torch.device("cpu")
_TIMING = {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.02}


def _scenario(schemes, m=(16,), source="inputs.toml", **extra) -> object:
    return from_dict({"name": "inputs", "m": list(m), "layer": {"in_features": K, "out_features": N},
                      "timing": _TIMING, "schemes": schemes, **extra}, source)


OUTLIERS = {"outlier_fraction": 0.01, "outlier_magnitude": 1000.0}  # 3 of 256 columns x1000


def test_outlier_columns_chosen_by_seed_and_scaled():
    sc = _scenario(["fp16"], inputs=OUTLIERS)
    cols = inputs.outlier_columns(sc)
    assert cols.tolist() == sorted(set(cols.tolist())) and len(cols) == round(0.01 * K)
    x = inputs.make_activations(sc, 64, CPU)
    assert inputs.count_outlier_columns(x, 6.0) == len(cols)
    others = torch.ones(K, dtype=torch.bool)
    others[cols] = False
    assert x[:, others].abs().max() < 7  # standard normal elsewhere
    assert x[:, cols].abs().max() > 448


def test_no_outliers_by_default():
    sc = _scenario(["fp16"])
    assert inputs.outlier_columns(sc).numel() == 0
    assert inputs.count_outlier_columns(inputs.make_activations(sc, 64, CPU), 6.0) == 0
    assert inputs.count_outlier_columns(torch.full((2, 3), 100.0), 0.0) == 0  # threshold 0: decomposition off


def test_int8_bnb_row_reports_the_outlier_columns_it_met():
    sc = _scenario(["int8-bnb", {"name": "int8-bnb", "threshold": 0.0}, "fp16"], inputs=OUTLIERS)
    with_threshold, = measure_scheme(sc, 0, CPU)
    without, = measure_scheme(sc, 1, CPU)
    fp16, = measure_scheme(sc, 2, CPU)
    assert with_threshold["status"] == "ok" and without["status"] == "ok", (with_threshold["reason"], without["reason"])
    assert with_threshold["error"]["outlier_columns"] == 3
    assert without["error"]["outlier_columns"] == 0  # threshold 0: nothing routed to fp16
    assert "outlier_columns" not in fp16["error"]
    # the fp16 path for the outlier columns is what keeps int8 accurate on them
    assert with_threshold["error"]["rel_fro"] < without["error"]["rel_fro"]


def test_int8_bnb_without_outliers_meets_none():
    row, = measure_scheme(_scenario(["int8-bnb"]), 0, CPU)
    assert row["status"] == "ok" and row["error"]["outlier_columns"] == 0


def test_fp8_weight_only_rows_count_no_fp8_activations():
    """fp8-weight-only keeps bf16 activations: nothing is cast to e4m3, so no count is recorded
    (the count used to be recorded there and read as saturation that never happened)."""
    sc = _scenario(["fp8-weight-only", "bf16"], inputs=OUTLIERS)
    x = inputs.make_activations(sc, 16, CPU)
    assert int((x.abs() > 448).sum()) > 0 and inputs.FP8_E4M3_MAX == 448.0
    fp8, = measure_scheme(sc, 0, CPU)
    bf16, = measure_scheme(sc, 1, CPU)
    assert fp8["status"] == "ok", fp8["reason"]
    for row in (fp8, bf16):
        assert "activations_over_fp8_max" not in row["error"] and "fp8_saturated" not in row["error"]


def test_count_over_is_strict():
    assert inputs.count_over(torch.tensor([448.0, -448.0, 448.5, -1e4, float("inf")]), 448.0) == 3


# --- safetensors weights -------------------------------------------------------------------------

def _write(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path))


def _st_scenario(tmp_path: Path, weight: dict, schemes=("fp32",), bias=False):
    toml = tmp_path / "st.toml"
    lines = ['name = "st"', "m = [1, 8]", '[layer]', f"in_features = {K}", f"out_features = {N}",
             f"bias = {'true' if bias else 'false'}", "[timing]", "warmup = 1", "min_reps = 3", "max_reps = 5",
             "budget_s = 0.02", "[weight]"] + [f'{k} = "{v}"' for k, v in weight.items()]
    for s in schemes:
        lines += ["[[schemes]]", f'name = "{s}"']
    toml.write_text("\n".join(lines) + "\n")
    return load(toml)


def test_safetensors_weight_through_measure_scheme(tmp_path):
    torch.manual_seed(5)
    w = torch.randn(N, K) / K**0.5
    (tmp_path / "ckpt").mkdir()
    _write(tmp_path / "ckpt" / "layer.safetensors", {"model.mlp.down_proj.weight": w, "other": torch.zeros(3)})
    sc = _st_scenario(tmp_path, {"source": "safetensors", "path": "ckpt/layer.safetensors",
                                 "tensor": "model.mlp.down_proj.weight"}, schemes=("fp32", "fp16"))
    weight, bias = inputs.make_weight(sc, CPU)
    assert torch.equal(weight, w) and bias is None
    for index in range(2):
        for row in measure_scheme(sc, index, CPU):
            assert row["status"] == "ok", row["reason"]
            assert row["error"]["rel_fro"] < (1e-6 if row["scheme"] == "fp32" else 1e-3)
    # the weight really came from the file: the random weight of the same seed gives another output
    random_sc = sc.model_copy(update={"weight": sc.weight.model_copy(update={"source": "random", "path": None, "tensor": None})})
    assert not torch.equal(inputs.make_weight(random_sc, CPU)[0], w)


def test_safetensors_bf16_weight_is_read_as_fp32(tmp_path):
    w = torch.randn(N, K).to(torch.bfloat16)
    _write(tmp_path / "w.safetensors", {"w": w})
    sc = _st_scenario(tmp_path, {"source": "safetensors", "path": str(tmp_path / "w.safetensors"), "tensor": "w"})
    weight, _ = inputs.make_weight(sc, CPU)
    assert weight.dtype == torch.float32 and torch.equal(weight, w.float())


@pytest.mark.parametrize("case, key, words", [
    ("missing_file", "weight.path", "no such file"),
    ("missing_tensor", "weight.tensor", "it has other, w"),
    ("wrong_shape", "weight.tensor", f"[{N}, {K}]"),
    ("transposed", "weight.tensor", f"shape [{K}, {N + 1}]"),
    ("integer_dtype", "weight.tensor", "dtype"),
    ("not_safetensors", "weight.path", "not a readable safetensors file"),
    ("truncated", "weight.path", "not a readable safetensors file"),
    ("bad_header_json", "weight.path", "not a readable safetensors file"),
    ("metadata_as_tensor", "weight.tensor", "not in"),
    ("no_tensor_name", "weight.tensor", "needs both"),
])
def test_bad_safetensors_is_a_scenario_error_at_load(tmp_path, case, key, words):
    path = tmp_path / "w.safetensors"
    tensor = "w"
    if case == "missing_tensor":
        _write(path, {"w": torch.zeros(N, K), "other": torch.zeros(1)})
        tensor = "w_missing"
    elif case == "wrong_shape":
        _write(path, {"w": torch.zeros(N, K + 1)})
    elif case == "transposed":
        _write(path, {"w": torch.zeros(K, N + 1)})
    elif case == "integer_dtype":
        _write(path, {"w": torch.zeros(N, K, dtype=torch.int8)})
    elif case == "not_safetensors":
        path.write_text("this is not a safetensors file at all")
    elif case == "truncated":
        path.write_bytes(b"\x10\x00")
    elif case == "bad_header_json":
        header = b"{not json"
        path.write_bytes(struct.pack("<Q", len(header)) + header)
    elif case == "metadata_as_tensor":
        _write(path, {"w": torch.zeros(N, K)})
        tensor = "__metadata__"
    weight = {"source": "safetensors", "path": "w.safetensors" if case != "missing_file" else "nope.safetensors"}
    if case != "no_tensor_name":
        weight["tensor"] = tensor
    with pytest.raises(ScenarioError) as info:
        _st_scenario(tmp_path, weight)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 'st.toml'}: {key}: ") and words in msg and "\n" not in msg, msg


def test_weight_path_without_safetensors_source_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match=r"weight\.path: only used with source = 'safetensors'"):
        _st_scenario(tmp_path, {"path": "w.safetensors"})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (fp8-dynamic has no CPU kernel)")
def test_fp8_dynamic_row_counts_saturated_activations_cuda():
    """fp8-dynamic quantizes activations per row with a dynamic scale, so values beyond e4m3's
    448 do not clip; the row still reports how many there were, and the output stays finite."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8-dynamic needs compute capability >= 8.9")
    sc = _scenario(["fp8-dynamic"], inputs=OUTLIERS)
    cuda = torch.device("cuda")
    expected = int((inputs.make_activations(sc, 16, cuda).abs() > 448).sum())
    row, = measure_scheme(sc, 0, cuda)
    assert row["status"] == "ok", row["reason"]
    assert row["error"]["activations_over_fp8_max"] == expected > 0
    assert row["error"]["nonfinite"] == 0
