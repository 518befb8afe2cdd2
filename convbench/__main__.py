"""``python -m convbench``: the same entry point as the ``convbench`` console script (harness.cli.main)."""

import sys

from harness.cli import main

sys.exit(main())
