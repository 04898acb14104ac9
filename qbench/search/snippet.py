"""A search's pick as a user pastes it: the scenario ``[[schemes]]`` entry (TOML, :func:`toml_entry`)
and the torchao call (:func:`torchao_call`), ``quantize_(model, FqnToConfig({...}), filter_fn=None)``
with ``transformers``' module names (``model.layers.3.self_attn.q_proj``, ``lm_head``); torchao
0.18's ``quantize_`` refuses an ``FqnToConfig`` beside its default ``filter_fn``.

torchao 0.18's ``FqnToConfig`` (``ModuleFqnToConfig`` is its old name) takes a module's full name, or
a ``re:`` regex of names; an exact name wins over a regex, and a module that matches neither is left
as it is. So the call names every linear whose scheme differs from the base, and one regex over the
blocks' linears gives the base its config (a base kept in float needs none). The LM head is named
when the scenario quantized it. A scheme's config is the one its qbench build applies (the build's
``config_factory``, :mod:`qbench.schemes.torchao_schemes`), written out as code with the arguments
that differ from the config's defaults; a float scheme (bf16, fp16, fp32) maps to ``None``: the
model's own layer. A bitsandbytes or gemlite scheme has no torchao config: :class:`SnippetError`.

Torch-free but :func:`torchao_call`, which builds each config (a torchao import) to write it.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import math
import re
from typing import Any, Optional

from qbench import schemes
from qbench.model import recipe as recipes
from qbench.model.config import BLOCK_LINEARS, linear_name
from qbench.schemes.scheme import Impl


class SnippetError(ValueError):
    """A pick the torchao call cannot express (a scheme with no torchao config), in one line."""


# -- the scenario entry -----------------------------------------------------------------------------
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    """``key`` as a TOML key: bare when it can be, else quoted."""
    return key if _BARE.match(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """``value`` as a TOML value: a string, integer, float, boolean, array or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SnippetError(f"a scheme option of {value!r} cannot be written as a scenario value")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise SnippetError(f"a scheme option of type {type(value).__name__} cannot be written as a scenario value")


def toml_entry(entry: dict) -> str:
    """The scheme entry ``entry`` (``name``, options, ``label``, ``recipe`` with ``"<block>.<role>"``
    keys: :func:`qbench.search.recipes.entry`) as a ``[[schemes]]`` table a scenario holds; the
    recipe as its own ``[schemes.recipe]`` table, one linear a line.

    Raises:
        SnippetError: a value TOML cannot hold (a non-finite float, an object)."""
    lines = ["[[schemes]]"]
    for key, value in entry.items():
        if key not in ("recipe", "keep_blocks"):
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
    if entry.get("keep_blocks"):
        lines.append(f"keep_blocks = {toml_value(entry['keep_blocks'])}")
    if entry.get("recipe"):
        lines.append("[schemes.recipe]")
        lines += [f"{toml_key(str(k))} = {toml_value(v)}" for k, v in entry["recipe"].items()]
    return "\n".join(lines) + "\n"


# -- the torchao call -------------------------------------------------------------------------------
def plan_of_entry(entry: dict, blocks: int) -> recipes.Plan:
    """The :class:`qbench.model.recipe.Plan` of a scheme entry as a scenario writes it, on a model of
    ``blocks`` blocks.

    Raises:
        SnippetError: an entry that is not a valid scheme entry (its name, options or recipe)."""
    item = dict(entry)
    name = item.pop("name", None)
    for own in ("label", "mode"):
        item.pop(own, None)
    try:
        spec = schemes.get(name)
        recipe = recipes.parse(item, "pick")
        options = spec.options_model.model_validate(item)
    except (schemes.UnknownSchemeError, recipes.RecipeError, ValueError) as exc:
        raise SnippetError(f"the pick is not a scheme entry: {str(exc).splitlines()[0]}") from None
    plan = recipes.Plan(recipes.Choice(name, options), blocks, recipe)
    if recipe is not None:
        try:
            recipes.check(recipe, plan.base, blocks, "scheme", "pick")
        except recipes.RecipeError as exc:
            raise SnippetError(f"the pick does not fit a model of {blocks} blocks: {exc}") from None
    return plan


def module_name(block: int, role: str) -> str:
    """``transformers``' module name of a linear: ``model.layers.3.self_attn.q_proj``, ``lm_head``."""
    return "lm_head" if role == "lm_head" else linear_name(block, role).removesuffix(".weight")


#: The regex of every block linear's module name (``re:`` is FqnToConfig's regex prefix).
BLOCK_REGEX = r"re:model\.layers\.\d+\.(self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj"


def _code(value: Any, imports: set[tuple[str, str]]) -> str:
    """Python source that rebuilds ``value`` (a torchao config, granularity, enum, dtype or plain
    value), adding ``(module, name)`` to ``imports`` for each class it names; a dataclass is written
    with the fields that differ from a default instance's."""
    if isinstance(value, enum.Enum):  # before str: torchao's enums are str enums
        imports.add(_where(type(value)))
        return f"{type(value).__name__}.{value.name}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        imports.add(("torch", ""))
        return str(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_code(v, imports) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        try:
            default = cls()
        except TypeError:
            default = None
        args = [f"{f.name}={_code(getattr(value, f.name), imports)}" for f in dataclasses.fields(value)
                if f.init and (default is None or getattr(value, f.name) != getattr(default, f.name))]
        imports.add(_where(cls))
        return f"{cls.__name__}({', '.join(args)})"
    raise SnippetError(f"cannot write a {type(value).__name__} as code")


def _where(cls: type) -> tuple[str, str]:
    """Where to import ``cls`` from: ``torchao.quantization`` when it exports it, else its module."""
    ao = importlib.import_module("torchao.quantization")
    return ("torchao.quantization", cls.__name__) if getattr(ao, cls.__name__, None) is cls \
        else (cls.__module__, cls.__name__)


def config_code(choice: recipes.Choice, imports: set[tuple[str, str]]) -> Optional[str]:
    """The torchao config expression of ``choice`` (None: a float scheme, the model's own layer).

    Raises:
        SnippetError: a scheme of another library (no torchao config)."""
    spec = schemes.get(choice.name)
    if spec.library == "torch":
        return None
    build = getattr(importlib.import_module(spec.build.module), spec.build.attr) \
        if isinstance(spec.build, Impl) else spec.build
    factory = getattr(build, "config_factory", None)
    if factory is None and spec.library == "torchao":  # the calibrated int4 schemes: values chosen by qbench
        raise SnippetError(f"{choice.label}'s int4 values are chosen by qbench (a calibration, or HQQ's optimizer: "
                           "qbench.schemes.calibrated, on tinygemm's grid), not by one torchao config that quantize_ "
                           "applies: use its scenario entry")
    if factory is None:
        raise SnippetError(f"{choice.label} is a {spec.library} scheme: torchao's quantize_ has no config for it, so "
                           "the pick cannot be written as a torchao call (use its scenario entry)")
    return _code(factory(choice.options), imports)


def _name(label: str, taken: set[str]) -> str:
    name = re.sub(r"\W+", "_", label).strip("_").lower() or "config"
    name = f"c_{name}" if name[0].isdigit() else name
    out, i = name, 2
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    taken.add(out)
    return out


def torchao_call(entry: dict, blocks: int, head: bool) -> str:
    """The Python a user pastes to quantize their own ``transformers`` Llama-family model as the
    scheme entry ``entry`` says, on a model of ``blocks`` blocks (the LM head too when ``head``:
    the scenario quantized it): one variable per config, then ``quantize_(model, FqnToConfig({...}))``
    naming each linear that differs from the base and a regex for the base.

    Raises:
        SnippetError: a scheme with no torchao config, or an entry that is not a scheme entry."""
    plan = plan_of_entry(entry, blocks)
    imports: set[tuple[str, str]] = {("torchao.quantization", "FqnToConfig"), ("torchao.quantization", "quantize_")}
    names: dict[str, Optional[str]] = {}  # choice label -> variable (None: float)
    defs: list[str] = []
    taken: set[str] = set()

    def var(choice: recipes.Choice) -> str:
        if choice.label not in names:
            code = config_code(choice, imports)
            if code is None:
                names[choice.label] = None
            else:
                names[choice.label] = _name(choice.label, taken)
                defs.append(f"{names[choice.label]} = {code}")
        return names[choice.label] or "None"

    base = var(plan.base)
    items = []
    for b in range(blocks):
        for role in BLOCK_LINEARS:
            choice = plan.choice(b, role)
            if choice.label != plan.base.label:
                items.append((module_name(b, role), var(choice), choice.label))
    if head:
        choice = plan.choice(-1, "lm_head")
        items.append(("lm_head", var(choice), choice.label))
    dtype = str(schemes.get(plan.base.name).activation_dtype).removeprefix("torch.")
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(getattr(plan.base.options, "activation_dtype", ""), dtype)
    out = [f"# {entry.get('label', plan.base.label)}: a transformers Llama-family model of {blocks} blocks in "
           f"torch.{dtype} (the recipe's activation dtype);",
           "# an exact module name wins over the regex; None keeps the model's own float layer"]
    froms: dict[str, list[str]] = {}
    for module, name in sorted(imports):
        if name:
            froms.setdefault(module, []).append(name)
    out += ["import torch"] if ("torch", "") in imports else []
    out += [f"from {module} import {', '.join(sorted(ns))}" for module, ns in sorted(froms.items())]
    out += [""] + defs + ["quantize_(model, FqnToConfig({"]
    out += [f"    {json.dumps(name)}: {v},  # {label}" if v == "None" else f"    {json.dumps(name)}: {v},"
            for name, v, label in items]
    if base != "None":
        out.append(f'    r"{BLOCK_REGEX}": {base},  # every other block linear: {plan.base.label}')
    out.append("}), filter_fn=None)  # torchao 0.18: FqnToConfig needs filter_fn=None (the default filter refuses it)")
    return "\n".join(out) + "\n"


def float_dtype(entry: dict, blocks: int, head: bool) -> Optional[str]:
    """The float scheme's label (``bf16``) when every linear of ``entry`` on a model of ``blocks`` blocks (the LM head
    too when ``head``) is a float scheme: the model's own layers, nothing for ``quantize_`` to do; else None.

    Raises:
        SnippetError: an entry that is not a scheme entry."""
    plan = plan_of_entry(entry, blocks)
    choices = [plan.choice(b, role) for b in range(blocks) for role in BLOCK_LINEARS]
    choices += [plan.choice(-1, "lm_head")] if head else []
    labels = {c.label for c in [plan.base, *choices]}
    return next(iter(labels)) if len(labels) == 1 and schemes.get(plan.base.name).library == "torch" else None


def pick_lines(doc: Any, row: Any = None, word: str = "pick") -> list[str]:
    """What a user pastes of a search result's pick (a :class:`qbench.results.ResultDoc` whose rows
    are :class:`qbench.search.row.SearchRow`), or of ``row`` (the answer on the measured steps,
    :func:`qbench.search.view.measured_answer`), called ``word``: its scenario entry and its
    torchao call, or a line saying why one cannot be written, or that a float scheme needs none.
    Empty when the search has no pick."""
    pick = row if row is not None and row.recipe else next((r for r in doc.rows if r.pick and r.recipe), None)
    if pick is None:
        return []
    units = ((doc.model_extra or {}).get("search") or {}).get("units") or []
    blocks = len({u.split()[1] for u in units if u.startswith("block ")})
    head = "lm_head" in units
    out = [f"the {word} ({pick.scheme}) as a scenario entry (under [[schemes]] of a quality or step scenario):", ""]
    out += toml_entry(pick.recipe).splitlines() + [""]
    try:
        if (kept := float_dtype(pick.recipe, blocks, head)) is not None:
            return out + [f"no quantization call: keep the model in {kept} (every linear stays the model's own layer)"]
        call = torchao_call(pick.recipe, blocks, head)
        out += [f"the {word} as a torchao call on your own model (torchao 0.18):", ""] + call.splitlines()
    except SnippetError as exc:
        out.append(f"no torchao call: {exc}")
    return out
