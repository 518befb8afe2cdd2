"""Across hardware: machines side by side on the same combinations (``compare.cross_machine``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..compare import cross_machine
from .model import MAX_ROWS


def architecture(g: dict[str, Any]) -> dict[str, Any]:
    """Cross-machine sections: per image, one representative machine per hardware label (its newest run)."""
    sections = []
    by_image: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (machine, img), r in g["latest"].items():
        label = g["minfo"][machine].label
        cur = by_image[img].get(label)
        if cur is None or r["started"] > cur["started"]:
            by_image[img][label] = r
    compared = [(img, list(reps.values())) for img, reps in by_image.items() if len(reps) >= 2]
    note = None
    if not compared and len(g["machines"]) >= 2:
        # no image ran on two kinds of hardware: compare each machine's newest run and say so
        newest = {}
        for m in g["machines"]:
            newest.setdefault(m.label, m.runs[-1])
        compared = [(None, list(newest.values()))]
        note = ("No image ran on two kinds of hardware, so these columns compare each machine's newest run: "
                "the differences mix hardware with software (" + ", ".join(
                    f"{r['machine']}: image {r['image']}" for r in newest.values()) + ").")
    for img, reps in compared:
        reps = sorted(reps, key=lambda r: (r["hardware"] != "gpu", r["machine"]))
        records = {r["id"]: g["current"][(r["machine"], r["image"])] for r in reps}
        cm = cross_machine(reps, records)
        rows = cm["rows"]
        both = [x for x in rows if sum(c is not None for c in x["cells"]) >= 2]
        disjoint = None
        if not both:  # say why there is nothing side by side: usually different case sets
            sets = {r["machine"]: sorted({x["case_id"].split(".")[0] for x in records[r["id"]]}) for r in reps}
            disjoint = "; ".join(f"{m} ran case groups {', '.join(v)}" for m, v in sets.items())
        sections.append({"image": img, "runs": reps, "labels": [g["minfo"][r["machine"]].label for r in reps],
                         "rows": both[:MAX_ROWS], "left_out": max(0, len(both) - MAX_ROWS),
                         "only_one": len(rows) - len(both), "disjoint": disjoint,
                         "n_identical": sum(1 for x in both if x["bitwise_identical"]),
                         "n_class_differs": sum(1 for x in both if x["class_differs"])})
    return {"sections": sections, "note": note}
