"""The process heap settings of core/heap.py, checked by what the kernel counts (page faults), in a process of
their own so the settings stay there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import heap

ROOT = Path(__file__).resolve().parent.parent

# a 20 MiB buffer made, freed and made again: the second time, its pages fault in again unless the heap kept them
_REFAULTS = """
import resource, sys
from harness.core import heap
if sys.argv[1] == "keep":
    assert heap.keep_freed()
b = bytearray(20 << 20)
del b
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = bytearray(20 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _refaults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _REFAULTS, mode], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


@pytest.mark.skipif(heap._libc() is None or not hasattr(heap._libc(), "mallopt"), reason="glibc's mallopt only")
def test_a_parser_keeps_the_pages_it_freed_for_its_next_run():
    pages = (20 << 20) // 4096
    assert _refaults("default") > pages // 2  # glibc's defaults: given back, faulted in again
    assert _refaults("keep") < pages // 20
