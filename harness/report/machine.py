"""One page per machine: timing and accuracy heatmaps of its newest records, nightly series with change points
and stack changes, and every run's stack and fingerprint as a table with what changed since the run before."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..analysis import changepoint, pairing
from ..analysis.compare import fingerprint_diff
from ..analysis.pairing import stack_line
from .charts import heatmaps, line_chart, time_heatmaps
from .fingerprints import link as fingerprint_link
from .fmt import flatten, history_key
from .model import MAX_CHARTS, MAX_ROWS, MachineInfo, Model, Series, combo_label

# newest runs shown with their whole fingerprint (~7 KB each); every run keeps its stack, its diff to the run before
# and a link to both fingerprints side by side
MAX_FINGERPRINTS = 8
# timing heatmaps per page of their own (whole maps): a cell is ~0.2 KB, so a page stays near 200 KB
TIMING_CELLS = 900


def _paged(m: MachineInfo, kind: str, maps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Heatmaps on pages of their own, whole maps in order, TIMING_CELLS cells or fewer a page (a larger map
    alone on its page): machines/<slug>.<kind>-<k>.html."""
    pages: list[list[dict[str, Any]]] = []
    cells = 0
    for h in maps:
        if not pages or cells + len(h["cells"]) > TIMING_CELLS:
            pages.append([])
            cells = 0
        pages[-1].append(h)
        cells += len(h["cells"])
    files = [f"{m.slug}.{kind}-{k}.html" for k in range(1, len(pages) + 1)]
    return [{"m": m, "kind": kind, "maps": ms, "page": k, "files": files, "file": files[k - 1],
             "n_maps": len(maps)} for k, ms in enumerate(pages, 1)]


def map_pages(g: Model, m: MachineInfo) -> list[dict[str, Any]]:
    """The timing heatmaps of what the machine runs now (its newest image of each source), and the accuracy
    heatmaps of its older images, on pages of their own; the machine page keeps its newest images' accuracy."""
    newest = {g.latest[(m.name, img)]["source"]: img for img in m.images}
    timing = [{**h, "image": img} for img in newest.values() for h in time_heatmaps(g.current[(m.name, img)])]
    older = [{**h, "image": img} for img in m.images if img not in newest.values()
             for h in heatmaps(g.current[(m.name, img)])]
    return _paged(m, "timing", timing) + _paged(m, "accuracy", older)

def history(series: list[Series], info: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A machine's image series joined on one time axis: its runs by start, medians over the union of their
    combinations, and an event wherever the stack changes from one run to the next (an upgrade shows as a step
    at an event instead of a chart that restarts)."""
    runs = sorted((r for s in series for r in s.runs), key=lambda r: (r["started"], r["id"]))
    row = {id(r): i for i, r in enumerate(runs)}
    ids = np.unique(np.concatenate([s.combos for s in series]))
    col = {int(c): j for j, c in enumerate(ids)}
    median = np.full((len(runs), len(ids)), np.nan)
    for s in series:
        rows = [row[id(r)] for r in s.runs]
        cols = [col[int(c)] for c in s.combos]
        median[np.ix_(rows, cols)] = s.median
    events = []
    for i in range(1, len(runs)):
        before, after = (pairing.stack_fields(info[r["id"]]["fingerprint"]) for r in (runs[i - 1], runs[i]))
        change = pairing.fields_change(before, after)
        if change:
            events.append((i, change))
    return {"runs": runs, "median": median, "col": col, "events": events}


def chained_index(median: np.ndarray) -> np.ndarray:
    """Run-level time index: each run against the last earlier run it shares combinations with (geometric mean
    of the ratios), chained from 1 at the first run; runs that cover other parts of a sweep do not break it."""
    idx = np.full(len(median), np.nan)
    if not len(median):
        return idx
    with np.errstate(invalid="ignore", divide="ignore"):
        logm = np.log(median)
    have = np.isfinite(logm)
    first = next((i for i in range(len(median)) if have[i].any()), None)
    if first is None:
        return idx
    idx[first] = 1.0
    for i in range(first + 1, len(median)):
        for j in range(i - 1, first - 1, -1):
            shared = have[i] & have[j] & np.isfinite(idx[j])
            if shared.any():
                idx[i] = idx[j] * float(np.exp(np.mean(logm[i, shared] - logm[j, shared])))
                break
    return idx


MAX_PICK_RUNS = 120  # the newest runs of a machine in the combination picker's history
MAX_PICK_COMBOS = 600  # combinations offered by the picker


def flagged(g: Model, m: MachineInfo) -> set[str]:
    """The history keys (morning.history_key) of the combinations with a finding in the machine's latest night or
    its newest image transition: the picker offers them first, and a finding's link opens its history there."""
    out = {history_key(f) for mn, comps in g.nightly if mn.name == m.name for c in comps for f in c.findings}
    out |= {history_key(f) for t in g.transitions if t["machine"] == m.name for f in t["findings"]}
    return out


def picker_data(g: Model, h: dict[str, Any], found: set[str] = frozenset()) -> dict[str, Any] | None:
    """Any combination's history across nights and stacks on one axis (asv's graph page, offline): the page's
    script draws the combination the reader picks parameter by parameter from these values. Values are medians
    in ms to 4 significant figures; an empty value is a night that did not measure it."""
    runs = h["runs"][-MAX_PICK_RUNS:]
    if len(runs) < 2:
        return None
    first = len(h["runs"]) - len(runs)
    median = h["median"][first:]
    finite = np.isfinite(median)
    row = ",".join(["%.4g"] * len(runs))  # one formatting call a combination: 3 million values in a fleet
    labels = []
    for combo, j in h["col"].items():
        col = median[:, j]
        if finite[:, j].sum() < 2:
            continue
        c = combo_label(g.combos[combo])
        key = [c["case"], c["backend"], c["direction"], c["algo"], c["math"], c["dtype"], c["layout"],
               c["settings"] or "-"]
        text = row % tuple(col.tolist())
        if not finite[:, j].all():  # a night that did not measure it: empty ("%.4g" writes nan, inf, -inf)
            text = ",".join("" if v in ("nan", "inf", "-inf") else v for v in text.split(","))
        labels.append((key, text))
    labels.sort(key=lambda kv: ("|".join(kv[0]) not in found, kv[0]))  # combinations with findings first
    if not labels:
        return None
    return {"params": ["case", "backend", "direction", "algo", "math", "dtype", "layout", "settings"],
            "combos": [{"key": "|".join(k), "v": v} for k, v in labels[:MAX_PICK_COMBOS]],
            "left_out": max(0, len(labels) - MAX_PICK_COMBOS),
            "times": ",".join(r["started"][:16].replace("T", " ") for r in runs),
            "events": [{"i": i - first, "label": label} for i, label in h["events"] if i >= first]}


def machine_page(g: Model, m: MachineInfo, found: set[str] | None = None) -> dict[str, Any]:
    """The machine page's context; ``found``: the history keys its picker offers first (default: flagged(g, m),
    which reads the model's judgements)."""
    maps = []
    newest = {g.latest[(m.name, img)]["source"]: img for img in m.images}
    for img in newest.values():
        recs = g.current[(m.name, img)]
        from_runs = list(dict.fromkeys(x.run["run_id"] for x in recs))
        maps.append({"image": img, "run": g.latest[(m.name, img)], "from_runs": from_runs,
                     "maps": heatmaps(recs)})
    charts = []
    overview_charts = []
    pick = None
    for source in ("journal", "asv"):
        series = [x for x in g.series if x.machine == m.name and x.runs[0]["source"] == source]
        if not series:
            continue
        h = history(series, g.info)
        if source == "journal" or pick is None:
            pick = picker_data(g, h, flagged(g, m) if found is None else found)
        stamps = [r["started"] for r in h["runs"]]
        if len(h["runs"]) >= 2:
            idx = chained_index(h["median"])
            if np.isfinite(idx).sum() >= 2:
                ch = changepoint.detect(idx)
                overview_charts.append({"source": source, "n": len(h["runs"]), "changes": ch,
                                        "events": h["events"],
                                        "chart": line_chart(stamps, idx, ch, events=h["events"],
                                                            unit="x the first run")})
        ranked = sorted(((s_, col, chs) for s_ in series for col, chs in s_.changes.items()),
                        key=lambda t: -max(abs(math.log(c.ratio)) for c in t[2]))
        for s_, col, chs in ranked[:MAX_CHARTS]:
            combo = int(s_.combos[col])
            j = h["col"][combo]
            at = {id(r): i for i, r in enumerate(h["runs"])}
            moved = [changepoint.Change(at[id(s_.runs[c.index])], c.before, c.after, c.ratio, c.score) for c in chs]
            charts.append({"image": s_.image, "combo": combo_label(g.combos[combo]),
                           "chart": line_chart(stamps, h["median"][:, j], moved, events=h["events"]),
                           "changes": [{"night": s_.runs[c.index]["night"], "ratio": c.ratio, "before": c.before,
                                        "after": c.after} for c in chs]})
    runs = []
    shown = m.runs[-MAX_ROWS:]
    for i, r in enumerate(shown):
        info = g.info[r["id"]]
        fp = info["fingerprint"]
        before = g.info[shown[i - 1]["id"]]["fingerprint"] if i else None
        full = i >= len(shown) - MAX_FINGERPRINTS
        runs.append({"run": r, "stack": stack_line(fp), "fingerprint": flatten(fp) if full else None,
                     "options": flatten(info["options"]) if full else None,
                     "end": flatten(info["end"]) if info["end"] and full else None,
                     "fp_link": fingerprint_link(g, shown[i - 1]["id"], r["id"], "../") if i else None,
                     "diff": None if before is None else [(k, "-" if a is None else str(a), "-" if b is None else str(b))
                                                          for k, a, b in fingerprint_diff(before, fp)]})
    pages = map_pages(g, m)
    links = [{"file": t["file"], "kind": t["kind"], "images": sorted({h["image"] for h in t["maps"]}),
              "n": len(t["maps"]), "what": ", ".join(f"{h.get('backend', '')} {h['dtype']} {h['direction']}".strip()
                                                     for h in t["maps"])} for t in pages]
    return {"m": m, "maps": maps, "times": [x for x in links if x["kind"] == "timing"],
            "older": [x for x in links if x["kind"] == "accuracy"], "map_pages": pages, "charts": charts, "overview_charts": overview_charts, "runs": runs,
            "pick": pick,
            "runs_left_out": max(0, len(m.runs) - MAX_ROWS)}
