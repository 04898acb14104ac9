"""runner: one worker per scheme; a dying worker fails only its own rows; results survive."""

import json

import pytest

from qbench import runner, scenario
from qbench.results import read_results
from tests.conftest import small_scenario_toml


def _load(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return scenario.load(path)


def _registered(module_name: str, scheme_name: str):
    """Register a test-only scheme from ``tests.plugins.<module_name>`` (importing it registers it;
    reloading it registers it again after an earlier test removed it), and remove it afterwards."""
    import importlib

    from qbench import schemes

    module = importlib.import_module(f"tests.plugins.{module_name}")
    if scheme_name not in schemes.names():
        importlib.reload(module)
    yield
    schemes._REGISTRY.pop(scheme_name, None)


@pytest.fixture
def abort_scheme():
    """The test-only "abort-test" scheme (it aborts its worker), registered for one test."""
    yield from _registered("abort_scheme", "abort-test")


def test_worker_that_aborts_fails_only_its_rows(tmp_path, monkeypatch, abort_scheme):

    monkeypatch.setenv("QBENCH_PLUGINS", "tests.plugins.abort_scheme")
    sc = _load(tmp_path, small_scenario_toml(["fp32", "abort-test", "bf16"], m=(1, 2)))
    out = runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    by = {(r["scheme"], r["m"]): r for r in out.doc["rows"]}
    assert out.exit_code == 0
    for m in (1, 2):
        assert by[("fp32", m)]["status"] == "ok"
        assert by[("bf16", m)]["status"] == "ok"
        bad = by[("abort-test", m)]
        assert bad["status"] == "failed"
        assert "SIGABRT" in bad["reason"] and "about to abort" in bad["reason"]
    saved = read_results(tmp_path / "r.json")
    assert saved.complete is True and len(saved.rows) == 6


def test_all_rows_skipped_exits_nonzero(tmp_path):
    sc = _load(tmp_path, small_scenario_toml(["int4-weight-only", "fp8-dynamic"], m=(1,)))
    out = runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    assert out.exit_code == 1 and "skipped or failed" in out.message
    assert {r["status"] for r in out.doc["rows"]} == {"skipped"}
    assert all("CUDA" in r["reason"] for r in out.doc["rows"])


def test_existing_output_is_refused_before_measuring(tmp_path):
    target = tmp_path / "r.json"
    target.write_text('{"keep": true}')
    sc = _load(tmp_path, small_scenario_toml(["fp16"], m=(1,)))
    with pytest.raises(runner.RunError, match="--force"):
        runner.run(sc, device="cpu", out=str(target))
    assert json.loads(target.read_text()) == {"keep": True}


def _interrupt_at(monkeypatch, at: int) -> None:
    """Ctrl-C when the runner asks for scheme ``at``'s rows; the schemes before it run for real."""
    real = runner._Workers.rows

    def interrupted(self, index):
        if index == at:
            raise KeyboardInterrupt
        return real(self, index)

    monkeypatch.setattr(runner._Workers, "rows", interrupted)


def test_rows_written_after_each_scheme_survive_interrupt(tmp_path, monkeypatch):
    sc = _load(tmp_path, small_scenario_toml(["fp16", "bf16"], m=(1,)))
    _interrupt_at(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    assert not (tmp_path / "r.json").exists()  # only a complete run is written to the result path
    saved = read_results(tmp_path / "r.partial.json")
    assert saved.complete is False
    assert [r.scheme for r in saved.rows] == ["fp16"] and saved.rows[0].status == "ok"


def test_interrupted_force_run_leaves_the_old_file_byte_identical(tmp_path, monkeypatch):
    sc = _load(tmp_path, small_scenario_toml(["fp16", "bf16"], m=(1,)))
    out = tmp_path / "keep.json"
    first = runner.run(sc, device="cpu", out=str(out))
    assert first.exit_code == 0 and not (tmp_path / "keep.partial.json").exists()
    before = out.read_bytes()
    real = runner._Workers.rows

    def interrupted(self, index):
        if index == 1:
            raise KeyboardInterrupt
        return real(self, index)

    monkeypatch.setattr(runner._Workers, "rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run(sc, device="cpu", out=str(out), force=True)
    assert out.read_bytes() == before
    partial = read_results(tmp_path / "keep.partial.json")
    assert partial.complete is False and [r.scheme for r in partial.rows] == ["fp16"]


def test_result_files_get_the_umask_mode(tmp_path):
    import os

    sc = _load(tmp_path, small_scenario_toml(["fp16"], m=(1,)))
    old = os.umask(0o022)
    try:
        runner.run(sc, device="cpu", out=str(tmp_path / "m.json"))
    finally:
        os.umask(old)
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o644


def test_cpu_rows_are_labelled_cpu_never_cuda(tmp_path):
    sc = _load(tmp_path, small_scenario_toml(["fp32"], m=(1,)))
    row = runner.run(sc, device="cpu", out=str(tmp_path / "r.json")).doc["rows"][0]
    assert row["latency_us"]["cpu"]["median"] > 0 and row["latency_us"]["cpu"]["n"] >= 3
    for method in ("cold", "warm", "eager", "kernel"):
        assert row["latency_us"][method] is None and row["latency_reasons"][method]["kind"] == "cuda-only"
        assert "CPU" in row["latency_reasons"][method]["text"]
    # the CPU run measured its own ceilings: the row has a roofline from them (issue 24, item 4)
    assert row["roofline_us"] > 0 and row["roofline_source"] == "measured" and row["roofline_reason"] is None
    assert row["flops"] == 2 * 1 * 256 * 128
    assert row["min_bytes"] == 256 * 4 + 256 * 128 * 4 + 128 * 4
    assert row["error"]["rel_fro"] < 1e-6


def test_cuda_requested_without_cuda_is_a_run_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    sc = _load(tmp_path, small_scenario_toml(["fp16"], m=(1,)))
    with pytest.raises(runner.RunError, match="CUDA is not available"):
        runner.run(sc, device="cuda", out=str(tmp_path / "r.json"))
    assert not (tmp_path / "r.json").exists()


def test_prestarted_workers_wait_for_go_and_survive_a_crash(tmp_path, monkeypatch, abort_scheme):
    """The CUDA path starts worker i + 1 while worker i measures; exercised here on the CPU."""
    import tempfile

    monkeypatch.setenv("QBENCH_PLUGINS", "tests.plugins.abort_scheme")
    sc = _load(tmp_path, small_scenario_toml(["fp16", "abort-test", "bf16"], m=(1,)))
    import torch

    with tempfile.TemporaryDirectory() as folder:
        workers = runner._Workers(sc, torch.device("cpu"), None, folder, prestart=True)
        try:
            first = workers.rows(0)
            assert 1 in workers.started  # started ahead, waiting for go
            second, third = workers.rows(1), workers.rows(2)
        finally:
            workers.close()
    assert first[0]["status"] == "ok" and third[0]["status"] == "ok"
    assert second[0]["status"] == "failed" and "SIGABRT" in second[0]["reason"]
    assert first[0]["worker_phases_s"]["waited_for_go"] >= 0
    assert not workers.started


def test_close_stops_a_prestarted_worker(tmp_path):
    import tempfile

    import torch

    sc = _load(tmp_path, small_scenario_toml(["fp16", "bf16"], m=(1,)))
    with tempfile.TemporaryDirectory() as folder:
        workers = runner._Workers(sc, torch.device("cpu"), None, folder, prestart=True)
        workers.rows(0)
        proc = workers.started[1][0]
        workers.close()
        assert not proc.is_alive()


def test_preload_modules_default_and_off(monkeypatch):
    """Default: qbench's measurement modules and no scheme package (the H200 probe found torchao,
    bitsandbytes and gemlite unsafe to import before fork); QBENCH_PRELOAD=0: torch alone."""
    from qbench import _preload

    monkeypatch.delenv("QBENCH_PRELOAD", raising=False)
    assert runner.preload_modules() == ["qbench._preload"] and _preload.FORK_SAFE_PACKAGES == ()
    monkeypatch.setenv("QBENCH_PRELOAD", "0")
    assert runner.preload_modules() == ["torch"] and not runner.preload_enabled()


def test_the_preload_has_dynamo_and_inductor_for_the_profiler_and_no_cuda():
    """A fresh interpreter: qbench._preload imports Dynamo and qbench's measurement modules without
    initialising CUDA, and starting torch.profiler (the kernel method) then imports nothing heavy:
    it evaluates ``hasattr(torch, "_inductor")``, which imports Inductor where it is not loaded yet
    (the reason ``QBENCH_PRELOAD=lean``, without Dynamo, was slower and removed)."""
    import os
    import subprocess
    import sys

    code = ("import sys, torch, importlib; importlib.import_module('qbench._preload'); "
            "print('torch._dynamo' in sys.modules, 'qbench.timing.stream' in sys.modules, torch.cuda.is_initialized()); "
            "bare = 'torch._inductor' not in sys.modules; hasattr(torch, '_inductor'); "
            "print(bare or 'preloaded', 'torch._inductor' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout.split("\n")
    assert got[0] == "True True False"
    assert got[1] == "preloaded True"  # the profiler's hasattr(torch, "_inductor") finds it loaded


def test_default_ahead(monkeypatch):
    import torch

    monkeypatch.delenv("QBENCH_AHEAD", raising=False)
    assert runner.default_ahead(torch.device("cpu")) == 0
    for cores, ahead in ((16, 6), (32, 6), (8, 3), (4, 1), (2, 1), (1, 1)):
        monkeypatch.setattr(runner.os, "cpu_count", lambda cores=cores: cores)
        assert runner.default_ahead(torch.device("cuda:0")) == ahead, cores
    monkeypatch.setenv("QBENCH_AHEAD", "3")
    assert runner.default_ahead(torch.device("cpu")) == 3


def test_two_ahead_starts_the_next_two_workers(tmp_path, monkeypatch):
    """ahead = 2: rows(0) gives worker 0 its go and starts workers 1 and 2; rows(1) would start 3, but
    scheme 3 is skipped on the CPU (decided in the runner), so it never gets a worker."""
    import json

    import torch

    sc = _load(tmp_path, small_scenario_toml(["bf16", "fp16", "fp32", "tf32"], m=(1,)))
    workers = runner._Workers(sc, torch.device("cpu"), None, str(tmp_path), prestart=2)
    started = []

    import os

    class Go:  # a pipe end that never has a message: the worker exits without saying "done"
        def __init__(self):
            self.r, self.w = os.pipe()

        def fileno(self):
            return self.r

        def send_bytes(self, b):
            pass

        def close(self):
            pass

    class Proc:
        exitcode = 0

        def __init__(self):  # an exited process: its sentinel is readable
            self.sentinel, w = os.pipe()
            os.close(w)

        def join(self, timeout=None):
            pass

        def is_alive(self):
            return False

    def fake_start(index):
        started.append(index)
        rows_path = tmp_path / f"rows{index}.json"
        rows_path.write_text(json.dumps([{"scheme": "x", "m": 1, "status": "ok", "i": index}]))
        return Proc(), Go(), str(rows_path), str(tmp_path / "none.log")

    monkeypatch.setattr(workers, "_start", fake_start)
    assert workers.rows(0)[0]["i"] == 0 and started == [0, 1, 2] and sorted(workers.started) == [1, 2]
    # tf32 (index 3) has no CPU kernel: skipped in the runner, so no worker starts ahead for it
    assert workers.rows(1)[0]["i"] == 1 and started == [0, 1, 2] and sorted(workers.started) == [2]
    assert workers.rows(2)[0]["i"] == 2 and started == [0, 1, 2] and workers.started == {}
    skipped = workers.rows(3)
    assert skipped[0]["status"] == "skipped" and "needs CUDA" in skipped[0]["reason"] and started == [0, 1, 2]


@pytest.mark.parametrize("name,value", [("QBENCH_AHEAD", "abc"), ("QBENCH_AHEAD", "-1"), ("QBENCH_AHEAD", "1.5"),
                                        ("QBENCH_AHEAD", "\u00b2"),
                                        ("QBENCH_PRELOAD", "yes"), ("QBENCH_PRELOAD", ""),
                                        ("QBENCH_PRELOAD", "Lean")])
def test_bad_worker_env_is_one_line_before_anything_is_written(tmp_path, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    sc = _load(tmp_path, small_scenario_toml(["bf16"], m=(1,)))
    with pytest.raises(runner.RunError, match=f"^environment variable {name}: must be .*, got {value!r}$"):
        runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.partial.json").exists()


def test_a_compiled_scheme_imports_inductor_before_its_go_and_an_eager_one_does_not():
    """torch.compile() imports Inductor when called (about 2 s on the H200 host): a compiled scheme's
    worker imports it while it prepares, before the go (a fresh interpreter, so sys.modules is clean)."""
    code = (
        "import sys, torch\n"
        "from qbench import schemes, scenario\n"
        "from qbench.measure import import_ahead\n"
        "from tests.conftest import small_scenario_toml\n"
        "text = small_scenario_toml(['fp32', 'fp32'], m=(1,)).replace('name = \"fp32\"\\n', 'name = \"fp32\"\\nmode = \"compiled\"\\n', 1)\n"
        "import tomllib\n"
        "sc = scenario.from_dict(tomllib.loads(text), 't.toml')\n"
        "eager, compiled = sc.schemes[1], sc.schemes[0]\n"
        "assert compiled.options.mode == 'compiled' and eager.options.mode == 'eager'\n"
        "cpu = torch.device('cpu')\n"
        "print(import_ahead(schemes.get('fp32'), eager, cpu), 'torch._inductor.compile_fx' in sys.modules)\n"
        "print(import_ahead(schemes.get('fp32'), compiled, cpu), 'torch._inductor.compile_fx' in sys.modules)\n"
        "import dataclasses\n"
        "never = dataclasses.replace(schemes.get('fp32'), m_check=lambda m, d, o: 'not at this M')\n"
        "print(import_ahead(never, compiled, cpu, [1, 2]), import_ahead(never, compiled, cpu, []))\n"
        "import multiprocessing, torch._inductor.async_compile as ac, torch._inductor.config as cfg\n"
        "print(cfg.compile_threads, len(ac._pool_set), len(multiprocessing.active_children()))\n"
    )
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[] False", "['torch._inductor.compile_fx'] True",
                                        "[] ['torch._inductor.compile_fx']",  # every M skipped: nothing
                                        "1 0 0"]  # Inductor compiles in the worker: no pool of compile processes
    # without qbench's setting, importing Inductor starts the pool where Triton is installed (a CUDA
    # host; Inductor's maybe_warm_pool skips it without Triton): what the worker avoids
    plain = subprocess.run([sys.executable, "-c", "import torch._inductor.async_compile as ac, "
                            "torch._inductor.config as cfg; print(cfg.compile_threads > 1, len(ac._pool_set))"],
                           capture_output=True, text=True, cwd=root, env={**env, "TORCH_WARM_POOL": "1"})
    assert plain.returncode == 0, plain.stderr
    import importlib.util

    if os.cpu_count() > 1:
        assert plain.stdout.split() == ["True", "1" if importlib.util.find_spec("triton") else "0"]


@pytest.fixture
def slow_exit_scheme():
    """The test-only "slow-exit-test" scheme (its worker takes 3 s to exit), registered for one test."""
    yield from _registered("slow_exit_scheme", "slow-exit-test")


def test_the_next_worker_measures_while_the_previous_one_exits(tmp_path, monkeypatch, slow_exit_scheme):
    """A worker that says "done" and then takes 3 s to exit (a finalizer that sleeps, standing in for
    a CUDA context's teardown): the next worker, started ahead, gets its go at "done", so the run takes about
    3 s, not 3 s plus the next scheme; the slow one's rows still count (it exits with status 0)."""
    import time

    monkeypatch.setenv("QBENCH_PLUGINS", "tests.plugins.slow_exit_scheme")  # the worker registers it too

    sc = _load(tmp_path, small_scenario_toml(["slow-exit-test", "fp32"], m=(1,)))
    monkeypatch.setenv("QBENCH_AHEAD", "1")
    t0 = time.perf_counter()
    outcome = runner.run(sc, device="cpu", out=str(tmp_path / "r.json"))
    wall = time.perf_counter() - t0
    rows = {r["scheme"]: r for r in outcome.doc["rows"]}
    assert rows["slow-exit-test"]["status"] == "ok" and rows["fp32"]["status"] == "ok"
    slow = rows["slow-exit-test"]
    assert slow["worker_wall_s"] - slow["worker_phases_s"]["after_go"] - slow["worker_phases_s"]["prepare"] > 2.5
    # (the runner did wait for its exit before counting its rows)
    # fp32, prepared ahead, was given its go at "done", not 3 s later when the slow worker had exited
    fp32 = rows["fp32"]["worker_phases_s"]
    assert fp32["waited_for_go"] < slow["worker_phases_s"]["after_go"] + 1.5, (fp32, slow["worker_phases_s"])
    # the workers' span, from the first worker's start to the last exit (the runner's set-up and the
    # forkserver's preload before it are not what overlaps, and vary with the machine's load)
    slow_t, fp32_t = outcome.doc["workers"]["timeline"]
    span = max(slow_t["exited"], fp32_t["exited"]) - slow_t["worker_started"]
    assert span < slow["worker_wall_s"] + fp32["after_go"] + 2.0 and span <= wall
    # the timeline says the same: fp32's go is the slow worker's done, about 3 s before it exited
    assert (slow_t["scheme"], fp32_t["scheme"]) == ("slow-exit-test", "fp32")
    assert fp32_t["go"] - slow_t["done"] < 0.1 and slow_t["exited"] - slow_t["done"] > 2.5


def test_the_timeline_orders_each_workers_events_and_a_dead_worker_has_no_done(tmp_path, monkeypatch, abort_scheme):
    """``workers.timeline``: one entry per worker, in run order, every event in the order
    :data:`qbench.runner.TIMELINE_EVENTS` lists them (the runner's clock and the worker's are one
    clock on Linux); the worker that aborts never says done, so its entry has no ``done`` and no
    ``worker_*`` event after its go; a scheme skipped in the runner (CUDA-only, on the CPU) has none."""
    monkeypatch.setenv("QBENCH_PLUGINS", "tests.plugins.abort_scheme")
    monkeypatch.setenv("QBENCH_AHEAD", "1")
    sc = _load(tmp_path, small_scenario_toml(["fp32", "abort-test", "fp8-dynamic", "bf16"], m=(1,)))
    doc = runner.run(sc, device="cpu", out=str(tmp_path / "r.json")).doc
    timeline = doc["workers"]["timeline"]
    assert [e["scheme"] for e in timeline] == ["fp32", "abort-test", "bf16"]
    assert read_results(tmp_path / "r.json").workers["timeline"] == timeline
    order = list(runner.TIMELINE_EVENTS)
    # what must come before what; a worker started ahead prepares before its go, the first one after it.
    # "forked" is the runner's stamp once Process.start() returns, and the new worker may stamp
    # "worker_started" before that (seen under load): the two are not ordered, each follows "spawn"
    chains = [("spawn", "forked"), ("spawn", "worker_started", "worker_prepared", "worker_go"),
              ("spawn", "forked", "go", "worker_go", "worker_measured", "worker_written", "worker_released", "done",
               "exited", "recorded")]
    for entry in timeline:
        events = [e for e in order if e in entry]
        assert set(entry) - {"scheme"} == set(events)
        if entry["scheme"] == "abort-test":
            assert events == ["spawn", "forked", "go", "exited", "recorded"], events
        else:
            assert events == order, events
        for chain in chains:
            times = [(e, entry[e]) for e in chain if e in entry]
            assert [t for _, t in times] == sorted(t for _, t in times), (entry["scheme"], times)
    assert 0 < timeline[0]["spawn"] < timeline[-1]["recorded"] <= doc["wall_s"]
    assert timeline[2]["go"] >= timeline[1]["exited"]  # after a worker that died, the next one's go waits for its exit


def test_ctrl_c_says_where_the_rows_measured_so_far_are(tmp_path, monkeypatch, capsys):
    """Ctrl-C after one scheme: the message names the real partial file and its row count (it said
    "<out>.partial.json" literally) and --resume; before any scheme finished, or before the partial
    file: that nothing was written (a partial file without rows is removed). Exit 130 each time."""
    from qbench import cli, lifecycle

    sc_path = tmp_path / "s.toml"
    sc_path.write_text(small_scenario_toml(["fp32", "bf16"], m=(1, 2)))
    _interrupt_at(monkeypatch, 1)
    out = tmp_path / "r.json"
    assert cli.main(["run", str(sc_path), "--out", str(out), "--quiet"]) == 130
    partial = tmp_path / "r.partial.json"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f'qbench: interrupted; the 2 rows measured so far are in {partial} ("complete": false; '
                   "an existing result file was left as it was); run the same command with --resume to measure "
                   "only the schemes it lacks"]
    assert len(json.loads(partial.read_text())["rows"]) == 2 and not out.exists()

    _interrupt_at(monkeypatch, 0)
    assert cli.main(["run", str(sc_path), "--out", str(tmp_path / "r2.json"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == ("qbench: interrupted before any scheme finished; nothing was written "
                                               "(an existing result file was left as it was)")
    assert not (tmp_path / "r2.partial.json").exists()  # a partial file without rows is not kept

    def prepare_interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "prepare", prepare_interrupted)
    assert cli.main(["run", str(sc_path), "--out", str(tmp_path / "r3.json"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == ("qbench: interrupted before any scheme finished; nothing was "
                                               "written (an existing result file was left as it was)")
    assert isinstance(lifecycle.RunInterrupted(), KeyboardInterrupt)


def test_must_release_only_when_two_workers_would_not_fit(monkeypatch, tmp_path):
    """Two peaks plus the waiting workers' contexts against the free memory, hand-computed: a peak
    of 40 GiB, 6 workers ahead at 512 MiB each: 83 GiB needed; 100 GiB free: no release; 82 GiB
    free: release; unreadable free memory: release; the CPU: never."""
    import torch

    from qbench import memory

    gib = 1 << 30
    sc = _load(tmp_path, small_scenario_toml(["bf16"], m=(1,)))
    from qbench.layer import memory as layer_memory

    monkeypatch.setattr(layer_memory, "estimate_bytes", lambda scenario, dev: {"total": 40 * gib})
    cuda = torch.device("cuda", 0)
    for free, expected in ((100 * gib, False), (83 * gib, False), (83 * gib - 1, True), (None, True)):
        monkeypatch.setattr(memory, "free_bytes", lambda dev, free=free: free)
        assert runner.must_release(sc, cuda, 6) is expected, free
    assert memory.PROCESS_OVERHEAD == 512 << 20
    assert runner.must_release(sc, torch.device("cpu"), 6) is False
