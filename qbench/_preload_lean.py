"""What the runner's forkserver imports with ``QBENCH_PRELOAD=lean``: :mod:`qbench._preload` without
Dynamo (about 3 s of its 4.6 s on the H200 host, ``results/h200/speed/2026-12-01/profile-int8c-call7.txt``).

The forkserver is then ready sooner, so the first workers (the float schemes, which never import
Dynamo) start sooner; the workers that need Dynamo (compiled schemes, torchao's) import it while they
prepare, ahead of their go. Whether that wins overall depends on how far ahead they start: an
experiment for ``scripts/bench_decode.py --designs preload,lean-preload`` (docs/speed.md), not the
default. Nothing here may initialise CUDA (see :mod:`qbench._preload`).
"""

import torch  # noqa: F401
import torch.profiler  # noqa: F401  the kernel method

import qbench.measure  # noqa: F401  formulas, inputs, ledger, metrics, the scheme registry
import qbench.timing.cold  # noqa: F401
import qbench.timing.eager  # noqa: F401
import qbench.timing.kernel  # noqa: F401
import qbench.timing.stream  # noqa: F401
import qbench.timing.warm  # noqa: F401
