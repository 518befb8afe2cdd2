"""Workload impact in one place for every page and command: the models the suite knows, under what each framework
runs (impact.py: ResNet-50 in PyTorch per layer; ort_impact.py: ResNet-50 and MobileNetV2 in onnxruntime, whole
model), one GPU's rows summed over GPUs, and the rows laid out as the pages' table.

The index, the changes page, the upgrade page and `convbench compare --json` all read these rows, so a number is
the same wherever it is shown.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..core.records import Record
from .impact import CHOICES, PASSES, TRAINING, impact
from .ort_impact import ort_impact

COLUMNS = ("forward", "backward", "training step", "whole model")


def workload(base: list[Record] | dict[str, Record], head: list[Record] | dict[str, Record],
             gpu: str = "") -> list[dict[str, Any]]:
    """Every impact row of one GPU's base and head records: ResNet-50's forward and backward passes where measured,
    its training step (or what it lacks), under both of PyTorch's kernel choices; onnxruntime's models."""
    rows: list[dict[str, Any]] = []
    for choice in CHOICES:
        rows += impact(base, head, gpu, choice, PASSES)
        rows += impact(base, head, gpu, choice, TRAINING, gaps=True)
    return rows + ort_impact(base, head, gpu)


def _id(r: dict[str, Any]) -> tuple:
    return (r["model"], r["framework"], r["choice"], r["pass"], r["dtype"], r["layout"])


def over_gpus(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """workload's rows of every GPU of a stack pair, one per model, choice, pass, dtype and layout: the median change
    over the GPUs with a number, their range (one GPU: its own 95 % interval), on how many the 95 % interval
    excludes no change in the median's direction, and on how many GPUs the row has no number (what is missing, when
    none has one)."""
    by: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(_id(r), []).append(r)
    out = []
    for rs in by.values():
        first = rs[0]
        gpu = first["gpu"].split(" GPU ")[0]
        num = [r for r in rs if r["change"] is not None]
        keep = {k: first[k] for k in ("model", "framework", "choice", "pass", "dtype", "layout", "basis", "subject",
                                      "tail")}
        if not num:
            gpus = f" on {len(rs)} GPUs" if len(rs) > 1 else ""
            out.append({**keep, "change": None, "low": None, "high": None, "confirmed": 0, "n": 0,
                        "missing": first["missing"], "line": f"{first['subject']}, {gpu}: no number{gpus}: "
                                                             f"{first['missing']}"})
            continue
        ch = sorted(r["change"] for r in num)
        mid = statistics.median(ch)
        sure = sum(1 for r in num if (r["low"] > 0 if mid > 0 else r["high"] < 0))
        least = min(num, key=lambda r: r["calls"])
        notes = [f"partial: not every layer timed on both stacks (least covered GPU: "
                 f"{', '.join(f'{d} {n} of {m}' for d, (n, m) in least['coverage'].items())} calls)"] \
            if least["calls"] < least["all_calls"] else []
        if len(num) < len(rs):
            notes.append(f"no number on {len(rs) - len(num)} more GPU(s): {next(r for r in rs if r['change'] is None)['missing']}")
        if len(num) == 1:  # one GPU: its own interval
            lo, hi = num[0]["low"], num[0]["high"]
            said = f"{mid * 100:+.1f} % ({lo * 100:+.1f} to {hi * 100:+.1f} %, 95 % interval, one GPU)"
        else:  # the spread between GPUs, and on how many each GPU's own interval excludes no change
            lo, hi = ch[0], ch[-1]
            said = (f"{mid * 100:+.1f} % (median of {len(num)} GPUs, {lo * 100:+.1f} to {hi * 100:+.1f} %); the 95 % "
                    f"interval excludes no change on {sure} of {len(num)}")
        line = f"{first['subject']}, {gpu}: {said}" + "".join(f"; {n}" for n in notes) + f"; {first['tail']}"
        out.append({**keep, "change": mid, "low": lo, "high": hi, "confirmed": sure, "n": len(num),
                    "missing": None, "line": line})
    out.sort(key=lambda r: (r["change"] is None, -abs(r["change"] or 0)))
    return out


def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows as the pages show them: one line per model, framework choice, dtype and layout, a cell per pass
    (the row itself, or None), the passes present as columns; the rows in words stay beside it."""
    lines: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["model"], r["framework"], r["choice"], r["dtype"], r["layout"])
        what = f"{r['model']} ({r['framework']}, {CHOICES[r['choice']][1] if r['choice'] in CHOICES else r['choice']})"
        lines.setdefault(key, {"what": what, "dtype": r["dtype"], "layout": r["layout"], "cells": {}})
        lines[key]["cells"][r["pass"]] = r
    columns = [c for c in COLUMNS if any(c in v["cells"] for v in lines.values())]
    order = sorted(lines, key=lambda k: (k[1] != "PyTorch", k))
    return {"columns": columns, "rows": rows,
            "lines": [{**lines[k], "cells": [lines[k]["cells"].get(c) for c in columns]} for k in order]}
