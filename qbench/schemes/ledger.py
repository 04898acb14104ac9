"""The byte ledger: what a built layer stores, counted from its real tensors.

Bytes are ``numel * element_size`` of each tensor a scheme declares (:attr:`Scheme.parts`):
torchao's ``tensor_data_names``, bitsandbytes' ``QuantState``, an ``nn.Linear``'s weight. No
table of nominal bit widths is used here; ``nominal_bits`` is a separate, labelled column.
A tensor reached twice (the same storage under two names) is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qbench.formulas import bits_per_weight
from qbench.schemes.base import TensorPart


@dataclass(frozen=True)
class Ledger:
    """Bytes a layer stores, by role.

    Attributes:
        payload_bytes: weight values as stored (bytes).
        metadata_bytes: scales, zero points, absmax, code tables, nested statistics (bytes).
        bias_bytes: the bias, if any (bytes).
        parts: one dict per tensor: ``name``, ``role``, ``dtype``, ``shape``, ``bytes``.
    """

    payload_bytes: int
    metadata_bytes: int
    bias_bytes: int
    parts: tuple[dict, ...]

    @property
    def stored_bytes(self) -> int:
        """payload + metadata + bias (bytes)."""
        return self.payload_bytes + self.metadata_bytes + self.bias_bytes

    def fields(self, k: int, n: int) -> dict:
        """The row fields: payload/metadata/bias/stored bytes, ``bits_per_weight``, ``ledger``."""
        return {
            "payload_bytes": self.payload_bytes,
            "metadata_bytes": self.metadata_bytes,
            "bias_bytes": self.bias_bytes,
            "stored_bytes": self.stored_bytes,
            "bits_per_weight": bits_per_weight(self.stored_bytes, k, n),
            "ledger": list(self.parts),
        }


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor's elements: ``numel * element_size`` (a view counts its own elements)."""
    return tensor.numel() * tensor.element_size()


def count(parts: list[TensorPart]) -> Ledger:
    """Sum the bytes of ``parts`` by role.

    Raises:
        ValueError: on an unknown role.
    """
    totals = {"payload": 0, "metadata": 0, "bias": 0}
    seen: set[tuple[int, int, tuple]] = set()
    rows = []
    for part in parts:
        if part.role not in totals:
            raise ValueError(f"unknown ledger role {part.role!r} for {part.name}")
        t = part.tensor
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape)) if t.numel() else (id(t), 0, ())
        if key in seen and t.numel():
            continue
        seen.add(key)
        size = tensor_bytes(t)
        totals[part.role] += size
        rows.append({"name": part.name, "role": part.role, "dtype": str(t.dtype).removeprefix("torch."),
                     "shape": list(t.shape), "bytes": size})
    return Ledger(totals["payload"], totals["metadata"], totals["bias"], tuple(rows))
