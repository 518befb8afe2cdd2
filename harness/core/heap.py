"""The cyclic garbage collector's thresholds while collect parses and the report gathers.

Both build millions of tuples that hold no cycles, and keep many of them alive for a while: at Python's default
thresholds the collector walks the surviving ones again and again (what it cost: docs/history.md, "Figures behind
the code's comments").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

BULK_THRESHOLDS = (50_000, 20, 100)


def use_bulk_thresholds() -> None:
    """For a process that does nothing else (a collect's parser)."""
    gc.set_threshold(*BULK_THRESHOLDS)


@contextlib.contextmanager
def bulk_allocations() -> Iterator[None]:
    """BULK_THRESHOLDS for the block, the caller's thresholds after it."""
    before = gc.get_threshold()
    gc.set_threshold(*BULK_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
