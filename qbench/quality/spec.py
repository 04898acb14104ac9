"""The ``[quality]`` table of a quality scenario (torch-free).

::

    [model]
    checkpoint = "DIR"            # a Hugging Face folder, or a model id in the local HF cache
    # name = "llama3-8b"          # or a preset with seeded weights (speed only: quality meaningless)
    [quality]
    text = "wiki.test.raw"        # a UTF-8 text file (relative to the scenario)
    chunk = 512                   # tokens per chunk; the second half of each is scored
    chunks = 64                   # chunks used (default: every whole chunk of the text)
    first_chunk = 0               # the chunks used start at this chunk of the text (a held-out span)
    reference = "checkpoint"      # the checkpoint's own dtype, or "float32" / "float16" / "bfloat16"
    logprobs = "float32"          # precision of the shared reference log-probabilities ("float16": half the file)
    sensitivity = "none"          # "role", "block" or "unit": one part quantized at a time, ranked by KL divergence
    tokenizer = "tokenizer.json"  # default: the checkpoint's
    lm_head = false               # the scheme also builds the LM head
    kv_cache = "activation"       # or "fp8": each chunk runs through an fp8 (e4m3) KV cache, attending over its
                                  # dequantized values (static scale per block and KV head from the chunk's absmax)
    calibration = { text = "c.txt", chunks = 8 }  # GPTQ/AWQ's calibration span (qbench.quality.calibrate)

Its ``[model]`` table is the model's source alone (:class:`qbench.model.source.ModelSource`): a
step key there (``blocks``, ``context``, ``methods`` ...) is refused, as is ``m`` (each chunk runs
at ``chunk`` tokens). Every error names the file, ``quality.<key>`` or ``model.<key>`` and the value.
This module holds the job's table model (:class:`QualityTables`), its checks and its ``qbench
check`` line (:attr:`qbench.jobs.Job`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
from pydantic import Field

from qbench.model.source import ModelSource, resolve
from qbench.model.checkpoint import TOKENIZER, cache_dir, file_stamp, open_named, resolve_folder, weight_source
from qbench.model.config import ConfigError, StepModelConfig
from qbench.model import recipe as recipes
from qbench.tables import Frozen, ScenarioError, Tables

log = logging.getLogger(__name__)

#: Most tokens a tokenizer makes of one byte of text: a token covers at least one byte of the normalized
#: text (byte-level BPE; SentencePiece with byte fallback), and a normalizer at most triples it (a space
#: replaced by the 3-byte U+2581, a prefix added): a bound, not an estimate.
TOKENS_PER_BYTE = 4
#: Bytes of text above which the size bound is checked before tokenizing (below, tokenizing costs nothing).
BIG_TEXT = 1 << 20
#: Fewest scored tokens a row's statistics are given on (their uncertainties mean little below).
MIN_TOKENS = 100


class CalibrationSpec(Frozen):
    """``[quality] calibration``: the text span calibrated schemes learn from
    (:mod:`qbench.quality.calibrate`); ``text`` default the evaluated text, ``chunk`` default
    ``quality.chunk``."""

    text: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    chunks: int = Field(gt=0, le=1 << 16)
    chunk: Optional[int] = Field(default=None, ge=16, le=1 << 17)
    first_chunk: int = Field(default=0, ge=0, le=1 << 20)


class QualitySpec(Frozen):
    """The validated ``[quality]`` table (see the module docstring)."""

    text: str = Field(min_length=1, max_length=4096)
    chunk: int = Field(default=512, ge=16, le=1 << 17)
    chunks: Optional[int] = Field(default=None, gt=0, le=1 << 20)
    reference: Literal["checkpoint", "float32", "float16", "bfloat16"] = "checkpoint"
    logprobs: Literal["float32", "float16"] = "float32"
    sensitivity: Literal["none", "role", "block", "unit"] = "none"
    tokenizer: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    lm_head: bool = False
    first_chunk: int = Field(default=0, ge=0, le=1 << 20)
    kv_cache: Literal["activation", "fp8"] = "activation"
    calibration: Optional[CalibrationSpec] = None

    def to_dict(self) -> dict:
        """The table as a result's scenario records it; ``first_chunk``, ``kv_cache`` and
        ``calibration`` only when set, so a file written before they existed (every span from chunk
        0, the cache at the activation dtype, no calibration) compares equal under ``--resume`` (and
        keys its reference as before)."""
        out = self.model_dump()
        if not out["first_chunk"]:
            del out["first_chunk"]
        if out["kv_cache"] == "activation":
            del out["kv_cache"]
        if out["calibration"] is None:
            del out["calibration"]
        return out


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
        hint = "" if quality.tokenizer is not None else "; or name one with [quality] tokenizer = \"path/tokenizer.json\""
        raise ConfigError(key, f"no tokenizer file {path} (the text is tokenized with the `tokenizers` library's "
                               f"tokenizer.json{hint})")
    return path


def model_config(model: ModelSource, source: str) -> StepModelConfig:
    """The model's config: the checkpoint's (opened once per process), else the preset's."""
    return open_named(model.checkpoint, source).config if model.checkpoint is not None else resolve(model, source)


def check_chunk(config: StepModelConfig, chunk: int, key: str) -> None:
    """A chunk of ``chunk`` tokens, run teacher-forced from position 0, within the model's positions:
    at most its ``sliding_window`` (qbench's forward attends the whole chunk) and its
    ``max_position_embeddings`` (positions beyond were never trained). ``key``: ``quality.chunk``, or
    ``quality.calibration.chunk`` (statistics collected there would be another model's).

    Raises:
        ConfigError: ``key``, the limit and the value."""
    if config.sliding_window is not None and chunk > config.sliding_window:
        what = "score" if key == "quality.chunk" else "collect the statistics of"
        raise ConfigError(key, f"longer than {config.title}'s sliding_window = {config.sliding_window} "
                               f"({config.model_type}): qbench's forward attends the whole chunk, so it would {what} "
                               f"another model; use chunk <= {config.sliding_window}, got {chunk}")
    if chunk > config.max_positions:
        raise ConfigError(key, f"longer than {config.title}'s max_position_embeddings = {config.max_positions}, "
                               f"got {chunk}")


def check(model: ModelSource, quality: QualitySpec, source: str) -> StepModelConfig:
    """The model of a quality scenario, with every input checked before anything is built: the
    checkpoint's tensors (:func:`qbench.model.checkpoint.open_named`), the tokenizer, the text
    (UTF-8, at least one chunk, enough scored tokens) and the chunk length within the model's
    positions. Torch-free.

    Raises:
        ConfigError: one line naming ``model.<key>`` or ``quality.<key>``, the file and the value.
    """
    if quality.kv_cache == "fp8" and quality.sensitivity != "none":  # its passes run without a cache
        raise ConfigError("quality.sensitivity", "the sensitivity passes run each part alone without a KV cache, so "
                                                 "beside kv_cache = \"fp8\" they would rank another model: rank with "
                                                 f"kv_cache = \"activation\" (or sensitivity = \"none\"), got "
                                                 f"{quality.sensitivity!r}")
    config = model_config(model, source)
    check_chunk(config, quality.chunk, "quality.chunk")
    need, size = needed_tokens(quality), text_file(quality, source).stat().st_size
    if need is not None and need > TOKENS_PER_BYTE * size > BIG_TEXT:  # a large text too short by far: refused
        # before tokenizing it (a small one is tokenized at once and told its exact count below)
        raise ConfigError("quality.chunks", f"{resolve_path(quality.text, source)} is {size} bytes: (first_chunk + "
                                            f"chunks) x chunk = {need} tokens is more than any tokenizer makes of it "
                                            f"(at most {TOKENS_PER_BYTE} a byte), got {quality.chunks}")
    ids = read_tokens(model, quality, source)
    whole = len(ids) // quality.chunk
    text = resolve_path(quality.text, source)
    first = quality.first_chunk
    if whole < 1:
        raise ConfigError("quality.text", f"{text} holds {len(ids)} tokens, fewer than one chunk of quality.chunk = "
                                          f"{quality.chunk}")
    if first and first + (quality.chunks or 1) > whole:
        need = (f"chunks {first}..{first + quality.chunks - 1} (first_chunk + chunks = {first + quality.chunks})"
                if quality.chunks else f"at least chunk {first}")
        raise ConfigError("quality.first_chunk", f"{text} holds {whole} whole chunks of {quality.chunk} tokens, the "
                                                 f"span needs {need}, got {first}")
    if quality.chunks is not None and quality.chunks > whole:
        raise ConfigError("quality.chunks", f"{text} holds {whole} whole chunks of {quality.chunk} tokens, got "
                                            f"{quality.chunks}")
    scored = span_chunks(quality, len(ids)) * scored_per_chunk(quality.chunk)
    if scored < MIN_TOKENS:
        raise ConfigError("quality.chunks", f"{scored} scored tokens, fewer than {MIN_TOKENS} (statistics need more: "
                                            f"a longer text, more chunks or longer chunks), got "
                                            f"{span_chunks(quality, len(ids))}")
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
               "model.kv_cache": "the chunks' KV cache is [quality] kv_cache (\"fp8\" or the activation dtype)",
               "model.attention": "the chunks run SDPA: the attention kernel is the step job's choice",
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
    and every recipe against the model and every linear a scheme builds of a shape it takes, the
    LM head as ``quality.lm_head`` says.

    Raises:
        ScenarioError: the key at fault and why."""
    config = quality_model(scenario)
    head = "scheme" if scenario.quality.lm_head else "float"
    recipes.check_entries(scenario, config, head, "quality.lm_head")
    recipes.check_shapes(scenario, config, head)  # a row has one model: a linear it cannot take is refused


def describe(scenario: Any) -> str:
    """The ``qbench check`` summary: ``model SmolLM2-135M, text wiki.test.raw, 64 chunks of 512 tokens``
    (no M: the chunks are teacher-forced)."""
    q = scenario.quality
    title = quality_model(scenario).title
    chunks = f"{q.chunks} chunk{'' if q.chunks == 1 else 's'}" if q.chunks else "every whole chunk"
    start = f" from chunk {q.first_chunk}" if q.first_chunk else ""
    notes = "" if scenario.model.checkpoint is None else \
        "".join(f"; note: {n}" for n in open_named(scenario.model.checkpoint, scenario.source).notes)
    return f"model {title}, text {q.text}, {chunks} of {q.chunk} tokens{start}{notes}"


def scored_per_chunk(chunk: int) -> int:
    """Tokens scored per chunk: the logits of positions ``chunk // 2 .. chunk - 2`` predict tokens
    ``chunk // 2 + 1 .. chunk - 1``, so every scored token has at least half a chunk of context
    (llama.cpp's ``perplexity`` convention: ``first = n_ctx / 2``)."""
    return chunk - 1 - chunk // 2


#: Bytes of text read (and tokenized) at first when a scenario uses a prefix of its text, per token
#: it needs; doubled until enough tokens are read. Project choice: a token is 3-5 bytes of English.
_BYTES_PER_TOKEN = 8
#: Tokens read beyond the ones used, so that the cut of a prefix (at a line end) cannot change them.
_MARGIN = 64


def needed_tokens(quality: QualitySpec) -> Optional[int]:
    """Tokens of the text a scenario reads (``(first_chunk + chunks) × chunk``: the span and the
    chunks before it), or None: every whole chunk."""
    return None if quality.chunks is None else (quality.first_chunk + quality.chunks) * quality.chunk


def span_chunks(quality: QualitySpec, tokens: int) -> int:
    """Chunks the scenario scores from a text of ``tokens`` token ids (:func:`read_tokens`):
    ``chunks``, else every whole chunk from ``first_chunk`` on."""
    return quality.chunks or tokens // quality.chunk - quality.first_chunk


def span(quality: QualitySpec, tokens: int) -> dict:
    """A row's ``span``: ``{"first_chunk", "chunks", "tokens"}`` (the tokens of the chunks used);
    chunks ``first_chunk .. first_chunk + chunks - 1`` of the text, so a calibration span and an
    evaluation span of one text are disjoint when their ranges are."""
    n = span_chunks(quality, tokens)
    return {"first_chunk": quality.first_chunk, "chunks": n, "tokens": n * quality.chunk}


def text_file(quality: QualitySpec, source: str) -> Path:
    """The text file, a regular file (a FIFO, a device such as ``/dev/zero`` or a folder refused:
    reading one would block or never end).

    Raises:
        ConfigError: ``quality.text``: missing or not a regular file."""
    path = resolve_path(quality.text, source)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError("quality.text", f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise ConfigError("quality.text", f"{path} is not a regular file (a FIFO, a device or a folder), got "
                                          f"{quality.text!r}")
    return path


def text_sha256(path: Path) -> str:
    """sha256 (hex) of the text file's bytes (hashlib.file_digest reads it in pieces)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


_TOKENS: dict[tuple, list[int]] = {}

#: The folder of :func:`read_tokens`' disk cache, under :func:`qbench.model.checkpoint.cache_dir`.
_TOKEN_CACHE = "tokens"


def _stamp(path: Path) -> list:
    return [str(path.resolve()), *file_stamp(path.stat()).values()]


def _token_cache(memo: tuple) -> Path:
    """The cache file of one (text, tokenizer, tokens needed): both files' path and
    :func:`~qbench.model.checkpoint.file_stamp` in its name, so an edited file misses."""
    key = hashlib.sha256(json.dumps(memo).encode()).hexdigest()[:32]
    return cache_dir() / _TOKEN_CACHE / f"{key}.npy"


def _cached_tokens(path: Path) -> Optional[list[int]]:
    """The cached ids, or None (a miss: tokenized again and rewritten) for a missing, unreadable,
    empty or malformed file (anything but a 1-D integer array)."""
    try:
        ids = np.load(path, allow_pickle=False)
    except Exception:  # OSError, ValueError, EOFError (an empty file), a corrupt header
        return None
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        return None
    return ids.tolist()


def _store_tokens(path: Path, ids: list[int]) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:  # written whole then renamed: a reader never sees half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.save(f, np.asarray(ids, dtype=np.int64), allow_pickle=False)
        os.replace(tmp, path)
    except OSError as exc:  # an unwritable cache costs a tokenization per process, nothing more
        log.info("token cache %s not written: %s", path.parent, exc)
        with contextlib.suppress(OSError):  # a half-written file is not left behind
            tmp.unlink(missing_ok=True)


def read_tokens(model: ModelSource, quality: QualitySpec, source: str) -> list[int]:
    """The token ids the scenario reads (the ``tokenizers`` library, no special tokens added): the
    whole text's when ``quality.chunks`` is not given, else a prefix holding at least
    ``(first_chunk + chunks) × chunk`` tokens (and every token of a shorter text), read and tokenized in growing
    pieces cut at a line end, so a large corpus costs what its used chunks cost. Remembered per
    process, and on disk (:func:`qbench.model.checkpoint.cache_dir`) by both files' (path, inode, size,
    mtime, ctime) and the tokens needed: a run's validation tokenizes, its workers read the ids.

    Raises:
        ConfigError: ``quality.text``: unreadable, not a regular file or not UTF-8;
            ``quality.tokenizer``: not a tokenizer."""
    path = text_file(quality, source)
    tok_path = tokenizer_file(model, quality, source)
    st = path.stat()
    need = needed_tokens(quality)
    memo = (*_stamp(path), *_stamp(tok_path), need)
    if memo in _TOKENS:
        return _TOKENS[memo]
    cache = _token_cache(memo)
    cached = _cached_tokens(cache)
    if cached is not None:
        _TOKENS[memo] = cached
        return cached
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tok_path))
    except ImportError:
        raise ConfigError("quality.tokenizer", "the `tokenizers` package is not installed (pip install tokenizers)") from None
    except Exception as exc:
        raise ConfigError("quality.tokenizer", f"{tok_path} is not a tokenizers tokenizer.json: "
                                               f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}") from None
    size = st.st_size if need is None else min(st.st_size, (need + _MARGIN) * _BYTES_PER_TOKEN)
    while True:
        try:
            with open(path, "rb") as f:
                raw = f.read(size)
        except OSError as exc:
            raise ConfigError("quality.text", f"cannot read {path}: {exc.strerror or exc}") from None
        whole = len(raw) >= st.st_size
        if not whole:  # a prefix: cut at its last line end (no token spans one in a text tokenizer)
            raw = raw[: raw.rfind(b"\n") + 1] or raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if whole or exc.start < len(raw) - 3:
                raise ConfigError("quality.text", f"{path} is not UTF-8 (byte {exc.start})") from None
            text = raw[: exc.start].decode("utf-8")  # a character cut by the prefix's end
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if whole or len(ids) >= need + _MARGIN:
            break
        size = min(st.st_size, size * 2)
    if need is not None:
        ids = ids[:need]
    _TOKENS[memo] = ids
    _store_tokens(cache, ids)
    return ids


def weights_label(scenario: Any, ckpt) -> str:
    """Where the weights come from, as a quality row records it (``ckpt``: the scenario's checkpoint, or None for
    seeded weights); torch-free, so a search's check can say it before anything runs."""
    if ckpt is None:
        return f"seeded: N(0, 1/K) linears, N(0, 1) embedding, seed {scenario.seed} (not a trained model)"
    return weight_source(ckpt)
