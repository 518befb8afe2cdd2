"""Backends share one small interface: list the combinations of a case, then run them, yielding records.

The interface is here; which backends exist is registry.py (it imports them, they import this, nothing else).

A backend never raises out of ``run``: a combination it cannot run becomes a record with a status and a
reason, so that one unsupported or broken combination costs that combination and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ..core.cases import DTYPES, LAYOUTS, Case
from ..core.records import Ranking, Record
from ..measurement.timing import TimingPolicy


@dataclass(frozen=True)
class Combo:
    """One combination of a case, identified the same way as the record it turns into."""

    direction: str
    algo: str
    math: str
    dtype: str
    layout: str
    settings: tuple[tuple[str, object], ...] = ()

    def record(self, case: Case, backend: str, **kw) -> Record:
        return Record(case=case.id, backend=backend, direction=self.direction, algo=self.algo, math=self.math,
                      dtype=self.dtype, layout=self.layout, settings=dict(self.settings), **kw)

    def key(self, case: Case, backend: str) -> str:
        return self.record(case, backend).key()


def by_problem(combos: Iterable[Combo]) -> dict[tuple[str, str, str], list[Combo]]:
    """Combinations grouped by (direction, dtype, layout), in order: each group shares one set of operands."""
    out: dict[tuple[str, str, str], list[Combo]] = {}
    for c in combos:
        out.setdefault((c.direction, c.dtype, c.layout), []).append(c)
    return out


@dataclass
class SweepOptions:
    directions: tuple[str, ...] = ("fwd",)
    dtypes: tuple[str, ...] = DTYPES
    layouts: tuple[str, ...] = LAYOUTS
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    repeats: int = 2  # repeats on the same operands compared bitwise with the first output
    workspace_limit: int = 8 << 30  # bytes; an algorithm asking for more is recorded, not run
    rankings: bool = True  # also record cuDNN's own rankings: Get_v7's heuristic one, and Find's where ``find``
    find: bool = True  # Find's ranking times every algorithm again (default_find)
    device: str = "cuda"
    # Processes each combination is timed in (run/replicas.py; the commands ask for 2 on CUDA): a fresh process
    # can put a call at a level of its own. A driver sets 1 where it does not replicate.
    processes: int = 1
    timing_only: bool = False  # a replica's pass: one checked run (its output's hash) and the timing, nothing else


# Find's ranking costs a sweep every algorithm of every problem again under cuDNN's own timer: about 16 s of the
# two-process backward sweep on the H200 (rankings 36.5 s with Find, 20.5 s without; docs/performance.md), a sweep
# that must fit in 10 minutes. So a sweep with a backward direction records Get_v7's ranking only unless asked
# (--find); the forward sweep, whose rankings explain onnxruntime's EXHAUSTIVE search (cudnnFind), records both.
def default_find(directions: tuple[str, ...]) -> bool:
    """Whether a sweep of ``directions`` records Find's ranking by default: forward only."""
    return set(directions) == {"fwd"}


# What the commands (`sweep`, `bench`, `upgrade`, asv's own setup) time each combination in on CUDA, every
# direction (run/replicas.py runs the second process). Two processes fit the backward sweep in its 10 minutes
# with PyTorch's backward timed as its one op and the checked run taken as a placement's warm-up (the whole
# backward job 465 s through asv on the H200), and its A/A pairs in two processes fail on nothing where one
# process a side failed 0, 2, 0, 3 and 0 findings (docs/performance.md).
DEFAULT_PROCESSES = 2


def command_options(directions: tuple[str, ...], device: str, processes: int | None = None,
                    find: bool | None = None, **fields) -> SweepOptions:
    """A command's sweep options: the processes and Find's ranking asked for, else the defaults above; in one
    place, so that `sweep`, `bench`, `upgrade` and the asv suite's own sweep cannot drift apart."""
    return SweepOptions(directions=tuple(directions), device=device, processes=processes or DEFAULT_PROCESSES,
                        find=default_find(tuple(directions)) if find is None else find, **fields)


class Backend(Protocol):
    name: str

    def available(self) -> str | None:
        """None when this backend can run here; otherwise the reason it cannot, in one line."""

    def combos(self, case: Case, options: SweepOptions) -> list[Combo]:
        """Every combination this backend measures for the case (also those it will report as skipped)."""

    def run(self, case: Case, combos: Iterable[Combo], options: SweepOptions) -> Iterator[Record | Ranking]:
        """Measure ``combos`` of ``case``; one record per combo, in any order, plus any rankings."""
