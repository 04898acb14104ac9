"""Mixed recipes: a scheme per linear of a Llama-family model, as deployments ship them.

llama.cpp's K-quants keep some tensors at more bits than the rest (``Q4_K_M`` stores half of
``attn_v`` and ``ffn_down`` in Q6_K), torchao's ``quantize_`` takes a ``filter_fn`` or per-module
configs, and users keep the first and last blocks in bf16. A scheme entry of a model scenario (the
step job, the quality job) says so in two optional keys::

    [[schemes]]
    name = "int4-weight-only"                          # the base: every linear not named below
    label = "int4 (down, lm_head int8; ends bf16)"
    recipe = { down = "int8-weight-only", lm_head = "int8-weight-only" }   # role -> scheme
    keep_blocks = { blocks = [0, -1], scheme = "bf16" }                   # whole blocks in one scheme

* ``recipe``: a role -> scheme table. Roles: ``q``, ``k``, ``v``, ``o``, ``gate``, ``up``, ``down``
  (or ``transformers``' names ``q_proj`` ... ``down_proj``) and ``lm_head`` (only where the scenario
  quantizes the head: ``quality.lm_head`` / ``model.quantize_lm_head``). A scheme is a name, or a
  table ``{ name = "int4-weight-only", group_size = 64 }`` with that scheme's options.
  A key ``"<block>.<role>"`` names one linear of one block (``"3.down" = "int8-weight-only"``,
  ``"-1.q_proj" = { name = "int4-weight-only", group_size = 64 }``; negative blocks count from the
  end): what a per-layer search picks.
* ``keep_blocks``: ``blocks``, block indices (negative counts from the end: ``-1`` is the last);
  ``scheme`` (default ``"bf16"``): the scheme of every linear of those blocks. A kept block wins
  over a role key.

Which scheme builds (block, role): the block's own key, else the kept blocks' scheme, else the
role's, else the base (:meth:`Plan.choice`). Checks (:func:`parse`, :func:`check`): known roles and
schemes, valid options, block indices inside the model (one key per linear), no ``tf32`` (a
process-wide matmul setting, not one linear's), and one activation dtype for every scheme of the
recipe (the linears share the model's hidden states); each refusal is a :class:`RecipeError`
naming the key and the value.

Torch-free, except :func:`check`'s activation-dtype lookup, which reads the scheme registry (a torch
import) for scenarios that hold a recipe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

from pydantic import ValidationError

from qbench import schemes
from qbench.schemes.options import SchemeOptions
from qbench.model.config import BLOCK_LINEARS
from qbench.tables import ScenarioError

#: The roles a recipe may name, in model order: a block's seven linears, then the LM head.
ROLES: tuple[str, ...] = BLOCK_LINEARS + ("lm_head",)
#: The decisions of a per-layer search: the linears engines fuse into one GEMM (vLLM's QKVParallelLinear and
#: MergedColumnParallelLinear, TensorRT-LLM's fused QKV and gate-up) take one scheme together.
#: Unit -> its block roles; the LM head is the unit ``lm_head``.
UNITS: dict[str, tuple[str, ...]] = {"attn_in": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",),
                                     "mlp_in": ("gate_proj", "up_proj"), "down": ("down_proj",)}
#: Short role names -> ``transformers``' names (``down`` -> ``down_proj``).
SHORT = {r.removesuffix("_proj"): r for r in BLOCK_LINEARS}
#: The scenario keys of a scheme entry that this module reads.
KEYS = ("recipe", "keep_blocks")
#: ``keep_blocks``' default scheme.
KEEP_DEFAULT = "bf16"
#: Schemes no recipe may hold, and why.
REFUSED = {"tf32": "tf32 is a process-wide matmul setting (TF32 on for every float32 matmul), not one linear's"}


class RecipeError(ValueError):
    """A recipe that cannot run: ``"<key>: <what is wrong>, got <value>"`` (the scenario adds its file)."""

    def __init__(self, key: str, message: str):
        self.key, self.message = key, message
        super().__init__(f"{key}: {message}")


def _show(value: Any) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class Choice:
    """One scheme with its options: what builds a linear."""

    name: str
    options: SchemeOptions

    @property
    def label(self) -> str:
        """``name``, with the options that differ from the defaults: ``int4-weight-only[group_size=64]``."""
        changed = self.changed()
        return self.name + (f"[{','.join(f'{k}={v}' for k, v in changed.items())}]" if changed else "")

    def changed(self) -> dict:
        """The options that differ from the scheme's defaults (``mode`` and ``label`` aside)."""
        defaults = type(self.options)()
        return {k: v for k, v in self.options.model_dump(exclude={"mode", "label"}).items() if v != getattr(defaults, k)}

    def to_scenario(self) -> Any:
        """As a scenario writes it: the name, or a table of the name and its changed options."""
        changed = self.changed()
        return {"name": self.name, **changed} if changed else self.name


@dataclass(frozen=True)
class Recipe:
    """A scheme entry's ``recipe`` and ``keep_blocks`` as validated (roles in :data:`ROLES` order,
    blocks as written: negative ones count from the end). ``linears``: the ``"<block>.<role>"`` keys
    as ``(block, role, choice)``, ``role`` a block role's full name, in the order written."""

    roles: tuple[tuple[str, Choice], ...] = ()
    keep_blocks: tuple[int, ...] = ()
    keep_scheme: Optional[Choice] = None
    linears: tuple[tuple[int, str, Choice], ...] = ()

    def to_scenario(self) -> dict:
        """The entry's keys as a scenario writes them (``Scenario.to_dict``; read back by :func:`parse`)."""
        out: dict[str, Any] = {}
        if self.roles or self.linears:
            out["recipe"] = {role: choice.to_scenario() for role, choice in self.roles}
            out["recipe"].update({linear_key(b, role): c.to_scenario() for b, role, c in self.linears})
        if self.keep_blocks:
            out["keep_blocks"] = {"blocks": list(self.keep_blocks), "scheme": self.keep_scheme.to_scenario()}
        return out

    def describe(self) -> str:
        """One line for an automatic label: ``down=int8-weight-only; 3.down+-1.q=bf16; blocks 0,-1 bf16``
        (the block keys grouped by scheme, in first-written order)."""
        parts = []
        if self.roles:
            parts.append(",".join(f"{role.removesuffix('_proj')}={c.label}" for role, c in self.roles))
        if self.linears:
            by: dict[str, list[str]] = {}
            for b, role, c in self.linears:
                by.setdefault(c.label, []).append(f"{b}.{role.removesuffix('_proj')}")
            parts.append(",".join(f"{'+'.join(keys)}={label}" for label, keys in by.items()))
        if self.keep_blocks:
            parts.append(f"blocks {','.join(str(b) for b in self.keep_blocks)} {self.keep_scheme.label}")
        return "; ".join(parts)

    def choices(self) -> list[tuple[str, Choice]]:
        """``(key, choice)`` of every scheme the recipe names, the key as a scenario error names it."""
        out = [(f"recipe.{role.removesuffix('_proj')}", c) for role, c in self.roles]
        out += [(f"recipe.{linear_key(b, role)}", c) for b, role, c in self.linears]
        return out + ([("keep_blocks.scheme", self.keep_scheme)] if self.keep_blocks else [])


def linear_key(block: int, role: str) -> str:
    """The recipe key of one block's linear: ``3.down`` (a short role name; ``block`` as written)."""
    return f"{block}.{role.removesuffix('_proj')}"


@dataclass(frozen=True)
class Plan:
    """Which scheme builds each linear of one model (:meth:`choice`). A plain scheme entry has a
    plan too: every linear its own scheme (``recipe`` None)."""

    base: Choice
    blocks: int
    recipe: Optional[Recipe] = None

    def _roles(self) -> dict[str, Choice]:
        return dict(self.recipe.roles) if self.recipe else {}

    @cached_property
    def _linears(self) -> dict[tuple[int, str], Choice]:
        """The block keys as ``{(block 0 .. blocks - 1, role): choice}``."""
        return {(b % self.blocks, role): c for b, role, c in self.recipe.linears} if self.recipe else {}

    def kept(self) -> tuple[int, ...]:
        """The kept blocks as indices ``0 .. blocks - 1``, sorted."""
        if not self.recipe:
            return ()
        return tuple(sorted(b % self.blocks for b in self.recipe.keep_blocks))

    def choice(self, block: int, role: str) -> Choice:
        """The scheme of ``role`` (a :data:`ROLES` name) in ``block`` (0-based; ignored for
        ``lm_head``): the block's own key, else a kept block's scheme, else the recipe's for the role,
        else the base."""
        if self.recipe and role != "lm_head":
            own = self._linears.get((block, role))
            if own is not None:
                return own
            if block in self.kept():
                return self.recipe.keep_scheme
        return self._roles().get(role, self.base)

    def block_choices(self, block: int) -> dict[str, Choice]:
        """``{role: choice}`` of one block's seven linears."""
        return {role: self.choice(block, role) for role in BLOCK_LINEARS}

    def counts(self, head: bool) -> dict[str, int]:
        """Linears per scheme label over the model (every block, the LM head when ``head``), in first-use order."""
        out: dict[str, int] = {}
        for b in range(self.blocks):
            for c in self.block_choices(b).values():
                out[c.label] = out.get(c.label, 0) + 1
        if head:
            label = self.choice(-1, "lm_head").label
            out[label] = out.get(label, 0) + 1
        return out

    def distinct(self, head: bool) -> list[Choice]:
        """Every scheme the model is built with (the LM head's when ``head``), in first-use order."""
        seen: dict[str, Choice] = {}
        for b in range(self.blocks):
            for c in self.block_choices(b).values():
                seen.setdefault(c.label, c)
        if head:
            c = self.choice(-1, "lm_head")
            seen.setdefault(c.label, c)
        return list(seen.values())

    def identity(self) -> Optional[dict]:
        """What pairs a step row with a quality row of the same recipe: the roles' schemes, the
        kept blocks as indices of this model and, when the recipe has block keys, ``by_block``:
        ``{"3.down_proj": label}`` with blocks as indices of this model, sorted (None for a plain scheme)."""
        if not self.recipe:
            return None
        out = {"roles": {role: c.label for role, c in self.recipe.roles},
               "keep_blocks": {"blocks": list(self.kept()), "scheme": self.recipe.keep_scheme.label}
               if self.recipe.keep_blocks else None}
        if self._linears:
            order = {r: i for i, r in enumerate(ROLES)}
            out["by_block"] = {f"{b}.{role}": c.label
                              for (b, role), c in sorted(self._linears.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))}
        return out

    def record(self, head: bool, ran: Optional[dict[str, str]] = None) -> Optional[dict]:
        """The row's ``recipe``: :meth:`identity` plus ``base`` and ``linears``, one item per scheme:
        its label, how many linears it builds and, once measured, ``ran`` (``kernel`` or
        ``emulated``: ``ran[label]``). None for a plain scheme."""
        ident = self.identity()
        if ident is None:
            return None
        linears = [{"scheme": label, "count": n} for label, n in self.counts(head).items()]
        if ran is not None:
            linears = [{**item, "ran": ran[item["scheme"]]} for item in linears]
        return {**ident, "base": self.base.label, "linears": linears}

    def shape_reason(self, shapes: dict[str, tuple[int, int]], head: bool) -> Optional[str]:
        """Why a scheme of the plan cannot take the shape of a linear it builds (its group or block
        size, a kernel constraint: the spec's ``k_multiple`` / ``n_multiple``), or None.
        ``shapes``: role -> (K, N) (:meth:`qbench.model.config.StepModelConfig.linear_shapes`)."""
        pairs = {(role, c.label): c for b in range(self.blocks) for role, c in self.block_choices(b).items()}
        if head:
            pairs[("lm_head", self.choice(-1, "lm_head").label)] = self.choice(-1, "lm_head")
        for (role, _), c in pairs.items():
            spec = schemes.get(c.name)
            (k, n), km, nm = shapes[role], spec.k_multiple(c.options), spec.n_multiple(c.options)
            if k % km or n % nm:
                need = f"K a multiple of {km}" if k % km else f"N a multiple of {nm}"
                return f"{c.label} cannot take {role} (K={k}, N={n}): needs {need}"
        return None


def plan_of(entry: Any, blocks: int) -> Plan:
    """The plan of a scenario's scheme entry (its ``name``, ``options`` and ``recipe``) on a model of ``blocks`` blocks."""
    return Plan(Choice(entry.name, entry.options), blocks, entry.recipe)


def identity_key(record: Optional[dict]) -> Optional[str]:
    """A row's ``recipe`` record reduced to what identifies it (:meth:`Plan.identity`), as text."""
    if not record:
        return None
    ident = {"roles": record.get("roles"), "keep_blocks": record.get("keep_blocks")}
    if record.get("by_block"):
        ident["by_block"] = record["by_block"]
    return json.dumps(ident, sort_keys=True)


def _choice(value: Any, key: str) -> Choice:
    """A scheme named by ``value`` (a name, or a table with ``name`` and that scheme's options)."""
    if isinstance(value, str):
        name, options = value, {}
    elif isinstance(value, dict):
        options = dict(value)
        name = options.pop("name", None)
        if not isinstance(name, str):
            raise RecipeError(key, f"a scheme table needs 'name' (a registered scheme), got {_show(value)}")
        for own in ("mode", "label"):
            if own in options:
                raise RecipeError(f"{key}.{own}", f"set on the scheme entry itself: the recipe's linears run in "
                                                  f"its mode and its row has one label, got {_show(options[own])}")
    else:
        raise RecipeError(key, f"must be a scheme name or a table {{ name = ..., options }}, got {_show(value)}")
    if name in REFUSED:
        raise RecipeError(key, f"{REFUSED[name]}: it cannot be part of a recipe, got {name!r}")
    try:
        spec = schemes.get(name)
    except schemes.UnknownSchemeError as exc:
        raise RecipeError(key, f"{exc}, got {name!r}") from None
    try:
        opts = spec.options_model.model_validate(options)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise RecipeError(f"{key}.{where}" if where else key,
                          f"{msg[:1].lower() + msg[1:]} ({name}), got {_show(err.get('input'))}") from None
    return Choice(name, opts)


def _role(key: str) -> Optional[str]:
    if key in ROLES:
        return key
    return SHORT.get(key)


def _linear(name: str, key: str) -> tuple[int, str]:
    """``(block as written, role's full name)`` of a recipe key ``"<block>.<role>"`` (``"-1.down"``)."""
    block, _, role_name = name.partition(".")
    try:
        index = int(block) if block.lstrip("-").isdigit() else None
    except ValueError:
        index = None
    if index is None:
        raise RecipeError(key, f"a block key is \"<block>.<role>\" with an integer block (negative: from the end), "
                               f"got {name!r}")
    if role_name == "lm_head":
        raise RecipeError(key, f"the LM head is in no block: name it lm_head, got {name!r}")
    role = _role(role_name)
    if role is None:
        raise RecipeError(key, f"unknown role; a block's roles: {', '.join(SHORT)} (or {', '.join(BLOCK_LINEARS)}), "
                               f"got {name!r}")
    return index, role


def parse(item: dict, key: str) -> Optional[Recipe]:
    """Pop and validate the :data:`KEYS` of one scheme entry (a dict as the scenario holds it;
    ``key`` is its path, ``schemes[2]``). None when it has neither.

    Raises:
        RecipeError: an unknown role, a role named twice, a block key that is not ``"<int>.<role>"``
            (or names ``lm_head``, or one linear twice as written), an unknown scheme or option,
            ``tf32``, a ``keep_blocks`` that is not ``{ blocks = [ints], scheme = ... }``, a block listed twice.
    """
    roles_raw, keep_raw = item.pop("recipe", None), item.pop("keep_blocks", None)
    if roles_raw is None and keep_raw is None:
        return None
    roles: dict[str, Choice] = {}
    linears: dict[tuple[int, str], Choice] = {}
    if roles_raw is not None:
        if not isinstance(roles_raw, dict) or not roles_raw:
            raise RecipeError(f"{key}.recipe", f"must be a table of role = scheme ({', '.join(list(SHORT) + ['lm_head'])}), "
                                               f"got {_show(roles_raw)}")
        for name, value in roles_raw.items():
            if not isinstance(name, str):  # a TOML key is text; a dict built in code may hold anything
                raise RecipeError(f"{key}.recipe", f"a key must be a role or \"<block>.<role>\", got {_show(name)}")
            if "." in name:
                block, role = _linear(name, f"{key}.recipe.{name}")
                if (block, role) in linears:
                    raise RecipeError(f"{key}.recipe.{name}", f"names block {block}'s {role} a second time, got {name!r}")
                linears[(block, role)] = _choice(value, f"{key}.recipe.{name}")
                continue
            role = _role(name)
            if role is None:
                raise RecipeError(f"{key}.recipe.{name}", f"unknown role; the roles: {', '.join(list(SHORT) + ['lm_head'])} "
                                                          f"(or {', '.join(BLOCK_LINEARS)}), or \"<block>.<role>\" for "
                                                          f"one block's linear, got {name!r}")
            if role in roles:
                raise RecipeError(f"{key}.recipe.{name}", f"names role {role} a second time, got {name!r}")
            roles[role] = _choice(value, f"{key}.recipe.{name}")
    blocks: tuple[int, ...] = ()
    keep: Optional[Choice] = None
    if keep_raw is not None:
        k = f"{key}.keep_blocks"
        if not isinstance(keep_raw, dict):
            raise RecipeError(k, f"must be a table {{ blocks = [0, -1], scheme = \"bf16\" }}, got {_show(keep_raw)}")
        extra = sorted(set(keep_raw) - {"blocks", "scheme"})
        if extra:
            raise RecipeError(f"{k}.{extra[0]}", "unknown key; allowed: blocks, scheme")
        raw = keep_raw.get("blocks")
        if (not isinstance(raw, list) or not raw
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in raw)):
            raise RecipeError(f"{k}.blocks", f"must be a non-empty list of block indices (negative: from the end), "
                                             f"got {_show(raw)}")
        if len(set(raw)) != len(raw):
            raise RecipeError(f"{k}.blocks", f"lists a block twice, got {_show(raw)}")
        blocks = tuple(raw)
        keep = _choice(keep_raw.get("scheme", KEEP_DEFAULT), f"{k}.scheme")
    order = {r: i for i, r in enumerate(ROLES)}
    return Recipe(tuple(sorted(roles.items(), key=lambda kv: order[kv[0]])), blocks, keep,
                  tuple((b, role, c) for (b, role), c in linears.items()))


def check(recipe: Recipe, base: Choice, blocks: int, head: str, key: str, head_key: str = "") -> None:
    """Check a parsed recipe against the model it runs on.

    Args:
        recipe: the entry's recipe.
        base: the entry's own scheme.
        blocks: the model's block count.
        head: what the scenario does with the LM head: ``"scheme"`` (the scheme builds it),
            ``"float"`` or ``"none"``.
        key: the entry's path (``schemes[2]``).
        head_key: the scenario key that makes the head the scheme's (``quality.lm_head``).

    Raises:
        RecipeError: a block index outside ``-blocks .. blocks - 1`` or two naming one block (of
            ``keep_blocks``, or two block keys naming one linear: ``"3.down"`` and ``"-1.down"``); an
            ``lm_head`` role where no scheme builds the head; schemes of different activation dtypes.
    """
    if base.name in REFUSED:
        raise RecipeError(f"{key}.name", f"{REFUSED[base.name]}: it cannot be a recipe's base, whose other linears "
                                         f"would run under it too (use fp32), got {base.name!r}")
    seen: dict[int, int] = {}
    for i, b in enumerate(recipe.keep_blocks):
        if not -blocks <= b < blocks:
            raise RecipeError(f"{key}.keep_blocks.blocks[{i}]", f"outside the model's {blocks} blocks (0..{blocks - 1}, "
                                                                f"or -{blocks}..-1 from the end), got {b}")
        if b % blocks in seen:
            j = seen[b % blocks]
            raise RecipeError(f"{key}.keep_blocks.blocks[{i}]", f"names block {b % blocks} a second time (blocks[{j}] "
                                                                f"= {recipe.keep_blocks[j]}), got {b}")
        seen[b % blocks] = i
    named: dict[tuple[int, str], int] = {}
    for b, role, _ in recipe.linears:
        where = f"{key}.recipe.{linear_key(b, role)}"
        if not -blocks <= b < blocks:
            raise RecipeError(where, f"block {b} is outside the model's {blocks} blocks (0..{blocks - 1}, or "
                                     f"-{blocks}..-1 from the end), got {linear_key(b, role)!r}")
        if (b % blocks, role) in named:
            other = linear_key(named[(b % blocks, role)], role)
            raise RecipeError(where, f"names block {b % blocks}'s {role} a second time ({other!r}), got "
                                     f"{linear_key(b, role)!r}")
        named[(b % blocks, role)] = b
    roles = dict(recipe.roles)
    if "lm_head" in roles and head != "scheme":
        what = "has no LM head" if head == "none" else "keeps the LM head a float layer"
        raise RecipeError(f"{key}.recipe.lm_head", f"this scenario {what}; set {head_key or 'the LM head'} = true for "
                                                   f"the recipe to pick its scheme, got {roles['lm_head'].name!r}")
    want = activation_dtype(base.name)
    for where, choice in recipe.choices():
        got = activation_dtype(choice.name)
        if got != want:
            raise RecipeError(f"{key}.{where}", f"{choice.name} runs at {got} activations, the base scheme {base.name} at "
                                                f"{want}: the recipe's linears share the model's hidden states, so its "
                                                f"schemes must take one activation dtype, got {choice.name!r}")


def activation_dtype(name: str) -> str:
    """The activation dtype of registered scheme ``name`` (``bfloat16``), from the scheme registry."""
    from qbench import schemes  # the full registry (torch): only scenarios with a recipe come here

    return str(schemes.get(name).activation_dtype).removeprefix("torch.")


def auto_label(base_label: str, recipe: Recipe) -> str:
    """The row label of an entry without one: ``int4-weight-only recipe(down=int8-weight-only; blocks 0,-1 bf16)``."""
    return f"{base_label} recipe({recipe.describe()})"


def check_entries(scenario: Any, config: StepModelConfig, head: str, head_key: str) -> None:
    """Every scheme's recipe (:func:`check`) against the model ``config``; ``head``
    is what the LM head is (``"scheme"``, ``"float"`` or ``"none"``), set by the key ``head_key``.

    Raises:
        ScenarioError: the recipe key at fault and why."""
    try:
        for i, entry in enumerate(scenario.schemes):
            if entry.recipe is not None:
                check(entry.recipe, Choice(entry.name, entry.options), config.blocks, head,
                              f"schemes[{i}]", head_key)
    except RecipeError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def check_shapes(scenario: Any, config: StepModelConfig, head: str) -> None:
    """Every linear each scheme entry builds (its recipe's parts too; the LM head when ``head`` is
    ``"scheme"``) of a shape that scheme takes (:meth:`Plan.shape_reason`: a group size the
    model's K does not divide, a kernel constraint).

    Raises:
        ScenarioError: ``schemes[i]``, the scheme, the linear and its shape."""
    for i, entry in enumerate(scenario.schemes):
        reason = plan_of(entry, config.blocks).shape_reason(config.linear_shapes(), head == "scheme")
        if reason:
            raise ScenarioError(scenario.source, f"schemes[{i}]", f"{reason}, which {config.title} has; choose "
                                                                  f"another group size or scheme, got {entry.label!r}")
