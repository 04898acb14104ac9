"""``python -m qbench``: the same as the ``qbench`` console script."""

import sys

from qbench.cli import main

sys.exit(main())
