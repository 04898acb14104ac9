"""Markdown tables of committed model-step results (for docs/step.md and docs/results-h200.md).

    python scripts/step_tables.py steps results/h200/step_llama31_8b.json
    python scripts/step_tables.py decisions results/h200/step_llama31_8b.json
    python scripts/step_tables.py contexts results/h200/step_llama31_8b.json

``steps``: per scheme, M and context, the step by each method, Σ linear (the layer view), the
remainder's share, HBM floor / step, and the speed-up over bf16 measured (the decision method:
compiled step in a graph, else the eager step in a graph) against the one Σ linear predicts.
``decisions``: per M and context, the fastest scheme by the measured step, the schemes whose step
ties it within noise (p10-p90 overlap, :func:`qbench.step.view.tied`), the fastest by Σ linear and
the schemes tied with it (each layer's p10-p90 summed, :func:`qbench.step.view.linear_stats`), and
whether they pick the same format (a compiled and an eager form of one scheme have the same Σ
linear within noise, so the format is the decision the two views can disagree on): ``yes``,
``tie`` (one side's pick is among the other side's ties), or ``no``. Rows without a step (host-syncing schemes) are listed under the table.
``contexts``: per M and context, bf16's measured step, its Σ linear and the remainder (step − Σ
linear, the attention over the KV cache, norms, RoPE, the LM head's argmax and launch gaps), then the
same for the fastest scheme by the measured step: where the time goes as the context grows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qbench.step.row import StepRow  # noqa: E402
from qbench.step.view import (DASH, SHORT, STEP_METHODS, decision_method, linear_speedup, linear_stats,  # noqa: E402
                               speedups, tied)


def _rows(path: str) -> list[StepRow]:
    return [StepRow.model_validate(r) for r in json.loads(Path(path).read_text())["rows"]]


def _ms(us):
    return "—" if us is None else f"{us / 1000:.2f}"


def steps(path: str) -> str:
    rows = _rows(path)
    sp, lsp = speedups(rows), linear_speedup(rows)
    out, unusable = [], []
    for r in rows:
        method = decision_method(r)
        if r.status != "ok" or method is None:
            unusable.append(f"- {r.scheme} M={r.m} context={r.context}: no step time: "
                            f"{r.reason or next(iter(r.latency_reasons.values()), '')}")
            continue
        lin = (r.linear or {}).get("sum_us")
        out.append({"scheme": r.scheme, "M": r.m, "context": r.context,
                    "blocks": f"{r.blocks_built}/{r.blocks}",
                    **{f"{SHORT[m]} ms": _ms(r.step_us(m)) for m in STEP_METHODS if SHORT[m] != "cpu"},
                    "Σ linear ms": _ms(lin),
                    "rest %": f"{100 * r.remainder_share[method]:.0f}" if method in r.remainder_share else "—",
                    "floor %": f"{100 * r.floor_fraction[method]:.0f}" if method in r.floor_fraction else "—",
                    "× bf16 (step)": f"{sp[r.key][method]:.2f}" if method in sp.get(r.key, {}) else "—",
                    "× bf16 (Σ linear)": f"{lsp[r.key]:.2f}" if r.key in lsp else "—",
                    "logits err": f"{r.error['rel_fro']:.3f}" if r.error and r.error.get("rel_fro") is not None else "—"})
    text = tabulate(out, headers="keys", tablefmt="github", disable_numparse=True)
    dedup = list(dict.fromkeys(line.split(": no step time")[0].split(" M=")[0] + ": " + line.split("no step time: ")[1]
                               for line in unusable))
    return text + ("\n\nNo step time (cannot be captured in a CUDA graph):\n" + "\n".join(dedup) if dedup else "")


def decisions(path: str) -> str:
    rows = [r for r in _rows(path) if r.status == "ok"]
    out = []
    for key in sorted({(r.m, r.context) for r in rows}):
        here = [r for r in rows if (r.m, r.context) == key]
        timed = [r for r in here if decision_method(r)]
        summed = [r for r in here if linear_stats(r) is not None]
        if not timed or not summed:
            continue
        best = min(timed, key=lambda r: r.step_us(decision_method(r)))
        ties = tied(timed, best)
        best_lin = min(summed, key=lambda r: r.linear["sum_us"])
        lin_ties = tied(summed, best_lin, linear_stats)
        fmt = {r.scheme: r.base_scheme for r in here}
        step_side = {fmt[r.scheme] for r in [best, *ties]}
        lin_side = {fmt[r.scheme] for r in [best_lin, *lin_ties]}
        same = ("yes" if fmt[best.scheme] == fmt[best_lin.scheme]
                else "tie" if fmt[best.scheme] in lin_side or fmt[best_lin.scheme] in step_side else "**no**")
        out.append({"M": key[0], "context": key[1],
                    "fastest by the step": f"{best.scheme} ({best.step_us(decision_method(best)) / 1000:.2f} ms)",
                    "tied within noise": ", ".join(r.scheme for r in ties) or DASH,
                    "fastest by Σ linear": f"{best_lin.scheme} ({best_lin.linear['sum_us'] / 1000:.2f} ms)",
                    "tied (Σ linear)": ", ".join(r.scheme for r in lin_ties) or DASH, "same format": same})
    return tabulate(out, headers="keys", tablefmt="github", disable_numparse=True)


def contexts(path: str) -> str:
    rows = [r for r in _rows(path) if r.status == "ok" and decision_method(r)]
    out = []
    for key in sorted({(r.m, r.context) for r in rows}):
        here = [r for r in rows if (r.m, r.context) == key]
        bf16 = next((r for r in here if r.scheme == "bf16"), None)
        best = min(here, key=lambda r: r.step_us(decision_method(r)))
        record = {"M": key[0], "context": key[1]}
        for label, r in (("bf16", bf16), ("fastest", best)):
            if r is None:
                record.update({f"{label} step ms": "—", f"{label} Σ linear ms": "—", f"{label} rest ms (%)": "—"})
                continue
            method = decision_method(r)
            step, lin = r.step_us(method), (r.linear or {}).get("sum_us")
            rest = f"{(step - lin) / 1000:.2f} ({100 * (step - lin) / step:.0f} %)" if lin is not None else "—"
            if label == "fastest":
                record["fastest"] = f"{r.scheme} ({SHORT[method]})"
            record.update({f"{label} step ms": _ms(step), f"{label} Σ linear ms": _ms(lin), f"{label} rest ms (%)": rest})
        out.append(record)
    return tabulate(out, headers="keys", tablefmt="github", disable_numparse=True)


VIEWS = {"steps": steps, "decisions": decisions, "contexts": contexts}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in VIEWS:
        print(__doc__, file=sys.stderr)
        return 2
    print(VIEWS[argv[0]](argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
