"""qbench._preload: what the runner's forkserver imports before forking workers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

CHECK = ("import sys, torch, qbench._preload; "
         "print('torchao' in sys.modules, torch.cuda.is_initialized())")


def _run(env_extra: dict) -> str:
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                          check=True, timeout=300).stdout.split()


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")
def test_preload_imports_torchao_without_touching_cuda():
    assert _run({}) == ["True", "False"]


def test_preload_torch_only_on_request():
    assert _run({"QBENCH_PRELOAD": "torch"}) == ["False", "False"]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")
def test_preload_keeps_import_noise_off_the_terminal():
    """What torchao's import prints goes to PRELOAD_LOG (each worker writes it to its own log),
    not to the stderr of the process that preloads it."""
    code = "import qbench._preload as p; import sys; sys.stdout.write(repr(p.PRELOAD_LOG))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert "torchao" not in done.stderr and "Failed to load" not in done.stderr
