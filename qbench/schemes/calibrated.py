"""Calibrated int4 on the tinygemm grid: HQQ (no data), GPTQ and AWQ (calibration activations).

All three store what ``int4-weight-only`` stores (torchao's ``Int4TilePackedTo4dTensor``: uint4
codes per group of ``group_size`` along K, a bf16 scale and a bf16 float zero point per group,
dequantized by tinygemm as ``(q - 8) * scale + zero``) and run its kernel
(``aten._weight_int4pack_mm``); they differ only in how the codes and the group parameters are
chosen, so their speed rows are that kernel's (AWQ adds one elementwise multiply of X by its
per-channel pre-scale, torchao's ``act_pre_scale``).

- **HQQ** (Badri & Shaji 2023): torchao's own ``_choose_qparams_and_quantize_affine_hqq``, the routine
  ``Int4WeightOnlyConfig(int4_choose_qparams_algorithm="hqq")`` runs: a half-quadratic search of
  scale and zero per group that minimizes an l_p<1 norm of the weight error. No data. It runs on the CPU
  wherever the weight is (its bf16 search depends on the device's reduction order), and the codes are
  packed like GPTQ's and AWQ's, so the kernel's layer holds the values the emulation measured.
- **GPTQ** (Frantar et al. 2022), as ``torchao.prototype.gptq.gptq_quantize`` does it, on the tinygemm
  grid: H = 2XᵀX/n from the calibration activations, dead columns zeroed, 1 % dampening of the mean
  diagonal, the upper Cholesky factor of H⁻¹; columns quantized in order inside blocks of 256, each
  group's scale and zero fixed from the error-updated weights when the group starts, each column's
  error fed back to the later columns. torchao 0.18's version asserts CUDA and quantizes to mslk's
  int4 (``int4_row_quantize_zp``, the ``int4-plain`` format): qbench runs the same algorithm here,
  with tinygemm's qparams and rounding, on any device.
- **AWQ** (Lin et al. 2023), as ``torchao.prototype.awq.AWQObserver`` does it: per-input-channel
  scales s = mean|x|^α (bf16, clamped at 1e-4, normalized by sqrt(max·min)) for α = 0, 1/n, ...,
  (n-1)/n; for each, W·s is quantized round-to-nearest, and the α whose effective weight
  Q(W·s)/s gives the least squared output error on the calibration activations is kept. The error
  is computed from the same XᵀX as GPTQ's (``tr(ΔW XᵀX ΔWᵀ)``, equal to ``||X Wᵀ - X Ŵᵀ||²``), not
  from the stored activations; torchao's observer keeps them and needs the quantized kernel for its
  search (CUDA only for tinygemm).

Without calibration (``calibration=None``: the layer and step jobs, which time a kernel on seeded
weights) GPTQ and AWQ use uniform statistics (XᵀX = I, mean|x| = 1), under which both reduce to
round-to-nearest exactly: the same kernel and bytes with RTN values.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from qbench.schemes.base import plain_linear
from qbench.schemes.emulate import EmulatedLinear

#: tinygemm's code range and mid point: uint4 0..15, zero point stored as ``min + 8 * scale``.
QMIN, QMAX, MID = 0, 15, 8
#: GPTQ columns processed per lazy batch update (torchao's ``gptq_quantize_block_size`` default).
GPTQ_BLOCK = 256


class NotPositiveDefinite(ValueError):
    """GPTQ's dampened H has no Cholesky factor: too few calibration tokens for the linear's K (XᵀX of
    rank ≤ tokens), or too small a ``damp`` to lift the directions they never spanned."""


@dataclass
class LinearStats:
    """Calibration statistics of one linear's input X ``[tokens, K]``, accumulated in float32.

    Attributes:
        xtx: ``XᵀX`` ``[K, K]`` (sum over tokens, not divided).
        abs_sum: ``Σ |x|`` per input channel ``[K]``.
        tokens: rows of X seen.
    """

    xtx: torch.Tensor
    abs_sum: torch.Tensor
    tokens: int = 0

    @classmethod
    def empty(cls, k: int, device=None) -> "LinearStats":
        return cls(torch.zeros(k, k, device=device), torch.zeros(k, device=device))

    def add(self, x: torch.Tensor) -> None:
        """Accumulate ``x`` ``[..., K]`` (any float dtype; taken as float32)."""
        x = x.reshape(-1, x.shape[-1]).float()
        self.xtx.addmm_(x.T, x)
        self.abs_sum += x.abs().sum(0)
        self.tokens += x.shape[0]

    def hessian(self) -> torch.Tensor:
        """GPTQ's ``H = 2 XᵀX / tokens`` ``[K, K]`` float32 (torchao's observer's normalization)."""
        return self.xtx * (2.0 / max(self.tokens, 1))

    def mean_abs(self) -> torch.Tensor:
        """AWQ's activation statistic ``mean |x|`` per input channel ``[K]`` float32."""
        return self.abs_sum / max(self.tokens, 1)


@dataclass
class Int4Grid:
    """Int4 weights on tinygemm's grid: ``codes`` uint4 values 0..15 (int32 ``[N, K]``), ``scale`` and
    ``zero`` bf16 ``[N, K / group_size]``; optional ``pre_scale`` bf16 ``[K]`` that X is multiplied by
    first (AWQ). ``solve_s``: seconds the choice of codes and parameters took."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    group_size: int
    pre_scale: Optional[torch.Tensor] = None
    solve_s: float = 0.0
    notes: dict = field(default_factory=dict)

    def dequantize(self) -> torch.Tensor:
        """tinygemm's weight, bf16 ``[N, K]``: ``(q - 8) * scale + zero`` in float32, rounded once to
        bf16 (one bf16 FMA in ``int4mm.cu``; torchao's ``_dequantize_affine_tinygemm``)."""
        from torchao.quantization.quant_primitives import _dequantize_affine_tinygemm

        return _dequantize_affine_tinygemm(self.codes, [1, self.group_size], self.scale, self.zero, torch.int32,
                                           QMIN, QMAX, output_dtype=torch.float32).to(torch.bfloat16)


def rtn_qparams(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """tinygemm's round-to-nearest group parameters of ``w`` ``[N, K]`` (taken as bf16): torchao's
    ``_choose_qparams_affine_tinygemm`` (``scale = (max - min) / 15``, ``zero = min + 8 * scale``, bf16).
    Returns ``scale``, ``zero`` bf16 ``[N, K / group_size]``."""
    from torchao.quantization.quant_primitives import MappingType, _choose_qparams_affine_tinygemm

    scale, zero = _choose_qparams_affine_tinygemm(w.to(torch.bfloat16), MappingType.ASYMMETRIC, (1, group_size),
                                                  torch.int32, QMIN, QMAX, scale_dtype=torch.bfloat16,
                                                  zero_point_dtype=torch.bfloat16)
    return scale.reshape(w.shape[0], -1), zero.reshape(w.shape[0], -1)


def quantize_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int) -> torch.Tensor:
    """torchao's ``_quantize_affine_tinygemm`` of ``w`` ``[N, K]`` with the given group parameters:
    ``clamp(round((w - (zero - 8 * scale)) / scale), 0, 15)``, int32 ``[N, K]``."""
    from torchao.quantization.quant_primitives import _quantize_affine_tinygemm

    return _quantize_affine_tinygemm(w, [1, group_size], scale, zero, torch.int32, QMIN, QMAX)


def rtn(w: torch.Tensor, group_size: int) -> Int4Grid:
    """Round-to-nearest on the tinygemm grid (what ``int4-weight-only`` builds), of bf16(``w``)."""
    wb = w.to(torch.bfloat16)
    scale, zero = rtn_qparams(wb, group_size)
    return Int4Grid(quantize_codes(wb, scale, zero, group_size), scale, zero, group_size)


def hqq(w: torch.Tensor, group_size: int) -> Int4Grid:
    """HQQ's codes and group parameters of bf16(``w``) ``[N, K]``: torchao's
    ``_choose_qparams_and_quantize_affine_hqq`` with the arguments ``Int4TilePackedTo4dTensor.from_hp``
    passes (4 bits, axis 1, bf16 compute, ``raw_output=False``: the zero point converted to tinygemm's
    ``min + 8 * scale`` form). from_hp first pads K to a multiple of 1024 and N to one of 8 with
    zeros; the search is per group, and its stopping test compares mean errors whose padding adds
    only zero terms, so the unpadded weight gets the same result (checked in the tests)."""
    from torchao.quantization.quant_primitives import _choose_qparams_and_quantize_affine_hqq

    t0 = time.perf_counter()
    wb = w.detach().to("cpu", torch.bfloat16)  # on the CPU wherever the weight is: the bf16 search's result
    # depends on the device's reduction order (on an H100 47 % of the codes differed from the CPU's), and the
    # kernel's layer must hold the values the CPU emulation measured
    codes, scale, zero, _ = _choose_qparams_and_quantize_affine_hqq(
        wb, nbits=4, group_size=group_size, axis=1, compute_dtype=torch.bfloat16, device=wb.device,
        verbose=False, raw_output=False)
    n, dev = w.shape[0], w.device
    return Int4Grid(codes.to(dev, torch.int32), scale.reshape(n, -1).to(dev), zero.reshape(n, -1).to(dev), group_size,
                    solve_s=time.perf_counter() - t0)


def gptq(w: torch.Tensor, stats: Optional[LinearStats], group_size: int, damp: float = 0.01,
         block: int = GPTQ_BLOCK) -> Int4Grid:
    """GPTQ on tinygemm's grid (the module docstring): ``w`` ``[N, K]`` (taken as bf16, worked in
    float32), ``stats`` of its input (None: H = I, which is round-to-nearest). Returns the grid; its
    ``notes`` say how many input channels were dead (never active in the calibration text).

    Raises:
        NotPositiveDefinite: the dampened H (or its inverse) has no Cholesky factor; the message gives
            the calibration tokens against K and the fixes (more calibration chunks, a larger damp)."""
    t0 = time.perf_counter()
    n, k = w.shape
    W = w.to(torch.bfloat16).float().clone()
    H = torch.eye(k, device=w.device) if stats is None else stats.hessian().to(w.device).clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    H.diagonal().add_(damp * torch.mean(torch.diag(H)))
    L, info = torch.linalg.cholesky_ex(H)
    if not int(info):
        Hinv, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(L), upper=True)
    if int(info):
        tokens = k if stats is None else stats.tokens
        raise NotPositiveDefinite(
            f"GPTQ: H = 2XᵀX/n of {tokens} calibration tokens for K = {k} inputs (rank ≤ {min(tokens, k)}) is not "
            f"positive-definite after damp = {damp:g} (leading minor of order {int(info)}): calibrate on more "
            f"quality.calibration chunks (chunks × chunk ≥ K = {k}) or a larger damp (default 0.01)")
    groups = k // group_size
    scale = torch.empty(n, groups, dtype=torch.bfloat16, device=w.device)
    zero = torch.empty_like(scale)
    for b0 in range(0, k, block):
        b1 = min(b0 + block, k)
        Wb = W[:, b0:b1]  # a view: updated in place
        err = torch.zeros_like(Wb)
        Hb = Hinv[b0:b1, b0:b1]
        for j in range(b1 - b0):
            col = b0 + j
            g = col // group_size
            if col % group_size == 0:  # the group's grid, fixed from the weights as updated so far
                s, z = rtn_qparams(W[:, col: col + group_size], group_size)
                scale[:, g], zero[:, g] = s[:, 0], z[:, 0]
            s, z = scale[:, g: g + 1], zero[:, g: g + 1]
            wc = Wb[:, j: j + 1]
            # the column rounded to bf16 and quantized in bf16 arithmetic, the operations of torchao's
            # _quantize_affine_tinygemm on a bf16 weight (so that H = I gives round-to-nearest exactly);
            # the error fed back is the float32 one
            q = torch.clamp(torch.round((wc.to(torch.bfloat16) - (z - s * MID)) / s), QMIN, QMAX).float()
            dq = ((q - MID) * s.float() + z.float()).to(torch.bfloat16).float()
            e = (wc - dq) / Hb[j, j]
            Wb[:, j:] -= e @ Hb[j: j + 1, j:]
            err[:, j: j + 1] = e
        W[:, b1:] -= err @ Hinv[b0:b1, b1:]
    # torchao's final pass: the updated W on the fixed grids (each column's code as chosen in the loop)
    codes = quantize_codes(W.to(torch.bfloat16), scale, zero, group_size)
    return Int4Grid(codes, scale, zero, group_size, solve_s=time.perf_counter() - t0,
                    notes={"dead_channels": int(dead.sum())})


def awq_scales(mean_abs: torch.Tensor, alpha: float) -> torch.Tensor:
    """torchao's AWQ candidate scales: ``mean_abs ** alpha`` in bf16, clamped at 1e-4, divided by
    ``sqrt(max * min)`` (bf16 ``[K]``)."""
    s = mean_abs.pow(alpha).to(torch.bfloat16).clamp(min=1e-4).view(-1)
    return s / (s.max() * s.min()).sqrt()


def awq(w: torch.Tensor, stats: Optional[LinearStats], group_size: int, grid: int = 20) -> Int4Grid:
    """AWQ on tinygemm's grid (the module docstring): for α = i / ``grid``, i = 0 .. grid - 1, the
    effective weight Ŵ(α) = dq(RTN(bf16(W)·s)) · bf16(1/s), and the error ``tr(ΔW XᵀX ΔWᵀ)`` with
    ΔW = W - Ŵ(α); the least error's grid is kept, with ``pre_scale = bf16(1 / s)`` (torchao's
    ``act_pre_scale``). α = 0 is round-to-nearest, so the kept error is never above RTN's on the
    calibration activations. ``stats`` None: mean|x| = 1 and XᵀX = I (round-to-nearest)."""
    t0 = time.perf_counter()
    k = w.shape[1]
    wb = w.to(torch.bfloat16)
    mean_abs = torch.ones(k, device=w.device) if stats is None else stats.mean_abs().to(w.device)
    xtx = None if stats is None else stats.xtx.to(w.device)
    best = None
    losses = []
    for i in range(grid):
        alpha = i / grid
        s = awq_scales(mean_abs, alpha)
        q = rtn(wb * s, group_size)
        pre = (1.0 / s).to(torch.bfloat16)
        delta = w.to(torch.bfloat16).float() - q.dequantize().float() * pre.float()
        loss = float((delta.pow(2).sum() if xtx is None else ((delta @ xtx) * delta).sum()))
        losses.append(loss)
        if best is None or loss < best[0]:
            best = (loss, alpha, q, pre)
    _, alpha, q, pre = best
    q.pre_scale, q.solve_s = pre, time.perf_counter() - t0
    q.notes = {"alpha": alpha, "loss_vs_rtn": losses[losses.index(best[0])] / losses[0] if losses[0] else 1.0}
    return q


# --- the layers: the tinygemm kernel (CUDA) and its emulation ---------------------------------------

def _grid(method: str, weight: torch.Tensor, options, calibration: Optional[LinearStats]) -> Int4Grid:
    if method == "hqq":
        return hqq(weight, options.group_size)
    if method == "gptq":
        return gptq(weight, calibration, options.group_size, damp=options.damp)
    return awq(weight, calibration, options.group_size, grid=options.grid)


def _check_bf16(options) -> None:
    if options.activation_dtype != "bf16":
        raise ValueError(f"activation_dtype={options.activation_dtype}: tinygemm (aten._weight_int4pack_mm) takes "
                         "bf16 only")


def tinygemm_tensor(q: Int4Grid, shape: tuple[int, int]):
    """``Int4TilePackedTo4dTensor`` holding ``q``, packed as torchao's ``from_hp`` packs: codes padded to K
    a multiple of 1024 and N one of 8 (padding: code 0, scale 1, zero 0; padded inputs are zero and
    padded outputs are cut), two codes per byte, ``aten._convert_weight_to_int4pack`` (inner k tiles 8),
    scale and zero packed by ``pack_tinygemm_scales_and_zeros``. CUDA (tinygemm has no CPU layout)."""
    from torchao.quantization.quantize_.workflows.int4.int4_tile_packed_to_4d_tensor import Int4TilePackedTo4dTensor
    from torchao.quantization.utils import pack_tinygemm_scales_and_zeros
    from torchao.utils import find_multiple

    n, k = shape
    kp, np_ = find_multiple(k, 1024), find_multiple(n, 8)
    g = q.group_size
    codes = torch.nn.functional.pad(q.codes, (0, kp - k, 0, np_ - n))
    scale = torch.nn.functional.pad(q.scale.float(), (0, (kp - k) // g, 0, np_ - n), value=1.0).to(torch.bfloat16)
    zero = torch.nn.functional.pad(q.zero.float(), (0, (kp - k) // g, 0, np_ - n)).to(torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack((codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8), 8)
    return Int4TilePackedTo4dTensor(qdata=packed, scale_and_zero=pack_tinygemm_scales_and_zeros(scale, zero,
                                                                                                 torch.bfloat16),
                                    block_size=[1, g], shape=torch.Size(shape), act_pre_scale=q.pre_scale)


def _build(method: str):
    """The real layer of HQQ, GPTQ or AWQ: codes and parameters chosen here, packed by :func:`tinygemm_tensor`."""

    def build(weight: torch.Tensor, bias: Optional[torch.Tensor], options,
              calibration: Optional[LinearStats] = None) -> torch.nn.Module:
        _check_bf16(options)
        layer = plain_linear(weight, bias, torch.bfloat16)
        q = _grid(method, weight, options, calibration)
        if method == "awq" and q.pre_scale is None:
            q.pre_scale = torch.ones(weight.shape[1], dtype=torch.bfloat16, device=weight.device)
        layer.weight = torch.nn.Parameter(tinygemm_tensor(q, tuple(weight.shape)), requires_grad=False)
        layer.calibration_notes = dict(q.notes, solve_s=q.solve_s)
        return layer

    return build


class _PreScale:
    """AWQ's runtime pre-scale, as torchao's tinygemm linear applies it: ``bf16(x * pre_scale)``,
    then float32 (an exact rounding, not an estimate)."""

    def __init__(self, pre: torch.Tensor):
        self.pre = pre

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.pre.to(x.device)).float()


def _emulate(method: str):
    def emulate(weight: torch.Tensor, bias: Optional[torch.Tensor], options,
                calibration: Optional[LinearStats] = None) -> torch.nn.Module:
        _check_bf16(options)
        q = _grid(method, weight, options, calibration)
        act = None if q.pre_scale is None else _PreScale(q.pre_scale)
        rule = f"tinygemm uint4 asymmetric, group {options.group_size}, {method} codes and parameters, bf16 dequant"
        layer = EmulatedLinear(q.dequantize(), None if bias is None else bias.to(torch.bfloat16), torch.bfloat16,
                               torch.bfloat16, act_quant=act, rule=rule, estimate=False)
        layer.calibration_notes = dict(q.notes, solve_s=q.solve_s)
        return layer

    return emulate


# --- named by the declarations in qbench.schemes.catalog ---
build_hqq, build_gptq, build_awq = _build("hqq"), _build("gptq"), _build("awq")
emulate_hqq, emulate_gptq, emulate_awq = _emulate("hqq"), _emulate("gptq"), _emulate("awq")
