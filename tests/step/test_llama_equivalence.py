"""qbench's decode step against ``transformers``' LlamaForCausalLM (a test dependency): the same
config and weights, a prefill of ``context`` tokens, then one decode token per sequence; the
logits must agree to FP32 tolerance, for M = 1 and 3 and two contexts, with and without RoPE
scaling, with grouped-query attention."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a test dependency (pip install -e '.[test]')")

from qbench.model import llama  # noqa: E402
from qbench.model.config import from_hf_config  # noqa: E402

HF_CONFIG = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                 num_key_value_heads=2, num_hidden_layers=2, vocab_size=101, max_position_embeddings=256,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu")


def _hf_model(extra: dict):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**{**HF_CONFIG, **extra})
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from their initial 1 so that they matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    return cfg, model


def _ours(cfg_dict: dict, model, m: int, context: int, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    config = from_hf_config(cfg_dict, "test-config")
    weights = llama.Weights(config, 0, torch.device("cpu"), state_dict=model.state_dict())
    cache = llama.new_cache(config, m, context, torch.float32, torch.device("cpu"), config.blocks)
    llama.prefill(weights, cache, prompt, torch.float32)
    blocks = [llama.build_block(config, weights, i, k, v, lambda w, role: llama.FloatLinear(w), context, torch.float32)
              for i, (k, v) in enumerate(cache)]
    head = llama.FloatLinear(weights.get("lm_head.weight"))
    step = llama.DecodeModel(config, weights.get("model.embed_tokens.weight"), blocks,
                             weights.get("model.norm.weight"), head, context, torch.float32)
    with torch.inference_mode():
        logits = step.logits(tokens)
        reference = llama.reference_logits(weights, cache, tokens, context, lm_head=True)
        nxt = step(tokens)
    assert torch.equal(nxt, logits.argmax(-1))
    torch.testing.assert_close(reference, logits, rtol=1e-5, atol=1e-5)
    return logits


@pytest.mark.parametrize("rope", [{}, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}],
                         ids=["rope-default", "rope-llama3"])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("context", [5, 37])
def test_logits_equal_transformers(m, context, rope):
    cfg, model = _hf_model(rope)
    gen = torch.Generator().manual_seed(m * 100 + context)
    prompt = torch.randint(0, cfg.vocab_size, (m, context), generator=gen)
    tokens = torch.randint(0, cfg.vocab_size, (m,), generator=gen)
    with torch.no_grad():
        out = model(prompt, use_cache=True)
        hf = model(tokens[:, None], past_key_values=out.past_key_values, use_cache=True).logits[:, -1].float()
    ours = _ours({**HF_CONFIG, **rope}, model, m, context, prompt, tokens)
    torch.testing.assert_close(ours, hf, rtol=1e-4, atol=1e-4)


def test_shared_prompt_equals_distinct_copies():
    """A prompt shared by the batch (B = 1) fills every sequence's cache as M copies of it would."""
    cfg, model = _hf_model({})
    config = from_hf_config(HF_CONFIG, "test-config")
    weights = llama.Weights(config, 0, torch.device("cpu"), state_dict=model.state_dict())
    prompt = torch.randint(0, cfg.vocab_size, (1, 9), generator=torch.Generator().manual_seed(1))
    shared = llama.new_cache(config, 3, 9, torch.float32, torch.device("cpu"), 2)
    copies = llama.new_cache(config, 3, 9, torch.float32, torch.device("cpu"), 2)
    llama.prefill(weights, shared, prompt, torch.float32)
    llama.prefill(weights, copies, prompt.expand(3, 9).contiguous(), torch.float32)
    for (ks, vs), (kc, vc) in zip(shared, copies):
        torch.testing.assert_close(ks, kc)
        torch.testing.assert_close(vs, vc)
