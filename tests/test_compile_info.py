"""qbench.compile_info: Inductor's compile threads in a worker (each case in a fresh interpreter:
Inductor's config and its pool are process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
import json, os
from qbench import compile_info
before = compile_info.single_compile_thread()   # what a worker does at import (no pool)
from torch._inductor.async_compile import AsyncCompile
pool_before = AsyncCompile.process_pool.cache_info().currsize
after = compile_info.compile_in_parallel()      # after its go
ready = False
if after > 1:
    AsyncCompile.wait_pool_ready(180)
    ready = AsyncCompile.use_process_pool()     # Inductor sends its kernel compiles to the pool
print(json.dumps({"ready": ready, "before": before, "after": after, "pool_before": pool_before,
                  "pool_after": AsyncCompile.process_pool.cache_info().currsize,
                  "cpus": len(os.sched_getaffinity(0)), "now": compile_info.compile_threads()}))
"""


def _probe(env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"} | env_extra
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_measuring_worker_compiles_on_every_cpu_and_starts_the_pool():
    got = _probe({})
    want = min(32, got["cpus"])
    assert got["before"] == 1 and got["pool_before"] == 0  # a worker started ahead starts no pool
    assert got["after"] == got["now"] == want
    assert got["pool_after"] == (1 if want > 1 else 0)  # started at once, not at the first compile
    assert got["ready"] is (want > 1)


def test_the_environment_variable_wins():
    got = _probe({"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert got["before"] == got["after"] == 1 and got["pool_after"] == 0


_TORCHAO_PROBE = """
import json, torch
from qbench import compile_info, schemes
import torch._inductor.config  # noqa: F401 - imported, as a compiled worker has it
plain = compile_info.inductor_settings()
entry = schemes.get("int8-weight-only")
entry.build(torch.randn(64, 64), None, entry.options_model())  # torchao's quantize_ with its default config
print(json.dumps({"plain": plain, "after": compile_info.inductor_settings()}))
"""


_TUNE_PROBE = """
import json
from qbench import compile_info
compile_info.tune_like_torchao()
print(json.dumps(compile_info.inductor_settings()))
"""


def _fresh(code: str):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_torchao_build_switches_coordinate_descent_on_and_a_plain_worker_gets_the_same():
    """torchao's configs (set_inductor_config=True by default) switch Inductor's coordinate-descent tuning on for the
    whole process when a scheme is built; a plain bf16 worker would compile without it, so every compiled worker
    calls tune_like_torchao, which gives the same settings (and each compiled row records them)."""
    got = _fresh(_TORCHAO_PROBE)
    assert got["plain"]["coordinate_descent_tuning"] is False and got["plain"]["max_autotune"] is False
    assert got["after"]["coordinate_descent_tuning"] is True
    assert got["after"]["coordinate_descent_check_all_directions"] is True
    assert _fresh(_TUNE_PROBE) == got["after"]


def test_inductor_settings_before_inductor_is_imported():
    code = "import json; from qbench import compile_info; print(json.dumps(compile_info.inductor_settings()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0 and out.stdout.strip() == "null", out.stderr[-1000:]
