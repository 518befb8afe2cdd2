"""How each side of a comparison was timed: processes, placements and the sampling policy its run.json and records
say. A time finding between runs timed two ways compares the two ways as well as the two sides: a median pooled
over five placements in two processes is not one draw of one placement in one process (an H200's forward run as
one machine with the committed runs of other H200s: 0 failing findings against each of 40 timed on placements,
4-8 against each of 6 timed on one; docs/performance.md). compare names the difference beside its findings; it does not change a verdict."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from ..core.records import OK, Record

# The sampling policy's fields that decide what a median is (TimingPolicy): the others bound its cost only.
POLICY_FIELDS = ("min_samples", "max_samples", "budget_ms", "noise_target", "noise_floor_us", "floor_samples",
                 "warmup_ms", "cold")


def placements(records: Iterable[Record]) -> int:
    """The placements a run pooled for most of its timed combinations (1 where its records name none)."""
    counts = collections.Counter(len((r.extra or {}).get("placement_medians_ms") or ()) or 1
                                 for r in records if r.status == OK and r.time is not None)
    return counts.most_common(1)[0][0] if counts else 1


def method(run_json: dict[str, Any], records: Iterable[Record]) -> dict[str, Any]:
    """What decided how a run's medians were made: its processes, placements and sampling policy."""
    sweep = (run_json.get("options") or {}).get("sweep") or {}
    timing = sweep.get("timing") if isinstance(sweep.get("timing"), dict) else {}
    return {"processes": sweep.get("processes") or 1, "placements": placements(records),
            **{name: timing.get(name) for name in POLICY_FIELDS}}


def _shown(value: Any) -> str:
    return "not recorded" if value is None else str(value)


def method_note(base_run: dict[str, Any], head_run: dict[str, Any], base: Iterable[Record],
                head: Iterable[Record]) -> str | None:
    """One line for compare's notes where the two sides were timed differently; None where alike."""
    b, h = method(base_run, base), method(head_run, head)
    moved = [f"{name.replace('_', ' ')} {_shown(b[name])} -> {_shown(h[name])}" for name in b if b[name] != h[name]]
    if not moved:
        return None
    return ("timed differently: " + "; ".join(moved)
            + ": time findings compare the two ways of timing as well as the two sides")
