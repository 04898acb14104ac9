"""qbench: compare quantization dtypes for the linear layers of LLM inference.

One linear layer (K = in_features, N = out_features, M = batch x tokens rows) is built from the
same seeded FP32 weight in every registered scheme (see :mod:`qbench.schemes`); for each scheme
and each M qbench reports the byte ledger, FLOPs, arithmetic intensity, roofline bound, measured
latency and the error against an FP32 (float64-accumulated) reference.
"""

__version__ = "0.1.0"

#: Version of the result JSON written by :mod:`qbench.results`; readers refuse other versions.
SCHEMA_VERSION = 3
