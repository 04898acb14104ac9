"""Imported once by the runner's forkserver, so that every worker forked from it starts with the
heavy imports done: torch, qbench's measurement modules, torch.profiler and Dynamo, and (listed by
the runner, :func:`qbench.runner.preload_modules`) the scenario's scheme packages that are fork-safe
(:data:`FORK_SAFE_PACKAGES`).

Nothing here may initialise CUDA: every forked worker creates its own CUDA context, and a CUDA
runtime initialised before ``fork`` cannot be used in the child. A worker checks this first
(``torch.cuda._is_in_bad_fork``, :func:`qbench.worker.main`) and fails its scheme's rows with that
reason.

Isolation is unchanged: each scheme still runs in its own process; only imports are shared, and an
import has no state a measurement reads (``scripts/bench_decode.py`` compares the numbers of both
designs on one machine; ``results/h200/speed/``).
"""

import torch  # noqa: F401
import torch._dynamo  # noqa: F401  compiled schemes; ~1 s per worker otherwise
import torch.profiler  # noqa: F401  the kernel method

import qbench.measure  # noqa: F401  formulas, inputs, ledger, metrics, the scheme registry
import qbench.timing.cold  # noqa: F401
import qbench.timing.eager  # noqa: F401
import qbench.timing.kernel  # noqa: F401
import qbench.timing.stream  # noqa: F401
import qbench.timing.warm  # noqa: F401

#: Scheme packages that import without initialising CUDA, so they may be imported before ``fork``.
#: Checked on the H200 by ``scripts/probe_preload.py`` (``results/h200/speed/probe-preload.json``:
#: after the import ``torch.cuda.is_initialized()`` is False and a forked child runs a CUDA matmul).
#: gemlite is not: it reads the CUDA device's properties when imported.
FORK_SAFE_PACKAGES = ("torchao", "bitsandbytes", "mslk")

