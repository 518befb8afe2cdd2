"""Every image transition's findings from the gate's own comparison, and the nightly change points."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..analysis.compare import fingerprint_diff
from ..core.records import Record
from .changes import record_rows
from .charts import ratio_scatter, strip_plot
from .fingerprints import link as fingerprint_link
from .fmt import settings_str
from .model import Model, combo_label
from .morning import anchor
from .paging import Parts

STEPS_INLINE = 100  # nightly change points on the page, the largest first; all on pages of their own
# regressions listed of a machine's newest image transition, and of each earlier one (folded history: a fleet's page
# had 9,911 rows and took 0.52 s to load); every one of them is on the machine's own pages (machine_pages)
MAX_PER_PAIR = 25
MAX_PLOTS = 10  # sample strips on the page, about 6 KB each (15 and 30 record pairs took the fixtures' page to 315 KB)
MAX_PER_OLDER = 10
MAX_RECORD_PAIRS = 20  # rows of the page that carry both records, 1.5 KB each: 200 made the sample's page 0.83 MB (300 KB is the budget)


TOP_PER_MACHINE = 5  # regressions of a machine's newest image transition shown open; the rest are folded
PAGE_ROWS = 200  # rows a page of a machine's own regression pages (regressions/<slug>.html, -2.html ...)


def page_file(slug: str, number: int) -> str:
    """A machine's regressions page ``number`` (1 first), under regressions/."""
    return f"{slug}.html" if number == 1 else f"{slug}-{number}.html"


def machine_pages(g: Model, group: dict[str, Any]) -> list[dict[str, Any]]:
    """Every regression of one machine's image transitions (newest first), PAGE_ROWS a page, one line each: where
    the regressions page stops listing (its caps), these pages go on, so each count links to what lists it all.
    The first page draws each transition at a glance (charts.ratio_scatter: ~30 KB each, kept off the
    regressions page itself)."""
    its = (group["newest"], *group["older"])
    rows = [{"it": it, "f": f, "settings": settings_str(f.settings), "anchor": anchor(f)} for it in its for f in it["all"]]
    glance = [{"it": it, "scatter": ratio_scatter(_by_key(g.current[(it["t"]["machine"], it["t"]["base"]["image"])]),
                                                  _by_key(g.current[(it["t"]["machine"], it["t"]["head"]["image"])]),
                                                  it["t"]["findings"])} for it in its]
    files = group["pages"]
    return [{"group": group, "rows": rows[k * PAGE_ROWS:(k + 1) * PAGE_ROWS], "first_row": k * PAGE_ROWS + 1,
             "n_rows": len(rows), "page": k + 1, "files": files, "file": files[k], "glance": glance if k == 0 else []}
            for k in range(len(files))]


def _by_key(recs: list[Record]) -> dict[str, Record]:
    return {x.identity_key(): x for x in recs}


def _worst_first(f: Any) -> tuple:
    """A lost combination, worse accuracy or determinism first (compare's order), then the largest slowdowns."""
    return (f.kind == "time", -(f.ratio or 0.0))


def regressions(g: Model, parts: Parts | None = None) -> dict[str, Any]:
    """regressions.html: the image transitions grouped per machine, the machines whose newest transition
    regressed first (a fleet of 50 machines x 3 transitions was 71 108 px tall with every transition open); the
    change points are registered with ``parts`` (the build writes their pages)."""
    parts = parts or Parts("regressions-steps", "Between images", "regressions.html")
    per_machine: dict[str, list[dict[str, Any]]] = {}
    for i, t in enumerate(g.transitions, 1):
        regs = sorted((f for f in t["findings"] if f.verdict == "regression"), key=_worst_first)
        changes = Counter(f"{f.kind} {f.verdict}" for f in t["findings"] if f.verdict != "regression")
        per_machine.setdefault(t["machine"], []).append(
            {"t": t, "tid": f"reg{i}", "regs": regs, "rows": [], "n": len(regs),
             "left_out": 0, "other": sorted(changes.items()),
             "n_other": sum(changes.values())})
    groups = []
    for name, its in per_machine.items():
        its.reverse()  # the newest transition first
        newest = its[0]
        groups.append({"machine": name, "slug": newest["t"]["slug"], "label": newest["t"]["label"],
                       "newest": newest, "older": its[1:], "n_newest": newest["n"],
                       "night": newest["t"]["head"]["started"][:10], "n_regs": sum(it["n"] for it in its),
                       "older_regs": sum(it["n"] for it in its[1:])})
    # the machines whose newest transition regressed first, the most recent night first, then the most regressions
    groups.sort(key=lambda x: -x["n_newest"])
    groups.sort(key=lambda x: x["night"], reverse=True)
    groups.sort(key=lambda x: x["n_newest"] == 0)
    for gm in groups:
        gm["pages"] = [page_file(gm["slug"], k) for k in range(1, max(1, -(-gm["n_regs"] // PAGE_ROWS)) + 1)]
    plots = recorded = 0
    for gm in groups:  # in the order of the page: the open rows get the samples and both records first
        for it in (gm["newest"], *gm["older"]):
            t = it["t"]
            base_recs: dict[str, Record] | None = None
            head_recs: dict[str, Record] = {}
            cap = MAX_PER_PAIR if it is gm["newest"] else MAX_PER_OLDER
            it["left_out"] = max(0, it["n"] - cap)
            for f in it["regs"][:cap]:
                if base_recs is None:
                    base_recs = _by_key(g.current[(t["machine"], t["base"]["image"])])
                    head_recs = _by_key(g.current[(t["machine"], t["head"]["image"])])
                b, h = base_recs.get(f.key), head_recs.get(f.key)
                plot = None
                if f.kind == "time" and plots < MAX_PLOTS and b is not None and h is not None:
                    plot = strip_plot(b.samples, h.samples)
                    plots += 1
                detailed = recorded < MAX_RECORD_PAIRS
                recorded += detailed
                it["rows"].append({"f": f, "settings": settings_str(f.settings), "plot": plot, "anchor": anchor(f),
                                   "base_rec": record_rows(b) if detailed else None,
                                   "head_rec": record_rows(h) if detailed else None,
                                   "base_run": b and b.run, "head_run": h and h.run})
            it["fp_link"] = fingerprint_link(g, t["base"]["id"], t["head"]["id"])
            it["diff"] = [(k, "-" if a is None else str(a), "-" if b is None else str(b)) for k, a, b in
                          fingerprint_diff(g.info[t["base"]["id"]]["fingerprint"] or {},
                                           g.info[t["head"]["id"]]["fingerprint"] or {})]
            it["all"] = it.pop("regs")  # every regression, for the machine's own pages (machine_pages)
    steps = []
    for s in g.series:
        nights = [r["night"] for r in s.runs]
        for col, chs in s.changes.items():
            c = combo_label(g.combos[int(s.combos[col])])
            for ch in chs:
                steps.append({"machine": s.machine, "slug": g.minfo[s.machine].slug,
                              "label": g.minfo[s.machine].label, "image": s.image, "combo": c,
                              "night": nights[ch.index], "ratio": ch.ratio, "before": ch.before, "after": ch.after,
                              "score": ch.score, "n": len(s.runs)})
    steps.sort(key=lambda x: -abs(math.log(x["ratio"])))
    return {"groups": groups, "n_pairs": len(g.transitions), "n_regs": sum(x["n_regs"] for x in groups),
            "n_bad": sum(1 for x in groups if x["n_newest"]), "top": TOP_PER_MACHINE, "steps": parts.table("steps", steps, "steps", "change points across nights, the largest first",
                                 inline=STEPS_INLINE), "n_steps": len(steps), "thresholds": g.thresholds}
