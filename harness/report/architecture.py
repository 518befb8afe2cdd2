"""Across hardware: machines side by side on the same combinations (``compare.cross_machine``)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ..analysis.compare import cross_machine, machine_neutral_key
from ..core.records import OK, RecordKind
from ..measurement import fingerprint
from .fmt import fmt_time, settings_str
from .model import Model
from .paging import Parts

MAX_SIDE = 4  # machines of one GPU model side by side (the newest nights first)
PAIRED_INLINE = 25  # combinations per section on the page, the most different first; all on pages of their own
MAX_PICK_MACHINES = 40  # columns of the machine picker (the machines with the newest runs)
MAX_PICK_ROWS = 100  # combinations of the machine picker: those the most machines measured first


def interest(row: dict[str, Any]) -> tuple:
    """Rows that differ first: precision class, then output bits, then the largest time ratio."""
    ratios = [abs(math.log(c["time_ratio"])) for c in row["cells"] if c and c.get("time_ratio")]
    return (not row["class_differs"], row["bitwise_identical"] is not False, -max(ratios, default=0.0))


def same_model(g: Model) -> list[tuple[None, list[dict[str, Any]], str]]:
    """The same GPU model on different hosts: each machine's newest run, for every model two or more machines
    have, so that two H200 hosts are seen side by side and not only an H200 against a CPU."""
    by_model: dict[str, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    for m, _ in g.nightly:
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


def architecture(g: Model, parts: Parts | None = None) -> dict[str, Any]:
    """Cross-machine sections: per image, one representative machine per hardware label (its newest run); each
    section's combinations are registered with ``parts`` (the build writes their pages)."""
    parts = parts or Parts("architecture", "Across hardware")
    sections = []
    by_image: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (machine, img), r in g.latest.items():
        label = g.minfo[machine].label
        cur = by_image[img].get(label)
        if cur is None or r["started"] > cur["started"]:
            by_image[img][label] = r
    compared = [(img, list(reps.values())) for img, reps in by_image.items() if len(reps) >= 2]
    note = None
    if not compared and len(g.machines) >= 2:
        # no image ran on two kinds of hardware: compare each machine's newest run and say so
        newest = {}
        for m in g.machines:
            newest.setdefault(m.label, m.runs[-1])
        compared = [(None, list(newest.values()))]
        note = ("No image ran on two kinds of hardware, so these columns compare each machine's newest run: "
                "the differences mix hardware with software (" + ", ".join(
                    f"{r['machine']}: image {r['image']}" for r in newest.values()) + ").")
    compared = [(img, reps, None) for img, reps in compared] + same_model(g)
    for img, reps, title in compared:
        reps = sorted(reps, key=lambda r: (r["hardware"] != "gpu", r["machine"]))
        records = {r["id"]: g.current[(r["machine"], r["image"])] for r in reps}
        cm = cross_machine(reps, records)
        rows = cm["rows"]
        both = [x for x in rows if sum(c is not None for c in x["cells"]) >= 2]
        disjoint = None
        if not both:  # say why there is nothing side by side: usually different case sets
            sets = {r["machine"]: sorted({x.case.split(".")[0] for x in records[r["id"]]}) for r in reps}
            disjoint = "; ".join(f"{m} ran case groups {', '.join(v)}" for m, v in sets.items())
        both.sort(key=interest)
        sections.append({"image": img, "title": title, "runs": reps, "labels": [g.minfo[r["machine"]].label for r in reps],
                         "t": parts.table(f"arch{len(sections) + 1}", both, "side_by_side",
                                          "combinations measured on at least two of "
                                          + ", ".join(r["machine"] for r in reps) + ", the most different first",
                                          inline=PAIRED_INLINE, runs=reps),
                         "only_one": len(rows) - len(both), "disjoint": disjoint,
                         "n_identical": sum(1 for x in both if x["bitwise_identical"]),
                         "n_class_differs": sum(1 for x in both if x["class_differs"])})
    return {"sections": sections, "note": note, "pick": picker(g)}


def _default_pair(ms: list, per: list[dict[str, Any]]) -> list[int]:
    """The machines ticked without a choice: one GPU model on two hosts (else on one), the two that measured the
    most combinations in common (one machine may have run only a backward study); else the first two GPUs."""
    models: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(ms):
        if m.hardware == "gpu":
            models[m.label].append(i)
    host = [fingerprint.node_name(m.latest_fp) if isinstance(m.latest_fp, dict) else None for m in ms]
    same = [(i, j) for v in models.values() for a, i in enumerate(v) for j in v[a + 1:]]
    pair = max(same, key=lambda ij: (host[ij[0]] != host[ij[1]], len(per[ij[0]].keys() & per[ij[1]].keys())),
               default=None)
    return list(pair) if pair else ([i for i, m in enumerate(ms) if m.hardware == "gpu"][:2]
                                    or list(range(min(2, len(ms)))))


def picker(g: Model) -> dict[str, Any]:
    """Any machines side by side: every machine's newest records (its newest run's image) as one column each, the
    reader ticks the machines to compare (two hosts of one GPU model, a P40 against an H200...). Ratios are to the
    first ticked machine, computed in the page. Without a tick, two machines of one GPU model are shown (on two
    hosts where there are, with the most combinations in common), else the first two GPU machines."""
    ms = sorted(g.machines, key=lambda m: m.runs[-1]["started"], reverse=True)[:MAX_PICK_MACHINES]
    ms.sort(key=lambda m: (m.hardware != "gpu", m.label, m.name))
    per = []
    for m in ms:
        run = m.runs[-1]
        recs = g.current.get((m.name, run["image"]), [])
        per.append({machine_neutral_key(x): x for x in recs if x.kind == RecordKind.MEASUREMENT})
    seen: dict[str, int] = defaultdict(int)
    for p in per:
        for k in p:
            seen[k] += 1
    default = _default_pair(ms, per)
    # the default pair's common combinations first, so that the first view has ratios to read, then those the
    # most machines measured (a picked pair sharing none of them is told so by the page)
    shared = per[default[0]].keys() & per[default[1]].keys() if len(default) == 2 else set()
    keys = sorted(seen, key=lambda k: (k not in shared, -seen[k], k))[:MAX_PICK_ROWS]
    rows = []
    for k in keys:
        rec = next(p[k] for p in per if k in p)
        cells = []
        for p in per:
            x = p.get(k)
            if x is None:
                cells.append(None)
            elif x.status == OK and x.median_ms is not None:
                cells.append({"v": f"{x.median_ms:.4g}", "text": fmt_time(x.median_ms),
                              "title": f"{x.precision_class or '-'}, bits {str(x.hash or '-')[:8]}"})
            else:  # cuDNN's own "not supported" in two words, its reason only where it says more (a page of
                # 6 machines was 261 KB of "cudnnGet...WorkspaceSize returned CUDNN_STATUS_NOT_SUPPORTED")
                status, reason = x.status, x.reason
                unsupported = status.endswith("NOT_SUPPORTED")
                cells.append({"v": None, "text": "not supported" if unsupported else status,
                              "title": None if not reason or (unsupported and reason.endswith(status)) else reason})
        rows.append({"combo": " ".join((rec.case, rec.backend, rec.direction, rec.algo, rec.math, rec.dtype,
                                        rec.layout, settings_str(rec.listed_settings))).strip(),
                     "cells": cells, "n": seen[k]})
    cols = [{"name": m.name, "label": m.label, "slug": m.slug, "run": m.runs[-1], "checked": i in default}
            for i, m in enumerate(ms)]
    return {"cols": cols, "rows": rows, "left_out": max(0, len(seen) - len(keys)),
            "machines_left_out": max(0, len(g.machines) - len(ms))}
