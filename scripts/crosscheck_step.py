"""Cross-check qbench's decode step against an independent implementation on the same machine, in
the same process: ``transformers``' LlamaForCausalLM built from the same configuration and the same
weights, with a static KV cache of exactly ``context + 1`` positions, its decode step captured in a
CUDA graph as its users capture it (``StaticCache``, a fixed ``cache_position``), and, with
``--compiled``, compiled by ``torch.compile`` first, against qbench's step in the same form (its
``step_compiled`` method: each block and the head compiled by ``torch.compile``, the step captured in
one CUDA graph). ``--blocks N`` builds both models with the first N blocks (a whole-model compile of
transformers' 32 Llama blocks takes minutes). Not part of the package: it imports transformers, which
qbench does not need.

For each scheme it times, by its own event loop (median of ``--reps`` replays, no qbench timing
code), transformers' step and qbench's ``Decoder`` step (the model library's one forward) over the
same weights, and compares the
two steps' logits. ``bf16``: transformers' own ``nn.Linear`` layers. Any other scheme: both models
hold the same quantized layer modules, built by qbench's scheme registry from the same FP32 weights
and swapped into transformers' blocks (the LM head left in bf16, as qbench's step does by default),
so the pair compares the two steps around one kernel. (Until 2026-12-02 transformers' int4 model was
quantized by torchao's default ``Int4WeightOnlyConfig(group_size=128)``, another kernel than qbench's
tinygemm scheme: ``results/h200/evidence/crosscheck_step*.json`` were made that way.)

    python scripts/crosscheck_step.py --model llama3.1-8b --m 1 --context 128 --out crosscheck_step.json

Writes a JSON with the environment, one record per scheme (µs of each, the ratio qbench / HF, the
logits' relative difference) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qbench import schemes  # noqa: E402
from qbench.model import llama  # noqa: E402
from qbench.model.config import BLOCK_LINEARS, PRESETS, linear_name  # noqa: E402


def hf_config(config):
    import transformers

    extra = {"rope_scaling": dict(config.rope_scaling)} if config.rope_scaling else {}
    return transformers.LlamaConfig(
        hidden_size=config.hidden, intermediate_size=config.ffn, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads, head_dim=config.head_dim, num_hidden_layers=config.blocks,
        vocab_size=config.vocab, max_position_embeddings=config.max_positions, rms_norm_eps=config.rms_eps,
        rope_theta=config.rope_theta, tie_word_embeddings=False, attention_bias=False, mlp_bias=False, **extra)


def build_hf(config, weights, dtype, device):
    import transformers

    cfg = hf_config(config)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = transformers.LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(prev)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights.get(name).to(dtype))
    model.config.use_cache = True
    return model


def swap_linears(model, config, weights, build) -> None:
    """Replace every block linear of ``model`` (a LlamaForCausalLM) by ``build(fp32_weight [N, K])``,
    the LM head left as it is (qbench's step keeps it in the activation dtype by default)."""
    for i in range(config.blocks):
        for role in BLOCK_LINEARS:
            name = linear_name(i, role)  # model.layers.3.self_attn.q_proj.weight
            parent, _, attr = name.removesuffix(".weight").rpartition(".")
            setattr(model.get_submodule(parent), attr, build(weights.get(name)))


def static_cache(model, m, slots, dtype, device):
    import transformers

    try:  # transformers >= 4.56 / 5.x
        return transformers.StaticCache(config=model.config, max_cache_len=slots)
    except TypeError:
        return transformers.StaticCache(config=model.config, max_batch_size=m, max_cache_len=slots, device=device,
                                        dtype=dtype)


def hf_decoder(hf, cache, prompt, tok, context, device, after_prefill=None):
    """Prefill ``prompt`` into ``cache``, call ``after_prefill()`` (if given), then return a zero-argument decode step at position
    ``context`` that can run again and again (same position, as qbench's step): transformers 5
    keeps the write index of a static cache in a device counter per layer (``cumulative_length``)
    that each step advances, so the step first copies ``context`` back into every layer's counter
    (one multi-tensor copy kernel, inside the timed step); transformers 4 takes a ``cache_position``
    tensor instead. The cache keyword is ``cache`` from 5.2x, ``past_key_values`` before."""
    import inspect

    kw = "cache" if "cache" in inspect.signature(hf.model.forward).parameters else "past_key_values"
    hf(prompt, **{kw: cache}, use_cache=True)
    if after_prefill is not None:
        after_prefill()
    counters = [layer.cumulative_length for layer in getattr(cache, "layers", [])
                if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]
    if counters:  # the write index lives in the cache (transformers >= 5): set it back before each step
        base = [torch.full_like(c, context) for c in counters]
        pos = torch.tensor([[context]], device=device).expand(tok.shape[0], 1).contiguous()

        def step():
            torch._foreach_copy_(counters, base)
            return hf(tok, **{kw: cache}, position_ids=pos, use_cache=True).logits

        return step
    cpos = torch.tensor([context], device=device)
    return lambda: hf(tok, **{kw: cache}, cache_position=cpos, use_cache=True).logits


def event_median(fn, reps: int) -> float:
    """Median µs of ``fn`` over ``reps`` calls between CUDA events (warm-up 3)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def graph_of(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def host_median(fn, reps: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


@torch.inference_mode()
def one_scheme(name, config, args, device):
    scheme = schemes.get(name)
    options = scheme.options_model()
    dtype = scheme.activation_dtype
    weights = llama.Weights(config, args.seed, device)
    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, config.vocab, (1, args.context), generator=gen).to(device)
    tokens = torch.randint(0, config.vocab, (args.m,), generator=gen).to(device)
    rec = {"scheme": name, "m": args.m, "context": args.context}
    # transformers
    hf = build_hf(config, weights, dtype, device)
    swap = None
    if name != "bf16":  # the same quantized layers in both models: the pair times the step around one kernel
        # swapped in after the prefill: qbench fills its cache with the float weights (every scheme reads the
        # same history), so transformers' cache is filled by its float model too
        def swap():
            swap_linears(hf, config, weights, lambda w: scheme.build(w, None, options))
        rec["hf_linears"] = f"qbench's {name} layer modules (built from the same FP32 weights), after a float prefill"
    else:
        rec["hf_linears"] = "transformers' own nn.Linear (bf16)"
    cache = static_cache(hf, args.m, args.context + 1, dtype, device)
    step_hf = hf_decoder(hf, cache, prompt.expand(args.m, -1).contiguous(), tokens[:, None].clone(), args.context, device,
                         after_prefill=swap)
    if args.compiled:
        step_hf = torch.compile(step_hf, fullgraph=False)
    t0 = time.perf_counter()
    logits_hf = step_hf()[:, -1].float()
    rec["hf_first_call_s"] = time.perf_counter() - t0
    if device.type == "cuda":
        g, _ = graph_of(step_hf)
        rec["hf_graph_us"] = event_median(g.replay, args.reps)
        del g
    else:
        rec["hf_eager_us"] = host_median(step_hf, args.reps)
    del hf, cache
    if device.type == "cuda":
        torch.cuda.empty_cache()
    # qbench, the same weights through its scheme registry
    kv = llama.KVCache.empty(config, 1, args.context + 1, dtype, device)
    llama.prefill(weights, kv, prompt, dtype)
    forward = llama.build_model(weights, lambda w, b, i, role: scheme.build(w, b, options), dtype)
    model = llama.Decoder(forward, kv.copies(args.m, dtype), args.context)
    if args.compiled:  # qbench's step_compiled form: one compiled function for every block, one for the head
        forward.block_call = torch.compile(lambda block, x, cos, sin, layer, pos: block(x, cos, sin, layer, pos),
                                           dynamic=False)
        model.head_call = torch.compile(model.head_call, dynamic=False)
    t0 = time.perf_counter()
    model(tokens)
    rec["qbench_first_call_s"] = time.perf_counter() - t0
    logits_q = model.logits(tokens)
    if device.type == "cuda":
        g, _ = graph_of(lambda: model(tokens))
        rec["qbench_graph_us"] = event_median(g.replay, args.reps)
        rec["ratio_qbench_over_hf"] = rec["qbench_graph_us"] / rec["hf_graph_us"]
    else:
        rec["qbench_eager_us"] = host_median(lambda: model(tokens), args.reps)
    rec["logits_rel_diff"] = (torch.linalg.vector_norm(logits_q - logits_hf) / torch.linalg.vector_norm(logits_hf)).item()
    rec["top1_agree"] = (logits_q.argmax(-1) == logits_hf.argmax(-1)).double().mean().item()
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.1-8b", choices=sorted(PRESETS))
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--schemes", nargs="+", default=["bf16", "int4-weight-only"])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--seed", type=int, default=61)
    p.add_argument("--compiled", action="store_true",
                   help="compile both steps (torch.compile, default mode) before capturing each in a CUDA graph")
    p.add_argument("--blocks", type=int, default=None, help="build both models with this many blocks (default: all)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import transformers

    device = torch.device(args.device)
    config = PRESETS[args.model]
    if args.blocks is not None:
        if not 1 <= args.blocks <= config.blocks:
            p.error(f"--blocks: must be 1..{config.blocks} for {args.model}, got {args.blocks}")
        config = dataclasses.replace(config, blocks=args.blocks)
    records = []
    for name in args.schemes:
        try:
            records.append(one_scheme(name, config, args, device))
        except Exception as exc:  # one scheme's failure is a record, not a crash
            records.append({"scheme": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"})
        print(json.dumps(records[-1]), flush=True)
    doc = {"script": "scripts/crosscheck_step.py", "argv": sys.argv[1:], "model": args.model, "blocks": config.blocks,
           "compiled": args.compiled, "device": str(device),
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None, "torch": torch.__version__,
           "transformers": transformers.__version__, "records": records}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    ok = all("error" not in r for r in records)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
