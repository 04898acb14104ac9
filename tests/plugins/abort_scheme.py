"""A scheme that kills its own worker process (os.abort -> SIGABRT) when built.

Registered for the runner's isolation test: QBENCH_PLUGINS=tests.plugins.abort_scheme.
"""

import os

import torch

from qbench.schemes import names, register
from qbench.schemes.base import Scheme, linear_parts


def _abort(weight, bias, options):
    os.write(2, b"abort-test: about to abort\n")
    os.abort()


if "abort-test" not in names():
    register(Scheme(
        name="abort-test", library="torch", family="float", summary="kills its worker (test only)",
        weight_dtype="float32", activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32,
        build=_abort, parts=linear_parts,
    ))
