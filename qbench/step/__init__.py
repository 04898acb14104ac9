"""The model-step job: one decode step of a whole Llama-family model, measured.

A scenario with a ``[model]`` table (instead of ``[layer]``) is a model-step job of the one
runner: every scheme becomes one worker, which builds the model with the scheme applied to every
linear layer of every block (and, when asked, the LM head), fills a static KV cache by a prefill
of seeded tokens, and times the decode step (embedding -> blocks -> norm -> LM head -> argmax)
with the step methods of the timing registry (``step_graph``, ``step_compiled``,
``step_reduce_overhead``, ``step_cpu``). Beside the step, the same worker measures the per-layer
``stream`` sum of the model's own linear layers, so the remainder (step - Σ linear) is read from
one run.

Modules (torch-free unless said): :mod:`.spec` (the ``[model]`` table), :mod:`.row` (the typed
step row), :mod:`.measure` (torch: one scheme's rows), :mod:`.floor` (bytes and HBM floor of a
step, pure). The model itself (configs, checkpoint, the Llama forward, recipes) is
:mod:`qbench.model`'s.
"""
