"""The process heap while collect parses and the report gathers: the cyclic garbage collector's thresholds, and
giving back what a bulk read freed.

Both build millions of tuples that hold no cycles, and keep many of them alive for a while: at Python's default
thresholds the collector walks the surviving ones again and again (what it cost: docs/history.md, "Figures behind
the code's comments").
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
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


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL(None)  # the symbols the process has loaded: the C library's among them
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing). After a bulk
    read whose buffers are freed, glibc keeps the pages for later allocations, and a fleet report's process then
    stays at its peak while the pages are drawn: 76 MiB of 10^7 records' run vectors (docs/performance.md)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
