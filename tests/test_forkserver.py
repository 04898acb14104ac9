"""qbench.forkserver: started first by ``qbench run`` only for a run that will use it, and holding no
pipe of the caller (a user's ``$(qbench run bad.toml)`` or a CI log reader waited for its preload)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qbench import forkserver
from tests.conftest import small_scenario_toml

ROOT = Path(__file__).resolve().parent.parent


def _fresh(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter at the checkout's root (its own forkserver and imports,
    none of this test process's), and require exit status 0."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("QBENCH_PRELOAD", "QBENCH_AHEAD", "QBENCH_TUNING_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _scenario(name: str):
    from qbench import scenario

    return scenario.load(ROOT / "scenarios" / name)


def test_worth_starting_for_a_runnable_scenario_only(clean_env):
    assert forkserver.worth_starting_early(_scenario("decode.toml"))
    assert not forkserver.worth_starting_early(_scenario("tp_decode.toml"))  # torchrun, no forkserver


@pytest.mark.parametrize("name,value", [("QBENCH_PRELOAD", "yes"), ("QBENCH_AHEAD", "-1"),
                                        ("QBENCH_AHEAD", "two"), ("QBENCH_AHEAD", "\u00b2"), ("QBENCH_TUNING_CACHE", "2")])
def test_not_worth_starting_when_the_run_will_be_refused(clean_env, name, value):
    clean_env.setenv(name, value)
    assert not forkserver.worth_starting_early(_scenario("decode.toml"))


def test_the_forkserver_writes_to_dev_null_not_to_the_callers_pipes():
    """Started from a process whose stdout and stderr are pipes, the forkserver's are /dev/null, and the
    caller's own descriptors are back in place afterwards."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc on this system")
    code = (
        "import os, sys\n"
        "from qbench import forkserver\n"
        "forkserver.start()\n"
        "pid, = forkserver.pids()\n"
        "print(os.readlink(f'/proc/{pid}/fd/1'), os.readlink(f'/proc/{pid}/fd/2'), sep='|')\n"
        "print(os.readlink('/proc/self/fd/1').startswith('pipe:'), file=sys.stderr)\n"
    )
    proc = _fresh(code, timeout=120)
    assert proc.stdout.strip() == f"{os.devnull}|{os.devnull}"
    assert proc.stderr.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize("requested,visible,nodes,expected", [
    ("cpu", None, ("/dev/nvidiactl",), True),      # asked for: a GPU on the host does not matter
    ("cuda", None, (), False),
    ("cuda:1", None, (), False),
    ("auto", None, (), True),                     # no NVIDIA device node: torch will not see a GPU
    (None, None, (), True),
    ("auto", None, ("/dev/nvidiactl",), False),
    ("auto", None, ("/dev/dxg",), False),           # WSL
    ("auto", "", ("/dev/nvidiactl",), True),        # CUDA_VISIBLE_DEVICES hides every GPU
    ("auto", "-1", ("/dev/nvidiactl",), True),
    ("auto", "0", ("/dev/nvidiactl",), False),
])
def test_predicts_cpu_without_importing_torch(monkeypatch, requested, visible, nodes, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(forkserver.os.path, "exists", lambda path: path in nodes)
    assert forkserver.predicts_cpu(requested) is expected


def test_the_cpu_preload_adds_the_scheme_packages_only_to_the_default(clean_env):
    assert forkserver.preload_modules(cpu=True) == ["qbench._preload", "qbench._preload_cpu"]
    assert forkserver.preload_modules() == ["qbench._preload"]
    clean_env.setenv("QBENCH_PRELOAD", "0")
    assert forkserver.preload_modules(cpu=True) == ["torch"]


def test_the_cpu_preload_imports_the_packages_inductor_compiles_in_process_and_cuda_is_untouched():
    """A fresh interpreter: qbench._preload_cpu imports every installed package of its list, sets
    Inductor's compile_threads to 1 and starts no compile pool, and initialises no CUDA."""
    code = ("import sys, importlib.util, multiprocessing, torch, qbench._preload, qbench._preload_cpu as p\n"
            "import torch._inductor.config as c\n"
            "print(all(n in sys.modules for n in p.MODULES if importlib.util.find_spec(n.split('.')[0])), "
            "'torch._inductor.compile_fx' in sys.modules, c.compile_threads, len(multiprocessing.active_children()), "
            "torch.cuda.is_initialized())\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    proc = _fresh(code, env=env)
    assert proc.stdout.split() == ["True", "True", "1", "0", "False"]


def test_ensure_replaces_a_forkserver_started_for_the_cpu_when_the_run_is_on_cuda():
    """Started for the CPU (the early guess), then the run is on CUDA: a new forkserver without
    qbench._preload_cpu; the other way round the running one is kept. A fresh interpreter, so the
    test's own forkserver is left alone."""
    code = (
        "import os\n"
        "from qbench import forkserver\n"
        "forkserver.start(cpu=True)\n"
        "first, = forkserver.pids()\n"
        "print(forkserver.preloaded())\n"
        "print(forkserver.ensure(cpu=True), forkserver.pids() == (first,))\n"
        "print(forkserver.ensure(cpu=False))\n"
        "second, = forkserver.pids()\n"
        "print(second != first, forkserver.ensure(cpu=True), forkserver.pids() == (second,))\n"
        "ctx = forkserver.context()\n"
        "p = ctx.Process(target=os.getpid)\n"
        "p.start(); p.join(); print(p.exitcode)\n"
    )
    proc = _fresh(code)
    assert proc.stdout.splitlines() == [
        "['qbench._preload', 'qbench._preload_cpu']",
        "['qbench._preload', 'qbench._preload_cpu'] True",
        "['qbench._preload']",
        "True ['qbench._preload'] True",
        "0"]


def test_a_cpu_run_from_the_command_line_preloads_the_scheme_packages(tmp_path):
    """``qbench run --device cpu``: the forkserver started first thing preloads qbench._preload_cpu,
    and the result file says so (``workers.preloaded``)."""
    import json

    from tests.conftest import small_scenario_toml

    (tmp_path / "s.toml").write_text(small_scenario_toml(["fp32"], m=(1,)))
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "qbench", "run", str(tmp_path / "s.toml"), "--device", "cpu",
                           "--quiet", "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["workers"]["preloaded"] == ["qbench._preload", "qbench._preload_cpu"]


def test_cpu_ticks_reads_utime_and_stime():
    import time

    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("no /proc on this system")
    t0 = time.process_time()
    while time.process_time() - t0 < 0.1:  # burn 0.1 s of CPU: at least a few ticks
        pass
    assert forkserver.cpu_ticks([os.getpid()]) > 0
    assert forkserver.cpu_ticks([2**22 + 12345]) == 0  # no such pid: counts 0


def test_wait_idle_waits_until_the_forkserver_spends_no_cpu(monkeypatch):
    """No forkserver: nothing to wait for (0 s). One importing: wait while its CPU time grows,
    stop at the first quiet interval."""
    monkeypatch.setattr(forkserver, "pids", lambda: ())
    assert forkserver.wait_idle() == 0.0
    ticks = iter([10, 40, 70, 70, 99])
    seen = []
    monkeypatch.setattr(forkserver, "pids", lambda: (4242,))
    monkeypatch.setattr(forkserver, "cpu_ticks", lambda pids: seen.append(tuple(pids)) or next(ticks))
    monkeypatch.setattr(forkserver.time, "sleep", lambda s: None)
    assert forkserver.wait_idle(quiet_s=0.1, limit_s=30.0) >= 0.0
    assert seen == [(4242,)] * 4  # 10 -> 40 -> 70 -> 70: quiet, the fifth reading is never taken


def test_import_path_env_gives_the_parents_path_without_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    env = forkserver.import_path_env(["/venv/bin", "", "/lib/site-packages", "/venv/bin"])
    assert env == {"PYTHONSAFEPATH": "1",
                   "PYTHONPATH": os.pathsep.join(["/venv/bin", str(tmp_path), "/lib/site-packages"])}


def test_a_folder_named_qbench_in_the_working_directory_does_not_shadow_the_install(tmp_path):
    """``cd parent-of-clone && qbench run s.toml`` (a user's clone named qbench): Python 3.11's
    forkserver put the working directory first on its path, imported that folder as a namespace
    package and every worker failed ("cannot import name ... (unknown location)")."""
    console = Path(sys.executable).parent / "qbench"
    if not console.is_file():
        pytest.skip(f"no qbench console script beside {sys.executable} (pip install -e . makes one)")
    (tmp_path / "qbench" / "results").mkdir(parents=True)  # what a clone's folder holds
    (tmp_path / "s.toml").write_text(small_scenario_toml(["fp16"], m=(1,), extra='device = "cpu"'))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    proc = subprocess.run([str(console), "run", "s.toml", "-o", "out.json"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert row["status"] == "ok", row.get("reason")
