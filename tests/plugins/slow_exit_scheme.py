"""A scheme whose worker takes 3 s to exit after its rows are written (a multiprocessing finalizer
that sleeps, as a CUDA context's teardown takes time on a GPU; a forked worker runs those at exit,
not ``atexit`` handlers). Registered for the runner's handoff test:
QBENCH_PLUGINS=tests.plugins.slow_exit_scheme."""

import multiprocessing.util
import time

import torch

from qbench.schemes import names, register
from qbench.schemes.base import Scheme, linear_parts, plain_linear


def _build(weight, bias, options):
    multiprocessing.util.Finalize(None, time.sleep, args=(3.0,), exitpriority=0)
    return plain_linear(weight, bias, torch.float32)


if "slow-exit-test" not in names():
    register(Scheme(
        name="slow-exit-test", library="torch", family="float", summary="slow to exit (test only)",
        weight_dtype="float32", activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32,
        build=_build, parts=linear_parts,
    ))
