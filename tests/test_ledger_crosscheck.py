"""Ledger cross-check: ``stored_bytes`` against what ``torch.save(module.state_dict())`` writes.

The ledger counts the tensors a scheme declares (:mod:`qbench.schemes.ledger`); a serialized state dict
holds the same tensors plus framing. For every scheme that runs on the CPU, at K = N = 512 (and a
non-square shape, with and without bias)::

    0 <= len(torch.save(module.state_dict())) - stored_bytes <= OVERHEAD_BYTES

``OVERHEAD_BYTES`` = 8 KiB is the fixed allowance for what the file holds besides the counted
tensors: torch.save's zip container (a local header, a central-directory entry and 64-byte data
alignment per tensor record, about 200 bytes each), the pickle of the dict, its keys and tensor
metadata (class names, dtypes, shapes; torchao's subclass also pickles its attributes), and two
small bitsandbytes extras the ledger leaves out on purpose because they describe the format
rather than store weight values:

* ``int8-bnb`` (``Linear8bitLt``) saves ``weight_format``, a 1-byte uint8 scalar naming the
  weight layout (row-major), next to ``weight`` (int8) and ``SCB`` (float32 row absmax).
* ``nf4-bnb`` / ``fp4-bnb`` (``Linear4bit``) save the ``QuantState`` as separate entries:
  ``weight.absmax``, ``weight.quant_map`` (16-entry code table), and with double quantization
  ``weight.nested_absmax`` and ``weight.nested_quant_map`` (256-entry code), which the ledger
  counts, plus ``weight.quant_state.bitsandbytes__nf4`` (or ``__fp4``): a uint8 tensor packing
  a JSON description (quant type, block size, dtype, shape, nested offset; ~170 bytes), which
  it does not.

Measured overheads at these shapes are 1.6-3.1 KiB, and the allowance does not grow with the
layer. Since 8 KiB would hide a missed 4 KiB absmax at this shape, a second, exact check counts
the state dict's own tensors (a torchao weight by the inner tensors of ``__tensor_flatten__``):
their bytes, less the two format descriptors above, plus the 4-byte float32 ``offset`` of
bitsandbytes' double quantization (the ledger counts it as a tensor; the state dict keeps it
inside the packed JSON), must equal ``stored_bytes`` to the byte.
"""

from __future__ import annotations

import io

import pytest
import torch

from qbench import schemes

from qbench.schemes import ledger

OVERHEAD_BYTES = 8 << 10
CPU = torch.device("cpu")
CPU_SCHEMES = [s.name for s in schemes.all_schemes()
               if s.unavailable_reason(CPU, s.options_model()) is None and s.library in {"torch", "torchao", "bitsandbytes"}]


def test_most_schemes_run_on_cpu():
    assert {"fp32", "fp16", "bf16", "int8-weight-only", "int4-intx", "int8-bnb", "nf4-bnb", "fp4-bnb"} <= set(CPU_SCHEMES)


def _saved_bytes(module: torch.nn.Module) -> int:
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return len(buffer.getvalue())


@pytest.mark.parametrize("k, n, bias", [(512, 512, False), (1024, 256, True)], ids=["512x512", "1024x256+bias"])
@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_stored_bytes_match_saved_state_dict(name, k, n, bias):
    scheme = schemes.get(name)
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(n, k, generator=gen) / k**0.5
    b = torch.randn(n, generator=gen) if bias else None
    module = scheme.build(weight, b, scheme.options_model())
    book = ledger.count(scheme.parts(module))
    saved = _saved_bytes(module)
    overhead = saved - book.stored_bytes
    assert 0 <= overhead <= OVERHEAD_BYTES, (
        f"{name}: state_dict saves {saved} B, ledger stores {book.stored_bytes} B "
        f"(payload {book.payload_bytes}, metadata {book.metadata_bytes}, bias {book.bias_bytes}); "
        f"parts {[(p['name'], p['bytes']) for p in book.parts]}")
    assert (book.bias_bytes > 0) == bias

    state = module.state_dict()
    counted = sum(_tensor_bytes(t) for key, t in state.items() if not _is_format_descriptor(key))
    nested_offset = 4 if any(key.endswith("nested_absmax") for key in state) else 0
    assert counted + nested_offset == book.stored_bytes, (
        name, {key: _tensor_bytes(t) for key, t in state.items()}, [(p["name"], p["bytes"]) for p in book.parts])


def _is_format_descriptor(key: str) -> bool:
    """bitsandbytes entries that describe the format instead of storing weight values."""
    return key.endswith("weight_format") or ".quant_state.bitsandbytes__" in key


def _tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a state-dict tensor; a tensor subclass (torchao) by its inner tensors."""
    inner = t.data if isinstance(t, torch.nn.Parameter) else t
    if type(inner) is not torch.Tensor and hasattr(inner, "__tensor_flatten__"):
        names, _ = inner.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(inner, n)) for n in names)
    return inner.numel() * inner.element_size()
