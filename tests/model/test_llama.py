"""The one Llama forward (qbench.model.llama) against ``transformers``' LlamaForCausalLM (a test
dependency): the same config and weights, a prefill of ``context`` tokens, then one decode token
per sequence; the logits must agree to FP32 tolerance, for M = 1 and 3 and two contexts, with and
without RoPE scaling, with grouped-query attention. And the forward's own known answers: decode
steps after a prefill give the logits of one uncached pass over the whole sequence."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a test dependency (pip install -e '.[test]')")

from qbench.model import llama  # noqa: E402
from qbench.model.config import from_hf_config  # noqa: E402

HF_CONFIG = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                 num_key_value_heads=2, num_hidden_layers=2, vocab_size=101, max_position_embeddings=256,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu")
CPU = torch.device("cpu")


def _hf_model(extra: dict):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**{**HF_CONFIG, **extra})
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from their initial 1 so that they matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    return cfg, model


def _weights(cfg_dict: dict, model) -> llama.Weights:
    return llama.Weights(from_hf_config(cfg_dict, "test-config"), 0, CPU, state_dict=model.state_dict())


def _decoder(weights: llama.Weights, m: int, context: int, prompt: torch.Tensor) -> llama.Decoder:
    """The decode step as the step job builds it: prefill, then FP32 linears over the filled cache."""
    config = weights.config
    cache = llama.KVCache.empty(config, m, context + 1, torch.float32, CPU)
    llama.prefill(weights, cache, prompt, torch.float32)
    model = llama.build_model(weights, llama.float_builder(torch.float32), torch.float32)
    return llama.Decoder(model, cache, context)


def _ours(cfg_dict: dict, model, m: int, context: int, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    weights = _weights(cfg_dict, model)
    step = _decoder(weights, m, context, prompt)
    with torch.inference_mode():
        logits = step.logits(tokens)
        reference = llama.reference_logits(weights, step.cache, tokens, context, lm_head=True)
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


@pytest.mark.parametrize("m", [1, 3])
def test_qwen2_decode_step_with_its_biases_equals_transformers(m):
    """Qwen2 (q/k/v biases, given values a test can see) through the decode step: prefill, then one
    token per sequence, against Qwen2ForCausalLM with the same weights."""
    torch.manual_seed(1)
    cfg_dict = {**HF_CONFIG, "model_type": "qwen2"}
    cfg = transformers.Qwen2Config(**cfg_dict)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    gen = torch.Generator().manual_seed(m)
    prompt = torch.randint(0, cfg.vocab_size, (m, 11), generator=gen)
    tokens = torch.randint(0, cfg.vocab_size, (m,), generator=gen)
    with torch.no_grad():
        out = model(prompt, use_cache=True)
        hf = model(tokens[:, None], past_key_values=out.past_key_values, use_cache=True).logits[:, -1].float()
    assert _weights(cfg_dict, model).config.biased == ("q_proj", "k_proj", "v_proj")
    ours = _ours(cfg_dict, model, m, 11, prompt, tokens)
    torch.testing.assert_close(ours, hf, rtol=1e-4, atol=1e-4)


def test_shared_prompt_equals_distinct_copies():
    """A prompt shared by the batch (B = 1) fills every sequence's cache as M copies of it would."""
    cfg, model = _hf_model({})
    weights = _weights(HF_CONFIG, model)
    prompt = torch.randint(0, cfg.vocab_size, (1, 9), generator=torch.Generator().manual_seed(1))
    shared = llama.KVCache.empty(weights.config, 3, 10, torch.float32, CPU)
    copies = llama.KVCache.empty(weights.config, 3, 10, torch.float32, CPU)
    llama.prefill(weights, shared, prompt, torch.float32)
    llama.prefill(weights, copies, prompt.expand(3, 9).contiguous(), torch.float32)
    for s, c in zip(shared, copies):
        torch.testing.assert_close(s.k, c.k)
        torch.testing.assert_close(s.v, c.v)


@pytest.mark.parametrize("rope", [{}, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}], ids=["default", "linear"])
def test_decode_steps_after_a_prefill_equal_one_uncached_pass(rope):
    """Known answer: a prefill of 7 tokens then 5 decode steps (T = 1, through the step's own
    attention: the cache written at each position, the query over positions 0 .. pos) give the
    logits of one forward over all 12 tokens with no cache, to FP32 tolerance; so does a second
    chunk after the prefill (T > 1 at position 7, causal over the cache)."""
    cfg, model = _hf_model(rope)
    weights = _weights({**HF_CONFIG, **rope}, model)
    forward = llama.build_model(weights, llama.float_builder(torch.float32), torch.float32)
    seq = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        whole = forward(seq)  # [2, 12, vocab], cache=None
        with torch.no_grad():
            hf = model(seq).logits.float()
        torch.testing.assert_close(whole, hf, rtol=1e-4, atol=1e-4)
        cache = llama.KVCache.empty(weights.config, 2, 12, torch.float32, CPU)
        first = forward(seq[:, :7], 0, cache)
        torch.testing.assert_close(first, whole[:, :7], rtol=1e-5, atol=1e-5)
        for pos in range(7, 12):
            step = forward(seq[:, pos], pos, cache)  # tokens [M]: the decode step
            torch.testing.assert_close(step, whole[:, pos], rtol=1e-5, atol=1e-5)
        fresh = llama.KVCache.empty(weights.config, 2, 12, torch.float32, CPU)
        forward(seq[:, :7], 0, fresh)
        torch.testing.assert_close(forward(seq[:, 7:], 7, fresh), whole[:, 7:], rtol=1e-5, atol=1e-5)
        for a, b in zip(cache, fresh):  # both ways fill the same cache
            torch.testing.assert_close(a.k, b.k, rtol=1e-5, atol=1e-5)


def test_cache_dtype_is_its_own():
    """A cache in another dtype than the model's: the prefill writes it in its own dtype."""
    _, model = _hf_model({})
    weights = _weights(HF_CONFIG, model)
    cache = llama.KVCache.empty(weights.config, 1, 6, torch.bfloat16, CPU)
    llama.prefill(weights, cache, torch.arange(5)[None], torch.float32)
    assert cache.dtype == torch.bfloat16 and cache.shape == (1, 2, 6, 16)
    assert cache[0].k[:, :, :5].abs().sum() > 0 and cache[0].k[:, :, 5].abs().sum() == 0


def test_a_chunk_past_position_zero_needs_a_cache():
    _, model = _hf_model({})
    forward = llama.build_model(_weights(HF_CONFIG, model), llama.float_builder(torch.float32), torch.float32)
    with pytest.raises(ValueError, match="give a cache"):
        forward(torch.arange(4)[None], 3)


def test_blocks_on_demand_hold_one_block_at_a_time():
    """The prefill and the FP32 reference build each block when the forward reaches it: a block is
    freed before the next is built (the reference of a 70B block is 3.4 GB of FP32 weights)."""
    import weakref

    from qbench.model.config import PRESETS

    config = PRESETS["tiny"]
    weights = llama.Weights(config, 0, CPU)
    refs, most = [], []

    class Counting(llama.BlocksOnDemand):
        def __iter__(self):
            for block in super().__iter__():
                refs.append(weakref.ref(block))
                most.append(sum(r() is not None for r in refs))
                yield block

    model = llama.Llama(config, weights.get("model.embed_tokens.weight"),
                        Counting(weights, llama.float_builder(torch.float32), torch.float32, config.blocks),
                        weights.get("model.norm.weight"), None, torch.float32)
    cache = llama.KVCache.empty(config, 1, 9, torch.float32, CPU)
    with torch.inference_mode():
        model.hidden(torch.arange(8)[None], 0, cache)
    assert most == [1, 1]


@pytest.mark.parametrize("shared", [True, False], ids=["shared-prompt", "own-caches"])
def test_reference_in_sequence_groups_equals_all_at_once(shared):
    """The FP32 reference over 5 sequences in groups of 2 (2, 2, 1) equals one pass over all 5, reads
    the right sequences' caches, and writes none of them."""
    cfg, model = _hf_model({})
    weights = _weights(HF_CONFIG, model)
    gen = torch.Generator().manual_seed(11)
    cache = llama.KVCache.empty(weights.config, 1 if shared else 5, 10, torch.float32, CPU)
    prompt = torch.randint(0, cfg.vocab_size, (1 if shared else 5, 9), generator=gen)
    llama.prefill(weights, cache, prompt, torch.float32)
    before = [(c.k.clone(), c.v.clone()) for c in cache]
    tokens = torch.randint(0, cfg.vocab_size, (5,), generator=gen)
    with torch.inference_mode():
        whole = llama.reference_logits(weights, cache, tokens, 9, lm_head=True)
        grouped = llama.reference_logits(weights, cache, tokens, 9, lm_head=True, group=2)
        alone = llama.reference_logits(weights, cache, tokens[3:4], 9, lm_head=True) if shared else None
    torch.testing.assert_close(grouped, whole, rtol=1e-5, atol=1e-5)
    if alone is not None:
        torch.testing.assert_close(grouped[3:4], alone, rtol=1e-5, atol=1e-5)
    for c, (k, v) in zip(cache, before):
        assert torch.equal(c.k, k) and torch.equal(c.v, v)


def test_reference_group_keeps_one_blocks_fp32_copy_within_a_gib():
    from qbench.model.config import PRESETS

    c = PRESETS["llama3.1-8b"]  # 2 × 8 × 128 = 2,048 K+V elements a position: 32,769 positions = 268 MB in FP32
    assert llama.reference_group(c, 16, 32769) == 3  # 3 x 268 MB <= 1 GiB < 4 x 268 MB
    assert llama.reference_group(c, 16, 129) == 16 and llama.reference_group(c, 1, 10 ** 7) == 1


def test_a_groups_fp32_copy_holds_only_its_sequences():
    """each_as over 2 of 16 sequences of a bf16 cache converts those 2, not all 16 (a view of a whole
    FP32 copy would keep all 16 alive)."""
    _, model = _hf_model({})
    weights = _weights(HF_CONFIG, model)
    cache = llama.KVCache.empty(weights.config, 16, 8, torch.bfloat16, CPU)
    for layer in cache:
        layer.k.copy_(torch.randn_like(layer.k, dtype=torch.float32))
    got = next(iter(cache.each_as(torch.float32, seqs=slice(4, 6))))
    assert got.k.shape[0] == 2 and got.k.untyped_storage().nbytes() == got.k.numel() * 4
    torch.testing.assert_close(got.k, cache[0].k[4:6].float(), rtol=0, atol=0)
