"""env: what explains a surprising number (issue 12 item 3), read without importing torchao or
bitsandbytes: the checkout's commit, torchao's extension state, bitsandbytes' native library, the
CPU load; and the warnings a run prints."""

from __future__ import annotations

import subprocess

import torch

from qbench import env


def test_git_state_is_this_checkout():
    got = env.git_state()
    sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert got is not None and got["commit"] == sha and isinstance(got["dirty"], bool)


def test_git_state_outside_a_checkout_is_none(tmp_path):
    assert env.git_state(tmp_path) is None


def test_torchao_extensions_forced_off_say_so(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        assert env.torchao_extension_state() is None
        return
    monkeypatch.setenv("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    state = env.torchao_extension_state()
    assert state["loaded"] is False and state["reason"] == "TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1"
    warnings = env.warnings_of({"torchao_extensions": state})
    assert warnings == ["torchao's C++ extensions will not load (TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1): "
                        "torchao schemes may run slower fallbacks or fail"]


def test_torchao_extensions_need_torch_2_11(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        return
    monkeypatch.delenv("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.10.0+cpu")
    state = env.torchao_extension_state()
    assert state["loaded"] is False and "older than 2.11" in state["reason"]


def test_version_tuple():
    assert env._version_tuple("2.11.0+cu130") == (2, 11, 0)
    assert env._version_tuple("2.13.0.dev20261101") == (2, 13, 0)


def test_bitsandbytes_library_on_cpu():
    import importlib.util

    lib = env.bitsandbytes_library()
    if importlib.util.find_spec("bitsandbytes") is None:
        assert lib is None
        return
    if not torch.cuda.is_available():
        assert lib["file"] == "libbitsandbytes_cpu.so" and lib["present"] is True


def test_cpu_load_hand_values(monkeypatch):
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert env.cpu_load(2) == {"load_avg_1min": 1.5, "free_cores": 2.5, "oversubscribed": False}
    assert env.cpu_load(4)["oversubscribed"] is True  # 4 threads > 2.5 free + 0.5
    # a worker's own 2 busy threads are in the load average: not other work
    assert env.cpu_load(2, own_running=2) == {"load_avg_1min": 1.5, "free_cores": 4.0, "oversubscribed": False}


def test_collect_has_the_new_records():
    got = env.collect(torch.device("cpu"))
    for key in ("git", "torchao_extensions", "bitsandbytes_library", "cublas", "load_avg_1min", "free_cores",
                "oversubscribed", "warnings"):
        assert key in got
    info = got["cpu_info"]
    assert info["capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(info["flags"], list) and isinstance(info["caches"], dict)
    assert set(info) == {"model_name", "vendor", "family", "model", "stepping", "flags", "caches", "capability"}


def test_source_digest_of_a_known_tree(tmp_path):
    """One file qbench/a.py holding "x\\n": git's blob id is 587be6b4... (``git hash-object``), and the
    digest is the SHA-256 of the single line "qbench/a.py 587be6b4..."; non-.py files do not count."""
    import hashlib

    from qbench.env import source_digest

    (tmp_path / "qbench").mkdir()
    (tmp_path / "qbench" / "a.py").write_text("x\n")
    (tmp_path / "qbench" / "notes.txt").write_text("ignored\n")
    line = "qbench/a.py 587be6b4c3f93f93c489c0111bba5596147a26cb"
    assert source_digest(tmp_path) == hashlib.sha256(line.encode()).hexdigest()


def test_find_commit_recomputes_the_digest_of_a_clean_checkout():
    """scripts/find_commit.py's digest of HEAD (from git ls-tree) equals env's digest of the files,
    when qbench/ has no uncommitted change (CI's clean clone)."""
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    root = Path(__file__).resolve().parent.parent
    try:
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "qbench"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("no git checkout here")
    if dirty:
        pytest.skip("qbench/ has uncommitted changes in this checkout")
    sys.path.insert(0, str(root / "scripts"))
    try:
        from find_commit import digest_at
    finally:
        sys.path.pop(0)
    from qbench.env import source_digest

    assert digest_at("HEAD") == source_digest()


def test_busy_cores_from_two_proc_stat_lines(monkeypatch):
    """4 CPUs; between the readings 400 jiffies passed, 300 idle (200 idle + 100 iowait): 1.0 core busy."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    before = "cpu  1000 0 500 8000 100 0 0 0 0 0"
    after = "cpu  1080 0 520 8200 200 0 0 0 0 0"
    assert env.busy_cores(before, after) == 1.0
    import pytest

    with pytest.raises(ValueError, match="not the aggregate cpu line"):
        env.busy_cores("cpu0 1 2 3 4 5 6 7 8", after)
    with pytest.raises(ValueError, match="no time passed"):
        env.busy_cores(before, before)


def test_cpu_load_prefers_the_cores_busy_now(monkeypatch):
    """A 1-minute load of 1.8 on 2 cores (a run that just ended) but 0.1 cores busy now: not busy."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (1.8, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    lines = iter(["cpu  0 0 0 0 0 0 0 0", "cpu  5 0 0 95 0 0 0 0"])  # 5 % of 2 CPUs busy
    monkeypatch.setattr(env, "_proc_stat_cpu", lambda: next(lines))
    monkeypatch.setattr(env.time, "sleep", lambda s: None)
    got = env.cpu_load(2, window_s=0.2)
    assert got == {"load_avg_1min": 1.8, "free_cores": 1.9, "oversubscribed": False, "busy_cores_now": 0.1}
    assert env.cpu_load(2)["oversubscribed"] is True  # the average alone would have said busy
    lines = iter(["cpu  0 0 0 0 0 0 0 0", "cpu  90 0 0 10 0 0 0 0"])  # 1.8 cores busy now
    got = env.cpu_load(2, window_s=0.2)
    assert got["oversubscribed"] is True and abs(got["busy_cores_now"] - 1.8) < 1e-12
    text = env.warnings_of({"oversubscribed": True, "busy_cores_now": 1.8, "load_avg_1min": 1.8, "cpu_count": 2,
                            "free_cores": got["free_cores"], "torch_threads": 2})
    assert text == ["CPU busy: 1.8 cores busy over 0.2 s on 2 cores leaves 0.2 free for 2 torch threads: "
                    "timings will be noisy"]


def test_the_runs_own_forkserver_is_not_other_work(monkeypatch):
    """2 CPUs, 100 jiffies pass, 80 busy; 70 of them are this run's forkserver importing torch: 0.2
    cores of other work, not 1.6 (before: every CPU run started with a false "CPU busy" warning)."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(env.time, "sleep", lambda s: None)
    assert env.busy_cores("cpu  0 0 0 0 0 0 0 0", "cpu  80 0 0 20 0 0 0 0", own_ticks=70) == 0.2
    assert env.busy_cores("cpu  0 0 0 0 0 0 0 0", "cpu  80 0 0 20 0 0 0 0", own_ticks=95) == 0.0  # never < 0
    lines = iter(["cpu  0 0 0 0 0 0 0 0", "cpu  80 0 0 20 0 0 0 0"] * 2)
    monkeypatch.setattr(env, "_proc_stat_cpu", lambda: next(lines))
    ticks = iter([1000, 1070])
    monkeypatch.setattr(env.forkserver, "cpu_ticks", lambda pids: next(ticks) if list(pids) == [4242] else 0)
    got = env.cpu_load(2, window_s=0.2, own_pids=(4242,))
    assert abs(got["busy_cores_now"] - 0.2) < 1e-12 and got["oversubscribed"] is False
    assert env.cpu_load(2, window_s=0.2)["oversubscribed"] is True  # the same window, nothing left out


def test_cpu_busy_flag_text_by_hand(monkeypatch):
    """1.8 of 2 cores busy with other work after a 2-thread timing: 0.2 free cores, the flag's text;
    0.1 busy: no flag."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (1.8, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(env.time, "sleep", lambda s: None)
    lines = iter(["cpu  0 0 0 0 0 0 0 0", "cpu  90 0 0 10 0 0 0 0"])
    monkeypatch.setattr(env, "_proc_stat_cpu", lambda: next(lines))
    load, text = env.cpu_busy(2)
    assert load["oversubscribed"] is True
    assert text == f"1.8 cores busy with other work leaves {load['free_cores']:.1f} free cores for 2 threads: noisy"
    lines = iter(["cpu  0 0 0 0 0 0 0 0", "cpu  5 0 0 95 0 0 0 0"])
    assert env.cpu_busy(2)[1] is None
