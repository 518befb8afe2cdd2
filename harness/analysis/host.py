"""How fast each run's host enqueued its calls: a night's wall time follows it, while the gate judges the device's
times, which leave it out. A host that dispatches twice as slowly (another CPU, a busier node, a slower driver
path) makes the job longer with no finding at all; this names it beside the findings."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from ..core.records import OK, Record

MOVED = 0.10  # a median ratio this far from 1 is called out in words


def _dispatch(records: Iterable[Record]) -> dict[tuple, float]:
    return {r.identity_key(): r.time.host_ms for r in records
            if r.status == OK and r.time is not None and r.time.timer == "cuda_event" and r.time.host_ms}


def dispatch_ratio(base: Iterable[Record], head: Iterable[Record]) -> tuple[float, int] | None:
    """The median over combinations of head / base host dispatch time, and how many combinations it is over;
    None where no combination has it on both sides (CPU backends, records older than the field)."""
    b, h = _dispatch(base), _dispatch(head)
    ratios = [h[k] / b[k] for k in b.keys() & h.keys()]
    return (statistics.median(ratios), len(ratios)) if ratios else None


def dispatch_note(base: Iterable[Record], head: Iterable[Record]) -> str | None:
    """One line for compare's notes: the ratio, and what it means when the host moved."""
    found = dispatch_ratio(base, head)
    if found is None:
        return None
    ratio, n = found
    line = f"host dispatch: head/base {ratio:.2f}x (median over {n:,} combinations timed on the device)"
    if abs(ratio - 1) > MOVED:
        line += (f"; the head's host enqueued calls {'more slowly' if ratio > 1 else 'faster'}: the job's wall time "
                 "moves with it, the device times judged here do not")
    return line
