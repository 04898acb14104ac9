"""The torch side of a scheme: the tensors a built layer stores (:class:`TensorPart`, counted by
the byte ledger, :mod:`qbench.schemes.ledger`) and the plain ``nn.Linear`` helpers the library
modules build from. The scheme record itself is torch-free, :mod:`qbench.schemes.scheme`
(re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from qbench.schemes.scheme import STORAGE_FORMATS, Scheme, storage_format_of  # noqa: F401 - re-exported
from qbench.schemes.options import SchemeOptions  # noqa: F401 - re-exported


@dataclass(frozen=True)
class TensorPart:
    """One tensor the layer stores, as counted by the byte ledger.

    Attributes:
        name: where it lives, e.g. ``weight.qdata`` or ``weight.quant_state.absmax``.
        role: ``"payload"`` (weight values), ``"metadata"`` (scales, zero points, absmax, code
            tables, nested statistics) or ``"bias"``.
        tensor: the tensor itself; its bytes are ``numel * element_size``.
    """

    name: str
    role: Literal["payload", "metadata", "bias"]
    tensor: torch.Tensor


def linear_parts(module: torch.nn.Module) -> list[TensorPart]:
    """Ledger parts of a plain ``nn.Linear``: the whole weight is payload; no metadata."""
    parts = [TensorPart("weight", "payload", module.weight.detach())]
    return parts + bias_parts(module)


def bias_parts(module: torch.nn.Module) -> list[TensorPart]:
    """The bias of a linear module as a ledger part, or nothing when it has none."""
    bias = getattr(module, "bias", None)
    return [] if bias is None else [TensorPart("bias", "bias", bias.detach())]


def plain_linear(weight: torch.Tensor, bias: Optional[torch.Tensor], dtype: torch.dtype) -> torch.nn.Linear:
    """An ``nn.Linear`` holding ``weight`` ([N, K]) and ``bias`` converted to ``dtype``, on their device."""
    n, k = weight.shape
    layer = torch.nn.Linear(k, n, bias=bias is not None, device="meta")
    layer.weight = torch.nn.Parameter(weight.detach().to(dtype).clone(), requires_grad=False)
    if bias is not None:
        layer.bias = torch.nn.Parameter(bias.detach().to(dtype).clone(), requires_grad=False)
    return layer.eval()
