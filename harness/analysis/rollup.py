"""Findings summed up: time findings grouped by what a reader acts on (backend, algorithm, dtype, layout), PyTorch
settings variants that timed one call collapsed into one row, and a net line that reconciles the gate's counts
with the run-level geometric mean.

Hundreds of slower rows one by one hide their shape: four PyTorch flag settings that ran the same kernel (same
output bits, medians within noise) are one finding, and a group's median ratio says more than its longest row.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from ..core.records import OK, Record

# Two settings variants timed the same call when both sides' output bits are equal and their medians lie within
# this of each other's (the calibrated threshold of the shortest calls is 4 % and more: within it is noise).
VARIANT_MATCH = 0.02


def _call(f: Any) -> tuple:
    return (f.kind, f.verdict, f.case, f.backend, f.direction, f.algo, f.math, f.dtype, f.layout)


def _near(a: float | None, b: float | None) -> bool:
    return bool(a and b) and abs(a / b - 1) <= VARIANT_MATCH


def _bits_and_time(rec: Record | None) -> tuple[str | None, float | None]:
    return (rec.hash, rec.median_ms) if rec is not None else (None, None)


def collapse(findings: Iterable[Any], base: dict[str, Record],
             head: dict[str, Record]) -> list[tuple[Any, list[Any]]]:
    """(representative, variants) in the order given: time findings of one call under other settings whose two
    sides carry the same output bits and medians within VARIANT_MATCH of the representative's are its variants
    (the representative among them); every other finding stands alone."""
    out: list[tuple[Any, list[Any]]] = []
    open_: dict[tuple, list[tuple[Any, list[Any]]]] = {}
    for f in findings:
        if f.kind == "time":
            (hb, mb), (hh, mh) = _bits_and_time(base.get(f.key)), _bits_and_time(head.get(f.key))
            for rep, members in open_.get(_call(f), ()):
                (qhb, qmb), (qhh, qmh) = _bits_and_time(base.get(rep.key)), _bits_and_time(head.get(rep.key))
                if hb and hb == qhb and hh == qhh and _near(mb, qmb) and _near(mh, qmh):
                    members.append(f)
                    break
            else:
                row = (f, [f])
                open_.setdefault(_call(f), []).append(row)
                out.append(row)
            continue
        out.append((f, [f]))
    return out


def groups(findings: Iterable[Any]) -> list[dict[str, Any]]:
    """Slower and faster findings by (verdict, backend, algo, dtype, layout): count, median and extreme ratio
    (head/base), median delta in µs; the groups with most findings first."""
    by: dict[tuple, list[Any]] = {}
    for f in findings:
        if f.kind == "time" and f.verdict in ("regression", "improvement") and f.ratio:
            by.setdefault((f.words, f.backend, f.algo, f.dtype, f.layout), []).append(f)
    out = []
    for (words, backend, algo, dtype, layout), fs in by.items():
        ratios = [f.ratio for f in fs]
        deltas = [f.delta_us for f in fs if f.delta_us is not None]
        out.append({"words": words, "backend": backend, "algo": algo, "dtype": dtype, "layout": layout,
                    "n": len(fs), "median_ratio": statistics.median(ratios),
                    "max_ratio": max(ratios) if words == "slower" else min(ratios),
                    "median_delta_us": statistics.median(deltas) if deltas else None})
    out.sort(key=lambda g: (g["words"] != "slower", -g["n"], -abs(math.log(g["median_ratio"]))))
    return out


def net(findings: list[Any], base: dict[str, Record], head: dict[str, Record], n_failing: int) -> dict[str, Any]:
    """The comparison in one line: slower / faster / unchanged / undecided counts of the combinations timed on
    both sides, how many fail the gate, and the geometric mean of head/base over all of them."""
    timed = [k for k in base.keys() & head.keys() if base[k].status == OK and head[k].status == OK
             and base[k].median_ms and head[k].median_ms]
    verdict = {f.key: f.words for f in findings if f.kind == "time"}
    slower = sum(1 for k in timed if verdict.get(k) == "slower")
    faster = sum(1 for k in timed if verdict.get(k) == "faster")
    undecided = sum(1 for k in timed if verdict.get(k) == "ambiguous")
    logs = [math.log(head[k].median_ms / base[k].median_ms) for k in timed]
    geo = math.exp(sum(logs) / len(logs)) if logs else None
    return {"timed": len(timed), "slower": slower, "faster": faster, "undecided": undecided,
            "unchanged": len(timed) - slower - faster - undecided, "failing": n_failing, "geomean": geo}


def net_line(n: dict[str, Any]) -> str:
    """``net`` in words, as the pages and the CLI print it."""
    if not n["timed"]:
        return "no combination timed on both sides"
    geo = n["geomean"]
    return (f"{n['timed']} combinations timed on both sides: {n['slower']} slower, {n['faster']} faster, "
            f"{n['unchanged']} unchanged, {n['undecided']} undecided; {n['failing']} finding(s) fail the gate; "
            f"geometric mean of head/base over all {n['timed']}: {geo:.3f}x ({(geo - 1) * 100:+.1f} %)")
