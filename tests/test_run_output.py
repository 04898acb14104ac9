"""What ``qbench run`` prints after measuring (issue 24): the narrow table (120 characters; --wide
and --columns for more), the header's weight line, and the pick per M within rel_fro <= 0.01 with
the ``qbench recommend`` command that says why. The measuring itself is replaced by a finished
document (runner.run), so the test reads the output code alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from qbench import cli, forkserver, lifecycle
from tests.rows import make_row, stats

ROOT = Path(__file__).resolve().parents[1]


def _doc():
    def row(scheme, us, rel):
        return make_row(scheme=scheme, m=1, k=4096, n=4096, device="cuda:0", status="ok", error={"rel_fro": rel},
                        latency_us={"stream": stats(us, us * 0.99, us * 1.01), "cold": stats(us * 1.2),
                                    "warm": stats(us), "eager": stats(us * 3)},
                        weight_source="seeded Gaussian N(0, 1/K) (synthetic, seed 0)")
    return {"schema_version": 2, "complete": True, "wall_s": 1.0, "scenario": {"name": "decode"},
            "env": {"device": "cuda:0", "device_name": "NVIDIA H200"},
            "rows": [row("bf16", 11.0, 0.0), row("int8-weight-only-gemlite", 7.9, 0.009), row("int4-plain", 6.0, 0.1)]}


@pytest.fixture
def fake_run(monkeypatch, tmp_path):
    import qbench.runner as runner

    out = tmp_path / "decode.json"
    monkeypatch.setattr(forkserver, "start_early", lambda *a, **k: None)
    monkeypatch.setattr(runner, "run", lambda *a, **k: lifecycle.RunOutcome(doc=_doc(), path=out, exit_code=0))
    return out


def test_run_ends_with_the_pick_and_the_recommend_command(fake_run, capsys):
    assert cli.main(["run", str(ROOT / "scenarios" / "decode.toml"), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "weight: seeded Gaussian N(0, 1/K) (synthetic, seed 0)"
    table = [line for line in out if line.startswith(("scheme", "bf16", "int"))]
    assert table[0].split() == ["scheme", "M", "bits/w", "stream", "µs", "cold", "µs", "rel", "err", "status"]
    assert max(len(line) for line in table) <= 120
    assert out[-2:] == ["pick within rel_fro <= 0.01 (stream median): M=1 int8-weight-only-gemlite (7.90 µs)",
                        f"why, and the other schemes: qbench recommend {fake_run} --max-rel-err 0.01"]


def test_run_wide_columns_and_data_formats(fake_run, capsys):
    assert cli.main(["run", str(ROOT / "scenarios" / "decode.toml"), "--quiet", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "warm µs" in out and "eager µs" in out
    assert cli.main(["run", str(ROOT / "scenarios" / "decode.toml"), "--quiet", "--columns", "scheme,m,eager"]) == 0
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("scheme"))
    assert head.split() == ["scheme", "M", "eager", "µs"]
    assert cli.main(["run", str(ROOT / "scenarios" / "decode.toml"), "--quiet", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["scheme"] == "bf16"  # a parsed format is alone on stdout: no pick lines
    assert "pick within" not in captured.out + captured.err


def test_run_refuses_an_unknown_column_before_measuring(fake_run, capsys, monkeypatch):
    import qbench.runner as runner

    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("measured despite a bad --columns"))
    assert cli.main(["run", str(ROOT / "scenarios" / "decode.toml"), "--columns", "scheme,nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown column 'nope'" in err and err.count("\n") == 1
