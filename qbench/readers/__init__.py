"""The reader commands, ``qbench report | compare | recommend | model | plot``: one module each, with its
``COMMAND`` (:class:`qbench.readers.common.Command`); a reader imports no other reader. A new reader is
one module plus one entry of :data:`COMMANDS`.
"""

from __future__ import annotations

from qbench.readers import compare, model, plot, recommend, report

#: Every reader command, in the order ``qbench --help`` lists them.
COMMANDS = (report.COMMAND, compare.COMMAND, recommend.COMMAND, model.COMMAND, plot.COMMAND)
