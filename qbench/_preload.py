"""Imported once by the runner's forkserver so that every worker starts with torch loaded.

Importing torch does not initialise CUDA, so forked workers still create their own CUDA
context. torchao is preloaded too when it is installed: its import takes about 7 s on the H200
host and creates no CUDA state (``results/h200/import-costs.log``: ``cuda_initialized= False``,
one thread), so every torchao worker saves that time. bitsandbytes is not: its import
initialises CUDA (same log), which would break every worker forked from this server. Scheme
registries and plugins load in each worker. ``QBENCH_PRELOAD=torch`` preloads torch alone.

What the imports print (torchao's notes about optional kernels it cannot load, deprecation
warnings) is captured into :data:`PRELOAD_LOG` instead of the user's terminal; each forked worker
inherits it and writes it at the top of its own log.
"""

import importlib.util
import os
import sys
import tempfile

import torch

#: What the preloaded imports wrote to stderr (fd 2), for the workers' logs.
PRELOAD_LOG = ""


def _import_quietly(name: str) -> str:
    """Import ``name`` with fd 2 sent to a temporary file; return what was written there."""
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken install fails in the worker that needs it, with its message
            print(f"qbench._preload: import {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode("utf-8", errors="replace")


if os.environ.get("QBENCH_PRELOAD", "").strip() != "torch" and importlib.util.find_spec("torchao") is not None:
    PRELOAD_LOG = _import_quietly("torchao")
if torch.cuda.is_initialized():  # pragma: no cover - would break every forked worker
    raise RuntimeError("qbench._preload: CUDA was initialised while preloading; set QBENCH_PRELOAD=torch")
