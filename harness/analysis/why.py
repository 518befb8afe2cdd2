"""Why a combination's time changed, in words read off the two records alone.

A time finding says how much (timechange.py); this says what the evidence points at: the same output bits on
both sides mean the same kernel ran and the library made it slower or faster; other bits mean another engine or
algorithm was chosen; another precision class means another math path; a clock or power cap on one side is a
cause of its own; one side timed in one process leaves the gap between processes unknown. A record's own
explanation (core/explain.py) is about its accuracy or status and is never offered as the cause of a time change.
"""

from __future__ import annotations

from ..core.records import Record
from .timechange import process_levels


def _clock(rec: Record) -> list[str]:
    ck = (rec.time.clock if rec.time else None) or {}
    return list(ck.get("slowdowns") or ())


def _algo(rec: Record) -> str | None:
    a = rec.chosen_algo
    return str(a) if a not in (None, "") else None


def _hash_algo(rec: Record) -> str | None:
    return rec.determinism.hash_algo if rec.determinism else None


def time_cause(base: Record, head: Record, ratio: float | None = None) -> str:
    """The cause of a time change between ``base`` and ``head`` (as ``Store.records`` gives them), from their
    hashes, chosen algorithms, precision classes, clocks and processes; ``ratio`` head/base."""
    if ratio is None and base.median_ms and head.median_ms:
        ratio = head.median_ms / base.median_ms
    way = "slower" if (ratio or 1.0) >= 1.0 else "faster"
    parts: list[str] = []
    for side, rec in (("base", base), ("head", head)):
        caps = _clock(rec)
        if caps:
            parts.append(f"the GPU's clock was capped on the {side} side ({'+'.join(caps)}): the cap, not the "
                         "library, may explain it")
    cb, ch = base.precision_class, head.precision_class
    hb, hh = base.hash, head.hash
    same_algo = _hash_algo(base) == _hash_algo(head)
    ab, ah = _algo(base), _algo(head)
    if cb and ch and cb != ch:
        parts.append(f"precision class changed ({cb} -> {ch}): another math path")
    elif hb and hh and same_algo and hb == hh:
        parts.append(f"same kernel (output bits unchanged): the library made it {way}")
    elif hb and hh and same_algo:
        chosen = f" ({ab} -> {ah})" if ab and ah and ab != ah else f" ({ab})" if ab and ab == ah else ""
        parts.append(f"another engine/algorithm was chosen (output bits changed){chosen}")
    elif ab and ah and ab != ah:
        parts.append(f"another algorithm was chosen ({ab} -> {ah})")
    else:
        parts.append("output bits not recorded on both sides: which kernel ran is unknown")
    one = [side for side, rec in (("base", base), ("head", head)) if not process_levels(rec)]
    if one:
        parts.append(f"{' and '.join(one)} timed in one process: the spread between processes is unknown")
    return "; ".join(parts)
