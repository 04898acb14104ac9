"""Llama-family model configurations: the presets ``qbench model`` knows, a ``tiny`` preset that
runs on a CPU in seconds, and any Llama-family Hugging Face ``config.json``. Torch-free.

A configuration holds what the decode step needs: hidden size, attention heads, KV heads (grouped-
query attention), head dim, FFN width, vocabulary, block count, RMSNorm epsilon, RoPE base and
scaling, the largest position, and whether the LM head shares the embedding. Values of the presets
are those of Meta's published ``config.json`` files (Llama-3-8B, Llama-3.1-8B, Llama-3.1-70B);
their linear shapes equal :data:`qbench.readers.model.PRESETS`, the layer view's shapes of the same
models (a test checks it).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

#: ``model_type`` values of a Hugging Face config read as Llama-family: the same block (RMSNorm,
#: GQA attention with RoPE, SiLU-gated MLP) as ``transformers``' LlamaForCausalLM; Qwen2 adds biases
#: on q/k/v (``Qwen2Attention``), Mistral's sliding window only matters beyond its width.
LLAMA_FAMILY = ("llama", "mistral", "qwen2")
#: Linear layers of one block, in the order they run (``transformers``' parameter names).
BLOCK_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def linear_name(block: int, role: str) -> str:
    """The ``transformers`` state-dict name of a block's linear weight:
    ``model.layers.3.self_attn.q_proj.weight``."""
    return f"model.layers.{block}.{_PARENT[role]}.{role}.weight"

#: RoPE scaling types the step implements (``transformers``' ``ROPE_INIT_FUNCTIONS`` names).
ROPE_TYPES = ("default", "llama3", "linear")


class ConfigError(ValueError):
    """A model configuration that cannot be used: ``"<key>: <what is wrong>, got <value>"``
    (the scenario adds its file and the ``model.`` prefix)."""

    def __init__(self, key: str, message: str):
        self.key, self.message = key, message
        super().__init__(f"{key}: {message}")


@dataclass(frozen=True)
class StepModelConfig:
    """One Llama-family model, as the decode step needs it.

    Attributes:
        name: the preset name or the config file's path.
        title: a human name (``Llama-3-8B``).
        hidden: hidden size (K of q/k/v/o/gate/up, N of o/down).
        heads: attention (query) heads.
        kv_heads: key/value heads (GQA: ``heads`` is a multiple of it).
        head_dim: per-head width; q is ``heads × head_dim`` wide, k and v ``kv_heads × head_dim``.
        ffn: intermediate size (N of gate/up, K of down).
        vocab: vocabulary size (N of the LM head).
        blocks: decoder blocks (``num_hidden_layers``).
        rms_eps: RMSNorm epsilon.
        rope_theta: RoPE base.
        rope_scaling: ``None`` or the config's ``rope_scaling`` table (``rope_type`` ``llama3`` or
            ``linear``).
        max_positions: ``max_position_embeddings``: the longest context the model is made for.
        tie_embeddings: the LM head's weight is the embedding (``tie_word_embeddings``).
        biased: the linear roles that carry a bias (Qwen2: q/k/v; ``attention_bias``: q/k/v/o;
            ``mlp_bias``: gate/up/down); both jobs read them from the checkpoint (zeros for seeded
            weights).
        model_type: the config's ``model_type``.
        source: where the values come from.
        bos: ``bos_token_id`` (an id of the vocabulary), or None: no BOS.
        sliding_window: the attention window of Mistral (Qwen2 with ``use_sliding_window``), or
            None: full attention. qbench's forward attends fully: a chunk or context beyond the
            window is refused (it would compute another model).
    """

    name: str
    title: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    blocks: int
    rms_eps: float
    rope_theta: float
    max_positions: int
    rope_scaling: Optional[dict] = None
    tie_embeddings: bool = False
    biased: tuple[str, ...] = ()
    model_type: str = "llama"
    source: str = ""
    bos: Optional[int] = None
    sliding_window: Optional[int] = None

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """Each linear layer of one block and the LM head: name -> (K, N) (in, out features)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.ffn), "up_proj": (self.hidden, self.ffn),
                "down_proj": (self.ffn, self.hidden), "lm_head": (self.hidden, self.vocab)}

    def block_linear_params(self) -> int:
        """Weights (elements) of one block's seven linear layers."""
        return sum(k * n for name, (k, n) in self.linear_shapes().items() if name != "lm_head")

    def kv_elements_per_position(self) -> int:
        """K and V elements one cached position holds in one block, for one sequence:
        2 × kv_heads × head_dim."""
        return 2 * self.kv_heads * self.head_dim

    def to_dict(self) -> dict:
        return asdict(self)


def _llama(name: str, title: str, *, hidden: int, heads: int, kv_heads: int, ffn: int, blocks: int,
           max_positions: int, rope_scaling: Optional[dict], source: str, vocab: int = 128256,
           rope_theta: float = 500000.0) -> StepModelConfig:
    return StepModelConfig(name=name, title=title, hidden=hidden, heads=heads, kv_heads=kv_heads,
                           head_dim=hidden // heads, ffn=ffn, vocab=vocab, blocks=blocks, rms_eps=1e-5,
                           rope_theta=rope_theta, max_positions=max_positions, rope_scaling=rope_scaling,
                           source=source)


_LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}

#: The step presets, by name. ``llama3-8b`` and ``llama3.1-70b`` are the models of
#: :data:`qbench.readers.model.PRESETS`; ``llama3.1-8b`` has Llama-3-8B's shapes with Llama 3.1's RoPE
#: scaling and 128k positions (Llama-3-8B itself is made for 8192); ``tiny`` is a 2-block model
#: whose widths are multiples of 128 (every group-size scheme can take it) that runs on a CPU.
PRESETS: dict[str, StepModelConfig] = {c.name: c for c in (
    _llama("llama3-8b", "Llama-3-8B", hidden=4096, heads=32, kv_heads=8, ffn=14336, blocks=32,
           max_positions=8192, rope_scaling=None,
           source="meta-llama/Meta-Llama-3-8B config.json"),
    _llama("llama3.1-8b", "Llama-3.1-8B", hidden=4096, heads=32, kv_heads=8, ffn=14336, blocks=32,
           max_positions=131072, rope_scaling=_LLAMA31_ROPE,
           source="meta-llama/Llama-3.1-8B config.json"),
    _llama("llama3.1-70b", "Llama-3.1-70B", hidden=8192, heads=64, kv_heads=8, ffn=28672, blocks=80,
           max_positions=131072, rope_scaling=_LLAMA31_ROPE,
           source="meta-llama/Llama-3.1-70B config.json"),
    StepModelConfig(name="tiny", title="tiny Llama (2 blocks, CPU)", hidden=256, heads=4, kv_heads=2,
                    head_dim=64, ffn=512, vocab=1024, blocks=2, rms_eps=1e-5, rope_theta=10000.0,
                    max_positions=4096, source="qbench: a Llama-architecture model for tests and CPUs"),
)}


def _get(data: dict, key: str, kind: type, *, default: Any = None, required: bool = True) -> Any:
    if key not in data:
        if required and default is None:
            raise ConfigError(key, "missing (a Llama config.json has it)")
        return default
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ConfigError(key, f"must be {kind.__name__}, got {value!r}"[:200])
    if kind is float and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    if kind in (int, float) and not value > 0:
        raise ConfigError(key, f"must be > 0, got {value!r}")
    return value


#: The keys each RoPE scaling type reads (``transformers``' ``_compute_linear_scaling_rope_parameters``
#: and ``_compute_llama3_parameters``), each a finite number > 0.
ROPE_KEYS = {"linear": ("factor",),
             "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def _check_rope_scaling(scaling: dict, kind: str, table: str = "rope_scaling") -> None:
    """Every key the RoPE type ``kind`` reads is in ``scaling``, a finite number > 0; errors name the
    config's own ``table`` (``rope_scaling``, or transformers 5's ``rope_parameters``)."""
    for key in ROPE_KEYS.get(kind, ()):
        if key not in scaling:
            raise ConfigError(f"{table}.{key}", f"missing (rope_type {kind!r} needs "
                                                f"{', '.join(ROPE_KEYS[kind])}), got none")
        try:
            _get(scaling, key, float)
        except ConfigError as exc:
            raise ConfigError(f"{table}.{key}", exc.message) from None


def _bos(data: dict, vocab: int) -> Optional[int]:
    """``bos_token_id``: None when absent or null (no BOS is put first), else an id of the
    vocabulary (a list, a negative id or one beyond the vocabulary refused: tensor indexing would
    wrap or fail in every row)."""
    bos = data.get("bos_token_id")
    if bos is None:
        return None
    if not isinstance(bos, int) or isinstance(bos, bool) or not 0 <= bos < vocab:
        raise ConfigError("bos_token_id", f"must be null or one token id in 0..{vocab - 1} (vocab_size = {vocab}; "
                                          f"qbench puts it first in each chunk), got {bos!r}"[:200])
    return bos


def _window(data: dict, model_type: str) -> Optional[int]:
    """The attention window the model's ``transformers`` class applies: Mistral's
    ``sliding_window``, Qwen2's when ``use_sliding_window`` is true; None when attention is full."""
    if model_type not in ("mistral", "qwen2") or (model_type == "qwen2" and not data.get("use_sliding_window")):
        return None
    if data.get("sliding_window") is None:
        return None
    return _get(data, "sliding_window", int)


def from_hf_config(data: Any, name: str) -> StepModelConfig:
    """A :class:`StepModelConfig` from a parsed Hugging Face ``config.json``.

    Raises:
        ConfigError: not a Llama-family config (``model_type`` not in :data:`LLAMA_FAMILY`, an
            activation other than SiLU, a RoPE scaling other than
            :data:`ROPE_TYPES`), or a missing or ill-typed key.
    """
    if not isinstance(data, dict):
        raise ConfigError("", f"a config.json is a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type not in LLAMA_FAMILY:
        raise ConfigError("model_type", f"not a Llama-family model (qbench's step is LlamaForCausalLM's: "
                                        f"{', '.join(LLAMA_FAMILY)}), got {model_type!r}")
    biased: tuple[str, ...] = ("q_proj", "k_proj", "v_proj") if model_type == "qwen2" else ()
    if data.get("attention_bias"):
        biased = ("q_proj", "k_proj", "v_proj", "o_proj")
    if data.get("mlp_bias"):
        biased += ("gate_proj", "up_proj", "down_proj")
    act = data.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError("hidden_act", f"the Llama step uses SiLU, got {act!r}")
    hidden = _get(data, "hidden_size", int)
    heads = _get(data, "num_attention_heads", int)
    kv_heads = _get(data, "num_key_value_heads", int, default=heads, required=False)
    head_dim = data.get("head_dim") or hidden // heads
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ConfigError("head_dim", f"must be an even integer > 0, got {head_dim!r}")
    if heads % kv_heads:
        raise ConfigError("num_key_value_heads", f"must divide num_attention_heads={heads}, got {kv_heads}")
    params = data.get("rope_parameters")  # transformers 5 writes RoPE here, often without the top-level keys
    if isinstance(params, dict):
        if "rope_theta" in data and "rope_theta" in params and data["rope_theta"] != params["rope_theta"]:
            raise ConfigError("rope_theta", f"{data['rope_theta']!r} at the top level, rope_parameters.rope_theta = "
                                            f"{params['rope_theta']!r}: transformers 5 reads rope_parameters, earlier "
                                            f"versions the top level; qbench refuses the conflict (make them equal)"[:300])
        if "rope_theta" not in data and "rope_theta" in params:
            data = {**data, "rope_theta": params["rope_theta"]}
    table = "rope_scaling"  # the table a RoPE error names: the one the config wrote
    if isinstance(params, dict) and data.get("rope_scaling") is None and params.get("rope_type", "default") != "default":
        data, table = {**data, "rope_scaling": {k: v for k, v in params.items() if k != "rope_theta"}}, "rope_parameters"
    scaling = data.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise ConfigError("rope_scaling", f"must be a table or null, got {scaling!r}"[:200])
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in ROPE_TYPES:
            raise ConfigError(f"{table}.rope_type", f"the step implements {', '.join(ROPE_TYPES)}, got {kind!r}")
        scaling = {**scaling, "rope_type": kind}
        _check_rope_scaling(scaling, kind, table)
        if kind == "default":
            scaling = None
    vocab = _get(data, "vocab_size", int)
    return StepModelConfig(
        name=name, title=str(data.get("_name_or_path") or Path(name).parent.name or name),
        hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        ffn=_get(data, "intermediate_size", int), vocab=vocab,
        blocks=_get(data, "num_hidden_layers", int), rms_eps=_get(data, "rms_norm_eps", float, default=1e-6, required=False),
        rope_theta=_get(data, "rope_theta", float, default=10000.0, required=False),
        max_positions=_get(data, "max_position_embeddings", int, default=2048, required=False),
        rope_scaling=scaling, tie_embeddings=bool(data.get("tie_word_embeddings", False)), biased=biased,
        model_type=model_type, source=name, bos=_bos(data, vocab), sliding_window=_window(data, model_type))


def read_hf_json(path: str | Path) -> tuple[bytes, dict]:
    """The bytes of the ``config.json`` at ``path`` (at most 1 MiB) and their JSON value.

    Raises:
        ConfigError: unreadable, not JSON or too large.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read((1 << 20) + 1)
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > 1 << 20:
        raise ConfigError("", f"{path} is larger than 1 MiB: not a config.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError("", f"{path} is not JSON: {str(exc).splitlines()[0][:120]}") from None
    return raw, data


def read_hf_config(path: str | Path) -> StepModelConfig:
    """:func:`from_hf_config` of the JSON file at ``path`` (:func:`read_hf_json`).

    Raises:
        ConfigError: unreadable, not JSON, too large, or not a Llama-family config.
    """
    return from_hf_config(read_hf_json(path)[1], str(path))
