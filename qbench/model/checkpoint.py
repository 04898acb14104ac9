"""A Hugging Face checkpoint folder, read lazily: ``config.json``, ``model.safetensors`` or a sharded
``model.safetensors.index.json``, ``tokenizer.json``.

Everything here but :meth:`Checkpoint.tensor` is torch-free: the tensors' names, dtypes and shapes
come from the safetensors headers (an 8-byte little-endian length, then a JSON table: the
safetensors format spec), so a scenario naming a checkpoint is checked (every tensor the model
needs present, of its shape and a float dtype; every shard the index names present) before
anything is built or measured. Tensors are read one at a time with ``safetensors.safe_open``
(memory-mapped), so a model is built block by block without holding the checkpoint in memory.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Optional

from qbench.model.config import BLOCK_LINEARS, ConfigError, StepModelConfig, linear_name, read_hf_config

INDEX, SINGLE, CONFIG, TOKENIZER = "model.safetensors.index.json", "model.safetensors", "config.json", "tokenizer.json"
#: safetensors dtype names of float tensors, and their bytes per element (safetensors format spec).
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
#: safetensors dtype name -> torch dtype name.
TORCH_DTYPE = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
#: Largest safetensors header read (bytes): the format caps it at 100 MB.
MAX_HEADER = 100_000_000


def resolve_folder(value: str, source: str) -> Path:
    """The checkpoint folder ``value`` names: a folder (relative to the folder of the scenario file
    ``source``), else a model id already in the local Hugging Face cache (``org/name``; nothing is
    downloaded).

    Raises:
        ConfigError: key ``model.checkpoint``: neither a folder nor a cached model id.
    """
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path(source).parent / path
    if path.is_dir():
        return path
    fetch = "qbench downloads nothing; data/README.md says how to fetch the models the shipped scenarios name"
    if value.count("/") == 1 and not value.startswith((".", "/", "~")):
        cached = _hf_cache(value)
        if cached is not None:
            return cached
        raise ConfigError("model.checkpoint", f"no folder {path} and no model {value!r} in the local Hugging Face cache "
                                              f"({fetch}), got {value!r}")
    raise ConfigError("model.checkpoint", f"no such folder: {path} (a relative path is read from the scenario file's "
                                          f"folder; {fetch}), got {value!r}")


def _hf_cache(repo_id: str) -> Optional[Path]:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or an id the hub refuses: not found either way
        return None


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file: tensor name -> ``{"dtype", "shape", "data_offsets"}``
    (``__metadata__`` dropped).

    Raises:
        ConfigError: unreadable, or not a safetensors file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise ConfigError("", f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER:
                raise ConfigError("", f"{path}: not a safetensors file (header of {n} bytes)")
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError):
        raise ConfigError("", f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ConfigError("", f"{path}: not a safetensors file")
    header.pop("__metadata__", None)
    return header


def expected_shapes(config: StepModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama-family checkpoint of ``config`` holds, by ``transformers`` state-dict
    name -> shape (weights ``[N, K]``, biases ``[N]``); ``lm_head.weight`` only when the head is not
    tied to the embedding."""
    h, shapes = config.hidden, config.linear_shapes()
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab, h), "model.norm.weight": (h,)}
    for b in range(config.blocks):
        out[f"model.layers.{b}.input_layernorm.weight"] = (h,)
        out[f"model.layers.{b}.post_attention_layernorm.weight"] = (h,)
        for role in BLOCK_LINEARS:
            k, n = shapes[role]
            out[linear_name(b, role)] = (n, k)
            if role in config.biased:
                out[linear_name(b, role).removesuffix("weight") + "bias"] = (n,)
    if not config.tie_embeddings:
        out["lm_head.weight"] = (config.vocab, h)
    return out


class Checkpoint:
    """A checked Hugging Face Llama-family folder.

    Attributes:
        folder: the folder.
        config: its ``config.json`` as :class:`qbench.model.config.StepModelConfig`.
        files: tensor name -> the safetensors file holding it.
        dtypes: tensor name -> safetensors dtype (``BF16``, ``F32``, ...).
        dtype: the torch dtype name of the linear weights (the checkpoint's own dtype).
        stored_bytes: bytes of the tensors the model uses, as stored.
    """

    def __init__(self, folder: Path, config: StepModelConfig, files: dict[str, Path], dtypes: dict[str, str],
                 dtype: str, stored_bytes: int):
        self.folder, self.config, self.files, self.dtypes = folder, config, files, dtypes
        self.dtype, self.stored_bytes = dtype, stored_bytes

    @property
    def tokenizer_path(self) -> Path:
        return self.folder / TOKENIZER

    def tensor(self, name: str, device: str = "cpu"):
        """Tensor ``name`` as stored (its own dtype), read from its file onto ``device``."""
        from safetensors import safe_open

        with safe_open(str(self.files[name]), framework="pt", device=str(device)) as f:
            return f.get_tensor(name)

    def bias(self, block: int, role: str, device: str = "cpu"):
        """The bias of a block's linear ``role``, or None when the model has none there."""
        if role not in self.config.biased:
            return None
        return self.tensor(linear_name(block, role).removesuffix("weight") + "bias", device)


class TensorMap:
    """The checkpoint's tensors as a read-only mapping (name -> tensor read on first access, on
    ``device``): what :class:`qbench.model.llama.Weights` takes as its state dict, so the decode step
    runs on the checkpoint's own weights."""

    def __init__(self, checkpoint: Checkpoint, device: str = "cpu"):
        self.checkpoint, self.device = checkpoint, str(device)

    def __contains__(self, name: object) -> bool:
        return name in self.checkpoint.files

    def __getitem__(self, name: str):
        if name not in self.checkpoint.files:
            raise KeyError(name)
        return self.checkpoint.tensor(name, self.device)


def weight_source(checkpoint: Checkpoint) -> str:
    """How a row names checkpoint weights: ``checkpoint DIR (bfloat16)``."""
    return f"checkpoint {checkpoint.folder} ({checkpoint.dtype})"


def open_checkpoint(folder: Path, key: str = "model.checkpoint") -> Checkpoint:
    """Read and check the folder's config, index and headers (torch-free).

    Raises:
        ConfigError: one line naming ``key`` (and the sub-key: ``config.<key>``, ``index``, a tensor
            name) and the file and value at fault: a config outside the Llama family, an index
            naming a missing shard, no safetensors file, a tensor missing, of another shape or not
            a float dtype.
    """
    try:
        config = read_hf_config(folder / CONFIG)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.key}" if exc.key else key, f"{exc.message} (in {folder / CONFIG})") from None
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise ConfigError(f"{key}.index", f"{index} has no 'weight_map' table") from None
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            if not (folder / shard).is_file():
                raise ConfigError(f"{key}.index.weight_map", f"{index} names shard {shard!r}, which is not in {folder}")
    elif (folder / SINGLE).is_file():
        shards = [SINGLE]
    else:
        raise ConfigError(key, f"no {SINGLE} and no {INDEX} in {folder}")
    files: dict[str, Path] = {}
    headers: dict[str, dict] = {}
    for shard in shards:
        try:
            header = read_header(folder / shard)
        except ConfigError as exc:
            raise ConfigError(key, exc.message) from None
        for name, info in header.items():
            files[name], headers[name] = folder / shard, info
    dtypes, stored = {}, 0
    for name, shape in expected_shapes(config).items():
        if name not in headers:
            raise ConfigError(f"{key}.{name}", f"missing from {folder} (a {config.model_type} checkpoint of "
                                               f"{config.blocks} blocks holds it)")
        info = headers[name]
        got = tuple(info.get("shape", ()))
        if got != shape:
            raise ConfigError(f"{key}.{name}", f"shape {list(got)} in {files[name]}, config.json says {list(shape)}")
        if info.get("dtype") not in FLOAT_DTYPES:
            raise ConfigError(f"{key}.{name}", f"dtype {info.get('dtype')!r} in {files[name]}: a float dtype "
                                               f"({', '.join(FLOAT_DTYPES)}) is needed")
        dtypes[name] = info["dtype"]
        n = 1
        for d in shape:
            n *= d
        stored += n * FLOAT_DTYPES[info["dtype"]]
    dtype = TORCH_DTYPE[dtypes[linear_name(0, "q_proj")]]
    return Checkpoint(folder, config, files, dtypes, dtype, stored)


def of_model(model, source: str) -> Optional[Checkpoint]:
    """The checkpoint a ``[model]`` table names (``model.checkpoint``, relative to the scenario file
    ``source``), opened and checked; None for a preset or a config (seeded weights)."""
    if model.checkpoint is None:
        return None
    return open_checkpoint(resolve_folder(model.checkpoint, source))
