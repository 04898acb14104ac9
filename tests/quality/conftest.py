"""Small Llama-family checkpoints in Hugging Face format, made with ``transformers`` (the
independent reference): a Llama, a Qwen2 with q/k/v biases, one with tied embeddings, one sharded;
each with a byte-level ``tokenizers`` tokenizer (one id per UTF-8 byte, ``<bos>`` = 256)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 12


def byte_tokenizer(path: Path) -> None:
    """A byte-level tokenizer.json: a BPE without merges over the 256 ByteLevel characters, id = byte value."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    tok = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<bos>"])
    tok.save(str(path))


def make_checkpoint(folder: Path, kind: str = "llama", *, tied: bool = False, shard: bool = False,
                    blocks: int = 2, seed: int = 0) -> Path:
    """A random-weight model of ``kind`` (``llama``, ``qwen2``) saved with ``save_pretrained``
    (float32), and a byte tokenizer."""
    torch.manual_seed(seed)
    common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=blocks, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=260, max_position_embeddings=512, bos_token_id=256,
                  eos_token_id=257, tie_word_embeddings=tied, rms_norm_eps=1e-5)
    if kind == "qwen2":
        config = transformers.Qwen2Config(**common)
        model = transformers.Qwen2ForCausalLM(config)
    else:
        config = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # biases are initialised to zero: give them values a test can see
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, max_shard_size="60KB" if shard else "5GB", safe_serialization=True)
    byte_tokenizer(folder / "tokenizer.json")
    return folder


def write_scenario(folder: Path, checkpoint: Path, schemes: list[str], *, chunk: int = 64, chunks: int = 4,
                   extra: str = "", text: str = TEXT, text_file: Path | None = None) -> Path:
    """``folder/q.toml``: a quality scenario of ``schemes`` on ``checkpoint`` over ``text`` (written as
    ``folder/text.txt``), or over the file ``text_file`` when given; ``extra``: more ``[quality]`` lines."""
    if text_file is None:
        (folder / "text.txt").write_text(text, encoding="utf-8")
    lines = ['name = "q"', 'device = "cpu"', "[model]", f'checkpoint = "{checkpoint}"', "[quality]",
             f'text = "{text_file or "text.txt"}"', f"chunk = {chunk}", f"chunks = {chunks}", extra]
    for s in schemes:
        lines += ["[[schemes]]", f'name = "{s}"']
    path = folder / "q.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def llama_ckpt(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("llama") / "ck")


def run_scheme(scenario_path: Path, index: int, shared: Path) -> dict:
    """The quality row of scheme ``index``, measured in this process (the worker's function)."""
    from qbench.quality.measure import measure_quality_scheme
    from qbench.scenario import load

    scenario = load(scenario_path)
    (row,) = measure_quality_scheme(scenario, index, torch.device("cpu"), shared_dir=str(shared))
    return row


def hf_nll(checkpoint: Path, ids: list[int], chunk: int, chunks: int, bos: int | None) -> list[float]:
    """The NLL of every scored token (llama.cpp's second half of each chunk), by ``transformers``."""
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32).eval()
    out = []
    first = chunk // 2
    for c in range(chunks):
        tokens = torch.tensor(ids[c * chunk:(c + 1) * chunk])
        if bos is not None:
            tokens[0] = bos
        with torch.no_grad():
            logits = model(tokens[None]).logits[0].float()
        lp = torch.log_softmax(logits[first:chunk - 1], dim=-1)
        out += (-lp.gather(-1, tokens[first + 1:chunk, None]).squeeze(-1)).tolist()
    return out


def read(path: Path) -> dict:
    return json.loads(path.read_text())
