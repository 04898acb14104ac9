"""The layer job: one linear layer per scheme and M (its ``m``, ``[layer]``, ``[weight]``, ``[inputs]``
tables, their checks and its memory fit). Its measuring code is :mod:`qbench.measure` and
:mod:`qbench.inputs`."""
