"""bitsandbytes schemes (bitsandbytes >= 0.50): LLM.int8 and the 4-bit NF4 / FP4 formats.

* ``int8-bnb``: ``bnb.nn.Linear8bitLt`` (Dettmers et al., "LLM.int8()", 2022): int8 weight with a
  per-row absmax scale (``SCB``, float32); activation columns with any |value| above
  ``threshold`` (default 6.0) are computed in fp16 (mixed-precision decomposition). fp16
  activations.
* ``nf4-bnb`` / ``fp4-bnb``: ``bnb.nn.Linear4bit`` (Dettmers et al., "QLoRA", 2023): two 4-bit
  codes per byte, one absmax per block of ``blocksize`` (64) weights, a 16-entry code table;
  with double quantization the absmax values are themselves quantized to 8 bits in blocks of
  256 with a float32 absmax per block, a 256-entry code table and a float32 offset. bf16
  activations; the compute dtype is an option (``compute_dtype``: bf16, fp16 or fp32, the
  ``bnb_4bit_compute_dtype`` of transformers' ``BitsAndBytesConfig``; fp32 is the slow path, see
  :class:`FourBitOptions`). On a CPU with AVX512-BF16 bitsandbytes repacks the 4-bit weight for its own
  kernel on the first call, which needs N % 32 == 0 (:data:`CPU_PACKED_BLOCK_N`); another N takes its generic
  CPU path.

The ledger counts the packed weight and every tensor of ``weight.quant_state`` (bitsandbytes'
``QuantState``), the nested state included.

Emulations (:mod:`qbench.schemes.emulate`) quantize with bitsandbytes' own functions
(``quantize_4bit`` / ``dequantize_4bit``, ``int8_vectorwise_quant`` / ``int8_vectorwise_dequant``)
and redo LLM.int8's activation split in torch (:func:`_act_llm_int8`).
"""

from __future__ import annotations

from typing import Optional

import torch

from qbench.schemes.base import TensorPart, bias_parts
from qbench.schemes.emulate import EmulatedLinear
from qbench.schemes.options import FourBitOptions, Int8BnbOptions


#: ``compute_dtype`` option -> the ``Linear4bit(compute_dtype=...)`` it builds.
COMPUTE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _build_int8(weight: torch.Tensor, bias: Optional[torch.Tensor], options: Int8BnbOptions) -> torch.nn.Module:
    import bitsandbytes as bnb

    n, k = weight.shape
    # on the meta device: the layer's own weight is replaced below, and a CPU-initialised one (nn.Linear's
    # kaiming init) cost 0.2-0.4 s per layer, most of a model-step build (see _build_4bit)
    layer = bnb.nn.Linear8bitLt(k, n, bias=bias is not None, has_fp16_weights=False, threshold=options.threshold,
                                device="meta")
    layer.weight = bnb.nn.Int8Params(weight.detach().to("cpu", torch.float16), requires_grad=False, has_fp16_weights=False)
    if bias is not None:
        layer.bias = torch.nn.Parameter(bias.detach().to("cpu", torch.float16), requires_grad=False)
    return layer.to(weight.device).eval()  # Int8Params quantizes on .to(device)


def int8_parts(module: torch.nn.Module) -> list[TensorPart]:
    """Ledger of ``Linear8bitLt``: ``weight`` (int8 CB, payload) and ``SCB`` (float32 row absmax).

    Raises:
        TypeError: if the weight was not quantized to int8.
    """
    weight = module.weight
    scb = getattr(weight, "SCB", None)
    if scb is None:  # the first forward moves SCB from the weight to the layer's MatmulLtState
        scb = getattr(getattr(module, "state", None), "SCB", None)
    if weight.dtype != torch.int8 or scb is None:
        raise TypeError(f"Linear8bitLt weight is {weight.dtype} without SCB: not quantized")
    return [TensorPart("weight", "payload", weight.data), TensorPart("weight.SCB", "metadata", scb)] + bias_parts(module)


#: N multiple bitsandbytes' packed AVX512-BF16 CPU path for 4-bit weights needs (``functional.
#: _convert_weight_packed_for_cpu``, ``block_n = 32``, asserted on the first CPU call, not checked at build).
CPU_PACKED_BLOCK_N = 32


def _build_4bit(quant_type: str):
    def build(weight: torch.Tensor, bias: Optional[torch.Tensor], options: FourBitOptions) -> torch.nn.Module:
        import bitsandbytes as bnb

        n, k = weight.shape
        # Built on the meta device, its weight and bias replaced below: constructed on the CPU,
        # Linear4bit first draws nn.Linear's kaiming-uniform FP32 weight there, which took most of a
        # model-step worker's build time over a model's hundreds of layers. qbench.schemes.base
        # builds its nn.Linear the same way.
        layer = bnb.nn.Linear4bit(k, n, bias=bias is not None, compute_dtype=COMPUTE_DTYPES[options.compute_dtype],
                                  compress_statistics=options.double_quant, quant_type=quant_type, device="meta")
        # Params4bit quantizes on its first .to(device), wherever its data is (bitsandbytes 0.50
        # Params4bit.to -> _quantize(device)): the weight stays on its device. A round trip through
        # the host (what Int8Params needs, above) would cost a model-step job a minute over a
        # model's layers.
        layer.weight = bnb.nn.Params4bit(weight.detach().to(torch.bfloat16), requires_grad=False,
                                         blocksize=options.blocksize, compress_statistics=options.double_quant,
                                         quant_type=quant_type)
        if bias is not None:
            layer.bias = torch.nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)
        layer = layer.to(weight.device)
        if weight.device.type == "cpu" and not layer.weight.bnb_quantized:
            layer.weight = layer.weight._quantize("cpu")
        if n % CPU_PACKED_BLOCK_N:  # a CPU call takes bitsandbytes' generic 4-bit path instead (CUDA: no effect)
            layer.support_avx512bf16_for_cpu = False
        return layer.eval()

    return build


def four_bit_parts(module: torch.nn.Module) -> list[TensorPart]:
    """Ledger of ``Linear4bit``: the packed uint8 weight, then every tensor of its ``QuantState``.

    Raises:
        TypeError: if the weight has no quant_state (not quantized).
    """
    weight = module.weight
    state = getattr(weight, "quant_state", None)
    if state is None:
        raise TypeError("Linear4bit weight has no quant_state: not quantized")
    parts = [TensorPart("weight", "payload", weight.data),
             TensorPart("weight.quant_state.absmax", "metadata", state.absmax),
             TensorPart("weight.quant_state.code", "metadata", state.code)]
    if state.nested:
        parts += [TensorPart("weight.quant_state.offset", "metadata", torch.as_tensor(state.offset)),
                  TensorPart("weight.quant_state.state2.absmax", "metadata", state.state2.absmax),
                  TensorPart("weight.quant_state.state2.code", "metadata", state.state2.code)]
    return parts + bias_parts(module)


def _act_llm_int8(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """LLM.int8's activation path (bitsandbytes 0.50 ``int8_vectorwise_quant`` and
    ``int8_mixed_scaled_mm``, default backend), dequantized: columns holding any ``|x| >= threshold``
    (threshold > 0) stay in fp16; the rest is int8 per row, ``round(x * 127 / absmax_row)`` with the
    absmax taken with the outliers zeroed. Takes fp16 ``[M, K]``, returns float32."""
    x = x.float()
    kept = x
    cols = None
    if threshold > 0.0:
        outliers = x.abs() >= threshold
        cols = outliers.any(dim=0)
        kept = x.masked_fill(outliers, 0.0)
    stats = kept.abs().amax(dim=-1, keepdim=True)
    q = torch.round(kept * (127.0 / stats)).nan_to_num(0.0)  # an all-zero row quantizes to zeros
    x_hat = q * (stats / 127.0)
    return x_hat if cols is None else torch.where(cols, x, x_hat)


def _emulate_int8(weight: torch.Tensor, bias: Optional[torch.Tensor], options: Int8BnbOptions) -> torch.nn.Module:
    """int8-bnb: the fp16 weight through bitsandbytes' ``int8_vectorwise_quant`` (what ``Int8Params``
    runs: per-row absmax, ``round(w * 127 / absmax)``) and ``int8_vectorwise_dequant``; activations
    per :func:`_act_llm_int8` with the option's threshold (the outlier columns meet the same
    dequantized weight); fp16 in and out."""
    import functools

    import bitsandbytes.functional as bnb_f

    cb, scb, _ = bnb_f.int8_vectorwise_quant(weight.detach().to(torch.float16).contiguous())
    w_hat = bnb_f.int8_vectorwise_dequant(cb, scb)
    b = None if bias is None else bias.to(torch.float16)
    act = functools.partial(_act_llm_int8, threshold=float(options.threshold))
    return EmulatedLinear(w_hat, b, torch.float16, torch.float16, act_quant=act,
                          rule=f"LLM.int8 per-row int8, fp16 columns above {options.threshold}")


def _emulate_4bit(quant_type: str):
    def emulate(weight: torch.Tensor, bias: Optional[torch.Tensor], options: FourBitOptions) -> torch.nn.Module:
        """nf4-bnb / fp4-bnb: the bf16 weight through bitsandbytes' ``quantize_4bit`` (block size,
        double quantization and type as ``Params4bit`` is given them) and ``dequantize_4bit``, then
        in the compute dtype, as ``matmul_4bit`` multiplies it; activations converted to the compute
        dtype; output bf16 (``Linear4bit`` returns the input's dtype)."""
        import bitsandbytes.functional as bnb_f

        compute = COMPUTE_DTYPES[options.compute_dtype]
        packed, state = bnb_f.quantize_4bit(weight.detach().to(torch.bfloat16).contiguous(),
                                            blocksize=options.blocksize, compress_statistics=options.double_quant,
                                            quant_type=quant_type)
        w_hat = bnb_f.dequantize_4bit(packed, state).to(compute)
        b = None if bias is None else bias.to(torch.bfloat16).to(compute)
        return EmulatedLinear(w_hat, b, compute, torch.bfloat16,
                              rule=f"bitsandbytes {quant_type}, block {options.blocksize}, "
                                   f"double quant {options.double_quant}, compute {options.compute_dtype}")

    return emulate


# --- named by the declarations in qbench.schemes.catalog ---
build_nf4 = _build_4bit("nf4")
build_fp4 = _build_4bit("fp4")
emulate_nf4 = _emulate_4bit("nf4")
emulate_fp4 = _emulate_4bit("fp4")
