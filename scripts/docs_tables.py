"""Markdown tables for docs/ that ``qbench report`` does not make, read from committed result files.

    python scripts/docs_tables.py scheme int4-weight-only results/h200/decode.json results/h200/small_batch.json
    python scripts/docs_tables.py repeatability results/h200/evidence/repeatability.json
    python scripts/docs_tables.py crosscheck results/h200/evidence/crosscheck.json results/h200/evidence/crosscheck-first-run.json

``scheme NAME FILE...``: for registry scheme NAME (eager and compiled rows alike), the byte ledger
of its first ``ok`` row (tensor, role, dtype, shape, bytes) and, per row of every FILE, the stream,
cold and kernel medians (µs), the dispatch label, whether a host sync happened inside the call, why the
CUDA-graph (``warm``) method failed if it did, and the GPU kernels of one call with their µs
(``dispatch.kernels``; names shortened by :func:`short_kernel`, the full names are in the JSON).
Where today's classifier labels those kernels differently from the file, both labels are shown.

``headline FILE [SCHEME...]``: the README's headline table: per row of FILE (the SCHEMEs given,
in that order; every ok row without them), stored MiB, bits per weight, the HBM floor (stored bytes
/ measured bandwidth), the ``stream`` median and the floor as a share of it, then cold, warm, eager
and kernel medians (µs), rel err and the three longest kernels (short names).

``repeatability FILE``: the output of ``scripts/repeatability.py``: per scheme and method, the
medians of the runs (µs) and their CV (%).

``crosscheck FILE...``: the output of ``scripts/crosscheck_timing.py``: qbench's cold and warm
medians next to ``triton.testing.do_bench`` / ``do_bench_cudagraph``, and (newer files) qbench's
``stream`` next to a plain-torch graph of weight copies, per file.

``ceilings FILE``: the device ceilings a result file measured at the start of its run
(``ceilings.measured``: memory bandwidth, matmul peak per dtype) beside the datasheet's.

``cold-experiment FILE``: the output of ``scripts/cold_experiment.py``: per layer, the graph of
weight copies (two runs) and the cold variants (write / read / write-then-read flush, with and
without the busy sleep), medians in µs.

``row-schema``: the ROW tables of ``docs/results-schema.md``, generated from the row model
(:func:`qbench.row.schema_markdown`): every field, its type, when it is written, its meaning.

Output is GitHub Markdown on stdout; ``scripts/gen_docs.py`` pastes it between the markers of
docs/*.md. Exit status 0, or 2 on a bad file or an unknown scheme.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from tabulate import tabulate

from qbench.render.columns import fmt_us
from qbench.render.kernels import short_kernel
from qbench.judge import CAPTURE_KINDS
from qbench.results import ResultsError, read_results

def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _table(rows: list[list], headers: list[str], right: Sequence[int] = ()) -> str:
    align = ["right" if i in right else "left" for i in range(len(headers))]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=align)


def _median(row: dict, method: str):
    stats = (row.get("latency_us") or {}).get(method)
    return stats.get("median") if stats else None


def _graph_cell(row: dict) -> str:
    why = ((row.get("latency_reasons") or {}).get("warm") or {}).get("text")
    if why:
        # "CUDA graph capture failed at M=1: CUDA graph capture failed: AcceleratorError: ..." -> the error
        core = why.split("capture failed: ", 2)[-1]
        return "no: " + core.split(" (then ")[0]
    return "yes" if _median(row, "warm") is not None else "—"


def _classify_now(row: dict) -> str | None:
    """The dispatch label today's :func:`qbench.dispatch.classify_dispatch` gives the row's kernels
    (a file written before a classifier fix keeps its old label), or None without kernels."""
    from qbench import dispatch, schemes

    kernels = (row.get("dispatch") or {}).get("kernels")
    if not kernels:
        return None
    try:
        family = schemes.get(row["base_scheme"]).family
    except Exception:  # a scheme no longer registered: keep the file's label
        return None
    return dispatch.classify_dispatch([k["name"] for k in kernels], family)


def scheme_tables(name: str, paths: Sequence[str]) -> str:
    """The ledger and kernel tables of registry scheme ``name`` over result files ``paths``."""
    docs = [(p, read_results(p).to_json()) for p in paths]
    rows = [(p, r) for p, d in docs for r in d["rows"] if r.get("base_scheme") == name]
    if not rows:
        raise ValueError(f"no rows of scheme {name!r} in {', '.join(paths)}")
    out = []
    first_path, first = next(((p, r) for p, r in rows if r.get("status") == "ok" and r.get("ledger")), rows[0])
    ledger = [[_code(t["name"]), t["role"], t["dtype"], "×".join(map(str, t["shape"])) or "scalar", f"{t['bytes']:,}"]
              for t in first.get("ledger") or []]
    k, n = first.get("k"), first.get("n")
    out.append(f"Ledger (`{first_path}`, K = {k}, N = {n}): stored {first.get('stored_bytes', 0):,} bytes = "
               f"{first.get('bits_per_weight', 0):.3f} bits per weight; nominal {first.get('nominal_bits'):g} bits.")
    out.append("")
    out.append(_table(ledger, ["tensor", "role", "dtype", "shape", "bytes"], right=(4,)))
    out.append("")
    body = []
    for p, r in rows:
        if r.get("status") != "ok":
            body.append([r["scheme"], str(r["m"]), Path(p).name, "—", "—", "—", r.get("status"), "—", "—",
                         r.get("reason") or ""])
            continue
        d = r.get("dispatch") or {}
        label = d.get("label") or "—"
        now = _classify_now(r)
        if now and now != label:
            label += f" (current classifier: {now})"
        kernels = "<br>".join(f"{_code(short_kernel(x['name']))}"
                              + (f" ×{x['count']:g}" if x.get("count", 1) != 1 else "")
                              + f" {x['us']:.1f}" for x in d.get("kernels") or [])
        body.append([r["scheme"], str(r["m"]), Path(p).name, fmt_us(_median(r, "stream")),
                     fmt_us(_median(r, "cold")), fmt_us(_median(r, "kernel")),
                     label, "yes" if d.get("host_sync") else "no", _graph_cell(r), kernels])
    out.append(_table(body, ["row", "M", "file", "stream µs", "cold µs", "kernel µs", "dispatch", "host sync",
                             "CUDA graph", "kernels of one call (µs each)"], right=(1, 3, 4, 5)))
    return "\n".join(out)


def repeatability_table(path: str) -> str:
    """Per (scheme, M, method): runs, the per-run medians (µs) and their CV (%)."""
    doc = json.loads(Path(path).read_text())
    if doc.get("kind") != "repeatability":
        raise ValueError(f"{path}: not a repeatability summary (kind {doc.get('kind')!r})")
    incomplete = [Path(f).name for f, ok in (doc.get("complete") or {}).items() if not ok]
    body = []
    for r in doc["rows"]:
        medians = ", ".join(fmt_us(v) for v in r["medians_us"])
        cv = "—" if r.get("cv_pct") is None else f"{r['cv_pct']:.1f}"
        missing = ", ".join(r.get("missing_from") or []) or ""
        body.append([r["scheme"], str(r["m"]), r["method"], str(r["runs"]), medians, cv, missing])
    text = _table(body, ["scheme", "M", "method", "runs", "medians µs", "CV %", "missing from"], right=(1, 3, 5))
    note = (f"{len(doc['files'])} files; incomplete: {', '.join(incomplete)}" if incomplete
            else f"{len(doc['files'])} files, all complete")
    return note + "\n\n" + text


def crosscheck_table(paths: Sequence[str]) -> str:
    """qbench's medians against triton's do_bench / do_bench_cudagraph, one table per file."""
    out = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        tol = doc.get("tolerance")
        out.append(f"`{path}`: {doc.get('device')}, torch {doc.get('torch')}, triton {doc.get('triton')}; "
                   f"pass when the ratio is within {tol:g} of 1")
        out.append("")
        body = [[r["scheme"], str(r["m"]), r["method"], fmt_us(r["ours_us"]), fmt_us(r["triton_us"]),
                 f"{r['ratio']:.2f}", "pass" if r["pass"] else "**FAIL**"] for r in doc.get("rows") or []]
        if body:
            out.append(_table(body, ["scheme", "M", "comparison", "qbench µs", "triton µs", "ratio", "verdict"],
                              right=(1, 3, 4, 5)))
            out.append("")
        body = [[r["scheme"], str(r["m"]), fmt_us(r["qbench_us"]), fmt_us(r["reference_us"]),
                 "—" if r["ratio"] is None else f"{r['ratio']:.2f}", str(r.get("qbench_copies")),
                 str(r.get("reference_copies")), "pass" if r["pass"] else "**FAIL**"]
                for r in doc.get("stream_rows") or []]
        if body:
            out.append(_table(body, ["scheme", "M", "qbench stream µs", "plain-torch graph of copies µs", "ratio",
                                     "qbench copies", "reference copies", "verdict"], right=(1, 2, 3, 4)))
            out.append("")
    return "\n".join(out).rstrip()


def _sig(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def headline_table(path: str, schemes: Sequence[str] = ()) -> str:
    """The README's headline rows of one result file (see the module docstring)."""
    doc = read_results(path).to_json()
    rows = [r for r in doc["rows"] if r.get("status") == "ok"]
    if schemes:
        by_name = {r["scheme"]: r for r in rows}
        missing = [s for s in schemes if s not in by_name]
        if missing:
            raise KeyError(f"{path}: no ok row for {', '.join(missing)}")
        rows = [by_name[s] for s in schemes]
    body = []
    for r in rows:
        stream = _median(r, "stream")
        floor = r.get("hbm_floor_us")
        share = f"{100 * floor / stream:.0f} %" if stream and floor else "—"
        if stream is None:
            why = (r.get("latency_reasons") or {}).get("stream") or {}
            stream_cell = "— (host sync)" if why.get("kind") in CAPTURE_KINDS else "—"
        else:
            stream_cell = fmt_us(stream)
        kernels = sorted((r.get("dispatch") or {}).get("kernels") or [], key=lambda k: -k["us"])[:3]
        body.append([r["scheme"], f"{r['stored_bytes'] / 2**20:.2f}", f"{r['bits_per_weight']:.2f}",
                     fmt_us(floor) if floor is not None else "—", stream_cell, share,
                     fmt_us(_median(r, "cold")), fmt_us(_median(r, "warm")), fmt_us(_median(r, "eager")),
                     fmt_us(_median(r, "kernel")), _sig((r.get("error") or {}).get("rel_fro"), 2),
                     ", ".join(_code(short_kernel(k["name"])) for k in kernels)])
    return _table(body, ["scheme", "stored MiB", "bits/w", "HBM floor", "stream", "floor/stream", "cold", "warm",
                         "eager", "kernel", "rel err", "kernels (longest first)"], right=tuple(range(1, 11)))


def ceilings_table(path: str) -> str:
    """Measured and datasheet ceilings of one result file (``ceilings``)."""
    ceilings = json.loads(Path(path).read_text())["ceilings"]
    measured, sheet = ceilings.get("measured") or {}, ceilings.get("datasheet") or {}
    mt, st = measured.get("tflops") or {}, sheet.get("tflops") or {}

    def cell(value, unit=""):
        return "—" if value is None else f"{value:.1f}{unit}" if value < 10000 else f"{value:.0f}{unit}"

    body = [["memory", "—" if measured.get("memory_gbps") is None else f"{measured['memory_gbps']:.0f} GB/s",
             "—" if sheet.get("memory_gbps") is None else f"{sheet['memory_gbps']:.0f} GB/s"]]
    for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8", "int8"):
        unit = " TOPS" if dtype == "int8" else " TFLOP/s"
        body.append([dtype, cell(mt.get(dtype), unit), cell(st.get(dtype), unit)])
    return _table(body, ["ceiling", "measured", f"datasheet ({sheet.get('gpu', '—')})"], right=(1, 2))


def cold_experiment_table(path: str) -> str:
    """``scripts/cold_experiment.py``'s layers: graph of copies and the cold variants, medians (µs)."""
    doc = json.loads(Path(path).read_text())
    body = []
    for layer in doc["layers"]:
        body.append([f"{layer['k']} × {layer['n']} ({layer['weight_bytes'] / 2**20:.0f} MiB)",
                     f"{fmt_us(layer['graph_stream'])} / {fmt_us(layer['graph_stream_repeat'])}",
                     fmt_us(layer["cold_write_sleep"]), fmt_us(layer["cold_read_sleep"]),
                     fmt_us(layer["cold_write_read_sleep"]), fmt_us(layer["cold_read_nosleep"])])
    return _table(body, ["layer", "graph of copies (reference; two runs)", "cold, write flush (old)",
                         "cold, read flush (new)", "write then read", "read, no busy sleep"], right=(2, 3, 4, 5))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("scheme", help="ledger and kernels of one scheme")
    p.add_argument("name")
    p.add_argument("files", nargs="+")
    p = sub.add_parser("headline", help="the README's headline rows of one result file")
    p.add_argument("file")
    p.add_argument("schemes", nargs="*")
    p = sub.add_parser("repeatability", help="scripts/repeatability.py output as a table")
    p.add_argument("file")
    p = sub.add_parser("crosscheck", help="scripts/crosscheck_timing.py output as a table")
    p.add_argument("files", nargs="+")
    p = sub.add_parser("ceilings", help="measured and datasheet ceilings of one result file")
    p.add_argument("file")
    p = sub.add_parser("cold-experiment", help="scripts/cold_experiment.py output as a table")
    p.add_argument("file")
    sub.add_parser("row-schema", help="the row model's tables for docs/results-schema.md")
    args = parser.parse_args(argv)
    try:
        if args.what == "row-schema":
            from qbench.row import schema_markdown

            text = schema_markdown()
        elif args.what == "scheme":
            text = scheme_tables(args.name, args.files)
        elif args.what == "headline":
            text = headline_table(args.file, args.schemes)
        elif args.what == "ceilings":
            text = ceilings_table(args.file)
        elif args.what == "cold-experiment":
            text = cold_experiment_table(args.file)
        elif args.what == "repeatability":
            text = repeatability_table(args.file)
        else:
            text = crosscheck_table(args.files)
    except (OSError, ValueError, KeyError, ResultsError) as exc:
        print(f"docs_tables: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
