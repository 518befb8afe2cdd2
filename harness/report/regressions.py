"""Every image transition's findings from the gate's own comparison, and the nightly change points."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..analysis.compare import fingerprint_diff
from ..analysis.thresholds import Thresholds
from .changes import record_rows
from .charts import strip_plot
from .fingerprints import link as fingerprint_link
from .fmt import settings_str
from .model import MAX_EVIDENCE_PLOTS, _combo_label
from .morning import anchor

MAX_STEPS = 500  # nightly change points listed, the largest first
MAX_PER_PAIR = 100  # regressions listed per image transition; the rest are counted
MAX_RECORD_PAIRS = 200  # rows of the page that carry both records (the page stays small on a fleet)


def regressions(g: dict[str, Any]) -> dict[str, Any]:
    items = []
    plots = recorded = 0
    for t in g["transitions"]:
        regs = [f for f in t["findings"] if f.verdict == "regression"]
        changes = Counter(f"{f.kind} {f.verdict}" for f in t["findings"] if f.verdict != "regression")
        rows = []
        base_recs: dict[str, dict[str, Any]] | None = None
        head_recs: dict[str, dict[str, Any]] = {}
        for f in regs[:MAX_PER_PAIR]:
            plot = None
            if f.kind == "time" and plots < MAX_EVIDENCE_PLOTS:
                if base_recs is None:
                    base_recs = {x["key"]: x for x in g["current"][(t["machine"], t["base"]["image"])]}
                    head_recs = {x["key"]: x for x in g["current"][(t["machine"], t["head"]["image"])]}
                b, h = base_recs.get(f.key), head_recs.get(f.key)
                if b is not None and h is not None:
                    plot = strip_plot(b["samples"], h["samples"])
                    plots += 1
            if base_recs is None:
                base_recs = {x["key"]: x for x in g["current"][(t["machine"], t["base"]["image"])]}
                head_recs = {x["key"]: x for x in g["current"][(t["machine"], t["head"]["image"])]}
            b, h = base_recs.get(f.key), head_recs.get(f.key)
            detailed = recorded < MAX_RECORD_PAIRS
            recorded += detailed
            rows.append({"f": f, "settings": settings_str(f.settings), "plot": plot, "anchor": anchor(f),
                         "base_rec": record_rows(b) if detailed else None,
                         "head_rec": record_rows(h) if detailed else None,
                         "base_run": (b or {}).get("run"), "head_run": (h or {}).get("run")})
        items.append({"t": t, "rows": rows, "left_out": max(0, len(regs) - MAX_PER_PAIR), "other": sorted(
            changes.items()), "fp_link": fingerprint_link(g, t["base"]["id"], t["head"]["id"]),
            "diff": [(k, "-" if a is None else str(a), "-" if b is None else str(b)) for k, a, b in fingerprint_diff(
                g["info"][t["base"]["id"]]["fingerprint"] or {}, g["info"][t["head"]["id"]]["fingerprint"] or {})]})
    steps = []
    for s in g["series"]:
        nights = [r["night"] for r in s.runs]
        for col, chs in s.changes.items():
            c = _combo_label(g["combos"][int(s.combos[col])])
            for ch in chs:
                steps.append({"machine": s.machine, "slug": g["minfo"][s.machine].slug,
                              "label": g["minfo"][s.machine].label, "image": s.image, "combo": c,
                              "night": nights[ch.index], "ratio": ch.ratio, "before": ch.before, "after": ch.after,
                              "score": ch.score, "n": len(s.runs)})
    steps.sort(key=lambda x: -abs(math.log(x["ratio"])))
    return {"pairs": items, "steps": steps[:MAX_STEPS], "steps_left_out": max(0, len(steps) - MAX_STEPS),
            "n_steps": len(steps), "thresholds": Thresholds()}
