"""No row is lost and every stop is clean (issue 24, items 1, 2 and 6; the break report's run-side
repros): a rerun never overwrites a partial file and --resume completes it; one run per --out;
default names never collide; SIGTERM and SIGKILL leave no worker and no temporary folder; a dead or
hung forkserver and a failed write are one line; ``qbench check`` answers without importing torch."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qbench import cli, lifecycle, runner
from qbench.results import read_results
from tests.conftest import small_scenario_toml

ROOT = Path(__file__).resolve().parent.parent
_ROWS = runner._Workers.rows  # the real one, whatever a test patched


def _scenario(tmp_path: Path, schemes: list[str], name: str = "s.toml", **kw) -> Path:
    path = tmp_path / name
    path.write_text(small_scenario_toml(schemes, m=kw.pop("m", (1,)), **kw))
    return path


def _run(*argv: str) -> int:
    return cli.main(["run", *map(str, argv), "--quiet"])


def _interrupt_at(monkeypatch, at: int, calls: list | None = None) -> None:
    """Ctrl-C when the runner asks for scheme ``at``'s rows (``at`` < 0: never); records the
    indices it was asked for in ``calls``."""
    real = _ROWS

    def rows(self, index):
        if calls is not None:
            calls.append(index)
        if index == at:
            raise KeyboardInterrupt
        return real(self, index)

    monkeypatch.setattr(runner._Workers, "rows", rows)


def _err_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# --- 1. no row is lost -------------------------------------------------------------------------------

def test_a_rerun_keeps_the_partial_file_and_resume_measures_only_what_it_lacks(tmp_path, monkeypatch, capsys):
    """Ctrl-C after one of three schemes; the same command again is refused (exit 2) and leaves the
    partial file byte-identical; with --resume it measures schemes 1 and 2 only, and the complete
    file holds the first run's rows unchanged."""
    sc, out = _scenario(tmp_path, ["fp32", "fp16", "bf16"], m=(1, 2)), tmp_path / "r.json"
    partial = tmp_path / "r.partial.json"
    _interrupt_at(monkeypatch, 1)
    assert _run(sc, "--out", out) == 130
    first = read_results(partial).to_json()["rows"]
    assert [r["scheme"] for r in first] == ["fp32", "fp32"]
    before = partial.read_bytes()
    capsys.readouterr()

    for extra in ([], ["--force"]):
        assert _run(sc, "--out", out, *extra) == 2
        assert _err_lines(capsys) == [f"qbench: {partial}: holds the rows of an interrupted run, which a new run does "
                                      "not overwrite; run the same command with --resume to measure only the "
                                      "schemes it lacks, or move it away"]
        assert partial.read_bytes() == before and not out.exists()

    calls: list[int] = []
    _interrupt_at(monkeypatch, -1, calls)
    assert _run(sc, "--out", out, "--resume") == 0
    assert calls == [1, 2]
    doc = read_results(out).to_json()
    assert doc["complete"] is True and not partial.exists() and not (tmp_path / "r.json.lock").exists()
    assert [r["scheme"] for r in doc["rows"]] == ["fp32", "fp32", "fp16", "fp16", "bf16", "bf16"]
    assert doc["rows"][:2] == first
    assert doc["workers"]["resumed"]["from"] == str(partial) and doc["workers"]["resumed"]["rows_kept"] == 2


def test_resume_of_a_complete_file_adds_the_schemes_it_lacks(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    assert _run(_scenario(tmp_path, ["fp16"]), "--out", out) == 0
    kept = read_results(out).to_json()["rows"]
    calls: list[int] = []
    _interrupt_at(monkeypatch, -1, calls)
    assert _run(_scenario(tmp_path, ["fp16", "bf16"], name="t.toml"), "--out", out, "--resume") == 0
    doc = read_results(out).to_json()
    assert calls == [1] and doc["rows"][:1] == kept and [r["scheme"] for r in doc["rows"]] == ["fp16", "bf16"]
    assert [s["name"] for s in doc["scenario"]["schemes"]] == ["fp16", "bf16"]


def test_resume_keeps_the_wall_time_and_says_when_there_is_nothing_to_resume(tmp_path, capsys):
    """A resume of a complete file with nothing left to measure keeps its wall_s (it read 5.4 s after
    an 80.4 s run); a resume that measures more adds to it; --resume without a file says so."""
    import json

    out, sc = tmp_path / "r.json", _scenario(tmp_path, ["fp16"])
    assert cli.main(["run", str(sc), "--out", str(out), "--resume"]) == 0
    assert "nothing to resume: no partial or complete result at" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    doc["wall_s"] = 80.4  # as if the first run took long
    out.write_text(json.dumps(doc))
    assert cli.main(["run", str(sc), "--out", str(out), "--resume"]) == 0
    assert "nothing to measure (its wall time is kept)" in capsys.readouterr().err
    assert json.loads(out.read_text())["wall_s"] == 80.4
    assert _run(_scenario(tmp_path, ["fp16", "bf16"], name="t.toml"), "--out", out, "--resume") == 0
    assert json.loads(out.read_text())["wall_s"] > 80.4


def test_resume_refuses_a_file_of_another_scenario_or_a_bad_file(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _run(_scenario(tmp_path, ["fp16"]), "--out", out) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert _run(_scenario(tmp_path, ["fp16"], name="k.toml", k=512), "--out", out, "--resume") == 2
    assert _err_lines(capsys) == [f"qbench: cannot resume: {out} was measured with another scenario "
                                  "(layer.in_features: 256 there, 512 now); choose another --out"]
    assert out.read_bytes() == before
    doc = json.loads(before)
    doc["rows"][0]["latency_us"]["cpu"]["median"] = "__BIG__"
    out.write_text(json.dumps(doc).replace('"__BIG__"', "1e999"))  # strict JSON, reads as infinity
    assert _run(_scenario(tmp_path, ["fp16"]), "--out", out, "--resume") == 2
    assert _err_lines(capsys) == [f"qbench: cannot resume: {out}: not JSON: number 1e999 overflows to infinity (a result holds finite "
                                   "numbers only)"]
    out.write_text("[" * 100_000 + "]" * 100_000)
    assert _run(_scenario(tmp_path, ["fp16"]), "--out", out, "--resume") == 2
    (line,) = _err_lines(capsys)
    assert line.startswith(f"qbench: cannot resume: {out}")


def test_one_run_per_output_and_default_names_that_cannot_collide(tmp_path, monkeypatch):
    """A held lock refuses a second run in one line naming the holder's pid; three default names
    claimed in the same second are three files."""
    import torch

    out = tmp_path / "r.json"
    held = lifecycle.OutputLock(out)
    held.acquire()
    try:
        with pytest.raises(lifecycle.RunError) as caught:
            lifecycle.claim_output(None, None, str(out), force=True, resume=False)
        assert str(caught.value) == (f"{out}: another qbench run (pid {os.getpid()}) is writing it; wait for it to "
                                     "end or choose another --out")
    finally:
        held.release()
    assert not (tmp_path / "r.json.lock").exists()

    from qbench import scenario

    sc = scenario.load(_scenario(tmp_path, ["fp16"]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(lifecycle, "default_output",
                        lambda s, d, n=1: Path("results/runs") / f"tiny-cpu-20261201T000000Z{'' if n == 1 else f'-{n}'}.json")
    claims = [lifecycle.claim_output(sc, torch.device("cpu"), None, False, False) for _ in range(3)]
    try:
        assert [str(p) for p, _ in claims] == ["results/runs/tiny-cpu-20261201T000000Z.json",
                                               "results/runs/tiny-cpu-20261201T000000Z-2.json",
                                               "results/runs/tiny-cpu-20261201T000000Z-3.json"]
    finally:
        for _, lock in claims:
            lock.release()


def test_a_dangling_symlink_or_a_folder_as_out_is_refused_before_measuring(tmp_path, capsys):
    sc = _scenario(tmp_path, ["fp16"])
    link = tmp_path / "dangling.json"
    link.symlink_to(tmp_path / "nowhere" / "x.json")
    assert _run(sc, "--out", link) == 2
    assert _err_lines(capsys) == [f"qbench: {link}: already exists; pass --force to overwrite it, --resume to add the "
                                  "schemes it lacks, or --out to choose another file"]
    (tmp_path / "dir.json").mkdir()
    assert _run(sc, "--out", tmp_path / "dir.json") == 2
    assert _err_lines(capsys) == [f"qbench: {tmp_path / 'dir.json'}: is a directory, not a result file"]


# --- 2. clean stops ---------------------------------------------------------------------------------

def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QBENCH_")}
    (tmp_path / "tmpdir").mkdir(exist_ok=True)
    env.update(PYTHONPATH=str(ROOT), QBENCH_PLUGINS="tests.plugins.sleep_scheme", QBENCH_PRELOAD="0",
               TMPDIR=str(tmp_path / "tmpdir"), QBENCH_TEST_PIDFILE=str(tmp_path / "pids"), **extra)
    return env


def _start(tmp_path: Path, out: Path, *extra: str, **env: str) -> subprocess.Popen:
    """``qbench run`` of fp32 then sleep-test (a worker that sleeps in its build) in a subprocess."""
    sc = _scenario(tmp_path, ["fp32", "sleep-test"])
    return subprocess.Popen([sys.executable, "-m", "qbench", "run", str(sc), "--out", str(out), "--quiet", *extra],
                            cwd=tmp_path, env=_env(tmp_path, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _measuring_worker(tmp_path: Path, proc: subprocess.Popen, timeout: float = 240) -> int:
    """The pid of the sleep-test worker, once it is measuring (fp32's rows are then on disk)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []
        if pids:
            return int(pids[-1])
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the sleep-test worker never started")


def _gone(pid: int, within: float = 15) -> bool:
    from qbench.tp.worker import runner_alive  # a zombie counts as gone

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not runner_alive(pid):
            return True
        time.sleep(0.1)
    return False


def _temp_folders(tmp_path: Path) -> list[str]:
    return [n for n in os.listdir(tmp_path / "tmpdir") if n.startswith("qbench-")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_stops_the_worker_removes_the_temp_folder_keeps_the_rows_and_resume_completes(tmp_path, sig):
    out, partial = tmp_path / "r.json", tmp_path / "r.partial.json"
    proc = _start(tmp_path, out)
    worker = _measuring_worker(tmp_path, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert err.strip().splitlines()[-1] == (
        f"qbench: stopped by {sig.name}; the 1 row measured so far is in {partial} (\"complete\": false; an existing "
        "result file was left as it was); run the same command with --resume to measure only the schemes it lacks")
    assert _gone(worker) and not _temp_folders(tmp_path)
    kept = read_results(partial).to_json()["rows"]
    assert [r["scheme"] for r in kept] == ["fp32"]
    if sig != signal.SIGTERM:
        return
    proc = _start(tmp_path, out, "--resume", QBENCH_TEST_SLEEP_S="0")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    doc = read_results(out).to_json()
    assert doc["rows"][0] == kept[0] and [r["scheme"] for r in doc["rows"]] == ["fp32", "sleep-test"]
    assert not partial.exists()


def test_sigkill_of_the_runner_leaves_no_worker_measuring_and_no_temp_folder(tmp_path):
    out = tmp_path / "r.json"
    proc = _start(tmp_path, out)
    worker = _measuring_worker(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(worker, within=10), "the worker outlived its runner"
    assert not _temp_folders(tmp_path)
    assert [r["scheme"] for r in read_results(tmp_path / "r.partial.json").to_json()["rows"]] == ["fp32"]


def test_a_second_run_on_the_same_out_is_refused_and_nothing_is_lost(tmp_path):
    out = tmp_path / "r.json"
    # the first run's worker measures for 15 s: long enough that the second run, which starts a
    # Python and imports qbench, still finds it on a loaded 2-core machine (2 s was not, in CI)
    first = _start(tmp_path, out, QBENCH_TEST_SLEEP_S="15")
    _measuring_worker(tmp_path, first)
    second = subprocess.run([sys.executable, "-m", "qbench", "run", str(tmp_path / "s.toml"), "--out", str(out),
                             "--force", "--quiet"], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [f"qbench: {out}: another qbench run (pid {first.pid}) is writing it; "
                                                  "wait for it to end or choose another --out"]
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    doc = read_results(out).to_json()
    assert doc["complete"] and [r["scheme"] for r in doc["rows"]] == ["fp32", "sleep-test"]


def test_a_dead_forkserver_fails_the_remaining_schemes_with_a_reason(tmp_path, monkeypatch):
    """The break report's traceback (EOFError from popen_forkserver._launch, the forkserver gone while
    it forked): failed rows with the reason instead. (A forkserver killed between two schemes is
    noticed by multiprocessing, which starts a new one: those rows are measured.)"""
    import multiprocessing.popen_forkserver

    from qbench import forkserver, scenario

    real = multiprocessing.popen_forkserver.Popen._launch
    sc = scenario.load(_scenario(tmp_path, ["fp32", "fp16", "bf16"]))

    def launch(self, process_obj):
        if "fp32" not in {r["scheme"] for r in read_results(tmp_path / "r.partial.json").to_json()["rows"]}:
            return real(self, process_obj)
        raise EOFError("unexpected EOF")

    monkeypatch.setattr(multiprocessing.popen_forkserver.Popen, "_launch", launch)
    out = runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    assert [(r["scheme"], r["status"]) for r in out.doc["rows"]] == [("fp32", "ok"), ("fp16", "failed"), ("bf16", "failed")]
    reason = "the forkserver died (EOFError: unexpected EOF); no later scheme was measured"
    assert [r["reason"] for r in out.doc["rows"][1:]] == [reason, reason] and out.exit_code == 0
    monkeypatch.undo()

    real_rows = _ROWS

    def rows(self, index):
        if index == 1:
            pid = forkserver.pids()[0]
            os.kill(pid, signal.SIGKILL)  # as the OOM killer would: not reaped, not forgotten
            time.sleep(0.5)
        return real_rows(self, index)

    monkeypatch.setattr(runner._Workers, "rows", rows)
    forkserver.ensure(cpu=True)
    out = runner.run(sc, device="cpu", out=str(tmp_path / "again.json"))
    assert [r["status"] for r in out.doc["rows"]] == ["ok", "ok", "ok"]


def test_a_stopped_forkserver_fails_the_remaining_schemes_within_the_scheme_timeout(tmp_path, monkeypatch):
    from qbench import forkserver, scenario

    forkserver.ensure(cpu=True)
    real = runner._Workers.rows

    def rows(self, index):
        if index == 1:
            os.kill(forkserver.pids()[0], signal.SIGSTOP)
        return real(self, index)

    monkeypatch.setattr(runner._Workers, "rows", rows)
    sc = scenario.load(_scenario(tmp_path, ["fp32", "fp16"], extra=""))
    sc = sc.model_copy(update={"timing": sc.timing.model_copy(update={"scheme_timeout_s": 3.0})})
    t0 = time.monotonic()
    out = runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    assert time.monotonic() - t0 < 60
    assert [r["status"] for r in out.doc["rows"]] == ["ok", "failed"]
    assert out.doc["rows"][1]["reason"] == ("the forkserver did not start a worker within 3 s (timing.scheme_timeout_s; "
                                            "stopped or hung); it was killed, and no later scheme was measured")
    assert not forkserver.pids() or _gone(forkserver.pids()[0], within=5)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])  # field 4, ppid


@pytest.mark.parametrize("sleep_s,timeout_s,finished", [("2", 20, True), ("60", 6, False)],
                         ids=["finished-worker", "measuring-worker"])
def test_a_forkserver_stopped_under_a_forked_worker_ends_the_run_within_the_scheme_timeout(tmp_path, sleep_s,
                                                                                         timeout_s, finished):
    """Issue 24 item 2 in the form found on main after finding #9's fix: the forkserver is SIGSTOPped
    after it forked the measuring worker. That worker then exits (``finished``: its rows written)
    or is killed at the scheme timeout, and the stopped forkserver, its parent, never reports the
    exit. The run still ends within the scheme timeout and a margin; the finished worker's rows are
    kept (else failed with the reason), the later scheme fails naming the forkserver, and no process
    of the run is left (the stopped forkserver is killed)."""
    sc = tmp_path / "s.toml"
    sc.write_text(small_scenario_toml(["sleep-test", "fp16"], m=(1,)).replace(
        "budget_s = 0.05", f"budget_s = 0.05\nscheme_timeout_s = {timeout_s}"))
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "qbench", "run", str(sc), "--out", str(out), "--quiet",
                             "--device", "cpu"], cwd=tmp_path, env=_env(tmp_path, QBENCH_TEST_SLEEP_S=sleep_s),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker = _measuring_worker(tmp_path, proc)
    server = _parent(worker)
    assert server != proc.pid  # the worker is the forkserver's child, not the runner's
    os.kill(server, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout_s + 40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"the run still ran {timeout_s + 40} s after the forkserver was stopped")
    finally:
        if not _gone(server, within=5):  # the test's own clean-up, whatever the run did
            os.kill(server, signal.SIGKILL)
    took = time.monotonic() - stopped
    assert took < timeout_s + 15, took
    assert proc.returncode == (0 if finished else 1), err
    assert _gone(server, within=0.5), "the stopped forkserver outlived its run"
    assert _gone(worker, within=5) and not _temp_folders(tmp_path)
    doc = read_results(out).to_json()
    assert [(r["scheme"], r["status"]) for r in doc["rows"]] == [("sleep-test", "ok" if finished else "failed"),
                                                                ("fp16", "failed")]
    if finished:
        why = (f"the forkserver (pid {server}) stopped answering (stopped or hung): the worker (pid {worker}) "
               f"exited, but its exit was not reported within {runner.EXIT_REPORT_S:g} s; it was killed, and no "
               "later scheme was measured")
        assert doc["rows"][0]["latency_us"]
    else:
        why = (f"the forkserver (pid {server}) stopped answering (stopped or hung): the worker (pid {worker}) was "
               f"killed at the scheme timeout, but its exit was not reported within {runner.EXIT_REPORT_S:g} s; "
               "it was killed, and no later scheme was measured")
        assert doc["rows"][0]["reason"].startswith(f"worker timed out after {timeout_s} s; {why}")
    assert doc["rows"][1]["reason"] == why


def test_a_failed_write_is_one_line_exit_2_and_the_rows_stay_in_the_partial_file(tmp_path, monkeypatch, capsys):
    """ENOSPC at the second partial write, at the final write, and a TMPDIR that cannot hold the
    workers' folder: one line, exit 2, the rows measured before in the partial file."""
    real = lifecycle.write_results
    sc = _scenario(tmp_path, ["fp16", "bf16"])

    def failing(when):
        seen = {"partial": 0}

        def write(path, doc, *, force=False):
            final = doc.get("complete") is True
            seen["partial"] += not final
            if when(final, seen["partial"]):
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real(path, doc, force=force)

        return write

    # partial writes: 1 the empty document, 2 after fp16, 3 after bf16
    monkeypatch.setattr(lifecycle, "write_results", failing(lambda final, n: not final and n == 3))
    assert _run(sc, "--out", tmp_path / "a.json") == 2
    partial = tmp_path / "a.partial.json"
    assert _err_lines(capsys) == [f"qbench: {partial}: cannot write (No space left on device); the run stopped; the 1 "
                                  f"row measured so far is in {partial} (\"complete\": false)"]
    assert [r["scheme"] for r in read_results(partial).to_json()["rows"]] == ["fp16"]

    monkeypatch.setattr(lifecycle, "write_results", failing(lambda final, n: final))
    assert _run(sc, "--out", tmp_path / "b.json") == 2
    partial = tmp_path / "b.partial.json"
    assert _err_lines(capsys) == [f"qbench: {tmp_path / 'b.json'}: cannot write (No space left on device); every row "
                                  f"is in {partial} (\"complete\": false, 2 rows)"]
    assert len(read_results(partial).to_json()["rows"]) == 2 and not (tmp_path / "b.json").exists()

    monkeypatch.setattr(lifecycle, "write_results", real)

    def no_tmp(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(runner.tempfile, "mkdtemp", no_tmp)
    assert _run(sc, "--out", tmp_path / "c.json") == 2
    (line,) = _err_lines(capsys)
    assert line.startswith("qbench: TMPDIR ") and "cannot create the workers' folder (Read-only file system)" in line
    assert line.endswith("the run stopped; no row had been measured")


# --- 6. answers in seconds, and the break report's scenario repros --------------------------------------

def _fresh(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_check_and_run_answer_a_typo_without_importing_torch(tmp_path):
    bad = tmp_path / "typo.toml"
    bad.write_text(small_scenario_toml(["fp16"]).replace("m = [1, 4]", "ms = [1]"))
    good = _scenario(tmp_path, ["fp16", "nf4-bnb"])
    code = ("import sys\nfrom qbench import cli\n"
            f"codes = [cli.main(['check', {str(bad)!r}]), cli.main(['run', {str(bad)!r}]), cli.main(['check', {str(good)!r}])]\n"
            "print(codes, 'torch' in sys.modules)\n")
    proc = _fresh(code)
    assert proc.stdout.strip().splitlines()[-1] == "[2, 2, 0] False", proc.stderr
    assert proc.stderr.strip().splitlines() == [f"qbench: {bad}: ms: unknown key; allowed: name, description, seed, "
                                                "device, output, m, layer, inputs, weight, timing, schemes, tp, model, "
                                                "quality, search"] * 2
    assert proc.stdout.strip().splitlines()[0] == (f"{good}: ok: 2 schemes (fp16, nf4-bnb); M = [1]; K = 256, N = 128; "
                                                   "device auto")


def test_check_a_model_step_scenario_without_importing_torch():
    """``qbench check`` of a ``[model]`` scenario names the model and its contexts (not [layer]'s
    K and N) and imports no torch."""
    code = ("import sys\nfrom qbench import cli\n"
            "print(cli.main(['check', 'scenarios/step_tiny.toml']), 'torch' in sys.modules)\n")
    proc = _fresh(code)
    assert proc.stdout.strip().splitlines() == [
        "scenarios/step_tiny.toml: ok: 5 schemes (fp32, bf16, int8-weight-only, int4-weight-only, nf4-bnb); "
        "M = [1, 3]; model tiny Llama (2 blocks, CPU), context [16, 128]; device auto", "0 False"], proc.stderr


def test_check_a_quality_scenario_names_its_model_and_text_without_importing_torch():
    """``qbench check`` of a ``[quality]`` scenario checks its checkpoint, tokenizer and text and
    names them; it asks for no ``model.context`` (a step job's key) and imports no torch."""
    code = ("import sys\nfrom qbench import cli\n"
            "print(cli.main(['check', 'scenarios/quality_tiny.toml', '--schemes', 'fp32,bf16']), 'torch' in sys.modules)\n")
    proc = _fresh(code)
    assert proc.stdout.strip().splitlines() == [
        "scenarios/quality_tiny.toml: ok: 2 schemes (fp32, bf16); model tiny-shakespeare-llama, "
        "text ../data/text/hamlet.txt, 64 chunks of 512 tokens; device auto", "0 False"], proc.stderr


@pytest.mark.parametrize("line,message", [
    ('output = "a\\u0000b.json"', "output: must not contain control characters (NUL, newline, escape), got 'a\\x00b.json'"),
    ('output = "../../escaped/x.json"', "output: must be a path inside the working directory (no absolute path, no "
                                        "'..'); use --out for another place, got '../../escaped/x.json'"),
    ('output = "/etc/qbench_pwn.json"', "output: must be a path inside the working directory (no absolute path, no "
                                        "'..'); use --out for another place, got '/etc/qbench_pwn.json'"),
    ('output = "x.bashrc"', "output: must end in .json (a result file), got 'x.bashrc'"),
    ("x = " + "[" * 100_000 + "]" * 100_000, ": not valid TOML: arrays or tables nested too deeply"),
    ("x = " + "{a = " * 5000 + "1" + "}" * 5000, ": not valid TOML: arrays or tables nested too deeply"),
])
def test_break_report_scenarios_are_one_line_and_exit_2(tmp_path, capsys, line, message):
    sc = tmp_path / "s.toml"
    sc.write_text(line + "\n" + small_scenario_toml(["fp16"]))
    for command in ("check", "run"):
        assert cli.main([command, str(sc)]) == 2
        assert _err_lines(capsys) == [f"qbench: {sc}{'' if message.startswith(':') else ': '}{message}"]


def test_dev_zero_and_a_pipe_as_the_scenario(tmp_path, capsys):
    """/dev/zero is read up to the limit, not to the end of memory; a FIFO (as ``<(...)`` gives) is
    read once, so the run sees the scenario (the early forkserver start drained it before)."""
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    assert cli.main(["check", str(zero)]) == 2
    assert _err_lines(capsys) == [f"qbench: {zero}: larger than 64 MiB: not a scenario file"]
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    text = small_scenario_toml(["fp16"], m=(1,))
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    assert _run(fifo, "--out", tmp_path / "p.json", "--device", "cpu") == 0
    writer.join()
    assert [r["scheme"] for r in read_results(tmp_path / "p.json").to_json()["rows"]] == ["fp16"]


@pytest.mark.parametrize("plugin,what", [
    ("no.such.module", "'no.such.module' cannot be imported (ModuleNotFoundError: No module named 'no')"),
])
def test_a_missing_plugin_is_one_line(tmp_path, plugin, what):
    sc = _scenario(tmp_path, ["my-plugin-scheme"])
    code = ("import sys\nfrom qbench import cli\n"
            f"print([cli.main(['check', {str(sc)!r}]), cli.main(['list', '--device', 'cpu'])])\n")
    proc = _fresh(code, {"QBENCH_PLUGINS": plugin})
    assert proc.stdout.strip() == "[2, 2]", proc.stderr
    assert proc.stderr.strip().splitlines() == [f"qbench: environment variable QBENCH_PLUGINS: module {what}"] * 2


def test_a_plugin_that_raises_or_registers_a_builtin_name_is_one_line(tmp_path):
    (tmp_path / "raising.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "dup.py").write_text("from qbench.schemes import register, get\nregister(get('fp32'))\n")
    sc = _scenario(tmp_path, ["my-plugin-scheme"])
    for module, what in (("raising", "failed while importing (RuntimeError: boom)"),
                         ("dup", "failed while importing (ValueError: scheme 'fp32' is already registered)")):
        proc = _fresh(f"from qbench import cli\nprint(cli.main(['check', {str(sc)!r}]))\n",
                      {"QBENCH_PLUGINS": module, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})
        assert proc.stdout.strip() == "2", proc.stderr
        assert proc.stderr.strip().splitlines() == [f"qbench: environment variable QBENCH_PLUGINS: module {module!r} {what}"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_tensor_parallel_run_leaves_no_rank_running(tmp_path, sig):
    """A ``[tp]`` job runs in a session of its own (the terminal's Ctrl-C does not reach it): a stop
    signal kills that session, and a SIGKILLed runner is noticed by the rank itself."""
    sc = tmp_path / "tp.toml"
    sc.write_text(small_scenario_toml(["fp32", "sleep-test"], m=(1,), extra="[tp]\ntp_size = [1]"))
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "qbench", "run", str(sc), "--out", str(out), "--quiet",
                             "--device", "cpu"], cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    rank = _measuring_worker(tmp_path, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (128 + sig if sig != signal.SIGKILL else -sig)
    assert _gone(rank, within=10), "a tensor-parallel rank outlived its run"
    if sig == signal.SIGTERM:
        assert err.strip().splitlines()[-1].startswith(f"qbench: stopped by SIGTERM; the 1 row measured so far is in "
                                                       f"{tmp_path / 'r.partial.json'}")
        assert not _temp_folders(tmp_path)
    assert [r["scheme"] for r in read_results(tmp_path / "r.partial.json").to_json()["rows"]] == ["fp32"]


def test_a_killed_tensor_parallel_job_has_no_rank_left_to_write_into_its_removed_folder(tmp_path):
    """torchrun starts each rank in a session of its own, which the kill of torchrun's session does
    not reach: ``_kill_session`` kills each child's group too and returns once they are gone, so the
    folder the runner removes next is not created again by a rank writing its rows (1 of 2 SIGINTs
    of a tensor-parallel run left ``qbench-tp-*/4/rows.json`` before)."""
    from qbench.tp import runner as tp_runner

    folder, pidfile = tmp_path / "job", tmp_path / "rank.pid"
    rank = ("import os, sys, time\n"
            f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
            "time.sleep(1.5)\n"
            f"os.makedirs({str(folder)!r}, exist_ok=True)\n"
            f"open(os.path.join({str(folder)!r}, 'rows.json'), 'w').write('[]')\n")
    launcher = (f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True)"
                ".wait()\n")
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    tp_runner._kill_session(proc)
    import shutil

    shutil.rmtree(folder)
    assert _gone(pid, within=0.1), "a rank outlived its job's kill"
    time.sleep(2)
    assert not folder.exists()


@pytest.mark.parametrize("label,why", [
    ("a\x1b]0;pwned\x07", "must be printable text without control characters, '|', '<', '>' or '`' (it is printed in "
                          "tables), found '\\x1b'"),
    ("a|b", "must be printable text without control characters, '|', '<', '>' or '`' (it is printed in tables), "
            "found '|'"),
    ("<img src=x onerror=alert(1)>", "must be printable text without control characters, '|', '<', '>' or '`' (it is "
                                     "printed in tables), found '<'"),
    ("=HYPERLINK(1)", "must not start with '=' (a spreadsheet would read it as a formula)"),
])
def test_a_label_that_would_inject_into_a_terminal_or_a_table_is_refused(tmp_path, capsys, label, why):
    sc = tmp_path / "s.toml"
    sc.write_text(small_scenario_toml(["fp16"]) + f"label = {json.dumps(label)}\n")
    assert cli.main(["check", str(sc)]) == 2
    assert _err_lines(capsys) == [f"qbench: {sc}: schemes[0].label: {why} (fp16), got {label!r}"]


def test_a_second_stop_signal_waits_for_the_clean_up_of_the_first():
    """The first SIGINT or SIGTERM raises Stopped; a second one during the clean-up is ignored (a
    double Ctrl-C exited -2 with a traceback); the handlers are restored afterwards."""
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(lifecycle.Stopped) as caught:
        with lifecycle.stop_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)
                cleaned.append(True)
    assert caught.value.signum == signal.SIGTERM and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_temp_file_left_by_a_killed_final_write_is_removed_by_the_next_run_on_that_out(tmp_path):
    stale = tmp_path / ".r.json.k3j4h5.tmp"
    stale.write_text("{}")
    other = tmp_path / ".other.json.abc.tmp"
    other.write_text("{}")
    assert _run(_scenario(tmp_path, ["fp16"]), "--out", tmp_path / "r.json") == 0
    assert not stale.exists() and other.exists()


def test_run_warns_when_errors_come_from_a_synthetic_weight_and_rows_say_where_it_came_from(tmp_path, capsys):
    """Issue 24, item 5: the table's errors come from a seeded weight unless a file is given."""
    import torch
    from safetensors.torch import save_file

    path = _scenario(tmp_path, ["fp32"])
    assert _run(path, "--out", tmp_path / "g.json") == 0
    out = capsys.readouterr().out
    assert ("warning: errors come from a synthetic weight (seeded Gaussian N(0, 1/K) (synthetic, seed 3)), not a "
            "trained layer") in out
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["rows"][0]["weight_source"] == "seeded Gaussian N(0, 1/K) (synthetic, seed 3)"
    save_file({"w": torch.randn(128, 256)}, str(tmp_path / "w.safetensors"))
    path.write_text(path.read_text() + '\n[weight]\nsource = "safetensors"\npath = "w.safetensors"\ntensor = "w"\n')
    assert _run(path, "--out", tmp_path / "f.json") == 0
    out = capsys.readouterr().out  # no synthetic-weight warning; the activations are still qbench's own
    assert "synthetic weight" not in out
    assert "note: the weight is real (safetensors), the activations are not: seeded N(0, 1) ([inputs])" in out
    assert json.loads((tmp_path / "f.json").read_text())["rows"][0]["weight_source"] == "safetensors w.safetensors:w"


def test_check_takes_several_files_and_names_each_bad_one(tmp_path, capsys):
    """``qbench check scenarios/*.toml``: a summary line per good file, one error line per bad one,
    exit 2 when any is bad (a newcomer's glob was refused by argparse)."""
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(small_scenario_toml(["fp16"]))
    bad.write_text(small_scenario_toml(["fp61"]))
    assert cli.main(["check", str(good), str(bad), str(good)]) == 2
    out, err = capsys.readouterr()
    assert out.count(f"{good}: ok: 1 scheme (fp16)") == 2
    (line,) = err.splitlines()
    assert line.startswith(f"qbench: {bad}: schemes[0].name: unknown scheme 'fp61'; did you mean fp16")
    assert cli.main(["check", str(good), str(good)]) == 0


def test_a_run_piped_into_head_finishes_and_writes_its_file(tmp_path):
    """``qbench run X 2>&1 | head -1``: once head has left, the progress lines are discarded and the
    run goes on; every scheme is measured, the complete file written, exit 0 (it stopped after the
    first scheme with only a partial file and exit 0)."""
    sc = _scenario(tmp_path, ["fp32", "fp16", "bf16"], m=(1,))
    out = tmp_path / "piped.json"
    cmd = (f"{sys.executable} -m qbench run {sc} --out {out} --device cpu 2>&1 | head -1 >/dev/null; "
           "echo status=${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "status=0", proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] is True and [r["scheme"] for r in doc["rows"]] == ["fp32", "fp16", "bf16"]
    assert not lifecycle.partial_path(out).exists()


def test_force_replaces_only_result_files(tmp_path, capsys):
    """``-o CHECKPOINT/config.json --force`` (the second break trial) replaced the run's own input
    with a result: --force now refuses a file that is not a qbench result, before anything runs."""
    from qbench import cli

    victim = tmp_path / "config.json"
    victim.write_text('{"model_type": "llama"}')
    scenario = tmp_path / "s.toml"
    scenario.write_text(small_scenario_toml(["fp32"], m=(1,)))
    assert cli.main(["run", str(scenario), "-o", str(victim), "--force", "--quiet"]) == 2
    assert "is not a qbench result file" in capsys.readouterr().err
    assert victim.read_text() == '{"model_type": "llama"}'
