"""torch.compile in a worker: Dynamo's and Inductor's counters, Inductor's compile threads, the
recompile limit, and whether a C++ compiler is there (used by :mod:`qbench.measure`,
:mod:`qbench.worker`, :mod:`qbench._preload_cpu` and :mod:`qbench.runner`).

Reading a counter never imports Dynamo: an eager scheme's worker must not pay that import after
its go.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional


def have_compiler() -> bool:
    """Whether a C++ compiler is on PATH (``cc``, ``gcc``, ``g++``, ``clang``, ``c++``): torch.compile
    on the CPU needs one."""
    return any(shutil.which(cc) for cc in ("cc", "gcc", "g++", "clang", "c++"))


def cpu_compile_reason(mode: str, device_type: str) -> Optional[str]:
    """Why a scheme entry in ``mode`` (``"eager"``, ``"compiled"``) cannot run on a device of type
    ``device_type`` for want of a compiler, or None: torch.compile on the CPU needs a C++ compiler
    (:func:`have_compiler`). The layer job and the model-step job both ask it."""
    if mode == "compiled" and device_type == "cpu" and not have_compiler():
        return "torch.compile on CPU needs a C++ compiler (none found)"
    return None


def _dynamo_counters():
    """``torch._dynamo.utils.counters``, or None when Dynamo was never imported in this process (then
    it compiled nothing): reading the counters must not import Dynamo, about 3 s on the H200 host,
    into an eager scheme's worker after its go (``QBENCH_PRELOAD=0`` does not preload it)."""
    utils = sys.modules.get("torch._dynamo.utils")
    return getattr(utils, "counters", None)


def graph_break_count() -> int:
    """Graph breaks Dynamo has counted in this process (``counters["graph_break"]``, reason -> count)."""
    counters = _dynamo_counters()
    return 0 if counters is None else int(sum(counters["graph_break"].values()))


def graph_count() -> int:
    """Graphs Dynamo has compiled in this process (``counters["stats"]["unique_graphs"]``)."""
    counters = _dynamo_counters()
    return 0 if counters is None else int(counters["stats"]["unique_graphs"])


def cudagraph_skip_count() -> int:
    """Times Inductor's CUDA-graph trees (``mode="reduce-overhead"``) skipped CUDA graphs in this
    process and ran the code without them (``counters["inductor"]["cudagraph_skips"]``)."""
    counters = _dynamo_counters()
    return 0 if counters is None else int(counters["inductor"].get("cudagraph_skips", 0))


def cache_counters() -> dict[str, int]:
    """Inductor's cache counters (``torch._dynamo.utils.counters["inductor"]`` keys naming a cache:
    ``fxgraph_cache_hit`` / ``_miss`` / ``_bypass``, ``async_compile_cache_hit`` / ``_miss``, ...)."""
    counters = _dynamo_counters()
    if counters is None:
        return {}
    return {key: int(value) for key, value in counters["inductor"].items() if "cache" in key}


def allow_recompiles(graphs: int) -> None:
    """Raise Dynamo's recompile limit (``recompile_limit``, older ``cache_size_limit``; default 8)
    to at least ``graphs``, so that one static-shape graph per M does not make Dynamo fall back
    to eager (a sweep has 11 M values). Imports Dynamo."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), graphs))


def single_compile_thread() -> int:
    """Make Inductor compile in this worker's own process (``torch._inductor.config.compile_threads =
    1``) unless ``TORCHINDUCTOR_COMPILE_THREADS`` is set; returns the value in force. Call before
    ``torch._inductor.async_compile`` is imported, which otherwise starts a pool of compile
    processes (one per core, up to 32; each imports torch) the moment it is imported: in a worker
    started ahead, a process per core per compiled scheme, competing with the measuring worker for
    the CPU and making its first calls several times slower. A scheme compiles a handful of kernels,
    read from Inductor's on-disk cache after the first run: one process is enough."""
    import torch._inductor.config as inductor_config

    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        inductor_config.compile_threads = 1
    return inductor_config.compile_threads


#: Inductor's own cap on its compile processes (``torch._inductor.config.decide_compile_threads``).
MAX_COMPILE_THREADS = 32


def compile_in_parallel() -> int:
    """For the worker that measures now (after its go): let Inductor compile on as many processes
    as this process may use CPUs (at most :data:`MAX_COMPILE_THREADS`) and start its pool at once,
    so the pool is up by the first compiled call (the model and its KV cache are built meanwhile).
    Unless ``TORCHINDUCTOR_COMPILE_THREADS`` is set (then it is in force from the import on, and
    returned). Returns the value in force.

    :func:`single_compile_thread` keeps a worker started ahead from starting a pool beside the one
    measuring; once a worker measures, the workers ahead only import. A model-step block is many
    kernels, not a layer's handful: alone on a warm machine a compiled fp8 weight-only step compiled
    in half the time on 16 threads; in a whole run on a fresh machine no gain showed."""
    import torch._inductor.config as inductor_config

    if "TORCHINDUCTOR_COMPILE_THREADS" in os.environ:
        return inductor_config.compile_threads
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    inductor_config.compile_threads = max(1, min(MAX_COMPILE_THREADS, cpus))
    if inductor_config.compile_threads > 1:
        from torch._inductor import async_compile

        allowed = getattr(async_compile, "_process_pool_allowed", lambda: True)
        if not allowed():  # a daemonic process without the subprocess pool: Inductor compiles in-process
            inductor_config.compile_threads = 1
            return 1
        async_compile.AsyncCompile.warm_pool()  # starts the pool's sidecar process
        wakeup = getattr(async_compile.AsyncCompile, "wakeup", None)
        if wakeup is not None:  # and its worker processes, now rather than at the first compile
            wakeup()
    return inductor_config.compile_threads


def compile_threads() -> Optional[int]:
    """Inductor's ``compile_threads`` in this process (:func:`single_compile_thread`), None when
    Inductor's config was never imported."""
    config = sys.modules.get("torch._inductor.config")
    return getattr(config, "compile_threads", None)


#: The Inductor settings a torchao config switches on process-wide when its scheme is built
#: (``set_inductor_config=True``, its default: ``torchao.quantization.utils.recommended_inductor_config_setter``), and
#: the values :func:`tune_like_torchao` gives every compiled worker (gpt-fast's ``generate.py`` also sets
#: ``coordinate_descent_tuning``).
TORCHAO_TUNING = {"coordinate_descent_tuning": True, "coordinate_descent_check_all_directions": True,
                  "force_fuse_int_mm_with_mul": True}
#: Inductor's tuning settings a compiled row records (:func:`inductor_settings`): torchao's, and ``max_autotune``.
TUNING_SETTINGS = (*TORCHAO_TUNING, "max_autotune")


def tune_like_torchao() -> None:
    """Give Inductor the tuning settings a torchao scheme's build switches on (:data:`TORCHAO_TUNING`), so every
    compiled row of a run is compiled alike: a ``bf16+compiled`` baseline builds no torchao scheme and would
    otherwise compile without coordinate-descent tuning while the torchao schemes it is compared with get it."""
    import torch._inductor.config as config

    for key, value in TORCHAO_TUNING.items():
        setattr(config, key, value)


def inductor_settings() -> Optional[dict[str, bool]]:
    """``{setting: on}`` for each of :data:`TUNING_SETTINGS` in this process's Inductor config, None when Inductor's
    config was never imported."""
    config = sys.modules.get("torch._inductor.config")
    if config is None:
        return None
    return {key: bool(getattr(config, key)) for key in TUNING_SETTINGS if hasattr(config, key)}
