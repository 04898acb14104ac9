"""The ``[quality]`` table of a quality scenario (torch-free).

::

    [model]
    checkpoint = "DIR"            # a Hugging Face folder, or a model id in the local HF cache
    # name = "llama3-8b"          # or a preset with seeded weights (speed only: quality meaningless)
    [quality]
    text = "wiki.test.raw"        # a UTF-8 text file (relative to the scenario)
    chunk = 512                   # tokens per chunk; the second half of each is scored
    chunks = 64                   # chunks used (default: every whole chunk of the text)
    reference = "checkpoint"      # the checkpoint's own dtype, or "float32" / "float16" / "bfloat16"
    logprobs = "float32"          # precision of the shared reference log-probabilities ("float16": half the file)
    sensitivity = "none"          # "role" or "block": one part quantized at a time, ranked by KL divergence
    tokenizer = "tokenizer.json"  # default: the checkpoint's
    lm_head = false               # the scheme also builds the LM head

Every error names the file, ``quality.<key>`` and the value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from qbench.model.checkpoint import TOKENIZER, open_named, resolve_folder
from qbench.model.config import ConfigError, StepModelConfig
from qbench.step.spec import ModelSpec, resolve

#: Fewest scored tokens a row's statistics are given on (their uncertainties mean little below).
MIN_TOKENS = 100


class QualitySpec(BaseModel):
    """The validated ``[quality]`` table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    text: str = Field(min_length=1, max_length=4096)
    chunk: int = Field(default=512, ge=16, le=1 << 17)
    chunks: Optional[int] = Field(default=None, gt=0, le=1 << 20)
    reference: Literal["checkpoint", "float32", "float16", "bfloat16"] = "checkpoint"
    logprobs: Literal["float32", "float16"] = "float32"
    sensitivity: Literal["none", "role", "block"] = "none"
    tokenizer: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    lm_head: bool = False

    def to_dict(self) -> dict:
        return self.model_dump()


def resolve_path(value: str, source: str) -> Path:
    """``value`` relative to the folder of the scenario file ``source`` (absolute paths kept)."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(source).parent / path


def tokenizer_file(model: ModelSpec, quality: QualitySpec, source: str) -> Path:
    """The ``tokenizer.json`` the text is tokenized with: ``quality.tokenizer``, else the checkpoint's.

    Raises:
        ConfigError: ``quality.tokenizer``: none given for a preset model, or the file is missing."""
    if quality.tokenizer is not None:
        path = resolve_path(quality.tokenizer, source)
        key = "quality.tokenizer"
    elif model.checkpoint is not None:
        path = resolve_folder(model.checkpoint, source) / TOKENIZER
        key = "model.checkpoint.tokenizer.json"
    else:
        raise ConfigError("quality.tokenizer", f"a preset model ({model.name!r}) has no tokenizer: name a "
                                               "tokenizer.json, got none")
    if not path.is_file():
        raise ConfigError(key, f"no tokenizer file {path} (the text is tokenized with the `tokenizers` library's "
                               f"tokenizer.json)")
    return path


def check(model: ModelSpec, quality: QualitySpec, source: str) -> StepModelConfig:
    """The model of a quality scenario, with every input checked before anything is built: the
    checkpoint's tensors (:func:`qbench.model.checkpoint.open_named`), the tokenizer, the text
    (UTF-8, at least one chunk, enough scored tokens) and the chunk length within the model's
    positions. Torch-free.

    Raises:
        ConfigError: one line naming ``model.<key>`` or ``quality.<key>``, the file and the value.
    """
    if model.config is not None:
        raise ConfigError("model.config", "a quality job needs weights: give checkpoint (a Hugging Face folder) or "
                                          f"name (a preset with seeded weights), got config={model.config!r}")
    if model.context:
        raise ConfigError("model.context", "not used by a quality job (chunks are teacher-forced from position 0), "
                                           f"got {list(model.context)}")
    if model.checkpoint is not None:
        config = open_named(model.checkpoint, source).config
    else:
        config = resolve(model, source)
    if quality.chunk > config.max_positions:
        raise ConfigError("quality.chunk", f"longer than {config.title}'s max_position_embeddings = "
                                           f"{config.max_positions}, got {quality.chunk}")
    ids = read_tokens(model, quality, source)
    whole = len(ids) // quality.chunk
    text = resolve_path(quality.text, source)
    if whole < 1:
        raise ConfigError("quality.text", f"{text} holds {len(ids)} tokens, fewer than one chunk of quality.chunk = "
                                          f"{quality.chunk}")
    if quality.chunks is not None and quality.chunks > whole:
        raise ConfigError("quality.chunks", f"{text} holds {whole} whole chunks of {quality.chunk} tokens, got "
                                            f"{quality.chunks}")
    scored = (quality.chunks or whole) * scored_per_chunk(quality.chunk)
    if scored < MIN_TOKENS:
        raise ConfigError("quality.chunks", f"{scored} scored tokens, fewer than {MIN_TOKENS} (statistics need more: "
                                            f"a longer text, more chunks or longer chunks), got {quality.chunks or whole}")
    too_big = max(ids) if ids else 0
    if too_big >= config.vocab:
        raise ConfigError("quality.tokenizer", f"the tokenizer gives id {too_big}, beyond {config.title}'s vocabulary "
                                               f"of {config.vocab}: not this model's tokenizer")
    return config


def scored_per_chunk(chunk: int) -> int:
    """Tokens scored per chunk: the logits of positions ``chunk // 2 .. chunk - 2`` predict tokens
    ``chunk // 2 + 1 .. chunk - 1``, so every scored token has at least half a chunk of context
    (llama.cpp's ``perplexity`` convention: ``first = n_ctx / 2``)."""
    return chunk - 1 - chunk // 2


def read_tokens(model: ModelSpec, quality: QualitySpec, source: str) -> list[int]:
    """The text's token ids (the ``tokenizers`` library, no special tokens added).

    Raises:
        ConfigError: ``quality.text``: unreadable or not UTF-8; ``quality.tokenizer``: not a tokenizer."""
    path = resolve_path(quality.text, source)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError("quality.text", f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("quality.text", f"{path} is not UTF-8 (byte {exc.start})") from None
    tok_path = tokenizer_file(model, quality, source)
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tok_path))
    except ImportError:
        raise ConfigError("quality.tokenizer", "the `tokenizers` package is not installed (pip install tokenizers)") from None
    except Exception as exc:
        raise ConfigError("quality.tokenizer", f"{tok_path} is not a tokenizers tokenizer.json: "
                                               f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}") from None
    return tokenizer.encode(text, add_special_tokens=False).ids


def bos_id(model: ModelSpec, source: str) -> Optional[int]:
    """The checkpoint's ``bos_token_id`` (config.json), or None."""
    if model.checkpoint is None:
        return None
    try:
        data = json.loads((resolve_folder(model.checkpoint, source) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("bos_token_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
