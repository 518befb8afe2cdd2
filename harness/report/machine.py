"""One page per machine: timing and accuracy heatmaps of its newest records, nightly series with change points
and stack changes, and every run's stack and fingerprint as a table with what changed since the run before."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import changepoint
from ..compare import fingerprint_diff
from ..pairing import stack_line
from .charts import heatmaps, line_chart, time_heatmaps
from .fmt import flatten
from .model import MAX_CHARTS, MAX_ROWS, MachineInfo, _combo_label


def machine_page(g: dict[str, Any], m: MachineInfo) -> dict[str, Any]:
    maps = []
    for img in m.images:
        recs = g["current"][(m.name, img)]
        from_runs = list(dict.fromkeys(x["run"]["run_id"] for x in recs))
        maps.append({"image": img, "run": g["latest"][(m.name, img)], "from_runs": from_runs,
                     "maps": heatmaps(recs)})
    charts = []
    overview_charts = []
    for s in g["series"]:
        if s.machine != m.name:
            continue
        nights = [r["started"][:16].replace("T", " ") for r in s.runs]
        if len(s.runs) >= 2:
            # the run-level index: geometric mean over combinations of time relative to the first night
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.log(s.median / s.median[0:1, :])
            rel[~np.isfinite(rel)] = np.nan
            have = np.isfinite(rel).any(axis=1)
            idx = np.full(len(s.runs), np.nan)
            if have.sum() >= 2:  # runs that each cover another part of a sweep share nothing to compare
                idx[have] = np.exp(np.nanmean(rel[have], axis=1))
            else:
                continue
            ch = changepoint.detect(idx)
            overview_charts.append({"image": s.image, "chart": line_chart(nights, idx, ch, unit="x first night"),
                                    "changes": ch, "n": len(s.runs)})
        ranked = sorted(s.changes.items(), key=lambda kv: -max(abs(math.log(c.ratio)) for c in kv[1]))
        for col, chs in ranked[:MAX_CHARTS]:
            c = _combo_label(g["combos"][int(s.combos[col])])
            charts.append({"image": s.image, "combo": c, "chart": line_chart(nights, s.median[:, col], chs),
                           "changes": [{"night": nights[x.index], "ratio": x.ratio, "before": x.before,
                                        "after": x.after} for x in chs]})
    runs = []
    shown = m.runs[-MAX_ROWS:]
    for i, r in enumerate(shown):
        info = g["info"][r["id"]]
        fp = info["fingerprint"]
        before = g["info"][shown[i - 1]["id"]]["fingerprint"] if i else None
        runs.append({"run": r, "stack": stack_line(fp), "fingerprint": flatten(fp), "options": flatten(info["options"]),
                     "end": flatten(info["end"]) if info["end"] else None,
                     "diff": None if before is None else [(k, "-" if a is None else str(a), "-" if b is None else str(b))
                                                          for k, a, b in fingerprint_diff(before, fp)]})
    times = []
    for img in m.images:
        times.append({"image": img, "maps": time_heatmaps(g["current"][(m.name, img)])})
    return {"m": m, "maps": maps, "times": times, "charts": charts, "overview_charts": overview_charts, "runs": runs,
            "runs_left_out": max(0, len(m.runs) - MAX_ROWS)}
