"""``qbench model NAME RESULT.json...``: the linear layers of one decode step of a model, from
per-layer results.

Per scheme and M, over a preset's (:data:`PRESETS`) block shapes (``count`` of each a block) and the LM head:

    step µs    = Σ count × blocks × the row's ``stream`` median (+ the LM head's, when measured)
    stored     = Σ count × blocks × stored bytes
    HBM floor  = Σ count × blocks × the row's HBM floor (:func:`row_floor_us`)
    tokens/s   = M / step;  speed-up = baseline's step / this step

``stream`` times add up as a graph-captured step's layers do; attention, the KV cache, norms, embeddings and sampling
are not included. A scheme missing a shape is ``incomplete``; one that cannot be graph-captured is ``unusable``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from qbench.judge import DECISION_METHOD, UNUSABLE, capture_failure, resolve_method, unusable_note
from qbench.readers.common import (ACT_ON, Command, Refused, add_options, check_baseline, check_max_rel_err,
                                   incomplete_notes, job_view, one_machine, open_results)
from qbench.render import check_format, narrow, synthetic_warnings, wants_prose
from qbench.render.view import View, show
from qbench.render.columns import DASH, entry, fmt_num, fmt_us
from qbench.results import ResultDoc
from qbench.row import Row
from qbench.model.config import PRESETS as STEP_PRESETS

__all__ = ["ACT_ON", "COMMAND", "Indexed", "LinearShape", "ModelPreset", "PRESETS", "index_rows", "model_step",
           "model_view", "row_floor_us", "run_model", "show_model"]


@dataclass(frozen=True)
class LinearShape:
    """One linear shape of a model: its projections (``"q_proj, o_proj"``), ``k`` (in_features), ``n``
    (out_features), ``count`` per block (the LM head: 1) and the ``scenario`` that measures it."""

    names: str
    k: int
    n: int
    count: int
    scenario: str


@dataclass(frozen=True)
class ModelPreset:
    """A model's linear layers: ``blocks`` decoder blocks of ``block`` shapes, plus ``lm_head``."""

    name: str
    title: str
    blocks: int
    block: tuple[LinearShape, ...]
    lm_head: LinearShape


def _of_step(name: str, prefix: str) -> ModelPreset:
    """The layer view of a preset of :data:`qbench.model.config.PRESETS`: its linear shapes, one :class:`LinearShape`
    per (K, N) (the LM head last), measured by ``scenarios/<prefix>_<roles>.toml``."""
    c = STEP_PRESETS[name]
    roles: dict[tuple[int, int], list[str]] = {}
    for role, kn in c.linear_shapes().items():
        roles.setdefault(kn, []).append(role)
    *block, head = [LinearShape(", ".join(names), k, n, len(names), f"scenarios/{prefix}_"
                                f"{'_'.join(r.removesuffix('_proj') for r in names)}.toml")
                    for (k, n), names in roles.items()]
    return ModelPreset(name=c.name, title=c.title, blocks=c.blocks, block=tuple(block), lm_head=head)


#: The model presets, by the name ``qbench model`` takes: the shapes of the model library's presets
#: (:data:`qbench.model.config.PRESETS`, from Meta's config.json files), with the layer scenarios that
#: measure them (Llama-3.1-8B's linear layers are Llama-3-8B's: the presets differ in RoPE and positions).
PRESETS: dict[str, ModelPreset] = {name: _of_step(name, prefix) for name, prefix in
                                   (("llama3-8b", "llama3_8b"), ("llama3.1-8b", "llama3_8b"),
                                    ("llama3.1-70b", "llama31_70b"))}


@dataclass(frozen=True)
class Indexed:
    """One row of :func:`index_rows`: the row, its file, and its HBM floor (µs)."""

    row: Row
    source: str
    floor_us: Optional[float]


def row_floor_us(row: Row, memory_gbps: Optional[float]) -> Optional[float]:
    """The row's HBM floor (µs): its ``hbm_floor_us``, else its stored bytes / ``memory_gbps`` (GB/s, 1e9 B/s), else
    None."""
    if row.hbm_floor_us is not None or row.stored_bytes is None or not memory_gbps:
        return row.hbm_floor_us
    return row.stored_bytes / (memory_gbps * 1e3)


def index_rows(sources: Sequence[tuple[str, ResultDoc]]) -> tuple[dict, list[str]]:
    """``(index, notes)``: the rows of ``(path, doc)`` pairs by (scheme, M, K, N), each an :class:`Indexed`;
    tensor-parallel rows left out. The first file holding a key wins; a note names the files whose rows were not
    used."""
    index: dict[tuple, Indexed] = {}
    shadowed: dict[tuple, list[str]] = {}
    for path, doc in sources:
        doc = ResultDoc.of(doc)
        measured = doc.ceilings.measured if doc.ceilings is not None else None
        gbps = measured.memory_gbps if measured is not None else None
        for row in doc.rows:
            if row.tp_size not in (None, 1):
                continue
            key = (row.scheme, row.m, row.k, row.n)
            if key in index:
                shadowed.setdefault((row.k, row.n, index[key].source), []).append(path)
                continue
            index[key] = Indexed(row, path, row_floor_us(row, gbps))
    notes = [f"K={k}, N={n}: rows of {', '.join(sorted(set(paths)))} not used ({used} has them, given first)"
             for (k, n, used), paths in shadowed.items()]
    return index, notes


def _shape_record(shape: LinearShape, role: str, per_step: int, index: dict) -> dict:
    files = sorted({r.source for (_, _, k, n), r in index.items() if (k, n) == (shape.k, shape.n)})
    return {"role": role, "names": shape.names, "k": shape.k, "n": shape.n, "count": shape.count,
            "per_step": per_step, "scenario": shape.scenario, "measured": bool(files), "files": files}


def _total(parts: list, value) -> Optional[float]:
    """Σ count × ``value(Indexed)`` over ``_scheme_step``'s parts; None when a value is None."""
    values = [value(got) for _, got, _ in parts]
    return None if any(v is None for v in values) else sum(per * v for (per, _, _), v in zip(parts, values))


def model_step(preset: ModelPreset, index: dict, method: str = DECISION_METHOD,
               baseline: str = "bf16", max_rel_err: Optional[float] = None) -> dict:
    """The linear layers of one decode step of ``preset`` per scheme and M, from ``index``: the preset's names,
    ``method``, ``baseline``, ``max_rel_err``, ``shapes`` (where each is measured), ``missing`` block shapes,
    ``lm_head_included``, ``ms``, ``rows`` (per M fastest first, with ``speedup``) and ``fastest`` (M -> scheme
    or None)."""
    block = [(s, s.count * preset.blocks) for s in preset.block]
    head = _shape_record(preset.lm_head, "lm_head", preset.lm_head.count, index)
    records = [_shape_record(s, "block", per, index) for s, per in block] + [head]
    used = block + ([(preset.lm_head, preset.lm_head.count)] if head["measured"] else [])
    wanted = {(s.k, s.n) for s, _ in used}
    ms = sorted({m for (_, m, k, n) in index if (k, n) in wanted and m is not None})
    schemes = dict.fromkeys(scheme for (scheme, _, k, n) in index if (k, n) in wanted)
    rows = [r for m in ms for r in sorted((_scheme_step(s, m, used, index, method, max_rel_err) for s in schemes),
                                          key=lambda r: (r["step_us"] is None, r["step_us"] or 0))]  # timed first
    base = {r["m"]: r["step_us"] for r in rows if r["scheme"] == baseline and r["step_us"] is not None}
    for r in rows:
        b = base.get(r["m"])
        r["speedup"] = b / r["step_us"] if b and r["step_us"] else None
    return {"model": preset.name, "title": preset.title, "blocks": preset.blocks, "method": method,
            "baseline": baseline, "max_rel_err": max_rel_err, "shapes": records,
            "missing": [r for r in records if r["role"] == "block" and not r["measured"]],
            "lm_head_included": head["measured"], "ms": ms, "rows": rows,
            "fastest": {m: next((r["scheme"] for r in rows if r["m"] == m and r["status"] == "ok"), None) for m in ms}}


def _scheme_step(scheme: str, m: int, used: list, index: dict, method: str,
                 max_rel_err: Optional[float]) -> dict:
    """One (scheme, M) record: the sums (µs, bytes) over the used shapes and ``status`` (``ok``, ``over error
    budget``, ``non-finite outputs``, ``incomplete`` or ``unusable``)."""
    parts, problems, unusable = [], [], []  # parts: (count per step, Indexed, stats) of each timed shape
    for shape, per_step in used:
        where = f"{shape.k}→{shape.n}"
        got = index.get((scheme, m, shape.k, shape.n))
        if got is None:
            problems.append(f"no row at {where}")
            continue
        row = got.row
        if row.status != "ok":
            problems.append(f"{row.status} at {where}: {row.reason or 'no reason given'}")
            continue
        stats = row.stats(method)
        if stats is None:
            if capture_failure(row, method):
                unusable.append(where)
            else:
                why = row.reason_for(method)
                problems.append(f"no {method} time at {where}" + (f" ({why.text})" if why else ""))
            continue
        parts.append((per_step, got, stats))
    rec = {"scheme": scheme, "m": m, "status": "ok", "step_us": None, "hbm_floor_us": None,
           "floor_fraction": None, "stored_bytes": None, "tokens_per_s": None, "speedup": None,
           "rel_fro_max": None, "note": None}
    if unusable:
        where = "any shape" if len(unusable) == len(used) else ", ".join(unusable)
        return dict(rec, status="unusable", note=f"{UNUSABLE} (no {method} time at {where})"
                    + (f"; also {'; '.join(problems)}" if problems else ""))
    if problems:
        return dict(rec, status="incomplete", note="incomplete: " + "; ".join(problems))
    step = sum(per * stats.median for per, _, stats in parts)
    floor = _total(parts, lambda got: got.floor_us)
    stored = _total(parts, lambda got: got.row.stored_bytes)
    rels = [got.row.rel_fro for _, got, _ in parts]
    nonfinite = sum((got.row.error.nonfinite if got.row.error is not None else None) or 0 for _, got, _ in parts)
    rec.update(step_us=step, hbm_floor_us=floor, floor_fraction=None if floor is None else floor / step,
               stored_bytes=None if stored is None else int(stored),
               tokens_per_s=m * 1e6 / step, rel_fro_max=None if any(v is None for v in rels) else max(rels))
    if nonfinite:
        rec.update(status="non-finite outputs", note=f"non-finite outputs ({nonfinite})")
    elif max_rel_err is not None and (rec["rel_fro_max"] is None or rec["rel_fro_max"] > max_rel_err):
        rec.update(status="over error budget",
                   note=f"over error budget (rel_fro {fmt_num('.3g')(rec['rel_fro_max'])} > {max_rel_err:g})")
    return rec


def model_view(result: dict) -> View:
    """The model table over :func:`model_step`'s rows (narrow: the ``status`` in a word instead of the floor, GiB
    and note)."""
    method, baseline = result["method"], result["baseline"]
    cols = [entry("m", "M", str, True), entry("scheme", "scheme"),
            entry("step_us", f"step µs ({method})", "us"), entry("hbm_floor_us", "HBM floor µs", "us"),
            entry("floor_pct", "floor/step", "pct", of="floor_fraction", scale=100),
            entry("stored_gib", "stored GiB", ".2f", of="stored_bytes", scale=2.0**-30),
            entry("tokens_per_s", "tokens/s (linear only)", ".0f"),
            entry("speedup", f"speed-up vs {baseline} ({baseline} step / this step)", "ratio"),
            entry("rel_fro_max", "max rel err", ".3g"), entry("note", "note"),
            entry("step_status", "status", of="status")]  # not "status": footnotes read Rows
    wide = [c.key for c in cols if c.key != "step_status"]
    return View("model", cols, ["m", "scheme", "step_us", "tokens_per_s", "speedup", "rel_fro_max", "step_status"],
                wide, short={"tokens_per_s": "tokens/s", "speedup": f"×{baseline}"})


def describe(result: dict) -> list[str]:
    """The lines above the table: the model's shapes, what the step is and is not, whether the LM head is in."""
    block = [s for s in result["shapes"] if s["role"] == "block"]
    head = next(s for s in result["shapes"] if s["role"] == "lm_head")
    parts = "; ".join(f"{s['names']} {s['k']}→{s['n']} ×{s['count']}" for s in block)
    lines = [f"{result['title']} ({result['model']}): {result['blocks']} blocks × [{parts}] + LM head "
             f"{head['k']}→{head['n']}",
             f"step = Σ count × blocks × per-layer {result['method']} median (µs per decode step); the linear layers "
             "only: attention (scores, softmax, RoPE), the KV cache, norms, embeddings and sampling are not included; "
             "tokens/s = M / step, of the linear layers only; HBM floor = stored bytes / measured bandwidth"]
    if result["lm_head_included"]:
        lines.append(f"LM head {head['k']}→{head['n']}: included ({', '.join(head['files'])})")
    else:
        lines.append(f"LM head {head['k']}→{head['n']}: missing, not measured in these files, so not "
                     f"included in any step (python -m qbench run {head['scenario']})")
    return lines


def missing_lines(result: dict) -> list[str]:
    """One line per block shape that no file has, with the command that measures it."""
    return [f"missing {s['names']} {s['k']}→{s['n']} (×{s['count']} per block): "
            f"python -m qbench run {s['scenario']}" for s in result["missing"]]


def show_model(result: dict, fmt: str = "simple", wide: bool = False) -> None:
    """Print :func:`model_step`'s ``result`` in ``fmt``: ``json`` the whole record; else :func:`describe`, the
    table, the fastest scheme per M, the unusable schemes and the notes."""
    if fmt == "json":
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return
    speedup = ([f"×{result['baseline']} = {result['baseline']} step / this step, at the same M (> 1: faster); "
                f"status: ok, over error budget, non-finite outputs, incomplete or unusable (--wide: the note)"]
               if narrow(fmt, wide) else [])
    lines = []
    for m in result["ms"]:
        at_m = [x for x in result["rows"] if x["m"] == m]
        r = next((x for x in at_m if x["scheme"] == result["fastest"].get(m)), None)
        if r is None:
            lines.append(f"- M={m}: no scheme has a complete step")
            continue
        speed = DASH if r["speedup"] is None else f"{r['speedup']:.2f}× {result['baseline']}"
        complete = sum(x["step_us"] is not None for x in at_m)
        which = (f"fastest of the {complete} schemes with a complete step ({len(at_m) - complete} without)"
                 if complete < len(at_m) else "fastest")
        lines.append(f"- M={m}: {which} {r['scheme']}: {fmt_us(r['step_us'])} µs per step, {r['tokens_per_s']:.0f} "
                     f"tokens/s of the linear layers only, {speed}, max rel_fro {fmt_num('.3g')(r['rel_fro_max'])}")
    unusable = unusable_note([(r["scheme"], r["m"]) for r in result["rows"] if r["status"] == "unusable"],
                             result["method"])
    show(result["rows"], model_view(result).columns(fmt, wide), fmt, wide=wide,
         describe=[*describe(result), *result.get("warnings", []), *speedup],
         notes=[*lines, *filter(None, [unusable]), ACT_ON, *(f"note: {note}" for note in result.get("notes", []))])


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help=f"model preset: {', '.join(PRESETS)}; with model-step or quality files, their "
                                "model: its preset, config path, or checkpoint folder's name (the title runs print)")
    p.add_argument("result", nargs="*", help="per-layer result JSON files (qbench run); none: list "
                                             "the shapes the model needs and their scenarios; or "
                                             "model-step result files (NAME: their model, e.g. llama3.1-8b): "
                                             "the measured step beside Σ linear")
    add_options(p, method=None, baseline="the speed-up",
                max_rel_err="schemes whose largest per-layer rel_fro is over it are marked and not named fastest",
                format="any tabulate format, or csv / json",
                wide="every column (HBM floor, floor/step, stored GiB, the note; a model-step file: tokens/s, "
                     "Σ linear µs, ×baseline per step method)",
                allow_incomplete="read files marked incomplete (a run cut off, completed by another file) without a "
                                 "warning on stderr; each is named in a note under the table (in JSON: 'notes') "
                                 "instead; CSV has no place for notes, so there the warning stays")


def run_model(args: argparse.Namespace) -> int:
    """Run ``qbench model`` from parsed ``args``: exit status 0 or 1; a file of another job kind goes to that kind's
    ``model`` view.

    Raises:
        Refused, UnknownFormatError: bad input (one line)."""
    check_format(args.format)
    check_max_rel_err(args.max_rel_err)
    paths = [args.result] if isinstance(args.result, str) else list(args.result or [])
    docs = open_results(paths, incomplete="keep", command="model")  # said below, as a warning or a note
    view = job_view(docs, "model")
    if view is not None:  # a job kind's own view (qbench.jobs)
        return view(args, paths, docs)
    preset = PRESETS.get(args.name)
    if preset is None:
        raise Refused(f"unknown model {args.name!r}; presets: {', '.join(PRESETS)}")
    one_machine(paths, docs, ": a decode step adds per-layer times of one machine")
    resolved = {path: resolve_method(doc, args.method) for path, doc in zip(paths, docs)}
    methods = {path: method for path, (method, _) in resolved.items()}
    notes = list(dict.fromkeys(note for _, note in resolved.values() if note))
    if len(set(methods.values())) > 1:
        said = ", ".join(f"{p}: {m}" for p, m in methods.items())
        raise Refused(f"the files resolve to different timing methods ({said}); pass --method")
    # a note under a prose table or in JSON; CSV has no place for one, so there the warning stays on stderr
    notes += incomplete_notes(paths, docs, getattr(args, "allow_incomplete", False)
                              and (wants_prose(args.format) or args.format == "json"))
    method = next(iter(methods.values()), args.method or DECISION_METHOD)
    if paths:
        check_baseline(paths, {r.scheme for doc in docs for r in doc.rows}, args.baseline)
    index, dup_notes = index_rows(list(zip(paths, docs)))
    result = model_step(preset, index, method, args.baseline, args.max_rel_err)
    result["notes"] = notes + dup_notes
    result["warnings"] = synthetic_warnings([r for doc in docs for r in doc.rows])
    if result["missing"]:
        have = ", ".join(f"{k}→{n}" for k, n in dict.fromkeys((k, n) for (_, _, k, n) in index)) or "none"
        head = (f"{len(result['missing'])} of its {len(preset.block)} block shapes are in none of the "
                f"files given (K→N in them: {have}); nothing summed" if paths else
                f"no result file given; it needs these {len(preset.block)} block shapes")
        lm = preset.lm_head
        optional = [] if result["lm_head_included"] else \
            [f"missing LM head {lm.k}→{lm.n} (optional): python -m qbench run {lm.scenario}"]
        print(f"qbench model: {preset.title}: {head}", *(f"  {line}" for line in missing_lines(result) + optional),
              sep="\n", file=sys.stderr)
        return 1
    show_model(result, args.format, getattr(args, "wide", False))
    return 0 if any(m is not None for m in result["fastest"].values()) else 1


COMMAND = Command(
    name="model", help="the linear layers of a model's decode step, per scheme and M",
    description=__doc__.split("\n\n")[0],
    exit_codes="0 some scheme has a complete step; 1 none does (missing shapes named); 2 bad input",
    add_arguments=_add_arguments, run=run_model)
