"""scripts/step_tables.py over the committed H200 model-step files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import step_tables  # noqa: E402

STEP_8B = str(ROOT / "results" / "h200" / "step_llama31_8b.json")


def _table(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_contexts_rest_is_step_minus_sigma_linear_and_the_fastest_is_the_smallest_step():
    rows = json.loads(Path(STEP_8B).read_text())["rows"]
    table = _table(step_tables.contexts(STEP_8B))
    assert [(int(r["M"]), int(r["context"])) for r in table] == [(1, 128), (1, 4096), (1, 32768),
                                                                  (16, 128), (16, 4096), (16, 32768)]
    for rec in table:
        for who in ("bf16", "fastest"):
            step, lin = float(rec[f"{who} step ms"]), float(rec[f"{who} Σ linear ms"])
            rest = float(rec[f"{who} rest ms (%)"].split()[0])
            assert abs(step - lin - rest) <= 0.011  # each printed to 0.01 ms
        here = [r for r in rows if (r["m"], r["context"]) == (int(rec["M"]), int(rec["context"])) and r["status"] == "ok"]
        steps = [(r["latency_us"].get("step_compiled") or r["latency_us"]["step_graph"])["median"] for r in here]
        assert float(rec["fastest step ms"]) == round(min(steps) / 1000, 2)
    bf16 = next(r for r in rows if (r["scheme"], r["m"], r["context"]) == ("bf16", 1, 128))
    assert table[0]["bf16 step ms"] == f"{bf16['latency_us']['step_graph']['median'] / 1000:.2f}"


def test_an_unknown_view_prints_the_usage_and_exits_2(capsys):
    assert step_tables.main(["nope", STEP_8B]) == 2
    assert "contexts" in capsys.readouterr().err
