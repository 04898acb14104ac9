"""Imported once by the runner's forkserver, so that every worker forked from it starts with the
heavy imports done: torch, qbench's measurement modules, torch.profiler and Dynamo. Scheme packages
are not preloaded: none that takes time to import is fork-safe (:data:`FORK_SAFE_PACKAGES`).

Nothing here may initialise CUDA: every forked worker creates its own CUDA context, and a CUDA
runtime initialised before ``fork`` cannot be used in the child. A worker checks this first
(``torch.cuda._is_in_bad_fork``, :func:`qbench.worker.main`) and fails its scheme's rows with that
reason.

Isolation is unchanged: each scheme still runs in its own process; only imports are shared, and an
import has no state a measurement reads (``scripts/bench_decode.py`` compares the numbers of both
designs on one machine).

Dynamo stays in: without it the forkserver is ready sooner, but every worker then imports Inductor
after its go, because starting torch.profiler (the kernel method) evaluates
``hasattr(torch, "_inductor")``, a lazy import of Inductor and Dynamo: a run is slower overall.
"""

import torch  # noqa: F401
import torch._dynamo  # noqa: F401  compiled schemes and torchao; ~3 s on the H200 host, ~1 s per worker otherwise
import torch.profiler  # noqa: F401  the kernel method (its start imports torch._inductor: hasattr(torch, "_inductor"))

import qbench.measure  # noqa: F401  formulas, inputs, metrics, the scheme registry and its ledger
import qbench.timing.flush  # noqa: F401
import qbench.timing.registry

qbench.timing.registry.load()  # every timing method's module

#: Scheme packages that import without initialising CUDA, so they may be imported before ``fork``: a
#: forked child of a process that imported torchao fails its CUDA matmul, bitsandbytes and gemlite
#: initialise CUDA at import; only mslk passes, and it imports in milliseconds. None is worth
#: preloading: the scheme packages are imported by each worker while it prepares, started ahead.
FORK_SAFE_PACKAGES: tuple[str, ...] = ()

