"""What the readers show of a quality result, and the one pick on speed and quality together.

``qbench run`` and ``qbench report`` print the quality table (llama.cpp's statistics per scheme);
``qbench recommend STEP.json QUALITY.json --max-kld X`` picks, per (M, context), the fastest
measured decode step whose scheme meets the quality budget measured on the same checkpoint;
``qbench model`` shows both halves in one table. The layer job's Gaussian error is never a
model decision's budget here: only quality rows measured on the model are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import Callable, Optional, Sequence

from qbench.judge import Budget
from qbench.quality.row import QualityRow
from qbench.readers.common import Refused
from qbench.render import Column, narrow, prose, render, wants_prose
from qbench.step import view as step_view
from qbench.step.recipe import identity_key

DASH = "—"


def _pm(value: Optional[float], unc: Optional[float], fmt: str = "{:.4g}") -> str:
    """``value ± unc``, the uncertainty to two significant digits (more would be noise)."""
    if value is None:
        return DASH
    return fmt.format(value) + ("" if unc is None else " ± 0" if unc == 0 else f" ± {unc:#.2g}".removesuffix("."))


def _pct(value: Optional[float], unc: Optional[float] = None) -> str:
    if value is None:
        return DASH
    return f"{100 * value:.2f}" + ("" if unc is None else f" ± {100 * unc:.2f}") + " %"


def _mib(n: Optional[int]) -> str:
    return DASH if n is None else f"{n / 2**20:.2f}"


def _stat(row: QualityRow, *path: str):
    cur = row.stats
    for p in path:
        cur = None if cur is None else getattr(cur, p)
    return cur


#: The quality table's columns (a record is a :class:`QualityRow`).
COLUMNS = [
    Column("scheme", "scheme", lambda r: r.scheme),
    Column("state", "status", lambda r: r.status + (" (emulated)" if r.emulated else "")),
    Column("ppl", "PPL", lambda r: r, cell_override=lambda r: _pm(_stat(r, "ppl"), _stat(r, "ppl_unc"))),
    Column("ppl_ratio", "ln(PPL/PPL ref)", lambda r: r,
           cell_override=lambda r: _pm(_stat(r, "ln_ppl_ratio"), _stat(r, "ln_ppl_ratio_unc"), "{:.3g}")),
    Column("kld", "mean KLD", lambda r: r, cell_override=lambda r: _pm(_stat(r, "kld", "mean"), _stat(r, "kld", "unc"), "{:.3g}")),
    Column("kld99", "KLD 99 %", lambda r: _stat(r, "kld", "p99"), lambda v: DASH if v is None else f"{v:.3g}", True),
    Column("same_top", "same top", lambda r: r, cell_override=lambda r: _pct(_stat(r, "same_top"), _stat(r, "same_top_unc"))),
    Column("dp_rms", "RMS Δp", lambda r: r, cell_override=lambda r: _pct(_stat(r, "dp", "rms"))),
    Column("stored", "model MiB", lambda r: r.model_stored_bytes, _mib, True),
    Column("flags", "flags", lambda r: ", ".join(f.name for f in r.flags) or DASH),
]
#: The narrow default of a terminal table (:func:`qbench.render.narrow`): fits 120 characters, a
#: row's status and flags in one column ("skipped", "emulated"; an ok row without flags: "—"), the
#: flags every row shares left to the notes under it ("(every row)"). ``--wide`` (and every Markdown or data format) shows all.
NARROW = ("scheme", "ppl", "kld", "kld99", "same_top", "stored")


def shared_flags(rows: Sequence[QualityRow]) -> list[str]:
    """The flag names every row carries (a checkpoint's provenance, such as ``prequantized-weights``)."""
    names = [{f.name for f in r.flags} for r in rows]
    return sorted(set.intersection(*names)) if names else []


def quality_table(rows: Sequence[QualityRow], fmt: str = "simple", narrow_view: bool = False) -> str:
    """The quality table, one line per scheme (skipped and failed rows name their reason under it);
    ``narrow_view``: the :data:`NARROW` columns, the flags every row shares left out of the cells."""
    if not narrow_view:
        return render(list(rows), COLUMNS, fmt)
    shared = set(shared_flags(rows))

    def status_flags(r: QualityRow) -> str:
        return ", ".join([*([r.status] if r.status != "ok" else []), *(f.name for f in r.flags if f.name not in shared)])

    columns = [dataclasses.replace(c, header="MiB") if c.key == "stored" else c for c in COLUMNS if c.key in NARROW]
    return render(list(rows), [*columns, Column("flags", "flags", lambda r: status_flags(r) or DASH)], fmt)


def describe(rows: Sequence[QualityRow]) -> list[str]:
    """The lines above the table: the model and its weights, the text and its chunks, the reference."""
    if not rows:
        return ["quality: no rows"]
    r = rows[0]
    ref = next((x.reference for x in rows if x.reference is not None), None)
    lines = [f"quality of {r.title} ({r.model}); weights: {r.weights}",
             f"text {r.text} (sha256 {r.text_sha256[:12]}): {r.chunks} chunks of {r.chunk} tokens, the second half of each "
             f"scored ({r.scored_per_chunk} tokens a chunk: every scored token has at least half a chunk of context, "
             "llama.cpp's convention)"]
    if ref is not None:
        lines.append(f"reference: the model with float linears in {ref.dtype}; its log-probabilities shared by every "
                     f"scheme at {ref.logprobs} precision (each scheme's rounded the same way); KLD = D(ref ‖ scheme), nats")
    return lines


def notes(rows: Sequence[QualityRow]) -> list[str]:
    """The lines under the table: why rows did not run, and each flag once with its text."""
    out = [f"{r.scheme}: {r.status}: {r.reason}" for r in rows if r.status != "ok"]
    shared = set(shared_flags(rows)) if len(rows) > 1 else set()
    seen: dict[str, str] = {}
    for r in rows:
        for f in r.flags:
            seen.setdefault(f.name, f"{f.name} ({'every row' if f.name in shared else r.scheme}): {f.text}")
    return out + list(seen.values())


#: Flags that say where a row's weights come from: a budget read off such rows says so.
WEIGHT_FLAGS = ("synthetic-weights", "prequantized-weights")


def weight_notes(rows: Sequence[QualityRow]) -> list[str]:
    """Each weight-provenance flag of ``rows`` once (``name: text``): what a pick on these rows
    cannot be taken for (seeded weights; weights already on a quantization grid)."""
    seen: dict[str, str] = {}
    for r in rows:
        for f in r.flags:
            if f.name in WEIGHT_FLAGS:
                seen.setdefault(f.name, f"{f.name}: {f.text}")
    return list(seen.values())


def sensitivity_lines(rows: Sequence[QualityRow]) -> list[str]:
    """Per scheme with a sensitivity run: its parts ranked by KL divergence, one line."""
    out = []
    for r in rows:
        if r.sensitivity:
            ranked = ", ".join(f"{s.part} {s.kld:.3g}" for s in r.sensitivity)
            out.append(f"{r.scheme}: one {r.sensitivity_by} quantized at a time, mean KLD (largest first): {ranked}")
    return out


def run_view(doc, args: argparse.Namespace) -> int:
    """``qbench run``'s and ``report``'s output for a quality result; returns the row count."""
    rows = list(doc.rows)
    wide = getattr(args, "wide", False)
    shown = prose(args.format, wide)
    if wants_prose(args.format):
        for line in describe(rows):
            print(shown(line))
    print(quality_table(rows, args.format, narrow_view=narrow(args.format, wide)))
    if wants_prose(args.format):  # a flag every row carries is said once, "(every row)", by notes()
        for line in notes(rows) + sensitivity_lines(rows):
            print(shown(line))
    return len(rows)


def _sayer(args: argparse.Namespace) -> Callable[[str], None]:
    """How ``recommend`` and ``model`` on quality files print a prose line: on stdout, wrapped in the
    narrow view (:func:`qbench.render.prose`); on stderr as it is when the format is data or
    Markdown, so stdout holds the table alone."""
    if not wants_prose(args.format):
        return lambda line: print(line, file=sys.stderr)
    shown = prose(args.format, getattr(args, "wide", False))
    return lambda line: print(shown(line))


def report_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench report QUALITY.json``: the quality table of each file."""
    for doc in docs:
        run_view(doc, args)
    return 0


# ---- one pick on both halves ----------------------------------------------------------------------

#: The quality job's budget options (:class:`qbench.judge.Budget`), in the order the command line,
#: the budget line and the JSON list them: ``qbench recommend`` takes each as ``--<name>``.
BUDGETS = (
    Budget("max_kld", "mean KLD", "mean KL divergence, nats", lambda r: _stat(r, "kld", "mean"),
           help="quality budget: mean KL divergence against the reference, nats (a quality file beside model-step "
                "files: one pick on both halves)"),
    Budget("max_ppl_ratio", "PPL ratio", "PPL(Q)/PPL(ref)", lambda r: _stat(r, "ppl_ratio"), fmt=".4g",
           help="quality budget: PPL(scheme) / PPL(reference)"),
    Budget("min_same_top", "same top", "0..1", lambda r: _stat(r, "same_top"), upper=False, most=1.0, scale=100,
           unit=" %", fmt=".2f", help="quality budget: the share of tokens whose top token is the reference's (0..1)"),
    Budget("max_kld_p99", "99th-percentile KLD", "the KL divergence 99 % of scored tokens stay under, nats",
           lambda r: _stat(r, "kld", "p99"), help="quality budget: the 99th percentile of the per-token KL divergence, "
           "nats (the tail a mean hides: a few tokens badly off)"),
)

#: A budget with its limit, as given on the command line.
Limits = Sequence[tuple[Budget, float]]


def limits_of(args: argparse.Namespace) -> list[tuple[Budget, float]]:
    """The :data:`BUDGETS` given in ``args`` with their limits, in declaration order."""
    return [(b, v) for b in BUDGETS if (v := getattr(args, b.name, None)) is not None]


def meets(row: QualityRow, limits: Limits) -> Optional[str]:
    """Why ``row`` misses the budget ``limits`` (one phrase, the first budget it misses), or None when
    it meets every one. A row without statistics misses it."""
    if row.status != "ok" or row.stats is None:
        return f"no quality measured ({row.status})"
    return next((why for b, limit in limits if (why := b.misses(row, limit))), None)


def _identity(row) -> tuple:
    options = json.dumps({k: v for k, v in (row.options or {}).items() if k not in ("label", "mode")}, sort_keys=True)
    return row.base_scheme, options, identity_key(getattr(row, "recipe", None))


def quality_of(step_row, quality: Sequence[QualityRow]) -> Optional[QualityRow]:
    """The quality row of a step row's scheme: same base scheme and options (its eager or compiled
    form: both run the same kernels) and, for a mixed recipe, the same scheme per role and kept
    blocks (:func:`qbench.step.recipe.identity_key`; a recipe never pairs with its base scheme's
    plain row), measured on the same model."""
    key = _identity(step_row)
    for q in quality:
        if _identity(q) == key:
            return q
    return None


def _split(paths: Sequence[str], docs: Sequence) -> tuple[list, list[QualityRow]]:
    """The step rows and the quality rows of the files; any other kind is refused (a per-layer file is
    not a speed half: its times are one linear layer's, not the model's step)."""
    for path, doc in zip(paths, docs):
        if doc.job not in ("step", "quality"):
            raise Refused(f"{path}: a {doc.job} result cannot be the speed half of a model decision: give a model-step "
                          "result (qbench run of a [model] scenario) beside the quality file")
    steps = [r for d in docs if d.job == "step" for r in d.rows]
    quality = [r for d in docs if d.job == "quality" for r in d.rows]
    return steps, quality


def _pair(docs: Sequence) -> Optional[str]:
    """:func:`pairing` of the step and the quality files of ``docs``: its note (None: nothing to
    say); raises :class:`~qbench.readers.common.Refused` with its refusal."""
    why, note = pairing([d for d in docs if d.job == "step"], [d for d in docs if d.job == "quality"])
    if why:
        raise Refused(why)
    return note


def _one_checkpoint(quality: list[QualityRow]) -> Optional[str]:
    """Why the quality rows are not all of one checkpoint's weights over one text, or None: schemes
    are compared on the same model and tokens, never across models."""
    weights, texts = {r.weights for r in quality}, {r.text_sha256 for r in quality}
    if len(weights) > 1:
        return (f"the quality files hold rows of {len(weights)} different weights ({'; '.join(sorted(weights))}): "
                f"compare schemes on one checkpoint at a time")
    if len(texts) > 1:
        return f"the quality files score {len(texts)} different texts: compare schemes over the same tokens"
    return None


_CHECKPOINT = re.compile(r"checkpoint (.+) \(([^()]+)\)")


def _normal(source: str, resolve: bool = False) -> str:
    """A weight source with its checkpoint path normalized: ``checkpoint my/../data/x (bf16)`` ->
    ``checkpoint data/x (bf16)`` (``..`` collapsed); with ``resolve`` made absolute, its links
    followed (two spellings of one folder compare equal); any other source as it is."""
    m = _CHECKPOINT.fullmatch(source)
    return source if m is None else f"checkpoint {(os.path.realpath if resolve else os.path.normpath)(m[1])} ({m[2]})"


#: The config keys a decode step's time depends on (the shapes of its tensors), in the order said.
SHAPE_KEYS = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "blocks")


def shapes_of(doc) -> Optional[tuple[int, ...]]:
    """The :data:`SHAPE_KEYS` of the model a result file ran (its scenario's ``[model]`` preset,
    config or checkpoint, read as the run read it: relative to the scenario file), or None when it
    cannot be read here (a config or checkpoint folder not at that path)."""
    from qbench.step.config import ConfigError
    from qbench.step.spec import ModelSpec, resolve

    extra = doc.scenario.model_extra or {}
    model = extra.get("model") or {}
    try:
        spec = ModelSpec(**{k: model[k] for k in ("name", "config", "checkpoint") if model.get(k) is not None})
        config = resolve(spec, extra.get("source") or "<scenario>")
    except (ConfigError, ValueError, OSError):
        return None
    return tuple(getattr(config, k) for k in SHAPE_KEYS)


def _shape_text(shape: Optional[tuple[int, ...]]) -> str:
    return "a config not readable from here" if shape is None else ", ".join(f"{k} {v}" for k, v in zip(SHAPE_KEYS, shape))


def pairing(step_docs: Sequence, quality_docs: Sequence) -> tuple[Optional[str], Optional[str]]:
    """Whether the step files' rows are a speed half of the quality files' checkpoint: ``(refusal,
    note)``, one of them None. The rule, first that applies: both sides carry a ``checkpoint_id``
    (the checkpoint's content digest) -> they must be equal, wherever the runs started; the step ran
    seeded weights of the quality checkpoint's config (:data:`SHAPE_KEYS` equal: a step's time
    depends on shapes, not values) -> accepted, and the note says so; else the weight sources with
    their paths resolved (:func:`_normal`) must be equal. The refusal says what differed."""
    steps = [r for d in step_docs for r in d.rows]
    quality = [r for d in quality_docs for r in d.rows]
    step_ids, quality_ids = {r.checkpoint_id for r in steps}, {r.checkpoint_id for r in quality}
    if None not in step_ids and None not in quality_ids:
        if step_ids == quality_ids and len(quality_ids) == 1:
            return None, None
        return (f"the step files' checkpoint (sha256 {'; '.join(sorted(i[:12] for i in step_ids))}) is not the quality "
                f"files' (sha256 {'; '.join(sorted(i[:12] for i in quality_ids))}): their config, tensors or bytes differ; a "
                "model decision takes speed and quality of the same checkpoint"), None
    step_sources = sorted({_normal(r.weight_source) for r in steps})
    quality_sources = sorted({_normal(r.weights) for r in quality})
    if all(r.weight_source.startswith("seeded") for r in steps):
        step_shapes = {shapes_of(d) for d in step_docs}
        quality_shapes = {shapes_of(d) for d in quality_docs}
        if len(step_shapes) == 1 and step_shapes == quality_shapes and None not in step_shapes:
            return None, (f"speed measured on seeded weights of the same config ({_shape_text(next(iter(step_shapes)))}) "
                          f"as the quality rows' ({'; '.join(quality_sources)}): a step's time depends on the shapes, "
                          "not the weights' values")
        return (f"the step files ran seeded weights of {'; '.join(_shape_text(s) for s in step_shapes)}, the quality "
                f"files {'; '.join(quality_sources)} of {'; '.join(_shape_text(s) for s in quality_shapes)}: a seeded "
                "speed half must have the quality checkpoint's config"), None
    if {_normal(r.weight_source, True) for r in steps} == {_normal(r.weights, True) for r in quality} \
            and len(quality_sources) == 1:
        return None, None
    paths = all(s.startswith("checkpoint ") for s in step_sources + quality_sources)
    return (f"the step files' weights ({'; '.join(step_sources)}) are not the quality files' "
            f"({'; '.join(quality_sources)}): "
            + ("the paths differ and the files carry no checkpoint_id to compare contents by (older files); "
               if paths else "") + "a model decision takes speed and quality of the same checkpoint"), None


def recommend_records(steps: list, quality: list[QualityRow], limits: Limits, baseline: str = "bf16") -> list[dict]:
    """Per (M, context): the fastest measured step among the schemes whose quality on the same
    checkpoint meets the budget (ties within noise broken as :func:`qbench.step.view.recommend`
    breaks them, the lower error being the lower mean KL divergence: this checkpoint's, not the
    step's seeded logits error), with its speed-up over ``baseline`` and its quality beside it."""
    ok = {r.scheme for r in steps if (q := quality_of(r, quality)) is not None and meets(q, limits) is None}

    def kld(row) -> Optional[float]:
        q = quality_of(row, quality)
        return None if q is None else _stat(q, "kld", "mean")

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
    """What the join leaves out, each side named: step schemes without a quality row, and quality
    schemes without a step row (never picked: they have no speed half)."""
    paired = {q.scheme for r in steps if (q := quality_of(r, quality)) is not None}
    no_quality = sorted({r.scheme for r in steps if quality_of(r, quality) is None})
    no_step = [q.scheme for q in quality if q.scheme not in paired]
    return ((["no quality row (never picked): " + ", ".join(no_quality)] if no_quality else [])
            + (["no step row (quality only, never picked): " + ", ".join(no_step)] if no_step else []))


def recommend_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench recommend STEP.json QUALITY.json --max-kld X``: one pick per (M, context) on both
    halves; exit 0 with a pick, 1 without. A quality file alone: the schemes within the budget."""
    limits = limits_of(args)
    if not limits:
        terms = [f"{b.flag} ({b.terms})" for b in BUDGETS]
        raise Refused("a quality file takes a budget in the field's terms: " + ", ".join(terms[:-1]) + " and/or "
                      + terms[-1] + "; --max-rel-err is the layer job's synthetic error, never a model decision's budget")
    steps, quality = _split(paths, docs)
    if (why := _one_checkpoint(quality)):
        raise Refused(why)
    say = _sayer(args)
    if not steps:
        within = [(q, meets(q, limits)) for q in quality]
        print(f"quality budget: {_budget_text(limits)} (no step file given: no speed half)")
        print(render([{"scheme": q.scheme, "meets": "yes" if why is None else f"no: {why}"} for q, why in within],
                     [Column("scheme", "scheme", lambda r: r["scheme"]), Column("meets", "within budget",
                                                                                 lambda r: r["meets"])], args.format))
        for line in weight_notes(quality):
            say(line)
        return 0 if any(why is None for _, why in within) else 1
    paired = _pair(docs)
    baseline = getattr(args, "baseline", "bf16")
    rec = recommend_records(steps, quality, limits, baseline=baseline)
    if getattr(args, "format", "simple") == "json":
        print(json.dumps({"budget": {b.name: getattr(args, b.name, None) for b in BUDGETS},
                          "by_m_context": rec}, indent=2))
        return 0 if any(r["pick"] for r in rec) else 1
    first = steps[0]
    machine = next((d.machine for d in docs if d.job == "step"), first.device)
    say(f"{first.title} ({first.model}): per M and context, the fastest decode step measured on {machine} "
        f"({', '.join(sorted({r['method'] for r in rec if r['method']})) or 'no method'}) whose scheme meets "
          f"{_budget_text(limits)} on this checkpoint (quality file: {', '.join(p for p, d in zip(paths, docs) if d.job == 'quality')})")
    cols = [Column("m", "M", lambda r: r["m"], numeric=True), Column("context", "context", lambda r: r["context"], numeric=True),
            Column("pick", "pick", lambda r: r["pick"] or "none within budget"),
            Column("speedup", f"×{baseline}", lambda r: r["speedup"], lambda v: DASH if v is None else f"{v:.2f}×", True),
            Column("step_us", "step µs", lambda r: r["step_us"], lambda v: DASH if v is None else f"{v:,.0f}", True),
            Column("kld", "mean KLD", lambda r: r, cell_override=lambda r: DASH if not r["quality"] else
                   _pm(r["quality"]["kld"], r["quality"]["kld_unc"], "{:.3g}")),
            Column("same_top", "same top", lambda r: r, cell_override=lambda r: DASH if not r["quality"] else
                   _pct(r["quality"]["same_top"])),
            Column("ties", "tied within noise", lambda r: ", ".join(r["ties"]) or DASH)]
    print(render(rec, cols, args.format))
    if paired:
        say(paired)
    for line in step_view.pick_notes(rec, steps, error="the lower mean KLD on this checkpoint"):
        say(line)
    missed = sorted({f"{q.scheme} ({w})" for q in quality if (w := meets(q, limits))})
    if missed:
        say("outside the budget: " + "; ".join(missed))
    for line in unpaired(steps, quality):
        say(line)
    if any(q.emulated for q in quality):
        say("emulated quality rows: the scheme's kernel did not run there; its dequantized weights did")
    for line in weight_notes(quality):
        say(line)
    return 0 if any(r["pick"] for r in rec) else 1


def model_view(args: argparse.Namespace, paths: list[str], docs: list) -> int:
    """``qbench model STEP.json QUALITY.json``: per scheme, the measured step (median per M and
    context, speed-up over bf16) beside its quality on the same checkpoint."""
    steps, quality = _split(paths, docs)
    if (why := _one_checkpoint(quality)):
        raise Refused(why)
    paired = _pair(docs) if steps else None
    for path, doc in zip(paths, docs):  # NAME is the files' model (its path or title), as for a step file alone
        if not any(args.name in (r.model, r.title) for r in doc.rows):
            held = ", ".join(sorted({f"{r.title} ({r.model})" for r in doc.rows}))
            raise Refused(f"{path}: a {doc.job} result of {held}, not of {args.name}")
    sp = step_view.speedups(steps) if steps else {}
    doubts = step_view.speedup_doubts(steps) if steps else {}
    points = sorted({(r.m, r.context) for r in steps})
    records, doubted = [], []
    for q in quality:
        rec = {"scheme": q.scheme, "q": q}
        for r in steps:
            if quality_of(r, [q]) is not None and r.status == "ok":
                method = step_view.decision_method(r)
                value = sp.get(r.key, {}).get(method) if method else None
                key = f"M={r.m}/{r.context}"
                if value is not None and (rec.get(key) is None or value > rec[key][0]):
                    rec[key] = (value, doubts.get(r.key, []), r.scheme)
        for key in [k for k in rec if k.startswith("M=")]:
            value, doubt, scheme = rec[key]
            if doubt:
                doubted.append((f"{scheme} {key} [{', '.join(doubt)}]", doubt))
        records.append(rec)
    cols = [Column("scheme", "scheme", lambda r: r["scheme"]),
            Column("kld", "mean KLD", lambda r: r, cell_override=lambda r: _pm(_stat(r["q"], "kld", "mean"),
                                                                                _stat(r["q"], "kld", "unc"), "{:.3g}")),
            Column("ppl", "PPL ratio", lambda r: _stat(r["q"], "ppl_ratio"), lambda v: DASH if v is None else f"{v:.4f}", True),
            Column("same_top", "same top", lambda r: r, cell_override=lambda r: _pct(_stat(r["q"], "same_top"))),
            Column("stored", "MiB", lambda r: r["q"].model_stored_bytes, _mib, True)]
    for m, context in points:
        key = f"M={m}/{context}"
        cols.append(Column(key, key, lambda r, k=key: r.get(k), lambda v: DASH if v is None else
                           f"{v[0]:.2f}×" + ("*" if v[1] else ""), True))
    short = narrow(args.format, getattr(args, "wide", False))
    if short:  # the narrow default: mean KLD and same top judge quality; --wide adds the PPL ratio
        cols = [c for c in cols if c.key != "ppl"]
    say = _sayer(args)
    if quality:
        for line in describe(quality):
            say(line)
    print(render(records, cols, args.format))
    if steps:
        say("M=m/context: the measured decode step's speed-up over bf16 at that M and context (the fastest form of "
            "the scheme: eager or compiled); the step decides a model, the layer view a kernel")
    if doubted:
        say("*: a speed-up whose step or bf16 step is flagged, not a ratio to rank by: "
            + "; ".join(text for text, _ in doubted) + "; " + step_view.flag_legend([n for _, d in doubted for n in d]))
    if paired:
        say(paired)
    for line in unpaired(steps, quality) if steps else []:
        if line.startswith("no quality row"):
            say(line.replace("(never picked)", "(not in the table)"))
    for line in notes(quality):
        say(line)
    return 0
