"""Imported by the runner's forkserver after :mod:`qbench._preload` on CPU runs only: the scheme
packages (torchao, bitsandbytes) and Inductor's ``compile_fx``, with Inductor set to compile in
the worker's own process (:func:`qbench.compile_info.single_compile_thread`).

On the CPU no worker starts ahead (its imports would compete with the timed work for the cores),
so each worker would import these after the previous one has exited (``scripts/bench_decode.py
--timeline``, "next not ready"). Preloaded once, they are shared by every worker forked afterwards.
A CUDA run never preloads them: a child forked after ``import torchao`` fails its CUDA matmul, and
bitsandbytes initialises CUDA when imported; :func:`qbench.forkserver.ensure` replaces a
forkserver started with this module when the run turns out to be on CUDA.

A package that is missing or fails to import is left to the worker, which reports the failure in
its scheme's rows.
"""

import importlib
import importlib.util

from qbench.compile_info import single_compile_thread

#: What this module imports, where installed.
MODULES = ("torchao", "bitsandbytes", "torch._inductor.compile_fx")

single_compile_thread()
for _name in MODULES:
    if importlib.util.find_spec(_name.split(".")[0]) is not None:
        try:
            importlib.import_module(_name)
        except Exception:  # noqa: BLE001 - the worker imports it again and says why in its rows
            pass
