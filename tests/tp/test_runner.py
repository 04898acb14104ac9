"""qbench.tp.runner end to end on the CPU: torchrun with two gloo ranks, both splits, and the
rows a scheme without a CPU kernel or a host without enough cores gets."""

import json

import pytest
import torch

from qbench import scenario
from qbench.tp import runner
from tests.conftest import small_scenario_toml

STATS = {"median", "p10", "p90", "mean", "cv", "n"}


def _scenario(tmp_path, schemes, tp, k=256):
    path = tmp_path / "tp.toml"
    path.write_text(small_scenario_toml(schemes, m=(1, 4), k=k, n=256) + tp)
    return scenario.load(path)


def test_run_tp_two_ranks_both_splits(tmp_path):
    sc = _scenario(tmp_path, ["int8-weight-only", "fp8-dynamic", "int4-weight-only"],
                   '[tp]\ntp_size = [1, 2]\nsplit = ["column", "row"]\n')
    out = tmp_path / "r.json"
    outcome = runner.run_tp(sc, device="cpu", out=str(out), force=False)
    assert outcome.exit_code == 0 and json.loads(out.read_text())["complete"] is True
    rows = outcome.doc["rows"]
    assert len(rows) == 3 * 3 * 2  # schemes x (tp1, column 2, row 2) x M
    ok = {(r["split"], r["m"]): r for r in rows if r["base_scheme"] == "int8-weight-only"}
    assert all(r["status"] == "ok" for r in ok.values()), [r["reason"] for r in ok.values()]
    for (split, m), r in ok.items():
        assert set(r["end_to_end_us"]) == STATS | {"stop"} and set(r["local_gemm_us"]) == STATS | {"stop"}
        assert r["end_to_end_us"]["stop"] in ("ci-target", "budget", "max-reps")
        assert r["latency_us"]["cpu"] == r["end_to_end_us"] and r["output_dtype"] == "bfloat16"
        if split == "none":
            assert r["tp_size"] == 1 and r["collective_us"] is None and r["collective_bytes"] == 0
            continue
        assert r["tp_size"] == 2 and set(r["collective_us"]) == STATS | {"stop"}
        assert len(r["per_rank_median_us"]["collective"]) == 2
        bus = (1 if split == "column" else 2) * m * 256 * 2 // 2  # (p-1)/p or 2(p-1)/p of M N bf16
        assert r["collective_bytes"] == bus and r["collective"] == {"column": "all_gather", "row": "all_reduce"}[split]
        assert r["shard"]["same_as_slice"] is (split == "column")
        e_u, e_s = r["unsharded_error"]["rel_fro"], r["error"]["rel_fro"]
        tp1 = ok[("none", m)]["error"]["rel_fro"]
        if split == "column":  # int8 per-row scales over all of K: the shards are slices of the TP=1 weight
            assert r["error"]["rel_fro"] == pytest.approx(tp1, rel=1e-12) and e_u == pytest.approx(tp1, rel=1e-12)
        else:  # row: int8 per-row scales are taken per shard, an independent quantization (errors add in quadrature)
            assert r["error"]["rel_fro"] != pytest.approx(tp1, rel=1e-6)
        assert r["sharded_vs_unsharded"]["rel_fro"] <= (1.0 if r["shard"]["same_as_slice"] else 1.5) * max(e_u, e_s)
        assert e_s <= e_u + 2 * 2.0 ** -8
        assert r["stored_bytes_all_ranks"] >= 2 * r["stored_bytes"] - 64
    for r in rows:
        if r["base_scheme"] in ("fp8-dynamic", "int4-weight-only"):
            assert r["status"] == "skipped" and "needs CUDA" in r["reason"], r["reason"]


def test_skip_reasons_without_processes(tmp_path):
    sc = _scenario(tmp_path, ["bf16", "int4-weight-only"], '[tp]\ntp_size = [1, 2, 8]\n', k=1024)
    cpu = torch.device("cpu")
    assert runner.jobs(sc)[:3] == [(0, 1, "none"), (0, 2, "column"), (0, 8, "column")]
    assert "this host allows 2" in runner.skip_reason(sc, 0, 8, "row", cpu, 2)
    assert runner.skip_reason(sc, 0, 2, "row", cpu, 2) is None
    assert "needs CUDA" in runner.skip_reason(sc, 1, 2, "row", cpu, 8)
    assert runner.command(1, "j", "o")[1:3] == ["-m", "qbench.tp.worker"]
    assert "--nproc-per-node=8" in runner.command(8, "j", "o")


def test_run_tp_refuses_a_scenario_without_tp(tmp_path):
    path = tmp_path / "plain.toml"
    path.write_text(small_scenario_toml(["bf16"]))
    with pytest.raises(ValueError, match="no \\[tp\\] table"):
        runner.run_tp(scenario.load(path), device="cpu", out=str(tmp_path / "x.json"))
