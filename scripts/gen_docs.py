"""Regenerate every generated block of README.md and docs/*.md from the committed result files.

    python scripts/gen_docs.py            # rewrite every block (and every chart with --images)
    python scripts/gen_docs.py --check    # exit 1 with a diff when a block is out of date

Figures in the pages come from here, never typed by hand. Two kinds of block:

* a command's output, the command shown in a ```sh fence right above the marker
  ``<!-- BEGIN: qbench ... -->`` ... ``<!-- END -->``: ``qbench ARGS`` runs through
  :func:`qbench.cli.main`, ``python scripts/NAME.py ARGS`` through that script's ``main(argv)``,
  in-process from the repository root; Markdown output is pasted as it is, any other in a ```text
  fence. A non-zero exit fails the run, and so does stderr, except a Markdown table's prose;
* a named block this script computes (a sentence with figures, a table no command prints, a page's
  contents list): ``<!-- gen:NAME ARGS -->`` ... ``<!-- /gen -->``, NAME one of :data:`GENERATORS`.

A line ``<!-- IMAGE: qbench plot ... -o docs/img/NAME.png -->`` names the command that draws the
charts below it: ``--images`` reruns it, ``--check`` checks the PNGs exist. Without FILES it also
rewrites (``--check``: checks) ``results/<machine>/INDEX.md`` (``scripts/results_index.py``).
Exit status: 0; 1 (``--check`` found a difference or a missing chart); 2 (a command or generator
failed, or a marker is malformed).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import io
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_BLOCK = re.compile(r"<!-- BEGIN: (?P<cmd>.+?) -->\n(?P<body>.*?)<!-- END -->", re.DOTALL)
_NAMED = re.compile(r"<!-- gen:(?P<spec>.+?) -->\n(?P<body>.*?)<!-- /gen -->", re.DOTALL)
_IMAGE = re.compile(r"<!-- IMAGE: (?P<cmd>.+?) -->")
_FENCE_ABOVE = re.compile(r"```(?:sh|bash|console)?\n(?P<cmd>[^\n]+)\n```\n*$")
_MARKDOWN = ("--format github", "--format markdown", "--format md", "--format pipe")


class DocsError(RuntimeError):
    """A command or a generator failed, or a marker is malformed; the message names the file."""


# ---- command blocks ----------------------------------------------------------------------------

def run_command(command: str) -> str:
    """Run ``command`` in-process from the repository root and return its stdout.

    Raises:
        DocsError: unknown command form, non-zero exit, or stderr written by a command whose
            output is not a Markdown table.
    """
    argv = shlex.split(command)
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if argv[0] == "qbench":
                from qbench import cli

                status = cli.main(argv[1:])
            elif argv[0] == "python" and len(argv) > 1 and argv[1].startswith("scripts/") and argv[1].endswith(".py"):
                status = _load_script(argv[1]).main(argv[2:])
            else:
                raise DocsError(f"cannot run {command!r}: a block's command is 'qbench ...' or 'python scripts/NAME.py ...'")
    except SystemExit as exc:  # argparse errors
        status = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(cwd)
    markdown = any(flag in command for flag in _MARKDOWN)
    if status not in (0, None) or (err.getvalue().strip() and not markdown):
        raise DocsError(f"{command!r} exited {status}: {err.getvalue().strip()[:500]}")
    return out.getvalue()


def _load_script(relpath: str):
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(f"_docs_script_{path.stem}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise DocsError(f"no script {relpath}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block_body(command: str, output: str) -> str:
    """What goes between the markers: Markdown output as is, plain text inside a ```text fence."""
    text = output.rstrip("\n")
    markdown = any(flag in command for flag in _MARKDOWN) or command.startswith("python scripts/bench_decode.py")
    return (text if markdown else f"```text\n{text}\n```") + "\n"


# ---- named blocks ------------------------------------------------------------------------------

def _table(rows: list[list], headers: list[str], right: Sequence[int] = ()) -> str:
    from tabulate import tabulate
    align = ["right" if i in right else "left" for i in range(len(headers))]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=align)


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _bullet(text: str) -> str:
    """``- text`` wrapped at 100 characters, continuation lines indented under the text."""
    import textwrap
    return textwrap.fill(text, 100, initial_indent="- ", subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def gen_contents(args: list[str], page: str) -> str:
    """The page's ``##`` headings as a list of links (the contents heading itself left out)."""
    seen: dict[str, int] = {}
    lines = []
    in_fence = False
    for line in page.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence or not line.startswith("## ") or line[3:].strip().lower() == "contents":
            continue
        title = line[3:].strip()
        anchor = slug(title)
        n = seen.get(anchor, 0)
        seen[anchor] = n + 1
        lines.append(f"- [{title.replace('`', '')}](#{anchor}{f'-{n}' if n else ''})")
    return "\n".join(lines)


def gen_scheme(args: list[str], page: str) -> str:
    """``scheme NAME FILE...``: the byte ledger of registry scheme NAME (its first ``ok`` row) and,
    per row of every FILE (eager and compiled), the stream, cold and kernel medians, the dispatch
    label, whether the call synchronised with the host, whether a CUDA graph captured it, and the
    GPU kernels of one call with their µs (short names; the JSON has the full ones)."""
    from qbench.render.columns import fmt_us
    from qbench.render.kernels import short_kernel
    from qbench.results import read_results

    name, paths = args[0], args[1:]
    rows = [(p, r) for p in paths for r in read_results(ROOT / p).to_json()["rows"] if r.get("base_scheme") == name]
    if not rows:
        raise DocsError(f"no rows of scheme {name!r} in {', '.join(paths)}")
    first_path, first = next(((p, r) for p, r in rows if r.get("status") == "ok" and r.get("ledger")), rows[0])
    ledger = [[_code(t["name"]), t["role"], t["dtype"], "×".join(map(str, t["shape"])) or "scalar", f"{t['bytes']:,}"]
              for t in first.get("ledger") or []]
    out = [f"Ledger (`{first_path}`, K = {first.get('k')}, N = {first.get('n')}): stored "
           f"{first.get('stored_bytes', 0):,} bytes = {first.get('bits_per_weight', 0):.3f} bits per weight.", "",
           _table(ledger, ["tensor", "role", "dtype", "shape", "bytes"], right=(4,)), ""]
    body = []
    for p, r in rows:
        if r.get("status") != "ok":
            body.append([r["scheme"], str(r["m"]), Path(p).name, "—", "—", "—", r.get("status"), "—", "—",
                         r.get("reason") or ""])
            continue
        d = r.get("dispatch") or {}
        lat = r.get("latency_us") or {}

        def median(method: str):
            return (lat.get(method) or {}).get("median")

        why = ((r.get("latency_reasons") or {}).get("warm") or {}).get("text")
        graph = ("no: " + why.split("capture failed: ", 2)[-1].split(" (then ")[0]) if why else \
            ("yes" if median("warm") is not None else "—")
        kernels = "<br>".join(_code(short_kernel(x["name"])) + (f" ×{x['count']:g}" if x.get("count", 1) != 1 else "")
                              + f" {x['us']:.1f}" for x in d.get("kernels") or [])
        body.append([r["scheme"], str(r["m"]), Path(p).name, fmt_us(median("stream")), fmt_us(median("cold")),
                     fmt_us(median("kernel")), d.get("label") or "—", "yes" if d.get("host_sync") else "no", graph,
                     kernels])
    out.append(_table(body, ["row", "M", "file", "stream µs", "cold µs", "kernel µs", "dispatch", "host sync",
                             "CUDA graph", "kernels of one call (µs each)"], right=(1, 3, 4, 5)))
    return "\n".join(out)


def gen_ceilings(args: list[str], page: str) -> str:
    """``ceilings FILE``: the ceilings a result file measured at the start of its run beside the
    datasheet's."""
    ceilings = json.loads((ROOT / args[0]).read_text())["ceilings"]
    measured, sheet = ceilings.get("measured") or {}, ceilings.get("datasheet") or {}

    def cell(value, unit):
        return "—" if value is None else f"{value:.1f}{unit}" if value < 10000 else f"{value:.0f}{unit}"

    def gbps(value):
        return "—" if value is None else f"{value:.0f} GB/s"

    body = [["memory", gbps(measured.get("memory_gbps")), gbps(sheet.get("memory_gbps"))]]
    for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8", "int8"):
        unit = " TOPS" if dtype == "int8" else " TFLOP/s"
        body.append([dtype, cell((measured.get("tflops") or {}).get(dtype), unit),
                     cell((sheet.get("tflops") or {}).get(dtype), unit)])
    return _table(body, ["ceiling", "measured", f"datasheet ({sheet.get('gpu', '—')})"], right=(1, 2))


def gen_row_schema(args: list[str], page: str) -> str:
    """``row-schema``: the row model's tables (:func:`qbench.row.schema_markdown`)."""
    from qbench.row import schema_markdown

    return schema_markdown().rstrip("\n")


def gen_crosscheck(args: list[str], page: str) -> str:
    """``crosscheck FILE``: ``scripts/crosscheck_timing.py``'s output: qbench's cold and warm
    beside ``triton.testing.do_bench`` / ``do_bench_cudagraph``, qbench's ``stream`` beside a
    plain-torch graph of weight copies."""
    from qbench.render.columns import fmt_us

    doc = json.loads((ROOT / args[0]).read_text())
    out = [f"`{args[0]}`: {doc.get('device')}, torch {doc.get('torch')}, triton {doc.get('triton')}; a pair passes "
           f"when the ratio is within {doc.get('tolerance'):g} of 1.", ""]
    body = [[r["scheme"], str(r["m"]), r["method"], fmt_us(r["ours_us"]), fmt_us(r["triton_us"]), f"{r['ratio']:.2f}",
             "pass" if r["pass"] else "**FAIL**"] for r in doc.get("rows") or []]
    if body:
        out += [_table(body, ["scheme", "M", "comparison", "qbench µs", "triton µs", "ratio", "verdict"],
                       right=(1, 3, 4, 5)), ""]
    body = [[r["scheme"], str(r["m"]), fmt_us(r["qbench_us"]), fmt_us(r["reference_us"]),
             "—" if r["ratio"] is None else f"{r['ratio']:.2f}", "pass" if r["pass"] else "**FAIL**"]
            for r in doc.get("stream_rows") or []]
    if body:
        out.append(_table(body, ["scheme", "M", "qbench stream µs", "plain-torch graph of copies µs", "ratio",
                                 "verdict"], right=(1, 2, 3, 4)))
    return "\n".join(out).rstrip()


def gen_crosscheck_step(args: list[str], page: str) -> str:
    """``crosscheck-step FILE``: ``scripts/crosscheck_step.py``'s output: qbench's decode step
    against transformers' on the same weights, per scheme."""
    doc = json.loads((ROOT / args[0]).read_text())
    body = [[r["scheme"], str(r["m"]), str(r["context"]), f"{r['hf_graph_us'] / 1000:.2f}",
             f"{r['qbench_graph_us'] / 1000:.2f}", f"{r['ratio_qbench_over_hf']:.2f}", f"{r['logits_rel_diff']:.3f}",
             f"{r['top1_agree']:g}"] for r in doc["records"]]
    head = (f"`{args[0]}`: {doc['model']}, {doc['blocks']} blocks, {'compiled' if doc['compiled'] else 'eager'}, "
            f"{doc.get('gpu')}, torch {doc.get('torch')}, transformers {doc.get('transformers')}.")
    return head + "\n\n" + _table(body, ["scheme", "M", "context", "transformers ms", "qbench ms", "qbench / transformers",
                                         "logits rel. diff", "top-1 agree"], right=(1, 2, 3, 4, 5, 6, 7))


def gen_layer_pick(args: list[str], page: str) -> str:
    """``layer-pick FILE BUDGET...``: per budget, ``qbench recommend``'s pick at the file's first M
    as a sentence (its stream time, the speed-up over bf16, the error, how often it won over the
    file's runs, the schemes tied with it)."""
    from qbench.readers.common import group_results, open_results
    from qbench.readers.recommend import add_stability, recommend
    from qbench.render.columns import fmt_us

    path, budgets = args[0], [float(b) for b in args[1:]]
    result = group_results([str(ROOT / path)], open_results([str(ROOT / path)]))[0]
    doc = result.doc
    lines = []
    for budget in budgets:
        rec = recommend(doc, budget, "stream")
        add_stability(rec, [recommend(run, budget, "stream") for run in result.runs])
        entry = rec["by_m"][0]
        pick = entry["pick"]
        if pick is None:
            lines.append(_bullet(f"rel_fro ≤ {budget:g}: no scheme"))
            continue
        base = next(r.stats("stream").median for r in doc.rows if r.scheme == "bf16" and r.m == entry["m"])
        won = pick.get("stability") or {}
        runs = f", picked in {won['picked']} of {won['runs']} runs" if won.get("runs", 1) > 1 else ""
        ties = f"; as fast within noise: {', '.join(pick['ties'])}" if pick["ties"] else ""
        lines.append(_bullet(f"rel_fro ≤ {budget:g}: **{pick['scheme']}**, {fmt_us(pick['latency_us'])} µs, "
                             f"{base / pick['latency_us']:.2f}× bf16 ({fmt_us(base)} µs), rel_fro {pick['rel_fro']:.2g}"
                             f"{runs}{ties}"))
    return "\n".join(lines)


def _other_m(recs: list[dict], speedups: dict) -> list[str]:
    """A bullet per larger M where the smallest M's picks lose to bf16 (by the pick's own method)."""
    first = min(r["m"] for r in recs)
    picks = {(r["pick"], r["method"]) for r in recs if r["m"] == first and r["pick"] and not r["pick"].startswith("bf16")}
    out = []
    for m in sorted({r["m"] for r in recs} - {first}):
        got = {(s, meth): [v[meth] for k, v in speedups.items() if k[:2] == (s, m) and meth in v] for s, meth in picks}
        said = [f"{s} {min(g):.2f}-{max(g):.2f}×" for (s, _), g in sorted(got.items()) if g and max(g) < 1]
        if said:
            out.append(_bullet(f"At M = {m} the M = {first} picks lose to bf16: {', '.join(said)}: pick per M"))
    return out


def gen_step_pick(args: list[str], page: str) -> str:
    """``step-pick FILE BUDGET``: per M and context, the fastest step within a logits budget (``qbench recommend
    STEP.json --max-rel-err BUDGET``), its speed-up over bf16 in the same form and in a reduce-overhead loop, its
    logits error; then bf16's own, and the compiled schemes that lacked the others' Inductor tuning."""
    from qbench.results import read_results
    from qbench.step import view

    rows, budget = read_results(ROOT / args[0]).rows, float(args[1])
    by_key = {(r.scheme, r.m, r.context): r for r in rows}
    loop = "step_reduce_overhead"
    lines = []
    recs = view.recommend(rows, budget, "bf16")
    for rec in recs:
        at_m = [r for r in recs if r["m"] == rec["m"]]
        if len({r["pick"] for r in at_m}) == 1 and rec["pick"] in ("bf16", "bf16+compiled"):
            if rec is at_m[0]:  # an M where bf16 wins at every context: one line
                lines.append(_bullet(f"M = {rec['m']}, every context ({', '.join(str(r['context']) for r in at_m)}): "
                                     f"**{rec['pick']}**: no quantized scheme within the budget is faster"))
            continue
        if rec["pick"] is None:
            lines.append(_bullet(f"M = {rec['m']}, {rec['context']} positions: none within the budget"))
            continue
        pick = by_key[(rec["pick"], rec["m"], rec["context"])]
        base = by_key.get(("bf16+compiled" if pick.mode == "compiled" else "bf16", rec["m"], rec["context"]))
        said = "; the GPU throttled during it" if "throttled" in pick.flag_names else ""
        if base is not None and pick.step_us(loop) and base.step_us(loop) and pick.scheme != base.scheme:
            ratio = base.step_us(loop) / pick.step_us(loop)
            said += f"; in a reduce-overhead loop {ratio:.2f}× bf16's speed{' (slower)' if ratio < 1 else ''}"
        against = "bf16 compiled" if pick.mode == "compiled" else "bf16"
        lines.append(_bullet(f"M = {rec['m']}, {rec['context']} positions: **{rec['pick']}**, "
                             f"{rec['step_us'] / 1000:.2f} ms per step, {rec['speedup']:.2f}× {against}, logits rel_fro "
                             f"{rec['rel_fro']:.2g}{said}"))
    lines += _other_m(recs, view.speedups(rows))
    if own := [view.logits_error(r) for r in rows if r.scheme == "bf16" and view.logits_error(r) is not None]:
        lines.append(f"\n(bf16's own logits rel_fro to the FP32 step: {min(own):.2g} to {max(own):.2g}.)")
    if len(sides := view.inductor_sides(rows)[0]) == 2:
        lines.append(f"({', '.join(sorted(sides[False]))} here lacked the others' Inductor tuning: speed-ups over it "
                     "are\noverstated; docs/step.md.)")
    return "\n".join(lines)


def gen_search_pick(args: list[str], page: str) -> str:
    """``search-pick SEARCH.json [PROOF_STEP.json]``: the search's answer on the measured steps, in two lines."""
    from qbench.search.view import pick_summary
    return "\n".join(_bullet(line) for line in pick_summary([str(ROOT / a) for a in args]))


#: The named blocks: name -> function(arguments, the page's text) returning Markdown.
GENERATORS: dict[str, Callable[[list[str], str], str]] = {
    "contents": gen_contents, "scheme": gen_scheme, "ceilings": gen_ceilings, "row-schema": gen_row_schema,
    "crosscheck": gen_crosscheck, "crosscheck-step": gen_crosscheck_step, "layer-pick": gen_layer_pick,
    "step-pick": gen_step_pick, "search-pick": gen_search_pick,
}


def run_named(spec: str, page: str) -> str:
    """The body of the named block ``spec`` (``NAME ARGS``) on ``page``.

    Raises:
        DocsError: an unknown name, or a generator that failed (a file missing, a scheme absent).
    """
    name, *args = shlex.split(spec)
    if name not in GENERATORS:
        raise DocsError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
    try:
        return GENERATORS[name](args, page).rstrip("\n") + "\n"
    except DocsError:
        raise
    except (OSError, ValueError, KeyError, IndexError, StopIteration) as exc:
        raise DocsError(f"gen:{spec}: {type(exc).__name__}: {exc}") from None


# ---- a page ------------------------------------------------------------------------------------

def regenerate(text: str, source: str = "<doc>") -> str:
    """``text`` with every generated block replaced by what its command or generator gives now.

    Raises:
        DocsError: a command or generator failed, or the fenced block above a command's marker
            does not show its command.
    """
    pieces, last = [], 0
    for match in _BLOCK.finditer(text):
        command = match.group("cmd").strip()
        above = _FENCE_ABOVE.search(text[: match.start()])
        if above is None or above.group("cmd").strip() != command:
            line = text.count("\n", 0, match.start()) + 1
            raise DocsError(f"{source}:{line}: the fenced block above the marker must show the command {command!r}")
        try:
            output = run_command(command)
        except DocsError as exc:
            raise DocsError(f"{source}:{text.count(chr(10), 0, match.start()) + 1}: {exc}") from None
        pieces += [text[last: match.start("body")], block_body(command, output)]
        last = match.end("body")
    pieces.append(text[last:])
    text = "".join(pieces)
    pieces, last = [], 0
    for match in _NAMED.finditer(text):
        try:
            body = run_named(match.group("spec").strip(), text)
        except DocsError as exc:
            raise DocsError(f"{source}:{text.count(chr(10), 0, match.start()) + 1}: {exc}") from None
        pieces += [text[last: match.start("body")], body]
        last = match.end("body")
    pieces.append(text[last:])
    return "".join(pieces)


def image_commands(text: str) -> list[str]:
    """The chart commands (``<!-- IMAGE: ... -->``) of a document."""
    return [m.group("cmd").strip() for m in _IMAGE.finditer(text)]


def _job_of(path: Path) -> str:
    """The job kind of a result file's rows (``qbench.jobs.of_rows``)."""
    from qbench import jobs

    return jobs.of_rows(json.loads(path.read_text(encoding="utf-8")).get("rows", [])).name


def image_outputs(command: str) -> list[Path]:
    """The PNGs a ``qbench plot`` command writes: ``-o FILE.png`` and, unless ``--what roofline``,
    ``FILE-pareto.png``; of a model-step result, ``FILE.png`` alone."""
    argv = shlex.split(command)
    out = Path(argv[argv.index("-o") + 1]) if "-o" in argv else None
    if out is None:
        raise DocsError(f"image command without -o: {command!r}")
    what = argv[argv.index("--what") + 1] if "--what" in argv else "both"
    source = next((ROOT / a for a in argv[2:] if a.endswith(".json")), None)
    if source is not None and source.is_file() and _job_of(source) == "step":
        return [ROOT / out]  # a model-step file: one chart, the step against the context
    files = [] if what == "pareto" else [out]
    if what in ("pareto", "both"):
        files.append(out.with_name(f"{out.stem}-pareto.png"))
    return [ROOT / f for f in files]


def pages() -> list[Path]:
    """The pages with generated blocks: README.md and docs/*.md."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 with a diff when out of date")
    parser.add_argument("--images", action="store_true", help="also redraw the charts (qbench plot)")
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)")
    args = parser.parse_args(argv)
    files = args.files or pages()
    stale = 0
    try:
        for path in files:
            old = path.read_text(encoding="utf-8")
            new = regenerate(old, str(path))
            for command in image_commands(old):
                if args.images and not args.check:
                    run_command(command)
                missing = [str(p.relative_to(ROOT)) for p in image_outputs(command) if not p.is_file()]
                if missing:
                    stale += 1
                    print(f"{path}: chart missing: {', '.join(missing)} (run: {command})")
            if new == old:
                continue
            if args.check:
                stale += 1
                sys.stdout.writelines(difflib.unified_diff(
                    old.splitlines(keepends=True), new.splitlines(keepends=True),
                    fromfile=f"{path} (committed)", tofile=f"{path} (regenerated)"))
            else:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path}")
    except DocsError as exc:
        print(f"gen_docs: {exc}", file=sys.stderr)
        return 2
    if not args.files:
        status = _load_script("scripts/results_index.py").main(["--check"] if args.check else [])
        if status == 2:
            return 2
        stale += status
    if stale and args.check:
        print(f"\ngen_docs: {stale} out of date; run: python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
