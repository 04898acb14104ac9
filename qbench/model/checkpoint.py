"""A Hugging Face checkpoint folder, opened once per process: ``config.json``, ``model.safetensors``
or a sharded ``model.safetensors.index.json``, ``tokenizer.json``; and its identity by content.

Torch-free except :meth:`Checkpoint.tensor`. The tensors' names, dtypes and shapes come from
``safetensors.safe_open`` (lazily: nothing but the header is read), which also refuses a truncated
or malformed file, so a scenario naming a checkpoint is checked before anything is built or
measured: every tensor the model needs present, of its shape and a float dtype; every shard the
index names present; every float tensor finite. Tensors are read one at a time (memory-mapped), so
a model is built block by block without holding the checkpoint in memory.

**Identity** (:func:`identity`): sha256 over the canonical ``config.json`` (keys sorted, no
spaces), every tensor's name, dtype and shape, and the sha256 of each safetensors file's tensor
bytes. Two copies of the same checkpoint at two paths have one identity; a changed byte gives
another. Reading every tensor byte for the digest is also where non-finite weights are found; the
digest of a file is cached on disk by (path, size, modification time) in :func:`cache_dir`, so a
checkpoint is read in full once, not once per run or worker.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from qbench.model.config import BLOCK_LINEARS, ConfigError, StepModelConfig, from_hf_config, linear_name, read_hf_json

INDEX, SINGLE, CONFIG, TOKENIZER = "model.safetensors.index.json", "model.safetensors", "config.json", "tokenizer.json"
#: safetensors dtype names of float tensors, and their bytes per element (safetensors format spec).
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
#: safetensors dtype name -> torch dtype name.
TORCH_DTYPE = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
#: Bytes per element of the other safetensors dtypes (hashed, never checked for finiteness).
OTHER_DTYPES = {"I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                "F8_E4M3": 1, "F8_E5M2": 1}
#: Float dtype -> (unsigned integer width in bytes, exponent mask, mantissa mask): all exponent bits
#: set is Inf (mantissa 0) or NaN (IEEE 754; bfloat16 is float32's upper half).
_FLOAT_BITS = {"F64": (8, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF), "F32": (4, 0x7F800000, 0x007FFFFF),
               "F16": (2, 0x7C00, 0x03FF), "BF16": (2, 0x7F80, 0x007F)}
#: Bytes read at once while digesting a tensor.
_READ = 1 << 26
#: The environment variable naming the folder of qbench's caches (tests point it at a tmp folder).
CACHE_ENV = "QBENCH_CACHE_DIR"
_DIGESTS = "checkpoint-digests.json"

log = logging.getLogger("qbench.model")


def cache_dir() -> Path:
    """Where qbench keeps its caches: ``$QBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/qbench``, else
    ``~/.cache/qbench``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qbench"


_RESOLVED: dict[tuple[str, str], Path] = {}


def resolve_folder(value: str, source: str) -> Path:
    """The checkpoint folder ``value`` names, absolute and normalized: a folder (relative to the
    folder of the scenario file ``source``), else a model id already in the local Hugging Face
    cache (``org/name``; nothing is downloaded). Found folders are remembered for the process.

    Raises:
        ConfigError: key ``model.checkpoint``: neither a folder nor a cached model id.
    """
    key = (value, str(Path(source).parent))
    if key in _RESOLVED:
        return _RESOLVED[key]
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path(source).parent / path
    fetch = "qbench downloads nothing; data/README.md says how to fetch the models the shipped scenarios name"
    if path.is_dir():
        found = path.resolve()
    elif value.count("/") == 1 and not value.startswith((".", "/", "~")):
        cached = _hf_cache(value)
        if cached is None:
            raise ConfigError("model.checkpoint", f"no folder {path} (a relative path is read from the scenario file's "
                                                  f"folder) and no model {value!r} in the local Hugging Face cache "
                                                  f"({fetch}), got {value!r}")
        found = cached.resolve()
    else:
        raise ConfigError("model.checkpoint", f"no such folder: {path} (a relative path is read from the scenario "
                                              f"file's folder; {fetch}), got {value!r}")
    _RESOLVED[key] = found
    return found


def _hf_cache(repo_id: str) -> Optional[Path]:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or an id the hub refuses: not found either way
        return None


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its file's header states it."""

    file: Path
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * {**FLOAT_DTYPES, **OTHER_DTYPES}.get(self.dtype, 0)


def read_headers(path: Path, key: str = "model.checkpoint") -> list[tuple[str, TensorInfo]]:
    """The tensors of one safetensors file in file order (``safe_open``: names, dtypes and shapes,
    the file's coverage checked; no tensor byte read).

    Raises:
        ConfigError: ``key``: unreadable, truncated or malformed (safetensors' own reason).
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            out = []
            for name in f.offset_keys():
                part = f.get_slice(name)
                out.append((name, TensorInfo(path, part.get_dtype(), tuple(part.get_shape()))))
            return out
    except SafetensorError as exc:
        why = " ".join(str(exc).split()).removeprefix("Error while deserializing header: ")
        raise ConfigError(key, f"{path} is not a readable safetensors file ({why})") from None
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None


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


@dataclass
class Checkpoint:
    """A checked Hugging Face Llama-family folder.

    Attributes:
        folder: the folder (absolute, normalized).
        config: its ``config.json`` as :class:`qbench.model.config.StepModelConfig`.
        files: tensor name -> the safetensors file holding it.
        dtypes: tensor name -> safetensors dtype (``BF16``, ``F32``, ...).
        dtype: the checkpoint's own dtype (torch name): config.json's ``dtype`` when its tensors
            hold it, else their dominant one (:func:`_dtype`).
        stored_bytes: bytes of the tensors the model uses, as stored.
        bos: ``bos_token_id`` of ``config.json``, or None.
        identity: :func:`identity`'s sha256 (hex).
        notes: what a user should know of how it is read (the stored head used although
            ``tie_word_embeddings`` is true, mixed dtypes, blocks beyond ``num_hidden_layers``,
            no BOS): ``qbench check`` says them.
    """

    folder: Path
    config: StepModelConfig
    files: dict[str, Path]
    dtypes: dict[str, str]
    dtype: str
    stored_bytes: int
    bos: Optional[int] = None
    identity: str = ""
    notes: tuple[str, ...] = ()

    @property
    def tokenizer_path(self) -> Path:
        return self.folder / TOKENIZER

    def tensor(self, name: str, device: str = "cpu"):
        """Tensor ``name`` as stored (its own dtype), read from its file onto ``device`` (torch)."""
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
    ``device``): what :class:`qbench.model.llama.Weights` takes as its state dict, so a model runs
    on the checkpoint's own weights."""

    def __init__(self, checkpoint: Checkpoint, device: str = "cpu"):
        self.checkpoint, self.device = checkpoint, str(device)

    def __contains__(self, name: object) -> bool:
        return name in self.checkpoint.files

    def __getitem__(self, name: str):
        if name not in self.checkpoint.files:
            raise KeyError(name)
        return self.checkpoint.tensor(name, self.device)


def weight_source(checkpoint: Checkpoint) -> str:
    """How a row names checkpoint weights: ``checkpoint DIR (bfloat16)``, DIR absolute and normalized
    (a label: :attr:`Checkpoint.identity` says which weights they are)."""
    return f"checkpoint {checkpoint.folder} ({checkpoint.dtype})"


def _weight_map(folder: Path, key: str) -> dict:
    """The index's ``weight_map`` (tensor name -> shard file name)."""
    index = folder / INDEX
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        raise ConfigError(f"{key}.index", f"{index} has no 'weight_map' table") from None
    return weight_map


def _shard(folder: Path, shard: object, key: str) -> Path:
    if not isinstance(shard, str) or Path(shard).name != shard or shard in (".", "..") or not (folder / shard).is_file():
        raise ConfigError(f"{key}.index.weight_map", f"{folder / INDEX} names shard {shard!r}, which is not in {folder}")
    return folder / shard


def _shards(folder: Path, key: str) -> list[str]:
    """The safetensors files of the folder: ``model.safetensors``, else the index's shards. The
    single file first, as transformers loads it (``modeling_utils``: SAFE_WEIGHTS_NAME before
    SAFE_WEIGHTS_INDEX_NAME), so a folder holding both is read as transformers reads it."""
    if (folder / SINGLE).is_file():
        return [SINGLE]
    if (folder / INDEX).is_file():
        named = list(_weight_map(folder, key).values())
        for shard in named:  # each a file name of the folder (a number, a path outside it refused)
            _shard(folder, shard, key)
        return sorted(set(named))
    raise ConfigError(key, f"no {SINGLE} and no {INDEX} in {folder}")


def tensor_file(folder: Path, name: str, key: str = "weight.path") -> Path:
    """The safetensors file of the checkpoint ``folder`` holding tensor ``name``: ``model.safetensors``,
    else the shard the index names (the order transformers loads them in; no config is read).

    Raises:
        ConfigError: ``key``: no index and no single file, an unreadable index, a tensor the index
            does not list, or a shard that is not a file of the folder.
    """
    folder = Path(folder)
    if (folder / SINGLE).is_file():
        return folder / SINGLE
    if (folder / INDEX).is_file():
        weight_map = _weight_map(folder, key)
        if name not in weight_map:
            raise ConfigError(key, f"tensor {name!r} is not in {folder / INDEX}")
        return _shard(folder, weight_map[name], key)
    raise ConfigError(key, f"no {SINGLE} and no {INDEX} in {folder}")


def _signature(folder: Path) -> tuple:
    """(name, inode, size, mtime, ctime) of the folder's config, index and safetensors files: a change to any of
    them opens the checkpoint again."""
    out = []
    for path in sorted([folder / CONFIG, folder / INDEX, *folder.glob("*.safetensors")]):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((path.name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


_OPENED: dict[tuple, Checkpoint] = {}


def open_checkpoint(folder: Path, key: str = "model.checkpoint") -> Checkpoint:
    """The checked checkpoint in ``folder`` (torch-free), opened once per process (again when one of
    its files changes).

    Raises:
        ConfigError: one line naming ``key`` (and the sub-key: ``config.<key>``, ``index``, a tensor
            name) and the file and value at fault: a config outside the Llama family, an index
            naming a missing shard, no safetensors file, a truncated or malformed one, a tensor
            missing, of another shape or not a float dtype, a tensor holding NaN or Inf.
    """
    folder = Path(folder).resolve()
    memo = (str(folder), key, _signature(folder))
    if memo in _OPENED:
        return _OPENED[memo]
    try:
        raw, data = read_hf_json(folder / CONFIG)
        config = from_hf_config(data, str(folder / CONFIG))
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.key}" if exc.key else key, f"{exc.message} (in {folder / CONFIG})") from None
    shards = _shards(folder, key)
    headers: dict[str, TensorInfo] = {}
    for shard in shards:
        headers.update(read_headers(folder / shard, key))
    notes: list[str] = []
    held = _blocks_held(headers)
    if held < config.blocks:  # before the table of every expected tensor (num_hidden_layers may be huge)
        raise ConfigError(f"{key}.config.num_hidden_layers", f"{config.blocks} in {folder / CONFIG}, but {folder} holds "
                                                             f"the tensors of {held} blocks (model.layers.0 .. {held - 1})")
    if held > config.blocks:
        notes.append(f"{folder} holds the tensors of {held} blocks; num_hidden_layers = {config.blocks} uses the first "
                     f"{config.blocks} (as transformers does), the rest are not read")
    if config.tie_embeddings and "lm_head.weight" in headers:
        config = replace(config, tie_embeddings=False)
        notes.append("tie_word_embeddings is true but lm_head.weight is stored: the stored head is used, as "
                     "transformers 5 does (it does not tie them)")
    if config.bos is None:
        notes.append("config.json has no bos_token_id: no BOS is put first in a chunk")
    dtypes, stored = {}, 0
    for name, shape in expected_shapes(config).items():
        if name not in headers:
            raise ConfigError(f"{key}.{name}", f"missing from {folder} (a {config.model_type} checkpoint of "
                                               f"{config.blocks} blocks holds it)")
        info = headers[name]
        if info.shape != shape:
            raise ConfigError(f"{key}.{name}", f"shape {list(info.shape)} in {info.file}, config.json says {list(shape)}")
        if info.dtype not in FLOAT_DTYPES:
            raise ConfigError(f"{key}.{name}", f"dtype {info.dtype!r} in {info.file}: a float dtype "
                                               f"({', '.join(FLOAT_DTYPES)}) is needed")
        dtypes[name] = info.dtype
        stored += info.nbytes
    digests = [file_digest(folder / shard, key) for shard in shards]
    dtype, mixed = _dtype(data, {n: headers[n] for n in dtypes})
    if mixed:
        notes.append(mixed)
    ckpt = Checkpoint(folder=folder, config=config, files={n: i.file for n, i in headers.items()}, dtypes=dtypes,
                      dtype=dtype, stored_bytes=stored, bos=config.bos, identity=_identity(data, headers, digests),
                      notes=tuple(notes))
    _OPENED[memo] = ckpt
    return ckpt


def _blocks_held(headers: dict[str, "TensorInfo"]) -> int:
    """Blocks whose tensors the headers hold: one more than the largest ``model.layers.<b>.`` index."""
    found = -1
    for name in headers:
        if name.startswith("model.layers."):
            index = name.split(".", 3)[2]
            if index.isdigit():
                found = max(found, int(index))
    return found + 1


def _dtype(data: dict, used: dict[str, "TensorInfo"]) -> tuple[str, str]:
    """The checkpoint's dtype (the torch name) and a note when its tensors' dtypes are mixed (else
    ``""``): config.json's ``dtype`` (``torch_dtype`` before transformers 5) when it names a float
    dtype the tensors hold, else the dtype holding most of the used tensors' elements."""
    elements: dict[str, int] = {}
    for info in used.values():
        n = 1
        for d in info.shape:
            n *= d
        elements[TORCH_DTYPE[info.dtype]] = elements.get(TORCH_DTYPE[info.dtype], 0) + n
    named = data.get("dtype", data.get("torch_dtype"))
    dominant = max(elements, key=lambda d: elements[d])
    dtype = named if isinstance(named, str) and named in elements else dominant
    if len(elements) == 1:
        return dtype, ""
    tally = {d: sum(1 for i in used.values() if TORCH_DTYPE[i.dtype] == d) for d in elements}
    counts = ", ".join(f"{tally[d]} tensor{'' if tally[d] == 1 else 's'} {d}"
                       for d in sorted(elements, key=lambda d: -elements[d]))
    why = "config.json's dtype" if dtype == named else "most of the weights' elements"
    return dtype, f"the tensors' dtypes are mixed ({counts}): the checkpoint's dtype is taken as {dtype} ({why})"


def _identity(config: dict, headers: dict[str, TensorInfo], digests: list[str]) -> str:
    doc = {"config": config, "tensors": sorted([name, i.dtype, list(i.shape)] for name, i in headers.items()),
           "data": digests}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def identity(folder: Path) -> str:
    """The checkpoint's identity by content: sha256 over its canonical ``config.json``, every
    tensor's name, dtype and shape, and each safetensors file's tensor-byte digest
    (:func:`file_digest`). The same bytes at two paths have one identity.

    Raises:
        ConfigError: what :func:`open_checkpoint` raises.
    """
    return open_checkpoint(folder).identity


def _load_digests() -> dict:
    try:
        data = json.loads((cache_dir() / _DIGESTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _store_digest(path: Path, record: dict) -> None:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        data = _load_digests()
        data[str(path)] = record
        tmp = folder / f"{_DIGESTS}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True), encoding="utf-8")
        os.replace(tmp, folder / _DIGESTS)
    except OSError as exc:  # a cache that cannot be written costs a re-read next time, nothing more
        log.info("checkpoint digest cache %s not written: %s", folder, exc)


def file_stamp(st: os.stat_result) -> dict:
    """What says a file is unchanged since a cache entry was made: inode, size, mtime and ctime (the
    kernel's: ``utime`` cannot set it, so an edit that restores the size and the mtime still shows)."""
    return {"ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def file_digest(path: Path, key: str = "model.checkpoint") -> str:
    """sha256 (hex) of the tensor bytes of one safetensors file (file order), every float tensor
    checked finite on the way; cached on disk by (path, inode, size, mtime, ctime): a file unchanged
    since is not read again (a cached file was finite). The ctime is the kernel's (``utime`` cannot set
    it), so an edit that restores the size and the mtime still reads the file again.

    Raises:
        ConfigError: ``key``: a tensor holding NaN or Inf (named), or a file safetensors refuses.
    """
    path = Path(path).resolve()
    st = path.stat()
    cached = _load_digests().get(str(path))
    stamp = file_stamp(st)
    if isinstance(cached, dict) and all(cached.get(k) == v for k, v in stamp.items()):
        return str(cached["sha256"])
    tensors = read_headers(path, key)
    h = hashlib.sha256()
    import numpy as np

    with open(path, "rb") as f:
        f.seek(st.st_size - sum(info.nbytes for _, info in tensors))  # the data fills the file's end (safe_open checked)
        for name, info in tensors:
            bits = _FLOAT_BITS.get(info.dtype)
            left, nan, inf = info.nbytes, 0, 0
            while left:
                part = f.read(min(left, _READ))
                if not part:
                    raise ConfigError(key, f"{path} is not a readable safetensors file (it ends inside tensor {name})")
                left -= len(part)
                h.update(part)
                if bits is not None:
                    width, exp, mant = bits
                    x = np.frombuffer(part, dtype=f"<u{width}")
                    special = (x & exp) == exp
                    if special.any():
                        is_nan = special & ((x & mant) != 0)
                        nan, inf = nan + int(is_nan.sum()), inf + int((special & ~is_nan).sum())
            if nan or inf:
                what = "NaN" if nan else "Inf"
                count = f"{nan} NaN, {inf} Inf" if nan and inf else f"{nan or inf}"
                raise ConfigError(key, f"tensor {name} holds {what} ({count} of {info.nbytes // bits[0]} values, in {path})")
    digest = h.hexdigest()
    _store_digest(path, {**stamp, "sha256": digest})
    return digest


def open_named(value: str, source: str, key: str = "model.checkpoint") -> Checkpoint:
    """The checkpoint a scenario names (``model.checkpoint``: a folder relative to the scenario file
    ``source``, or a cached model id; :func:`resolve_folder`), opened and checked once per process
    (:func:`open_checkpoint`): its config, lazy tensors, tokenizer path, BOS and identity.

    Raises:
        ConfigError: what :func:`resolve_folder` and :func:`open_checkpoint` raise.
    """
    return open_checkpoint(resolve_folder(value, source), key)


def of_model(model, source: str) -> Optional[Checkpoint]:
    """The checkpoint a ``[model]`` table names (:func:`open_named`); None for a preset or a
    config (seeded weights)."""
    if model.checkpoint is None:
        return None
    return open_named(model.checkpoint, source)
