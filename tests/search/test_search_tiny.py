"""The whole search on the committed trained checkpoint, on the CPU: the one result file, a pick
whose measured KLD's upper bound meets the budget, the pick and two other front points measured by
both jobs with predicted beside measured. Slow: about 3 minutes of a 2-core CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from qbench import cli
from qbench.results import read_results

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_search_tiny_end_to_end(tmp_path, capsys):
    out = tmp_path / "search_tiny.json"
    code = cli.main(["run", str(ROOT / "scenarios" / "search_tiny.toml"), "--device", "cpu", "-o", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    doc = read_results(out)
    assert doc.job == "search" and doc.complete
    s = doc.model_extra["search"]
    budget = s["budget"]["max_kld"]
    pick = [r for r in doc.rows if r.pick]
    assert len(pick) == 1 and pick[0].measured.kld + pick[0].measured.kld_unc <= budget
    verified = [r for r in doc.rows if r.measured is not None]
    assert len([r for r in verified if r.kind == "front"]) + len([r for r in verified if r.kind == "pure"]) >= 3
    assert all(r.measured.step_us is not None for r in verified)  # both jobs measured each
    # the front's size is the CPU's measured times' (bf16 fastest and best: the front is bf16 alone), not a known answer
    assert [r.kind for r in doc.rows].count("pure") == 3 and {r.kind for r in doc.rows} <= {"pure", "front"}
    assert len(s["units"]) == 16 and s["floor"]["scheme"] == "bf16"
    assert not list(tmp_path.glob("*.partial.json"))
