"""Imported once by the runner's forkserver so that every worker starts with torch loaded.

Importing torch does not initialise CUDA, so forked workers still create their own CUDA
context. Nothing else is imported here: scheme registries and plugins load in each worker.
"""

import torch  # noqa: F401
