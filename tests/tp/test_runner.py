"""qbench.tp.runner end to end on the CPU: torchrun with two gloo ranks, both splits, and the
rows a scheme without a CPU kernel or a host without enough cores gets."""

import json
import os

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
        # stream: every rank calls L shard copies in rotation (+ the collective); one L on every rank
        st = r["latency_us"]["stream"]
        assert st is not None, r["latency_reasons"].get("stream")
        assert st["copies"] >= 4 and st["copy_bytes"] == r["stored_bytes"] and st["how"] in ("deepcopy", "rebuilt")
        assert st["median"] > 0 and st["stop"] in ("ci-target", "budget", "max-reps")
        assert len(r["per_rank_median_us"]["stream"]) == r["tp_size"]
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


def test_speedup_vs_tp1_hand_computed():
    """tp1 stream 10 µs, tp2 stream 4 µs: 2.5 (stream); without a tp2 stream: cold 12 / 8 = 1.5;
    a failed row, a tp1 row and a row without a tp1 partner get none."""
    from qbench.tp.measure import add_speedup_vs_tp1
    from tests.rows import make_row

    def row(tp, stream, cold, status="ok", scheme="bf16", m=1):
        r = make_row(scheme=scheme, m=m, k=64, n=64, status=status, tp_size=tp, split="none" if tp == 1 else "row",
                     latency_us={"stream": None if stream is None else {"median": stream},
                                 "cold": None if cold is None else {"median": cold}})
        return r

    one = row(1, 10.0, 12.0)
    a, b, failed, lonely = row(2, 4.0, 9.0), row(2, None, 8.0), row(2, 4.0, 8.0, status="failed"), row(2, 4.0, 8.0, m=2)
    add_speedup_vs_tp1([a, b, failed, lonely, one], [one])
    assert (a["speedup_vs_tp1"], a["speedup_vs_tp1_method"]) == (2.5, "stream")
    assert (b["speedup_vs_tp1"], b["speedup_vs_tp1_method"]) == (1.5, "cold")
    assert failed.get("speedup_vs_tp1") is None and lonely.get("speedup_vs_tp1") is None
    assert one.get("speedup_vs_tp1") is None


def test_report_columns_of_tp_rows():
    """The one TP table is qbench report's: speed-up with its method, collective bytes, error vs unsharded."""
    from qbench.render import render
    from qbench.render.columns import resolve_columns
    from qbench.row import validate_row
    from tests.rows import full_tp_row

    row = validate_row(full_tp_row())
    cols = resolve_columns(["scheme", "tp_size", "split", "tp_speedup", "collective_bytes", "vs_unsharded"], [row])
    cells = [c.cell(row) for c in cols]
    assert cells == ["int8-weight-only+compiled", "2", "row", "1.25× cold", "16384", "0.0001"]
    assert cols[3].value(row) == 1.25  # csv/json get the number
    assert "speed-up vs tp 1 (tp1 time / this)" in render([row], cols, "simple")


def test_default_tp_table_says_the_bytes_are_per_rank():
    from qbench.render.columns import default_columns
    from qbench.row import validate_row
    from tests.rows import full_tp_row

    cols = default_columns([validate_row(full_tp_row())])
    assert "shard_mib" in cols and "stored_mib" not in cols
    assert cols[:5] == ["scheme", "m", "tp_size", "split", "collective"]


TORCHRUN_LOG = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/bad.py", line 4, in <module>
[rank1]:     raise RuntimeError("boom on rank 1")
[rank1]: RuntimeError: boom on rank 1
[rank0]: Traceback (most recent call last):
[rank0]:     work.wait()
[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:38619.
W1207 00:49:42.227000 4464 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 4471 closing signal SIGTERM
Traceback (most recent call last):
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4434)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_00:49:31
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4435)
============================================================
"""


def test_failed_job_reason_is_the_root_cause_ranks_exception(tmp_path):
    """A 2-rank job whose rank 1 raised (the log of a real torchrun run, shortened): the row's reason
    quotes rank 1's exception, not rank 0's broken connection nor torchrun's ChildFailedError."""
    log = tmp_path / "worker.log"
    log.write_text(TORCHRUN_LOG)
    assert runner._last_line(str(log)) == "[rank1]: RuntimeError: boom on rank 1"
    log.write_text(TORCHRUN_LOG.split("Root Cause")[0])  # no summary: the last rank's exception
    assert runner._last_line(str(log)).startswith("[rank0]: RuntimeError: [gloo")
    log.write_text("\n".join(line for line in TORCHRUN_LOG.splitlines() if not line.startswith("[rank")))
    assert runner._last_line(str(log)) == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"


CRASH_RANK_1_ONCE = """\
import os, sys
if os.environ.get("RANK") == "1" and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
    sys.stderr.write("RuntimeError: injected crash of rank 1\\n")
    sys.stderr.flush()
    os._exit(3)
"""


def test_a_rank_that_crashes_once_is_restarted_and_its_rows_flagged(tmp_path, monkeypatch):
    """Rank 1 dies at start-up on the first launch (a sitecustomize on the workers' PYTHONPATH): torchrun
    launches both ranks again (--max-restarts=1), the rows are ok and flagged ``restarted`` with the first
    launch's failure line."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(CRASH_RANK_1_ONCE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")])))
    sc = _scenario(tmp_path, ["int8-weight-only"], '[tp]\ntp_size = [2]\nsplit = ["column"]\n')
    outcome = runner.run_tp(sc, device="cpu", out=str(tmp_path / "r.json"), force=False)
    (row,) = [r for r in outcome.doc["rows"] if r["m"] == 1]
    assert row["status"] == "ok", row["reason"]
    assert [f["text"] for f in row["flags"] if f["name"] == "restarted"] == [
        "torchrun launched the job's 2 processes 2 times; the failure: RuntimeError: injected crash of rank 1"]


RESTARTED_LOG = """\
W1207 01:24:39.671000 10413 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 10417 closing signal SIGTERM
E1207 01:24:39.675000 10413 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 10418) of binary: /work/venv/bin/python
[rank1]:W1207 01:24:45.147000 10422 torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass and is now natively supported
[rank0]:W1207 01:24:45.268000 10421 torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass and is now natively supported
"""


def test_a_restarted_jobs_flag_quotes_the_first_launchs_failure(tmp_path):
    """A 2-rank job whose rank 1 was SIGKILLed on the first launch (no exception line: the OOM killer; the log of a
    real torchrun run, shortened) and ran again: the flag quotes torchrun's line of the first launch's failure, not
    the second launch's last warning; where the first launch's ranks raised, the failed rank's exception (rank 0's
    broken connection is a consequence), and never a line of the second launch."""
    log = tmp_path / "worker.log"
    log.write_text(RESTARTED_LOG)
    assert runner._first_failure(str(log)) == ("failed (exitcode: -9) local_rank: 1 (pid: 10418) of binary: "
                                                "/work/venv/bin/python")
    raised = ("[rank1]: RuntimeError: boom on rank 1\n[rank0]: RuntimeError: [gloo] Connection closed by peer\n"
              + RESTARTED_LOG.replace("exitcode: -9", "exitcode: 1") + "[rank0]: ValueError: of the second launch\n")
    log.write_text(raised)
    assert runner._first_failure(str(log)) == "[rank1]: RuntimeError: boom on rank 1"
    # rank 1 SIGKILLed, rank 0's broken connection printed before torchrun's line: the line of rank 1, not rank 0's
    log.write_text("[rank0]: RuntimeError: [gloo] Connection closed by peer\n" + RESTARTED_LOG)
    assert runner._first_failure(str(log)).startswith("failed (exitcode: -9) local_rank: 1 ")


def test_a_failed_jobs_reason_is_never_another_ranks_error(tmp_path):
    """torchrun names rank 1 the root cause; rank 1 printed nothing (SIGKILL), rank 0 its broken connection: the
    reason is torchrun's line for rank 1 (review 2026-12-07: it quoted rank 0's gloo error)."""
    log = tmp_path / "worker.log"
    killed = TORCHRUN_LOG.replace("[rank1]: RuntimeError: boom on rank 1\n", "").replace(
        "W1207 00:49:42.227000", "E1207 00:49:42.225000 4464 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: -9) local_rank: 1 (pid: 4435) of binary: python\nW1207 00:49:42.227000")
    log.write_text(killed)
    assert runner._last_line(str(log)) == "failed (exitcode: -9) local_rank: 1 (pid: 4435) of binary: python"


def test_failed_rows_of_a_restarted_job_say_it_in_their_reason(tmp_path, monkeypatch):
    """A job torchrun restarted whose second launch still wrote failed rows (its rank 0 caught the scheme's error):
    failed rows carry no flags, so their reason says the job was restarted and after what."""
    import sys

    from qbench.measure import failed_rows

    sc = _scenario(tmp_path, ["int8-weight-only"], '[tp]\ntp_size = [2]\nsplit = ["column"]\n')
    dev = torch.device("cpu")
    rows = failed_rows(runner._rows(sc, 0, dev, 2, "column"), "failed", "run (rank 0): RuntimeError: x")
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    script = ("import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2] + '/rows.json'); print('E1207 0 api.py:1002] "
              "failed (exitcode: -9) local_rank: 1 (pid: 7) of binary: python')")
    monkeypatch.setattr(runner, "command", lambda tp, job, out: [sys.executable, "-c", script,
                                                                 str(tmp_path / "rows.json"), out])
    got = runner.run_job(sc, 0, 2, "column", dev, str(tmp_path / "job"))
    assert {r["reason"] for r in got} == {
        "run (rank 0): RuntimeError: x (the second launch: torchrun restarted the job after failed (exitcode: -9) "
        "local_rank: 1 (pid: 7) of binary: python)"}
