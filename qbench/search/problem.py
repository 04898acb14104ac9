"""The search problem built from two measured files: each unit's damage under each candidate (a
quality file with unit sensitivity) and its time (a model-step file's per-linear ``stream`` times).

* **Units** (:data:`qbench.model.recipe.UNITS`): per block the attention input (q, k, v), o, the MLP
  input (gate, up) and down, plus the LM head when the quality rows quantized it: the linears
  engines fuse into one GEMM take one scheme together.
* **Damage**: the quality row of candidate ``c`` measured each unit quantized alone by ``c`` inside
  the reference model (``sensitivity_by = "unit"``): its mean KLD (nats/token) ± uncertainty.
* **Cost**: the step row of ``c`` at the deployment's M and context: a unit's time is the sum of its
  linears' ``stream`` medians (µs, one layer each: the sum of separate linears; engines fuse q, k, v
  into one GEMM, which this does not time). The fixed rest is the base candidate's measured step
  less the sum of its units' times, so the pure base recipe is predicted at its measured step.
* **The rest's damage**: likewise, the base candidate's whole-model KLD less the sum of its unit
  damages (both on the damage span): what no unit carries (attention and the norms in the base's
  activation dtype), added once to every recipe's predicted KLD. On SmolLM2-135M bf16's units sum
  to 0.59x its whole row; without the rest a budget near bf16's floor is overspent.

Every refusal is one line naming the file, the key and the value (:class:`ProblemError`). Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from qbench.model.recipe import UNITS

#: Schemes whose speed depends on the weights' or activations' values, not only the shapes: a step on
#: seeded weights of the same config is not their speed on the real checkpoint. (LLM.int8 runs the
#: activation columns above its threshold in fp16: how many there are is the inputs' doing.)
VALUE_DEPENDENT_SPEED = {"int8-bnb": "LLM.int8's fp16 outlier columns: how many there are depends on the "
                                     "activations' values, so a step on other values is not its speed"}


class ProblemError(ValueError):
    """A pair of files that cannot make a search problem: ``"<file>: <key>: <what>, got <value>"``."""


@dataclass(frozen=True)
class Unit:
    """One decision: ``name`` as the quality rows name the part (``block 3 attn_in``, ``lm_head``),
    ``block`` (None for the head), ``kind`` (a :data:`UNITS` key or ``lm_head``), ``roles`` its linears."""

    name: str
    block: Optional[int]
    kind: str
    roles: tuple[str, ...]


def unit_name(block: Optional[int], kind: str) -> str:
    """The part name of a unit: ``block 3 attn_in``, or ``lm_head``."""
    return kind if block is None else f"block {block} {kind}"


def model_units(blocks: int, head: bool) -> tuple[Unit, ...]:
    """Every unit of a model of ``blocks`` blocks, block by block in :data:`UNITS` order, then the
    LM head when ``head``."""
    out = [Unit(unit_name(b, kind), b, kind, roles) for b in range(blocks) for kind, roles in UNITS.items()]
    return tuple(out + ([Unit("lm_head", None, "lm_head", ("lm_head",))] if head else []))


@dataclass(frozen=True)
class Problem:
    """A multiple-choice knapsack: each unit takes one candidate.

    Attributes:
        units: the decisions, in model order.
        candidates: the candidate schemes' row labels; index 0 is the base (the scheme every unit
            not picked otherwise takes in a written recipe, and whose step gives the fixed rest).
        time_us: ``[unit][candidate]`` µs of the unit's linears at the deployment's M (one step).
        damage: ``[unit][candidate]`` mean KLD (nats/token) with that unit alone quantized.
        damage_unc: its uncertainty (same shape).
        fixed_us: the step's rest (attention, norms, embedding, a float LM head), µs.
        fixed_kld: the damage of that rest (nats/token): the base row's whole-model mean KLD less the sum of its
            unit damages, at least 0; ``fixed_kld_unc`` its uncertainty (the whole row's plus the units').
        sources: where each half comes from, in words (file, method, notes).
        method: the step method the fixed rest (and a verified recipe's step) is read by.
        notes: what a reader must know of a candidate's speed (label -> line: a speed that depends
            on values, read from seeded weights).
        emulated: the candidates the damage file ran emulated (their kernel did not run there).
        few_tokens: calibrated candidate label -> the damage row's ``few-calibration-tokens`` text (GPTQ or AWQ fitted
            on fewer tokens than a linear's inputs), for the rows of recipes that use them.
        scale: the factor every damage was scaled by since measured (refits), 1 as measured.
    """

    units: tuple[Unit, ...]
    candidates: tuple[str, ...]
    time_us: tuple[tuple[float, ...], ...]
    damage: tuple[tuple[float, ...], ...]
    damage_unc: tuple[tuple[float, ...], ...]
    fixed_us: float
    sources: dict[str, str] = field(default_factory=dict)
    method: str = ""
    notes: dict[str, str] = field(default_factory=dict)
    emulated: tuple[str, ...] = ()
    scale: float = 1.0
    fixed_kld: float = 0.0
    fixed_kld_unc: float = 0.0
    few_tokens: dict[str, str] = field(default_factory=dict)

    def pure(self, c: int) -> tuple[int, ...]:
        """The choice of candidate ``c`` for every unit."""
        return (c,) * len(self.units)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _opts(row: Any) -> str:
    return json.dumps({k: v for k, v in (row.options or {}).items() if k not in ("label", "mode")}, sort_keys=True)


def _same_scheme(row: Any, name: str, options: str, mode: str) -> bool:
    return row.base_scheme == name and _opts(row) == options and getattr(row, "mode", "eager") == mode and not row.recipe


def damages(path: str, rows: Sequence[Any], candidates: Sequence[Any], blocks: int
            ) -> tuple[tuple[Unit, ...], list[list[float]], list[list[float]]]:
    """Per unit and candidate, the mean KLD and its uncertainty from a quality file's rows.

    Args:
        path: the quality file (named by every refusal).
        rows: its rows (:class:`qbench.quality.row.QualityRow`).
        candidates: the scenario's scheme entries (``label``, ``name``, ``options``).
        blocks: the model's block count.

    Raises:
        ProblemError: a candidate with no ok row (its reason said: a scheme the model cannot take),
            a row without unit sensitivity, a unit missing from a row, rows with the LM head and without.
    """
    found = []
    for c in candidates:
        i = next((i for i, r in enumerate(rows) if r.scheme == c.label), None)
        if i is None:
            raise ProblemError(f"{path}: rows: no row of candidate {c.label!r} (rows: "
                               f"{', '.join(r.scheme for r in rows) or 'none'}), got {c.label!r}")
        r = rows[i]
        if r.status != "ok":
            raise ProblemError(f"{path}: rows[{i}].status: candidate {c.label!r} was {r.status} ({r.reason}): the "
                               f"model cannot take it here; drop it from the candidates, got {r.status!r}")
        if r.sensitivity_by != "unit" or not r.sensitivity:
            raise ProblemError(f"{path}: rows[{i}].sensitivity_by: a search needs each unit quantized alone "
                               f"([quality] sensitivity = \"unit\"), got {_show(r.sensitivity_by)}")
        found.append((i, r))
    heads = {r.lm_head for _, r in found}
    if len(heads) > 1:
        raise ProblemError(f"{path}: rows[].lm_head: the candidates' rows disagree on the LM head (some quantized "
                           f"it, some kept it float), got {sorted(heads)}")
    units = model_units(blocks, heads == {"scheme"})
    dmg = [[0.0] * len(candidates) for _ in units]
    unc = [[0.0] * len(candidates) for _ in units]
    for c, (i, r) in enumerate(found):
        parts = {s.part: s for s in r.sensitivity}
        for u, unit in enumerate(units):
            s = parts.get(unit.name)
            if s is None:
                raise ProblemError(f"{path}: rows[{i}].sensitivity: candidate {r.scheme!r} has no unit "
                                   f"{unit.name!r} (of {len(units)}), got {len(parts)} parts")
            dmg[u][c], unc[u][c] = float(s.kld), float(s.kld_unc)
    return units, dmg, unc


def costs(path: str, rows: Sequence[Any], candidates: Sequence[Any], units: Sequence[Unit], m: int, context: int,
          method: Optional[str]) -> tuple[list[list[float]], float, str]:
    """Per unit and candidate, the unit's µs at M (its linears' ``stream`` medians summed), the fixed
    rest (the base candidate's step by ``method`` less its units' µs) and the method used.

    Args:
        path: the step file; rows: its rows (:class:`qbench.step.row.StepRow`).
        candidates: the scheme entries, the first the base; units: the problem's units.
        m, context: the deployment's point; method: the step method (None: the base row's decision method).

    Raises:
        ProblemError: a candidate with no ok row at (m, context), a row whose LM head is not what the units say
            (quantized when a unit is the head, else not), a linear with no ``stream`` time, the base row without a
            step time by ``method``.
    """
    from qbench.judge import decision_method

    picked = []
    head = any("lm_head" in unit.roles for unit in units)
    for c in candidates:
        options = json.dumps(c.options.model_dump(exclude={"label", "mode"}), sort_keys=True)
        mode = c.options.mode
        match = [(i, r) for i, r in enumerate(rows) if r.m == m and r.context == context
                 and (r.scheme == c.label or _same_scheme(r, c.name, options, mode))]
        if not match:
            have = sorted({(r.m, r.context) for r in rows if r.scheme == c.label})
            raise ProblemError(f"{path}: rows: candidate {c.label!r} has no cost: no step row at M={m}, context="
                               f"{context} (its rows: {', '.join(f'M={a}/{b}' for a, b in have) or 'none'}), got "
                               f"{c.label!r}")
        i, r = match[0]
        if r.status != "ok" or not r.linear:
            raise ProblemError(f"{path}: rows[{i}].status: candidate {c.label!r} has no cost at M={m}, context="
                               f"{context}: {r.status} ({r.reason or 'no per-linear times: linear_sum = false'}), got "
                               f"{r.status!r}")
        if (r.lm_head == "scheme") != head:  # the head a unit (quantized per candidate) or in the fixed rest
            raise ProblemError(f"{path}: rows[{i}].lm_head: the search {'ranks' if head else 'does not rank'} the LM "
                               f"head as a unit, so each candidate's step must {'' if head else 'not '}quantize it "
                               f"([model] quantize_lm_head = {'true' if head else 'false'}), got {r.lm_head!r}")
        picked.append((i, r))
    times = [[0.0] * len(candidates) for _ in units]
    for c, (i, r) in enumerate(picked):
        by_role = r.linear.get("by_role") or {}
        for u, unit in enumerate(units):
            total = 0.0
            for role in unit.roles:
                stream = (by_role.get(role) or {}).get("stream")
                if not stream or stream.get("median") is None:
                    why = (by_role.get(role) or {}).get("reason") or "not in the step (a float LM head is not timed as a unit)"
                    raise ProblemError(f"{path}: rows[{i}].linear.by_role.{role}: candidate {r.scheme!r} has no "
                                       f"stream time for {role} ({why}), got {_show(stream)}")
                total += float(stream["median"])
            times[u][c] = total
    i, base = picked[0]
    method = method or decision_method(base)
    step = base.step_us(method) if method else None
    if step is None:
        raise ProblemError(f"{path}: rows[{i}].latency_us.{method}: the base candidate {base.scheme!r} has no step "
                           f"time by {method} at M={m}, context={context}, got "
                           f"{_show(sorted(k for k, v in base.latency_us.items() if v))}")
    fixed = step - sum(times[u][0] for u in range(len(units)))
    return times, fixed, method


def build(quality_path: str, quality_doc: Any, step_path: str, step_doc: Any, candidates: Sequence[Any],
          m: int, context: int, method: Optional[str] = None) -> Problem:
    """The :class:`Problem` of ``candidates`` (scheme entries, the first the base) from a quality
    result with unit sensitivity and a step result at (``m``, ``context``).

    Args:
        quality_path, quality_doc: the damage file and its :class:`qbench.results.ResultDoc`.
        step_path, step_doc: the cost file and its document.
        candidates: the search's candidates (scenario scheme entries), the base first.
        m, context: the deployment's M and KV-cache context.
        method: the step method the fixed rest is read by (None: the base row's decision method).

    Raises:
        ProblemError: files of different checkpoints or configs (:func:`qbench.decision.pairing`), or
            any refusal of :func:`damages` and :func:`costs`.
    """
    from qbench.decision import kv_caches, pairing

    if quality_doc.job != "quality":
        raise ProblemError(f"{quality_path}: rows[0].job: the damage half is a quality result, got {quality_doc.job!r}")
    if step_doc.job != "step":
        raise ProblemError(f"{step_path}: rows[0].job: the cost half is a model-step result, got {step_doc.job!r}")
    why, note = pairing([step_doc], [quality_doc])
    if why:
        raise ProblemError(f"{step_path}: checkpoint_id: {why}")
    if why := kv_caches([step_doc], [quality_doc]):
        raise ProblemError(f"{step_path}: rows[].kv_cache: {why}")
    blocks = {r.blocks for r in step_doc.rows}
    if len(blocks) != 1:
        raise ProblemError(f"{step_path}: rows[].blocks: the step rows hold models of different depths, got {sorted(blocks)}")
    units, dmg, unc = damages(quality_path, quality_doc.rows, candidates, blocks.pop())
    times, fixed, method = costs(step_path, step_doc.rows, candidates, units, m, context, method)
    linears = sum(row[0] for row in times)
    seeded = all(r.weight_source.startswith("seeded") for r in step_doc.rows)
    q0 = next(r for r in quality_doc.rows if r.scheme == candidates[0].label)
    span = getattr(q0, "span", None)
    sources = {
        "damage": (f"{quality_path}: each unit quantized alone inside the {q0.reference.dtype if q0.reference else ''} "
                   f"reference, mean KLD over {q0.chunks} chunks of {q0.chunk} tokens of {q0.text}"
                   + (f" (span {span})" if span else "")),
        "cost": (f"{step_path}: sum of separate linears (q, k, v timed one by one: engines fuse them), each the "
                 f"stream median at M={m} on {step_doc.rows[0].device}"),
        "fixed": f"the {candidates[0].label} step by {method} less the sum of its units' stream times, M={m}, context={context}",
    }
    if fixed < 0:  # the linears timed alone outlast the whole step: a busy CPU, or copies slower than warm weights
        sources["fixed"] += (f"; the sum ({linears:,.1f} µs) exceeds the step ({fixed + linears:,.1f} µs), so the rest "
                             f"is taken as 0: the per-linear times do not add up to this step (predicted times rank "
                             f"recipes by their linears alone; the verified recipes' measured steps decide)")
        fixed = 0.0
    if note:
        sources["pairing"] = note
    notes = {}
    if seeded:
        sources["cost"] += "; seeded weights of the same config (a step's time depends on shapes, not values)"
        notes = {c.label: VALUE_DEPENDENT_SPEED[c.name] for c in candidates if c.name in VALUE_DEPENDENT_SPEED}
    labels = {c.label for c in candidates}
    emulated = tuple(r.scheme for r in quality_doc.rows if r.emulated and r.scheme in labels)
    whole, units_sum = q0.stats.kld, sum(row[0] for row in dmg)
    fixed_kld = max(0.0, float(whole.mean) - units_sum)
    sources["fixed_kld"] = (f"the {candidates[0].label} row's whole-model KLD {whole.mean:.4g} less the sum of its "
                            f"units' {units_sum:.4g}: {fixed_kld:.4g} nats/token no unit carries (attention and the "
                            f"norms at the activation dtype; for a quantized base, its units' non-additivity too), "
                            f"added to every predicted KLD")
    if whole.mean < units_sum:
        sources["fixed_kld"] += ("; the whole row is below its units' sum (their damages overlap), so the rest is "
                                 "taken as 0")
    few = {r.scheme: f.text for r in quality_doc.rows for f in r.flags if f.name == "few-calibration-tokens"}
    calibrated = [r for r in quality_doc.rows if r.scheme in labels and r.calibration is not None]
    if calibrated:
        c = calibrated[0].calibration
        sources["quantizer_calibration"] = (f"{', '.join(r.scheme for r in calibrated)} calibrated on chunks "
                                            f"{c.first_chunk}..{c.first_chunk + c.chunks - 1} of {c.chunk} tokens of "
                                            f"{c.text} ({c.tokens} tokens, sha256 {c.text_sha256[:12]}), in the damage "
                                            f"job and in the proof")
    return Problem(units, tuple(c.label for c in candidates), tuple(map(tuple, times)), tuple(map(tuple, dmg)),
                   tuple(map(tuple, unc)), fixed, sources, method, notes, emulated, fixed_kld=fixed_kld,
                   fixed_kld_unc=float(whole.unc) + sum(row[0] for row in unc), few_tokens=few)
