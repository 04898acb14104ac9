"""Calibrated int4 on the tinygemm grid (:mod:`qbench.schemes.calibrated`): GPTQ reconstructs the
calibration activations' outputs better than round-to-nearest (least squares), AWQ never worse;
without statistics both are round-to-nearest exactly; HQQ's grid is torchao's; the values always
sit on tinygemm's grid."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from qbench import schemes
from qbench.schemes import calibrated as cal
from tests.conftest import needs_cuda

N, K, T = 96, 256, 1024


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _layer(seed: int = 0):
    """A weight [N, K] and calibration activations [T, K] whose channels differ in scale (a few large,
    as in LLM activations) and are correlated (a shared low-rank part): the case calibration is for."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(N, K, generator=g) * 0.02
    scale = torch.ones(K)
    scale[torch.randperm(K, generator=g)[:8]] = 20.0
    x = (torch.randn(T, K, generator=g) + torch.randn(T, 4, generator=g) @ torch.randn(4, K, generator=g)) * scale
    stats = cal.LinearStats.empty(K)
    stats.add(x[: T // 2])
    stats.add(x[T // 2:])
    return w, x, stats


def _output_error(x: torch.Tensor, w: torch.Tensor, q: cal.Int4Grid) -> float:
    """``||X Wᵀ - X Ŵᵀ||²`` with Ŵ the grid's effective weight (AWQ: its pre-scale folded in), float64."""
    w_hat = q.dequantize().double()
    if q.pre_scale is not None:
        w_hat = w_hat * q.pre_scale.double()
    wb = w.to(torch.bfloat16).double()
    return float(((x.double() @ (wb - w_hat).T) ** 2).sum())


def test_stats_accumulate_xtx_abs_sum_and_tokens():
    x = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    s = cal.LinearStats.empty(2)
    s.add(x[:1])
    s.add(x[1:].reshape(1, 1, 2))
    assert torch.equal(s.xtx, torch.tensor([[10.0, -0.5], [-0.5, 4.25]])) and s.tokens == 2
    assert torch.equal(s.abs_sum, torch.tensor([4.0, 2.5]))
    assert torch.equal(s.hessian(), s.xtx) and torch.equal(s.mean_abs(), torch.tensor([2.0, 1.25]))


@pytest.mark.parametrize("group_size", [64, 128])
def test_gptq_reconstructs_the_calibration_outputs_better_than_rtn(group_size):
    """The least-squares check: on the activations it was calibrated on, GPTQ's output error is below
    round-to-nearest's (here by well over a tenth), on the same grid and group size."""
    w, x, stats = _layer()
    rtn, gptq = cal.rtn(w, group_size), cal.gptq(w, stats, group_size)
    e_rtn, e_gptq = _output_error(x, w, rtn), _output_error(x, w, gptq)
    assert e_gptq < 0.9 * e_rtn, (e_gptq, e_rtn)
    assert gptq.notes["dead_channels"] == 0


def test_awq_is_never_worse_than_rtn_and_scales_the_large_channels():
    """α = 0 is round-to-nearest, so the kept α's error on the calibration activations is at most
    RTN's; with channels 20× larger than the rest it picks α > 0 and beats RTN."""
    w, x, stats = _layer(1)
    rtn, awq = cal.rtn(w, 128), cal.awq(w, stats, 128)
    assert awq.notes["alpha"] > 0 and _output_error(x, w, awq) < _output_error(x, w, rtn)
    assert awq.pre_scale.dtype == torch.bfloat16 and awq.pre_scale.shape == (K,)


def test_without_statistics_gptq_and_awq_are_round_to_nearest():
    """H = I (no calibration) leaves GPTQ no error to feed forward, and mean|x| = 1 leaves AWQ one
    scale: both give round-to-nearest's codes and group parameters exactly, and RTN is
    int4-weight-only's weight."""
    w = _layer(2)[0]
    rtn = cal.rtn(w, 64)
    for q in (cal.gptq(w, None, 64), cal.awq(w, None, 64)):
        assert torch.equal(q.codes, rtn.codes) and torch.equal(q.scale, rtn.scale) and torch.equal(q.zero, rtn.zero)
    tinygemm = schemes.get("int4-weight-only")
    emulated = tinygemm.emulated_build(w, None, tinygemm.options_model(group_size=64))
    assert torch.equal(emulated.weight, rtn.dequantize().float())


def test_a_channel_never_active_is_dead_and_zeroed():
    """torchao's GPTQ: a zero diagonal of H (a channel the calibration never fed) is set to 1 and
    that weight column to 0 before quantizing; the output on the calibration activations is unchanged."""
    w, x, _ = _layer(3)
    x[:, 5] = 0
    stats = cal.LinearStats.empty(K)
    stats.add(x)
    q = cal.gptq(w, stats, 128)
    assert q.notes["dead_channels"] == 1
    assert _output_error(x, w, q) < _output_error(x, w, cal.rtn(w, 128))


@pytest.mark.parametrize("method", ["hqq", "gptq", "awq"])
def test_values_sit_on_the_tinygemm_grid(method):
    w, _, stats = _layer(4)
    q = {"hqq": lambda: cal.hqq(w, 64), "gptq": lambda: cal.gptq(w, stats, 64), "awq": lambda: cal.awq(w, stats, 64)}[
        method]()
    assert q.codes.dtype == torch.int32 and int(q.codes.min()) >= 0 and int(q.codes.max()) <= 15
    assert q.scale.shape == q.zero.shape == (N, K // 64) and q.scale.dtype == q.zero.dtype == torch.bfloat16
    # the dequantized weight is (q - 8) * scale + zero per group, rounded once to bf16 (tinygemm's FMA)
    by_hand = ((q.codes.float().view(N, -1, 64) - 8) * q.scale.float()[..., None] + q.zero.float()[..., None])
    assert torch.equal(q.dequantize(), by_hand.view(N, K).to(torch.bfloat16))


def test_hqq_grid_equals_torchaos():
    """int4-hqq's emulated weight is torchao's: ``_choose_qparams_and_quantize_affine_hqq`` run the way
    ``Int4TilePackedTo4dTensor.from_hp`` runs it (K padded to a multiple of 1024, N to one of 8, bf16,
    ``raw_output=False``), dequantized by tinygemm's rule, cut back to [N, K]."""
    from torchao.quantization.quant_primitives import (
        _choose_qparams_and_quantize_affine_hqq, _dequantize_affine_tinygemm,
    )

    n, k, g = 90, 576, 64  # N and K off the padding multiples, as SmolLM2's K = 576 is
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(5)) * 0.05
    padded = torch.nn.functional.pad(w.to(torch.bfloat16), (0, 1024 - k, 0, 96 - n))
    codes, scale, zero, _ = _choose_qparams_and_quantize_affine_hqq(
        padded, nbits=4, group_size=g, axis=1, compute_dtype=torch.bfloat16, device=padded.device, verbose=False,
        raw_output=False)
    torchao_w = _dequantize_affine_tinygemm(codes.to(torch.int32), [1, g], scale.reshape(96, -1),
                                            zero.reshape(96, -1), torch.int32, 0, 15,
                                            output_dtype=torch.float32).to(torch.bfloat16)[:n, :k]
    scheme = schemes.get("int4-hqq")
    emulated = scheme.emulated_build(w, None, scheme.options_model(group_size=g))
    assert torch.equal(emulated.weight, torchao_w.float())
    assert not torch.equal(emulated.weight, cal.rtn(w, g).dequantize().float())  # HQQ moved the grids


def test_awq_emulation_prescales_x_in_bf16_as_the_kernel_does():
    """AWQ's layer multiplies X by its bf16 pre-scale (torchao's ``act_pre_scale``) before tinygemm: the
    emulation's output is bf16(x * pre) @ Ŵᵀ, an exact rounding (not flagged an estimate)."""
    w, x, stats = _layer(6)
    scheme = schemes.get("int4-awq")
    layer = scheme.emulate(w, None, scheme.options_model(), calibration=stats)
    q = cal.awq(w, stats, 128)
    xb = x[:8].to(torch.bfloat16)
    want = (xb * q.pre_scale).float() @ q.dequantize().float().T
    assert torch.equal(layer.forward_float(xb), want) and layer.estimate is False


@pytest.mark.parametrize("name", ["int4-gptq", "int4-awq"])
def test_calibrated_schemes_say_they_need_calibration(name):
    assert schemes.get(name).needs_calibration and not schemes.get("int4-hqq").needs_calibration
    assert "calibration" in schemes.get(name).summary


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", ["int4-hqq", "int4-gptq", "int4-awq"])
def test_kernel_reads_out_the_calibrated_weight_on_cuda(name):
    """X = I through the real tinygemm layer reads back its weight: the emulation's, calibrated."""
    scheme = schemes.get(name)
    options = scheme.options_model()
    if (reason := scheme.unavailable_reason(torch.device("cuda"), options)):
        pytest.skip(reason)
    w, _, stats = _layer(7)
    extra = {"calibration": stats} if scheme.needs_calibration else {}
    eye = torch.eye(K, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        kernel = scheme.build(w.cuda(), None, options, **extra)(eye).float()
        emulated = scheme.emulate(w, None, options, **extra)(eye.cpu()).float().cuda()
    differ = (kernel != emulated).float().mean()
    assert differ <= 0.05, f"{name}: {differ:.3f} of the read-out weights differ"


def test_a_speed_row_of_a_calibrated_scheme_is_flagged_uncalibrated():
    """Layer and step jobs have no calibration text: an ok row of GPTQ or AWQ (or of a recipe holding
    one) says it timed round-to-nearest values; a quality row with its calibration record, a skipped
    row, or a scheme without calibration are not flagged."""
    from qbench.scenario import from_dict
    from qbench.worker import _flag_uncalibrated

    ckpt = Path(__file__).resolve().parents[2] / "data" / "checkpoints" / "tiny-shakespeare-llama"
    sc = from_dict({"name": "t", "m": [1], "model": {"checkpoint": str(ckpt), "context": [128]},
                    "schemes": ["int4-gptq", "int4-hqq", {"name": "bf16", "recipe": {"down": "int4-awq"}}]}, "t.toml")
    rows = [{"status": "ok"}, {"status": "skipped"}, {"status": "ok", "calibration": {"tokens": 1}}]
    _flag_uncalibrated(sc.schemes[0], rows)
    assert [f["name"] for f in rows[0]["flags"]] == ["uncalibrated"] and "int4-gptq" in rows[0]["flags"][0]["text"]
    assert "flags" not in rows[1] and "flags" not in rows[2]
    hqq = [{"status": "ok"}]
    _flag_uncalibrated(sc.schemes[1], hqq)
    assert "flags" not in hqq[0]
    recipe = [{"status": "ok"}]
    _flag_uncalibrated(sc.schemes[2], recipe)
    assert "int4-awq" in recipe[0]["flags"][0]["text"]


@pytest.mark.parametrize("name", ["int4-hqq", "int4-gptq", "int4-awq"])
def test_fp16_activations_on_a_calibrated_scheme_are_refused_when_the_scenario_is_read(name):
    """tinygemm takes bf16 only and these schemes have no other kernel or emulation: ``activation_dtype =
    "fp16"`` is refused when the scenario is read, one line naming the key and the value, on an entry
    or in a recipe (the break trial found it passed ``qbench check`` and failed in the quality run
    after the calibration activations were collected)."""
    from qbench.scenario import from_dict
    from qbench.tables import ScenarioError

    data = Path(__file__).resolve().parents[2] / "data"
    base = {"name": "t", "device": "cpu", "model": {"checkpoint": str(data / "checkpoints" / "tiny-shakespeare-llama")},
            "quality": {"text": str(data / "text" / "hamlet.txt"), "chunks": 4, "calibration": {"chunks": 2,
                                                                                              "first_chunk": 8}}}
    for entry, key in (({"name": name, "activation_dtype": "fp16"}, "schemes[0].activation_dtype"),
                       ({"name": "bf16", "recipe": {"down": {"name": name, "activation_dtype": "fp16"}}},
                        "schemes[0].recipe.down.activation_dtype")):
        with pytest.raises(ScenarioError) as info:
            from_dict({**base, "schemes": [entry]}, "t.toml")
        line = str(info.value)
        assert line.startswith(f"t.toml: {key}: ") and "'fp16'" in line and "bf16 only" in line, line
        assert len(line.splitlines()) == 1
    assert from_dict({**base, "schemes": [{"name": name, "activation_dtype": "bf16"}]}, "t.toml").schemes[0].label == name


def test_gptq_on_too_few_calibration_tokens_says_why_and_the_fix():
    """16 calibration tokens for K = 256 inputs: XᵀX has rank 16, and a dampening of 1e-9 of its mean
    diagonal leaves H without a Cholesky factor. The error names the token count against K and the
    two fixes (more calibration chunks, a larger damp), not torch's bare 'leading minor of order 16 is
    not positive-definite'; the default damp (0.01) factors the same statistics."""
    w, x, _ = _layer()
    stats = cal.LinearStats.empty(K)
    stats.add(x[:16])
    with pytest.raises(cal.NotPositiveDefinite) as info:
        cal.gptq(w, stats, 64, damp=1e-9)
    message = str(info.value)
    assert message.startswith("GPTQ: H = 2XᵀX/n of 16 calibration tokens for K = 256 inputs (rank ≤ 16) is not "
                              "positive-definite after damp = 1e-09"), message
    assert "more quality.calibration chunks (chunks × chunk ≥ K = 256) or a larger damp" in message
    assert len(message.splitlines()) == 1
    assert cal.gptq(w, stats, 64).codes.shape == (N, K)
