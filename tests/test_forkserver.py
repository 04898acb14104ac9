"""qbench.forkserver: started first by ``qbench run`` only for a run that will use it, and holding no
pipe of the caller (a user's ``$(qbench run bad.toml)`` or a CI log reader waited for its preload)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qbench import forkserver

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("QBENCH_PRELOAD", "QBENCH_AHEAD", "QBENCH_TUNING_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_worth_starting_for_a_runnable_scenario_only(clean_env, tmp_path):
    assert forkserver.worth_starting_early(str(ROOT / "scenarios" / "decode.toml"))
    assert not forkserver.worth_starting_early(str(ROOT / "scenarios" / "tp_decode.toml"))  # torchrun, no forkserver
    assert not forkserver.worth_starting_early(str(tmp_path / "missing.toml"))
    (tmp_path / "bad.toml").write_text("name = [unclosed\n")
    assert not forkserver.worth_starting_early(str(tmp_path / "bad.toml"))


@pytest.mark.parametrize("name,value", [("QBENCH_PRELOAD", "yes"), ("QBENCH_AHEAD", "-1"),
                                        ("QBENCH_AHEAD", "two"), ("QBENCH_TUNING_CACHE", "2")])
def test_not_worth_starting_when_the_run_will_be_refused(clean_env, name, value):
    clean_env.setenv(name, value)
    assert not forkserver.worth_starting_early(str(ROOT / "scenarios" / "decode.toml"))


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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{os.devnull}|{os.devnull}"
    assert proc.stderr.strip().splitlines()[-1] == "True"
