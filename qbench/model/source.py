"""The model-source part of a ``[model]`` table: which model a model job runs (torch-free).

::

    [model]
    checkpoint = "DIR"     # a Hugging Face folder, or a model id in the local Hugging Face cache
    # name = "llama3-8b"   # or a preset (seeded weights)

The step job's table (:class:`qbench.step.spec.ModelSpec`) extends it with its own keys (a
``config.json`` without weights, contexts, blocks, methods); the quality job's takes it as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from qbench.model.config import PRESETS, ConfigError, StepModelConfig, read_hf_config
from qbench.tables import Frozen


class ModelSource(Frozen):
    """Exactly one of ``name`` (a preset of :data:`qbench.model.config.PRESETS`) or ``checkpoint``
    (a Hugging Face folder, relative to the scenario file, or a model id in the local cache)."""

    name: Optional[str] = Field(default=None, min_length=1, max_length=200)
    checkpoint: Optional[str] = Field(default=None, min_length=1, max_length=4096)

    def to_dict(self) -> dict:
        data = self.model_dump()
        if self.checkpoint is None:
            data.pop("checkpoint")
        return data


def resolve(spec: Any, source: str) -> StepModelConfig:
    """The model configuration ``spec`` (a :class:`ModelSource`, or a table extending it with
    ``config``) names: a preset, the checkpoint's config.json, or the config.json at ``config``
    (relative to the folder of the scenario file ``source``).

    Raises:
        ConfigError: key ``model`` (not exactly one source), ``model.name`` / ``model.config`` /
            ``model.checkpoint`` / ``model.<source>.<config key>`` and the reason.
    """
    config = getattr(spec, "config", None)
    keys = ("name", "config", "checkpoint") if "config" in type(spec).model_fields else ("name", "checkpoint")
    given = [k for k in keys if getattr(spec, k) is not None]
    if len(given) != 1:
        wants = (f"'name' (a preset: {', '.join(PRESETS)}), 'config' (a Llama-family config.json) or 'checkpoint' "
                 "(a Hugging Face folder)" if "config" in keys else
                 f"'checkpoint' (a Hugging Face folder) or 'name' (a preset with seeded weights: {', '.join(PRESETS)})")
        got = ", ".join(f"{k}={getattr(spec, k)!r}" for k in keys)
        raise ConfigError("model", f"give exactly one of {wants}, got {got}")
    if spec.checkpoint is not None:
        from qbench.model import checkpoint  # torch-free: opened once per process

        return checkpoint.open_named(spec.checkpoint, source).config
    if spec.name is not None:
        if spec.name not in PRESETS:
            raise ConfigError("model.name", f"unknown model preset (known: {', '.join(PRESETS)}; or give "
                                            f"'config' = a Llama-family config.json), got {spec.name!r}")
        return PRESETS[spec.name]
    path = Path(config)
    if not path.is_absolute():
        path = Path(source).parent / path
    try:
        return read_hf_config(path)
    except ConfigError as exc:
        key = f"model.config.{exc.key}" if exc.key else "model.config"
        raise ConfigError(key, f"{exc.message} (in {path})") from None
