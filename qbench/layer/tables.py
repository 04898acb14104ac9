"""The layer job's scenario keys: ``m``, ``[layer]``, ``[weight]``, ``[inputs]`` and ``[timing] methods``,
their checks and its ``qbench check`` line. Torch-free.

::

    m = [1, 16]                       # M values: rows = batch x tokens
    [layer]
    in_features = 4096                # K
    out_features = 4096               # N
    [weight]
    source = "random"                 # or student-t, outlier-channels, safetensors, hf-checkpoint
    [inputs]
    outlier_fraction = 0.0
    [timing]
    methods = ["cold", "warm"]        # the layer timing methods (default: all)
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from qbench.layer import weight as weights
from qbench.tables import Frozen, MTables, ScenarioError, TimingSpec
from qbench.timing import registry

#: The layer timing methods a scenario's ``timing.methods`` may list (:mod:`qbench.timing.registry`).
METHODS = registry.SCENARIO_METHODS


class LayerSpec(Frozen):
    """The linear layer: ``in_features`` = K, ``out_features`` = N, optional bias."""

    in_features: int = Field(default=4096, gt=0, le=1 << 17)
    out_features: int = Field(default=4096, gt=0, le=1 << 17)
    bias: bool = False


class LayerTiming(TimingSpec):
    """The layer job's ``[timing]``: the shared knobs plus the layer timing methods to run."""

    methods: tuple[Literal[METHODS], ...] = Field(default=METHODS, min_length=1)

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("timing methods must be distinct")
        return value


class InputsSpec(Frozen):
    """Activation distribution: standard normal, plus ``outlier_fraction`` of the K columns
    scaled to ``outlier_magnitude`` (LLM.int8-style outlier features)."""

    outlier_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    outlier_magnitude: float = Field(default=0.0, ge=0.0, le=1e6)


class LayerTables(MTables):
    """A layer scenario's own keys (see the module docstring)."""

    layer: LayerSpec = LayerSpec()
    timing: LayerTiming = LayerTiming()
    inputs: InputsSpec = InputsSpec()
    weight: weights.WeightSpec = weights.WeightSpec()

    def tables_dict(self) -> dict:
        data = super().tables_dict()
        data.pop("timing", None)  # the shared [timing] table is the scenario's (methods included)
        for key in ("df", "outlier_channels", "outlier_scale"):  # as files before these keys were written
            if data["weight"].get(key) is None:
                data["weight"].pop(key, None)
        return data


def check(scenario: Any) -> None:
    """A layer scenario's cross-key rules: K and N multiples of what each scheme needs, the weight
    (:func:`qbench.layer.weight.check`), outlier inputs with a magnitude, and no recipe.

    Raises:
        ScenarioError: the key at fault, its value and why."""
    check_shape(scenario)
    weights.check(scenario)
    if scenario.inputs.outlier_fraction > 0 and scenario.inputs.outlier_magnitude <= 0:
        raise ScenarioError(scenario.source, "inputs.outlier_magnitude",
                            f"must be > 0 when outlier_fraction > 0, got {scenario.inputs.outlier_magnitude}")
    refuse_recipes(scenario)


def check_shape(scenario: Any) -> None:
    """K and N are multiples of every scheme's group/block size and kernel constraints."""
    k, n = scenario.layer.in_features, scenario.layer.out_features
    for i, entry in enumerate(scenario.schemes):
        multiple = entry.scheme.k_multiple(entry.options)
        if k % multiple:
            raise ScenarioError(scenario.source, "layer.in_features",
                                f"must be a multiple of {multiple} (group/block size or kernel constraint of schemes[{i}] "
                                f"{entry.label}), got {k}")
        multiple = entry.scheme.n_multiple(entry.options)
        if n % multiple:
            raise ScenarioError(scenario.source, "layer.out_features",
                                f"must be a multiple of {multiple} (kernel constraint of schemes[{i}] {entry.label}), got {n}")


def refuse_recipes(scenario: Any) -> None:
    """A recipe (a scheme per linear of a model) on a scenario that measures one linear layer."""
    for i, entry in enumerate(scenario.schemes):
        if entry.recipe is not None:
            key = f"schemes[{i}].{'recipe' if entry.recipe.roles or entry.recipe.linears else 'keep_blocks'}"
            raise ScenarioError(scenario.source, key, f"a recipe picks a scheme per linear of a model ([model]); a "
                                                      f"{scenario.job} scenario measures one "
                                                      f"{'sharded ' if scenario.job == 'tp' else ''}linear layer, got a "
                                                      f"recipe on {entry.label!r}")


def describe(scenario: Any) -> str:
    """The ``qbench check`` summary of a layer scenario: ``M = [1, 16]; K = 4096, N = 4096``."""
    return f"M = {list(scenario.m)}; K = {scenario.layer.in_features}, N = {scenario.layer.out_features}"
