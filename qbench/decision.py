"""The one pick on speed and quality together: a decode-step file's speed joined with a quality file's damage on the
same checkpoint (``qbench recommend STEP.json QUALITY.json --max-kld X``, ``qbench model``). The two job kinds
meet only here, above both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from qbench.model.recipe import identity_key
from qbench.quality.row import QualityRow
from qbench.quality.view import (BUDGETS, DASH, Limits, bound_notes, describe, limits_of, meets, mib, notes, pct, pm,
                                 stat, weight_notes)
from qbench.readers.common import Refused
from qbench.render import Column
from qbench.render.columns import entry, fmt_num
from qbench.render.view import View, show
from qbench.row import kv_cache_kind
from qbench.step import view as step_view


def _identity(row) -> tuple:
    options = json.dumps({k: v for k, v in (row.options or {}).items() if k not in ("label", "mode")}, sort_keys=True)
    return row.base_scheme, options, identity_key(getattr(row, "recipe", None))


def quality_of(step_row, quality: Sequence[QualityRow]) -> Optional[QualityRow]:
    """The quality row of a step row's scheme: same base scheme and options (eager or compiled) and, for a recipe,
    the same :func:`qbench.model.recipe.identity_key`; or None."""
    key = _identity(step_row)
    return next((q for q in quality if _identity(q) == key), None)


def _halves(paths: Sequence[str], docs: Sequence) -> tuple[list, list[QualityRow], Optional[str], list[str]]:
    """``(steps, quality, twice, paired)``: the step rows, the quality rows (the first file's per scheme; ``twice``
    says so) and the notes of :func:`pairing` and :func:`lm_heads`. Refused: a file of another kind, a step row in two
    files, quality rows of several checkpoints, texts or cuts, halves that do not pair, ran different KV caches or
    treated the LM head differently."""
    for path, doc in zip(paths, docs):
        if doc.job not in ("step", "quality"):
            raise Refused(f"{path}: a {doc.job} result cannot be the speed half of a model decision: give a model-step "
                          "result (qbench run of a [model] scenario) beside the quality file")
    if (twice := step_view.repeated(paths, docs)):
        path, r, earlier = twice
        raise Refused(f"{path}: {r.scheme} at M={r.m}, context {r.context} is in {earlier} too: a model "
                      "decision reads one run per step row; to compare runs give the step files alone")
    steps = [r for doc in docs if doc.job == "step" for r in doc.rows]
    first: dict[str, tuple[str, QualityRow]] = {}
    also: dict[str, list[str]] = {}
    for path, doc in zip(paths, docs):
        for r in doc.rows if doc.job == "quality" else []:
            if first.setdefault(r.scheme, (path, r))[1] is not r:
                also.setdefault(r.scheme, []).append(path)
    said = None
    if also:  # two measurements of one scheme: the first file's is read, and the reader is told
        said = (f"{len(also)} scheme(s) have a quality row in more than one file ("
                + "; ".join(f"{s}: {first[s][0]}, {', '.join(p)}" for s, p in list(also.items())[:3])
                + (", ..." if len(also) > 3 else "") + "): the first file's row is used, the others are not read")
    if (why := _one_checkpoint([r for d in docs if d.job == "quality" for r in d.rows])):
        raise Refused(why)
    halves = [d for d in docs if d.job == "step"], [d for d in docs if d.job == "quality"]
    where = [p for p, d in zip(paths, docs) if d.job == "step"], [p for p, d in zip(paths, docs) if d.job == "quality"]
    why, note = pairing(*halves, *where) if steps else (None, None)
    if why or (steps and (why := kv_caches(*halves))):
        raise Refused(why)
    why, unknown = lm_heads(*halves) if steps else (None, None)
    if why:
        raise Refused(why)
    return steps, [r for _, r in first.values()], said, [n for n in (note, unknown) if n]


def _weights_key(row: QualityRow) -> str:
    """A quality row's weights: its checkpoint's content digest, else its normalized source."""
    return f"sha256 {row.checkpoint_id[:12]}" if row.checkpoint_id else _normal(row.weights)


def _one_checkpoint(quality: list[QualityRow]) -> Optional[str]:
    """Why the quality rows are not of one checkpoint over one text cut the same way, or None."""
    weights = {_weights_key(r) for r in quality}
    texts = {r.text_sha256 for r in quality}
    cuts = {(r.chunk, r.chunks) for r in quality}
    if len(weights) > 1 or (len({r.checkpoint_id is None for r in quality}) > 1):
        shown = sorted({f"{_normal(r.weights)}, {_weights_key(r)}" if r.checkpoint_id else _normal(r.weights)
                        for r in quality})
        return (f"the quality files hold rows of {len(shown)} different weights ({'; '.join(shown)}): compare schemes "
                "on one checkpoint at a time (rows without a checkpoint_id, from older files, are compared by path)")
    if len(texts) > 1:
        return f"the quality files score {len(texts)} different texts: compare schemes over the same tokens"
    if len(cuts) > 1:
        ways = "; ".join(f"{c} chunks of {k}" for k, c in sorted(cuts))
        return f"the quality files cut the text {len(cuts)} ways ({ways}): compare schemes over the same chunks"
    return None


_CHECKPOINT = re.compile(r"checkpoint (.+) \(([^()]+)\)")


def _normal(source: str, resolve: bool = False) -> str:
    """A weight source with its checkpoint path normalized (``resolve``: absolute, links followed)."""
    m = _CHECKPOINT.fullmatch(source)
    return source if m is None else f"checkpoint {(os.path.realpath if resolve else os.path.normpath)(m[1])} ({m[2]})"


#: The config keys a decode step's time depends on (the shapes of its tensors), in the order said.
SHAPE_KEYS = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "blocks")


def _scenario_path(doc, path: Optional[str] = None) -> str:
    """The scenario file a result file ran, as readable from here: its recorded ``source`` (written relative to the
    run's working directory) when it exists as written, else under the nearest folder above the result file ``path``
    that holds it (a repository's ``results/<machine>/x.json`` beside its ``scenarios/``: committed files read from
    any working directory), else as recorded."""
    source = str((doc.scenario.model_extra or {}).get("source") or "<scenario>")
    if path is None or os.path.isabs(source) or os.path.exists(source):
        return source
    return next((str(folder / source) for folder in Path(path).resolve().parents if (folder / source).is_file()), source)


def config_of(doc, path: Optional[str] = None):
    """The :class:`qbench.model.config.StepModelConfig` of the model a result file ran (its scenario's ``[model]``:
    a preset, a config.json or a checkpoint, relative to :func:`_scenario_path`), or None when it cannot be read here
    (a checkpoint folder that is not on this machine)."""
    from qbench.model.config import ConfigError
    from qbench.step.spec import ModelSpec, resolve

    model = (doc.scenario.model_extra or {}).get("model") or {}
    try:
        spec = ModelSpec(**{k: model[k] for k in ("name", "config", "checkpoint") if model.get(k) is not None})
        return resolve(spec, _scenario_path(doc, path))
    except (ConfigError, ValueError, OSError):
        return None


def shapes_of(doc, path: Optional[str] = None) -> Optional[tuple[int, ...]]:
    """The :data:`SHAPE_KEYS` of the model a result file ran (:func:`config_of`), or None when it cannot be read here."""
    return _shapes(config_of(doc, path))


def parameter_counts(config) -> tuple[int, int]:
    """``(linear, rest)`` of a config: the weights of every block's linears, and every other parameter of the model
    with a float LM head (embedding, the blocks' biases and two norms, the final norm, the LM head unless tied)."""
    bias = sum(config.linear_shapes()[role][1] for role in config.biased)
    head = config.vocab * config.hidden
    return (config.blocks * config.block_linear_params(),
            head * (1 if config.tie_embeddings else 2) + config.blocks * (2 * config.hidden + bias) + config.hidden)


def counts_agree(config, rows: Sequence[QualityRow]) -> Optional[str]:
    """What in quality ``rows`` shows they ran a model of ``config``'s sizes when their checkpoint cannot be read, or
    None: every ok row of one scheme everywhere has ``config``'s linear weights (with the LM head when it quantized
    it), and the rest is covered too: by a row that quantized the head, or by a float-head row's stored bytes beyond
    its linears (embedding, norms, head: 2 or 4 bytes each). Counts cannot tell heads × head_dim apart, and the note
    that joins on them says so."""
    linear, rest = parameter_counts(config)
    head = config.vocab * config.hidden
    plain = [r for r in rows if r.status == "ok" and not r.recipe]
    if not plain or any(r.linear_params != linear + (head if r.lm_head == "scheme" else 0) for r in plain):
        return None
    stored = [r for r in plain if r.lm_head == "float" and not r.emulated and r.model_stored_bytes
              and r.linear_stored_bytes is not None]
    if any(r.model_stored_bytes - r.linear_stored_bytes not in (2 * rest, 4 * rest) for r in stored):
        return None
    if not stored and all(r.lm_head != "scheme" for r in plain):
        return None
    return f"linear weights {linear:,}" + (f", the rest {rest:,}" if stored else f", LM head {head:,}")


def _shapes(config) -> Optional[tuple[int, ...]]:
    return None if config is None else tuple(getattr(config, k) for k in SHAPE_KEYS)


def _shape_text(shape: Optional[tuple[int, ...]]) -> str:
    if shape is None:
        return "a config not readable from here"
    return ", ".join(f"{k} {v}" for k, v in zip(SHAPE_KEYS, shape))


def pairing(step_docs: Sequence, quality_docs: Sequence, step_paths: Sequence[str] = (),
            quality_paths: Sequence[str] = ()) -> tuple[Optional[str], Optional[str]]:
    """``(refusal, note)``, one of them None: whether the step files are a speed half of the quality files'
    checkpoint: equal ``checkpoint_id`` digests; or seeded step weights of the quality checkpoint's config
    (:data:`SHAPE_KEYS`: a step's time depends on shapes, not values; a checkpoint not on this machine: its rows'
    parameter counts, :func:`counts_agree`), noted; else equal normalized weight sources. ``*_paths``: the files
    the docs were read from (their scenarios found from any working directory, :func:`_scenario_path`)."""
    def configs(docs: Sequence, paths: Sequence[str]) -> list:
        return [config_of(d, p) for d, p in zip(docs, [*paths, *[None] * len(docs)])]

    steps = [r for d in step_docs for r in d.rows]
    quality = [r for d in quality_docs for r in d.rows]
    step_ids, quality_ids = {r.checkpoint_id for r in steps}, {r.checkpoint_id for r in quality}
    if None not in step_ids and None not in quality_ids:
        if step_ids == quality_ids and len(quality_ids) == 1:
            return None, None
        return (f"the step files' checkpoint (sha256 {'; '.join(sorted(i[:12] for i in step_ids))}) is not the "
                f"quality files' (sha256 {'; '.join(sorted(i[:12] for i in quality_ids))}): their config, tensors or "
                "bytes differ; a model decision takes speed and quality of the same checkpoint"), None
    step_sources = sorted({_normal(r.weight_source) for r in steps})
    quality_sources = sorted({_normal(r.weights) for r in quality})
    step_configs, quality_configs = configs(step_docs, step_paths), configs(quality_docs, quality_paths)
    if all(r.weight_source.startswith("seeded") for r in steps):
        step_shapes = {_shapes(c) for c in step_configs}
        quality_shapes = {_shapes(c) for c in quality_configs}
        if len(step_shapes) == 1 and step_shapes == quality_shapes and None not in step_shapes:
            return None, (f"speed measured on seeded weights of the same config "
                          f"({_shape_text(next(iter(step_shapes)))}) as the quality rows' "
                          f"({'; '.join(quality_sources)}): a step's time depends on the shapes, not the weights' "
                          "values")
        counts = (counts_agree(step_configs[0], quality) if len(step_shapes) == 1 and None not in step_shapes
                  and quality_shapes == {None} else None)
        if counts:  # the checkpoint is not on this machine (a folder outside the repository): its rows' counts
            return None, (f"speed measured on seeded weights of {_shape_text(next(iter(step_shapes)))}; the quality "
                          f"rows' weights ({'; '.join(quality_sources)}) are not here to read their config, and their "
                          f"counts are the config's ({counts}; counts cannot tell heads × head_dim apart): a step's "
                          "time depends on the shapes, not the weights' values")
        unread = (" (its checkpoint is not here, and its rows' parameter counts do not show the step config's)"
                  if quality_shapes == {None} and None not in step_shapes else "")
        return (f"the step files ran seeded weights of {'; '.join(_shape_text(s) for s in step_shapes)}, the quality "
                f"files {'; '.join(quality_sources)} of {'; '.join(_shape_text(s) for s in quality_shapes)}{unread}: "
                "a seeded speed half must have the quality checkpoint's config"), None
    if (None in step_ids) != (None in quality_ids):
        shapes = [{_shapes(c) for c in cs} for cs in (step_configs, quality_configs)]
        if all(len(s) == 1 and None not in s for s in shapes) and shapes[0] != shapes[1]:  # not even one config
            return (f"the step files ran {_shape_text(next(iter(shapes[0])))}, the quality files "
                    f"{_shape_text(next(iter(shapes[1])))}: another model; a model decision takes speed and quality "
                    "of the same checkpoint"), None
        older = "step" if None in step_ids else "quality"
        return (f"the {older} files carry no checkpoint_id (written before qbench recorded a checkpoint's content) and "
                f"the others do: a path written relative to another run's working directory cannot say they are the "
                f"same checkpoint; re-run the {older} scenario on this checkpoint"), None
    if set(step_sources) == set(quality_sources) and len(quality_sources) == 1:
        return None, ("compared by the checkpoint's path: these files carry no checkpoint_id (written before qbench "
                      "recorded one)")
    paths = all(s.startswith("checkpoint ") for s in step_sources + quality_sources)
    return (f"the step files' weights ({'; '.join(step_sources)}) are not the quality files' "
            f"({'; '.join(quality_sources)}): "
            + ("the paths differ and the files carry no checkpoint_id to compare contents by (older files); "
               if paths else "") + "a model decision takes speed and quality of the same checkpoint"), None


def kv_caches(step_docs: Sequence, quality_docs: Sequence) -> Optional[str]:
    """Why the step and quality files ran different KV caches (``fp8``, or the activation dtype: a step row's
    ``kv_cache.dtype``, a quality row's ``kv_cache``), or None: a model decision takes both halves of one
    configuration, and an fp8 cache changes both the step's time and the KL divergence."""
    step, quality = ({kv_cache_kind(r.kv_cache) for d in docs for r in d.rows} for docs in (step_docs, quality_docs))
    for half, caches in (("step", step), ("quality", quality)):
        if len(caches) > 1:  # equal sets of two caches would pair rows across caches
            return (f"the {half} files ran {' and '.join(sorted(caches))} KV caches: a model decision reads one cache "
                    f"at a time; give the step and quality files of one cache")
    if step and quality and step != quality:
        return (f"the step files ran {' and '.join(sorted(step))} KV caches, the quality files "
                f"{' and '.join(sorted(quality))} ones: a model decision takes speed and quality with the same "
                "cache (pair an fp8-cache step file with an fp8-cache quality file)")
    return None


#: What a row's ``lm_head`` says the half did with the LM head, in a sentence.
_HEAD_WORDS = {"scheme": "quantized the LM head with each scheme (lm_head 'scheme')",
               "float": "kept the LM head float (lm_head 'float')",
               "none": "ran no LM head (lm_head 'none': the step ends at the final norm)"}
#: (step's, quality's ``lm_head``) -> what joining them would show.
_HEAD_MISMATCH = {("scheme", "float"): "the mean KLD would miss the quantized head's damage that the speed includes",
                  ("float", "scheme"): "the mean KLD would include a quantized head's damage whose speed the step never "
                                       "measured",
                  ("none", "float"): "the speed would leave out the LM head's time that the quality rows ran",
                  ("none", "scheme"): "the speed would leave out the LM head's time that the quality rows ran"}


def lm_heads(step_docs: Sequence, quality_docs: Sequence) -> tuple[Optional[str], Optional[str]]:
    """``(refusal, note)``: why the step and quality files treated the LM head differently (a step row's ``lm_head``:
    ``scheme``, ``float`` or ``none``; a quality row's: ``scheme`` or ``float``), or None; and a note naming the quality
    rows of older files that do not record it (not compared), or None. A model decision takes both halves of one
    configuration: a quantized head is often a model's most damaging unit (SmolLM2's, docs/quality.md), so a KLD with
    a float head beside a speed with a quantized one (or the reverse) is the price of one model and the gain of
    another."""
    step = {r.lm_head for d in step_docs for r in d.rows}
    known = [r for d in quality_docs for r in d.rows if "lm_head" in r.model_fields_set]
    quality = {r.lm_head for r in known}
    unknown = sum(len(d.rows) for d in quality_docs) - len(known)
    for half, heads in (("step", step), ("quality", quality)):
        if len(heads) > 1:  # rows of each treatment would pair across treatments
            return (f"the {half} files hold rows that " + " and rows that ".join(_HEAD_WORDS[h] for h in sorted(heads))
                    + ": a model decision reads one LM head treatment at a time; give the step and quality files of "
                    "one"), None
    if step and quality and step != quality:
        (s,), (q,) = step, quality
        return (f"the step files {_HEAD_WORDS[s]}, the quality files {_HEAD_WORDS[q]}: a model decision takes both "
                f"halves of one configuration ({_HEAD_MISMATCH[s, q]}); give a step file whose scenario's [model] "
                "quantize_lm_head matches the quality scenario's [quality] lm_head"), None
    note = (f"{unknown} quality row(s) of older files do not record what they did with the LM head: not compared with "
            f"the step rows' ({', '.join(f'lm_head {h!r}' for h in sorted(step))})") if unknown else None
    return None, note


def _machine(doc) -> str:
    """Where a step file ran: its device type and name (a CPU's model name when the device has none)."""
    kind = str(doc.env.device or "?").split(":", 1)[0]
    return f"{kind} {doc.env.device_name or (doc.env.cpu if kind == 'cpu' else None) or '?'}"


def step_machines(docs: Sequence) -> tuple[str, Optional[str]]:
    """``(machines, caveat)``: the machines the step files among ``docs`` ran on, said (``cuda NVIDIA H200``), and
    when one is a CPU, why its speed-ups are not a GPU's (else None): a speed-up is the machine's, not the scheme's,
    and the quality half (device-independent up to rounding) does not say it."""
    machines = list(dict.fromkeys(_machine(d) for d in docs if d.job == "step"))
    caveat = ("a CPU's speed-ups do not carry to a GPU (other kernels, other limits): time the step on the GPU that will "
              "serve the model" if any(m.startswith("cpu ") for m in machines) else None)
    return " and ".join(machines), caveat


def recommend_records(steps: list, quality: list[QualityRow], limits: Limits, baseline: str = "bf16") -> list[dict]:
    """:func:`qbench.step.view.recommend` among the schemes whose quality meets ``limits`` (ties: the lower mean
    KLD), each record with the pick's ``quality``."""
    ok = {r.scheme for r in steps if (q := quality_of(r, quality)) is not None and meets(q, limits) is None}

    def kld(row) -> Optional[float]:
        q = quality_of(row, quality)
        return None if q is None else stat(q, "kld", "mean")

    out = []
    for record in step_view.recommend(steps, baseline=baseline, tie_error=kld, within=lambda r: r.scheme in ok):
        row = next((r for r in steps if r.scheme == record["pick"]), None)
        q = quality_of(row, quality) if row is not None else None
        record["quality"] = None if q is None else {
            "scheme": q.scheme, "kld": q.stats.kld.mean, "kld_unc": q.stats.kld.unc, "ppl_ratio": q.stats.ppl_ratio,
            "same_top": q.stats.same_top, "emulated": q.emulated}
        out.append(record)
    return out


def _budget_text(limits: Limits) -> str:
    return ", ".join(b.text(limit) for b, limit in limits) or "no budget"


def unpaired(steps: Sequence, quality: Sequence[QualityRow]) -> list[str]:
    """Step schemes without a quality row, quality schemes without a step row."""
    paired = {q.scheme for r in steps if (q := quality_of(r, quality)) is not None}
    no_quality = sorted({r.scheme for r in steps if quality_of(r, quality) is None})
    no_step = [q.scheme for q in quality if q.scheme not in paired]
    return ((["no quality row (never picked): " + ", ".join(no_quality)] if no_quality else [])
            + (["no step row (quality only, never picked): " + ", ".join(no_step)] if no_step else []))


def recommend_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench recommend STEP.json QUALITY.json --max-kld X``: one pick per (M, context) on both halves (a quality
    file alone: the schemes within the budget); exit 0 with a pick, else 1."""
    limits = limits_of(args)
    if not limits:
        terms = [f"{b.flag} ({b.terms})" for b in BUDGETS]
        raise Refused("a quality file takes a budget in the field's terms: " + ", ".join(terms[:-1]) + " and/or "
                      + terms[-1] + "; --max-rel-err is the layer job's synthetic error, never a model decision's "
                      "budget")
    steps, quality, twice, paired = _halves(paths, docs)
    fmt, wide = args.format, getattr(args, "wide", False)
    if not steps:
        within = [{"scheme": q.scheme, "meets": "yes" if (why := meets(q, limits)) is None else f"no: {why}"}
                  for q in quality]
        said = f"quality budget: {_budget_text(limits)} (no step file given: no speed half)"
        show(within, [entry("scheme", "scheme"), entry("meets", "within budget")], fmt, wide=wide,
             describe=[*filter(None, [twice]), said], notes=[*bound_notes(quality, limits), *weight_notes(quality)])
        return 0 if any(r["meets"] == "yes" for r in within) else 1
    baseline = getattr(args, "baseline", "bf16")
    rec = recommend_records(steps, quality, limits, baseline=baseline)
    if fmt == "json":
        if twice:
            print(twice, file=sys.stderr)
        print(json.dumps({"budget": {b.name: getattr(args, b.name, None) for b in BUDGETS},
                          "by_m_context": rec}, indent=2, ensure_ascii=False))
        return 0 if any(r["pick"] for r in rec) else 1
    first = steps[0]
    machine, caveat = step_machines(docs)
    said = (f"{first.title} ({first.model}): per M and context, the fastest decode step measured on {machine} "
            f"({', '.join(sorted({r['method'] for r in rec if r['method']})) or 'no method'}) whose scheme meets "
            f"{_budget_text(limits)} on this checkpoint (quality file: "
            f"{', '.join(p for p, d in zip(paths, docs) if d.job == 'quality')})")
    missed = sorted({f"{q.scheme} ({w})" for q in quality if (w := meets(q, limits))})
    notes = [*paired, *step_view.pick_notes(rec, steps, error="the lower mean KLD on this checkpoint"),
             *(["outside the budget: " + "; ".join(missed)] if missed else []),
             *bound_notes([q for q in quality if q.scheme in {p.scheme for r in steps if (p := quality_of(r, quality))}],
                          limits, picked=[r["pick"] for r in rec if r["pick"]]), *unpaired(steps, quality),
             *(["emulated quality rows: the scheme's kernel did not run there; its dequantized weights did"]
               if any(q.emulated for q in quality) else []), *weight_notes(quality)]
    show(rec, joined_view(baseline).columns(fmt, wide), fmt, wide=wide,
         describe=[*filter(None, [twice, said, caveat])], notes=notes)
    return 0 if any(r["pick"] for r in rec) else 1


def joined_view(baseline: str = "bf16") -> View:
    """The joined recommend's table: the step pick's columns, its quality and its ties."""
    step = step_view.recommend_view(baseline)
    cols = [*(replace(c, header="pick") if c.key == "pick" else c for c in step.catalogue),  # the line above says it
            Column("kld", "mean KLD", lambda r: (r["quality"] or {}).get("kld"), cell_override=lambda r: DASH
                   if not r["quality"] else pm(r["quality"]["kld"], r["quality"]["kld_unc"], "{:.3g}")),
            Column("same_top", "same top", lambda r: (r["quality"] or {}).get("same_top"),
                   cell_override=lambda r: DASH if not r["quality"] else pct(r["quality"]["same_top"])),
            Column("ties", "tied within noise", lambda r: ", ".join(r["ties"]) or DASH)]
    keys = ["m", "context", "pick", "speedup", "step_us", "kld", "same_top", "ties"]
    return View("recommend", cols, keys, keys, keys, short=step.short)


def model_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench model STEP.json QUALITY.json``: per scheme its quality beside its measured step's speed-up over bf16
    per M and context."""
    steps, quality, twice, paired = _halves(paths, docs)
    for path, doc in zip(paths, docs):  # NAME is the files' model (its path or title), as for a step file alone
        if not any(args.name in (r.model, r.title) for r in doc.rows):
            held = ", ".join(sorted({f"{r.title} ({r.model})" for r in doc.rows}))
            raise Refused(f"{path}: a {doc.job} result of {held}, not of {args.name}")
    sp = step_view.speedups(steps) if steps else {}
    doubts = step_view.speedup_doubts(steps) if steps else {}
    points = sorted({(r.m, r.context) for r in steps})
    records, doubted, dashes = [], [], []
    for q in quality:
        mine, best = [r for r in steps if quality_of(r, [q]) is not None], {}  # "M=m/context" -> its best speed-up
        for r in (r for r in mine if r.status == "ok"):
            method = step_view.decision_method(r)
            value, key = sp.get(r.key, {}).get(method) if method else None, f"M={r.m}/{r.context}"
            if value is not None and (best.get(key) is None or value > best[key][0]):
                best[key] = (value, doubts.get(r.key, []), r.scheme)
        doubted += [(f"{scheme} {key} [{', '.join(doubt)}]", doubt)
                    for key, (_, doubt, scheme) in best.items() if doubt]
        if steps and len(points) > len(best):  # say why each '—' is one
            timed = {(r.m, r.context) for r in mine if r.status == "ok"}
            why = sorted({f"{r.status}: {r.reason or 'no reason given'}" for r in mine if r.status != "ok"})
            why += [f"no ok bf16 step at M={m}/{c}" for m, c in points if (m, c) in timed and f"M={m}/{c}" not in best]
            dashes.append(f"{q.scheme} ({'; '.join(why) if why else 'no step row'})")
        records.append({"scheme": q.scheme, "q": q, **best})
    notes_ = ([] if not steps else ["M=m/context: the measured decode step's speed-up over bf16 at that M and "
                                    "context (the fastest form of the scheme: eager or compiled); the step decides a "
                                    "model, the layer view a kernel"])
    if doubted:
        notes_.append("*: a speed-up whose step or bf16 step is flagged, not a ratio to rank by: "
                      + "; ".join(text for text, _ in doubted) + "; "
                      + step_view.flag_legend([n for _, d in doubted for n in d]))
    notes_ += [*paired, *(line.replace("(never picked)", "(not in the table)")
                                          for line in (unpaired(steps, quality) if steps else [])
                                          if line.startswith("no quality row")), *notes(quality)]
    if dashes:
        notes_.append("— under M=: no ok step of the scheme there: " + "; ".join(dashes))
    machine, caveat = step_machines(docs)
    where = [f"speed-ups (M=m/context): decode steps measured on {machine}" + (f": {caveat}" if caveat else "")
             ] if steps else []
    show(records, model_table(points).columns(args.format, getattr(args, "wide", False)), args.format,
         wide=getattr(args, "wide", False),
         describe=[*filter(None, [twice]), *(describe(quality) if quality else []), *where], notes=notes_)
    return 0


def model_table(points: Sequence[tuple[int, int]]) -> View:
    """Its table: per scheme mean KLD, PPL ratio, same top, stored MiB and the speed-up over bf16 at each (M,
    context) of ``points`` (``*``: flagged)."""
    cols = [entry("scheme", "scheme"),
            Column("kld", "mean KLD", lambda r: stat(r["q"], "kld", "mean"),
                   cell_override=lambda r: pm(stat(r["q"], "kld", "mean"), stat(r["q"], "kld", "unc"), "{:.3g}")),
            Column("ppl_ratio", "PPL ratio", lambda r: stat(r["q"], "ppl_ratio"), fmt_num(".4f"), True),
            Column("same_top", "same top", lambda r: stat(r["q"], "same_top"),
                   cell_override=lambda r: pct(stat(r["q"], "same_top"))),
            Column("stored", "MiB", lambda r: r["q"].model_stored_bytes, mib, True),
            *[Column(key, key, lambda r, k=key: r[k][0] if r.get(k) else None, numeric=True,
                     cell_override=lambda r, k=key: DASH if r.get(k) is None
                     else f"{r[k][0]:.2f}×" + ("*" if r[k][1] else "")) for key in (f"M={m}/{c}" for m, c in points)]]
    keys = [c.key for c in cols]
    return View("model", cols, [k for k in keys if k != "ppl_ratio"], keys, keys)
