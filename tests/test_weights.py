"""Weights said and tested: the heavy-tailed synthetic weights (Student-t, outlier channels), a
tensor of a Hugging Face checkpoint folder (sharded or single file, validated torch-free), the
rows' ``weight_source``, and the quantization errors a known outlier structure must produce."""

from __future__ import annotations

import json
import math

import pytest
import torch

from qbench import inputs
from qbench.measure import measure_scheme
from qbench.layer.weight import weight_is_synthetic, weight_source
from qbench.scenario import ScenarioError, from_dict

CPU = torch.device("cpu")
_TIMING = {"warmup": 1, "min_reps": 3, "max_reps": 3, "budget_s": 0.01, "methods": ["cold"]}  # CPU rows: the always-run cpu method only


def _scenario(weight: dict, k: int = 1024, n: int = 1024, schemes=("fp32",), source="w.toml", m=(64,)):
    return from_dict({"name": "w", "m": list(m), "layer": {"in_features": k, "out_features": n},
                      "timing": _TIMING, "schemes": list(schemes), "weight": weight}, source)


# ---- the synthetic weights ------------------------------------------------------------------------

def test_student_t_has_unit_variance_times_1_over_k_and_heavy_tails():
    k = n = 1024
    w, _ = inputs.make_weight(_scenario({"source": "student-t", "df": 3}), CPU)
    z = (w * math.sqrt(k)).double().flatten()
    assert abs(float(z.var()) - 1.0) < 0.1  # scaled to variance 1/K
    gauss, _ = inputs.make_weight(_scenario({}), CPU)
    g = (gauss * math.sqrt(k)).double().flatten()
    # t(3): P(|t| > 6 sd) is about 0.3 %; for a Gaussian 2e-9 (none of the 1M entries)
    tail = float((z.abs() > 6).double().mean())
    assert 1e-3 < tail < 1e-2 and int((g.abs() > 6).sum()) == 0
    assert float(z.abs().max()) > 3 * float(g.abs().max())
    assert w.shape == (n, k) and w.dtype == torch.float32


def test_student_t_samples_match_the_t_distribution():
    gen = torch.Generator().manual_seed(0)
    t = inputs.student_t((400_000,), 5.0, gen).double()
    assert abs(float(t.var()) - 5 / 3) < 0.05  # df / (df - 2)
    assert abs(float(t.mean())) < 0.01
    # P(|t_5| > 2.015) = 0.10 (two-sided 90 % quantile of t with 5 degrees of freedom)
    assert abs(float((t.abs() > 2.015).double().mean()) - 0.10) < 0.005


def test_outlier_channels_scale_exactly_the_chosen_columns():
    base, _ = inputs.make_weight(_scenario({}), CPU)
    sc = _scenario({"source": "outlier-channels", "outlier_channels": 4, "outlier_scale": 20})
    w, _ = inputs.make_weight(sc, CPU)
    cols = inputs.weight_outlier_channels(sc)
    assert len(cols) == 4 and cols.tolist() == sorted(set(cols.tolist()))
    assert torch.equal(w[:, cols], base[:, cols] * 20)
    others = torch.ones(1024, dtype=torch.bool)
    others[cols] = False
    assert torch.equal(w[:, others], base[:, others])


def test_weight_source_says_where_the_weight_came_from():
    assert weight_source(_scenario({})) == "seeded Gaussian N(0, 1/K) (synthetic, seed 0)"
    assert weight_source(_scenario({"source": "student-t", "df": 3})) == \
        "Student-t (df=3) scaled to variance 1/K (synthetic, seed 0)"
    assert weight_source(_scenario({"source": "outlier-channels", "outlier_channels": 4, "outlier_scale": 20})) == \
        "outlier channels: 4 of the K input channels x 20 on N(0, 1/K) (synthetic, seed 0)"
    for w in ({}, {"source": "student-t", "df": 3}, {"source": "outlier-channels", "outlier_channels": 1, "outlier_scale": 2}):
        assert weight_is_synthetic(_scenario(w))


def _fake_quant(w: torch.Tensor, group, bits: int) -> torch.Tensor:
    """Symmetric absmax round-to-nearest: per tensor, per row, or per group of ``group`` columns."""
    qmax = 2 ** (bits - 1) - 1
    g = w.reshape(w.shape[0], -1, group) if isinstance(group, int) else w
    if group == "tensor":
        scale = g.abs().max() / qmax
    elif group == "row":
        scale = g.abs().amax(1, keepdim=True) / qmax
    else:
        scale = g.abs().amax(2, keepdim=True) / qmax
    return ((g / scale).round().clamp(-qmax - 1, qmax) * scale).reshape(w.shape)


SCHEMES = {"per-tensor int8": ("tensor", 8), "per-row int8": ("row", 8), "per-row int4": ("row", 4),
           "group-128 int4": (128, 4)}


@pytest.mark.parametrize("weight", [{"source": "student-t", "df": 3},
                                    {"source": "outlier-channels", "outlier_channels": 4, "outlier_scale": 20}])
def test_known_outlier_structure_raises_per_tensor_int8_error_and_group_128_moves_least(weight):
    """On a Gaussian weight per-tensor int8 is about 1 % off; on a heavy-tailed one the largest
    entry sets the one scale and the error rises about 10-20x. A group of 128 columns sees fewer
    outliers than a row or the tensor, so its error rises the least of the four."""
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def errors(w: torch.Tensor) -> dict[str, float]:
        ref = x @ w.double().T
        return {name: float((x @ _fake_quant(w, g, b).double().T - ref).norm() / ref.norm())
                for name, (g, b) in SCHEMES.items()}

    gauss = errors(inputs.make_weight(_scenario({}), CPU)[0])
    heavy = errors(inputs.make_weight(_scenario(weight), CPU)[0])
    assert 0.005 < gauss["per-tensor int8"] < 0.02
    rise = {name: heavy[name] / gauss[name] for name in SCHEMES}
    assert rise["per-tensor int8"] > 8, rise
    assert min(rise, key=rise.get) == "group-128 int4", rise
    assert all(r > 1.2 for r in rise.values()), rise


def test_measured_rows_carry_weight_source_and_per_row_int8_rises_more_than_group_128_int4():
    """The same, measured by the schemes that run on the CPU: int8-weight-only (per-row int8 scales)
    and int4-intx (group 128)."""
    schemes = ("int8-weight-only", "int4-intx")
    got = {}
    for weight in ({}, {"source": "student-t", "df": 3}):
        sc = _scenario(weight, k=512, n=512, schemes=schemes, m=(16,))
        for index in range(len(schemes)):
            (row,) = measure_scheme(sc, index, CPU)
            if row["status"] == "skipped":
                pytest.skip(row["reason"])
            assert row["status"] == "ok", row["reason"]
            assert row["weight_source"] == weight_source(sc)
            got[(row["scheme"], weight.get("source", "random"))] = row["error"]["rel_fro"]
    int8 = got[("int8-weight-only", "student-t")] / got[("int8-weight-only", "random")]
    int4 = got[("int4-intx", "student-t")] / got[("int4-intx", "random")]
    assert int8 > 2 and int4 < int8, got


# ---- validation at the edge -------------------------------------------------------------------------

@pytest.mark.parametrize("weight, key, words", [
    ({"source": "student-t"}, "weight.df", "missing: source = 'student-t' needs 'df'"),
    ({"source": "student-t", "df": 2}, "weight.df", "greater than 2"),
    ({"source": "student-t", "df": 3, "outlier_scale": 4}, "weight.outlier_scale",
     "only used with source = 'outlier-channels', got source = 'student-t'"),
    ({"source": "outlier-channels", "outlier_channels": 4}, "weight.outlier_scale", "needs both"),
    ({"source": "outlier-channels", "outlier_channels": 2000, "outlier_scale": 4}, "weight.outlier_channels",
     "at most in_features = 1024, got 2000"),
    ({"source": "outlier-channels", "outlier_channels": 0, "outlier_scale": 4}, "weight.outlier_channels",
     "greater than or equal to 1"),
    ({"df": 3}, "weight.df", "only used with source = 'student-t', got source = 'random'"),
    ({"source": "gaussian"}, "weight.source", "'hf-checkpoint'"),
])
def test_bad_synthetic_weight_is_one_line(weight, key, words):
    with pytest.raises(ScenarioError) as info:
        _scenario(weight)
    msg = str(info.value)
    assert msg.startswith(f"w.toml: {key}: ") and words in msg and "\n" not in msg, msg


def _write(path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


def _hf(tmp_path, tensor="model.layers.0.mlp.down_proj.weight", k=256, n=128):
    return _scenario({"source": "hf-checkpoint", "path": "ckpt", "tensor": tensor}, k=k, n=n,
                     source=str(tmp_path / "s.toml"))


def test_hf_checkpoint_sharded_reads_the_shard_the_index_names(tmp_path):
    pytest.importorskip("safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    w = torch.randn(128, 256)
    _write(folder / "model-00001-of-00002.safetensors", {"model.embed_tokens.weight": torch.zeros(4, 256)})
    _write(folder / "model-00002-of-00002.safetensors", {"model.layers.0.mlp.down_proj.weight": w.to(torch.bfloat16)})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.mlp.down_proj.weight": "model-00002-of-00002.safetensors"}}))
    sc = _hf(tmp_path)
    got, _ = inputs.make_weight(sc, CPU)
    assert torch.equal(got, w.to(torch.bfloat16).float())
    assert weight_source(sc) == "HF checkpoint ckpt:model.layers.0.mlp.down_proj.weight"
    assert not weight_is_synthetic(sc)


def test_hf_checkpoint_single_file(tmp_path):
    pytest.importorskip("safetensors")
    (tmp_path / "ckpt").mkdir()
    w = torch.randn(128, 256)
    _write(tmp_path / "ckpt" / "model.safetensors", {"lm.w": w})
    assert torch.equal(inputs.make_weight(_hf(tmp_path, tensor="lm.w"), CPU)[0], w)


def test_run_says_the_activations_of_a_real_weight_are_synthetic(tmp_path):
    """A run on a checkpoint's tensor printed its errors with nothing saying that X is still N(0, 1)."""
    from qbench import cli

    pytest.importorskip("safetensors")
    (tmp_path / "ckpt").mkdir()
    _write(tmp_path / "ckpt" / "model.safetensors", {"lm.w": torch.randn(128, 256)})
    note = cli._activations_note(_hf(tmp_path, tensor="lm.w"))
    assert note.startswith("the weight is real (hf-checkpoint), the activations are not: seeded N(0, 1) ([inputs])")
    sc = from_dict({"name": "w", "m": [1], "layer": {"in_features": 256, "out_features": 128}, "schemes": ["fp32"],
                    "inputs": {"outlier_fraction": 0.01, "outlier_magnitude": 20},
                    "weight": {"source": "hf-checkpoint", "path": "ckpt", "tensor": "lm.w"}}, str(tmp_path / "s.toml"))
    assert "seeded N(0, 1), 0.01 of the K columns scaled to 20 ([inputs])" in cli._activations_note(sc)


@pytest.mark.parametrize("case, key, words", [
    ("no_folder", "weight.path", "must be a Hugging Face checkpoint folder"),
    ("empty_folder", "weight.path", "no model.safetensors and no model.safetensors.index.json in "),
    ("bad_index", "weight.path", "model.safetensors.index.json has no 'weight_map' table"),
    ("no_weight_map", "weight.path", "model.safetensors.index.json has no 'weight_map' table"),
    ("missing_tensor", "weight.tensor", "tensor 'model.layers.0.mlp.down_proj.weight' is not in "),
    ("escaping_shard", "weight.path", "names shard '../../etc/passwd', which is not in "),
    ("missing_shard", "weight.path", "names shard 'model-00001-of-00001.safetensors', which is not in "),
    ("wrong_shape", "weight.tensor", "[128, 256]"),
    ("single_missing_tensor", "weight.tensor", "not in model.safetensors (it has other)"),
    ("truncated", "weight.path", "is not a readable safetensors file ("),
])
def test_bad_hf_checkpoint_is_one_line_naming_file_key_value(tmp_path, case, key, words):
    pytest.importorskip("safetensors")
    folder = tmp_path / "ckpt"
    tensor = "model.layers.0.mlp.down_proj.weight"
    if case != "no_folder":
        folder.mkdir()
    index = folder / "model.safetensors.index.json"
    if case == "bad_index":
        index.write_text("{not json")
    elif case == "no_weight_map":
        index.write_text(json.dumps({"metadata": {}}))
    elif case == "missing_tensor":
        index.write_text(json.dumps({"weight_map": {"a": "x.safetensors", "b": "x.safetensors"}}))
    elif case == "escaping_shard":
        index.write_text(json.dumps({"weight_map": {tensor: "../../etc/passwd"}}))
    elif case == "missing_shard":
        index.write_text(json.dumps({"weight_map": {tensor: "model-00001-of-00001.safetensors"}}))
    elif case == "wrong_shape":
        index.write_text(json.dumps({"weight_map": {tensor: "s.safetensors"}}))
        _write(folder / "s.safetensors", {tensor: torch.zeros(256, 128)})
    elif case == "single_missing_tensor":
        _write(folder / "model.safetensors", {"other": torch.zeros(2)})
    elif case == "truncated":  # safe_open checks that the tensors' offsets fit the file
        _write(folder / "model.safetensors", {tensor: torch.zeros(128, 256)})
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:-1000])
    with pytest.raises(ScenarioError) as info:
        _hf(tmp_path, tensor=tensor)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 's.toml'}: {key}: ") and words in msg and "\n" not in msg, msg


def test_hf_checkpoint_is_checked_in_the_file_the_worker_reads(tmp_path):
    """A folder holding model.safetensors and an index: the worker reads the single file (as
    transformers does), so the check reads that file's header, not the index's shard."""
    pytest.importorskip("safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    tensor = "model.layers.0.mlp.down_proj.weight"
    _write(folder / "model.safetensors", {tensor: torch.zeros(64, 256)})
    _write(folder / "s.safetensors", {tensor: torch.zeros(128, 256)})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {tensor: "s.safetensors"}}))
    with pytest.raises(ScenarioError) as info:
        _hf(tmp_path, tensor=tensor)
    assert "got 'model.layers.0.mlp.down_proj.weight' of shape [64, 256]" in str(info.value)


def test_hf_checkpoint_is_checked_without_torch(tmp_path):
    """``qbench check`` validates a checkpoint folder without importing torch."""
    import subprocess
    import sys

    pytest.importorskip("safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _write(folder / "model.safetensors", {"w": torch.zeros(128, 256)})
    (tmp_path / "s.toml").write_text('name = "s"\nm = [1]\nschemes = ["fp32"]\n[layer]\nin_features = 256\n'
                                     'out_features = 128\n[weight]\nsource = "hf-checkpoint"\npath = "ckpt"\n'
                                     'tensor = "nope"\n')
    code = ("import sys; from qbench.cli import main; rc = main(['check', sys.argv[1]]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.toml")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "weight.tensor: not in model.safetensors (it has w), got 'nope'" in done.stderr
    assert "Traceback" not in done.stderr and "torch imported" not in done.stderr


# ---- input faults -----------------------------------------------------------------------------------

def test_input_faults_known_answers():
    w = torch.ones(4, 4)
    assert inputs.input_faults(w) == []
    w[0, 0], w[1, 1] = float("nan"), float("inf")
    (flag,) = inputs.input_faults(w)
    assert flag.startswith("input-fault: the weight has 2 non-finite entries (1 NaN, 1 Inf)")
    (flag,) = inputs.input_faults(torch.zeros(4, 4))
    assert flag.startswith("input-fault: the weight is all zeros")
    x32 = torch.tensor([[1.0, 7e4, -1e5, 65504.0]])
    (flag,) = inputs.input_faults(None, x32, x32.to(torch.float16))
    assert flag.startswith("input-fault: 2 activation values overflow float16 (|x| > 65504)")
    assert inputs.input_faults(None, x32, x32.to(torch.bfloat16)) == []  # bf16 holds 1e5
