"""``qbench compare A.json B.json``: did B get faster or slower than A, row by row?

Rows are matched by (scheme, M, K, N), model-step rows by (scheme, M, context): B's speed-up over A (A's median / B's),
the change in rel_fro (B - A; a step's logits error), and a verdict by the runs' own noise (``same`` when the [p10, p90]
intervals overlap, as NVBench's compare). ``--a A1.json A2.json --b B.json`` reads each side's files as one result
(:func:`qbench.readers.common.group_results`). Machines that differ in what runs the kernels (device, GPU, CPU
instruction set) are refused unless ``--allow-other-machine``; smaller differences are warned about
(:func:`qbench.readers.common.timing_differences`). What differs between job kinds (the identity rows match by, the
method a pair is read by, the error) is a :class:`CompareKind`, which a kind declares as its ``compare`` view.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

from qbench.judge import DECISION_METHOD, UNUSABLE, capture_failure, common_method, row_caveats, row_verdict
from qbench.readers.common import (Command, Refused, add_options, blocking_differences, job_view, one_result,
                                   open_results, print_table, timing_differences)
from qbench.render import check_format, narrow
from qbench.render.columns import COLUMNS, entry, shown
from qbench.render.safe import visible
from qbench.render.view import View
from qbench.results import ResultDoc
from qbench.row import Row

__all__ = ["COMMAND", "CompareKind", "LAYER", "machine_note", "compare_docs", "render_compare", "run_compare",
           "why_untimed"]


@dataclass(frozen=True)
class CompareKind:
    """What ``compare`` reads of one job kind's rows (a kind's ``compare`` view, :mod:`qbench.jobs`).

    Attributes:
        identity: row -> the record's identity fields (rows of A and B with equal fields are compared).
        method: (A's row or None, B's row or None, the files' method) -> the method the pair is read by (None: no
            method has a time or a reason on either row).
        error: row -> its relative error (None: not measured); ``error_name`` its words in headers.
        where: record -> its place in a note line (``int8 M=16``).
        matched_by: the identity in words, for the refusal when no row is in common.
        per_row_method: whether the table shows each pair's method (a step pair's, which may differ by row).
        check: (A, B) -> a refusal line when the two files cannot be compared (a step of another model), or None.
        notes: (A, B) -> lines under the table on what else the files differ in (a step's attention kernel).
        lost: (A's row, B's row, the pair's method) -> a note when B lacks a better method A had (a step whose compiled
            form failed in B is read by its graph step: say so), or None.
    """

    identity: Callable[[Any], dict]
    method: Callable[[Any, Any, str], Optional[str]]
    error: Callable[[Any], Optional[float]]
    where: Callable[[dict], str]
    matched_by: str
    error_name: str = "rel err"
    per_row_method: bool = False
    check: Callable[[ResultDoc, ResultDoc], Optional[str]] = lambda a, b: None
    notes: Callable[[ResultDoc, ResultDoc], list[str]] = lambda a, b: []
    lost: Callable[[Any, Any, Optional[str]], Optional[str]] = lambda a, b, method: None


def _layer_identity(row: Row) -> dict:
    key = row.key
    return {"scheme": key[0], "m": key[1], "k": key[2], "n": key[3],
            **({"tp_size": key[4], "split": key[5]} if key[4] is not None else {})}


#: The per-layer (and tensor-parallel) rows: one method for the whole file (:func:`qbench.judge.common_method`).
LAYER = CompareKind(identity=_layer_identity, method=lambda a, b, method: method, error=lambda r: r.rel_fro,
                    where=lambda r: f"{r['scheme']} M={r['m']}", matched_by="scheme, M, K, N")


#: The relative error under which no growth is judged (``--max-err-growth``): an FP32 result's own rounding over a long
#: dot product, u·√K with u = 2^-24 and K = 65,536, is 1.5e-5; an FP32 row at exactly 0 against a B at 1e-7 is not
#: an error that grew.
ERROR_FLOOR = 1e-5


def compare_docs(a: ResultDoc | dict, b: ResultDoc | dict, method: str = DECISION_METHOD,
                 threshold: float = 1.05, max_err_growth: float = 2.0, machine: str | None = None,
                 kind: CompareKind = LAYER) -> list[dict]:
    """Compare ``a`` (before) and ``b`` (after) row by row: one record per identity (``kind.identity``: scheme, M,
    K, N for layer rows) of either file, A's order first: the pair's ``method`` and both its medians (µs),
    ``speedup`` (A / B), both errors and their difference, a ``verdict`` (faster, slower, same, only in A, only in B,
    not comparable), a ``note`` (why not comparable, or ``machine`` then each side's
    :func:`qbench.judge.row_caveats`), ``regression`` (slower beyond ``threshold``) and ``fails`` (failed or missing
    in B, untimed in B though A was timed, error grown over ``max_err_growth`` from at least :data:`ERROR_FLOOR`).
    ``method`` is the files' method; a kind that reads each pair by its own (``kind.method``) may ignore it."""
    a, b = ResultDoc.of(a), ResultDoc.of(b)
    key_of = lambda r: tuple(kind.identity(r).items())  # noqa: E731
    rows_a, rows_b = ({key_of(r): r for r in doc.rows} for doc in (a, b))
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    out = []
    for key in keys:
        ra, rb = rows_a.get(key), rows_b.get(key)
        pair = kind.method(ra, rb, method)
        sa, sb = (r.stats(pair) if r else None for r in (ra, rb))
        ea, eb = (kind.error(r) if r else None for r in (ra, rb))
        both = ea is not None and eb is not None
        rec = {**dict(key), "method": pair,
               "a_us": sa.median if sa else None, "b_us": sb.median if sb else None, "speedup": None,
               "a_rel_fro": ea, "b_rel_fro": eb, "rel_fro_diff": eb - ea if both else None,
               "verdict": None, "note": None, "regression": False, "fails": []}
        if ra is not None and ra.status == "ok" and (rb is None or rb.status != "ok"):
            rec["fails"].append("missing from B" if rb is None else f"{rb.status} in B")
        if both and eb > max_err_growth * max(ea, ERROR_FLOOR):
            rec["fails"].append(f"error grew {eb / ea:.1f}×" if ea > 0 else f"error grew from 0 to {eb:.2g}")
        if sa is not None and sb is None and rb is not None and rb.status == "ok":
            rec["fails"].append(f"untimed in B ({why_untimed(rb, pair)})")
        if ra is None or rb is None:
            rec["verdict"] = "only in B" if ra is None else "only in A"
        elif sa is None or sb is None:
            rec["verdict"] = "not comparable"
            why = {side: why_untimed(r, pair) for side, r, s in (("A", ra, sa), ("B", rb, sb)) if s is None}
            same = len(why) == 2 and why["A"] == why["B"]
            rec["note"] = f"both {why['A']}" if same else "; ".join(f"{k}: {v}" for k, v in why.items())
        else:
            rec["speedup"] = sa.median / sb.median
            rec["verdict"] = row_verdict(ra, rb, pair)  # runs' medians too (repeats, several files a side)
            rec["note"] = "; ".join(f"{side}: {', '.join(said)}" for side, row, stats in (("A", ra, sa), ("B", rb, sb))
                                    if (said := row_caveats(row, stats))) or None  # e.g. "B: cpu-busy, noisy (cv 0.90)"
            if (lost := kind.lost(ra, rb, pair)):
                rec["note"] = lost + (f"; {rec['note']}" if rec["note"] else "")
            if machine and rec["verdict"] != "same":  # named before any cpu-busy flag of the rows
                rec["note"] = machine + (f"; {rec['note']}" if rec["note"] else "")
            # compared as times, not through 1/speedup: B at exactly threshold x A is no regression
            rec["regression"] = rec["verdict"] == "slower" and sb.median > threshold * sa.median
        out.append(rec)
    return out


def machine_note(differences: list[str]) -> str | None:
    """A compared row's note for :func:`qbench.hardware.machine_differences` lines: ``"machines differ (CPU
    count)"``, ``"machines may differ (...)"`` when every line is unknown; None for no lines."""
    labels = list(dict.fromkeys(line.split(":")[0] for line in differences))
    known = [label for label in labels if not label.endswith("unknown")]
    return f"machines {'differ' if known else 'may differ'} ({', '.join(known or labels)})" if labels else None


def why_untimed(row: Row, method: Optional[str]) -> str:
    """Why ``row`` has no ``method`` time: its status and reason, :data:`qbench.judge.UNUSABLE`, or the method's
    ``latency_reasons`` entry."""
    if row.status != "ok":
        return f"{row.status}: {row.reason or 'no reason given'}"
    if method is None:
        return "no step time recorded"
    if capture_failure(row, method):
        return UNUSABLE
    reason = row.reason_for(method)
    return f"no {method} latency" + (f" ({reason.text})" if reason else "")


def render_compare(records: list[dict], method: str, fmt: str = "simple", wide: bool = False,
                   kind: CompareKind = LAYER) -> str:
    """:func:`compare_docs`'s records in ``fmt``: scheme, M (and the sharding, or a step's context and method), A's
    and B's medians (µs), the speed-up (A/B), the error's change, the verdict (``slower !``: a regression), the note
    (the narrow default wraps it to fit 120 characters)."""
    timed = "" if kind.per_row_method else f"{method} "
    cols = [entry("scheme", "scheme"), entry("m", "M", "d"), entry("context", "context", "d"),
            entry("method", "method"), entry("k", "K", "d"), entry("n", "N", "d"), COLUMNS["tp_size"], COLUMNS["split"],
            entry("a_us", f"A {timed}µs", "us"), entry("b_us", f"B {timed}µs", "us"),
            entry("speedup", "speed-up vs A (A/B)", lambda v: shown(v, "{:.3f}×"), True),
            entry("rel_fro_diff", f"Δ {kind.error_name}", lambda v: shown(v, "{:+.2g}"), True),
            entry("verdict", "verdict", cell_override=lambda r: r["verdict"] + (" !" if r["regression"] else "")),
            entry("note", "note")]
    shard = ["tp_size", "split"] if any(r.get("tp_size") is not None for r in records) else []
    shapes = ["k", "n"] if _several_shapes(records) else []  # a sweep: which shape
    place = ["context", "method"] if kind.per_row_method else shapes
    keys = ["scheme", "m", *place, *shard, "a_us", "b_us", "speedup", "rel_fro_diff", "verdict", "note"]
    data = keys if kind.per_row_method else ["scheme", "m", "k", "n", "method", *keys[2 + len(shapes):]]
    view = View("compare", cols, keys, data=data, wrap=("note", 16),
                short={"a_us": "A µs", "b_us": "B µs", "speedup": "speed-up", "rel_fro_diff": "Δ err", "context": "ctx"})
    return view.render(records, fmt, wide)


def _several_shapes(records: list[dict]) -> bool:
    """Whether the records hold more than one (K, N): a sweep, whose rows at one scheme and M the shape tells apart."""
    return len({(r.get("k"), r.get("n")) for r in records}) > 1


def _where(kind: CompareKind, records: list[dict]) -> Callable[[dict], str]:
    """``kind.where``, with each record's K×N where the records hold several shapes (a sweep) and its sharding where
    they hold tensor-parallel rows: a REGRESSION or FAILED line must tell two such rows apart, as the table does."""
    shapes = _several_shapes(records)
    shard = any(r.get("tp_size") is not None for r in records)
    if not (shapes or shard):
        return kind.where
    return lambda r: (kind.where(r) + (f" {r['k']}×{r['n']}" if shapes else "")
                      + (f" tp={r['tp_size']} {r['split']}" if shard and r.get("tp_size") is not None else ""))


def _add_arguments(p) -> None:
    p.add_argument("a", nargs="?", help="result JSON, before (or --a FILE...)")
    p.add_argument("b", nargs="?", help="result JSON, after (or --b FILE...)")
    p.add_argument("--a", dest="a_files", nargs="+", metavar="FILE",
                   help="before: one or more result files of one scenario and machine, read as one result")
    p.add_argument("--b", dest="b_files", nargs="+", metavar="FILE",
                   help="after: one or more result files of one scenario and machine, read as one result")
    add_options(p, method=None)
    p.add_argument("--threshold", type=float, default=1.05,
                   help="a 'slower' row whose B median is more than this factor times A's (a speed-up "
                        "below 1/THRESHOLD) fails the compare (exit 1); default 1.05")
    p.add_argument("--max-err-growth", type=float, default=2.0,
                   help="a row whose relative error (error.rel_fro) in B exceeds this factor times A's fails the "
                        "compare (exit 1); default 2")
    p.add_argument("--allow-other-machine", action="store_true",
                   help="compare files whose device, GPU, CPU capability or instruction set differ (refused "
                        "otherwise: the timings would compare machines, not schemes)")
    add_options(p, format=None, wide="the method in the time headers, the speed-up's and the error's long headers, "
                                     "each note on one line")


def _side(name: str, positional, files) -> list[str]:
    """One side's files: the positional one or ``--a``/``--b``'s, not both, not none."""
    if positional is not None and files:
        raise Refused(f"give {name.upper()} as a positional file or as --{name} FILE..., not both")
    got = list(files or ([positional] if positional is not None else []))
    if not got:
        raise Refused(f"needs the {'before' if name == 'a' else 'after'} result: compare A.json B.json, "
                      "or --a FILE... --b FILE...")
    return got


def run_compare(args) -> int:
    """Run ``qbench compare`` from parsed ``args``: exit status 0, or 1 (a regression).

    Raises:
        Refused, UnknownFormatError: bad input (one line)."""
    if not args.threshold > 0:  # NaN too: a factor on A's time, a speed-up of 1/threshold
        raise Refused(f"--threshold must be > 0 (a factor on A's time, e.g. 1.05), got {args.threshold}")
    check_format(args.format)
    paths_a, paths_b = _side("a", args.a, args.a_files), _side("b", args.b, args.b_files)
    if not args.max_err_growth > 0:
        raise Refused(f"--max-err-growth must be > 0 (a factor on A's error, e.g. 2), got {args.max_err_growth}")
    docs = open_results(paths_a + paths_b, command="compare")
    if len({doc.job for doc in docs}) > 1:
        raise Refused("give files of one kind on both sides (each kind compares its own rows): "
                      + ", ".join(f"{p} ({d.job})" for p, d in zip(paths_a + paths_b, docs)))
    kind = job_view(docs, "compare") or LAYER
    sides = [one_result(paths_a, docs[:len(paths_a)], "A: "), one_result(paths_b, docs[len(paths_a):], "B: ")]
    (a, label_a), (b, label_b) = ((side.doc, side.label) for side in sides)
    if kind is not LAYER and args.method is not None:
        raise Refused(f"--method reads per-layer files; a {a.job} compare reads each pair by the first method both "
                      f"rows have, in the decision order")
    if (why := kind.check(a, b)):
        raise Refused(why)
    method, note = common_method(a, b, args.method) if kind is LAYER else ("", None)
    differences = timing_differences(a, b)  # two CUDA runs: the GPU's facts, not the host's
    blocking = blocking_differences(differences)
    if blocking and not args.allow_other_machine:
        raise Refused(f"A ({label_a}) and B ({label_b}) ran on different machines ({'; '.join(blocking)}); "
                      "pass --allow-other-machine to compare them anyway")
    records = compare_docs(a, b, method, args.threshold, args.max_err_growth, machine_note(blocking or differences),
                           kind)
    if not any(r["verdict"] not in ("only in A", "only in B") for r in records):
        raise Refused(f"no row in common between A ({label_a}) and B ({label_b}) (rows match by {kind.matched_by})")
    if a.machine != b.machine:
        print(visible(f"warning: A ({label_a}) ran on {a.machine}, B ({label_b}) on {b.machine}: the speed-ups "
                      "compare machines as much as schemes"), file=sys.stderr)
    for line in differences:
        print(visible(f"warning: machines {'may differ' if line.split(':')[0].endswith('unknown') else 'differ'}: "
                      f"{line}"), file=sys.stderr)
    sides = [f"A = {label_a} ({a.machine})", f"B = {label_b} ({b.machine})"]  # narrow: a line each (long paths)
    summary = ", ".join(f"{n} {v}" for v, n in Counter(r["verdict"] for r in records).items())
    read = (f"{method} median" if not kind.per_row_method else
            "each pair by the first step method both rows have (compiled, graph, cpu, loop), its median")
    notes = [f"{read}; speed-up = A time / B time (> 1: B is faster); [p10, p90] overlap = same. "
             f"{summary}." + (f" ({note})" if note else "")]
    notes += kind.notes(a, b)
    where = _where(kind, records)
    bad = [r for r in records if r["regression"]]
    if bad:
        notes.append(f"REGRESSION: {len(bad)} row(s) slower than A by more than {args.threshold:g}× its time (speed-up "
                     f"below {1 / args.threshold:.3f}×): " + ", ".join(f"{where(r)} (speed-up "
                     f"{r['speedup']:.2f}×" + (f"; {r['note']}" if r["note"] else "") + ")" for r in bad))
    failing = [r for r in records if r["fails"]]
    if failing:
        notes.append(f"FAILED: {len(failing)} row(s): "
                     + ", ".join(f"{where(r)} ({'; '.join(r['fails'])})" for r in failing))
    print_table(args, render_compare(records, method, args.format, wide=args.wide, kind=kind),
                sides if narrow(args.format, args.wide) else ["; ".join(sides)], notes)
    return 1 if bad or failing else 0


COMMAND = Command(
    name="compare", help="compare two result JSON files row by row", description=__doc__.split("\n\n")[0],
    exit_codes="0 no regression; 1 a row got slower than --threshold, a scheme failed, disappeared or went untimed in "
               "B, or its error grew over --max-err-growth; 2 bad input (no row in common, machines that differ without "
               "--allow-other-machine)",
    add_arguments=_add_arguments, run=run_compare)
