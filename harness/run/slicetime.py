"""Where a slice's wall time goes, written beside the journal so that a slow run can be split without a profiler.

A slice (one backend, one case) spends its time measuring combinations (each record's ``extra.wall_ms``), in
cuDNN's own rankings (the Find searches run every algorithm again; the gap before a burst of ranking rows) and on
the rest: operands, float64 references and bounds, descriptors and sessions (every other gap); before it starts,
its message may wait for the worker to finish a step made ahead. One line per slice (a replica's timing pass
too) goes to ``<run>/slices.jsonl``; with the run's total, scripts/run_breakdown.py tells what asv and start-up
cost.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..core.records import RecordKind
from .journal import iter_journal, open_append

SLICES_FILE = "slices.jsonl"
REPLICA = "replica"  # the kind of a replica's timing pass (run/replicas.py): it journals no record


class SliceClock:
    def __init__(self, backend: str, case_id: str, kind: str = RecordKind.MEASUREMENT, waited_s: float = 0.0):
        """``kind``: the records the slice makes (a repro or autotune slice is not the sweep's measuring; a
        replica's timing pass is "replica"); ``waited_s``: how long the slice's message waited for the worker
        (finishing a step made ahead, run/poolchild.py)."""
        self.backend, self.case_id, self.kind, self.waited_s = backend, case_id, kind, waited_s
        self.start = self.last = time.perf_counter()
        self.measure_s = self.rankings_s = 0.0
        self.records = 0

    def tick(self, rec: Any) -> None:
        """Account the time since the previous record (or the slice's start) to what produced ``rec``."""
        now = time.perf_counter()
        gap, self.last = now - self.last, now
        self.records += 1
        if rec.kind == RecordKind.RANKING:
            self.rankings_s += gap
            return
        wall = ((getattr(rec, "extra", None) or {}).get("wall_ms") or 0.0) / 1e3
        self.measure_s += min(wall, gap)

    def line(self) -> dict[str, Any]:
        seconds = time.perf_counter() - self.start
        return {"backend": self.backend, "case": self.case_id, "kind": self.kind, "records": self.records,
                "seconds": round(seconds, 4),
                "measure_s": round(self.measure_s, 4), "rankings_s": round(self.rankings_s, 4),
                "waited_s": round(self.waited_s, 4),
                "other_s": round(max(0.0, seconds - self.measure_s - self.rankings_s), 4)}

    def write(self, run_dir: Path) -> None:
        """Append this slice's line (one write of one line: concurrent slices do not interleave)."""
        data = (json.dumps(self.line(), sort_keys=True) + "\n").encode()
        fd = open_append(Path(run_dir) / SLICES_FILE)  # never through a link planted in the run directory
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The slice lines of a run (none for runs made before this file existed); a torn last line is left out."""
    return list(iter_journal(Path(run_dir) / SLICES_FILE))
