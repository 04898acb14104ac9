"""A scheme whose build writes its worker's pid to ``$QBENCH_TEST_PIDFILE`` (appending a line) and
then sleeps ``$QBENCH_TEST_SLEEP_S`` seconds (default 60) before building an fp32 layer: a worker
that is "measuring" for as long as a test needs, to stop its runner under it. Registered for the
stop and lock tests: QBENCH_PLUGINS=tests.plugins.sleep_scheme."""

import os
import time

import torch

from qbench.schemes import names, register
from qbench.schemes.base import Scheme, linear_parts, plain_linear


def _build(weight, bias, options):
    pidfile = os.environ.get("QBENCH_TEST_PIDFILE")
    if pidfile:
        with open(pidfile, "a", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    time.sleep(float(os.environ.get("QBENCH_TEST_SLEEP_S", "60")))
    return plain_linear(weight, bias, torch.float32)


if "sleep-test" not in names():
    register(Scheme(
        name="sleep-test", library="torch", family="float", summary="sleeps in its build (test only)",
        weight_dtype="float32", activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32,
        build=_build, parts=linear_parts,
    ))
