"""``python -m harness.cli``: the same entry point as the ``convbench`` console script."""

import sys

from . import main

sys.exit(main())
