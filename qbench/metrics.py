"""Error metrics of a layer's output against the float64 reference ``Y_ref = X @ W^T``.

``Y_ref`` is computed in float64 from the FP32 activations and the FP32 weight, so it carries
no rounding of any scheme under test (see :func:`qbench.inputs.reference`). All metrics compare the
output upcast to float64.

Conventions for degenerate inputs (documented in docs/methodology.md):

* Non-finite outputs (NaN, +-Inf) are counted in ``nonfinite`` and are never averaged away:
  when there is any, every other metric is ``None`` (a row with a broken output has no error
  figure, it has a count of broken elements). A reference with non-finite elements (a
  safetensors weight holding NaN) is counted in ``reference_nonfinite`` the same way.
* Norms are taken on the tensor divided by its largest magnitude and scaled back, and the
  cosine on the two unit-norm tensors, so huge or tiny (subnormal) magnitudes neither overflow
  to inf nor underflow to 0 in the squares.
* ``rel_fro`` = ||Y - Y_ref||_F / ||Y_ref||_F. When ``Y_ref`` is all zeros the ratio has no
  meaning; it is then 0.0 if Y is exactly zero too, else ``None`` with ``rel_fro_note`` saying
  the reference is zero, and ``abs_fro`` (always present) carries the absolute error.
* ``cosine`` is taken over the flattened tensors. Two zero tensors have cosine 1.0 (identical);
  one zero and one non-zero tensor have cosine 0.0. Zero rows inside a non-zero reference need
  no special case: they only add their error to the norm.
* ``sqnr_db`` = 10 log10(||Y_ref||^2 / ||Y - Y_ref||^2), computed as 20 (log10 ||Y_ref|| -
  log10 ||Y - Y_ref||); an exact output gives ``inf`` which is stored as ``None`` with
  ``exact = True`` (strict JSON has no infinity).
"""

from __future__ import annotations

import math

import torch


def error_metrics(y: torch.Tensor, y_ref: torch.Tensor) -> dict:
    """Compare an output with its reference.

    Args:
        y: output of the layer under test, shape ``[M, N]``, any float dtype, any device.
        y_ref: float64 reference, shape ``[M, N]``, same device.

    Returns:
        ``{"rel_fro", "abs_fro", "max_abs", "sqnr_db", "cosine", "nonfinite", "exact"}`` and,
        where a metric is undefined, ``"rel_fro_note"``; ``"reference_nonfinite"`` when the
        reference has non-finite elements. Floats are finite Python floats or ``None``.

    Raises:
        ValueError: if the shapes differ.
    """
    if tuple(y.shape) != tuple(y_ref.shape):
        raise ValueError(f"output shape {tuple(y.shape)} != reference shape {tuple(y_ref.shape)}")
    y64 = y.detach().to(torch.float64)
    ref = y_ref.detach().to(torch.float64)
    nonfinite = int((~torch.isfinite(y64)).sum().item())
    ref_nonfinite = int((~torch.isfinite(ref)).sum().item())
    out: dict = {"nonfinite": nonfinite}
    if nonfinite or ref_nonfinite:
        note = (f"{nonfinite} non-finite output elements" if nonfinite else
                f"{ref_nonfinite} non-finite reference elements (non-finite weight or inputs)")
        out.update(rel_fro=None, abs_fro=None, max_abs=None, sqnr_db=None, cosine=None, exact=False,
                   rel_fro_note=f"{note}: no error figure")
        if ref_nonfinite:
            out["reference_nonfinite"] = ref_nonfinite
        return out
    diff = y64 - ref
    err_norm = _norm(diff)
    ref_norm = _norm(ref)
    y_norm = _norm(y64)
    out["abs_fro"] = err_norm
    out["max_abs"] = float(diff.abs().max()) if diff.numel() else 0.0
    out["exact"] = err_norm == 0.0
    if ref_norm > 0.0:
        out["rel_fro"] = _finite(err_norm / ref_norm)
        out["sqnr_db"] = None if err_norm == 0.0 else 20.0 * (math.log10(ref_norm) - math.log10(err_norm))
        if out["rel_fro"] is None:
            out["rel_fro_note"] = "relative error overflows a float64 (reference tiny against the error); see abs_fro"
    else:
        out["rel_fro"] = 0.0 if err_norm == 0.0 else None
        out["sqnr_db"] = None
        if err_norm != 0.0:
            out["rel_fro_note"] = "reference is all zeros: relative error undefined, see abs_fro"
    if ref_norm == 0.0 and y_norm == 0.0:
        out["cosine"] = 1.0
    elif ref_norm == 0.0 or y_norm == 0.0:
        out["cosine"] = 0.0
    else:
        cosine = float(((y64 / y_norm) * (ref / ref_norm)).sum())
        out["cosine"] = min(1.0, max(-1.0, cosine))  # rounding can step a hair past +-1
    return out


def _norm(t: torch.Tensor) -> float:
    """Frobenius norm of a finite float64 tensor without overflow or underflow in the squares:
    ``a * ||t / a||`` with ``a = max |t|`` (the scaling of LAPACK's ``dnrm2``). May be ``inf``
    only when the true norm exceeds the float64 range."""
    if t.numel() == 0:
        return 0.0
    scale = float(t.abs().max())
    if scale == 0.0:
        return 0.0
    return scale * float(torch.linalg.vector_norm(t / scale))


def _finite(value: float):
    return value if math.isfinite(value) else None
