"""The reader commands: ``qbench report | compare | recommend | model | plot``.

Each module holds one command (:class:`qbench.readers.common.Command`, its ``COMMAND``): its
options, its views and their rendering, and nothing another reader needs (shared decisions live in
:mod:`qbench.judge`, shared output in :mod:`qbench.render`, the shared outline in
:mod:`qbench.readers.common`). Readers import no other reader and read rows through the typed
result (:class:`qbench.results.ResultDoc`, :class:`qbench.row.Row`). A new reader is one module
plus one entry of :data:`COMMANDS`.
"""

from __future__ import annotations

from qbench.readers import compare, model, plot, recommend, report

#: Every reader command, in the order ``qbench --help`` lists them.
COMMANDS = (report.COMMAND, compare.COMMAND, recommend.COMMAND, model.COMMAND, plot.COMMAND)
