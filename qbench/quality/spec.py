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

Its ``[model]`` table is the model's source alone (:class:`qbench.model.source.ModelSource`): a
step key there (``blocks``, ``context``, ``methods`` ...) is refused, as is ``m`` (each chunk runs
at ``chunk`` tokens). Every error names the file, ``quality.<key>`` or ``model.<key>`` and the value.
This module holds the job's table model (:class:`QualityTables`), its checks and its ``qbench
check`` line (:attr:`qbench.jobs.Job`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field

from qbench.model.source import ModelSource, resolve
from qbench.model.checkpoint import TOKENIZER, open_named, resolve_folder
from qbench.model.config import ConfigError, StepModelConfig
from qbench.model import recipe as recipes
from qbench.tables import Frozen, ScenarioError, Tables

#: Fewest scored tokens a row's statistics are given on (their uncertainties mean little below).
MIN_TOKENS = 100


class QualitySpec(Frozen):
    """The validated ``[quality]`` table (see the module docstring)."""

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


def tokenizer_file(model: ModelSource, quality: QualitySpec, source: str) -> Path:
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


def check(model: ModelSource, quality: QualitySpec, source: str) -> StepModelConfig:
    """The model of a quality scenario, with every input checked before anything is built: the
    checkpoint's tensors (:func:`qbench.model.checkpoint.open_named`), the tokenizer, the text
    (UTF-8, at least one chunk, enough scored tokens) and the chunk length within the model's
    positions. Torch-free.

    Raises:
        ConfigError: one line naming ``model.<key>`` or ``quality.<key>``, the file and the value.
    """
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


class QualityTables(Tables):
    """A quality scenario's own keys: ``[model]`` (its source only) and ``[quality]``."""

    REFUSED = {"m": "each chunk runs at quality.chunk tokens",
               "model.context": "chunks are teacher-forced from position 0",
               "model.config": "a quality job needs weights: give checkpoint (a Hugging Face folder) or name "
                               "(a preset with seeded weights)",
               "model.quantize_lm_head": "quality.lm_head says whether the scheme builds the LM head",
               "timing.methods": "a quality scenario times no layer method"}
    MISSING = {"model": "a quality scenario ([quality]) names its model in a [model] table (checkpoint = a Hugging "
                        "Face folder), got none"}
    model: ModelSource
    quality: QualitySpec

    def tables_dict(self) -> dict:
        return {"model": self.model.to_dict(), "quality": self.quality.to_dict()}


def quality_model(scenario: Any) -> StepModelConfig:
    """The model of a quality scenario with its checkpoint, tokenizer and text checked (:func:`check`).
    Torch-free.

    Raises:
        ScenarioError: the key ``model.<key>`` or ``quality.<key>`` at fault and why."""
    try:
        return check(scenario.model, scenario.quality, scenario.source)
    except ConfigError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def check_scenario(scenario: Any) -> None:
    """A quality scenario's cross-key rules: its model, tokenizer and text (:func:`quality_model`),
    and every recipe against the model, the LM head as ``quality.lm_head`` says.

    Raises:
        ScenarioError: the key at fault and why."""
    config = quality_model(scenario)
    recipes.check_entries(scenario, config, "scheme" if scenario.quality.lm_head else "float", "quality.lm_head")


def describe(scenario: Any) -> str:
    """The ``qbench check`` summary: ``model SmolLM2-135M, text wiki.test.raw, 64 chunks of 512 tokens``
    (no M: the chunks are teacher-forced)."""
    q = scenario.quality
    chunks = q.chunks or "every"
    return f"model {quality_model(scenario).title}, text {q.text}, {chunks} chunk{'' if chunks == 1 else 's'} of {q.chunk} tokens"


def scored_per_chunk(chunk: int) -> int:
    """Tokens scored per chunk: the logits of positions ``chunk // 2 .. chunk - 2`` predict tokens
    ``chunk // 2 + 1 .. chunk - 1``, so every scored token has at least half a chunk of context
    (llama.cpp's ``perplexity`` convention: ``first = n_ctx / 2``)."""
    return chunk - 1 - chunk // 2


def read_tokens(model: ModelSource, quality: QualitySpec, source: str) -> list[int]:
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


def bos_id(model: ModelSource, source: str) -> Optional[int]:
    """The checkpoint's ``bos_token_id`` (config.json), or None."""
    if model.checkpoint is None:
        return None
    try:
        data = json.loads((resolve_folder(model.checkpoint, source) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("bos_token_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
