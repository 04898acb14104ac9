"""Timing methods for one (scheme, M) row: one module per method, one registry of them.

Each method module (``stream``, ``cold``, ``warm``, ``eager``, ``kernel``, ``cpu``) defines its
timing function and ``METHOD``, the :class:`~qbench.timing.method.TimingMethod` that says what the
number includes and runs it; :mod:`qbench.timing.registry` lists them. The shared pieces: the
adaptive repetition loop (:mod:`~qbench.timing.adaptive`), the knobs
(:class:`~qbench.timing.settings.TimingSettings`), the summary (:class:`~qbench.timing.stats.Stats`),
the L2 flush (:mod:`~qbench.timing.flush`) and the CUDA event and graph-replay sampling
(:mod:`~qbench.timing._cuda`). All times are µs per call.

Import what you use from its module (``from qbench.timing.cold import time_cold``); importing this
package imports nothing, so readers of results use the registry without torch.
"""
