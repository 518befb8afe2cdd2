"""Across hardware: machines side by side on the same combinations (``compare.cross_machine``)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ..analysis.compare import cross_machine

MAX_SIDE = 4  # machines of one GPU model side by side (the newest nights first)
MAX_PAIRED_ROWS = 400  # combinations per section, the most different first


def interest(row: dict[str, Any]) -> tuple:
    """Rows that differ first: precision class, then output bits, then the largest time ratio."""
    ratios = [abs(math.log(c["time_ratio"])) for c in row["cells"] if c and c.get("time_ratio")]
    return (not row["class_differs"], row["bitwise_identical"] is not False, -max(ratios, default=0.0))


def same_model(g: dict[str, Any]) -> list[tuple[None, list[dict[str, Any]], str]]:
    """The same GPU model on different hosts: each machine's newest run, for every model two or more machines
    have, so that two H200 hosts are seen side by side and not only an H200 against a CPU."""
    by_model: dict[str, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    for m, _ in g["nightly"]:
        if m.source != "journal":
            continue
        run = m.latest.runs[-1]
        if run["gpu_model"]:
            by_model[run["gpu_model"]][(run["machine"], run["image"])] = run
    out = []
    for model, runs in sorted(by_model.items()):
        if len({r["machine"] for r in runs.values()}) >= 2:
            newest = sorted(runs.values(), key=lambda r: r["started"], reverse=True)[:MAX_SIDE]
            out.append((None, newest, f"{model} on {len(newest)} machines"))
    return out


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
    compared = [(img, reps, None) for img, reps in compared] + same_model(g)
    for img, reps, title in compared:
        reps = sorted(reps, key=lambda r: (r["hardware"] != "gpu", r["machine"]))
        records = {r["id"]: g["current"][(r["machine"], r["image"])] for r in reps}
        cm = cross_machine(reps, records)
        rows = cm["rows"]
        both = [x for x in rows if sum(c is not None for c in x["cells"]) >= 2]
        disjoint = None
        if not both:  # say why there is nothing side by side: usually different case sets
            sets = {r["machine"]: sorted({x["case_id"].split(".")[0] for x in records[r["id"]]}) for r in reps}
            disjoint = "; ".join(f"{m} ran case groups {', '.join(v)}" for m, v in sets.items())
        both.sort(key=interest)
        sections.append({"image": img, "title": title, "runs": reps, "labels": [g["minfo"][r["machine"]].label for r in reps],
                         "rows": both[:MAX_PAIRED_ROWS], "left_out": max(0, len(both) - MAX_PAIRED_ROWS),
                         "only_one": len(rows) - len(both), "disjoint": disjoint,
                         "n_identical": sum(1 for x in both if x["bitwise_identical"]),
                         "n_class_differs": sum(1 for x in both if x["class_differs"])})
    return {"sections": sections, "note": note}
