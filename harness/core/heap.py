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


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED = 64 << 20  # freed heap a parser keeps for its next run instead of giving it back
OWN_MAPPING = 32 << 20  # larger blocks get a mapping of their own, given back when freed (glibc's largest default)


def keep_freed() -> bool:
    """For a process that allocates and frees the same large buffers run after run (a collect's parser: a
    journal's bytes, a packed copy's inflated sections, SQLite's blobs): glibc keeps up to KEEP_FREED bytes of
    freed heap for the next allocation. By default it gives back any free top of the heap over 128 KiB (its
    threshold only grows after a mapped block is freed), and the next run faults the same pages in again, zeroed:
    198,000 page faults and 0.8-1.3 s of system time against 24,000 and 0.36-0.45 s for 730 runs of a fleet,
    collected in one process (docs/performance.md). False where the C library has no mallopt (not glibc)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    # the mapping threshold set too: setting either one stops glibc adjusting both
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, OWN_MAPPING)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, KEEP_FREED))


def release_freed() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing). After a bulk
    read whose buffers are freed, glibc keeps the pages for later allocations, and a fleet report's process then
    stays at its peak while the pages are drawn: 76 MiB of 10^7 records' run vectors (docs/performance.md)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
