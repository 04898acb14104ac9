"""Markdown table of tensor-parallel rows: times and the speedup against tp_size 1.

``python -m qbench.tp.table RESULT.json`` prints it (for docs/ tables of a multi-GPU run).
Speedup = end_to_end median at tp_size 1 (the unsharded row, ``split = "none"``) / end_to_end
median at tp_size p, per (scheme, M); ``-`` where either is missing.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from qbench.results import read_results

_HEAD = ("scheme", "M", "split", "tp", "GEMM µs", "collective µs", "end-to-end µs", "speedup", "coll. bytes",
         "busbw GB/s", "rel err", "vs unsharded", "status")


def _median(stats: Optional[dict]) -> Optional[float]:
    return None if not stats else stats.get("median")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def speedup_rows(rows: Sequence[dict]) -> list[tuple]:
    """One tuple per tensor-parallel row (columns :data:`_HEAD`), ordered scheme, M, split, tp."""
    base = {(r["scheme"], r["m"]): _median(r.get("end_to_end_us")) for r in rows if r.get("tp_size") == 1}
    out = []
    order = {"none": 0, "column": 1, "row": 2}
    for r in sorted((r for r in rows if "tp_size" in r),
                    key=lambda r: (r["scheme"], r["m"], order.get(r["split"], 3), r["tp_size"])):
        e2e, one = _median(r.get("end_to_end_us")), base.get((r["scheme"], r["m"]))
        speed = one / e2e if one and e2e else None
        err = (r.get("error") or {}).get("rel_fro")
        vs = (r.get("sharded_vs_unsharded") or {}).get("rel_fro")
        out.append((r["scheme"], r["m"], r["split"], r["tp_size"], _fmt(_median(r.get("local_gemm_us")), ".1f"),
                    _fmt(_median(r.get("collective_us")), ".1f"), _fmt(e2e, ".1f"), _fmt(speed, ".2f"),
                    _fmt(r.get("collective_bytes"), "d"), _fmt(r.get("collective_busbw_gbps"), ".1f"),
                    _fmt(err, ".3g"), _fmt(vs, ".3g"), r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"))
    return out


def markdown(rows: Sequence[dict]) -> str:
    """The table as GitHub markdown."""
    lines = ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in speedup_rows(rows)]
    return "\n".join(lines)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(f"{path}\n\n{markdown(read_results(path)['rows'])}\n")
