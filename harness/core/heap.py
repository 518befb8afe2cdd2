"""The cyclic garbage collector's thresholds while collect parses and the report gathers.

Both build millions of tuples that hold no cycles, and keep many of them alive for a while: at Python's default
thresholds the collector walks the surviving ones again and again. 29 % of a 10^7-record report's CPU went to it
(9.9 -> 7.7 s at these thresholds, same RSS), and about 14 % of a one-process collect of the committed fixture runs
(15.7-16.5 -> 13.4-14.4 CPU-s); docs/history.md.
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
